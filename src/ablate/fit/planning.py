"""How many seeds and how much compute a question needs, and whether running arms still need more: answered by
simulation, never by a closed-form guess. Two engines give a design's power (ENGINES): `fast` (fit/power.py, the
default: every trial of a compute rung simulated and fitted at once, the verdicts by `rank`'s rules in closed form)
and `exact` (each simulated sweep ranked by `compare.rank` itself: the reference, minutes instead of seconds).

The task model (`TaskModel`) is what the simulation draws from, measured on real runs (`from_ranking`) or read
from a stored file (`--calibration`, written by `--save-calibration`):
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

Running arms (`futures`): each run is continued from its own fitted curve (shifted by a draw of its arm's bootstrap,
so the fit's uncertainty travels) with its own measured drift, carried on from its last residual, and evaluation
noise, up to the compute its max_steps will reach; the sweep is re-ranked, and the share of futures in which an
arm's verdict differs from today's is how likely more compute is to change it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.stats import beta as beta_dist

from ablate.errors import UserError
from ablate.fit import power
from ablate.fit.arms import Ranking
from ablate.fit.compare import rank
from ablate.fit.curve import Curve
from ablate.fit.exact import exact_cell, sim_options
from ablate.fit.sigmoid import gain_fraction, sigmoid
from ablate.fit.spread import FDR, MinEffect, NoiseFloor
from ablate.fit.taskmodel import (
    MAX_SCALE,
    MAX_SIM_ARMS,
    MIN_SCALE,
    PLAN_BOOT,
    QUESTIONS,
    WANTED,
    TaskModel,
    effect_of,
    simulate_runs,
)
from ablate.fit.verdicts import SEED_LADDER, measured_floor

__all__ = [
    "COMPUTE_RUNGS",
    "ENGINES",
    "MAX_SCALE",
    "MAX_SIM_ARMS",
    "MIN_SCALE",
    "QUESTIONS",
    "SEED_LADDER",
    "WANTED",
    "TaskModel",
    "change_bound",
    "design",
    "effect_of",
    "from_ranking",
    "futures",
    "verdict_key",
]

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
    target = kw["to"] if kw["to"] is not None else 2.0 * compute

    def cell(seeds: int) -> dict[str, Any]:
        return power.cell_power(
            rung,
            seeds,
            WANTED[question],
            target=target,
            noise=kw["noise"],
            me=kw["min_effect"] or MinEffect(),
            extra_arms=m.arms - sim_arms,
            goal=kw["goal"],
            seed=seed,
        )

    return cell


def _pool(jobs: int):
    if jobs <= 1:
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))


def _search_rung(
    m: TaskModel,
    compute: float,
    question: str,
    row: dict[str, Any],
    ladder: Sequence[int],
    hi: int,
    kw: dict[str, Any],
    pool,
    jobs: int,
    engine: str,
    progress: Callable[[str], None] | None,
) -> int | None:
    """The index in `ladder` (up to `hi`) of the fewest seeds that reach the goal at this compute, or None; every
    cell tried goes into row["tried"]. Seed counts are tried doubling from the fewest (cheap cells first, `jobs` at
    a time with a pool), then bisected below the first count that reaches the goal."""
    lo = 0
    fast = _fast_cells(m, compute, question, kw) if engine == "fast" else None

    def run(idx: list[int]) -> list[dict[str, Any]]:
        cells = [(m, ladder[i], compute, question, kw) for i in idx]
        if fast is not None:
            res = [fast(ladder[i]) for i in idx]
        else:
            res = list(pool.map(exact_cell, cells)) if pool and len(cells) > 1 else [exact_cell(c) for c in cells]
        for r in res:
            row["tried"].append(r)
            if progress:
                progress(
                    f"{question} at {compute:.4g}: {r['seeds']} seeds -> power {r['power']:.2f} ({r['trials']} trials)"
                )
        return res

    doubling = [
        i for i in range(lo, hi + 1) if i == lo or (ladder[i] >= 2 * ladder[lo] and (ladder[i] & (ladder[i] - 1) == 0))
    ] + [hi]
    doubling = sorted(set(doubling))
    found, last_bad = None, lo - 1
    step = max(1, jobs) if pool else 1  # cells in parallel only with a pool; else the cheapest first
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
) -> dict[str, Any]:
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
    rows, best = [], None
    pool = _pool(jobs) if engine == "exact" else None
    try:
        for mult in rungs:
            compute = m.budget * mult
            f = gain_fraction(compute, m.b, m.c_mid)
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
            rows.append(row)
            if f < MIN_GAIN:
                row["why"] = f"the window reaches {f:.0%} of the gain: A cannot be identified"
                continue
            hi = len(ladder) - 1
            if best is not None:  # a design here must cost less than the best: fewer seeds than that allows
                cap = best["seeds"] * best["compute"] / compute
                while hi >= 0 and ladder[hi] >= cap:
                    hi -= 1
                if hi < 0:
                    row["why"] = "cannot be cheaper than a shorter run"
                    continue
            found = _search_rung(m, compute, question, row, ladder, hi, kw, pool, jobs, engine, progress)
            if found is None:
                top = row["tried"][-1]
                row["why"] = f"{top['seeds']} seeds reach {top['power']:.0%} power" + (
                    "" if best is None else " (more would cost more than the cheapest design)"
                )
                continue
            r = next(t for t in row["tried"] if t["seeds"] == ladder[found])
            row.update(seeds=r["seeds"], power=r["power"], se=r["se"], trials=r["trials"])
            if best is None or r["seeds"] * compute < best["seeds"] * best["compute"]:
                best = {"multiple": mult, "compute": compute, "seeds": r["seeds"], "power": r["power"], "se": r["se"]}
    finally:
        if pool:
            pool.shutdown()
    for row in rows:
        row["tried"] = sorted(
            ({"seeds": t["seeds"], "power": t["power"], "trials": t["trials"]} for t in row["tried"]),
            key=lambda t: t["seeds"],
        )
    return {
        "question": question,
        "effect": effect_of(question, delta_a, ratio),
        "goal": goal,
        "fdr": FDR,
        "engine": engine,
        "rungs": rows,
        "best": best,
    }


# ---- the model, from a ranking ----


def _fit_error(m: TaskModel, seeds: int, compute: float, sims: int, seed: int) -> tuple[float, float]:
    """The spread between seeds' fitted A and log compute that fit error alone gives at this design (the same
    model without seed spread), as the variances `measured_floor` would report."""
    rng = np.random.default_rng([seed, 7])
    va, vc = [], []
    for i in range(sims):
        curves = []
        for k in range(max(2, min(m.arms, 3))):
            curves += simulate_runs(m, m.a, m.b, m.c_mid, seeds, compute, rng, f"arm{k}", 0.0, 0.0)
        r = rank(curves, sim_options(compute, seed * 31 + i), baseline="arm0")
        floor = measured_floor(r.arms)
        if floor is not None:
            va.append(floor.sd_A**2)
            vc.append(floor.sd_logc**2)
    return (float(np.mean(va)) if va else 0.0, float(np.mean(vc)) if vc else 0.0)


def from_ranking(
    ranking: Ranking,
    *,
    budget: float,
    seeds: int,
    gpu_hours_per_x: float | None = None,
    steps_per_x: float | None = None,
    source: str = "",
    seed: int = 0,
) -> TaskModel:
    """The task model measured on a ranked sweep (see the module docstring). `budget`: the compute a run reaches at
    its max_steps; `seeds`: seeds per arm the sweep ran (the design the seed spread was measured at)."""
    if not ranking.arms:
        raise UserError("nothing to plan from: no arm could be fitted")
    by = {a.arm: a for a in ranking.arms}
    notes = []
    base = by.get(ranking.baseline or "")
    if base is None:
        ident = [a for a in ranking.arms if a.fit.identifiable] or ranking.arms
        base = ident[0]
        notes.append(f"no baseline: the curve simulated is arm {base.arm!r}'s")
    f = base.fit
    if not f.identifiable:
        notes.append(
            f"arm {base.arm!r}'s A is not identified: its point fit (A {f.A:.3f}) is what is simulated; "
            "run longer to measure it"
        )
    floor = ranking.floor
    if floor is None and ranking.baseline is None:
        raise UserError(
            "no baseline arm to plan against: the seed spread is measured in comparisons with it; give --baseline ARM"
        )
    if floor is None:
        raise UserError(
            "no seed spread to plan with: no arm has 2 identified seeds; run the sweep with seeds "
            "(seed=0,1,2) or give --noise FILE"
        )
    est = [e for a in ranking.arms for e in (a.fit.noise or [])]
    if est:
        drift_sd = math.sqrt(float(np.median([e.drift_var for e in est])))
        rho = float(np.median([e.rho for e in est]))
        known = all(e.eval_known for e in est)
    else:
        drift_sd, rho, known = 0.0, 0.0, False
        notes.append(
            "no drift measured (the fits' noise estimates are missing): only the evaluation noise and the "
            "seed spread are simulated"
        )
    curves = [c for a in ranking.arms for c in a.fit.curves]
    ns = [float(np.median(c.n)) for c in curves if c.n is not None]
    val_n = float(np.median(ns)) if ns and known else None
    steps = [float(np.median(np.diff(c.x[c.x > 0]))) for c in curves if (c.x > 0).sum() >= 2]
    eval_every = float(np.median(steps)) if steps else budget / 40
    m = TaskModel(
        x=ranking.x,
        r0=f.R0,
        a=f.A,
        b=f.B,
        c_mid=f.C_mid,
        val_n=val_n,
        eval_every=eval_every,
        drift_sd=drift_sd,
        drift_rho=rho,
        seed_sd_a=floor.sd_A,
        seed_sd_logc=floor.sd_logc,
        seed_dof=floor.dof,
        fit_sd_a=0.0,
        fit_sd_logc=0.0,
        budget=budget,
        arms=len({a.arm for a in ranking.arms} | {d.get("arm") or d["label"] for d in ranking.not_fitted}),
        gpu_hours_per_x=gpu_hours_per_x,
        steps_per_x=steps_per_x,
        source=f"{source}; seed spread: {floor.source}",
        notes=notes,
    )
    # how much of the measured spread is the fits' own error at the window it was measured on
    window = max(float(c.x.max()) for c in curves)
    err_a, err_c = _fit_error(m, max(2, seeds), window, sims=12, seed=seed)
    m.fit_sd_a, m.fit_sd_logc = math.sqrt(err_a), math.sqrt(err_c)
    return m


# ---- running arms: would more compute change the verdict? ----


def verdict_key(a) -> str:
    """An arm's verdict as one key (a not-identified arm with its end-of-window call: not_identified_higher)."""
    v = a.verdict or "not_fitted"
    return f"{v}_{a.r_call}" if v == "not_identified" and a.r_call else v


