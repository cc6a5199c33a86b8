"""Training curves from disk: CSV/JSONL files, run directories and sweep directories, read into `fit.curve.Curve`s
(other tools' logs: `ablate.logs`).

The fitting core (`ablate.fit`) takes arrays; this module is where files are read and every kind of bad input
becomes one `UserError` line naming the file, the line and the fix. Run directories are read through
`ablate.rundir.RunDir` only (run.json via `.info()`, metrics.jsonl via `.metric_lines()`).

    load_curves(path, x=, y=, run=, group=)     one CSV/JSONL file, one row per (run, evaluation) -> [Curve]
    curve_from_run_dir(run_dir, x=, y=)         one run directory -> (Curve or None, meta with the reason)
    curves_from_sweep(sweep_dir, x=, y=)        every run of a sweep -> ([Curve], [runs not fitted, with why])
    load_inputs(paths, x=, y=, run=, group=,    any mix of the three and other tools' logs (`ablate.logs`)
                fmt=, per_step=)                -> ([Curve], [runs not fitted])
    write_csv(curves, path, x=, y=)             curves as a long CSV that `load_curves` reads back
"""

from __future__ import annotations

import csv
import functools
import io
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ablate import store
from ablate.compose import check_yaml
from ablate.errors import UserError
from ablate.fit.curve import Curve
from ablate.identity import arm_id, run_id
from ablate.rundir import COMPUTE_AXES, TRUNCATION_WARN, RunDir, RunInfo

VAL_N = "val_n"
"""The column / metric holding each pass rate's graded-sample count (optional)."""
PARTIAL = ("pending", "running", "preempted")  # a run that may still add points
ENDED_BADLY = ("failed", "diverged")


def _fmt_lines(lines: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(n) for n in lines[:limit])
    return shown + (f" and {len(lines) - limit} more" if len(lines) > limit else "")


def _read_csv(path: Path) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    # Decoded whole, not streamed, so that a bad byte can be named by its line; utf-8-sig drops the BOM a
    # spreadsheet may write (it would otherwise glue itself to the first column's name).
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x} at column {col}); "
                        "save the file as UTF-8") from None
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


