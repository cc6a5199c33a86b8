"""`rank`: fit every arm, then say which design choices move the ceiling A and which only the efficiency.

ScaleRL §2 (Khatri et al. 2025): compare arms on the asymptote A first; an arm moves the **ceiling** when
|A - A_baseline| exceeds the margin (from the seed spread when both arms have >= 2 seeds, else the paper's
±0.02) and the two fits' own 95% intervals of A (combined in quadrature) tell the two apart. Otherwise refit the two with one shared A and compare how fast each gets there — the compute each
needs to reach the pass rate the baseline reaches at the target: **efficiency** up or down when the
bootstrap interval of that compute ratio excludes 1, else **no detectable effect**. When either window has
not passed C_mid, A is not identified: the arm is marked so and compared on its predicted pass rate at the
target only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from ablate.errors import UserError
from ablate.fit.analysis import FitOptions, FitResult, fit_curves, group_arms, measured_run_r0, rank_key, window_points
from ablate.fit.curve import Curve
from ablate.fit.sigmoid import B_BOUNDS, PointFit, _bounds, compute_to_reach, fit_batch, sigmoid
from ablate.fit.uncertainty import bootstrap_runs, bootstrap_single, percentile_ci

SCALERL_MARGIN = 0.02  # ScaleRL §2: +-0.02 on A between single-seed runs is within noise
# The same kind of floor for efficiency, when an arm has one seed and its seed-to-seed spread is unknown: two
# seeds of one config (synthetic curves with the paper's noise) needed up to ~11% more or less compute to
# reach the same pass rate under a shared A, more than a single run's bootstrap interval admits.
SINGLE_SEED_COMPUTE_MARGIN = float(np.log(1.15))
Z95 = 1.959964

VERDICTS = ("baseline", "ceiling_up", "ceiling_down", "efficiency_up", "efficiency_down", "no_effect", "not_identified")
VERDICT_TEXT = {
    "baseline": "baseline", "ceiling_up": "ceiling ↑", "ceiling_down": "ceiling ↓",
    "efficiency_up": "efficiency ↑", "efficiency_down": "efficiency ↓", "no_effect": "no detectable effect",
    "not_identified": "not identified", None: "—",
}


@dataclass
class ArmResult:
    arm: str
    arm_id: str | None
    fit: FitResult
    seeds: int
    seed_A: list[float]
    """A of each seed fitted alone (used for the seed-spread margin)."""
    partial: bool
    truncation_warning: bool
    verdict: str | None = None
    margin: float | None = None
    delta_A: float | None = None
    detail: str = ""
    shared: dict[str, Any] | None = None
    """The shared-A comparison: A_shared, B and C_mid of both arms under it, compute ratio and interval."""

    def to_json(self) -> dict[str, Any]:
        return {"arm": self.arm, "arm_id": self.arm_id, "seeds": self.seeds, **self.fit.to_json(),
                "verdict": self.verdict, "margin": self.margin, "delta_A": self.delta_A, "detail": self.detail,
                "partial": self.partial, "truncation_warning": self.truncation_warning, "shared_A": self.shared}


@dataclass
class Ranking:
    arms: list[ArmResult]
    baseline: str | None
    margin_source: str
    target: float
    x: str
    opts: FitOptions
    not_fitted: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        margins = {a.margin for a in self.arms if a.margin is not None}
        return {"baseline": self.baseline, "margin": margins.pop() if len(margins) == 1 else None,
                "margin_source": self.margin_source, "target": self.target, "x": self.x,
                "window": self.opts.window_text(), "arms": [a.to_json() for a in self.arms],
                "not_fitted": self.not_fitted}


def seed_margin(arms: list[ArmResult], a: ArmResult, b: ArmResult) -> tuple[float, str]:
    """Margin on A - A_base: z * pooled within-arm seed sd * sqrt(1/n_a + 1/n_b) when both arms have >= 2
    seeds (the spread the seeds actually show), else ScaleRL's +-0.02."""
    if a.seeds < 2 or b.seeds < 2:
        return SCALERL_MARGIN, "ScaleRL ±0.02 (fewer than 2 seeds)"
    num = den = 0.0
    for arm in arms:
        vals = np.array([v for v in arm.seed_A if np.isfinite(v)])
        if vals.size >= 2:
            num += ((vals - vals.mean()) ** 2).sum()
            den += vals.size - 1
    if den == 0:
        return SCALERL_MARGIN, "ScaleRL ±0.02 (seed fits not identified)"
    sd = float(np.sqrt(num / den))
    return float(Z95 * sd * np.sqrt(1.0 / a.seeds + 1.0 / b.seeds)), f"seed spread (pooled sd {sd:.4f})"


def fit_noise(a: FitResult, b: FitResult) -> float:
    """Half-width of the 95% interval of A_a - A_b from the two fits' own intervals (0 when either has none):
    a single-seed difference beyond ScaleRL's ±0.02 is a ceiling change only if the fits can tell it too."""
    if a.A_ci is None or b.A_ci is None:
        return 0.0
    ha, hb = (max(0.0, (f.A_ci[1] - f.A_ci[0]) / 2) for f in (a, b))
    return float(np.hypot(ha, hb))


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


