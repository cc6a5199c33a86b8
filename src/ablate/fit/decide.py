"""What would decide an inconclusive arm: the fewest seeds per arm that give its tests the power to call it
(`seeds_to_decide`, the `decide` field of docs/json.md), simulated from the measured seed spread."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import t as student_t

from ablate.fit.arms import ArmResult
from ablate.fit.effects import compute_text, tested_ratio
from ablate.fit.spread import FDR, MinEffect, NoiseFloor

DECIDE_POWER = 0.8
SEED_LADDER = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)
"""Seeds per arm tried for an inconclusive arm, and by `ablate plan`; past the top, more seeds at this compute is not
the way to decide."""
DECIDE_DRAWS = 4000


def decide_power(
    d_a: float,
    lr: float,
    floor: NoiseFloor,
    me: MinEffect,
    seeds: int,
    arms: int,
    alpha: float,
    rng: np.random.Generator,
    draws: int = DECIDE_DRAWS,
) -> float:
    """The chance that an arm is decided (a change in A or compute found, or both shown equivalent) with `seeds`
    seeds in it and in the baseline, when the true differences are d_a (on A) and lr (log compute) and one seed
    varies by the measured spread; the spread is re-estimated on arms x (seeds - 1) degrees of freedom (or the
    floor's, if more), each test at level `alpha`. Monte Carlo over the estimates and the estimated spread."""
    dof = max(floor.dof, arms * (seeds - 1))
    t2 = student_t.ppf(1.0 - alpha / 2.0, dof)
    t1 = student_t.ppf(1.0 - alpha, dof)
    decided_change = np.zeros(draws, dtype=bool)
    equiv = np.ones(draws, dtype=bool)
    for true, sd, delta in ((d_a, floor.sd_A, me.a), (lr, floor.sd_logc, me.log_ratio)):
        if not np.isfinite(true):  # no compute ratio: only the ceiling can decide, and equivalence cannot be shown
            equiv[:] = False
            continue
        se = sd * math.sqrt(2.0 / seeds)
        est = true + se * rng.standard_normal(draws)
        s = se * np.sqrt(rng.chisquare(dof, draws) / dof)
        decided_change |= np.abs(est) / s > t2
        equiv &= ((est + delta) / s > t1) & ((est - delta) / s < -t1)
    return float(np.mean(decided_change | equiv))


def seeds_to_decide(
    a: ArmResult,
    floor: NoiseFloor,
    me: MinEffect,
    n_compared: int,
    x: str = "",
    power: float = DECIDE_POWER,
    ladder: tuple[int, ...] = SEED_LADDER,
) -> dict[str, Any]:
    """The fewest seeds per arm (this arm and the baseline, at the compute they have now) that decide this arm with
    `power`, assuming its true differences are the measured ones and the seed spread is the measured one (the same
    NoiseFloor `ablate plan` simulates from). The false-discovery control is taken as 5% / the number of tests in
    the family (three per compared arm: the threshold its smallest p-value must meet), which errs on more seeds."""
    lr = math.log(tested_ratio(a)) if np.isfinite(tested_ratio(a)) and tested_ratio(a) > 0 else float("nan")
    d_a, _ = a.comparison()
    arms = n_compared + 1
    alpha = FDR / (3 * max(1, n_compared))
    rng = np.random.default_rng(20260)
    more = [n for n in ladder if n > a.seeds]  # more seeds than it has: it is undecided at its own count
    seeds = next((n for n in more if decide_power(d_a, lr, floor, me, n, arms, alpha, rng) >= power), None)
    compute = float(a.fit.window[1])
    at = f"{compute_text(compute)} {x}".rstrip()
    if seeds is None and not np.isfinite(lr):
        text = (
            f"more than {ladder[-1]} seeds an arm at {at} would be needed: with no compute ratio measured (the arm "
            "never reaches the baseline's pass rate under the shared A), equivalence cannot be shown, and the "
            "ceiling difference is too small for the seed spread"
        )
    elif seeds is None:
        text = (
            f"more than {ladder[-1]} seeds an arm at {at} would be needed: at this compute the seed "
            "spread hides differences of this size; run longer, or decide whether a smaller effect matters"
        )
    else:
        text = f"~{seeds} seeds an arm at {at} would decide it ({power:.0%} power)"
    return {"seeds": seeds, "compute": compute, "power": power, "text": text}
