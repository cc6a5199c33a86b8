"""`rank`: fit every arm, then say which design choices move the ceiling A and which only the efficiency, and
claim no more than the noise allows.

Per arm against the baseline (ScaleRL §2's order of questions):
1. Identified? When either window has not passed C_mid (the gain fraction's interval reaches below 50%, B sits on a
   bound, A on its bound), A is not measured: the arm is `not_identified`, ranked on its predicted pass rate at the
   target, and (when arms have seeds) tested on its pass rate at the end of the window every arm covers, where no
   extrapolation is needed: `r_call` higher / lower.
2. Ceiling: dA = A_arm - A_baseline against the seed-to-seed spread of A.
3. Efficiency: the two refitted with one shared A; the compute the arm needs to reach the pass rate the baseline
   reaches at the target, as a ratio, against the seed-to-seed spread of log compute.
This module fits the arms and makes the comparisons; fit/verdicts.py turns them into verdicts (the tests, the
seed spread they are judged against, the false-discovery control, the paper's threshold rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from ablate.errors import UserError
from ablate.fit.analysis import FitOptions, FitResult, fit_curves, group_arms, rank_key, window_points
from ablate.fit.curve import Curve
from ablate.fit.sigmoid import B_BOUNDS, PointFit, _bounds, compute_to_reach, fit_batch, sigmoid
from ablate.fit.verdicts import (FDR, PAPER_A_MARGIN, MinEffect, NoiseFloor, decide_verdicts, end_of_window,
                                 measured_floor, paper_verdict, parse_margin)
from ablate.rundir import STOPPED

__all__ = ["ArmResult", "Ranking", "rank", "compare_efficiency", "fit_shared_a", "refit_at_a", "parse_shared_a",
           "VERDICTS", "VERDICT_TEXT",
           "MinEffect", "NoiseFloor", "measured_floor", "parse_margin", "PAPER_A_MARGIN", "FDR"]


VERDICTS = ("baseline", "ceiling_up", "ceiling_down", "efficiency_up", "efficiency_down", "equivalent", "inconclusive",
            "not_identified")
CHANGED = ("ceiling_up", "ceiling_down", "efficiency_up", "efficiency_down")
VERDICT_TEXT = {
    "baseline": "baseline", "ceiling_up": "ceiling ↑", "ceiling_down": "ceiling ↓",
    "efficiency_up": "efficiency ↑", "efficiency_down": "efficiency ↓", "equivalent": "equivalent",
    "inconclusive": "inconclusive", "not_identified": "not identified", None: "—",
}
PRACTICAL = ("material", "negligible", "unclear")


@dataclass
class ArmResult:
    arm: str
    arm_id: str | None
    fit: FitResult
    seeds: int
    partial: bool
    truncation_warning: bool
    verdict: str | None = None
    margin: float | None = None
    """The paper rule's margin on A (None under the calibrated tests)."""
    delta_A: float | None = None
    delta_A_ci: list[float] | None = None
    """dA's interval at the ranking's --ci level (None without a seed spread)."""
    practical: str | None = None
    """A compared arm's effect against the smallest that matters: material, negligible or unclear (PRACTICAL)."""
    effect: str = ""
    """The short why: the effect that decided and its interval (the table's why cell)."""
    detail: str = ""
    """The long why: every test, its p-value and interval, what would decide (`--explain`)."""
    decide: dict[str, Any] | None = None
    """An inconclusive arm: {"seeds", "compute", "power", "text"}, the seeds per arm that would decide it."""
    shared: dict[str, Any] | None = None
    """The shared-A comparison: A_shared, B and C_mid of both arms under it, compute ratio and interval."""
    p_ceiling: float | None = None
    p_efficiency: float | None = None
    p_equivalent: float | None = None
    """The equivalence test (TOST on A and on compute, the larger p)."""
    delta_R_end: float | None = None
    """Not identified: the arm's pass rate minus the baseline's at the end of the window they share."""
    p_at_end: float | None = None
    r_call: str | None = None
    """Not identified: `higher` / `lower` when the test at the shared window's end finds a difference, else None."""
    stopped: list[str] = field(default_factory=list)
    """`pruned` / `unstable` when `ablate sweep --prune` stopped some of its runs: ranked on what they have."""
    log_compute_seeds: list[float] | None = field(default=None, repr=False)
    """Each seed's log compute to the baseline's pass rate at the target, under the shared A."""
    base_log_compute_seeds: list[float] | None = field(default=None, repr=False)
    """The baseline's seeds' log compute to that same pass rate under this pair's shared A (each pair has its own)."""

    @property
    def seed_A(self) -> list[float]:
        """A of each seed fitted alone (NaN where not identified); the pooled A for a single run."""
        if self.fit.seeds is not None:
            return [float(v) for v in self.fit.seeds.A]
        return [self.fit.A if self.fit.identifiable else float("nan")]

    def to_json(self) -> dict[str, Any]:
        def r(v):
            return None if v is None or not np.isfinite(v) else float(v)

        return {"arm": self.arm, "arm_id": self.arm_id, "seeds": self.seeds, **self.fit.to_json(),
                "verdict": self.verdict, "practical": self.practical, "margin": self.margin,
                "delta_A": r(self.delta_A), "delta_A_ci": self.delta_A_ci, "effect": self.effect, "detail": self.detail,
                "decide": self.decide, "p_equivalent": r(self.p_equivalent),
                "partial": self.partial, "truncation_warning": self.truncation_warning, "shared_A": self.shared,
                "p_ceiling": r(self.p_ceiling), "p_efficiency": r(self.p_efficiency),
                "delta_R_end": r(self.delta_R_end), "p_at_end": r(self.p_at_end), "r_call": self.r_call,
                "stopped": self.stopped}


