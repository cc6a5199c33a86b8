"""The efficiency comparison `rank` makes between an arm and its baseline: both refitted with one shared A (fitted
to the pair, or one A for every arm), the compute the arm needs to reach the pass rate the baseline reaches at the
target, and each seed's log compute to that pass rate (the spread the efficiency test is judged against).
docs/verdicts.md says how the test reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from ablate.fit.analysis import fit_curves, window_points
from ablate.fit.arms import ArmResult
from ablate.fit.curve import Curve
from ablate.fit.result import FitOptions, FitResult
from ablate.fit.sigmoid import B_BOUNDS, PointFit, compute_to_reach, fit_batch, log_c_mid_bounds, sigmoid


@dataclass
class Efficiency:
    """One shared-A comparison: `shared`, what `ArmResult.shared` holds (A_shared, B and C_mid of both arms under it,
    the baseline's pass rate at the target, the compute ratio); and each seed's log compute to that pass rate under
    the shared A, of the arm and of the baseline (empty for a single run)."""

    shared: dict[str, Any]
    seeds_arm: list[float]
    seeds_base: list[float]


def fit_shared_a(
    parts: list[tuple[np.ndarray, np.ndarray, float]], starts: list[PointFit] | None = None
) -> tuple[float, list[tuple[float, float]]]:
    """One A for all parts, own (B, C_mid) each; parts: [(x [n_i], y [n_i], R0_i)]; `starts`: each part's own
    fit (refitted when not given). Returns (A, [(B, C_mid)])."""
    lo_a = max(r0 for _, _, r0 in parts)
    p0, lo, hi = [], [lo_a], [1.0]
    if starts is None:
        starts = [fit_curves([Curve("p", None, x, y)], FitOptions(n_boot=0, r0=r0)).fit for x, y, r0 in parts]
    a0 = float(np.clip(np.mean([s.a for s in starts]), lo_a, 1.0))
    p0.append(a0)
    for (x, _, _), s in zip(parts, starts):
        m_lo, m_hi = log_c_mid_bounds(x)
        p0 += [s.b, np.log(s.c_mid)]
        lo += [B_BOUNDS[0], m_lo]
        hi += [B_BOUNDS[1], m_hi]
    start = np.clip(p0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)

    def resid(p):
        out = []
        for k, (x, y, r0) in enumerate(parts):
            out.append(sigmoid(x, r0, p[0], p[1 + 2 * k], np.exp(p[2 + 2 * k])) - y)
        return np.concatenate(out)

    sol = least_squares(resid, start, bounds=(lo, hi), x_scale="jac")
    a = float(sol.x[0])
    return a, [(float(sol.x[1 + 2 * k]), float(np.exp(sol.x[2 + 2 * k]))) for k in range(len(parts))]


def _fit_at_a(x: np.ndarray, y: np.ndarray, r0: float, a: float, b: float, c_mid: float) -> tuple[float, float]:
    """(B, C_mid) of points x, y ([n]) refitted with R0 and A held, from (b, c_mid)."""
    start = PointFit(r0=r0, a=a, b=b, c_mid=c_mid, sse=0.0, n_points=len(x), fit_r0=False, at_bound=[])
    ((_, _, b_fit, c_fit),) = fit_batch(x, y, start, fix_a=a)
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


def compare_efficiency(arm: FitResult, base: FitResult, opts: FitOptions, a_all: float | None = None) -> Efficiency:
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
    # no compute to reach it: the arm starts at or above the pass rate (0), or never reaches it under the shared A
    no_reach = 0.0 if r_t <= arm.R0 else float("inf")
    ratio = c_arm / target if c_arm else no_reach
    seeds = [
        [_seed_log_compute(c, a_s, b, cm, r_t, opts) for c in res.curves] if res.n_runs > 1 else []
        for res, b, cm in ((arm, b_a, c_a), (base, b_b, c_b))
    ]
    shared = {
        "A_shared": a_s,
        "B": b_a,
        "C_mid": c_a,
        "B_baseline": b_b,
        "C_mid_baseline": c_b,
        "target_pass_rate": r_t,
        "compute_ratio": ratio,
        "compute_ratio_ci": None,
    }
    return Efficiency(shared=shared, seeds_arm=seeds[0], seeds_base=seeds[1])


def own_log_compute_seeds(a: ArmResult, opts: FitOptions) -> None:
    """Each seed's log compute to the arm's own pass rate at the target, A held at the arm's: the arm's seed spread
    of compute when it has no comparison to measure it in."""
    f = a.fit
    if f.n_runs < 2 or not f.identifiable:
        return
    r_t = float(sigmoid(opts.target, f.R0, f.A, f.B, f.C_mid))
    a.log_compute_seeds = [_seed_log_compute(c, f.A, f.B, f.C_mid, r_t, opts) for c in f.curves]
