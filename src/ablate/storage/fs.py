"""Files and folders a sweep can trust: opens that follow no link, folders made with the permissions ablate decides,
the machine's private cache.

Permissions and links: directories are made owner-only, or group-readable when asked (`dir_mode`, `make_dirs`),
files never more open than their folder (`file_mode`), other libraries' files held to the same by the umask while a
sweep runs (`sweep_umask`); every open goes through `open_fd` (O_NOFOLLOW) and `check_no_links` refuses a link
below a sweep or run directory. Who may change a sweep: ablate.storage.ownership; locks: ablate.storage.locks; the
whole-file writes and JSON records on top of these: ablate.storage.store; the threat model these answer:
docs/security.md.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ablate.errors import ErrorKind, UserError
from ablate.storage import ownership


def file_mode(folder: Path | str) -> int:
    """The permissions of a file ablate makes in `folder`: its read bits and the owner's write, no more (0600 in
    an owner-only sweep, 0640 in a group-readable one, 0644 in a usual 0755 folder): a file is never more open
    than the folder it is in."""
    return os.stat(folder).st_mode & 0o644 | 0o600


DIR_MODE = 0o700
"""A sweep or run directory: only its owner reads, writes or enters it."""
GROUP_READ_DIR_MODE = 0o750
"""`--group-read`: the group may read and enter it, never write it."""


def dir_mode(group_read: bool = False) -> int:
    """The permissions of a sweep or run directory ablate makes: 0700, or 0750 when group read is asked for."""
    return GROUP_READ_DIR_MODE if group_read else DIR_MODE


class LinkRefused(UserError, OSError):
    """A symbolic link where ablate opens or walks a file of a sweep. An OSError too, so that readers which take an
    unreadable file as absent (run.json, stop.json) do so; writers let it through as the one-line refusal."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=ErrorKind.FILE)


def link_refused(path: Path | str) -> LinkRefused:
    """The refusal of a link found at `path`."""
    return LinkRefused(
        f"{path} is a symbolic link; ablate follows no link inside a sweep or run directory (it "
        "could write, or copy, a file elsewhere): remove the link"
    )


def open_fd(path: Path | str, flags: int, mode: int | None = None) -> int:
    """`os.open` that never follows a symbolic link at `path` itself (O_NOFOLLOW, race-free): a link there raises
    LinkRefused. Every file of a sweep this module opens goes through here (a temp file is made with O_EXCL,
    which follows no link either). New files get `file_mode` of their folder (`mode` to override)."""
    if mode is None and flags & os.O_CREAT:
        mode = file_mode(os.path.dirname(os.path.abspath(path)))
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600 if mode is None else mode)
    except OSError as e:
        if e.errno == errno.ELOOP and os.path.islink(path):
            raise link_refused(path) from None
        raise


_OPEN_FLAGS = {
    "r": os.O_RDONLY,
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
}


def safe_open(path: Path | str, mode: str = "rb", encoding: str | None = None, errors: str | None = None) -> Any:
    """`open(path, mode)` for mode r / w / a (text or binary) through `open_fd`: a link at `path` is refused."""
    fd = open_fd(path, _OPEN_FLAGS[mode.replace("b", "").replace("t", "")])
    try:
        if "b" in mode:
            return os.fdopen(fd, mode)
        return os.fdopen(fd, mode, encoding=encoding or "utf-8", errors=errors)
    except BaseException:
        os.close(fd)
        raise


def check_no_links(path: Path | str, top: Path | str) -> Path:
    """Refuse (LinkRefused) when a component of `path` below `top` (top itself excluded) is a symbolic link, so
    that every file of a sweep or run directory resolves inside it: a linked `runs/<id>`, `ckpt/` or `logs/`
    would put a run's files elsewhere. Components that do not exist yet are fine (ablate makes them). Returns
    `path`. Not race-free on its own: it relies on the directory being writable by its owner only (see
    `check_owned_dir`); the final component is opened with O_NOFOLLOW anyway."""
    path, top = Path(path), Path(top)
    p = top
    for part in path.relative_to(top).parts:
        if part in ("..", "."):
            raise ValueError(f"{path}: not a plain path below {top}")
        p = p / part
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            raise link_refused(p)
    return path


