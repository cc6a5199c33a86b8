"""Training curves as data: load them from CSV/JSONL (or run directories) and reject bad input in one line.

A `Curve` is one run's (compute, pass rate) points. Its R0 is the measured pass rate at compute 0 (the
evaluation before the first step), which the fit holds fixed; points at compute 0 are not fitted (the
model is in ln C).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ablate import store
from ablate.errors import UserError


@dataclass
class Curve:
    run: str
    group: str | None
    x: np.ndarray
    """Compute of each point ([n], strictly increasing)."""
    y: np.ndarray
    """Pass rate of each point ([n], in [0, 1])."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Extra facts carried to reports (e.g. `truncation_warning`, `status`, `arm_id`)."""

    @property
    def r0(self) -> float | None:
        """Measured pass rate at compute 0, or None when the curve has no such point."""
        at0 = self.y[self.x == 0]
        return float(at0.mean()) if at0.size else None


def _fmt_lines(lines: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(n) for n in lines[:limit])
    return shown + (f" and {len(lines) - limit} more" if len(lines) > limit else "")


def _read_rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    """Rows with their 1-based line numbers in the file, and the column names seen."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory; give a CSV or JSONL file (or use `ablate rank` on a sweep)")
    suffix = path.suffix.lower()
    rows: list[tuple[int, dict[str, Any]]] = []
    if suffix == ".csv":
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or [])
            for row in reader:
                rows.append((reader.line_num, row))
    elif suffix in (".jsonl", ".ndjson"):
        columns = []
        for i, rec in store.jsonl_rows(path):
            columns += [k for k in rec if k not in columns]
            rows.append((i, rec))
    else:
        raise UserError(f"{path}: unsupported format '{suffix or '(none)'}'; use a .csv or .jsonl file")
    if not rows:
        raise UserError(f"{path}: no data rows")
    return columns, rows


def _number(path: Path, line: int, col: str, v: Any) -> float:
    if isinstance(v, bool):
        raise UserError(f"{path} line {line}: {v!r} in column '{col}' is not a number")
    if isinstance(v, (int, float)):
        return float(v)
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "nan", "null", "none")):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        raise UserError(f"{path} line {line}: {v!r} in column '{col}' is not a number") from None


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
    the whole file is one run named after the file); `group` names the column of arms/seeds, optional.
    Raises UserError with one line naming the culprit and the fix for any bad input.
    """
    path = Path(path)
    columns, rows = _read_rows(path)
    for col, flag in ((x, "--x"), (y, "--y")) + (((group, "--group"),) if group else ()):
        if col not in columns:
            raise UserError(f"{path}: no column '{col}'; columns are: {', '.join(columns)} (choose with {flag})")
    if run is not None and run not in columns:
        if run != "run":
            raise UserError(f"{path}: no column '{run}'; columns are: {', '.join(columns)} (choose with --run)")
        run = None  # the default run column is optional: one curve per file

    xs = np.array([_number(path, ln, x, r.get(x)) for ln, r in rows])
    ys = np.array([_number(path, ln, y, r.get(y)) for ln, r in rows])
    lines = [ln for ln, _ in rows]
    for name, vals in ((x, xs), (y, ys)):
        bad = [ln for ln, v in zip(lines, vals) if not math.isfinite(v)]
        if bad:
            raise UserError(
                f"{path}: missing, NaN or infinite values in '{name}' at line(s) {_fmt_lines(bad)}; fix or drop those rows"
            )
    bad = [ln for ln, v in zip(lines, ys) if not 0.0 <= v <= 1.0]
    if bad:
        hint = " (percentages? divide by 100)" if ys.max() <= 100 else ""
        raise UserError(f"{path}: pass rates in '{y}' outside [0, 1] at line(s) {_fmt_lines(bad)}{hint}")
    bad = [ln for ln, v in zip(lines, xs) if v < 0]
    if bad:
        raise UserError(f"{path}: negative compute in '{x}' at line(s) {_fmt_lines(bad)}")

    order: list[str] = []
    members: dict[str, list[int]] = {}
    groups: dict[str, str | None] = {}
    for i, (ln, r) in enumerate(rows):
        key = str(r.get(run)) if run is not None else path.stem
        if key not in members:
            order.append(key)
            members[key] = []
            groups[key] = str(r.get(group)) if group else None
        members[key].append(i)
    curves = []
    for key in order:
        idx = np.array(members[key])
        cx, cy = xs[idx], ys[idx]
        steps = np.nonzero(np.diff(cx) <= 0)[0]
        if steps.size:
            k = steps[0]
            raise UserError(
                f"{path} line {lines[idx[k + 1]]}: compute '{x}' does not increase in run '{key}' "
                f"({cx[k + 1]:g} after {cx[k]:g}); sort the rows by compute, or name the run column with --run"
            )
        curves.append(Curve(run=key, group=groups[key], x=cx, y=cy))
    return curves


AXES = ("gpu_hours", "flops", "samples", "step")


