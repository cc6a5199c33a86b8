"""Verdicts: the tests `rank` runs on its comparisons, the seed spread they are judged against, the smallest effect
that matters, and the paper's threshold rule.

The seed-to-seed spread (`NoiseFloor`) is measured, never assumed: from the arms of the ranking that have at least
two identified seeds (pooled), or from a stored measurement of the same task and recipe (`--noise FILE`, written by
`--save-noise`); of the two, the one resting on more seeds. Without either, a single seed cannot tell an effect from
a lucky seed, and every compared arm is `inconclusive` (needs seeds).

Each compared arm has three tests against that spread, with the differences taken between the arms' seed means
(what the spread describes): the ceiling (dA against 0), the efficiency (log compute to the baseline's pass rate at
the target, against 0), both two-sided t-tests; and equivalence: two one-sided t-tests (TOST) that |dA| is below the
smallest effect that matters (`MinEffect`, default the paper's 0.02) and the compute ratio within its band (default
+-15%), equivalent only when both are (intersection-union). An arm whose A is not identified has one test instead:
its fitted pass rate at the end of the window every arm covers. All the tests of a ranking are one family under
Benjamini-Hochberg at a 5% false-discovery rate. An arm is `ceiling up/down` when its ceiling test is a discovery,
else `efficiency up/down`, else `equivalent` when its equivalence test is, else `inconclusive`, with the seeds per
arm that would decide it (`seeds_to_decide`). A change also says whether it matters (`practical`): its interval
wholly beyond the smallest effect (`material`), wholly inside it (`negligible`), or neither (`unclear`).

The paper's own convention, a ceiling change beyond +-0.02 on A and an efficiency change beyond +-15% compute, is
available as `--margin paper` (or `--margin X` on A), labelled as such in every verdict: a threshold rule, not a
calibrated test, so within the margins it is `inconclusive`. The calibration harness (fit/calibrate.py, `ablate
calibrate`) measures how both behave.

The functions here read and fill `arms.ArmResult`s; the yardsticks are in fit/spread.py, the false-discovery
control and TOST in fit/stats.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import t as student_t

from ablate.errors import UserError
from ablate.fit.arms import ArmResult
from ablate.fit.result import FitOptions
from ablate.fit.spread import FDR, PAPER_A_MARGIN, PAPER_COMPUTE_MARGIN, MinEffect, NoiseFloor
from ablate.fit.stats import discoveries, tost


def measured_floor(arms: list[ArmResult]) -> NoiseFloor | None:
    """The seed-to-seed spread pooled over the arms with >= 2 identified seeds, or None when no arm has them.
    Each arm's per-seed values are taken around that arm's own mean (so arms that differ do not inflate it)."""
    ss_a = ss_c = 0.0
    dof_a = dof_c = 0
    used = []
    for arm in arms:
        a = np.array([v for v in arm.seed_A if np.isfinite(v)])
        if a.size >= 2:
            ss_a += float(((a - a.mean()) ** 2).sum())
            dof_a += a.size - 1
            used.append(arm.arm)
        c = np.array([v for v in (arm.log_compute_seeds or []) if np.isfinite(v)])
        if c.size >= 2:
            ss_c += float(((c - c.mean()) ** 2).sum())
            dof_c += c.size - 1
    if dof_a == 0 or dof_c == 0 or ss_a <= 0 or ss_c <= 0:  # identical seeds measure no spread to test against
        return None
    return NoiseFloor(
        sd_A=math.sqrt(ss_a / dof_a),
        sd_logc=math.sqrt(ss_c / dof_c),
        dof=min(dof_a, dof_c),
        source=f"the seeds of {len(used)} arm(s) of this ranking",
    )


def parse_margin(margin: str | float | None) -> float | None:
    """`--margin`: None (calibrated tests), `paper` (+-0.02 on A, the paper's convention) or a distance on A, finite
    and >= 0 (NaN would silently leave every arm undecided). Returns the margin on A, or None."""
    if margin is None:
        return None
    if isinstance(margin, str) and margin.strip().lower() == "paper":
        return PAPER_A_MARGIN
    try:
        m = float(margin)
    except (TypeError, ValueError):
        raise UserError(f"--margin {margin}: give `paper` (the paper's +-0.02 on A) or a number >= 0") from None
    if not (math.isfinite(m) and m >= 0.0):
        raise UserError(f"--margin {margin}: a margin on A must be a finite number >= 0 (e.g. 0.02), or `paper`")
    return m


def _log_ratio(a: ArmResult, base_seeds: list[float] | None, ratio: float, target: float) -> float:
    """log compute ratio, arm to baseline, to the baseline's pass rate at the target: the difference of the seeds'
    mean log compute where an arm has seeds, the shared fit's own ratio for a single run."""

    def mean_log(values, fallback):
        v = np.asarray(values or [], dtype=float)
        v = v[np.isfinite(v)]
        return float(v.mean()) if v.size else fallback

    if not (np.isfinite(ratio) and ratio > 0):
        return float("nan")
    return mean_log(a.log_compute_seeds, math.log(ratio * target)) - mean_log(base_seeds, math.log(target))


def _n_finite(values: list[float] | None) -> int:
    """How many seeds measured a value (1 for a single run, which has no per-seed list)."""
    return max(1, int(np.isfinite(values).sum())) if values else 1


def end_of_window(arms: list[ArmResult]) -> tuple[dict[str, np.ndarray], dict[str, Any] | None]:
    """Each arm's per-seed fitted pass rate at the end of the window every arm covers (inside every window: no
    extrapolation, so it is defined whether A is identified or not), and their seed spread pooled over the arms
    with two seeds or more ({"at", "sd_R", "dof"}, or None when no arm has them)."""
    at = min(a.fit.window[1] for a in arms)
    values = {}
    for a in arms:
        f = a.fit
        v = f.seeds.at(at) if f.seeds is not None else f.fit.predict(np.array([at]))
        values[a.arm] = np.asarray(v, dtype=float)[np.isfinite(v)]
    ss, dof = 0.0, 0
    for v in values.values():
        if v.size >= 2:
            ss += float(((v - v.mean()) ** 2).sum())
            dof += v.size - 1
    spread = {"at": at, "sd_R": math.sqrt(ss / dof), "dof": dof} if dof and ss > 0 else None
    return values, spread


def efficiency_text(a: ArmResult, opts: FitOptions) -> str:
    """The efficiency comparison in words: the compute ratio tested (the seeds' mean log compute, where the arms
    have seeds; else the shared fit's) with its interval."""
    sh = a.shared or {}
    ci = sh.get("compute_ratio_ci")
    return (
        f"A shared {sh.get('A_shared', float('nan')):.3f}: {_ratio(a):.2f}x compute to "
        f"baseline's R@{opts.target:g}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
    )


def _ratio(a: ArmResult) -> float:
    sh = a.shared or {}
    return float(sh.get("compute_ratio_tested", sh.get("compute_ratio", float("nan"))))


def short_effect(a: ArmResult, what: str) -> str:
    """The why cell (about 40 characters): the effect that decided, with its interval. `what`: ceiling, efficiency
    or both."""
    ci = a.delta_A_ci
    d_a = f"ΔA {a.delta_A:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")
    rci = (a.shared or {}).get("compute_ratio_ci")
    ratio = _ratio(a)
    comp = (f"{ratio:.2f}x" if np.isfinite(ratio) else "—") + (f" [{rci[0]:.2f}, {rci[1]:.2f}]" if rci else "")
    if what == "ceiling":
        return d_a
    if what == "efficiency":
        return f"compute {comp}"
    if not ci:  # no seed spread: no intervals, the estimates only
        d_a, comp = f"ΔA {a.delta_A:+.3f}", f"{ratio:.2f}x" if np.isfinite(ratio) else "—"
    return f"{d_a}; compute {comp}"