@dataclass
class Ranking:
    arms: list[ArmResult]
    baseline: str | None
    margin_source: str
    target: float
    x: str
    opts: FitOptions
    not_fitted: list[dict[str, Any]] = field(default_factory=list)
    floor: NoiseFloor | None = None
    rule: str = "test"
    """test (calibrated t-tests with FDR control) | paper (the paper's threshold convention)."""
    end_spread: dict[str, Any] | None = None
    """{"at", "sd_R", "dof"}: the seed spread of the pass rate at the end of the window all arms share, which the
    not-identified arms are compared on; None when no arm has two seeds."""
    shared_mode: str = ""
    """How the efficiency comparison's shared A was set (per pair, or one A for every arm), in words."""
    shared_a: str | float | None = None
    """--shared-a: None (per pair), "all", or the value given."""
    min_effect: MinEffect = field(default_factory=MinEffect)
    notes: list[str] = field(default_factory=list)
    """What applies to every arm (needs seeds, ...), said once under the table instead of in every row."""
    target_source: str = ""
    """How the target compute was chosen, in words (set by the command: `--to X`, or the default it picked)."""
    axis_note: str | None = None
    """A warning about the compute axis (wall-clock varying between seeds), set by the command."""

    def to_json(self) -> dict[str, Any]:
        margins = {a.margin for a in self.arms if a.margin is not None}
        return {"baseline": self.baseline, "margin": margins.pop() if len(margins) == 1 else None,
                "margin_source": self.margin_source, "rule": self.rule, "fdr": FDR if self.rule == "test" else None,
                "noise_floor": None if self.floor is None else self.floor.to_json(),
                "end_spread": self.end_spread, "shared_a": self.shared_a, "shared_mode": self.shared_mode,
                "min_effect": self.min_effect.to_json(), "notes": self.notes, "target": self.target,
                "target_source": self.target_source, "axis_note": self.axis_note, "x": self.x,
                "window": self.opts.window_text(), "arms": [a.to_json() for a in self.arms],
                "not_fitted": self.not_fitted}


