"""CSV/JSONL curve tables, read row by row: every bad byte, row or value is one `UserError` line naming the file,
the line and the fix. `curves.load_curves` makes curves of them; `logs` reads W&B's CSV exports with them.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from ablate.errors import UserError
from ablate.storage import reading, store

VAL_N = "val_n"
"""The column / metric holding each pass rate's graded-sample count (optional)."""


def fmt_lines(lines: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(n) for n in lines[:limit])
    return shown + (f" and {len(lines) - limit} more" if len(lines) > limit else "")


def read_csv(path: Path) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    # Decoded whole, not streamed, so that a bad byte can be named by its line; utf-8-sig drops the BOM a
    # spreadsheet may write (it would otherwise glue itself to the first column's name).
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x} at column {col}); save the file as UTF-8"
        ) from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        columns = list(reader.fieldnames or [])
        dup = next((c for i, c in enumerate(columns) if c in columns[:i]), None)
        if dup is not None:  # DictReader would keep the last one silently
            raise UserError(f"{path}: the header names column '{dup}' twice; rename or drop one of them")
        for row in reader:
            rows.append((reader.line_num, row))
    except csv.Error as e:
        raise UserError(f"{path}:{reader.line_num}: not a valid CSV row ({e}); fix that line") from None
    return columns, rows


def _read_jsonl(path: Path) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    columns: dict[str, None] = {}
    rows: list[tuple[int, dict[str, Any]]] = []
    for i, rec in store.jsonl_rows(path):  # UserError naming path:line for any line that is not a JSON object
        columns.update(dict.fromkeys(rec))
        rows.append((i, rec))
    return list(columns), rows


def read_rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    """Rows with their 1-based line numbers in the file, and the column names seen."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory; give a CSV or JSONL file (or use `ablate rank` on a sweep)")
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".ndjson"):
        raise UserError(f"{path}: unsupported format '{suffix or '(none)'}'; use a .csv or .jsonl file")
    reading.check_size(path)  # a device or pipe, or a file too large to be a curve table: one line
    try:
        columns, rows = read_csv(path) if suffix == ".csv" else _read_jsonl(path)
    except OSError as e:
        raise UserError(f"{path}: can't read the file ({e.strerror or e})") from None
    if not rows:
        raise UserError(f"{path}: no data rows")
    return columns, rows


def number(where: str, col: str, v: Any) -> float:
    """A value of a numeric column as a float (missing/empty/"nan" -> NaN); `where` is "path line N"."""
    if isinstance(v, bool):
        raise UserError(f"{where}: {v!r} in column '{col}' is not a number")
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:  # JSON integers are unbounded; a float stops near 1.8e308
            raise UserError(
                f"{where}: the integer in column '{col}' ({v.bit_length()} bits) is too large "
                "to be a compute or a pass rate; fix that value"
            ) from None
    if isinstance(v, float):
        return v
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "nan", "null", "none")):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        raise UserError(f"{where}: {show(v)} in column '{col}' is not a number") from None


def show(v: Any, limit: int = 40) -> str:
    """A value as a short one-line quote for a message (a nested list would be printed whole, or not at all)."""
    if isinstance(v, (list, dict)):
        return f"a JSON {'list' if isinstance(v, list) else 'object'}"
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "…"


def as_name(where: str, col: str, flag: str, v: Any) -> str:
    """A value of the run or group column as a name."""
    if v is None or (isinstance(v, str) and not v.strip()):
        raise UserError(
            f"{where}: no value in the {flag[2:]} column '{col}'; fill it in, or choose the column with {flag}"
        )
    if isinstance(v, (list, dict)):
        raise UserError(
            f"{where}: {show(v)} in the {flag[2:]} column '{col}' is not a name; choose the column with {flag}"
        )
    return str(v)