def _compute(x: float) -> str:
    """A compute value to read at a glance: 256,000 / 0.0312 / 1.6e+08."""
    return f"{x:,.0f}" if 1e3 <= x < 1e7 else f"{x:.3g}"


def practical(lo: float, hi: float, delta: float) -> str:
    """An interval [lo, hi] of a difference read against the smallest effect that matters, +-delta: `material`
    (wholly beyond it), `negligible` (wholly inside it) or `unclear`."""
    if lo > delta or hi < -delta:
        return "material"
    if lo >= -delta and hi <= delta:
        return "negligible"
    return "unclear"


def paper_verdict(a: ArmResult, a_margin: float, opts: FitOptions) -> None:
    """The paper's threshold rule: beyond the margin on A (else on compute) is a change; within both is
    `inconclusive`, since a threshold rule without a test cannot show two arms equal."""
    a.margin = a_margin
    label = "(paper convention)" if a_margin == PAPER_A_MARGIN else "(threshold rule)"
    ratio = a.shared["compute_ratio"]
    if abs(a.delta_A) > a_margin:
        a.verdict = "ceiling_up" if a.delta_A > 0 else "ceiling_down"
        a.detail = f"ΔA {a.delta_A:+.3f} beyond ±{a_margin:g} {label}"
        a.effect = f"ΔA {a.delta_A:+.3f}"
    elif np.isfinite(ratio) and ratio > 0 and abs(np.log(ratio)) > PAPER_COMPUTE_MARGIN:
        a.verdict = "efficiency_up" if ratio < 1 else "efficiency_down"
        a.detail = efficiency_text(a, opts) + f", beyond ±15% {label}"
        a.effect = f"compute {ratio:.2f}x"
    else:
        a.verdict, a.practical = "inconclusive", "unclear"
        a.detail = (
            f"ΔA {a.delta_A:+.3f} within ±{a_margin:g}; " + efficiency_text(a, opts) + f" {label}: a "
            "threshold rule is not a test, so it cannot show the arms equal"
        )
        a.effect = f"ΔA {a.delta_A:+.3f}; {ratio:.2f}x"


