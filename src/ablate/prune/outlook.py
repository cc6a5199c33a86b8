"""Where each arm of a sweep stands while it runs: its verdict now, and whether more compute (up to its runs'
max_steps), or stopping it now, could change that verdict. `ablate plan` shows it (its running-arms table) and the
prune monitor acts on it (ablate.prune: an arm `settled` here is stopped). The rule is in docs/run-directory.md,
"Pruning".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from ablate.fit.arms import Ranking
from ablate.fit.futures import futures, verdict_key
from ablate.fit.spread import NoiseFloor
from ablate.states import RunState
from ablate.storage.rundir import sweep_run_dirs

SETTLED_BOUND = 0.10
"""An arm is settled when the one-sided 95% upper bound on the chance that its verdict changes (continued to the end,
or stopped now while the rest go on) is at most this: with 40 futures, none may change it."""

GOES_ON = frozenset({RunState.PENDING, RunState.RUNNING, RunState.PREEMPTED})
"""run.json states of a run that will still reach its max_steps (a preempted one is resumed)."""


@dataclass
class RunEnd:
    """Where one run is and where its max_steps will take it, on the compute axis."""

    run: str
    arm: str
    x_now: float
    x_end: float
    step: int | None
    max_steps: int | None
    gpu_hours_per_x: float | None
    ended: bool


class Standing(StrEnum):
    """What may become of an arm's verdict: its runs ended, it is the reference, it is still open, or settled."""

    ENDED = "ended"
    REFERENCE = "reference"
    OPEN = "open"
    SETTLED = "settled"


@dataclass(frozen=True)
class Advice:
    """An arm's standing and why: `grounds` (for an arm with futures: how often its verdict changed in them), then
    what follows for the arm (`then`), when that is said apart."""

    standing: Standing
    grounds: str
    then: str | None = None

    def __str__(self) -> str:
        return self.grounds if self.then is None else f"{self.grounds}: {self.then}"


@dataclass
class ArmOutlook:
    """One arm of `running_arms`."""

    arm: str
    verdict: str
    identified: bool
    compute_now: float
    compute_end: float
    running: bool
    advice: Advice
    p_change: float | None = None
    bound: float | None = None
    futures_n: int = 0
    futures: Any = None
    """fit/futures.py's `future` of the arm: the verdicts its futures ended in."""
    if_stopped: Any = None
    """fit/futures.py's `stopped`: the verdicts when the arm is stopped now (None: not simulated)."""

    def to_json(self) -> dict[str, Any]:
        """The row `ablate plan --json` writes under "arms"."""
        row: dict[str, Any] = {
            "arm": self.arm,
            "verdict": self.verdict,
            "identified": self.identified,
            "compute_now": self.compute_now,
            "compute_end": self.compute_end,
            "running": self.running,
            "p_change": self.p_change,
            "bound": self.bound,
            "futures_n": self.futures_n,
        }
        if self.futures is not None:
            row["futures"] = self.futures
        if self.if_stopped:
            row["if_stopped"] = self.if_stopped
        return {**row, "state": str(self.advice.standing), "advice": str(self.advice)}


def run_ends(source: Path, curves: list, x: str) -> dict[str, RunEnd]:
    """Each curve's run: its compute now and at its max_steps (read from the run directories of a sweep)."""
    out = {}
    by_label = {}
    for run in sweep_run_dirs(source):  # no link followed: a linked run, or file of one, is refused in one line
        if run.info_path.exists():
            by_label[run.info().label or run.path.name] = run
    for c in curves:
        x_now = float(c.x[-1])
        rd = by_label.get(c.run)
        step = max_steps = None
        ghx = None
        ended = True
        if rd is not None:
            info = rd.info()
            last = rd.last_metrics() or {}
            step = last.get("step") if isinstance(last.get("step"), int) else None
            max_steps = info.max_steps
            ended = info.status not in GOES_ON
            g = last.get("gpu_hours")
            if isinstance(g, (int, float)) and x_now > 0:
                ghx = float(g) / x_now
        x_end = x_now
        if step and max_steps and not ended and step < max_steps:
            x_end = x_now * max_steps / step
        out[c.run] = RunEnd(
            run=c.run,
            arm=c.group or c.run,
            x_now=x_now,
            x_end=x_end,
            step=step,
            max_steps=max_steps,
            gpu_hours_per_x=ghx,
            ended=ended,
        )
    return out


def candidates(ranking: Ranking, live: set[str]) -> set[str]:
    """The running arms that could be stopped: identified, read against an identified baseline with a measured
    seed spread (else their verdict is no test)."""
    base = next((b for b in ranking.arms if b.arm == ranking.baseline), None)
    if base is None or not base.fit.identifiable or ranking.floor is None:
        return set()
    return {a.arm for a in ranking.arms if a.arm in live and a is not base and a.fit.identifiable}


