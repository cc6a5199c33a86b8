"""Readers of other tools' logs: each turns a log into runs, `{run name: {step: {metric: value}}}` (the formats:
ablate.curves.logs). A log that is not what its reader expects raises `WrongFormat`, which `logs.load` words with what
the input looks like instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ablate.curves.tables import number, read_csv
from ablate.errors import ErrorKind, UserError
from ablate.storage import store
from ablate.storage.reading import MAX_STEP, check_size, open_regular, read_head, read_whole, refuse_special

Runs = dict[str, dict[float, dict[str, float]]]
"""run name -> step -> metric -> value (NaN kept: dropped when curves are made)."""

CONSOLE_STEP = re.compile(r"(?<![\w/.-])step:\s*(\d+)\s+-\s+(.*\S)")
_NUMBER = re.compile(r"^(?:np\.\w+\()?([^()]*)\)?$")  # 0.41, or np.float64(0.41) as a newer numpy prints it
TB_PREFIX = "events.out.tfevents"


class WrongFormat(Exception):
    """The input is not the format its reader reads: `fmt`, and `why` not."""

    def __init__(self, path: Path, fmt: str, why: str) -> None:
        super().__init__(f"{path}: not {fmt} ({why})")
        self.path, self.fmt, self.why = path, fmt, why


def _label(p: Path) -> str:
    return p.name or p.resolve().name


# ---- finding the files of a log ----


def event_files(p: Path) -> list[Path]:
    if p.is_file():
        return [p] if p.name.startswith(TB_PREFIX) else []
    return sorted(f for f in p.rglob(TB_PREFIX + "*") if f.is_file())


def wandb_files(p: Path) -> list[Path]:
    """The .wandb files of a run file, a run folder, a wandb/ folder or the folder holding wandb/."""
    if p.is_file():
        return [p] if p.suffix == ".wandb" else []
    for d in (p, p / "wandb"):
        direct = sorted(d.glob("run-*.wandb"))
        if direct:
            return direct
        if d.is_dir():  # the runs' folders; latest-run is a link to one of them
            found = sorted(f for r in d.iterdir() if r.is_dir() and not r.is_symlink() for f in r.glob("run-*.wandb"))
            if found:
                return found
    return []


def trainer_state_file(p: Path) -> Path | None:
    """trainer_state.json of a TRL output folder: its own, else the highest checkpoint's."""
    if (p / "trainer_state.json").is_file():
        return p / "trainer_state.json"
    ckpts = [
        (int(m.group(1)), c)
        for c in p.glob("checkpoint-*/trainer_state.json")
        if (m := re.fullmatch(r"checkpoint-(\d+)", c.parent.name))
    ]
    return max(ckpts)[1] if ckpts else None


def csv_kind(columns: list[str]) -> str | None:
    """'wide' or 'long' for the header of a W&B export, else None."""
    low = {c.strip().lower() for c in columns}
    if low & {"step", "_step"} and any(" - " in c for c in columns):
        return "wide"
    if low & {"run", "name"} and low & {"metric", "key"} and low & {"step", "_step"} and "value" in low:
        return "long"
    return None


# ---- readers ----


def _put(runs: Runs, run: str, step: float, metric: str, value: float) -> None:
    try:
        key = float(step)
    except OverflowError:  # an integer past the floats: to_curves refuses it, naming the run
        key = math.inf
    runs.setdefault(run, {}).setdefault(key, {})[metric] = value


def scalar(v: Any) -> float | None:
    """A logged value as a float, or None when it is not a number (a string, a histogram, a table)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return None


def _step(v: Any) -> float | None:
    """A logged step as a float (an integer past the floats: inf, which to_curves refuses), or None when it is not
    a number."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_STEP:
        return math.inf
    return scalar(v)


def _f32(v: float) -> float:
    """A float32 as the decimal it was written as (0.1, not 0.10000000149011612)."""
    return float(str(np.float32(v)))


def read_tensorboard(p: Path) -> Runs:
    from tensorboard.backend.event_processing import event_accumulator as ea_mod
    from tensorboard.util import tensor_util

    files = event_files(p)
    if not files:
        raise WrongFormat(p, "tensorboard", "no events.out.tfevents.* file" + (" under it" if p.is_dir() else ""))
    if p.is_file():  # one event file: a run named after its folder
        folders = [(p, _label(p.resolve().parent))]
    else:  # each folder holding event files is a run, named by its path under p
        folders = [(d, _label(p) if d == p else d.relative_to(p).as_posix()) for d in sorted({f.parent for f in files})]
    runs: Runs = {}
    for folder, name in folders:
        for f in folder.iterdir() if folder.is_dir() else ():  # tensorboard opens each file named *tfevents*
            if "tfevents" in f.name:
                refuse_special(f)
        ea = ea_mod.EventAccumulator(str(folder), size_guidance={ea_mod.SCALARS: 0, ea_mod.TENSORS: 0})
        try:
            ea.Reload()
        except Exception as e:  # a torn or foreign file: tensorboard raises its own errors
            raise UserError(
                f"{folder}: can't read the TensorBoard events ({type(e).__name__}: {e})", kind=ErrorKind.FILE
            ) from None
        tags = ea.Tags()
        runs.setdefault(name, {})
        for tag in tags.get("scalars", []):
            for ev in ea.Scalars(tag):
                _put(runs, name, ev.step, tag, _f32(ev.value))
        for tag in tags.get("tensors", []):
            if ea.SummaryMetadata(tag).plugin_data.plugin_name not in ("scalars", ""):
                continue  # text, histograms, hparams, ...: not curves
            for ev in ea.Tensors(tag):
                try:
                    a = tensor_util.make_ndarray(ev.tensor_proto)
                except Exception:  # a tensor of a type numpy has no dtype for: not a scalar anyway
                    break
                if a.size != 1 or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
                    break  # not a scalar
                v = a.reshape(())
                _put(runs, name, ev.step, tag, _f32(v) if a.dtype == np.float32 else float(v))
    return runs


