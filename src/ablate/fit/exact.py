"""`ablate plan`'s exact engine: each simulated sweep ranked by `compare.rank` itself (the reference the fast engine,
fit/power.py, is checked against; minutes instead of seconds). fit/planning.py says what a trial simulates."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ablate.fit.arms import CHANGED
from ablate.fit.compare import rank
from ablate.fit.result import FitOptions
from ablate.fit.spread import FDR, MinEffect, NoiseFloor
from ablate.fit.stats import discoveries
from ablate.fit.taskmodel import (
    MAX_SIM_ARMS,
    PLAN_BOOT,
    QUESTIONS,
    WANTED,
    TaskModel,
    effect_of,
    seed_spread,
    simulate_runs,
)


def sim_options(compute: float, seed: int, to: float | None = None) -> FitOptions:
    """Fit options of a simulated sweep whose runs reach `compute`: verdicts ranked at `to` (default: twice that)."""
    return FitOptions(n_boot=PLAN_BOOT, target=to if to is not None else 2.0 * compute, seed=seed)


def trial(
    m: TaskModel,
    seeds: int,
    compute: float,
    effect: dict[str, float],
    rng: np.random.Generator,
    seed: int,
    noise: NoiseFloor | None = None,
    to: float | None = None,
    min_effect: MinEffect | None = None,
) -> str:
    """One simulated sweep through `compare.rank` (the exact engine; see the module docstring); the effect arm's
    verdict (`not_fitted` when it could not be fitted). The three tests of each arm beyond MAX_SIM_ARMS enter the
    false-discovery control as uniform p-values (a null arm's change tests are at least uniform, and its
    equivalence test, often smaller, would only ease the others' discoveries: so this never makes a discovery
    easier than the full sweep)."""
    sd_a, sd_logc = seed_spread(m, rng)
    sim_arms = max(2, min(m.arms, MAX_SIM_ARMS))
    curves = simulate_runs(
        m,
        min(m.a + effect.get("a", 0.0), 0.99),
        m.b * effect.get("b", 1.0),
        m.c_mid * effect.get("c_mid", 1.0),
        seeds,
        compute,
        rng,
        "arm",
        sd_a,
        sd_logc,
    )
    for i in range(sim_arms - 1):
        curves += simulate_runs(
            m, m.a, m.b, m.c_mid, seeds, compute, rng, "base" if i == 0 else f"null{i}", sd_a, sd_logc
        )
    ranking = rank(
        curves, sim_options(compute, seed, to), baseline="base", noise=noise, min_effect=min_effect, decide=False
    )
    by = {a.arm: a for a in ranking.arms}
    arm = by.get("arm")
    if arm is None:
        return "not_fitted"
    extra = 3 * (m.arms - sim_arms)
    verdict = arm.verdict
    if extra <= 0 or verdict not in CHANGED + ("equivalent", "inconclusive"):
        return verdict or "not_fitted"
    # the full sweep's false-discovery control: this ranking's p-values plus the arms not simulated
    pvals: list[float] = []
    where: dict[str, int] = {}
    is_eq: list[bool] = []
    for a in ranking.arms:
        if a.p_ceiling is not None:
            where[a.arm] = len(pvals)
            pvals += [a.p_ceiling] + [float("nan") if p is None else p for p in (a.p_efficiency, a.p_equivalent)]
            is_eq += [False, False, True]
        elif a.p_at_end is not None:
            pvals.append(a.p_at_end)
            is_eq.append(False)
    pvals += list(rng.random(extra))
    is_eq += [k % 3 == 2 for k in range(extra)]
    found = discoveries(pvals, is_eq, FDR)
    first = where.get("arm")  # its three tests' place in the family
    if first is None:
        return verdict
    d_a, shared = arm.comparison()
    me = min_effect or MinEffect()
    ci = arm.delta_A_ci or [-math.inf, math.inf]
    rci = shared.compute_ratio_ci or (0.0, math.inf)
    hidden = (
        me.a >= max(abs(ci[0]), abs(ci[1]))
        and found[first + 1]  # as verdicts._conclude
        and not 1 / me.ratio <= rci[0] <= rci[1] <= me.ratio
    )
    if found[first] and not hidden:  # a negligible A change hides no efficiency change that may matter
        return "ceiling_up" if d_a > 0 else "ceiling_down"
    if found[first + 1]:
        tested = 1.0 if shared.compute_ratio_tested is None else shared.compute_ratio_tested
        return "efficiency_up" if tested < 1 else "efficiency_down"
    return "equivalent" if found[first + 2] else "inconclusive"


def power_cell(
    m: TaskModel,
    seeds: int,
    compute: float,
    question: str,
    *,
    delta_a: float,
    ratio: float,
    trials: int,
    goal: float,
    seed: int,
    noise: NoiseFloor | None = None,
    to: float | None = None,
    min_effect: MinEffect | None = None,
) -> dict[str, Any]:
    """Power of one design: trials in blocks of 20, stopping once the 99% interval of the power is clearly below
    `goal` (from 20 trials) or clearly above it (from 40). Its random numbers depend only on the design and
    `seed`."""
    rng = np.random.default_rng([seed, seeds, int(compute * 1e6) % (2**31), QUESTIONS.index(question)])
    wanted = WANTED[question]
    effect = effect_of(question, delta_a, ratio)
    hits = n = 0
    while n < trials:
        for _ in range(min(20, trials - n)):
            hits += trial(m, seeds, compute, effect, rng, seed * 1009 + n, noise, to, min_effect) == wanted
            n += 1
        p = hits / n
        half = 2.58 * math.sqrt(max(p * (1 - p), 0.02) / n)
        if p + half < goal or (n >= 40 and p - half > goal):
            break
    p = hits / n
    return {
        "seeds": seeds,
        "compute": compute,
        "power": p,
        "se": math.sqrt(max(p * (1 - p), 1e-9) / n),
        "trials": n,
        "reached": p >= goal,
    }


def exact_cell(args: tuple) -> dict[str, Any]:
    """power_cell of (model, seeds, compute, question, keywords): one argument, for a process pool's map."""
    m, seeds, compute, question, kw = args
    return power_cell(m, seeds, compute, question, **kw)
