"""How many seeds and how much compute a question needs, and whether running arms still need more: answered by
simulation, never by a closed-form guess. Two engines give a design's power (ENGINES): `fast` (fit/power.py, the
default: every trial of a compute rung simulated and fitted at once, the verdicts by `rank`'s rules in closed form)
and `exact` (each simulated sweep ranked by `compare.rank` itself: the reference, minutes instead of seconds).

The task model (`TaskModel`) is what the simulation draws from, measured on real runs (fit/measured_model.py) or
read from a stored file (`--calibration`, written by `--save-calibration`):
- the baseline arm's fitted curve (R0, A, B, C_mid) on the compute axis `x`;
- the evaluation noise (`val_n` graded samples per evaluation: binomial) and the drift (AR(1): sd and
  autocorrelation per evaluation), pooled over every run's measured noise;
- the seed-to-seed spread of A and of log compute, as `rank` measured it (`seed_sd_a`, `seed_sd_logc`, on
  `seed_dof` degrees of freedom), and how much of it is the fits' own error at the window it was measured on
  (`fit_sd_a`, `fit_sd_logc`: the same design simulated without any seed spread). A spread measured on few seeds
  is uncertain, so every simulated trial draws its own: the measured variance redrawn from its sampling
  distribution (scaled inverse chi-square on `seed_dof`), less the fit error, floored at zero. The plan carries
  that uncertainty instead of trusting a point estimate, and a longer window is not charged the short one's fit
  error.

Questions (`design`): a ceiling change of `delta_a` (the paper's 0.02), found as `ceiling up`; an efficiency ratio
(the arm reaches the same pass rate with 1/ratio of the compute: C_mid / ratio), found as `efficiency up`. Power
counts only that verdict: `equivalent`, `inconclusive` or any other is a miss. A trial simulates a whole sweep of
`arms` arms (the baseline, one arm with the effect, the rest identical to the baseline; at most MAX_SIM_ARMS, the
remaining arms' tests are added to the false-discovery control as null p-values) with `seeds` seeds per arm, each
run evaluated every `eval_every` up to `compute`, gives it verdicts, and counts whether the effect arm gets its
verdict. Power at each (compute, seeds) is the share of trials (the exact engine stops early once the power is
clearly above or below the goal; the fast one runs them all). For each compute rung the fewest seeds that reach
the goal are found by bisection over SEED_LADDER.

Running arms, whether more compute would change their verdicts: fit/futures.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ablate.fit import power
from ablate.fit.decide import SEED_LADDER
from ablate.fit.exact import exact_cell
from ablate.fit.sigmoid import gain_fraction
from ablate.fit.spread import FDR, MinEffect, NoiseFloor
from ablate.fit.taskmodel import MAX_SIM_ARMS, QUESTIONS, WANTED, Cheapest, Design, Rung, TaskModel, Tried, effect_of

if TYPE_CHECKING:
    from concurrent.futures import Executor

__all__ = ["COMPUTE_RUNGS", "ENGINES", "design"]

COMPUTE_RUNGS = (0.5, 1.0, 2.0, 4.0)
"""Compute per run tried, as multiples of the budget (the compute a run reaches at its max_steps)."""
MIN_GAIN = 0.55
"""A compute rung whose window reaches less of the baseline's gain than this cannot identify A: not simulated."""
ENGINES = ("fast", "exact")
"""How a design's power is simulated: `fast` (fit/power.py: every trial of a rung at once, batched fits) or
`exact` (every trial ranked by `compare.rank`, the reference the fast engine is checked against)."""


def _fast_cells(m: TaskModel, compute: float, question: str, kw: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
    """power_cell's answer by the fast engine (fit/power.py) at one compute: seeds -> cell, every seed count drawing
    on the same simulated trials (each trial's first `seeds` runs per arm)."""
    sim_arms = max(2, min(m.arms, MAX_SIM_ARMS))
    effect = effect_of(question, kw["delta_a"], kw["ratio"])
    seed = kw["seed"] * 1009 + QUESTIONS.index(question)
    rung = power.rung_for(m, compute, effect, kw["trials"], sim_arms, seed)

    def cell(seeds: int) -> dict[str, Any]:
        return power.cell_power(
            rung,
            seeds,
            WANTED[question],
            noise=kw["noise"],
            me=kw["min_effect"] or MinEffect(),
            extra_arms=m.arms - sim_arms,
            goal=kw["goal"],
            seed=seed,
        )

    return cell


def _pool(jobs: int) -> Executor | None:
    if jobs <= 1:
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))


@dataclass
class _Search:
    """What every compute rung of one `design` is searched with."""

    m: TaskModel
    question: str
    ladder: Sequence[int]
    kw: dict[str, Any]
    """delta_a, ratio, trials, goal, seed, noise, to, min_effect: the cell's arguments."""
    pool: Executor | None
    jobs: int
    engine: str
    progress: Callable[[str], None] | None


