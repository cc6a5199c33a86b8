"""The pruning rules of `ablate sweep --prune`: when a run is broken (it ends `unstable`) and when an arm's verdict
is settled (its runs end `pruned`), on metrics and curves alone, so that the live monitor (ablate.prune.monitor)
and the offline replays (`replay`, `simulate`: bench/prune.py, the simulations) decide the same. The rules, their
thresholds and what a decision records are in docs/run-directory.md, "Pruning".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ablate.errors import UserError
from ablate.fit.arms import Ranking
from ablate.fit.compare import rank
from ablate.fit.curve import NotFitted, RunFacts
from ablate.fit.futures import verdict_key
from ablate.fit.settings import DEFAULT_N_BOOT, Analysis
from ablate.prune.outlook import ArmOutlook, RunEnd, Standing, running_arms
from ablate.states import RunState
from ablate.storage import store
from ablate.storage.metricsfile import TRUNCATION_WARN


@dataclass
class PruneSettings:
    x: str = "gpu_hours"
    """Compute axis of the ranking the settled check makes."""
    to: float | None = None
    """Compute the verdicts are ranked at (None: twice the budget, the compute a run reaches at max_steps)."""
    truncation_evals: int = 3
    collapse_sd: float = 4.0
    collapse_evals: int = 3
    check_every: float = 0.1
    """Settled check each time every live run has advanced by this share of its max_steps."""
    futures: int = 40
    settled_bound: float = 0.10
    seed: int = 0
    n_boot: int = DEFAULT_N_BOOT
    """Resamples of the settled check's fits: rank's, so that `rank` at the recorded settings reads the same."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def analysis(self, target: float) -> Analysis:
        """The analysis every settled check ranks with (ablate.fit.settings): recorded in decisions.jsonl."""
        return Analysis(self.x, to=target, n_boot=self.n_boot, seed=self.seed)


def broken(metrics: list[dict[str, Any]], s: PruneSettings) -> str | None:
    """Why a run's metrics say it is broken (docs/run-directory.md, "Pruning"), or None."""
    evals = [m for m in metrics if isinstance(m.get("val_pass_rate"), (int, float))]
    trunc = [m for m in evals if isinstance(m.get("truncation_rate"), (int, float))]
    last = trunc[-s.truncation_evals :]
    if len(last) >= s.truncation_evals and all(m["truncation_rate"] > TRUNCATION_WARN for m in last):
        steps = ", ".join(str(m.get("step")) for m in last)
        return (
            f"truncation above {TRUNCATION_WARN:.0%} at {len(last)} evaluations in a row (steps {steps}; "
            f"last {last[-1]['truncation_rate']:.0%}): unstable"
        )
    r0 = next((m for m in evals if m.get("step") == 0), None)
    if r0 is None or len(evals) < s.collapse_evals + 1:
        return None
    p0 = float(r0["val_pass_rate"])
    n = r0.get("val_n")
    if not isinstance(n, (int, float)) or n <= 0 or not 0.0 < p0 < 1.0:
        return None
    floor = p0 - s.collapse_sd * math.sqrt(p0 * (1 - p0) / float(n))
    tail = evals[-s.collapse_evals :]
    if all(m.get("step") != 0 and float(m["val_pass_rate"]) < floor for m in tail):
        return (
            f"pass rate {float(tail[-1]['val_pass_rate']):.3f} below R0 {p0:.3f} by more than {s.collapse_sd:g} "
            f"sd of evaluation noise at {len(tail)} evaluations in a row: collapsed"
        )
    return None


def settled(
    curves: list, ends: dict[str, RunEnd], target: float, s: PruneSettings, not_fitted: list[NotFitted] | None = None
) -> tuple[Ranking, list[ArmOutlook]]:
    """The settled check on curves as they stand: the ranking (at `target`) and each arm's outlook, whose advice
    is Standing.SETTLED for the arms to stop."""
    ranking = rank(curves, s.analysis(target).options(target), x=s.x, not_fitted=not_fitted, decide=False)
    if ranking.baseline is None:
        return ranking, []
    return ranking, running_arms(ranking, ends, s.futures, s.seed, None, bound=s.settled_bound, settle_only=True)


@dataclass
class Replay:
    """What `replay` found."""

    stopped: dict[str, float]
    """Run -> the share of its compute it ran, for the runs the rule stopped."""
    full: Ranking
    """The ranking of the whole curves."""
    pruned: Ranking
    """The ranking of the pruned sweep."""
    spent: float
    """Compute of the pruned sweep / the full one."""


