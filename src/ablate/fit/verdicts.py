"""Verdicts: the tests `rank` runs on its comparisons against the measured seed spread, under one false-discovery
control, and the paper's threshold rule (`decide_verdicts`, `paper_verdict`).

The functions here read and fill `arms.ArmResult`s; the yardsticks are in fit/spread.py, the false-discovery
control and TOST in fit/stats.py, the words of an effect in fit/effects.py, the seeds that would decide an
inconclusive arm in fit/decide.py. What each verdict means, the tests behind it and the calibration that backs
them: docs/verdicts.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import t as student_t

from ablate.errors import SettingError
from ablate.fit.arms import CHANGED, ArmResult, EndSpread, SharedA, Verdict
from ablate.fit.decide import Family, seeds_to_decide
from ablate.fit.effects import compute_text, efficiency_text, practical, short_effect
from ablate.fit.result import FitOptions
from ablate.fit.spread import PAPER_A_MARGIN, PAPER_COMPUTE_MARGIN, MinEffect, NoiseFloor
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
        raise SettingError(
            f"{{margin}} {margin}: give `paper` (the paper's +-0.02 on A) or a number >= 0", "margin"
        ) from None
    if not (math.isfinite(m) and m >= 0.0):
        raise SettingError(
            f"{{margin}} {margin}: a margin on A must be a finite number >= 0 (e.g. 0.02), or `paper`", "margin"
        )
    return m


def _log_ratio(a: ArmResult, base_seeds: list[float] | None, shared: SharedA) -> float:
    """log compute ratio, arm to baseline, to GAIN_SHARE of the gain under the shared A: the difference of the
    seeds' mean log compute where an arm has seeds, the shared fit's own for a single run."""

    def mean_log(values, fallback):
        v = np.asarray(values or [], dtype=float)
        v = v[np.isfinite(v)]
        return float(v.mean()) if v.size else fallback

    own, base = math.log(shared.compute_to_share), math.log(shared.compute_to_share_baseline)
    if not (np.isfinite(own) and np.isfinite(base)):  # a pooled refit on a bound: no ratio to test
        return float("nan")
    return mean_log(a.log_compute_seeds, own) - mean_log(base_seeds, base)


def _n_finite(values: list[float] | None) -> int:
    """How many seeds measured a value (1 for a single run, which has no per-seed list)."""
    return max(1, int(np.isfinite(values).sum())) if values else 1


def end_of_window(arms: list[ArmResult]) -> tuple[dict[str, np.ndarray], EndSpread | None]:
    """Each arm's per-seed fitted pass rate at the end of the window every arm covers (inside every window: no
    extrapolation, so it is defined whether A is identified or not), and their seed spread pooled over the arms
    with two seeds or more (None when no arm has them)."""
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
    spread = EndSpread(at, math.sqrt(ss / dof), dof) if dof and ss > 0 else None
    return values, spread


def paper_verdict(a: ArmResult, a_margin: float, opts: FitOptions) -> None:
    """The paper's threshold rule: beyond the margin on A (else on compute) is a change; within both is
    `inconclusive`, since a threshold rule without a test cannot show two arms equal."""
    d_a, shared = a.comparison()
    a.margin = a_margin
    label = "(paper convention)" if a_margin == PAPER_A_MARGIN else "(threshold rule)"
    ratio = shared.compute_ratio
    if abs(d_a) > a_margin:
        a.verdict = Verdict.CEILING_UP if d_a > 0 else Verdict.CEILING_DOWN
        a.detail = f"ΔA {d_a:+.3f} beyond ±{a_margin:g} {label}"
        a.effect = f"ΔA {d_a:+.3f}"
    elif np.isfinite(ratio) and ratio > 0 and abs(np.log(ratio)) > PAPER_COMPUTE_MARGIN:
        a.verdict = Verdict.EFFICIENCY_UP if ratio < 1 else Verdict.EFFICIENCY_DOWN
        a.detail = efficiency_text(a) + f", beyond ±15% {label}"
        a.effect = f"compute {ratio:.2f}x"
    else:
        a.verdict, a.practical = Verdict.INCONCLUSIVE, "unclear"
        a.detail = (
            f"ΔA {d_a:+.3f} within ±{a_margin:g}; " + efficiency_text(a) + f" {label}: a "
            "threshold rule is not a test, so it cannot show the arms equal"
        )
        a.effect = f"ΔA {d_a:+.3f}; {ratio:.2f}x"


@dataclass
class _Tests:
    """One compared arm's tests against its baseline: dA's interval and the three p-values (also on the arm)."""

    delta_A_ci: list[float]
    p_ceiling: float
    p_efficiency: float
    p_equivalent: float


def _test_arm(a: ArmResult, base: ArmResult, floor: NoiseFloor, opts: FitOptions, me: MinEffect) -> _Tests:
    """The ceiling, efficiency and equivalence tests of one arm against its baseline, and their intervals."""
    d_a, shared = a.comparison()
    crit = student_t.ppf(0.5 + opts.ci / 2.0, floor.dof)
    n_a = max(1, int(np.isfinite(a.seed_A).sum()))
    n_b = max(1, int(np.isfinite(base.seed_A).sum()))
    if np.isfinite(a.seed_A).any() and np.isfinite(base.seed_A).any():
        d_a = float(np.nanmean(a.seed_A) - np.nanmean(base.seed_A))  # the seeds' means: what the spread is of
    se_a = floor.sd_A * math.sqrt(1.0 / n_a + 1.0 / n_b)
    base_lc = a.base_log_compute_seeds or base.log_compute_seeds  # this pair's, where it has its own shared A
    se_c = floor.sd_logc * math.sqrt(1.0 / _n_finite(a.log_compute_seeds) + 1.0 / _n_finite(base_lc))
    t = _Tests(
        delta_A_ci=[d_a - crit * se_a, d_a + crit * se_a],
        p_ceiling=float(2 * student_t.sf(abs(d_a) / se_a, floor.dof)),
        p_efficiency=float("nan"),
        p_equivalent=float("nan"),
    )
    lr = _log_ratio(a, base_lc, shared)
    if np.isfinite(lr):
        t.p_efficiency = float(2 * student_t.sf(abs(lr) / se_c, floor.dof))
        a.shared = replace(
            shared,
            compute_ratio_tested=math.exp(lr),
            compute_ratio_ci=(math.exp(lr - crit * se_c), math.exp(lr + crit * se_c)),
        )
    # intersection-union: equivalent only when both are; no compute ratio (NaN) means equivalence can't be shown
    t.p_equivalent = float(np.max([tost(d_a, se_a, floor.dof, me.a), tost(lr, se_c, floor.dof, me.log_ratio)]))
    a.delta_A, a.delta_A_ci = d_a, t.delta_A_ci
    a.p_ceiling, a.p_efficiency, a.p_equivalent = t.p_ceiling, t.p_efficiency, t.p_equivalent
    return t


def _conclude(
    a: ArmResult,
    t: _Tests,
    found: tuple[bool, bool, bool],
    me: MinEffect,
    floor: NoiseFloor,
    among: tuple[int, Family] | None,
    x: str,
) -> None:
    """An arm's verdict from which of its tests (`found`: ceiling, efficiency, equivalence) survived the
    false-discovery control, with `practical`, the short effect and the long detail. A ceiling change shown
    negligible does not hide an efficiency change that may matter: the arm is then read on its efficiency, and the
    detail says the ceiling moved by less than matters. `among`: the number of arms compared, and the ranking's
    other tests (an inconclusive arm's seeds to decide it are simulated among them; None: not worked out)."""
    ceiling, efficiency, equivalent = found
    d_a, shared = a.comparison()
    ci = t.delta_A_ci
    rci = shared.compute_ratio_ci
    a_size = practical(ci[0], ci[1], me.a)
    compute_size = None if rci is None else practical(math.log(rci[0]), math.log(rci[1]), me.log_ratio)
    parts = [
        f"ΔA {d_a:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] (p={t.p_ceiling:.2g})",
        efficiency_text(a) + (f" (p={t.p_efficiency:.2g})" if np.isfinite(t.p_efficiency) else ""),
    ]
    eq = f"equivalence within ±{me.a:g} on A and {me.text_compute} compute: " + (
        f"p={t.p_equivalent:.2g}" if np.isfinite(t.p_equivalent) else "not testable (no compute ratio)"
    )
    if ceiling and efficiency and a_size == "negligible" and compute_size != "negligible":
        parts.insert(1, f"A changed by less than matters (±{me.a:g}): read on its efficiency")
        ceiling = False
    if ceiling:
        a.verdict, a.practical = (Verdict.CEILING_UP if d_a > 0 else Verdict.CEILING_DOWN), a_size
        a.effect = short_effect(a, "ceiling")
    elif efficiency:  # a discovery: the compute ratio was tested, so it has its interval
        a.verdict = Verdict.EFFICIENCY_UP if shared.tested_ratio < 1 else Verdict.EFFICIENCY_DOWN
        a.practical = compute_size
        a.effect = short_effect(a, "efficiency")
    elif equivalent:
        a.verdict, a.practical = Verdict.EQUIVALENT, "negligible"
        a.effect = short_effect(a, "both")
        parts.append(eq + ": the choice does not matter at this scale, within that margin")
    else:
        a.verdict, a.practical = Verdict.INCONCLUSIVE, "unclear"
        a.effect = short_effect(a, "both")
        shown = eq + "; neither a change nor equivalence is shown"
        if among is not None:
            a.decide = seeds_to_decide(a, floor, me, among[0], x, family=among[1])
            shown += ": " + a.decide.text
        parts.append(shown)
    if a.practical is not None and a.verdict in CHANGED:
        size = {
            "material": f"beyond the smallest effect that matters ({me.describe()})",
            "negligible": f"real, but below the smallest effect that matters ({me.describe()})",
            "unclear": f"real; whether it exceeds the smallest effect that matters ({me.describe()}) is not yet clear",
        }[a.practical]
        parts.append(f"the change is {size}")
    a.detail = "; ".join(parts)


def _end_tests(
    unidentified: list[ArmResult], base: ArmResult, at_end: dict[str, np.ndarray], end_spread: EndSpread
) -> list[tuple[ArmResult, float, float]]:
    """The arms whose A is not identified, tested on their pass rate at the end of the shared window against the
    baseline's: (arm, ΔR, p) for each arm that has values there."""
    tested = []
    base_end = at_end.get(base.arm, np.array([]))
    for a in unidentified:
        v = at_end.get(a.arm, np.array([]))
        if v.size == 0 or base_end.size == 0:
            continue
        a.delta_R_end = d_r = float(v.mean() - base_end.mean())
        se = end_spread.sd_R * math.sqrt(1.0 / v.size + 1.0 / base_end.size)
        a.p_at_end = p = float(2 * student_t.sf(abs(d_r) / se, end_spread.dof))
        tested.append((a, d_r, p))
    return tested


def _call_at_end(a: ArmResult, d_r: float, p: float, at: float, found: bool) -> None:
    """A not-identified arm's end-of-window call: higher / lower when its test is a discovery."""
    if found:
        a.r_call = "higher" if d_r > 0 else "lower"
        a.effect = f"R {a.r_call} at {compute_text(at)}: ΔR {d_r:+.3f}"
        a.detail += f"; at {at:g} (end of the shared window) pass rate {a.r_call}: ΔR {d_r:+.3f} (p={p:.2g})"
    else:
        a.effect = f"ΔR {d_r:+.3f} at {compute_text(at)} (p={p:.2g})"
        a.detail += (
            f"; at {at:g} (end of the shared window) no difference shown, nor equality: ΔR {d_r:+.3f} (p={p:.2g})"
        )


def decide_verdicts(
    compared: list[ArmResult],
    base: ArmResult,
    floor: NoiseFloor | None,
    opts: FitOptions,
    unidentified: list[ArmResult],
    at_end: dict[str, np.ndarray],
    end_spread: EndSpread | None,
    bases: dict[str, ArmResult] | None = None,
    me: MinEffect | None = None,
    x: str = "",
    *,
    decide: bool = True,
) -> None:
    """Per compared arm: t-tests of dA and of the log compute ratio against 0, and the equivalence test (TOST)
    against the smallest effect that matters `me`; for the arms whose A is not identified, a test of the pass rate at
    the end of the shared window. Benjamini-Hochberg at `opts.level` (5%): a change (and the end-of-window call) must
    be a discovery among the tests of change alone, so that arms shown equivalent never make a change easier to call;
    equivalence must be a discovery among all the tests of the ranking. `bases`: the baseline each arm is read
    against where it is not `base` (a stopped arm: the baseline fitted on its window); `x`: the compute axis' name,
    for the seeds-to-decide text; `decide=False`: no seeds to decide an inconclusive arm."""
    me = me or MinEffect()
    pvals: list[float] = []
    tests: list[_Tests] = []
    if floor is None:
        for a in compared:
            a.verdict, a.practical = Verdict.INCONCLUSIVE, "unclear"
            a.effect = short_effect(a, "both")
            a.detail = "no seed spread to test against (needs seeds); " + efficiency_text(a)
    else:
        for a in compared:
            t = _test_arm(a, (bases or {}).get(a.arm, base), floor, opts, me)
            tests.append(t)
            pvals += [t.p_ceiling, t.p_efficiency, t.p_equivalent]
    tested = [] if end_spread is None else _end_tests(unidentified, base, at_end, end_spread)
    pvals += [p for _, _, p in tested]
    is_eq = [floor is not None and k < 3 * len(compared) and k % 3 == 2 for k in range(len(pvals))]
    found = discoveries(pvals, is_eq, opts.level)
    if floor is not None:
        for i, (a, t) in enumerate(zip(compared, tests)):
            others = [k for k in range(len(pvals)) if k // 3 != i or k >= 3 * len(compared)]
            family = Family(tuple(pvals[k] for k in others), tuple(is_eq[k] for k in others), opts.level)
            found_i = (found[3 * i], found[3 * i + 1], found[3 * i + 2])
            _conclude(a, t, found_i, me, floor, (len(compared), family) if decide else None, x)
    first = 3 * len(compared) if floor is not None else 0
    if end_spread is not None:
        for k, (a, d_r, p) in enumerate(tested):
            _call_at_end(a, d_r, p, end_spread.at, found[first + k])
