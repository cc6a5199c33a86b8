"""The efficiency comparison `rank` makes between an arm and its baseline: both refitted with one shared A (fitted
to the pair, or one A for every arm), and the compute each needs to reach three quarters of its gain under that
ceiling (GAIN_SHARE), as a ratio; and each seed's log compute to that share under the shared A (the spread the
efficiency test is judged against).

Three quarters of the gain is where a curve still climbs: there a small difference in level is a small difference
in compute, so the ratio is well conditioned, and it does not move with `--to`. On the plateau the same difference
in level becomes a large difference in compute. Half the gain (C_mid) would be better conditioned still, but blind
to a change of B alone. docs/verdicts.md says how the test reads them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from ablate.fit.analysis import fit_curves, window_points
from ablate.fit.arms import ArmResult, SharedA
from ablate.fit.curve import Curve
from ablate.fit.result import FitOptions, FitResult
from ablate.fit.sigmoid import (
    B_BOUNDS,
    GAIN_SHARE,
    PointFit,
    fit_batch,
    log_c_mid_bounds,
    measured_log_compute,
    sigmoid,
)


@dataclass
class Efficiency:
    """One shared-A comparison: `shared`, what `ArmResult.shared` holds (A_shared, B and C_mid of both arms under it,
    the gain share and the compute ratio to it); and each seed's log compute to that share of its gain under the
    shared A, of the arm and of the baseline (empty for a single run)."""

    shared: SharedA
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


def _seed_log_compute(c: Curve, a_fixed: float, b: float, c_mid: float, opts: FitOptions) -> float:
    """One seed's log compute to GAIN_SHARE of its gain, refitted with A held at `a_fixed`."""
    x, y, _, _, _ = window_points([c], opts, c.run)
    r0 = c.r0 if c.r0 is not None else float(y[0])
    return float(measured_log_compute(*_fit_at_a(x, y, r0, a_fixed, b, c_mid), a_fixed - r0, x))


def refit_at_a(res: FitResult, a_fixed: float, opts: FitOptions) -> tuple[float, float]:
    """(B, C_mid) of an arm (its seeds pooled) refitted with A held at `a_fixed`."""
    x, y, _, _, _ = window_points(res.curves, opts, res.run)
    return _fit_at_a(x, y, res.R0, a_fixed, res.B, res.C_mid)


def compare_efficiency(arm: FitResult, base: FitResult, opts: FitOptions, a_all: float | None = None) -> Efficiency:
    """Shared-A refit of arm and baseline: the ratio of the compute each needs to reach GAIN_SHARE of its gain
    under the shared A; and each seed's log compute to that share under the shared A (the spread the efficiency
    test is judged against). The shared A is fitted to the pair (default) or, with `a_all`, the one A every arm of the
    ranking is refitted at (`--shared-a all`, the paper's own comparison)."""
    pts = [window_points(res.curves, opts, res.run) for res in (arm, base)]
    if a_all is None:
        parts = [(p[0], p[1], res.R0) for p, res in zip(pts, (arm, base))]
        a_s, ((b_a, c_a), (b_b, c_b)) = fit_shared_a(parts, [arm.fit, base.fit])
    else:
        a_s = a_all
        (b_a, c_a), (b_b, c_b) = refit_at_a(arm, a_s, opts), refit_at_a(base, a_s, opts)
    seeds = [
        [_seed_log_compute(c, a_s, b, cm, opts) for c in res.curves] if res.n_runs > 1 else []
        for res, b, cm in ((arm, b_a, c_a), (base, b_b, c_b))
    ]
    own, ref = (
        measured_log_compute(b, cm, a_s - res.R0, p[0])
        for res, p, b, cm in ((arm, pts[0], b_a, c_a), (base, pts[1], b_b, c_b))
    )
    shared = SharedA(
        A_shared=a_s,
        B=b_a,
        C_mid=c_a,
        B_baseline=b_b,
        C_mid_baseline=c_b,
        gain_share=GAIN_SHARE,
        compute_to_share=float(np.exp(own)),
        compute_to_share_baseline=float(np.exp(ref)),
        compute_ratio=float(np.exp(own - ref)),
    )
    return Efficiency(shared=shared, seeds_arm=seeds[0], seeds_base=seeds[1])


def own_log_compute_seeds(a: ArmResult, opts: FitOptions) -> None:
    """Each seed's log compute to GAIN_SHARE of its gain with A held at the arm's own: the arm's seed spread of
    compute when it has no comparison to measure it in."""
    f = a.fit
    if f.n_runs < 2 or not f.identifiable:
        return
    a.log_compute_seeds = [_seed_log_compute(c, f.A, f.B, f.C_mid, opts) for c in f.curves]