def _read_rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    """Rows with their 1-based line numbers in the file, and the column names seen."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory; give a CSV or JSONL file (or use `ablate rank` on a sweep)")
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".ndjson"):
        raise UserError(f"{path}: unsupported format '{suffix or '(none)'}'; use a .csv or .jsonl file")
    try:
        columns, rows = _read_csv(path) if suffix == ".csv" else _read_jsonl(path)
    except OSError as e:
        raise UserError(f"{path}: can't read the file ({e.strerror or e})") from None
    if not rows:
        raise UserError(f"{path}: no data rows")
    return columns, rows


def _number(where: str, col: str, v: Any) -> float:
    """A value of a numeric column as a float (missing/empty/"nan" -> NaN); `where` is "path line N"."""
    if isinstance(v, bool):
        raise UserError(f"{where}: {v!r} in column '{col}' is not a number")
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:  # JSON integers are unbounded; a float stops near 1.8e308
            raise UserError(f"{where}: the integer in column '{col}' ({v.bit_length()} bits) is too large "
                            "to be a compute or a pass rate; fix that value") from None
    if isinstance(v, float):
        return v
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "nan", "null", "none")):
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        raise UserError(f"{where}: {_show(v)} in column '{col}' is not a number") from None


def _show(v: Any, limit: int = 40) -> str:
    """A value as a short one-line quote for a message (a nested list would be printed whole, or not at all)."""
    if isinstance(v, (list, dict)):
        return f"a JSON {'list' if isinstance(v, list) else 'object'}"
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "…"


def _name(where: str, col: str, flag: str, v: Any) -> str:
    """A value of the run or group column as a name."""
    if v is None or (isinstance(v, str) and not v.strip()):
        raise UserError(f"{where}: no value in the {flag[2:]} column '{col}'; fill it in, or choose the column with {flag}")
    if isinstance(v, (list, dict)):
        raise UserError(f"{where}: {_show(v)} in the {flag[2:]} column '{col}' is not a name; "
                        f"choose the column with {flag}")
    return str(v)


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
    columns, rows = _read_rows(path)
    for col, flag in ((x, "--x"), (y, "--y")) + (((group, "--group"),) if group else ()):
        if col not in columns:
            raise UserError(f"{path}: no column '{col}'; columns are: {', '.join(columns)} (choose with {flag})")
    if run is not None and run not in columns:
        if run != "run":
            raise UserError(f"{path}: no column '{run}'; columns are: {', '.join(columns)} (choose with --run)")
        run = None  # the default run column is optional: one curve per file

    xs = np.array([_number(f"{path} line {ln}", x, r.get(x)) for ln, r in rows])
    ys = np.array([_number(f"{path} line {ln}", y, r.get(y)) for ln, r in rows])
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
    ns = None
    if VAL_N in columns:  # graded samples behind each pass rate: the evaluation noise is then known, not estimated
        ns = np.array([_number(f"{path} line {ln}", VAL_N, r.get(VAL_N)) for ln, r in rows])
        if not np.all(np.isfinite(ns) & (ns > 0)):
            ns = None

    members: dict[str, list[int]] = {}  # run -> row indices, in order of first appearance
    groups: dict[str, tuple[str | None, int]] = {}  # run -> (group, line it was first seen on)
    for i, (ln, r) in enumerate(rows):
        where = f"{path} line {ln}"
        key = _name(where, run, "--run", r.get(run)) if run is not None else path.stem
        g = _name(where, group, "--group", r.get(group)) if group else None
        if key not in members:
            members[key] = []
            groups[key] = (g, ln)
        elif g != groups[key][0]:
            raise UserError(f"{where}: run '{key}' has {group} '{g}' here but '{groups[key][0]}' on line "
                            f"{groups[key][1]}; a run belongs to one {group}: fix the rows, or check --run and --group")
        members[key].append(i)
    curves = []
    for key, idx in members.items():
        idx = np.array(idx)
        cx, cy = xs[idx], ys[idx]
        steps = np.nonzero(np.diff(cx) <= 0)[0]
        if steps.size:
            k = steps[0]
            raise UserError(
                f"{path} line {lines[idx[k + 1]]}: compute '{x}' does not increase in run '{key}' "
                f"({cx[k + 1]:g} after {cx[k]:g}); sort the rows by compute, or name the run column with --run"
            )
        curves.append(Curve(run=key, group=groups[key][0], x=cx, y=cy, n=None if ns is None else ns[idx]))
    return curves


def _metric(rd: RunDir, line: int, name: str, v: Any) -> float:
    """The value of a metric on line `line` of metrics.jsonl, as a float; a UserError naming the line otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UserError(f"{rd.metrics_path}:{line}: '{name}' is {'null' if v is None else _show(v)}, not a number; "
                        "fix or delete that line")
    try:
        return float(v)
    except OverflowError:
        raise UserError(f"{rd.metrics_path}:{line}: '{name}' is too large to be a number; fix that line") from None


def _metric_names(recs: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for r in recs for k in r))


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SEED_LINE = re.compile(r"^seed:[^\n]*(?:\n|$)", re.M)  # the top-level seed (nested keys are indented)


class _BadYaml(Exception):
    def __init__(self, line: int | None) -> None:
        self.line = line