def fit_shared_a(parts: list[tuple[np.ndarray, np.ndarray, float]],
                 starts: list[PointFit] | None = None) -> tuple[float, list[tuple[float, float]]]:
    """One A for all parts, own (B, C_mid) each; parts: [(x [n_i], y [n_i], R0_i)]; `starts`: each part's own
    fit (refitted when not given). Returns (A, [(B, C_mid)])."""
    lo_a = max(r0 for _, _, r0 in parts)
    p0, lo, hi = [], [lo_a], [1.0]
    if starts is None:
        starts = [fit_curves([Curve("p", None, x, y)], FitOptions(n_boot=0, r0=r0)).fit for x, y, r0 in parts]
    a0 = float(np.clip(np.mean([s.a for s in starts]), lo_a, 1.0))
    p0.append(a0)
    for (x, _, _), s in zip(parts, starts):
        m_lo, m_hi = _bounds(x)
        p0 += [s.b, np.log(s.c_mid)]
        lo += [B_BOUNDS[0], m_lo]
        hi += [B_BOUNDS[1], m_hi]
    p0 = np.clip(p0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)

    def resid(p):
        out = []
        for k, (x, y, r0) in enumerate(parts):
            out.append(sigmoid(x, r0, p[0], p[1 + 2 * k], np.exp(p[2 + 2 * k])) - y)
        return np.concatenate(out)

    sol = least_squares(resid, p0, bounds=(lo, hi), x_scale="jac")
    a = float(sol.x[0])
    return a, [(float(sol.x[1 + 2 * k]), float(np.exp(sol.x[2 + 2 * k]))) for k in range(len(parts))]


def _fit_at_a(x: np.ndarray, y: np.ndarray, r0: float, a: float, b: float, c_mid: float) -> tuple[float, float]:
    """(B, C_mid) of points x, y ([n]) refitted with R0 and A held, from (b, c_mid)."""
    start = PointFit(r0=r0, a=a, b=b, c_mid=c_mid, sse=0.0, n_points=len(x), fit_r0=False, at_bound=[])
    (_, _, b_fit, c_fit), = fit_batch(x, y, start, fix_a=a)
    return float(b_fit), float(c_fit)


def _seed_log_compute(c: Curve, a_shared: float, b: float, c_mid: float, r_t: float, opts: FitOptions) -> float:
    """log compute for one seed to reach r_t, refitted with A held at the shared value."""
    x, y, _, _, _ = window_points([c], opts, c.run)
    r0 = c.r0 if c.r0 is not None else float(y[0])
    reach = compute_to_reach(r_t, r0, a_shared, *_fit_at_a(x, y, r0, a_shared, b, c_mid))
    return float(np.log(reach)) if reach else float("nan")


def refit_at_a(res: FitResult, a_fixed: float, opts: FitOptions) -> tuple[float, float]:
    """(B, C_mid) of an arm (its seeds pooled) refitted with A held at `a_fixed`."""
    x, y, _, _, _ = window_points(res.curves, opts, res.run)
    return _fit_at_a(x, y, res.R0, a_fixed, res.B, res.C_mid)


def compare_efficiency(arm: FitResult, base: FitResult, opts: FitOptions, a_all: float | None = None) -> dict[str, Any]:
    """Shared-A refit of arm and baseline: the compute the arm needs to reach the pass rate the baseline reaches
    at the target, as a ratio to the target; and each seed's log compute to that pass rate under the shared A (the
    spread the efficiency test is judged against). The shared A is fitted to the pair (default) or, with `a_all`,
    the one A every arm of the ranking is refitted at (`--shared-a all`, the paper's own comparison)."""
    if a_all is None:
        parts = []
        for res in (arm, base):
            x, y, _, _, _ = window_points(res.curves, opts, res.run)
            parts.append((x, y, res.R0))
        a_s, ((b_a, c_a), (b_b, c_b)) = fit_shared_a(parts, [arm.fit, base.fit])
    else:
        a_s = a_all
        (b_a, c_a), (b_b, c_b) = refit_at_a(arm, a_s, opts), refit_at_a(base, a_s, opts)
    target = opts.target
    r_t = float(sigmoid(target, base.R0, a_s, b_b, c_b))
    c_arm = compute_to_reach(r_t, arm.R0, a_s, b_a, c_a)
    if c_arm:
        ratio = c_arm / target
    else:  # starts at or above the pass rate (0: no compute needed), or never reaches it under the shared A
        ratio = 0.0 if arm.R0 >= r_t else float("inf")
    seeds = [[_seed_log_compute(c, a_s, b, cm, r_t, opts) for c in res.curves] if res.n_runs > 1 else []
             for res, b, cm in ((arm, b_a, c_a), (base, b_b, c_b))]
    return {"A_shared": a_s, "B": b_a, "C_mid": c_a, "B_baseline": b_b, "C_mid_baseline": c_b,
            "target_pass_rate": r_t, "compute_ratio": ratio, "compute_ratio_ci": None,
            "_seeds_arm": seeds[0], "_seeds_base": seeds[1]}


