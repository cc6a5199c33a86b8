"""One run directory's curve: metrics.jsonl read through `ablate.storage.rundir.RunDir`, its arm told by the hash of its
config.yaml, and a run.json that disagrees with that config refused (why: docs/security.md).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ablate.compose.safe_yaml import check_yaml
from ablate.config.identity import arm_id, label_seed, run_id
from ablate.curves.tables import VAL_N, show
from ablate.errors import ErrorKind, UserError
from ablate.fit.curve import Curve, NotFitted, RunFacts
from ablate.states import STOPPED, RunState
from ablate.storage import fs
from ablate.storage.metricsfile import COMPUTE_AXES, TRUNCATION_WARN
from ablate.storage.rundir import RunDir
from ablate.storage.runinfo import RunInfo

PARTIAL = frozenset({RunState.PENDING, RunState.RUNNING, RunState.PREEMPTED})
"""States of a run that may still add points."""
ENDED_BADLY = frozenset({RunState.FAILED, RunState.DIVERGED})
"""States of a run whose curve is not fitted."""


def _metric(rd: RunDir, line: int, name: str, v: Any) -> float:
    """The value of a metric on line `line` of metrics.jsonl, as a float; a UserError naming the line otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UserError(
            f"{rd.metrics_path}:{line}: '{name}' is {'null' if v is None else show(v)}, not a number; "
            "fix or delete that line",
            kind=ErrorKind.FILE,
        )
    try:
        return float(v)
    except OverflowError:
        raise UserError(
            f"{rd.metrics_path}:{line}: '{name}' is too large to be a number; fix that line", kind=ErrorKind.FILE
        ) from None


def _metric_names(recs: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for r in recs for k in r))


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SEED_LINE = re.compile(r"^seed:[^\n]*(?:\n|$)", re.M)  # the top-level seed (nested keys are indented)


class _BadYaml(Exception):
    def __init__(self, line: int | None) -> None:
        self.line = line