def _load_mapping(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise _BadYaml(None if mark is None else mark.line + 1) from None


@functools.lru_cache(maxsize=4096)
def _arm_of_text(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """A config.yaml's text without its seed line: (the config without its seed, its arm id), or (None, None) when
    it is not a mapping. The seeds of an arm share it, so a sweep parses and hashes each arm once."""
    cfg = _load_mapping(text)
    return (cfg, arm_id(cfg)) if isinstance(cfg, dict) and "seed" not in cfg else (None, None)


def _ids_of_text(text: str) -> tuple[str, str, Any] | None:
    m = _SEED_LINE.search(text)
    if m is not None:
        seed_doc = _load_mapping(m.group(0))
        arm_cfg, aid = _arm_of_text(text[:m.start()] + text[m.end():])
        if arm_cfg is not None and isinstance(seed_doc, dict) and set(seed_doc) == {"seed"}:
            cfg = {**arm_cfg, "seed": seed_doc["seed"]}
            return run_id(cfg), str(aid), cfg["seed"]
    cfg = _load_mapping(text)  # no top-level seed line, or one that does not stand alone: the whole file
    if not isinstance(cfg, dict):
        return None
    return run_id(cfg), arm_id(cfg), cfg.get("seed")


def config_ids(rd: RunDir) -> tuple[str, str, Any] | None:
    """(run_id, arm_id, seed) of the config in a run directory's config.yaml, or None when it has none (a pending
    run, another tool's run directory).

    Hashed as written, not validated again: config.yaml is the resolved config the run was validated and launched
    with (the trainer writes it from the validated config), and its hash is the id the run got at launch (the
    trainer's own check that a directory holds one config hashes it the same way). Validating it again would fill
    in fields the schema gained since and refuse fields it dropped, and so turn an old run's ids into others. Cost:
    the C YAML loader and the hash take about 1.5 ms a config; the seeds of an arm differ in their seed line only,
    so each arm is parsed and hashed once (`_arm_of_text`): a 1,000-run sweep of 4 seeds an arm loads about a
    second slower (measured: 2.3 s for 1,000 configs on 2 busy cores). Composing each run with Hydra instead would
    take minutes."""
    path = rd.config_path
    try:
        with store.safe_open(rd.at(path), "rb") as f:  # no link followed, as for the run's other files
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except UserError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: can't read the run's config ({getattr(e, 'strerror', None) or type(e).__name__}); "
                        "restore it or move the run directory out of the sweep") from None
    try:
        if "*" in text:  # an alias (the trainer writes none): no expanding a planted alias bomb
            check_yaml(text, str(path))
        ids = _ids_of_text(text)
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be a run config; restore it or move the run directory out of "
                        "the sweep") from None
    except (_BadYaml, yaml.YAMLError) as e:
        line = getattr(e, "line", None)
        raise UserError(f"{path}{'' if line is None else f':{line}'}: not valid YAML; restore the run's config "
                        "or move the run directory out of the sweep") from None
    if ids is None:
        raise UserError(f"{path}: not a run config (a YAML mapping); restore it or move the run directory out of "
                        "the sweep")
    return ids


def _check_ids(rd: RunDir, info: RunInfo, ids: tuple[str, str, Any]) -> None:
    """A run.json that disagrees with its run's config.yaml (edited, or copied from another run) is refused: its
    label would put the run's curve into another arm, or count it as another seed."""
    cfg_run, cfg_arm, cfg_seed = ids
    fix = "restore its run.json, or move the directory out of the sweep"
    said = info.raw.get("arm_id")
    if isinstance(said, str) and said != cfg_arm:
        raise UserError(f"{rd.path}: run.json says arm {said} ({info.label or 'no label'}) but its config.yaml is arm "
                        f"{cfg_arm}; {fix}")
    said = info.raw.get("run_id")
    if isinstance(said, str) and said != cfg_run:
        raise UserError(f"{rd.path}: run.json says run {said} ({info.label or 'no label'}) but its config.yaml is run "
                        f"{cfg_run}; {fix}")
    seeds = [p.split("=", 1)[1].strip() for p in info.label.split(",") if p.strip().startswith("seed=")]
    if seeds and not (isinstance(cfg_seed, int) and not isinstance(cfg_seed, bool) and seeds[-1] == str(cfg_seed)):
        raise UserError(f"{rd.path}: run.json labels it {info.label!r} but its config.yaml has seed={cfg_seed}; {fix}")


