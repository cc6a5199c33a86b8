"""A project of the user's own: `ablate init DIR` copies the packaged recipes and an example SLURM profile into DIR.

The copy is the user's to edit: recipe paths resolve in the user's folder first
(ablate.compose.resources.find_recipe), and the profile is chosen by path (`--profile ./slurm/example.yaml`), never by
name (docs/security.md). The git commit a project's recipes are at is what `ablate sweep` records with each launch
(docs/run-directory.md, "ledger.jsonl"), read from the checkout's `.git` files as data: git never runs, so no filter,
hook or pager a checkout names does.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
from pathlib import Path

from ablate.compose.resources import PROFILES_DIR, RECIPES_DIR
from ablate.errors import ErrorKind, UserError
from ablate.storage import fs

EXAMPLE_PROFILE = "example-cluster"
"""The packaged profile copied as slurm/example.yaml: a commented profile for a real GPU cluster."""


def _planned(folder: Path) -> list[tuple[Path, Path]]:
    """(packaged source, destination) of every file init writes, in a stable order."""
    recipes = sorted(p for p in RECIPES_DIR.rglob("*") if p.is_file() and p.suffix in (".yaml", ".md"))
    pairs = [(p, folder / "recipes" / p.relative_to(RECIPES_DIR)) for p in recipes]
    pairs.append((PROFILES_DIR / f"{EXAMPLE_PROFILE}.yaml", folder / "slurm" / "example.yaml"))
    return pairs


def _obstacle(folder: Path, pairs: list[tuple[Path, Path]]) -> str | None:
    """Why init cannot write every file, or None: a destination that exists (a dangling link included), or a folder
    on the way that is a link or not a folder (init would write through it, or stop half-way)."""
    if os.path.lexists(folder) and not folder.is_dir():
        return f"{folder}: not a folder; give a folder (ablate init DIR)"
    folders = {dst.parent.relative_to(folder) for _, dst in pairs}
    for part in sorted({p for f in folders for p in (f, *f.parents)} - {Path(".")}):
        path = folder / part
        if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
            return f"{path}: a link or a file where ablate init makes a folder: move it away, or give another folder"
    taken = next((dst for _, dst in pairs if os.path.lexists(dst)), None)
    if taken is not None:
        return f"{taken}: already exists; ablate init writes only new files: move it away, or give another folder"
    return None


def init_project(folder: Path | str) -> list[Path]:
    """Write an editable copy of the recipes (FOLDER/recipes/...) and an example profile (FOLDER/slurm/example.yaml);
    returns the files written. Refuses, writing nothing, when any of them exists already (a dangling link too) or a
    folder on the way is a link or a file; each file is created new and never through a link (O_EXCL, O_NOFOLLOW)."""
    folder = Path(folder)
    pairs = _planned(folder)
    why = _obstacle(folder, pairs)
    if why is not None:
        raise UserError(why, kind=ErrorKind.FILE)
    for src, dst in pairs:
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd = fs.open_fd(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(src.read_bytes())
    return [dst for _, dst in pairs]


def git_commit(where: Path) -> str | None:
    """The commit checked out where `where` (a file or a folder) is, with `+ uncommitted changes` when a tracked file
    of the checkout differs from the index or the file `where` names is not in it; None outside a git checkout, or
    when its git files are not as git writes them. Read from the `.git` files as data (below): git never
    runs, so nothing the checkout configures (filters, hooks, fsmonitor, pagers) runs either. Changes staged with
    `git add` but not committed are not seen."""
    return _commit_of(where)


# ---- the commit, read from the .git files as data: ablate never runs git on a folder it reads ----
#
# Running git on a checkout runs what that checkout's own files configure: `git status` starts the clean filters its
# `.gitattributes` name (`filter.<name>.clean` in .git/config), core.fsmonitor, hooks, diff and pager programs. A
# checkout received as a tarball belongs to its recipient, so git's safe.directory check does not stop that. So the
# commit is read from HEAD, the loose refs and packed-refs, and whether tracked files changed from the index (git's
# own file format), like git would without its filters: a file whose size, kind or executable bit differs from the
# index, or whose timestamp does and whose content no longer hashes to its index entry, has changed. Staged changes
# (the index differs from HEAD, files unchanged since `git add`) are not seen: that takes reading git's object store.
#
# Every read is bounded, opens no link, FIFO or device, and stays in the git folder (a worktree's `.git` file names
# its git folder); what is read is validated (a commit is 40 or 64 hex digits). Anything odd reads as unknown (None).

SMALL = 4096
"""The most bytes of HEAD, a loose ref or a `.git` / `commondir` file (each holds one line)."""
MAX_PACKED_REFS = 64 << 20
MAX_INDEX = 256 << 20
MAX_HASHED = 256 << 20
"""The most bytes of tracked files hashed to tell a touched file from a changed one; past it, touched is changed."""

_COMMIT = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")
_REF_CHAR = re.compile(r"[^\x00-\x20\x7f~^:?*\[\\]+")


class Odd(Exception):
    """A git file that is not as git writes it (a link, a FIFO, too large, malformed): the answer is unknown."""


def _read_small(path: Path, limit: int = SMALL) -> bytes | None:
    """A regular file's bytes (None when it does not exist); Odd when it is a link, not a regular file or larger
    than `limit`. Opened without following a link and without blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise Odd(str(path)) from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Odd(str(path))
        chunks, n = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - n)):
            chunks.append(chunk)
            n += len(chunk)
            if n > limit:
                raise Odd(f"{path}: larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _pointer(base: Path, data: bytes, prefix: bytes = b"") -> Path:
    """The folder a `.git` file (`gitdir: X`) or a `commondir` file names, relative to `base`; Odd otherwise."""
    line = data.strip()
    if not line.startswith(prefix) or b"\n" in line or b"\0" in line:
        raise Odd("not a git pointer file")
    target = Path(os.path.normpath(base / os.fsdecode(line[len(prefix) :].strip())))
    if not _real_dir(target):
        raise Odd(f"{target}: not a folder")
    return target


def _find_checkout(folder: Path) -> tuple[Path, Path, Path] | None:
    """(work tree, git folder, common git folder) of the checkout `folder` is in, looking upwards as git does
    (not across filesystems); None when there is none. A `.git` that is a link is Odd."""
    here = folder.resolve()
    dev = os.stat(here).st_dev
    for d in (here, *here.parents):
        if os.stat(d).st_dev != dev:
            return None
        dot = d / ".git"
        try:
            mode = os.lstat(dot).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        if stat.S_ISDIR(mode):
            gitdir = dot
        elif stat.S_ISREG(mode):  # a worktree or submodule: `gitdir: <its git folder>`
            gitdir = _pointer(d, _read_small(dot) or b"", b"gitdir:")
        else:
            raise Odd(f"{dot}: a link or not a file")
        common = _read_small(gitdir / "commondir")
        return d, gitdir, (gitdir if common is None else _pointer(gitdir, common))
    return None


def _ref_file(gitdir: Path, name: str) -> Path:
    """The loose ref file of a validated ref name, with no link on the way inside the git folder."""
    parts = name.split("/")
    if parts[0] != "refs" or len(parts) < 2 or len(name) > 1024:
        raise Odd(f"ref {name!r}")
    for p in parts:
        if not p or p.startswith(".") or p.endswith(".lock") or ".." in p or not _REF_CHAR.fullmatch(p):
            raise Odd(f"ref {name!r}")
    path = gitdir
    for p in parts[:-1]:
        path = path / p
        if path.is_symlink():
            raise Odd(f"{path}: a link")
    return path / parts[-1]


def _packed(common: Path, name: str) -> bytes | None:
    data = _read_small(common / "packed-refs", MAX_PACKED_REFS) or b""
    want = name.encode()
    for line in data.splitlines():
        sha, _, ref = line.partition(b" ")
        if ref == want and not line.startswith((b"#", b"^")):
            return sha
    return None


def _head_commit(gitdir: Path, common: Path) -> str:
    """The commit HEAD is at (a branch through its loose ref or packed-refs, or a detached HEAD); Odd when it
    cannot be read (an unborn branch, a reftable repository, a malformed file)."""
    data = _read_small(gitdir / "HEAD")
    for _ in range(5):  # a symbolic ref may point at another, a few deep
        text = (data or b"").strip()
        if _COMMIT.fullmatch(text):
            return text.decode()
        if not text.startswith(b"ref:"):
            raise Odd("HEAD names no commit")
        name = text[4:].strip().decode("utf-8", "replace")
        per_worktree = name.startswith(("refs/bisect/", "refs/worktree/", "refs/rewritten/"))
        data = _read_small(_ref_file(gitdir if per_worktree else common, name))
        if data is None:
            data = _packed(common, name)
    raise Odd("HEAD: symbolic refs too deep")


def _names(data: bytes, version: int, count: int, hashlen: int) -> list[tuple[bytes, tuple[int, ...], bytes]]:
    """The index's entries as (path, (mtime s, mtime ns, mode, size, flags), object id); Odd when malformed."""
    out: list[tuple[bytes, tuple[int, ...], bytes]] = []
    pos, prev = 12, b""
    head = struct.Struct(f">10I{hashlen}sH")
    for _ in range(count):
        _, _, mtime_s, mtime_ns, _, _, mode, _, _, size, oid, flags = head.unpack_from(data, pos)
        at = pos + head.size + (2 if version >= 3 and flags & 0x4000 else 0)
        if version >= 3 and flags & 0x4000 and struct.unpack_from(">H", data, pos + head.size)[0] & 0x4000:
            flags |= 0x8000  # skip-worktree: not in the work tree, unchanged as git sees it
        if version == 4:
            strip, shift = 0, 0
            while True:  # git's offset varint
                c = data[at]
                at += 1
                strip = (strip << 7) | (c & 0x7F) if not shift else ((strip + 1) << 7) | (c & 0x7F)
                shift = 1
                if not c & 0x80:
                    break
            end = data.index(b"\0", at)
            if strip > len(prev):
                raise Odd("index: bad path compression")
            name = prev[: len(prev) - strip] + data[at:end]
            pos = end + 1
        else:
            end = data.index(b"\0", at) if flags & 0xFFF == 0xFFF else at + (flags & 0xFFF)
            name = data[at:end]
            pos = pos + ((end - pos + 8) & ~7)
        prev = name
        out.append((name, (mtime_s, mtime_ns, mode, size, flags), oid))
    if data[pos : pos + 4] == b"link":  # a split index: the other entries are in another file
        raise Odd("index: split index")
    return out


def _read_index(gitdir: Path, hashlen: int) -> list[tuple[bytes, tuple[int, ...], bytes]]:
    data = _read_small(gitdir / "index", MAX_INDEX)
    if data is None:
        return []  # nothing staged yet
    if data[:4] != b"DIRC" or len(data) < 12:
        raise Odd("index: not an index")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3, 4):
        raise Odd(f"index: version {version}")
    try:
        return _names(data, version, count, hashlen)
    except (struct.error, IndexError, ValueError) as e:
        raise Odd("index: malformed") from e