def _shared_draws(res: FitResult, a_shared: float, b: float, c_mid: float, opts: FitOptions, rng) -> np.ndarray:
    """Bootstrap draws of (R0, A, B, C_mid) with A held at the shared value."""
    x, y, run_index, _ = window_points(res.curves, opts, res.run)
    start = PointFit(r0=res.R0, a=a_shared, b=b, c_mid=c_mid, sse=0.0, n_points=len(x), fit_r0=False, at_bound=[])
    n = min(opts.n_boot, 400) or 400  # the efficiency interval needs hundreds of resamples, not thousands
    if res.n_runs > 1:
        return bootstrap_runs(x, y, run_index, start, n_boot=n, rng=rng, fix_a=a_shared,
                              run_r0=measured_run_r0(res.curves, opts))[0]
    return bootstrap_single(x, y, start, n_boot=n, rng=rng, fix_a=a_shared)[0]


def _seed_log_compute(c: Curve, a_shared: float, b: float, c_mid: float, r_t: float, opts: FitOptions) -> float:
    """log compute for one seed to reach r_t, refitted with A held at the shared value."""
    x, y, _, _ = window_points([c], opts, c.run)
    start = PointFit(r0=c.r0 if c.r0 is not None else float(y[0]), a=a_shared, b=b, c_mid=c_mid, sse=0.0,
                     n_points=len(x), fit_r0=False, at_bound=[])
    (r0, a, b1, cm), = fit_batch(x, y, start, fix_a=a_shared)
    reach = compute_to_reach(r_t, r0, a, b1, cm)
    return float(np.log(reach)) if reach else float("nan")


def compare_efficiency(arm: FitResult, base: FitResult, opts: FitOptions, rng) -> dict[str, Any]:
    """Shared-A refit of arm and baseline: the compute the arm needs to reach the pass rate the baseline
    reaches at the target, as a ratio to the target, with a bootstrap interval and a noise margin (from the
    seeds' spread of that compute when both arms have >= 2 seeds, else SINGLE_SEED_COMPUTE_MARGIN)."""
    parts = []
    for res in (arm, base):
        x, y, _, _ = window_points(res.curves, opts, res.run)
        parts.append((x, y, res.R0))
    a_s, ((b_a, c_a), (b_b, c_b)) = fit_shared_a(parts, [arm.fit, base.fit])
    target = opts.target
    r_t = float(sigmoid(target, base.R0, a_s, b_b, c_b))
    c_arm = compute_to_reach(r_t, arm.R0, a_s, b_a, c_a)
    ratio = (c_arm / target) if c_arm else float("inf")
    da = _shared_draws(arm, a_s, b_a, c_a, opts, rng)
    db = _shared_draws(base, a_s, b_b, c_b, opts, rng)
    k = min(len(da), len(db))
    rt = sigmoid(target, db[:k, 0], db[:k, 1], db[:k, 2], db[:k, 3])
    ratios = np.array([(compute_to_reach(r, *d) or np.inf) / target for r, d in zip(rt, da[:k])])
    with np.errstate(divide="ignore"):
        ci = percentile_ci(np.log(ratios), opts.ci) if np.isfinite(ratios).mean() > 0.95 else None
    if arm.n_runs >= 2 and base.n_runs >= 2:
        logs = [[_seed_log_compute(c, a_s, b, cm, r_t, opts) for c in res.curves]
                for res, b, cm in ((arm, b_a, c_a), (base, b_b, c_b))]
        resid = np.concatenate([np.array(v) - np.nanmean(v) for v in logs])
        dof = sum(np.isfinite(v).sum() - 1 for v in map(np.array, logs))
        sd = float(np.sqrt(np.nansum(resid**2) / dof)) if dof > 0 else float("nan")
        margin = Z95 * sd * np.sqrt(1.0 / arm.n_runs + 1.0 / base.n_runs)
        margin_source = f"seed spread of log compute (sd {sd:.3f})"
    else:
        margin, margin_source = SINGLE_SEED_COMPUTE_MARGIN, "single-seed floor (±15% compute)"
    return {"A_shared": a_s, "B": b_a, "C_mid": c_a, "B_baseline": b_b, "C_mid_baseline": c_b,
            "target_pass_rate": r_t, "compute_ratio": ratio,
            "compute_ratio_ci": None if ci is None else [float(np.exp(ci[0])), float(np.exp(ci[1]))],
            "log_margin": float(margin) if np.isfinite(margin) else None, "margin_source": margin_source}


def _seed_A(c: Curve, opts: FitOptions) -> float:
    try:
        f = fit_curves([c], replace(opts, n_boot=0))
    except UserError:  # a seed with too few points in the window yet
        return float("nan")
    return f.A if f.identifiable else float("nan")