def _test_arm(a: ArmResult, base: ArmResult, floor: NoiseFloor, opts: FitOptions, me: MinEffect) -> None:
    """The ceiling, efficiency and equivalence tests of one arm against its baseline, and their intervals."""
    crit = student_t.ppf(0.5 + opts.ci / 2.0, floor.dof)
    n_a = max(1, int(np.isfinite(a.seed_A).sum()))
    n_b = max(1, int(np.isfinite(base.seed_A).sum()))
    if np.isfinite(a.seed_A).any() and np.isfinite(base.seed_A).any():
        a.delta_A = float(np.nanmean(a.seed_A) - np.nanmean(base.seed_A))  # the seeds' means: what the spread is of
    se_a = floor.sd_A * math.sqrt(1.0 / n_a + 1.0 / n_b)
    base_lc = a.base_log_compute_seeds or base.log_compute_seeds  # this pair's, where it has its own shared A
    se_c = floor.sd_logc * math.sqrt(1.0 / _n_finite(a.log_compute_seeds) + 1.0 / _n_finite(base_lc))
    a.p_ceiling = float(2 * student_t.sf(abs(a.delta_A) / se_a, floor.dof))
    a.delta_A_ci = [a.delta_A - crit * se_a, a.delta_A + crit * se_a]
    lr = _log_ratio(a, base_lc, a.shared["compute_ratio"], opts.target)
    a.p_efficiency = float(2 * student_t.sf(abs(lr) / se_c, floor.dof)) if np.isfinite(lr) else float("nan")
    if np.isfinite(lr):
        a.shared["compute_ratio_tested"] = math.exp(lr)
        a.shared["compute_ratio_ci"] = [math.exp(lr - crit * se_c), math.exp(lr + crit * se_c)]
    # intersection-union: equivalent only when both are; no compute ratio (NaN) means equivalence can't be shown
    a.p_equivalent = float(np.max([tost(a.delta_A, se_a, floor.dof, me.a), tost(lr, se_c, floor.dof, me.log_ratio)]))


def _conclude(
    a: ArmResult,
    ceiling: bool,
    efficiency: bool,
    equivalent: bool,
    me: MinEffect,
    opts: FitOptions,
    floor: NoiseFloor,
    n_compared: int,
    x: str,
) -> None:
    """An arm's verdict from which of its tests survived the false-discovery control, with `practical`, the short
    effect and the long detail. A ceiling change shown negligible does not hide an efficiency change that may
    matter: the arm is then read on its efficiency, and the detail says the ceiling moved by less than matters."""
    p = f"p={a.p_ceiling:.2g}"
    ci = a.delta_A_ci
    rci = a.shared.get("compute_ratio_ci")
    parts = [
        f"ΔA {a.delta_A:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] ({p})",
        efficiency_text(a, opts) + (f" (p={a.p_efficiency:.2g})" if np.isfinite(a.p_efficiency) else ""),
    ]
    eq = f"equivalence within ±{me.a:g} on A and {me.text_compute} compute: " + (
        f"p={a.p_equivalent:.2g}" if np.isfinite(a.p_equivalent) else "not testable (no compute ratio)"
    )
    if (
        ceiling
        and efficiency
        and practical(ci[0], ci[1], me.a) == "negligible"
        and practical(math.log(rci[0]), math.log(rci[1]), me.log_ratio) != "negligible"
    ):
        parts.insert(1, f"A changed by less than matters (±{me.a:g}): read on its efficiency")
        ceiling = False
    if ceiling:
        a.verdict = "ceiling_up" if a.delta_A > 0 else "ceiling_down"
        a.practical = practical(ci[0], ci[1], me.a)
        a.effect = short_effect(a, "ceiling")
    elif efficiency:
        a.verdict = "efficiency_up" if a.shared["compute_ratio_tested"] < 1 else "efficiency_down"
        a.practical = practical(math.log(rci[0]), math.log(rci[1]), me.log_ratio)
        a.effect = short_effect(a, "efficiency")
    elif equivalent:
        a.verdict, a.practical = "equivalent", "negligible"
        a.effect = short_effect(a, "both")
        parts.append(eq + ": the choice does not matter at this scale, within that margin")
    else:
        a.verdict, a.practical = "inconclusive", "unclear"
        a.effect = short_effect(a, "both")
        a.decide = seeds_to_decide(a, floor, me, n_compared, x)
        parts.append(eq + "; neither a change nor equivalence is shown: " + a.decide["text"])
    if a.verdict.startswith(("ceiling", "efficiency")):
        size = {
            "material": f"beyond the smallest effect that matters ({me.describe()})",
            "negligible": f"real, but below the smallest effect that matters ({me.describe()})",
            "unclear": f"real; whether it exceeds the smallest effect that matters ({me.describe()}) is not yet clear",
        }[a.practical]
        parts.append(f"the change is {size}")
    a.detail = "; ".join(parts)