def _search_rung(s: _Search, compute: float, row: dict[str, Any], hi: int) -> int | None:
    """The index in `s.ladder` (up to `hi`) of the fewest seeds that reach the goal at this compute, or None; every
    cell tried goes into row["tried"]. Seed counts are tried doubling from the fewest (cheap cells first, `jobs` at
    a time with a pool), then bisected below the first count that reaches the goal."""
    lo = 0
    ladder, question = s.ladder, s.question
    fast = _fast_cells(s.m, compute, question, s.kw) if s.engine == "fast" else None

    def run(idx: list[int]) -> list[dict[str, Any]]:
        cells = [(s.m, ladder[i], compute, question, s.kw) for i in idx]
        if fast is not None:
            res = [fast(ladder[i]) for i in idx]
        elif s.pool and len(cells) > 1:
            res = list(s.pool.map(exact_cell, cells))
        else:
            res = [exact_cell(c) for c in cells]
        for r in res:
            row["tried"].append(r)
            if s.progress:
                s.progress(
                    f"{question} at {compute:.4g}: {r['seeds']} seeds -> power {r['power']:.2f} ({r['trials']} trials)"
                )
        return res

    doubling = [
        i for i in range(lo, hi + 1) if i == lo or (ladder[i] >= 2 * ladder[lo] and (ladder[i] & (ladder[i] - 1) == 0))
    ] + [hi]
    doubling = sorted(set(doubling))
    found, last_bad = None, lo - 1
    step = max(1, s.jobs) if s.pool else 1  # cells in parallel only with a pool; else the cheapest first
    for k in range(0, len(doubling), step):
        idx = doubling[k : k + step]
        res = run(idx)
        ok = [i for i, r in zip(idx, res) if r["reached"]]
        if ok:
            found = min(ok)
            last_bad = max([last_bad] + [i for i, r in zip(idx, res) if not r["reached"] and i < found])
            break
        last_bad = max(idx)
    if found is None:
        return None
    lo, hi = last_bad + 1, found - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if run([mid])[0]["reached"]:
            found, hi = mid, mid - 1
        else:
            lo = mid + 1
    return found


def _plan_rung(s: _Search, mult: float, best: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One compute rung of `design`: its row (the fewest seeds that reach the goal, or why there are none) and the
    cheapest design found so far."""
    compute = s.m.budget * mult
    f = gain_fraction(compute, s.m.b, s.m.c_mid)
    row: dict[str, Any] = {
        "multiple": mult,
        "compute": compute,
        "gain_fraction": f,
        "seeds": None,
        "power": None,
        "se": None,
        "trials": 0,
        "tried": [],
    }
    if f < MIN_GAIN:
        row["why"] = f"the window reaches {f:.0%} of the gain: A cannot be identified"
        return row, best
    hi = len(s.ladder) - 1
    if best is not None:  # a design here must cost less than the best: fewer seeds than that allows
        cap = best["seeds"] * best["compute"] / compute
        while hi >= 0 and s.ladder[hi] >= cap:
            hi -= 1
        if hi < 0:
            row["why"] = "cannot be cheaper than a shorter run"
            return row, best
    found = _search_rung(s, compute, row, hi)
    if found is None:
        top = row["tried"][-1]
        row["why"] = f"{top['seeds']} seeds reach {top['power']:.0%} power" + (
            "" if best is None else " (more would cost more than the cheapest design)"
        )
        return row, best
    r = next(t for t in row["tried"] if t["seeds"] == s.ladder[found])
    row.update(seeds=r["seeds"], power=r["power"], se=r["se"], trials=r["trials"])
    if best is None or r["seeds"] * compute < best["seeds"] * best["compute"]:
        best = {"multiple": mult, "compute": compute, "seeds": r["seeds"], "power": r["power"], "se": r["se"]}
    return row, best


def design(
    m: TaskModel,
    question: str,
    *,
    delta_a: float = 0.02,
    ratio: float = 1.25,
    goal: float = 0.8,
    trials: int = 100,
    rungs: Sequence[float] = COMPUTE_RUNGS,
    ladder: Sequence[int] = SEED_LADDER,
    seed: int = 0,
    jobs: int = 1,
    noise: NoiseFloor | None = None,
    to: float | None = None,
    progress: Callable[[str], None] | None = None,
    engine: str = "fast",
    min_effect: MinEffect | None = None,
) -> Design:
    """For each compute rung (multiples of the budget), the fewest seeds per arm that reach `goal` power, by
    bisection over `ladder` (power grows with seeds). Rungs whose window cannot pass C_mid are reported, not
    simulated; a rung that could not be cheaper than the best found so far is skipped. Seed counts are tried
    doubling from the fewest (the cheap cells first), then bisected below the first that reaches the goal. The
    simulated verdicts are ranked at `to` (default: twice each rung's compute). Returns the rungs and the cheapest
    design (`best`, None when no rung reaches the goal within the ladder). `engine`: ENGINES (the fast engine runs
    every trial of a cell, on one process; the exact one stops a cell early and uses `jobs` processes)."""
    if engine not in ENGINES:
        raise ValueError(engine)
    kw = dict(
        delta_a=delta_a, ratio=ratio, trials=trials, goal=goal, seed=seed, noise=noise, to=to, min_effect=min_effect
    )
    rows: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    pool = _pool(jobs) if engine == "exact" else None
    search = _Search(m, question, ladder, kw, pool, jobs, engine, progress)
    try:
        for mult in rungs:
            row, best = _plan_rung(search, mult, best)
            rows.append(row)
    finally:
        if pool:
            pool.shutdown()
    return Design(
        question=question,
        effect=effect_of(question, delta_a, ratio),
        goal=goal,
        fdr=FDR,
        engine=engine,
        rungs=tuple(_rung(row) for row in rows),
        best=None if best is None else Cheapest(**best),
    )


def _rung(row: dict[str, Any]) -> Rung:
    """A rung's search record as the plan returns it: the cells tried in seed order."""
    tried = sorted((Tried(t["seeds"], t["power"], t["trials"]) for t in row["tried"]), key=lambda t: t.seeds)
    keys = ("multiple", "compute", "gain_fraction", "seeds", "power", "se", "trials")
    return Rung(**{k: row[k] for k in keys}, tried=tuple(tried), why=row.get("why"))