def replay(curves: list, target: float, s: PruneSettings) -> Replay:
    """The monitor's settled rule replayed on finished curves (each run's last point is its max_steps): every run
    advances together, a settled check at each `check_every` of the way, the runs of settled arms cut where they
    were stopped. What bench/prune.py and the simulations check the rule with: the same decision the live monitor
    makes, without the runs."""
    end = {c.run: float(c.x[-1]) for c in curves}
    stopped: dict[str, float] = {}

    def cut(c, share: float, pruned: bool):
        keep = c.x <= share * end[c.run] * (1 + 1e-9)
        return replace(
            c,
            x=c.x[keep],
            y=c.y[keep],
            n=None if c.n is None else c.n[keep],
            stopped=RunState.PRUNED.value if pruned else c.stopped,
        )

    k = 1
    while k * s.check_every < 1.0 - 1e-9:
        share = k * s.check_every
        k += 1
        now = [cut(c, stopped.get(c.run, share), c.run in stopped) for c in curves]
        ends = {
            c.run: RunEnd(
                run=c.run,
                arm=c.group or c.run,
                x_now=float(c.x[-1]),
                x_end=float(c.x[-1]) if c.run in stopped else end[c.run],
                step=None,
                max_steps=None,
                gpu_hours_per_x=None,
                ended=c.run in stopped,
            )
            for c in now
        }
        if all(e.ended for e in ends.values()):
            break
        try:
            ranking, arms = settled(now, ends, target, s)
        except UserError:  # nothing can be fitted yet
            continue
        for a in arms:
            if a.advice.standing == Standing.SETTLED:
                for c in next(r for r in ranking.arms if r.arm == a.arm).fit.curves:
                    stopped[c.run] = share
    opts = s.analysis(target).options(target)
    full = rank(curves, opts, x=s.x, decide=False)
    pruned = rank([cut(c, stopped.get(c.run, 1.0), c.run in stopped) for c in curves], opts, x=s.x, decide=False)
    total = sum(end.values())
    return Replay(
        stopped=stopped,
        full=full,
        pruned=pruned,
        spent=sum(end[r] * stopped.get(r, 1.0) for r in end) / total if total > 0 else 1.0,
    )


LEGACY_N_BOOT = 200
"""The resamples of the settled checks of monitors that did not record their analysis."""


def recorded_analysis(sweep_dir: Path, x: str) -> Analysis | None:
    """The analysis the sweep's settled checks on `x` rank with, as its monitor last recorded it (None: none yet).
    A line from before monitors recorded it stands for what they used: the target, 200 resamples, seed 0."""
    path = sweep_dir / "prune" / "decisions.jsonl"
    if not path.is_file():
        return None
    got = None
    for d in store.read_jsonl(path):  # read_jsonl skips damaged lines and ones nested too deeply
        t = store.finite_number(d.get("target"))
        if d.get("x") != x or t is None or t <= 0:
            continue
        a = Analysis.from_json(d["analysis"]) if "analysis" in d else Analysis(x, to=t, n_boot=LEGACY_N_BOOT)
        if a is not None and a.x == x and a.to is not None and math.isclose(a.to, t, rel_tol=1e-9):
            got = a
    return got


def recorded_target(sweep_dir: Path, x: str) -> float | None:
    """The compute on `x` the sweep's settled checks rank at, as its monitor last recorded it (None: none yet)."""
    a = recorded_analysis(sweep_dir, x)
    return None if a is None else a.to


def simulate(
    arms: dict[str, dict[str, float]],
    *,
    shape: str = "scalerl-8b",
    noise: str = "seeds",
    seeds: int = 3,
    f: float = 0.9,
    seed: int = 0,
    settings: PruneSettings | None = None,
) -> dict[str, Any]:
    """One simulated sweep with known truth, run in full and pruned by `replay`: `arms` maps each arm to its
    effect on the baseline's curve (fit/calibrate's shapes and noises; the first arm is the baseline, every run
    ends where the baseline has made a share `f` of its gain, verdicts are read at twice that). Returns
    {"full": {arm: verdict}, "practical": {arm: the full verdict's practical}, "pruned": {arm: verdict},
    "stopped": {arm: share of the budget it ran, for stopped arms}, "spent": compute of the pruned sweep / the full
    one}."""
    from ablate.fit.calibrate import NOISES, SHAPES, simulate_arm, window_end

    sh, nz = SHAPES[shape], NOISES[noise]
    budget = window_end(sh, f)
    rng = np.random.default_rng([seed, 17])
    curves = []
    for k, (arm, effect) in enumerate(arms.items()):
        made, _ = simulate_arm(sh, nz, effect, seeds, f, rng, arm)
        for c in made:
            keep = c.x <= budget * (1 + 1e-9)  # the continuation past the window is the held-out truth: not run
            curves.append(
                replace(
                    c,
                    x=c.x[keep],
                    y=c.y[keep],
                    n=None if c.n is None else c.n[keep],
                    facts=RunFacts(run_id=None, arm_id=None, status=None, baseline=k == 0, partial=False),
                )
            )
    s = settings or PruneSettings(x="gpu_hours", seed=seed)
    r = replay(curves, 2.0 * budget, s)
    arm_of = {c.run: c.group for c in curves}
    return {
        "full": {a.arm: verdict_key(a) for a in r.full.arms},
        "practical": {a.arm: a.practical for a in r.full.arms},
        "pruned": {a.arm: verdict_key(a) for a in r.pruned.arms},
        "stopped": {arm_of[run]: share for run, share in r.stopped.items()},
        "spent": r.spent,
    }