def _own_log_compute_seeds(a: ArmResult, opts: FitOptions) -> None:
    """Each seed's log compute to the arm's own pass rate at the target, A held at the arm's: the arm's seed spread
    of compute when it has no comparison to measure it in."""
    f = a.fit
    if f.n_runs < 2 or not f.identifiable:
        return
    r_t = float(sigmoid(opts.target, f.R0, f.A, f.B, f.C_mid))
    a.log_compute_seeds = [_seed_log_compute(c, f.A, f.B, f.C_mid, r_t, opts) for c in f.curves]


def _fit_arm(item: tuple[str, list[Curve], FitOptions]) -> ArmResult | dict[str, Any]:
    """The arm's fit, or (a young arm with too few points in the window) why it can't be fitted yet."""
    label, cs, opts = item
    try:
        fit = fit_curves(cs, opts, name=label, group=label)
    except UserError as e:
        return {"label": label, "arm": label, "reason": str(e)}
    return ArmResult(arm=label, arm_id=cs[0].meta.get("arm_id"), fit=fit, seeds=len(cs),
                     partial=any(c.meta.get("partial") for c in cs),
                     truncation_warning=any(c.meta.get("truncation_warning") for c in cs),
                     stopped=sorted({c.meta["status"] for c in cs if c.meta.get("status") in STOPPED}))


def _efficiency(item: tuple[FitResult, FitResult, FitOptions, float | None]) -> dict[str, Any]:
    return compare_efficiency(*item)


def parse_shared_a(value: str | float | None) -> str | float | None:
    """--shared-a: None (each pair's own shared A), "all" (the mean A of the identified arms), or a value."""
    if value is None or value == "pair":
        return None
    if value == "all":
        return "all"
    try:
        a = float(value)
    except ValueError:
        a = float("nan")
    if not 0.0 < a < 1.0:
        raise UserError(f"--shared-a {value}: give pair (the default), all (the mean A of the identified arms), or "
                        "a ceiling strictly between 0 and 1")
    return a


PAIR_MODE = "each arm and the baseline refitted with their own shared A"


def _one_a(shared_a: str | float | None, arms: list[ArmResult], base: ArmResult,
           compared: list[ArmResult]) -> tuple[float | None, str]:
    """The A every compared arm is refitted at (None: each pair fits its own) and the mode in words."""
    if shared_a is None:
        return None, PAIR_MODE
    if shared_a == "all":
        ident = [a.fit.A for a in arms if a.fit.identifiable]
        if not ident:
            return None, "one A for every arm: none (no arm is identified), so no efficiency comparison"
        a_all = float(np.mean(ident))
        mode = f"one A for every arm, {a_all:.3f}: the mean of the {len(ident)} identified arms' A"
    else:
        a_all = float(shared_a)
        mode = f"one A for every arm, {a_all:.3f} (--shared-a)"
    low = [a for a in [base, *compared] if a_all <= a.fit.R0 + 0.01]
    if low:
        raise UserError(f"--shared-a {shared_a}: one A of {a_all:.3f} leaves arm {low[0].arm!r} (R0 "
                        f"{low[0].fit.R0:.3f}) no gain to fit; give an A above every arm's R0, or --shared-a pair")
    far = [a.arm for a in [base, *compared] if abs(a.fit.A - a_all) > PAPER_A_MARGIN]
    if far:
        mode += (f"; own A more than {PAPER_A_MARGIN:g} away for {', '.join(far[:4])}"
                 f"{' and more' if len(far) > 4 else ''}: the paper compares B at one A where the A's agree")
    return a_all, mode


