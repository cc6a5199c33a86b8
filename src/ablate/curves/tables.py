"""CSV/JSONL curve tables, read row by row: every bad byte, row or value is one `UserError` line naming the file,
the line and the fix. `load_curves` makes curves of them (`write_csv` writes curves back as one); `logs` reads
W&B's CSV exports with them.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from ablate.errors import ErrorKind, UserError
from ablate.fit.curve import Curve
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
            f"{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x} at column {col}); save the file as UTF-8",
            kind=ErrorKind.FILE,
        ) from None
    reader = csv.DictReader(io.StringIO(text, newline=""), skipinitialspace=True)  # "run, compute, ..." too
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        columns = list(reader.fieldnames or [])
        dup = next((c for i, c in enumerate(columns) if c in columns[:i]), None)
        if dup is not None:  # DictReader would keep the last one silently
            raise UserError(
                f"{path}: the header names column '{dup}' twice; rename or drop one of them", kind=ErrorKind.FILE
            )
        for row in reader:
            extra = row.pop(None, None)  # DictReader's restkey: the fields past the header's last column
            if extra is not None:
                raise UserError(
                    f"{path}:{reader.line_num}: {len(columns) + len(extra)} fields, the header has {len(columns)}; "
                    "quote a value that holds a comma, or name the extra column in the header",
                    kind=ErrorKind.FILE,
                )
            rows.append((reader.line_num, row))
    except csv.Error as e:
        raise UserError(
            f"{path}:{reader.line_num}: not a valid CSV row ({e}); fix that line", kind=ErrorKind.FILE
        ) from None
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
        raise UserError(f"{path}: no such file", kind=ErrorKind.FILE)
    if path.is_dir():
        raise UserError(
            f"{path}: is a directory; give a CSV or JSONL file (or use `ablate rank` on a sweep)", kind=ErrorKind.FILE
        )
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".ndjson"):
        raise UserError(
            f"{path}: unsupported format '{suffix or '(none)'}'; use a .csv or .jsonl file", kind=ErrorKind.FILE
        )
    reading.check_size(path)  # a device or pipe, or a file too large to be a curve table: one line
    try:
        columns, rows = read_csv(path) if suffix == ".csv" else _read_jsonl(path)
    except OSError as e:
        raise UserError(f"{path}: can't read the file ({e.strerror or e})", kind=ErrorKind.FILE) from None
    if not rows:
        raise UserError(f"{path}: no data rows", kind=ErrorKind.FILE)
    return columns, rows


def number(where: str, col: str, v: Any) -> float:
    """A value of a numeric column as a float (missing/empty/"nan" -> NaN); `where` is "path line N"."""
    if isinstance(v, bool):
        raise UserError(f"{where}: {v!r} in column '{col}' is not a number", kind=ErrorKind.FILE)
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:  # JSON integers are unbounded; a float stops near 1.8e308
            raise UserError(
                f"{where}: the integer in column '{col}' ({v.bit_length()} bits) is too large "
                "to be a compute or a pass rate; fix that value",
                kind=ErrorKind.FILE,
            ) from None
    if isinstance(v, float):
        return v
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "nan", "null", "none")):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        raise UserError(f"{where}: {show(v)} in column '{col}' is not a number", kind=ErrorKind.FILE) from None


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
            f"{where}: no value in the {flag[2:]} column '{col}'; fill it in, or choose the column with {flag}",
            kind=ErrorKind.FILE,
        )
    if isinstance(v, (list, dict)):
        raise UserError(
            f"{where}: {show(v)} in the {flag[2:]} column '{col}' is not a name; choose the column with {flag}",
            kind=ErrorKind.FILE,
        )
    return str(v)


def _run_column(path: Path, columns: list[str], x: str, y: str, run: str | None, group: str | None) -> str | None:
    """The run column to read (None: the file is one run), once every column asked for is there."""
    for col, flag in ((x, "--x"), (y, "--y")) + (((group, "--group"),) if group else ()):
        if col not in columns:
            raise UserError(
                f"{path}: no column '{col}'; columns are: {', '.join(columns)} (choose with {flag})",
                kind=ErrorKind.FILE,
            )
    if run is None or run in columns:
        return run
    if run != "run":
        raise UserError(
            f"{path}: no column '{run}'; columns are: {', '.join(columns)} (choose with --run)", kind=ErrorKind.FILE
        )
    return None  # the default run column is optional: one curve per file


def load_curves(
    path: Path | str,
    *,
    x: str = "gpu_hours",
    y: str = "val_pass_rate",
    run: str | None = "run",
    group: str | None = None,
) -> list[Curve]:
    """Read curves from a CSV or JSONL file with one row per (run, evaluation).

    `run` names the column that tells runs apart (if the file has no such column and it is the default,
    the whole file is one run named after the file); `group` names the column of arms/seeds, optional, and
    must be the same on every row of a run. Each Curve's x, y are [n_run] arrays in file order, which must
    increase in compute. Raises UserError with one line naming the culprit and the fix for any bad input.
    """
    path = Path(path)
    columns, rows = read_rows(path)
    run = _run_column(path, columns, x, y, run, group)
    xs = np.array([number(f"{path} line {ln}", x, r.get(x)) for ln, r in rows])
    ys = np.array([number(f"{path} line {ln}", y, r.get(y)) for ln, r in rows])
    lines = [ln for ln, _ in rows]
    for name, vals in ((x, xs), (y, ys)):
        bad = [ln for ln, v in zip(lines, vals) if not math.isfinite(v)]
        if bad:
            raise UserError(
                f"{path}: missing, NaN or infinite values in '{name}' at line(s) {fmt_lines(bad)}; fix or drop "
                "those rows",
                kind=ErrorKind.FILE,
            )
    bad = [ln for ln, v in zip(lines, ys) if not 0.0 <= v <= 1.0]
    if bad:
        hint = " (percentages? divide by 100)" if ys.max() <= 100 else ""
        raise UserError(
            f"{path}: pass rates in '{y}' outside [0, 1] at line(s) {fmt_lines(bad)}{hint}", kind=ErrorKind.FILE
        )
    bad = [ln for ln, v in zip(lines, xs) if v < 0]
    if bad:
        raise UserError(
            f"{path}: negative compute in '{x}' at line(s) {fmt_lines(bad)}; compute counts up from 0: fix those "
            "lines, or name the compute column with --x",
            kind=ErrorKind.FILE,
        )
    ns = None
    if VAL_N in columns:  # graded samples behind each pass rate: the evaluation noise is then known, not estimated
        ns = np.array([number(f"{path} line {ln}", VAL_N, r.get(VAL_N)) for ln, r in rows])
        if not np.all(np.isfinite(ns) & (ns > 0)):
            ns = None

    members: dict[str, list[int]] = {}  # run -> row indices, in order of first appearance
    groups: dict[str, tuple[str | None, int]] = {}  # run -> (group, line it was first seen on)
    for i, (ln, r) in enumerate(rows):
        where = f"{path} line {ln}"
        key = as_name(where, run, "--run", r.get(run)) if run is not None else path.stem
        g = as_name(where, group, "--group", r.get(group)) if group else None
        if key not in members:
            members[key] = []
            groups[key] = (g, ln)
        elif g != groups[key][0]:
            raise UserError(
                f"{where}: run '{key}' has {group} '{g}' here but '{groups[key][0]}' on line "
                f"{groups[key][1]}; a run belongs to one {group}: fix the rows, or check --run and --group",
                kind=ErrorKind.FILE,
            )
        members[key].append(i)
    curves = []
    for key, picked in members.items():
        idx = np.array(picked)
        cx, cy = xs[idx], ys[idx]
        _check_increasing(path, x, key, cx, [lines[i] for i in idx])
        curves.append(Curve(run=key, group=groups[key][0], x=cx, y=cy, n=None if ns is None else ns[idx]))
    return curves


def _check_increasing(path: Path, x: str, key: str, cx: np.ndarray, lines: list[int]) -> None:
    """One run's compute must increase row by row (`lines`: each row's line in the file)."""
    steps = np.nonzero(np.diff(cx) <= 0)[0]
    if not steps.size:
        return
    k = steps[0]
    fix = (  # the same compute twice: sorting cannot help
        f"keep one evaluation at {cx[k]:g} (line {lines[k]} or {lines[k + 1]}), or average them"
        if cx[k + 1] == cx[k]
        else "sort the rows by compute, or name the run column with --run"
    )
    raise UserError(
        f"{path} line {lines[k + 1]}: the '{x}' column does not increase in run '{key}' "
        f"({cx[k + 1]:g} after {cx[k]:g}); {fix}",
        kind=ErrorKind.FILE,
    )


def write_csv(curves: list[Curve], path: Path | str, *, x: str = "gpu_hours", y: str = "val_pass_rate") -> None:
    """Write curves as a long CSV: run, group, x, y, and val_n when every curve knows it (labels like
    `loss=dapo,seed=0` are quoted)."""
    with_n = all(c.n is not None and len(c.n) == len(c.x) for c in curves)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["run", "group", x, y] + ([VAL_N] if with_n else []))
        for c in curves:
            for i, (xi, yi) in enumerate(zip(c.x, c.y)):
                n = [f"{c.n[i]:g}"] if with_n and c.n is not None else []
                w.writerow([c.run, c.group or c.run, f"{xi:.6g}", f"{yi:.6g}"] + n)