def _continue(
    c: Curve, fit_pf, shift: Callable[[np.ndarray], np.ndarray], est, x_end: float, rng: np.random.Generator
) -> Curve:
    """Curve c carried on to x_end: its fitted mean plus `shift`, its drift continued from the last residual,
    evaluation noise as measured."""
    xs = c.x[c.x > 0]
    if xs.size < 2 or x_end <= c.x[-1]:
        return c
    dx = float(np.median(np.diff(xs)))
    xf = np.arange(c.x[-1] + dx, x_end + dx * 1e-6, dx)
    if xf.size == 0:
        return c
    mean = np.asarray(fit_pf.predict(xf), dtype=float) + shift(xf)
    drift_var = est.drift_var if est is not None else 0.0
    rho = est.rho if est is not None else 0.0
    last = float(c.y[-1] - fit_pf.predict(np.array([c.x[-1]]))[0])
    ev_last = float(est.eval_var[-1]) if est is not None and est.eval_known and est.eval_var.size else 0.0
    d = last * drift_var / (drift_var + ev_last) if drift_var + ev_last > 0 else 0.0
    drift = np.empty(xf.size)
    sd = math.sqrt(drift_var * max(1.0 - rho * rho, 0.0))
    for t in range(xf.size):
        d = rho * d + sd * rng.standard_normal()
        drift[t] = d
    p = np.clip(mean + drift, 0.0, 1.0)
    n = c.n
    if n is not None and np.all(np.isfinite(n)):
        k = round(float(n[-1]))
        yf = rng.binomial(k, p) / k
        nf = np.concatenate([n, np.full(xf.size, float(k))])
    else:
        yf, nf = p, None
    return replace(c, x=np.concatenate([c.x, xf]), y=np.concatenate([c.y, yf]), n=nf, meta=dict(c.meta))


