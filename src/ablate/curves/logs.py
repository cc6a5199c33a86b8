"""Training curves from other tools' logs: TensorBoard, W&B (offline runs and CSV exports), TRL and verl.

Each reader (ablate.curves.readers) turns a log into runs, `{run name: {step: {metric: value}}}`; `to_curves` turns
those into `fit.curve.Curve`s for a chosen x and y, one arm per run, and `detect` tells the formats apart by
content. Every bad input is one `UserError` line naming the file (and run, step) and the fix.

The formats, how they are detected, and how steps become compute (`--x step`, `--samples-per-step`,
`--gpu-hours-per-step`): docs/run-directory.md, "Curves from other tools".
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ablate.curves.readers import (
    CONSOLE_STEP,
    TB_PREFIX,
    Runs,
    WrongFormat,
    csv_kind,
    event_files,
    read_tensorboard,
    read_trl,
    read_verl,
    read_wandb_csv,
    trainer_state_file,
    wandb_files,
)
from ablate.curves.tables import VAL_N
from ablate.curves.tracked import Tracked, read_mlflow, read_wandb
from ablate.errors import ErrorKind, UserError
from ablate.fit.curve import Curve, RunFacts
from ablate.storage.reading import MAX_STEP, SCAN_BYTES, check_regular, read_head

FORMATS = ("table", "tensorboard", "wandb", "wandb-csv", "trl", "verl")
FOREIGN = FORMATS[1:]
WHAT = {
    "table": "CSV/JSONL curve table",
    "tensorboard": "TensorBoard log",
    "wandb": "W&B run (.wandb)",
    "wandb-csv": "W&B CSV export",
    "trl": "TRL trainer_state.json",
    "verl": "verl log",
}
STEP_ALIASES = ("_step", "Step", "global_step")
PER_STEP = {"samples": "--samples-per-step", "gpu_hours": "--gpu-hours-per-step"}
"""Compute axes made from steps: the axis, and the option giving its amount per step."""


def _shorten(names: list[str], limit: int = 40) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "") or "(none)"


# ---- detection ----------------------------------------------------------------------------------------------


def _console_lines(p: Path) -> bool:
    """Whether a text file has a verl console line (`step:N - key:value ...`) in its first SCAN_BYTES (read at
    once: a file of one endless line is read no further)."""
    text = read_head(p, SCAN_BYTES).decode("utf-8", errors="replace")
    return any(CONSOLE_STEP.search(ln) for ln in text.splitlines())


def detect(path: Path | str) -> str:
    """The format of a log file or folder (one of FORMATS), told by its content; a UserError when unknown."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file", kind=ErrorKind.FILE)
    if p.is_dir():
        if trainer_state_file(p) is not None:
            return "trl"
        if wandb_files(p):
            return "wandb"
        if event_files(p):
            return "tensorboard"
        raise UserError(
            f"{p}: no curves in this folder: not a sweep (runs/), a run (metrics.jsonl), a TensorBoard "
            "log (events.out.tfevents.*), a W&B folder (offline-run-*/run-*.wandb) or a TRL output "
            "(trainer_state.json)",
            kind=ErrorKind.FILE,
        )
    check_regular(p)  # a device or a pipe is refused before it is opened (its reading would never end)
    if p.name.startswith(TB_PREFIX):
        return "tensorboard"
    head = read_head(p)  # a bounded prefix (reading.DETECT_BYTES)
    if head.startswith(b":W&B"):
        return "wandb"
    text = head.decode("utf-8-sig", errors="replace")
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    suffix = p.suffix.lower()
    if first.lstrip().startswith("{"):
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):  # not JSON, or nested too deeply to be a table's row
            obj = None
        if isinstance(obj, dict):  # one object per line
            if "log_history" in obj:
                return "trl"
            return "verl" if "step" in obj and isinstance(obj.get("data"), dict) else "table"
        if '"log_history"' in text or p.name == "trainer_state.json":
            return "trl"
    elif suffix == ".csv" or "," in first:
        kind = csv_kind(next(csv.reader([first]), []))
        if kind is not None:
            return "wandb-csv"
    if suffix in (".csv", ".jsonl", ".ndjson"):
        return "verl" if any(CONSOLE_STEP.search(ln) for ln in text.splitlines()) else "table"
    if _console_lines(p):  # a console log often opens with long config, Ray and vLLM dumps: read on until a step
        return "verl"
    raise UserError(
        f"{p}: can't tell what this file is: not a CSV/JSONL table, a TensorBoard event file, a W&B run "
        "or CSV export, a TRL trainer_state.json or a verl log; if it is one, pass --from",
        kind=ErrorKind.FILE,
    )


def wrong_format(p: Path, fmt: str, why: str) -> UserError:
    """A forced --from that does not fit the input: say what it looks like instead."""
    try:
        found = detect(p)
    except UserError:
        found = None
    hint = (
        f"it looks like {found}: pass --from {found}, or --from auto"
        if found and found != fmt
        else "check the path, or pass --from auto"
    )
    return UserError(f"{p}: not a {WHAT[fmt]} ({why}); {hint}", kind=ErrorKind.FILE)


# ---- runs -> curves -----------------------------------------------------------------------------------------


