"""Crash-safe records: atomic whole-file writes, JSON files and JSONL appends, on the opens of ablate.storage.fs.

Every writer here is crash-safe: whole files are replaced atomically (write to a temp file, fsync, rename), and
JSONL appends write one complete line per call, so a reader sees either the old or the new state, at worst a torn
*last* line, which `iter_jsonl` skips. Every file is opened through `fs.open_fd` (no link followed) and made with
its folder's `fs.file_mode`.

This module knows bytes, not meanings: what the files mean is docs/run-directory.md.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ablate.errors import ErrorKind, UserError
from ablate.storage.fs import LinkRefused, file_mode, link_refused, make_dirs, open_fd, safe_open


def atomic_write_bytes(path: Path | str, data: bytes, mode: int | None = None) -> None:
    """Replace `path` with `data` so that readers never see a half-written file; on any failure (a full disk, a
    signal) the temp file is removed and the old file is left as it was. A link at `path` is refused (LinkRefused):
    replacing it would be harmless, but someone planted it. The file gets `mode`, else its folder's `file_mode`."""
    path = Path(path)
    make_dirs(path.parent)
    if os.path.islink(path):
        raise link_refused(path)
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
            raise link_refused(name) from None
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