def curve_from_run_dir(rd: Path, *, x: str = "gpu_hours", y: str = "val_pass_rate") -> tuple[Curve | None, dict[str, Any]]:
    """One run directory's curve with its meta, or (None, meta with the reason it can't be fitted)."""
    info = store.read_json(rd / "run.json") if (rd / "run.json").exists() else {}
    label = info.get("label") or rd.name
    arm = ",".join(p for p in label.split(",") if not p.startswith("seed=")) or "base"
    status = info.get("status", "unknown")
    meta: dict[str, Any] = {"run_id": info.get("run_id", rd.name), "arm_id": info.get("arm_id"), "label": label,
                            "arm": arm, "status": status, "baseline": bool(info.get("baseline", False)),
                            "partial": status in ("pending", "running", "preempted")}
    if status in ("failed", "diverged"):
        reason = info.get("error") or info.get("reason") or status
        if isinstance(reason, dict):
            reason = reason.get("cause") or reason.get("class") or status
        return None, {**meta, "reason": f"{status}: {str(reason).splitlines()[0][:120]}"}
    recs = [r for r in store.read_jsonl(rd / "metrics.jsonl") if y in r and (x in r or r.get("step") == 0)]
    if not recs:
        return None, {**meta, "reason": f"no metrics yet ({rd / 'metrics.jsonl'})"}
    xs = np.array([0.0 if r.get("step") == 0 else float(r[x]) for r in recs])
    ys = np.array([float(r[y]) for r in recs])
    ok = np.isfinite(xs) & np.isfinite(ys)
    order = np.argsort(xs[ok], kind="stable")
    xs, ys = xs[ok][order], ys[ok][order]
    keep = np.concatenate([[True], np.diff(xs) > 0])  # a resumed run never logs a step twice; be safe
    trunc = [r["truncation_rate"] for r in recs if r.get("truncation_rate") is not None]
    meta["truncation_warning"] = bool(info.get("truncation_warning")) or (bool(trunc) and max(trunc) > store.TRUNCATION_WARN)
    return Curve(run=label, group=arm, x=xs[keep], y=ys[keep], meta=meta), meta


def curves_from_sweep(sweep_dir: Path | str, *, x: str = "gpu_hours", y: str = "val_pass_rate") -> tuple[list[Curve], list[dict[str, Any]]]:
    """Read every run of a sweep directory (`<sweep>/runs/<run_id>/{run.json, metrics.jsonl}`).

    Returns the curves of runs that have metrics, each with meta (run_id, arm_id, label, arm, status,
    baseline, truncation_warning, partial), and a list of the runs that can't be fitted with the reason
    (failed, diverged, no metrics yet). The evaluation at step 0 is the run's R0 point: its compute is 0
    by definition, whatever the clock said.
    """
    sweep_dir = Path(sweep_dir)
    if x not in AXES:
        raise UserError(f"--x {x}: unknown compute axis; valid: {', '.join(AXES)}")
    runs_dir = sweep_dir / "runs"
    if not sweep_dir.is_dir():
        raise UserError(f"{sweep_dir}: no such sweep directory (run `ablate sweep RECIPE` first, or give a CSV/JSONL file)")
    run_dirs = sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
    if not run_dirs:
        raise UserError(f"{sweep_dir}: the sweep has no runs yet (expected {runs_dir}/<run_id>/)")
    curves: list[Curve] = []
    skipped: list[dict[str, Any]] = []
    for rd in run_dirs:
        curve, why = curve_from_run_dir(rd, x=x, y=y)
        if curve is None:
            skipped.append(why)
        else:
            curves.append(curve)
    if not curves:
        reasons = "; ".join(f"{s['label']}: {s['reason']}" for s in skipped[:3])
        raise UserError(f"{sweep_dir}: no run has metrics to fit ({reasons})")
    return curves, skipped


def load_inputs(paths: list[Path], *, x: str = "gpu_hours", y: str = "val_pass_rate", run: str | None = "run",
                group: str | None = None) -> tuple[list[Curve], list[dict[str, Any]]]:
    """Curves from any mix of sweep directories, single run directories and CSV/JSONL files.

    A bare name that is not a file means `sweeps/<name>`. A file's runs form arms by its `group` column
    (else each run is its own arm). With several inputs, arm
    names are prefixed by their input's name so that they stay apart.
    """
    if not paths:
        raise UserError("give a sweep directory (sweeps/NAME), a run directory or a CSV/JSONL file")
    curves: list[Curve] = []
    skipped: list[dict[str, Any]] = []
    for p in paths:
        p = Path(p)
        if not p.exists() and len(p.parts) == 1 and (Path("sweeps") / p).is_dir():
            p = Path("sweeps") / p  # a bare sweep name, as `ablate status NAME` takes
        if p.is_dir() and (p / "runs").is_dir():
            cs, sk = curves_from_sweep(p, x=x, y=y)
        elif p.is_dir() and ((p / "metrics.jsonl").exists() or (p / "run.json").exists()):
            c, why = curve_from_run_dir(p, x=x, y=y)
            if c is None:
                raise UserError(f"{p}: {why['reason']}")
            cs, sk = [c], []
        elif p.is_dir():
            raise UserError(f"{p}: neither a sweep directory (no runs/) nor a run directory (no metrics.jsonl)")
        else:
            cs, sk = load_curves(p, x=x, y=y, run=run, group=group), []
        if len(paths) > 1:
            for c in cs:
                c.group = f"{p.name}:{c.group or c.run}"
        curves += cs
        skipped += sk
    return curves, skipped