def to_curves(
    runs: Runs, source: Path | str, *, x: str, y: str, per_step: dict[str, float] | None = None, fmt: str = ""
) -> list[Curve]:
    """One Curve per run (its own arm): the steps where both x and y are logged and finite, in step order.

    `step` is always a column (also as `_step`, `Step`, `global_step`); `per_step` {axis: amount} adds axis =
    step x amount. A y outside [0, 1], a negative x or an x that does not increase with the steps is a UserError
    naming the file, run and step; so is a run without a single point, listing the metrics it logs.
    """
    x = "step" if x in STEP_ALIASES else x
    per_step = per_step or {}
    if not runs:
        raise UserError(f"{source}: no runs in this {WHAT.get(fmt, 'log')}", kind=ErrorKind.DATA)
    curves = []
    for name, steps in runs.items():
        huge = [s for s in steps if not abs(s) <= MAX_STEP]  # NaN too
        if huge:
            big = "a step too large for a float" if math.isinf(huge[0]) else f"step {huge[0]:g}"
            raise UserError(
                f"{source}: run '{name}' logs {big}, beyond {MAX_STEP:,} (2^53): not a step count; fix "
                "or drop those entries",
                kind=ErrorKind.FILE,
            )
        xs: list[float] = []
        ys: list[float] = []
        ns: list[float] = []  # each pass rate's graded samples, as ablate's runs log them (val_n), else NaN

        def at(step: float, key: str, steps: dict = steps) -> float | None:  # a metric, or a column made from steps
            return step if key == "step" else step * per_step[key] if key in per_step else steps[step].get(key)

        for step in sorted(steps):
            vx, vy = at(step, x), at(step, y)
            if vx is None or vy is None or not (math.isfinite(vx) and math.isfinite(vy)):
                continue
            where = f"{source}: run '{name}' step {int(step) if step.is_integer() else step}"
            if not 0.0 <= vy <= 1.0:
                top = max(s[y] for s in steps.values() if math.isfinite(s.get(y, math.nan)))
                raise UserError(
                    f"{where}: '{y}' is {vy:g}, outside [0, 1]; --y must name a pass rate"
                    + (" (percentages? divide by 100)" if top <= 100 else ""),
                    kind=ErrorKind.FILE,
                )
            if vx < 0:
                raise UserError(
                    f"{where}: '{x}' is {vx:g}, negative; --x must name a compute axis", kind=ErrorKind.FILE
                )
            if xs and vx <= xs[-1]:
                raise UserError(
                    f"{where}: '{x}' does not increase ({vx:g} after {xs[-1]:g}); pass --x step, or "
                    "another compute axis",
                    kind=ErrorKind.FILE,
                )
            xs.append(vx)
            ys.append(vy)
            vn = steps[step].get(VAL_N)
            ns.append(vn if vn is not None and math.isfinite(vn) and vn > 0 else math.nan)
        if not xs:
            raise UserError(_no_points(source, name, steps, x, y, per_step), kind=ErrorKind.DATA)
        n = np.array(ns) if all(math.isfinite(v) for v in ns) else None  # as a sweep's run: all known, or estimated
        curves.append(Curve(run=name, group=name, x=np.array(xs), y=np.array(ys), n=n))
    return _armed(curves, runs) if isinstance(runs, Tracked) else curves


def _armed(curves: list[Curve], runs: Tracked) -> list[Curve]:
    """A tracker copy's runs in the arms their tags name, the baseline arm's seeds marked as a sweep marks them."""
    for c in curves:
        c.group = runs.arms.get(c.run, c.run)
        if c.run in runs.baseline:
            c.facts = RunFacts(run_id=None, arm_id=None, status=None, baseline=True, partial=False)
    return curves


def _no_points(
    source: Path | str, run: str, steps: dict[float, dict[str, float]], x: str, y: str, per_step: dict[str, float]
) -> str:
    names = list(dict.fromkeys(k for s in steps.values() for k in s))
    have = set(names) | {"step"} | set(per_step)
    where = f"{source}: run '{run}'"
    if y not in have:
        return f"{where} does not log '{y}' (--y); it logs: {_shorten(names)}"
    if x not in have:
        return (
            f"{where} does not log '{x}' (--x); it logs: {_shorten(names)}; pass --x step, or make compute from "
            "steps with --samples-per-step or --gpu-hours-per-step"
        )
    return f"{where} never logs a finite '{x}' and '{y}' at the same step; choose another --x (e.g. --x step)"


READERS: dict[str, Callable[[Path], Runs]] = {
    "tensorboard": read_tensorboard,
    "wandb": read_wandb,
    "wandb-csv": read_wandb_csv,
    "trl": read_trl,
    "verl": read_verl,
    "mlflow": read_mlflow,
}


def load(
    path: Path | str,
    fmt: str = "auto",
    *,
    x: str = "gpu_hours",
    y: str = "val_pass_rate",
    per_step: dict[str, float] | None = None,
) -> list[Curve]:
    """Curves from one foreign log (`fmt` one of FOREIGN, or auto: detected)."""
    p = Path(path)
    if fmt == "auto":
        fmt = detect(p)
    if fmt not in READERS:
        raise UserError(f"--from {fmt}: not a log format; valid: {', '.join(FOREIGN)}", kind=ErrorKind.SETTING)
    if not p.exists():
        raise UserError(f"{p}: no such file", kind=ErrorKind.FILE)
    try:
        runs = READERS[fmt](p)
    except WrongFormat as e:
        raise wrong_format(e.path, e.fmt, e.why) from None
    return to_curves(runs, p, x=x, y=y, per_step=per_step, fmt=fmt)