def read_wandb_csv(p: Path) -> Runs:

    if p.is_dir():
        raise WrongFormat(p, "wandb-csv", "a folder")
    check_size(p, "a W&B CSV export")
    columns, rows = read_csv(p)
    kind = csv_kind(columns)
    if kind is None:
        raise WrongFormat(
            p, "wandb-csv", "its header has neither `Step` and `<run> - <metric>` columns nor run, metric, step, value"
        )
    col = {c.strip().lower(): c for c in columns}
    runs: Runs = {}
    if kind == "wide":
        step_col = col.get("step") or col["_step"]
        series = [(c, *c.rsplit(" - ", 1)) for c in columns if " - " in c and not c.endswith(("__MIN", "__MAX"))]
        for ln, r in rows:
            step = number(f"{p} line {ln}", step_col, r.get(step_col))
            if math.isnan(step):
                continue
            for c, run, metric in series:
                v = number(f"{p} line {ln}", c, r.get(c))  # an empty cell: not logged at this step (NaN)
                if not math.isnan(v):
                    _put(runs, run.strip(), step, metric.strip(), v)
        return runs
    run_col, metric_col = col.get("run") or col["name"], col.get("metric") or col["key"]
    step_col, value_col = col.get("step") or col["_step"], col["value"]
    for ln, r in rows:
        where = f"{p} line {ln}"
        step, v = number(where, step_col, r.get(step_col)), number(where, value_col, r.get(value_col))
        if math.isnan(step) or math.isnan(v):
            continue
        run, metric = (r.get(run_col) or "").strip(), (r.get(metric_col) or "").strip()
        if not (run and metric):
            raise UserError(
                f"{where}: no value in column '{run_col if not run else metric_col}'; fill it in, or drop the row",
                kind=ErrorKind.FILE,
            )
        _put(runs, run, step, metric, v)
    return runs


def read_trl(p: Path) -> Runs:
    state = trainer_state_file(p) if p.is_dir() else p
    if state is None:
        raise WrongFormat(p, "trl", "no trainer_state.json in it or in a checkpoint-*/ folder")
    try:
        doc = json.loads(read_whole(state, "a trainer_state.json").decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise UserError(f"{state}: not UTF-8 text; is it a trainer_state.json?", kind=ErrorKind.FILE) from None
    except ValueError as e:
        raise WrongFormat(state, "trl", f"not valid JSON: {str(e).split(':')[0]}") from None
    except RecursionError:
        raise WrongFormat(state, "trl", "JSON nested too deeply") from None
    history = doc.get("log_history") if isinstance(doc, dict) else None
    if not isinstance(history, list):
        raise WrongFormat(state, "trl", "no log_history list")
    out = state.parent.parent if re.fullmatch(r"checkpoint-\d+", state.parent.name) else state.parent
    name = _label(out)
    runs: Runs = {name: {}}
    for entry in history:
        step = _step(entry.get("step")) if isinstance(entry, dict) else None
        if step is None:
            continue
        for k, v in entry.items():
            if k != "step" and (fv := scalar(v)) is not None:
                _put(runs, name, step, k, fv)
    return runs


def read_verl(p: Path) -> Runs:
    if p.is_dir():
        raise WrongFormat(p, "verl", "a folder")
    name = p.stem
    runs: Runs = {name: {}}
    check_size(p, "a verl log")
    if read_head(p, 1 << 12).lstrip().startswith(b"{"):  # the file logger's JSONL
        for ln, rec in store.jsonl_rows(p):
            data, step = rec.get("data"), _step(rec.get("step"))
            if not isinstance(data, dict) or step is None:
                raise WrongFormat(p, "verl", f'line {ln} is not {{"step": N, "data": {{...}}}}')
            for k, v in data.items():
                if (fv := scalar(v)) is not None:
                    _put(runs, name, step, k, fv)
        return runs
    matched = False
    for line in _text_lines(p):
        m = CONSOLE_STEP.search(line)
        if not m:
            continue
        matched = True
        for pair in m.group(2).split(" - "):
            k, _, v = pair.rpartition(":")
            num = _NUMBER.match(v.strip())
            try:
                fv = float(num.group(1)) if num and k.strip() else None
            except ValueError:
                fv = None
            if fv is not None:
                digits = m.group(1)  # int() refuses 4,300 digits or more: past MAX_STEP anyway
                _put(runs, name, int(digits) if len(digits) <= 20 else math.inf, k.strip(), fv)
    if not matched:
        raise WrongFormat(p, "verl", "no line like `step:N - metric:value`")
    return runs


def _text_lines(p: Path) -> Iterator[str]:
    """The lines of a text file (bad bytes replaced), read a line at a time: as `str.splitlines` cuts them (at a
    carriage return too), each held only while it is looked at."""
    with open_regular(p) as f:
        for i, raw in enumerate(f):
            yield from raw.decode("utf-8-sig" if i == 0 else "utf-8", errors="replace").splitlines()