def _blob_id(data: bytes, hashlen: int) -> bytes:
    h = hashlib.sha1 if hashlen == 20 else hashlib.sha256
    return h(b"blob %d\0" % len(data) + data).digest()


class _Worktree:
    """Compares index entries with the work tree's files, hashing at most MAX_HASHED bytes."""

    def __init__(self, root: Path, hashlen: int, index_mtime: float) -> None:
        self.root, self.hashlen, self.index_mtime = root, hashlen, index_mtime
        self.budget = MAX_HASHED
        self.linked: dict[Path, bool] = {}

    def _through_link(self, path: Path) -> bool:
        parent = path.parent
        if parent == self.root:
            return False
        if parent not in self.linked:
            self.linked[parent] = parent.is_symlink() or self._through_link(parent)
        return self.linked[parent]

    def changed(self, name: bytes, entry: tuple[int, ...], oid: bytes) -> bool:
        mtime_s, mtime_ns, mode, size, flags = entry
        if flags & 0x3000:  # a merge in progress
            return True
        if flags & 0x8000 or mode >> 12 not in (0o10, 0o12):  # assumed unchanged, a submodule, a sparse folder
            return False
        parts = name.split(b"/")
        if any(p in (b"", b".", b"..", b".git") for p in parts):
            raise Odd(f"index: path {name!r}")
        path = self.root / os.fsdecode(name)
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return True  # deleted
        if self._through_link(path) or stat.S_IFMT(st.st_mode) != (mode & 0o170000):
            return True
        if stat.S_ISLNK(st.st_mode):
            return _blob_id(os.fsencode(os.readlink(path)), self.hashlen) != oid
        if st.st_size & 0xFFFFFFFF != size or bool(st.st_mode & 0o100) != bool(mode & 0o100):
            return True
        seconds, nanos = divmod(st.st_mtime_ns, 10**9)
        if (seconds, nanos) in ((mtime_s, mtime_ns), (mtime_s, 0)) and st.st_mtime < self.index_mtime:
            return False  # as the index saw it, and not written in the index's own second: git trusts it too
        self.budget -= st.st_size
        if self.budget < 0:
            return True  # touched, and too much to hash: say changed
        try:
            data = _read_small(path, st.st_size)
        except Odd:  # it grew, or became something else, while read
            return True
        return data is None or _blob_id(data, self.hashlen) != oid