def _pmap(fn, items: list, jobs: int) -> list:
    """map over processes (fork: the fit stack is already imported) when there is enough work to share."""
    if jobs <= 1 or len(items) < 2 * jobs:
        return [fn(it) for it in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(fn, items, chunksize=max(1, len(items) // (4 * jobs))))


def _x_end(a: ArmResult) -> float:
    return max(float(c.x[-1]) for c in a.fit.curves)


def _stopped_windows(arms: list[ArmResult], base: ArmResult, opts: FitOptions) -> dict[str, ArmResult | str]:
    """For each arm whose window `ablate sweep --prune` ended short of the baseline's (its longest run was
    stopped): the baseline fitted on the stopped arm's window (its curves cut at the arm's last evaluation), so that
    the two are compared at the same compute and a stopped arm does not lose A it had no compute to show; a string
    says why that fit failed. An arm with one stopped seed whose other seeds ran on is read on the whole window."""
    out: dict[str, ArmResult | str] = {}
    base_end = _x_end(base)
    for a in arms:
        if a is base or not a.stopped:
            continue
        end = _x_end(a)
        longest = max(a.fit.curves, key=lambda c: float(c.x[-1]))
        if end >= base_end or longest.meta.get("status") not in STOPPED:
            continue
        until = end if opts.fit_until is None else min(end, opts.fit_until)
        fit = _fit_arm((base.arm, base.fit.curves, replace(opts, fit_until=until)))
        if isinstance(fit, ArmResult):
            out[a.arm] = fit
        else:
            out[a.arm] = (f"stopped at {end:.4g}: the baseline's first {end:.4g} can't be fitted to compare it "
                          f"with ({fit['reason']})")
    return out


def rank(curves: list[Curve], opts: FitOptions, *, baseline: str | None = None, margin: str | float | None = None,
         noise: NoiseFloor | None = None, x: str = "gpu_hours", not_fitted: list[dict[str, Any]] | None = None,
         jobs: int = 1, shared_a: str | float | None = None, min_effect: MinEffect | None = None) -> Ranking:
    """Fit every arm (seeds pooled) and give each a verdict against the baseline arm, best first (see the module
    docstring). `margin`: the paper's threshold rule instead of the tests; `noise`: a stored seed spread for arms
    without seeds of their own; `shared_a`: "all" or a value refits every arm at one A for the efficiency
    comparison (the paper's way) instead of one A per pair; `min_effect`: the smallest effect that matters (default
    the paper's +-0.02 on A, +-15% compute). Arms are independent fits: with many arms they run on `jobs` worker
    processes."""
    min_effect = min_effect or MinEffect()
    notes: list[str] = []
    a_margin = parse_margin(margin)
    shared_a = parse_shared_a(shared_a)
    rule = "test" if a_margin is None else "paper"
    groups = group_arms(curves)
    if baseline is None:
        flagged = {g for g, cs in groups.items() if any(c.meta.get("baseline") for c in cs)}
        baseline = flagged.pop() if len(flagged) == 1 else None
    elif baseline not in groups:
        raise UserError(f"--baseline {baseline!r}: no such arm; arms are: {', '.join(groups)}")
    fitted = _pmap(_fit_arm, [(label, cs, opts) for label, cs in groups.items()], jobs)
    arms = [a for a in fitted if isinstance(a, ArmResult)]
    not_fitted = (not_fitted or []) + [a for a in fitted if not isinstance(a, ArmResult)]
    if not arms:
        raise UserError("no arm can be fitted yet: " + "; ".join(f"{a['label']}: {a['reason']}" for a in not_fitted[:3]))
    if baseline is not None and baseline not in {a.arm for a in arms}:
        why = next(a["reason"] for a in not_fitted if a.get("arm") == baseline)
        raise UserError(f"the baseline arm {baseline!r} can't be fitted yet ({why}); wait for it or pick --baseline")
    floor = end_spread = None
    source = "none (no baseline)"
    shared_mode = PAIR_MODE
    if baseline is None:  # no comparisons: each arm's seed spread around its own curve (for --save-noise)
        for a in arms:
            _own_log_compute_seeds(a, opts)
    if baseline is not None:
        base = next(a for a in arms if a.arm == baseline)
        base.verdict, base.detail, base.effect = "baseline", "the reference arm", "reference"
        if not base.fit.identifiable:
            base.detail += "; A not measured (it has not passed C_mid): no ceiling or efficiency verdicts"
        bases = _stopped_windows(arms, base, opts)
        compared = []
        for a in arms:
            if a is base:
                continue
            b = bases.get(a.arm, base)
            if isinstance(b, str):
                a.verdict, a.detail, a.effect = "not_identified", b, "baseline unfitted on its window"
                continue
            a.delta_A = a.fit.A - b.fit.A
            if not (a.fit.identifiable and b.fit.identifiable):
                who = "this arm" if not a.fit.identifiable else "the baseline"  # the footer says how it is ranked
                a.verdict = "not_identified"
                a.detail = f"A not measured ({who} has not passed C_mid)"
                a.effect = f"A not measured ({who})"
            else:
                compared.append(a)
        a_all, shared_mode = _one_a(shared_a, arms, base, compared)
        shared = _pmap(_efficiency, [(a.fit, bases.get(a.arm, base).fit, opts, a_all) for a in compared], jobs)
        for a, sh in zip(compared, shared):
            b = bases.get(a.arm, base)
            a.log_compute_seeds = sh.pop("_seeds_arm")
            base_seeds = sh.pop("_seeds_base")
            a.base_log_compute_seeds = base_seeds or None
            if b.log_compute_seeds is None and base_seeds:
                b.log_compute_seeds = base_seeds  # the baseline's spread, measured in its first comparison
            a.shared = sh
        for a in arms:
            if a.log_compute_seeds is None:  # the baseline without comparisons, or an arm not identified
                _own_log_compute_seeds(a, opts)
        if rule == "paper":
            whose = "the paper's convention" if a_margin == PAPER_A_MARGIN else "a threshold you chose"
            source = f"{whose} (±{a_margin:g} on A, ±15% compute): a threshold rule, not a test"
            for a in compared:
                paper_verdict(a, a_margin, opts)
        else:
            measured = measured_floor(arms)
            # the stored spread (--noise) when it rests on more seeds than this ranking's own
            floor = noise if noise is not None and (measured is None or noise.dof > measured.dof) else measured
            source = floor.source if floor is not None else (
                "no seed spread of A and compute: no arm has 2 seeds with both measured, and no --noise file")
            at_end, end_spread = end_of_window(arms)
            unidentified = [a for a in arms if a.verdict == "not_identified"]
            decide_verdicts(compared, base, floor, opts, unidentified, at_end, end_spread,
                            {k: v for k, v in bases.items() if isinstance(v, ArmResult)}, min_effect, x)
            if floor is None and compared:
                one = all(x.seeds == 1 for x in compared + [base])
                notes.append(("needs seeds: one seed per arm cannot measure the seed spread, and there is no --noise "
                              "file, so no arm can be shown changed or equivalent" if one else
                              "needs seeds: no arm has 2 seeds identified alone to measure the seed spread, and there "
                              "is no --noise file, so no arm can be shown changed or equivalent"))
        for a in arms:
            if isinstance(bases.get(a.arm), ArmResult):
                a.detail += f"; read against the baseline's first {_x_end(a):.4g} {x} (this arm was stopped there)"
    arms.sort(key=lambda a: rank_key(a.fit), reverse=True)
    return Ranking(arms=arms, baseline=baseline, margin_source=source, target=opts.target, x=x, opts=opts,
                   not_fitted=not_fitted, floor=floor, rule=rule, end_spread=end_spread, shared_mode=shared_mode,
                   shared_a=shared_a, min_effect=min_effect, notes=notes)