def change_bound(changes: int, n: int, level: float = 0.95) -> float:
    """One-sided `level` Clopper-Pearson upper bound on the chance of a change seen `changes` times in `n`."""
    if n <= 0:
        return 1.0
    return 1.0 if changes >= n else float(beta_dist.ppf(level, changes + 1, n - changes))


def futures(
    ranking: Ranking,
    ends: dict[str, float],
    *,
    n: int = 40,
    seed: int = 0,
    noise: NoiseFloor | None = None,
    frozen: set[str] | frozenset[str] = frozenset(),
) -> dict[str, dict[str, Any]]:
    """For each arm: today's verdict, and in how many of `n` simulated futures it changes. In each future every run
    goes on to its compute in `ends` (keyed by run name; runs not in it are over) from its own fit plus a bootstrap
    draw of its arm's curve, with its drift and evaluation noise, and the sweep is re-ranked: what the full sweep
    would say. The arms in `frozen` (candidates for stopping) are ranked a second time stopped where they are, the
    rest going on: what the sweep would say if they were stopped now. A change is a different verdict in either
    ranking, or an arm that can no longer be fitted; for the frozen arms, also any other arm whose verdict differs
    between the two rankings of the same future (stopping them moved it). Returns {arm: {"verdict", "changes", "n",
    "p_change", "bound" (the one-sided 95% upper bound on the chance of a change), "future": Counter of future
    verdicts, "stopped": Counter of verdicts when stopped now}}."""
    rng = np.random.default_rng([seed, 11])
    now = {a.arm: verdict_key(a) for a in ranking.arms}
    out = {arm: {"verdict": v, "changes": 0, "n": 0, "future": {}, "stopped": {}} for arm, v in now.items()}
    opts = replace(ranking.opts, n_boot=min(ranking.opts.n_boot, PLAN_BOOT) or PLAN_BOOT)

    def tally(r: Ranking | None, key: str, arms: set[str], changed: dict[str, bool]) -> dict[str, str]:
        got = {} if r is None else {a.arm: verdict_key(a) for a in r.arms}
        for arm in arms:
            v = got.get(arm, "not_fitted")
            out[arm][key][v] = out[arm][key].get(v, 0) + 1
            changed[arm] = changed.get(arm, False) or v != out[arm]["verdict"]
        return got

    def ranked(curves: list[Curve], i: int) -> Ranking | None:
        try:
            return rank(
                curves,
                replace(opts, seed=seed * 7919 + i),
                baseline=ranking.baseline,
                noise=noise,
                x=ranking.x,
                min_effect=ranking.min_effect,
            )
        except UserError:  # the baseline can't be fitted: no arm keeps its verdict
            return None

    for i in range(n):
        going, stopped = [], []
        for a in ranking.arms:
            f = a.fit
            draw = f.draws[rng.integers(len(f.draws))] if f.draws is not None and len(f.draws) else None

            def shift(x, draw=draw, f=f):
                if draw is None:
                    return np.zeros_like(x)
                return sigmoid(x, *draw) - f.fit.predict(x)

            for j, c in enumerate(f.curves):
                pf = f.seeds.fits[j] if f.seeds is not None and f.seeds.fits[j] is not None else f.fit
                est = f.noise[j] if f.noise is not None and j < len(f.noise) else None
                cont = _continue(c, pf, shift, est, ends.get(c.run, float(c.x[-1])), rng)
                going.append(cont)
                stopped.append(replace(c, stopped="pruned") if a.arm in frozen else cont)
        changed: dict[str, bool] = {}
        full = tally(ranked(going, i), "future", set(out), changed)
        if frozen:
            cut = tally(ranked(stopped, i), "stopped", set(frozen) & set(out), changed)
            # stopping them must not move the others either (they share the seed spread, the false-discovery
            # control and the end-of-window test): if it does, none of them is settled in this future
            if any(cut.get(arm, "not_fitted") != full.get(arm, "not_fitted") for arm in set(out) - set(frozen)):
                for arm in set(frozen) & set(out):
                    changed[arm] = True
        for arm, ch in changed.items():
            out[arm]["n"] += 1
            out[arm]["changes"] += ch
    for o in out.values():
        o["p_change"] = o["changes"] / o["n"] if o["n"] else None
        o["bound"] = change_bound(o["changes"], o["n"])
    return out