def _load_mapping(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 (the loader is PyYAML's (C)SafeLoader)
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
        arm_cfg, aid = _arm_of_text(text[: m.start()] + text[m.end() :])
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
        with fs.safe_open(rd.at(path), "rb") as f:  # no link followed, as for the run's other files
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except UserError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(
            f"{path}: can't read the run's config ({getattr(e, 'strerror', None) or type(e).__name__}); "
            "restore it or move the run directory out of the sweep",
            kind=ErrorKind.FILE,
        ) from None
    try:
        if "*" in text:  # an alias (the trainer writes none): no expanding a planted alias bomb
            check_yaml(text, str(path))
        ids = _ids_of_text(text)
    except RecursionError:
        raise UserError(
            f"{path}: nested too deeply to be a run config; restore it or move the run directory out of the sweep",
            kind=ErrorKind.FILE,
        ) from None
    except (_BadYaml, yaml.YAMLError) as e:
        line = getattr(e, "line", None)
        raise UserError(
            f"{path}{'' if line is None else f':{line}'}: not valid YAML; restore the run's config "
            "or move the run directory out of the sweep",
            kind=ErrorKind.FILE,
        ) from None
    if ids is None:
        raise UserError(
            f"{path}: not a run config (a YAML mapping); restore it or move the run directory out of the sweep",
            kind=ErrorKind.FILE,
        )
    return ids


def _check_ids(rd: RunDir, info: RunInfo, ids: tuple[str, str, Any]) -> None:
    """A run.json that disagrees with its run's config.yaml (edited, or copied from another run) is refused: its
    label would put the run's curve into another arm, or count it as another seed."""
    cfg_run, cfg_arm, cfg_seed = ids
    fix = "restore its run.json, or move the directory out of the sweep"
    said = info.raw.get("arm_id")
    if isinstance(said, str) and said != cfg_arm:
        raise UserError(
            f"{rd.path}: run.json says arm {said} ({info.label or 'no label'}) but its config.yaml is arm "
            f"{cfg_arm}; {fix}",
            kind=ErrorKind.FILE,
        )
    said = info.raw.get("run_id")
    if isinstance(said, str) and said != cfg_run:
        raise UserError(
            f"{rd.path}: run.json says run {said} ({info.label or 'no label'}) but its config.yaml is run "
            f"{cfg_run}; {fix}",
            kind=ErrorKind.FILE,
        )
    seed = label_seed(info.label)
    if seed is not None and not (
        isinstance(cfg_seed, int) and not isinstance(cfg_seed, bool) and seed == str(cfg_seed)
    ):
        raise UserError(
            f"{rd.path}: run.json labels it {info.label!r} but its config.yaml has seed={cfg_seed}; {fix}",
            kind=ErrorKind.FILE,
        )


def curve_from_run_dir(
    run_dir: RunDir | Path | str, *, x: str = "gpu_hours", y: str = "val_pass_rate"
) -> Curve | NotFitted:
    """One run directory's curve, or why it can't be fitted (with the run's facts).

    The curve's `facts` (RunFacts): run_id, arm_id, status, baseline, partial (the run may still add points),
    truncation_warning and end (each compute axis the run logged at its last point). arm_id is the hash of the
    run's config.yaml when it has one (a run.json that disagrees with it is a UserError naming the directory), else
    what run.json says. The evaluation at step 0 is
    the run's R0 point: its compute is 0 by definition, whatever the clock said. Non-finite values are dropped; a
    null or a string in x or y is a UserError.
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    info = rd.info()
    ids = config_ids(rd)
    if ids is not None:
        _check_ids(rd, info, ids)
    label = info.label or rd.path.name
    arm = info.arm if info.label else label
    facts = RunFacts(
        run_id=info.run_id,
        arm_id=info.arm_id if ids is None else ids[1],
        status=info.status,
        baseline=info.baseline,
        partial=info.status in PARTIAL,
    )

    def not_fitted(reason: str, missing: tuple[str, str, tuple[str, ...]] | None = None) -> NotFitted:
        return NotFitted(label, arm, reason, facts, missing)

    if info.status in ENDED_BADLY:
        return not_fitted(info.why())
    lines = rd.metric_lines()
    recs = [r for _, r in lines]
    if not recs:
        return not_fitted(f"no metrics yet ({rd.metrics_path})")
    for name, flag in ((y, "--y"), (x, "--x")):
        if not any(name in r for r in recs):
            present = _metric_names(recs)
            return not_fitted(
                f"the metric '{name}' is not in {rd.metrics_path}; it has: {', '.join(present)} (choose with {flag})",
                (name, flag, tuple(present)),
            )
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
    for vals, bad, what in (
        (ya, (ya < 0) | (ya > 1), f"'{y}' is outside [0, 1]; --y must name a pass rate"),
        (xa, xa < 0, f"'{x}' is negative; --x must name a compute axis"),
    ):
        if bad.any():  # NaN compares False: dropped below, as a run may log one when it diverges
            k = int(np.argmax(bad))
            raise UserError(f"{rd.metrics_path}:{rec_index[k]}: {vals[k]:g} in {what}", kind=ErrorKind.FILE)
    ok = np.isfinite(xa) & np.isfinite(ya)
    order = np.argsort(xa[ok], kind="stable")
    xa, ya, na, la = xa[ok][order], ya[ok][order], na[ok][order], la[ok][order]
    if xa.size == 0:
        return not_fitted(f"no evaluation with a finite '{x}' and '{y}' yet ({rd.metrics_path})")
    keep = np.concatenate([[True], np.diff(xa) > 0])  # a resumed run never logs a step twice; be safe
    trunc = [
        r["truncation_rate"]
        for r in recs
        if isinstance(r.get("truncation_rate"), (int, float)) and not isinstance(r.get("truncation_rate"), bool)
    ]
    facts = replace(
        facts,
        truncation_warning=bool(info.truncation_warning or (bool(trunc) and max(trunc) > TRUNCATION_WARN)),
        end=_compute_at(dict(lines)[int(la[keep][-1])]),
    )
    n = na[keep] if np.all(np.isfinite(na[keep])) else None  # older runs did not log val_n: estimated then
    stopped = info.status if info.status in STOPPED else None  # a monitor's verdict, not the run's own end
    return Curve(run=label, group=arm, x=xa[keep], y=ya[keep], facts=facts, n=n, stopped=stopped)


def _compute_at(rec: dict[str, Any]) -> dict[str, float]:
    """Every compute axis a metrics record logs, as floats: what the run had spent at that evaluation on each axis
    (choices.wall_clock_note compares the seeds' gpu_hours per sample at their last point)."""
    return {
        a: float(rec[a])
        for a in COMPUTE_AXES
        if isinstance(rec.get(a), (int, float)) and not isinstance(rec.get(a), bool) and math.isfinite(rec[a])
    }