def _uncommitted(root: Path, gitdir: Path, commit: str, where: Path | None) -> bool:
    """Whether a tracked file of the work tree differs from the index, or the file `where` is not in the index."""
    hashlen = len(commit) // 2
    entries = _read_index(gitdir, hashlen)
    if where is not None:
        rel = os.fsencode(where.resolve().relative_to(root).as_posix())
        if rel not in {name for name, _, _ in entries}:
            return True
    try:
        index_mtime = os.stat(gitdir / "index").st_mtime
    except FileNotFoundError:
        index_mtime = 0.0
    tree = _Worktree(root, hashlen, index_mtime)
    return any(tree.changed(*e) for e in entries)


def _commit_of(where: Path) -> str | None:
    """The commit of the checkout `where` (a file or a folder) is in, `+ uncommitted changes` when a tracked file
    differs from the index or the file `where` names is not in it; None outside a checkout or when anything read
    is odd."""
    try:
        found = _find_checkout(where if where.is_dir() else where.parent)
        if found is None:
            return None
        root, gitdir, common = found
        commit = _head_commit(gitdir, common)
        dirty = _uncommitted(root, gitdir, commit, None if where.is_dir() else where)
    except (Odd, OSError, ValueError, UnicodeError, RecursionError):
        return None
    return commit + (" + uncommitted changes" if dirty else "")