def running_arms(
    ranking: Ranking,
    ends: dict[str, RunEnd],
    n: int,
    seed: int,
    floor: NoiseFloor | None,
    progress: Callable[[str], None] | None = None,
    bound: float = SETTLED_BOUND,
    settle_only: bool = False,
) -> list[ArmOutlook]:
    """Per arm: its verdict now and whether more compute (up to its runs' max_steps) could change it, or stopping
    it now could. `settle_only`: no futures at all when no arm could be settled (the monitor's question)."""
    live = {e.arm for e in ends.values() if e.x_end > e.x_now}
    fut = _futures(ranking, ends, live, n, seed, floor, progress, bound, settle_only)
    out = []
    for a in ranking.arms:
        f = fut.get(a.arm) if a.arm in live else None
        o = ArmOutlook(
            arm=a.arm,
            verdict=verdict_key(a),
            identified=a.fit.identifiable,
            compute_now=max(float(c.x[-1]) for c in a.fit.curves),
            compute_end=max(ends[c.run].x_end if c.run in ends else float(c.x[-1]) for c in a.fit.curves),
            running=a.arm in live,
            advice=Advice(Standing.OPEN, ""),
        )
        if f is not None:
            o.p_change, o.bound, o.futures_n, o.futures = f["p_change"], f["bound"], f["n"], f["future"]
            o.if_stopped = f["stopped"] or None
        o.advice = advice(a, o, ranking, bound)
        out.append(o)
    return out


def _futures(
    ranking: Ranking,
    ends: dict[str, RunEnd],
    live: set[str],
    n: int,
    seed: int,
    floor: NoiseFloor | None,
    progress: Callable[[str], None] | None,
    bound: float,
    settle_only: bool,
) -> dict[str, dict[str, Any]]:
    """fit/futures.py's futures per arm, with the candidates that settle stopped."""
    can = candidates(ranking, live)
    fut: dict[str, dict[str, Any]] = {}
    if live and n > 0 and (can or not settle_only):
        if progress:
            progress(f"simulating {n} futures of the {len(live)} running arm(s)")
        x_end = {r: e.x_end for r, e in ends.items()}
        fut = futures(ranking, x_end, n=n, seed=seed, noise=floor, frozen=can, stopped_as=RunState.PRUNED)
        # only the candidates that settle are stopped: check that future again with just them stopped, until the
        # set holds (it shrinks each time, so this ends)
        while True:
            settle = {arm for arm in can if fut[arm]["n"] and fut[arm]["bound"] <= bound}
            if not settle or settle == can:
                break
            can = settle
            again = futures(ranking, x_end, n=n, seed=seed, noise=floor, frozen=can, stopped_as=RunState.PRUNED)
            fut.update({arm: again[arm] for arm in can})
    return fut


def advice(a: Any, o: ArmOutlook, ranking: Ranking, bound: float) -> Advice:
    """The standing of arm `a` (a ranking's arm) given its outlook `o`, and why."""
    if not o.running:
        return Advice(Standing.ENDED, "its runs have ended")
    if a.arm == ranking.baseline:
        return Advice(Standing.REFERENCE, "the baseline: every verdict is read against it, so it runs to the end")
    if not a.fit.identifiable:
        return Advice(Standing.OPEN, "not identified: A is not measured until the window passes C_mid; keep it running")
    base = next((b for b in ranking.arms if b.arm == ranking.baseline), None)
    if base is None or not base.fit.identifiable:
        return Advice(Standing.OPEN, "the baseline's A is not identified yet: no verdict to settle")
    if ranking.floor is None:
        return Advice(
            Standing.OPEN, "no seed spread measured yet (needs seeds): its verdict is not a test, so it cannot settle"
        )
    if not (a.verdict == "equivalent" or a.practical == "material"):
        now = (
            f"{a.verdict.replace('_', ' ')}, of a size not yet shown to matter ({a.practical})"
            if a.practical in ("negligible", "unclear") and a.verdict != "inconclusive"
            else a.verdict.replace("_", " ")
        )
        return Advice(
            Standing.OPEN,
            f"{now}: only an arm shown equivalent or changed by more than the smallest effect that matters can settle",
        )
    if o.p_change is None or o.bound is None:
        return Advice(Standing.OPEN, "no futures simulated")
    said = (
        f"its verdict changed in {o.p_change * o.futures_n:.0f} of {o.futures_n} futures "
        f"(continued, or stopped now; ≤{o.bound:.0%} at 95%)"
    )
    if o.bound <= bound:
        return Advice(Standing.SETTLED, said, f"it can stop at {o.compute_now:.4g}")
    return Advice(Standing.OPEN, said, "more compute can still decide it")