def curve_from_run_dir(run_dir: RunDir | Path | str, *, x: str = "gpu_hours",
                       y: str = "val_pass_rate") -> tuple[Curve | None, dict[str, Any]]:
    """One run directory's curve with its meta, or (None, meta with the `reason` it can't be fitted).

    meta: run_id, arm_id, label, arm, status, baseline, partial (the run may still add points) and, for a
    curve, truncation_warning and end (each compute axis the run logged at its last point). arm_id is the hash of the run's config.yaml when it has one (a run.json that
    disagrees with it is a UserError naming the directory), else what run.json says. The evaluation at step 0 is
    the run's R0 point: its compute is 0 by definition, whatever the clock said. Non-finite values are dropped; a
    null or a string in x or y is a UserError.
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    info = rd.info()
    ids = config_ids(rd)
    if ids is not None:
        _check_ids(rd, info, ids)
    label = info.label or rd.path.name
    meta: dict[str, Any] = {"run_id": info.run_id, "arm_id": info.arm_id if ids is None else ids[1], "label": label,
                            "arm": info.arm if info.label else label, "status": info.status,
                            "baseline": info.baseline, "partial": info.status in PARTIAL}
    if info.status in ENDED_BADLY:
        return None, {**meta, "reason": info.why()}
    lines = rd.metric_lines()
    recs = [r for _, r in lines]
    if not recs:
        return None, {**meta, "reason": f"no metrics yet ({rd.metrics_path})"}
    for name, flag in ((y, "--y"), (x, "--x")):
        if not any(name in r for r in recs):
            present = _metric_names(recs)
            return None, {**meta, "_missing": (name, flag, present),
                          "reason": f"the metric '{name}' is not in {rd.metrics_path}; it has: {', '.join(present)} "
                                    f"(choose with {flag})"}
    xs, ys, rec_index, ns = [], [], [], []
    for ln, r in lines:
        if y not in r or (x not in r and r.get("step") != 0):
            continue  # not an evaluation record
        ys.append(_metric(rd, ln, y, r[y]))
        xs.append(0.0 if r.get("step") == 0 else _metric(rd, ln, x, r[x]))
        rec_index.append(ln)
        v = r.get(VAL_N)
        ns.append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else np.nan)
    xa, ya, na, la = np.array(xs), np.array(ys), np.array(ns), np.array(rec_index)
    for vals, bad, what in ((ya, (ya < 0) | (ya > 1), f"'{y}' is outside [0, 1]; --y must name a pass rate"),
                            (xa, xa < 0, f"'{x}' is negative; --x must name a compute axis")):
        if bad.any():  # NaN compares False: dropped below, as a run may log one when it diverges
            k = int(np.argmax(bad))
            raise UserError(f"{rd.metrics_path}:{rec_index[k]}: {vals[k]:g} in {what}")
    ok = np.isfinite(xa) & np.isfinite(ya)
    order = np.argsort(xa[ok], kind="stable")
    xa, ya, na, la = xa[ok][order], ya[ok][order], na[ok][order], la[ok][order]
    if xa.size == 0:
        return None, {**meta, "reason": f"no evaluation with a finite '{x}' and '{y}' yet ({rd.metrics_path})"}
    keep = np.concatenate([[True], np.diff(xa) > 0])  # a resumed run never logs a step twice; be safe
    trunc = [r["truncation_rate"] for r in recs
             if isinstance(r.get("truncation_rate"), (int, float)) and not isinstance(r.get("truncation_rate"), bool)]
    meta["truncation_warning"] = info.truncation_warning or (bool(trunc) and max(trunc) > TRUNCATION_WARN)
    meta["end"] = _compute_at(dict(lines)[int(la[keep][-1])])
    n = na[keep] if np.all(np.isfinite(na[keep])) else None  # older runs did not log val_n: estimated then
    return Curve(run=label, group=meta["arm"], x=xa[keep], y=ya[keep], meta=meta, n=n), meta


def _compute_at(rec: dict[str, Any]) -> dict[str, float]:
    """Every compute axis a metrics record logs, as floats: what the run had spent at that evaluation on each axis
    (defaults.wall_clock_note compares the seeds' gpu_hours per sample at their last point)."""
    return {a: float(rec[a]) for a in COMPUTE_AXES
            if isinstance(rec.get(a), (int, float)) and not isinstance(rec.get(a), bool) and math.isfinite(rec[a])}


def recorded_devices(paths: list[Path]) -> list[str | None] | None:
    """The device each run of these inputs trained on, as its run.json records it (the trainer writes `device`,
    e.g. "cpu" or "cuda:0", when it starts; None for a run that has not started). None when an input is not a
    sweep or run directory (a table or another tool's log records no device)."""
    devices: list[str | None] = []
    for p in (_bare_sweep(Path(p)) for p in paths):
        if p.is_dir() and _is_sweep(p):
            runs = sorted(r for r in (p / "runs").iterdir() if r.is_dir())
        elif p.is_dir() and _is_run_dir(p):
            runs = [p]
        else:
            return None
        for r in runs:
            d = RunDir(r).info().raw.get("device")
            devices.append(d if isinstance(d, str) else None)
    return devices


def curves_from_sweep(sweep_dir: Path | str, *, x: str = "gpu_hours",
                      y: str = "val_pass_rate") -> tuple[list[Curve], list[dict[str, Any]]]:
    """Read every run of a sweep directory (`<sweep>/runs/<run_id>/`).

    Returns the curves of runs that have metrics (meta as in `curve_from_run_dir`), and the runs that can't be
    fitted, each a meta dict with its `reason` (failed, diverged, no metrics yet, metric not logged).
    """
    sweep_dir = Path(sweep_dir)
    if x not in COMPUTE_AXES:
        raise UserError(f"--x {x}: unknown compute axis; valid: {', '.join(COMPUTE_AXES)}")
    runs_dir = sweep_dir / "runs"
    if not sweep_dir.is_dir():
        raise UserError(f"{sweep_dir}: no such sweep directory (run `ablate sweep RECIPE` first, or give a CSV/JSONL file)")
    run_dirs = sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
    if not run_dirs:
        raise UserError(f"{sweep_dir}: the sweep has no runs yet (expected {runs_dir}/<run_id>/)")
    curves: list[Curve] = []
    skipped: list[dict[str, Any]] = []
    missing = []
    labelled: list[tuple[Path, Curve]] = []
    for p in run_dirs:
        curve, why = curve_from_run_dir(RunDir(p), x=x, y=y)
        if curve is not None:
            curves.append(curve)
            if curve.run != p.name:  # a run with a label (one without is named after its directory)
                labelled.append((p, curve))
            continue
        if "_missing" in why:
            missing.append(why.pop("_missing"))
        skipped.append(why)
    if not curves and missing:  # the metric's name is wrong, not the runs: say so once
        name, flag, _ = missing[0]
        present = list(dict.fromkeys(k for *_, names in missing for k in names))
        raise UserError(f"{sweep_dir}: no run logs the metric '{name}' ({flag}); its runs' metrics are: "
                        f"{', '.join(present)}")
    if not curves:
        reasons = "; ".join(f"{s['label']}: {s['reason']}" for s in skipped[:3])
        raise UserError(f"{sweep_dir}: no run has metrics to fit ({reasons})")
    _arms_by_config(labelled)
    return curves, skipped


def _arms_by_config(runs: list[tuple[Path, Curve]]) -> None:
    """Make a sweep's arms its configs (arm ids), not its labels: curves' `group` (and `run`) renamed in place.

    One config under two labels (a run.json edited, or a label copied from another run) is refused in one line
    naming the run whose label most of the config's runs do not carry. One label over several configs (the recipe or
    a command-line override changed between two launches of the sweep: the same arm name, other runs) keeps them
    apart as `<label>@<arm id>`, each with its own seeds: they are different arms, and one could be better. Runs
    with no label of their own (named after their directory) are left as they are, each its own arm."""
    by_id: dict[str, list[tuple[Path, Curve]]] = {}
    for p, c in runs:
        if c.meta.get("arm_id"):
            by_id.setdefault(c.meta["arm_id"], []).append((p, c))
    for aid, members in by_id.items():
        labels: dict[frozenset[str], list[tuple[Path, Curve]]] = {}
        for p, c in members:  # a label's parts in any order name one arm, as a sweep's baseline does
            labels.setdefault(frozenset(str(c.group).split(",")), []).append((p, c))
        if len(labels) > 1:
            ranked = sorted(labels.values(), key=lambda m: (-len(m), str(m[0][0])))
            (p0, c0), (p1, c1) = ranked[0][0], ranked[1][0]
            raise UserError(f"{p1}: run.json labels it {c1.run!r}, but its config.yaml is arm {aid}, whose run "
                            f"{p0.name} is labelled {c0.run!r}; one config is one arm: fix the label in run.json, "
                            "or move the run directory out of the sweep")
        name = members[0][1].group
        for _, c in members:
            c.group = name
    ids_of: dict[str, set[str]] = {}
    for _, c in runs:
        ids_of.setdefault(str(c.group), set()).add(c.meta.get("arm_id") or "")
    for _, c in runs:
        aid = c.meta.get("arm_id")
        if aid and len(ids_of[str(c.group)]) > 1:
            c.group, c.run = f"{c.group}@{aid[:8]}", f"{c.run}@{aid[:8]}"


def _is_run_dir(p: Path) -> bool:
    rd = RunDir(p)
    return rd.metrics_path.exists() or rd.info_path.exists()


def _is_sweep(p: Path) -> bool:
    """A sweep directory: runs/ with a ledger or a run directory in it (a TRL output's runs/ holds TensorBoard
    logs instead), or with nothing else to read the folder as."""
    runs = p / "runs"
    if not runs.is_dir():
        return False
    if (p / "ledger.jsonl").exists() or any(_is_run_dir(r) for r in runs.iterdir() if r.is_dir()):
        return True
    from ablate import logs

    try:
        logs.detect(p)
    except UserError:
        return True
    return False


def load_inputs(paths: list[Path], *, x: str = "gpu_hours", y: str = "val_pass_rate", run: str | None = "run",
                group: str | None = None, fmt: str = "auto",
                per_step: dict[str, float] | None = None) -> tuple[list[Curve], list[dict[str, Any]]]:
    """Curves from any mix of sweep directories, single run directories, CSV/JSONL files and other tools' logs.

    A bare name that is not a file means `sweeps/<name>`. A file's runs form arms by its `group` column
    (else each run is its own arm); so does each run of a foreign log (`ablate.logs`: TensorBoard, W&B, TRL,
    verl), read when `fmt` names its format or, with `auto`, when it is detected. `per_step` ({"samples": S,
    "gpu_hours": H}) makes compute from a foreign log's steps; sweeps, run directories and tables log their own.
    With several inputs, arm names are prefixed by their input's name (`input_names`: distinct inputs get distinct
    names) so that they stay apart. Returns the curves and the runs that can't be fitted (see `curves_from_sweep`).
    """
    from ablate import logs

    if not paths:
        raise UserError("give a sweep directory (sweeps/NAME), a run directory, a CSV/JSONL file or a log "
                        "(TensorBoard, W&B, TRL, verl)")
    if fmt != "auto" and fmt not in logs.FORMATS:
        raise UserError(f"--format {fmt}: unknown; valid: auto, {', '.join(logs.FORMATS)}")
    per_step = {k: v for k, v in (per_step or {}).items() if v is not None}
    for axis, v in per_step.items():
        if not (math.isfinite(v) and v > 0):
            raise UserError(f"{logs.PER_STEP[axis]} {v:g}: the {axis} of one step, a number > 0")
    curves: list[Curve] = []
    skipped: list[dict[str, Any]] = []
    paths = [_bare_sweep(Path(p)) for p in paths]
    names = input_names(paths)
    for p, name in zip(paths, names):
        ours = "sweep" if p.is_dir() and _is_sweep(p) else "run" if p.is_dir() and _is_run_dir(p) else None
        kind = ours if fmt == "auto" and ours else fmt if fmt != "auto" else logs.detect(p)
        if ours and kind != ours:
            raise UserError(f"{p}: a {ours} directory, read as such: drop --format {fmt}")
        if per_step and kind not in logs.FOREIGN:
            flag = logs.PER_STEP[next(iter(per_step))]
            raise UserError(f"{flag}: {p} is a {'CSV/JSONL table' if kind == 'table' else kind + ' directory'}, "
                            "which logs its compute (gpu_hours, samples, ...): drop it, or choose the column with --x")
        if kind in logs.FOREIGN and (group is not None or run != "run"):
            raise UserError(f"{'--group' if group is not None else '--run'}: {p} is a {kind} log, whose runs are "
                            "its arms; --run and --group name columns of CSV/JSONL tables: drop it")
        if kind == "sweep":
            cs, sk = curves_from_sweep(p, x=x, y=y)
        elif kind == "run":
            if x not in COMPUTE_AXES:
                raise UserError(f"--x {x}: unknown compute axis; valid: {', '.join(COMPUTE_AXES)}")
            c, why = curve_from_run_dir(RunDir(p), x=x, y=y)
            if c is None:
                raise UserError(f"{p}: {why['reason']}")
            cs, sk = [c], []
        elif kind == "table":
            cs, sk = load_curves(p, x=x, y=y, run=run, group=group), []
        else:
            cs, sk = logs.load(p, kind, x=x, y=y, per_step=per_step), []
        if len(paths) > 1:
            for c in cs:
                c.group = f"{name}:{c.group or c.run}"
        curves += cs
        skipped += sk
    return curves, skipped


def _bare_sweep(p: Path) -> Path:
    if not p.exists() and len(p.parts) == 1 and (Path("sweeps") / p).is_dir():
        return Path("sweeps") / p  # a bare sweep name, as `ablate status NAME` takes
    return p


def input_names(paths: list[Path]) -> list[str]:
    """The name each input's arms are prefixed with when several are read together: its file or directory name,
    or, where two inputs share that name (`a/sweeps/loss` and `b/sweeps/loss`, `x/curves.csv` and
    `y/curves.csv`), the shortest end of its path that no other input shares (`a/sweeps/loss`, `x/curves.csv`).

    Kept apart rather than refused: the same sweep under two roots (two clusters, a copy before and after a change)
    is what a practitioner puts side by side, and renaming a sweep directory to compare it would part it from the
    name its runs record. Merged, two sweeps' seeds would pool into one arm: their spread, not their difference,
    would decide its verdict. One input given twice (the same file or directory by two paths) is refused, as its
    runs would count twice as seeds."""
    if len(paths) < 2:
        return [p.name for p in paths]
    seen: dict[Path, Path] = {}
    for p in paths:
        real = p.resolve()
        if real in seen:
            raise UserError(f"{p}: given twice (also as {seen[real]}); its runs would count twice: give it once")
        seen[real] = p
    parts = [Path(os.path.abspath(p)).parts for p in paths]
    names = []
    for i, own in enumerate(parts):
        k = 1
        while k < len(own) and any(o[-k:] == own[-k:] for j, o in enumerate(parts) if j != i):
            k += 1
        names.append(Path(*own[-k:]).as_posix())
    return names


def write_csv(curves: list[Curve], path: Path | str, *, x: str = "gpu_hours", y: str = "val_pass_rate") -> None:
    """Write curves as a long CSV: run, group, x, y, and val_n when every curve knows it (labels like
    `loss=dapo,seed=0` are quoted)."""
    with_n = all(c.n is not None and len(c.n) == len(c.x) for c in curves)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["run", "group", x, y] + ([VAL_N] if with_n else []))
        for c in curves:
            for i, (xi, yi) in enumerate(zip(c.x, c.y)):
                w.writerow([c.run, c.group or c.run, f"{xi:.6g}", f"{yi:.6g}"] + ([f"{c.n[i]:g}"] if with_n else []))