def make_dirs(path: Path | str, mode: int | None = None) -> Path:
    """`mkdir -p path` with permissions ablate decides, whatever the umask: `path` gets `mode` when given; every
    other directory made (and `path` without `mode`) gets the permissions of the directory it is made in, less
    write for group and others (so what ablate makes in a 0700 sweep is 0700, in a 0750 one 0750). A setgid bit
    the new directory inherits is kept. Existing directories are left as they are. Returns `path`."""
    path = Path(path)
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        want = mode if mode is not None and d == path else os.stat(d.parent).st_mode & 0o755
        try:
            os.mkdir(d, 0o700)  # never more open than 0700 between mkdir and chmod
        except FileExistsError:
            continue  # made meanwhile by another process: its maker set its permissions
        os.chmod(d, want | (os.stat(d).st_mode & stat.S_ISGID))
    if not os.path.isdir(path):
        raise FileExistsError(errno.EEXIST, "exists and is not a directory", str(path))
    return path


def open_to_group(top: Path | str, *, below: bool = True) -> None:
    """`--group-read` on a directory made owner-only before: let the group read and enter it and (`below`) every
    directory below it (g+rx), and read the files in them (g+r); never write (links are not followed). A no-op
    when `top` already is."""
    if os.stat(top).st_mode & 0o050 == 0o050:
        return
    if not below:
        os.chmod(top, (os.stat(top).st_mode & 0o7777 & ~0o022) | 0o050)  # noqa: S103 (--group-read: g+rx asked for)
        return
    for dirpath, _, files in os.walk(top):  # os.walk does not follow links
        os.chmod(dirpath, (os.lstat(dirpath).st_mode & 0o7777 & ~0o022) | 0o050)  # noqa: S103 (as above)
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode):
                os.chmod(os.path.join(dirpath, name), (st.st_mode & 0o7777 & ~0o022) | 0o040)


def group_readable(path: Path | str) -> bool:
    """Whether the group may read and enter directory `path` (a sweep launched with --group-read); False when
    it is gone."""
    try:
        return os.stat(path).st_mode & 0o050 == 0o050
    except OSError:
        return False


@contextlib.contextmanager
def sweep_umask(group_read: bool) -> Iterator[None]:
    """While a sweep is launched, run or trained into: what the code ablate drives makes there on its own
    (submitit's job folders and pickles, Hugging Face's checkpoint folders, TensorBoard's files, a data-parallel
    run's rank files) is never writable by group or others, and readable by the group only with group read
    (umask 077, or 027). `make_dirs` sets ablate's own folders explicitly; this covers the rest. The umask is
    the process's: it is restored on the way out."""
    old = os.umask(0o027 if group_read else 0o077)
    try:
        yield
    finally:
        os.umask(old)


def private_cache(name: str) -> Path:
    """`cache_dir()/name`, made owner-only if missing; a UserError when it (or the cache) is not private to this
    user: warm-up checkpoints and composed configs are loaded from it, so no one else may write there."""
    make_dirs(cache_dir(), DIR_MODE)
    folder = make_dirs(cache_dir() / name, DIR_MODE)
    why = ownership.private_problem(folder)
    if why:
        raise UserError(
            f"the cache {folder} is not private ({why}), and ablate loads weights from it: fix it "
            "(`chmod go-w`, or remove it) or set ABLATE_CACHE to a folder of your own",
            kind=ErrorKind.FILE,
        )
    return folder


def cache_dir() -> Path:
    """Machine-wide cache (warmed-up checkpoints, composed recipes): $ABLATE_CACHE or ~/.cache/ablate."""
    return Path(os.environ.get("ABLATE_CACHE") or Path.home() / ".cache" / "ablate")


def cpu_count() -> int:
    """Cores this process may use (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
