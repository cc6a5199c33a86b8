"""Crash-safe file primitives: atomic whole-file writes, JSONL appends, and opens that follow no link.

Every writer here is crash-safe: whole files are replaced atomically (write to a temp file, fsync, rename), and
JSONL appends write one complete line per call, so a reader sees either the old or the new state, at worst a torn
*last* line, which `iter_jsonl` skips.

Permissions and links: directories are made owner-only, or group-readable when asked (`dir_mode`, `make_dirs`),
files never more open than their folder (`file_mode`), other libraries' files held to the same by the umask while a
sweep runs (`sweep_umask`); every open goes through `open_fd` (O_NOFOLLOW) and `check_no_links` refuses a link
below a sweep or run directory. Who may change a sweep: ablate.storage.ownership; locks: ablate.storage.locks; the
threat model these answer: docs/security.md.

This module knows bytes, not meanings: what the files mean is docs/run-directory.md.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
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


# ---------------------------------------------------------------------------------------------- safety


class LinkRefused(UserError, OSError):
    """A symbolic link where ablate opens or walks a file of a sweep. An OSError too, so that readers which take an
    unreadable file as absent (run.json, stop.json) do so; writers let it through as the one-line refusal."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=ErrorKind.FILE)


def _link_error(path: Path | str) -> LinkRefused:
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
            raise _link_error(path) from None
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
            raise _link_error(p)
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


def atomic_write_bytes(path: Path | str, data: bytes, mode: int | None = None) -> None:
    """Replace `path` with `data` so that readers never see a half-written file; on any failure (a full disk, a
    signal) the temp file is removed and the old file is left as it was. A link at `path` is refused (LinkRefused):
    replacing it would be harmless, but someone planted it. The file gets `mode`, else its folder's `file_mode`."""
    path = Path(path)
    make_dirs(path.parent)
    if os.path.islink(path):
        raise _link_error(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode(path.parent) if mode is None else mode)  # a group-readable sweep's files are 0640
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path | str, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default, allow_nan=False) + "\n")


def read_json(path: Path | str) -> Any:
    with safe_open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def finite_number(v: Any) -> float | None:
    """A value read from a JSON file as a finite float, or None: a bool is not a number, and neither is NaN, an
    infinity or an integer of hundreds of digits (which would not even convert). Files from a shared sweep are
    read with this wherever a number steers what is shown or done."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


def update_json(path: Path | str, **fields: Any) -> dict[str, Any]:
    """Read-modify-write of a JSON object file with an atomic replace; a missing, torn or non-object file is {}.
    A link at `path` is refused (LinkRefused) before anything is read: it could copy a private file in here."""
    try:
        data = read_json(path)
    except LinkRefused:
        raise
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data.update(fields)
    write_json(path, data)
    return data


def update_json_in(dir_fd: int, name: str, **fields: Any) -> None:
    """`update_json` of the file `name` in the directory open as `dir_fd` (a writer's locked run directory): every
    step goes through the descriptor, so a write under way when the directory is renamed or replaced lands in the
    directory that was locked, never in one made at its old path. A link at `name` is refused."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _link_error(name) from None
        data = {}
    except ValueError:
        data = {}
    data = {**data, **fields} if isinstance(data, dict) else dict(fields)
    text = json.dumps(data, indent=2, sort_keys=True, default=_json_default, allow_nan=False) + "\n"
    tmp = f".{name}.{os.urandom(6).hex()}.tmp"
    mode = os.fstat(dir_fd).st_mode & 0o644 | 0o600
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def append_jsonl(path: Path | str, *records: dict[str, Any]) -> None:
    """Append records, one line each, with a single write() call, then fsync (a batch costs one flush).

    A line is written whole by O_APPEND, so concurrent appenders never interleave inside a line; if the writer
    dies mid-write, only the last line can be torn, and `iter_jsonl` skips it. A torn tail is first terminated
    with a newline so that the next record starts on a line of its own.
    """
    path = Path(path)
    make_dirs(path.parent)
    line = "".join(json.dumps(r, sort_keys=True, default=_json_default, allow_nan=False) + "\n" for r in records)
    fd = open_fd(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)  # a link at `path` is refused, not appended through
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def iter_jsonl(path: Path | str) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSONL file written by ablate, skipping blank lines and lines that are not a JSON
    object (a line torn by a crash mid-append, or damaged bytes): readers of the ledger must never crash."""
    try:
        f = safe_open(path, "rb")  # a link is refused (LinkRefused), not read through
    except FileNotFoundError:
        return
    with f:
        for raw in f:
            line = raw.strip()
            if not line:
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                continue
            if isinstance(rec, dict):
                yield rec


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def jsonl_rows(path: Path | str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a user's JSONL file. Strict, unlike `iter_jsonl`: a line
    that is not UTF-8, not JSON, nested too deeply or not an object is a UserError naming `path:line`."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{path}:{lineno}: not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1}); "
                    "save the file as UTF-8",
                    kind=ErrorKind.FILE,
                ) from None
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(
                    f"{path}:{lineno}: not valid JSON ({e.msg}); fix or delete that line", kind=ErrorKind.FILE
                ) from None
            except ValueError as e:  # e.g. an integer of thousands of digits
                raise UserError(
                    f"{path}:{lineno}: not valid JSON ({str(e).split(':')[0]}); fix or delete that line",
                    kind=ErrorKind.FILE,
                ) from None
            except RecursionError:
                raise UserError(
                    f"{path}:{lineno}: JSON nested too deeply; one flat object per line is expected",
                    kind=ErrorKind.FILE,
                ) from None
            if not isinstance(row, dict):
                raise UserError(
                    f"{path}:{lineno}: expected a JSON object per line, got {type(row).__name__}", kind=ErrorKind.FILE
                )
            yield lineno, row


def write_jsonl(path: Path | str, records: Iterable[dict[str, Any]]) -> None:
    """Rewrite a whole JSONL file atomically (used to cut metrics back to a checkpoint on resume)."""
    text = "".join(json.dumps(r, sort_keys=True, default=_json_default, allow_nan=False) + "\n" for r in records)
    atomic_write_text(path, text)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy / torch scalars
        v = o.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
