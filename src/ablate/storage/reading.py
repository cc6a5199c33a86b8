"""Reading a user's input file within bounds: a device (`/dev/zero`), a named pipe or a socket is refused before it is
opened (opening a pipe blocks until someone writes; a device never ends), a format is told from a bounded prefix,
and a file read whole must be under MAX_FILE_BYTES; the fields of a database (an MLflow store) are checked one by
one, as those of every other file are. Every refusal is one `UserError` line naming the file and the
fix (docs/security.md, "unbounded work").
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from ablate.errors import ErrorKind, UserError
from ablate.text import safe

DETECT_BYTES = 1 << 16
"""What telling a format apart reads at most (64 KiB): a `:W&B` or SQLite magic, a table's header or first row."""
SCAN_BYTES = 8 << 20
"""How far into a text file a verl console line is looked for (8 MiB): a console log opens with config, Ray and
vLLM dumps of some hundreds of KB before its first `step:N - ...` line; a file that has none by then is not one
(`--from verl` reads it all, a line at a time)."""
MAX_FILE_BYTES = 1 << 30
"""The largest file read whole (1 GiB): a curve is thousands of points and its log (a trainer_state.json, a verl
console log, a CSV export of a whole project) megabytes; a file a thousand times that is not a curve log, and
reading it would take the machine's memory (a JSON document takes several times its size in memory)."""

MAX_STEP = 2**53
"""Steps beyond this are refused: past 2^53 floats no longer hold every integer (distinct steps merge), and no
training run takes that many (a step a microsecond would need 285 years): such a number is not a step count."""

NOT_REGULAR = "not a regular file (a device, a pipe, a socket); give a file"


def _stat(p: Path) -> os.stat_result:
    try:
        return os.stat(p)  # follows a link to what it names, as opening would, without opening it
    except FileNotFoundError:
        raise UserError(f"{safe(p)}: no such file", kind=ErrorKind.FILE) from None
    except (OSError, ValueError) as e:  # a loop of links, no permission on a folder, a NUL in the name
        raise UserError(
            f"{safe(p)}: can't read the file ({safe(getattr(e, 'strerror', None) or e)})", kind=ErrorKind.FILE
        ) from None


def check_regular(p: Path | str) -> int:
    """The size of `p`, a regular file; a folder, a device, a pipe or a socket is a UserError, refused unopened."""
    st = _stat(Path(p))
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{safe(p)}: a folder; give a file", kind=ErrorKind.FILE)
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{safe(p)}: {NOT_REGULAR}", kind=ErrorKind.FILE)
    return st.st_size


def refuse_special(p: Path | str) -> None:
    """Refuse a device, a pipe or a socket (unopened); a folder, a regular file or no file at all pass (the caller
    says what it reads in a folder, and that a file is missing)."""
    try:
        mode = os.stat(p).st_mode
    except (OSError, ValueError):
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise UserError(f"{safe(p)}: {NOT_REGULAR}", kind=ErrorKind.FILE)


def open_regular(p: Path | str) -> BinaryIO:
    """`p` opened for reading in binary, refused (one line) unless it is a regular file. Opened with O_NONBLOCK and
    checked again on the open file, so that a pipe put in its place after the check cannot block the open."""
    check_regular(p)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise UserError(f"{safe(p)}: can't read the file ({safe(e.strerror or e)})", kind=ErrorKind.FILE) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"{safe(p)}: {NOT_REGULAR}", kind=ErrorKind.FILE)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_head(p: Path | str, limit: int = DETECT_BYTES) -> bytes:
    """At most `limit` bytes from the start of a regular file."""
    with open_regular(p) as f:
        try:
            return f.read(limit)
        except OSError as e:
            raise UserError(f"{safe(p)}: can't read the file ({safe(e.strerror or e)})", kind=ErrorKind.FILE) from None


def _too_big(p: Path | str, size: str, what: str) -> UserError:
    return UserError(
        f"{safe(p)}: {size} bytes, over the {MAX_FILE_BYTES:,} bytes {what} may have (curves are thousands of "
        "points); give the log of one run, or cut the file to the part with the curves",
        kind=ErrorKind.FILE,
    )


def check_size(p: Path | str, what: str = "a curve log") -> int:
    """The size of regular file `p`, refused (one line naming it, its size and the limit) above MAX_FILE_BYTES."""
    size = check_regular(p)
    if size > MAX_FILE_BYTES:
        raise _too_big(p, f"{size:,}", what)
    return size


def read_whole(p: Path | str, what: str = "a curve log") -> bytes:
    """A regular file's bytes, refused (one line) above MAX_FILE_BYTES; no more than that is ever read, even when
    the file grows meanwhile."""
    check_size(p, what)
    with open_regular(p) as f:
        try:
            data = f.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise UserError(f"{safe(p)}: can't read the file ({safe(e.strerror or e)})", kind=ErrorKind.FILE) from None
    if len(data) > MAX_FILE_BYTES:  # it grew past the limit after the check
        raise _too_big(p, f"over {MAX_FILE_BYTES:,}", what)
    return data


# ---- the fields of a store read as a database ----


def shown(value: Any) -> str:
    """A field's value for a message: its type and a short quote, escaped."""
    return safe(f"{type(value).__name__} {value[:40] if isinstance(value, (bytes, str)) else value!r}")


def text_field(where: str, what: str, value: Any, fix: str, *, optional: bool = True) -> Any:
    """A text field (an id, a name, a tag): a str, or None when `optional`; anything else is a UserError."""
    if isinstance(value, str) or (value is None and optional):
        return value
    raise UserError(f"{where}: {safe(what)} is {shown(value)}, not text; {fix}", kind=ErrorKind.FILE)


def metric_row(
    where: str, what: str, key: Any, step: Any, value: Any, is_nan: Any, fix: str
) -> tuple[float, str, float]:
    """A logged metric as (step, key, value): a text key, an integer step in [0, MAX_STEP], a finite number (or NaN
    where `is_nan`, 0 or 1, says so); anything else is one UserError line naming `what` (the run) and the field."""
    key = text_field(where, f"a metric key of {what}", key, fix, optional=False)
    what = safe(f"{what} metric {key!r}")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise UserError(
            f"{where}: {what} has step {shown(step)}, not an integer in [0, 2^53]; {fix}", kind=ErrorKind.FILE
        )
    if is_nan not in (0, 1, None) or isinstance(is_nan, float):
        raise UserError(
            f"{where}: {what} step {step} has is_nan {shown(is_nan)}, not 0 or 1; {fix}", kind=ErrorKind.FILE
        )
    if is_nan:
        return float(step), key, math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(
            f"{where}: {what} step {step} is {shown(value)}, not a finite number; {fix}", kind=ErrorKind.FILE
        )
    return float(step), key, float(value)
