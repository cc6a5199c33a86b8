"""Crash-safe file primitives: atomic whole-file writes, JSONL appends, and locks that survive a deleted lock file.

Every writer here is crash-safe: whole files are replaced atomically (write to a temp file, fsync, rename), and
JSONL appends write one complete line per call, so a reader sees either the old or the new state, at worst a torn
*last* line, which `iter_jsonl` skips. Files are created readable by the group and others (0644 under the usual
umask), so a sweep directory written by one user can be read by another.

What the files mean (run directories, metric names, the ledger) is documented in `ablate.rundir` and
`ablate.ledger`; this module knows bytes, not meanings.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from ablate.errors import UserError


def _umask() -> int:
    """The process umask, read without changing it (Linux: /proc/self/status; elsewhere the usual 022)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


FILE_MODE = 0o644 & ~_umask()


def cache_dir() -> Path:
    """Machine-wide cache (warmed-up checkpoints, composed recipes): $ABLATE_CACHE or ~/.cache/ablate."""
    return Path(os.environ.get("ABLATE_CACHE") or Path.home() / ".cache" / "ablate")


def cpu_count() -> int:
    """Cores this process may use (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Replace `path` with `data` so that readers never see a half-written file; on any failure (a full disk, a
    signal) the temp file is removed and the old file is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp creates 0600: others could not read the sweep
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
    return json.loads(Path(path).read_text(encoding="utf-8"))


def update_json(path: Path | str, **fields: Any) -> dict[str, Any]:
    """Read-modify-write of a JSON object file with an atomic replace; a missing, torn or non-object file is {}."""
    try:
        data = read_json(path)
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data.update(fields)
    write_json(path, data)
    return data


def append_jsonl(path: Path | str, *records: dict[str, Any]) -> None:
    """Append records, one line each, with a single write() call, then fsync (a batch costs one flush).

    A line is written whole by O_APPEND, so concurrent appenders never interleave inside a line; if the writer
    dies mid-write, only the last line can be torn, and `iter_jsonl` skips it. A torn tail is first terminated
    with a newline so that the next record starts on a line of its own.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = "".join(json.dumps(r, sort_keys=True, default=_json_default, allow_nan=False) + "\n" for r in records)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def iter_jsonl(path: Path | str) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSONL file written by ablate, skipping blank lines and lines that are not a JSON
    object (a line torn by a crash mid-append, or damaged bytes): readers of the ledger must never crash."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as f:
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
                raise UserError(f"{path}:{lineno}: not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1}); "
                                "save the file as UTF-8") from None
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{lineno}: not valid JSON ({e.msg}); fix or delete that line") from None
            except ValueError as e:  # e.g. an integer of thousands of digits
                raise UserError(f"{path}:{lineno}: not valid JSON ({str(e).split(':')[0]}); fix or delete that "
                                "line") from None
            except RecursionError:
                raise UserError(f"{path}:{lineno}: JSON nested too deeply; one flat object per line is expected") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
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


# ---------------------------------------------------------------------------------------------- locks


class Lock:
    """An exclusive `flock` on a directory, held while `locked` is True (see `dir_lock`)."""

    def __init__(self, locked: bool, fd: int | None = None) -> None:
        self.locked = locked
        self.fd = fd

    def still_at(self, directory: Path | str) -> bool:
        """Whether `directory` is still the directory this lock holds (not removed, renamed or replaced)."""
        return self.fd is not None and _same_file(self.fd, Path(directory))


@contextlib.contextmanager
def dir_lock(directory: Path | str, *, timeout: float | None = None, blocking: bool = True) -> Iterator[Lock]:
    """Exclusive lock on `directory` itself (an flock on the directory's own descriptor), released by the kernel
    when the holder dies.

    Locking the directory, not a lock file inside it, means no file can be deleted from under a holder: deleting
    a lock file used to let a second process in. After the flock the path is checked to still be the directory
    that was locked (it may have been renamed or replaced meanwhile), and the lock is taken again if not.

    `blocking=False` tries once; `timeout` gives up after that many seconds. Either way the caller learns from
    `Lock.locked` whether it holds the lock (used from signal handlers, where the interrupted code may itself hold
    it: a second flock would deadlock).
    """
    directory = Path(directory)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        got = _flock(fd, blocking=blocking and deadline is None, deadline=deadline)
        if got and _same_file(fd, directory):
            break
        if got:  # replaced while we waited: lock the directory that is there now
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            continue
        os.close(fd)
        fd = None
        break
    try:
        yield Lock(locked=fd is not None, fd=fd)
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _flock(fd: int, *, blocking: bool, deadline: float | None) -> bool:
    if blocking:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if deadline is None or time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
