"""`ablate plan`: read a sweep (or a sweep file and a stored calibration), build the task model, and answer by
simulation (fit/planning.py) how many seeds and how much compute per arm each question needs, and, for arms still
running, whether more compute could change their verdict.

Budget (the compute a run reaches at its max_steps): for a sweep directory, each run's last evaluation scaled to
its max_steps (compute grows with steps); for other inputs, where the curves end; for a sweep file, max_steps times
the calibration's compute per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ablate.analysis.choices import named_arm_label
from ablate.errors import ErrorKind, UserError
from ablate.fit import measured_model, planning
from ablate.fit.arms import Ranking
from ablate.fit.compare import rank
from ablate.fit.settings import Analysis
from ablate.fit.spread import MinEffect
from ablate.fit.taskmodel import MAX_SCALE, MIN_SCALE, Design, TaskModel
from ablate.prune.outlook import ArmOutlook, RunEnd, run_ends, running_arms
from ablate.storage.measurements import load_calibration, load_noise


@dataclass
class PlanResult:
    model: TaskModel
    designs: list[Design]
    arms: list[ArmOutlook] = field(default_factory=list)
    """The running arms (none when the source has no runs of its own)."""
    ranking: Ranking | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model.to_json(),
            "questions": [d.to_json() for d in self.designs],
            "arms": [a.to_json() for a in self.arms],
        }


def _median(values) -> float | None:
    v = [float(x) for x in values if x is not None and math.isfinite(x)]
    return float(np.median(v)) if v else None


def _ends(source: Path, curves: list[Any], x: str) -> dict[str, RunEnd]:
    """Where each run is and will end: a sweep's runs from their ledger and max_steps; curves from elsewhere have
    ended where they stop."""
    if source.is_dir():
        return run_ends(source, curves, x)
    return {
        c.run: RunEnd(c.run, c.group or c.run, float(c.x[-1]), float(c.x[-1]), None, None, None, True) for c in curves
    }


def plan_measured(
    source: Path,
    *,
    x: str,
    baseline: str | None,
    to: float | None,
    noise: Path | None,
    questions: list[str],
    delta_a: float,
    ratio: float,
    goal: float,
    trials: int,
    seed: int,
    jobs: int,
    n_futures: int,
    progress: Callable[[str], None] | None,
    fmt: str = "auto",
    run: str | None = "run",
    group: str | None = None,
    y: str = "val_pass_rate",
    engine: str = "fast",
    min_effect: MinEffect | None = None,
) -> PlanResult:
    """A plan from measured curves (a sweep directory or any input `rank` reads). `engine`: planning.ENGINES."""
    from ablate.curves.inputs import load_inputs

    curves, skipped = load_inputs([source], x=x, y=y, fmt=fmt, run=run, group=group)
    ends = _ends(source, curves, x)
    budget = max(e.x_end for e in ends.values())
    target = to if to is not None else 2.0 * budget
    floor = None if noise is None else load_noise(noise)
    if progress:
        progress(f"fitting {len(curves)} runs")
    ranking = rank(
        curves,
        Analysis(x, to=target, seed=seed).options(target),  # rank's resamples: the verdicts `rank --to` prints
        baseline=named_arm_label(baseline, curves),
        noise=floor,
        x=x,
        not_fitted=skipped,
        min_effect=min_effect,
    )
    seeds = max((a.seeds for a in ranking.arms), default=1)
    steps_per_x = _median(e.step / e.x_now for e in ends.values() if e.step and e.x_now > 0)
    ghx = 1.0 if x == "gpu_hours" else _median(e.gpu_hours_per_x for e in ends.values())
    model = measured_model.from_ranking(
        ranking,
        budget=budget,
        seeds=seeds,
        gpu_hours_per_x=ghx,
        steps_per_x=steps_per_x,
        source=f"measured on {source}",
        seed=seed,
    )
    designs = [
        planning.design(
            model,
            q,
            delta_a=delta_a,
            ratio=ratio,
            goal=goal,
            trials=trials,
            seed=seed,
            jobs=jobs,
            noise=floor,
            to=to,
            progress=progress,
            engine=engine,
            min_effect=min_effect,
        )
        for q in questions
    ]
    arms = running_arms(ranking, ends, n_futures, seed, floor, progress)
    return PlanResult(model=model, designs=designs, arms=arms, ranking=ranking)


def plan_from_file(
    sweep_file: Path,
    overrides: list[str],
    calibration: Path | None,
    *,
    questions: list[str],
    delta_a: float,
    ratio: float,
    goal: float,
    trials: int,
    seed: int,
    jobs: int,
    progress: Callable[[str], None] | None,
    noise: Path | None,
    to: float | None = None,
    engine: str = "fast",
    min_effect: MinEffect | None = None,
) -> PlanResult:
    """A plan before any run: the sweep file says how many arms and steps, a stored calibration the rest."""
    from ablate.compose.sweep import load_sweep

    sweep = load_sweep(sweep_file, overrides)
    if calibration is None:
        raise UserError(
            f"{sweep_file}: a sweep file has no measurements yet; give --calibration FILE (written by "
            "`ablate plan SWEEP_DIR --save-calibration FILE` on a sweep of the same task that ran with "
            "seeds), or plan from a sweep directory",
            kind=ErrorKind.SETTING,
        )
    model = load_calibration(calibration)
    model.arms = len(sweep.arms)
    max_steps = max(r.config.train.max_steps for r in sweep.runs)
    if model.steps_per_x:
        model.budget = max_steps / model.steps_per_x
        if not MIN_SCALE <= model.budget <= MAX_SCALE:
            raise UserError(
                f"--calibration {calibration}: steps_per_x {model.steps_per_x:g} makes {max_steps} steps "
                f"a compute of {model.budget:g} {model.x}, outside [{MIN_SCALE:g}, "
                f"{MAX_SCALE:g}]; write the calibration again with `ablate plan SWEEP_DIR "
                "--save-calibration FILE`",
                kind=ErrorKind.SETTING,
            )
    else:
        model.notes.append(
            f"the calibration has no steps per unit of {model.x}: the budget is the calibrated "
            f"sweep's ({model.budget:.4g}), not this file's max_steps {max_steps}"
        )
    model.source = f"{calibration} ({model.source})"
    floor = None if noise is None else load_noise(noise)
    designs = [
        planning.design(
            model,
            q,
            delta_a=delta_a,
            ratio=ratio,
            goal=goal,
            trials=trials,
            seed=seed,
            jobs=jobs,
            noise=floor,
            to=to,
            progress=progress,
            engine=engine,
            min_effect=min_effect,
        )
        for q in questions
    ]
    return PlanResult(model=model, designs=designs)
