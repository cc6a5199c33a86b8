"""`ablate sweep --decide`: a look after every wave of seeds, with error control for the procedure as a whole.

A user who adds seeds to an undecided sweep and ranks it again runs a sequential procedure, and each look that holds
its tests to 5% lets the whole procedure err more often (bench/looks.py: false calls on null arms reach 12-16% by 12
seeds in waves of 3). `--decide` plans its looks instead: before the first wave it knows the most seeds an arm may get
(`max_seeds`) and so the number of looks L, and it holds every look's ranking to a false-discovery rate of q / L (an
equal share of q per look: Bonferroni across looks, the simplest alpha-spending rule). Whatever the looks' dependence,
the chance that any look makes a false call is at most the sum of the looks' chances, so false change calls on null
arms and `equivalent` claimed for a true difference of exactly the smallest effect that matters stay within q for the
whole procedure, every look and every wave included. The price is a stricter test at each look; bench/decide.py
measures what it buys back by stopping arms that are settled early.

An arm that cannot be decided by `max_seeds` at the difference measured (`futile_arm`: projected there, the chance of
a change shown, or of equivalence shown, is below 20%) stops too, without a claim: stopping without a claim cannot add
a false one, so the error control stands, and the seeds go where they decide something. An arm is settled (`settled`)
when its verdict is `equivalent`; a ceiling change whose size is clear (its interval, at 1 - level in a look, wholly
beyond or wholly inside the smallest effect that matters); or an efficiency change whose size is clear while A is
shown unmoved (ΔA's interval inside the smallest effect): with few seeds, a ceiling change can show first as a
difference in compute, and `efficiency` claims that only efficiency moved. Any other arm gets more seeds. This module
holds the schedule (`Looks`), the rule, and the procedure simulated on `ablate plan`'s fast engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from ablate.errors import ErrorKind, SettingError, UserError
from ablate.fit.arms import ArmResult
from ablate.fit.batch_verdicts import CODES, futile
from ablate.fit.effects import practical
from ablate.fit.power import Rung, verdict_codes
from ablate.fit.spread import FDR, MinEffect, NoiseFloor

CHANGES = ("ceiling_up", "ceiling_down", "efficiency_up", "efficiency_down")


@dataclass(frozen=True)
class Looks:
    """The looks of one `--decide` sweep: after every `wave` seeds an arm, up to `max_seeds`."""

    wave: int = 3
    max_seeds: int = 12
    q: float = FDR

    def __post_init__(self) -> None:
        if self.wave < 2:
            raise SettingError(
                f"{{wave}} {self.wave}: a wave needs at least 2 seeds an arm (a seed spread needs two)", "wave"
            )
        if self.max_seeds < self.wave:
            raise SettingError(
                f"{{max_seeds}} {self.max_seeds}: at least one wave ({self.wave} seeds); raise it", "max_seeds"
            )
        if not 0.0 < self.q < 1.0:
            raise UserError(
                f"false-discovery rate {self.q}: must be between 0 and 1 (e.g. 0.05)", kind=ErrorKind.SETTING
            )

    @property
    def seeds(self) -> tuple[int, ...]:
        """Seeds an arm has at each look: every wave, and `max_seeds` last."""
        at = list(range(self.wave, self.max_seeds + 1, self.wave))
        return tuple(at if at[-1] == self.max_seeds else [*at, self.max_seeds])

    @property
    def level(self) -> float:
        """The false-discovery rate each look's ranking is held to: an equal share of q."""
        return self.q / len(self.seeds)

    def describe(self) -> str:
        n = len(self.seeds)
        return (
            f"{n} look{'s' * (n != 1)} at {', '.join(map(str, self.seeds))} seeds an arm, each held to "
            f"{self.level:.3g} ({self.q:g} / {n}; intervals at {1 - self.level:.4g}) so that the whole procedure errs "
            f"at most {self.q:g}"
        )


def futile_arm(arm: ArmResult, me: MinEffect, horizon: float, dof: float, level: float) -> bool:
    """`batch_verdicts.futile` for a ranked arm: its ΔA and compute ratio with their intervals at 1 - level (t with
    `dof`: a look's ranking is made with --ci 1 - level), its tests at `level`."""
    if arm.delta_A is None or arm.delta_A_ci is None or horizon <= 1:
        return False
    crit = float(student_t.ppf(1.0 - level / 2, max(dof, 1.0)))  # a look's intervals are at 1 - level
    se_a = (arm.delta_A_ci[1] - arm.delta_A_ci[0]) / (2 * crit)
    ratio = None if arm.shared is None else arm.shared.compute_ratio_tested
    rci = None if arm.shared is None else arm.shared.compute_ratio_ci
    lr = math.log(ratio) if ratio else float("nan")
    se_c = (math.log(rci[1]) - math.log(rci[0])) / (2 * crit) if rci else float("nan")
    return bool(futile(arm.delta_A, se_a, lr, se_c, me, horizon, level))


def settled(arm: ArmResult, me: MinEffect) -> bool:
    """Whether `sweep --decide` stops adding seeds to an arm ranked against the baseline (the module docstring)."""
    if arm.verdict == "equivalent":
        return True
    if arm.verdict in ("ceiling_up", "ceiling_down"):
        return arm.practical in ("material", "negligible")
    if arm.verdict in ("efficiency_up", "efficiency_down") and arm.delta_A_ci is not None:
        a_unmoved = practical(arm.delta_A_ci[0], arm.delta_A_ci[1], me.a) == "negligible"
        return a_unmoved and arm.practical in ("material", "negligible")
    return False


@dataclass
class Simulated:
    """The procedure's outcome in each trial: [T] arrays."""

    code: np.ndarray
    """Index in CODES of the verdict it ends with (its settling verdict, else the last look's)."""
    seeds: np.ndarray
    """Seeds an arm when it stopped."""
    ever_changed: np.ndarray
    """Whether any look called a change (counted as a false call on null arms, even if a later look settles)."""
    ever_equivalent: np.ndarray
    """Whether any look called the arms equivalent."""


def simulate(
    rung: Rung,
    looks: Looks,
    *,
    noise: NoiseFloor | None,
    me: MinEffect,
    extra_arms: int,
    seed: int,
    naive: bool = False,
    futility: bool = True,
) -> Simulated:
    """The `--decide` procedure on every trial of a rung (arm 0 against the baseline, arm 1): look at each wave's
    seeds with `rank`'s tests held to `looks.level` (to q at every look with naive=True: the user's way of adding
    seeds and ranking again), and stop at the first settled verdict, or (with `futility`) once the arm cannot be
    settled by the most seeds (`batch_verdicts.futile`)."""
    T = rung.trials
    code = np.full(T, CODES.index("not_identified"))
    used = np.zeros(T, dtype=int)
    open_ = np.ones(T, dtype=bool)
    changed = np.zeros(T, dtype=bool)
    equivalent = np.zeros(T, dtype=bool)
    change_codes = [CODES.index(c) for c in CHANGES]
    level = looks.q if naive else looks.level
    for k, s in enumerate(looks.seeds):
        rng = np.random.default_rng([seed, k])
        horizon = looks.max_seeds / s if futility else None
        c, stops = verdict_codes(rung, s, noise=noise, me=me, extra_arms=extra_arms, rng=rng, q=level, horizon=horizon)
        changed |= open_ & np.isin(c, change_codes)
        equivalent |= open_ & (c == CODES.index("equivalent"))
        code = np.where(open_, c, code)
        used = np.where(open_, s, used)
        open_ &= ~stops
        if not open_.any():
            break
    return Simulated(code, used, changed, equivalent)