def decide_verdicts(
    compared: list[ArmResult],
    base: ArmResult,
    floor: NoiseFloor | None,
    opts: FitOptions,
    unidentified: list[ArmResult],
    at_end: dict[str, np.ndarray],
    end_spread: dict[str, Any] | None,
    bases: dict[str, ArmResult] | None = None,
    me: MinEffect | None = None,
    x: str = "",
) -> None:
    """Per compared arm: t-tests of dA and of the log compute ratio against 0, and the equivalence test (TOST)
    against the smallest effect that matters `me`; for the arms whose A is not identified, a test of the pass rate at
    the end of the shared window. Benjamini-Hochberg at 5%: a change (and the end-of-window call) must be a
    discovery among the tests of change alone, so that arms shown equivalent never make a change easier to call;
    equivalence must be a discovery among all the tests of the ranking. `bases`: the baseline each arm is read
    against where it is not `base` (a stopped arm: the baseline fitted on its window); `x`: the compute axis' name,
    for the seeds-to-decide text."""
    me = me or MinEffect()
    pvals: list[float] = []
    if floor is None:
        for a in compared:
            a.verdict, a.practical = "inconclusive", "unclear"
            a.effect = short_effect(a, "both")
            a.detail = "no seed spread to test against (needs seeds); " + efficiency_text(a, opts)
    else:
        for a in compared:
            _test_arm(a, (bases or {}).get(a.arm, base), floor, opts, me)
            pvals += [a.p_ceiling, a.p_efficiency, a.p_equivalent]
    tested = []
    base_end = at_end.get(base.arm, np.array([]))
    for a in unidentified:
        v = at_end.get(a.arm, np.array([]))
        if end_spread is None or v.size == 0 or base_end.size == 0:
            continue
        a.delta_R_end = float(v.mean() - base_end.mean())
        se = end_spread["sd_R"] * math.sqrt(1.0 / v.size + 1.0 / base_end.size)
        a.p_at_end = float(2 * student_t.sf(abs(a.delta_R_end) / se, end_spread["dof"]))
        tested.append(a)
        pvals.append(a.p_at_end)
    found = discoveries(pvals, [floor is not None and k < 3 * len(compared) and k % 3 == 2 for k in range(len(pvals))])
    if floor is not None:
        for i, a in enumerate(compared):
            _conclude(a, *found[3 * i : 3 * i + 3], me, opts, floor, len(compared), x)
    first = 3 * len(compared) if floor is not None else 0
    for k, a in enumerate(tested):
        at = end_spread["at"]
        if found[first + k]:
            a.r_call = "higher" if a.delta_R_end > 0 else "lower"
            a.effect = f"R {a.r_call} at {_compute(at)}: ΔR {a.delta_R_end:+.3f}"
            a.detail += (
                f"; at {at:g} (end of the shared window) pass rate {a.r_call}: "
                f"ΔR {a.delta_R_end:+.3f} (p={a.p_at_end:.2g})"
            )
        else:
            a.effect = f"ΔR {a.delta_R_end:+.3f} at {_compute(at)} (p={a.p_at_end:.2g})"
            a.detail += (
                f"; at {at:g} (end of the shared window) no detectable difference: "
                f"ΔR {a.delta_R_end:+.3f} (p={a.p_at_end:.2g})"
            )


# ---- what would decide an inconclusive arm ----

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
    lr = math.log(_ratio(a)) if np.isfinite(_ratio(a)) and _ratio(a) > 0 else float("nan")
    arms = n_compared + 1
    alpha = FDR / (3 * max(1, n_compared))
    rng = np.random.default_rng(20260)
    more = [n for n in ladder if n > a.seeds]  # more seeds than it has: it is undecided at its own count
    seeds = next((n for n in more if decide_power(a.delta_A, lr, floor, me, n, arms, alpha, rng) >= power), None)
    compute = float(a.fit.window[1])
    at = f"{_compute(compute)} {x}".rstrip()
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
