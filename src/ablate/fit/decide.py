"""What would decide an inconclusive arm: the fewest seeds per arm that give its tests the power to call it
(`seeds_to_decide`, the `decide` field of docs/json.md), simulated from the measured seed spread."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from ablate.fit.arms import ArmResult, SeedsToDecide
from ablate.fit.effects import compute_text, tested_ratio
from ablate.fit.spread import FDR, MinEffect, NoiseFloor
from ablate.fit.stats import benjamini_hochberg_rows, tost

DECIDE_POWER = 0.8
SEED_LADDER = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)
"""Seeds per arm tried for an inconclusive arm, and by `ablate plan`; past the top, more seeds at this compute is not
the way to decide."""
DECIDE_DRAWS = 4000


@dataclass(frozen=True)
class Family:
    """The other tests of the ranking an arm is decided among: their p-values (NaN: no test) and which of them are
    equivalence tests (verdicts.decide_verdicts' family, less the arm's own three)."""

    pvals: tuple[float, ...] = ()
    is_equivalence: tuple[bool, ...] = ()
    level: float = FDR
    """The false-discovery rate the ranking holds its tests to (5%, or a `--decide` look's share)."""


def decide_power(
    d_a: float,
    lr: float,
    floor: NoiseFloor,
    me: MinEffect,
    seeds: int,
    arms: int,
    rng: np.random.Generator,
    family: Family = Family(),
    draws: int = DECIDE_DRAWS,
) -> float:
    """The chance that an arm is decided (a change in A or compute found, or both shown equivalent) with `seeds` seeds
    in it and in the baseline, when the true differences are d_a (on A) and lr (log compute) and one seed varies by
    the measured spread; the spread is re-estimated on arms x (seeds - 1) degrees of freedom (or the floor's, if
    more). Decided as `rank` decides: the arm's ceiling and efficiency tests are discoveries among the ranking's
    tests of change, its equivalence test among all its tests (Benjamini-Hochberg at the family's level, 5% by
    default), the other tests of the ranking (`family`) held at their p-values now. More seeds would make those
    smaller too, and smaller p-values elsewhere only raise Benjamini-Hochberg's threshold, so holding them errs on
    more seeds. Monte Carlo over the estimates and the estimated spread."""
    dof = max(floor.dof, arms * (seeds - 1))
    nan = np.full(draws, np.nan)
    p_change, p_equiv = [], []
    for true, sd, delta in ((d_a, floor.sd_A, me.a), (lr, floor.sd_logc, me.log_ratio)):
        if not np.isfinite(true):  # no compute ratio: only the ceiling can decide, and equivalence cannot be shown
            p_change.append(nan)
            p_equiv.append(nan)
            continue
        se = sd * math.sqrt(2.0 / seeds)
        est = true + se * rng.standard_normal(draws)
        s = se * np.sqrt(rng.chisquare(dof, draws) / dof)
        p_change.append(2.0 * student_t.sf(np.abs(est) / s, dof))
        p_equiv.append(tost(est, s, dof, delta))
    p_eq = np.max(np.vstack(p_equiv), axis=0)  # intersection-union: NaN (not testable) stays NaN
    others = np.broadcast_to(np.asarray(family.pvals, dtype=float), (draws, len(family.pvals)))
    eq_flags = np.asarray(family.is_equivalence, dtype=bool)
    change = benjamini_hochberg_rows(np.column_stack([np.where(eq_flags, np.nan, others), *p_change]), family.level)
    every = benjamini_hochberg_rows(np.column_stack([others, *p_change, p_eq]), family.level)
    return float(np.mean(change[:, -2:].any(axis=1) | every[:, -1]))


def seeds_to_decide(
    a: ArmResult,
    floor: NoiseFloor,
    me: MinEffect,
    n_compared: int,
    x: str = "",
    power: float = DECIDE_POWER,
    ladder: tuple[int, ...] = SEED_LADDER,
    family: Family = Family(),
) -> SeedsToDecide:
    """The fewest seeds per arm (this arm and the baseline, at the compute they have now) that decide this arm with
    `power`, assuming its true differences are the measured ones and the seed spread is the measured one (the same
    NoiseFloor `ablate plan` simulates from), decided by the ranking's own false-discovery control among the other
    tests of the ranking (`family`; see `decide_power`)."""
    lr = math.log(tested_ratio(a)) if np.isfinite(tested_ratio(a)) and tested_ratio(a) > 0 else float("nan")
    d_a, _ = a.comparison()
    arms = n_compared + 1
    rng = np.random.default_rng(20260)
    more = [n for n in ladder if n > a.seeds]  # more seeds than it has: it is undecided at its own count
    seeds = next((n for n in more if decide_power(d_a, lr, floor, me, n, arms, rng, family) >= power), None)
    compute = float(a.fit.window[1])
    at = f"{compute_text(compute)} {x}".rstrip()
    if seeds is None and not np.isfinite(lr):
        text = (
            f"more than {ladder[-1]} seeds an arm at {at} would be needed: with no compute ratio measured (the arm "
            "has no C_mid under the shared A), equivalence cannot be shown, and the "
            "ceiling difference is too small for the seed spread"
        )
    elif seeds is None:
        text = (
            f"more than {ladder[-1]} seeds an arm at {at} would be needed: at this compute the seed "
            "spread hides differences of this size; run longer, or decide whether a smaller effect matters"
        )
    else:
        text = (
            f"~{seeds} seeds an arm at {at} ({a.seeds} run so far, counted in) would decide it ({power:.0%} power); "
            "seeds added after this look make a second look, which one ranking's 5% does not cover"
        )
    return SeedsToDecide(seeds, compute, power, text)
