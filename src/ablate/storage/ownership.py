"""Who may change a sweep: the checks that refuse a directory or file someone other than this user could write,
before ablate launches into it or loads code or cached results from it. The threat model is in docs/security.md.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ablate.errors import ErrorKind, UserError


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name}"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _writers(mode: int) -> str:
    return {0o020: "its group", 0o002: "all users", 0o022: "its group and all users"}[mode & 0o022]


def _private_group(gid: int) -> bool:
    """Whether group `gid` is this user's own: the user's primary group, named after the user, with no other
    members (a "user private group", as Debian, Ubuntu and Red Hat make every account, where umask 002 and so
    group-writable folders are the norm): its write bit lets no one else in."""
    try:
        import grp
        import pwd

        me, group = pwd.getpwuid(os.getuid()), grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == me.pw_gid and group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name}


def _others_write(st: os.stat_result, bits: int = 0o022) -> int:
    """The write bits among `bits` of a file or folder that let someone other than this user write it (the
    group's bit does not when the group is the user's private group)."""
    w = st.st_mode & bits
    if w & 0o020 and _private_group(st.st_gid):
        w &= ~0o020
    return w


def _foreign(path: Path | str, st: os.stat_result) -> str | None:
    """Why someone other than this user can change what is in `path`, or None."""
    if st.st_uid != os.getuid():
        return f"{path} belongs to {_owner(st.st_uid)}, not to you"
    if _others_write(st):
        return f"{path} can be written by {_writers(_others_write(st))} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_owned_dir(path: Path | str, *, chain: bool = True, choose: str = "--root / --run-dir") -> None:
    """Refuse (UserError), before anything is written, to launch into directory `path` when someone else could
    change what is in it, and so plant a file ablate later loads (a job's pickle, a runner's queue) or link one
    of its files elsewhere: `path` (when it exists) must belong to this user and not be writable by group (unless
    the group is the user's private one) or others. With `chain`, the folder it is in (or will be made in) must
    not let others replace it: not writable by group or others unless sticky (as /tmp is), and no folder above it
    writable by all users unless sticky. `choose` names how the user picks another directory."""
    path = Path(path)
    where = path
    while not os.path.lexists(where) and where != where.parent:
        where = where.parent
    if where == path:
        st = os.stat(path)  # a sweep directory may be a link its owner made (to scratch space): judge its target
        if not stat.S_ISDIR(st.st_mode):
            raise UserError(f"{path} is not a directory; give a directory for the sweep or run", kind=ErrorKind.FILE)
        why = _foreign(path, st)
        if why:
            fix = f"run `chmod go-w {path}`" if st.st_uid == os.getuid() else "use a directory of your own"
            raise UserError(f"{why}, so others could plant files ablate loads: {fix} ({choose})", kind=ErrorKind.FILE)
        where = path.parent
    if not chain:
        return
    for i, p in enumerate((where, *where.parents)):
        st = os.stat(p)
        open_bits = _others_write(st, 0o022 if i == 0 else 0o002)
        if open_bits and not st.st_mode & stat.S_ISVTX:
            raise UserError(
                f"{p} can be written by {_writers(open_bits)} and has no sticky bit, so "
                f"others could replace {path}: run `chmod go-w {p}` (or `chmod +t {p}`), or use a "
                f"directory of your own ({choose})",
                kind=ErrorKind.FILE,
            )


def private_problem(path: Path | str) -> str | None:
    """Why `path`, a file ablate would load code or cached results from, is not private to this user, or None:
    it must not be a symbolic link, and it and its folder must belong to this user and not be writable by group
    or others. Used for the local runner's queue (it names the job function) and the caches in `cache_dir`."""
    path = Path(path)
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return f"{path} is a symbolic link"
        return _foreign(path.parent, os.stat(path.parent)) or _foreign(path, st)
    except OSError as e:
        return f"{path}: {e.strerror or e}"


def private_ok(path: Path | str) -> bool:
    """Whether `path` is private to this user (see `private_problem`)."""
    return private_problem(path) is None