def _fit_arm(item: tuple[str, list[Curve], FitOptions]) -> ArmResult | dict[str, Any]:
    """The arm's fit, or (a young arm with too few points in the window) why it can't be fitted yet."""
    label, cs, opts = item
    try:
        fit = fit_curves(cs, opts, name=label, group=label)
    except UserError as e:
        return {"label": label, "arm": label, "reason": str(e)}
    seed_A = [_seed_A(c, opts) for c in cs] if len(cs) > 1 else [fit.A]
    return ArmResult(arm=label, arm_id=cs[0].meta.get("arm_id"), fit=fit, seeds=len(cs), seed_A=seed_A,
                     partial=any(c.meta.get("partial") for c in cs),
                     truncation_warning=any(c.meta.get("truncation_warning") for c in cs))


def _efficiency(item: tuple[int, FitResult, FitResult, FitOptions]) -> dict[str, Any]:
    i, arm, base, opts = item
    return compare_efficiency(arm, base, opts, np.random.default_rng([opts.seed, i]))  # same draws in any order


def _pmap(fn, items: list, jobs: int) -> list:
    """map over processes (fork: the fit stack is already imported) when there is enough work to share."""
    if jobs <= 1 or len(items) < 2 * jobs:
        return [fn(it) for it in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(fn, items, chunksize=max(1, len(items) // (4 * jobs))))


def check_margin(margin: float | None) -> None:
    """`--margin` is a distance on A: finite and >= 0 (NaN would silently make every arm `no_effect`)."""
    if margin is not None and not (math.isfinite(margin) and margin >= 0.0):
        raise UserError(f"--margin {margin}: a margin on A must be a finite number >= 0 (e.g. 0.02)")


def rank(curves: list[Curve], opts: FitOptions, *, baseline: str | None = None, margin: float | None = None,
         x: str = "gpu_hours", not_fitted: list[dict[str, Any]] | None = None, jobs: int = 1) -> Ranking:
    """Fit every arm (seeds pooled) and give each a verdict against the baseline arm, best first.

    Arms are independent fits: with many arms they run on `jobs` worker processes (the caller knows how many
    cores it may use; 1: in this process)."""
    check_margin(margin)
    groups = group_arms(curves)
    if baseline is None:
        flagged = {c.group or c.run for c in curves if c.meta.get("baseline")}
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
    sources: set[str] = set()
    if baseline is not None:
        base = next(a for a in arms if a.arm == baseline)
        base.verdict, base.detail = "baseline", "the reference arm"
        to_compare = []
        for i, a in enumerate(arms):
            if a is base:
                continue
            if margin is not None:
                a.margin, source = float(margin), "--margin"
            else:
                a.margin, source = seed_margin(arms, a, base)
            sources.add(source)
            a.delta_A = a.fit.A - base.fit.A
            if not (a.fit.identifiable and base.fit.identifiable):
                who = "this arm" if not a.fit.identifiable else "the baseline"
                a.verdict = "not_identified"
                a.detail = f"{who} has not passed C_mid; compared on R at {opts.target:g} only"
            elif abs(a.delta_A) > max(a.margin, noise := fit_noise(a.fit, base.fit)):
                a.verdict = "ceiling_up" if a.delta_A > 0 else "ceiling_down"
                a.detail = f"ΔA {a.delta_A:+.3f} beyond ±{a.margin:.3f}" + (f" and the fits' ±{noise:.3f}" if noise > 0 else "")
            else:
                to_compare.append((i, a, noise))
        shared = _pmap(_efficiency, [(i, a.fit, base.fit, opts) for i, a, _ in to_compare], jobs)
        for (_, a, noise), sh in zip(to_compare, shared):
            a.shared = sh
            ci, ratio, floor = sh["compute_ratio_ci"], sh["compute_ratio"], sh["log_margin"]
            beyond = floor is not None and abs(np.log(ratio)) > floor
            if ci is not None and ci[1] < 1.0 and beyond:
                a.verdict = "efficiency_up"
            elif ci is not None and ci[0] > 1.0 and beyond:
                a.verdict = "efficiency_down"
            else:
                a.verdict = "no_effect"
            a.detail = (f"A shared {sh['A_shared']:.3f}: {ratio:.2f}x compute to baseline's R@{opts.target:g}"
                        + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " (interval open)")
                        + (f", noise ±{np.exp(floor) - 1:.0%}" if floor is not None else ""))
            if abs(a.delta_A) > a.margin:  # past the margin, but not past the fits' own uncertainty
                a.detail = f"ΔA {a.delta_A:+.3f} within the fits' ±{noise:.3f}; " + a.detail
    arms.sort(key=lambda a: rank_key(a.fit), reverse=True)
    margin_source = ("none (no baseline)" if baseline is None else sources.pop() if len(sources) == 1
                     else "per arm: " + "; ".join(sorted(sources)))
    return Ranking(arms=arms, baseline=baseline, margin_source=margin_source, target=opts.target, x=x, opts=opts,
                   not_fitted=not_fitted)
