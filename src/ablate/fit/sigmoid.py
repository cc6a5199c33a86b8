"""The ScaleRL compute-scaling sigmoid and its fit (Khatri et al. 2025, arXiv 2510.13786, §2 eq. 1).

    R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)  ==  R0 + (A - R0) * expit(B * (ln C - ln C_mid))

A is the asymptotic pass rate (ceiling), B the efficiency exponent, C_mid the compute at half the gain and
R0 the pass rate at C = 0 (measured and held fixed, as the paper does, unless `fit_r0`).

Fitting does not depend on a starting point: for fixed (B, C_mid) the model is linear in A (and in R0 when
it is free), so A is solved in closed form on a dense (ln B, ln C_mid) grid, and the best grid point is
refined with `scipy.optimize.least_squares` (bounded, analytic Jacobian, optional Huber loss and weights).
`fit_batch` refits many resampled curves at once with a vectorised projected Levenberg-Marquardt; the
bootstrap in `uncertainty.py` uses it so that 1,000 refits cost about as much as one scipy call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

B_BOUNDS = (0.05, 20.0)
# C_mid may lie outside the data (then A is not identified); allow it, within decades of the window.
CMID_DECADES_BELOW, CMID_DECADES_ABOVE = 3.0, 3.0
AT_BOUND_TOL = 1e-4


def sigmoid(c, r0, a, b, c_mid):
    """R(C) evaluated stably; `c` may be an array, C <= 0 gives R0."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        z = b * (np.log(np.where(c > 0, c, np.nan)) - np.log(c_mid))
    s = np.where(c > 0, expit(np.nan_to_num(z, nan=-np.inf)), 0.0)
    return r0 + (a - r0) * s


GAIN_SHARE = 0.75
"""The share of its gain (A - R0, under the shared A) at which an arm's compute is compared with its baseline's."""


def log_compute_to_share(b: Any, c_mid: Any) -> Any:
    """log of the compute at which a curve with efficiency (B, C_mid) reaches GAIN_SHARE of its gain."""
    return np.log(c_mid) + math.log(GAIN_SHARE / (1.0 - GAIN_SHARE)) / b


MIN_SHARED_GAIN = 0.01
"""A gain A_shared - R0 below this leaves B and C_mid unmeasured: no compute to a share of it is read."""


def measured_log_compute(b: Any, c_mid: Any, gain: Any, x: np.ndarray) -> Any:
    """`log_compute_to_share` where a refit under a shared A measured it, NaN elsewhere: B or ln C_mid on its
    bound (B_BOUNDS, `log_c_mid_bounds` of points at compute x), or a gain under the shared A below MIN_SHARED_GAIN.
    Such a refit says nothing about efficiency, and a seed at a bound would swamp the seed spread."""
    b, c_mid, gain = np.asarray(b, dtype=float), np.asarray(c_mid, dtype=float), np.asarray(gain, dtype=float)
    m_lo, m_hi = log_c_mid_bounds(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        lm = np.log(c_mid)
        ok = (
            (b > B_BOUNDS[0] * (1 + 1e-3))
            & (b < B_BOUNDS[1] * (1 - 1e-3))
            & (lm > m_lo + 1e-3)
            & (lm < m_hi - 1e-3)
            & (gain >= MIN_SHARED_GAIN)
        )
        out = np.where(ok, log_compute_to_share(np.where(ok, b, 1.0), np.where(ok, c_mid, 1.0)), np.nan)
    return float(out) if out.ndim == 0 else out


def compute_to_reach(r, r0, a, b, c_mid):
    """Compute C at which R(C) = r, or None when r is not strictly between R0 and A (never reached)."""
    lo, hi = min(r0, a), max(r0, a)
    if not (lo < r < hi):
        return None
    return float(c_mid * ((a - r0) / (r - r0) - 1.0) ** (-1.0 / b))


def gain_fraction(c_max, b, c_mid):
    """Share of the gain A - R0 reached at c_max: f = expit(B ln(c_max / C_mid)). Below 0.5 the window has
    not passed C_mid, and A trades off against C_mid (not identifiable)."""
    return float(expit(b * (np.log(c_max) - np.log(c_mid))))


@dataclass
class PointFit:
    """The best-fitting parameters of one curve on one window."""

    r0: float
    a: float
    b: float
    c_mid: float
    sse: float
    n_points: int
    fit_r0: bool
    at_bound: list[str]
    """Names of parameters sitting on a bound (A at 1 or at R0, B or C_mid at their search limits)."""
    success: bool = True

    def predict(self, c):
        return sigmoid(c, self.r0, self.a, self.b, self.c_mid)

    @property
    def params(self) -> np.ndarray:
        return np.array([self.r0, self.a, self.b, np.log(self.c_mid)])


def log_c_mid_bounds(x: np.ndarray) -> tuple[float, float]:
    """The search box of ln C_mid for points at compute x: decades below and above the compute fitted."""
    lx = np.log(x)
    m_lo = lx.min() - CMID_DECADES_BELOW * np.log(10)
    m_hi = lx.max() + CMID_DECADES_ABOVE * np.log(10)
    return m_lo, m_hi


def _grid(x: np.ndarray, n_b: int = 40, n_m: int = 64):
    m_lo, m_hi = log_c_mid_bounds(x)
    logb = np.linspace(np.log(0.1), np.log(10.0), n_b)
    m = np.linspace(m_lo, m_hi, n_m)
    return np.exp(logb), m


def batch_means(x, v, w=None, max_points: int = 1024):
    """Consecutive points averaged in at most `max_points` batches of (nearly) equal count.

    x, v, w: [n], x > 0 and sorted. Returns (x [m], v [m], w [m]): each batch's x at its geometric mean (the
    model is in ln C), the weighted mean of v, and the batch's total weight (its count when `w` is None). With
    n <= max_points the input comes back unchanged (w may then be None).
    """
    n = x.size
    if n <= max_points:
        return x, v, w
    starts = np.linspace(0, n, max_points + 1).astype(np.int64)[:-1]  # n > max_points: strictly increasing
    count = np.diff(np.append(starts, n))
    w = np.ones(n) if w is None else np.asarray(w, dtype=float)
    sw = np.add.reduceat(w, starts)
    xb = np.exp(np.add.reduceat(np.log(x), starts) / count)
    vb = np.add.reduceat(w * v, starts) / np.where(sw > 0, sw, 1.0)
    return xb, vb, sw


# The grid start scores every grid cell on every point: [n_B, n_Cmid, n] arrays. A longer curve is first reduced
# to this many batch means (weighted by their count), which keeps those arrays near 20 MB whatever n is: the
# start only has to land in the optimum's basin, and least_squares then refines it on every point.
START_POINTS = 1024


def _grid_start(x, y, w, r0, fit_r0):
    """Best (R0, A, B, ln C_mid) over the grid, with A (and R0) in closed form for each (B, C_mid).

    x, y, w: [n] (any n: reduced to at most START_POINTS batch means first)."""
    if x.size > START_POINTS:
        order = np.argsort(x, kind="stable")
        x, y, w = batch_means(x[order], y[order], w[order], START_POINTS)
    bs, ms = _grid(x)
    lx = np.log(x)
    s = expit(bs[:, None, None] * (lx[None, None, :] - ms[None, :, None]))  # [nb, nm, n]
    if not fit_r0:
        # y - r0 = (A - r0) s  =>  weighted least squares for g = A - r0, clipped to [0, 1 - r0]
        yc = y - r0
        g = (s * w * yc).sum(-1) / np.maximum((s * w * s).sum(-1), 1e-300)
        g = np.clip(g, 0.0, 1.0 - r0)
        sse = (w * (yc - g[..., None] * s) ** 2).sum(-1)
        i, j = np.unravel_index(np.argmin(sse), sse.shape)
        return np.array([r0, r0 + g[i, j], bs[i], ms[j]])
    # y = R0 (1 - s) + A s: two-column weighted least squares per grid cell, then clip to the box.
    u = 1.0 - s
    suu, sus, sss = (w * u * u).sum(-1), (w * u * s).sum(-1), (w * s * s).sum(-1)
    suy, ssy = (w * u * y).sum(-1), (w * s * y).sum(-1)
    det = suu * sss - sus**2
    ok = np.abs(det) > 1e-12
    det = np.where(ok, det, 1.0)
    r0s = np.clip(np.where(ok, (sss * suy - sus * ssy) / det, y.min()), 0.0, 1.0)
    a_s = np.clip(np.where(ok, (suu * ssy - sus * suy) / det, y.max()), r0s, 1.0)
    sse = (w * (y - r0s[..., None] * u - a_s[..., None] * s) ** 2).sum(-1)
    i, j = np.unravel_index(np.argmin(sse), sse.shape)
    return np.array([r0s[i, j], a_s[i, j], bs[i], ms[j]])


def _residual_jac(p, lx, y, sw, r0_fixed):
    """Weighted residuals and Jacobian for params p = [A, B, m] (+ R0 first when it is free)."""
    if r0_fixed is None:
        r0, a, b, m = p
    else:
        r0 = r0_fixed
        a, b, m = p
    s = expit(b * (lx - m))
    ds = s * (1.0 - s)
    res = sw * (r0 + (a - r0) * s - y)
    cols = [s, (a - r0) * ds * (lx - m), -(a - r0) * ds * b]
    if r0_fixed is None:
        cols.insert(0, 1.0 - s)
    return res, sw[:, None] * np.stack(cols, axis=1)


def fit_sigmoid(
    x, y, *, r0: float | None = None, weights=None, loss: str = "linear", f_scale: float = 0.01
) -> PointFit:
    """Fit the sigmoid to points with x > 0. `r0=None` frees R0 (fit_r0); otherwise it is held fixed.

    Shapes: x, y, weights: [n]. `loss` is passed to least_squares ("linear" or "huber", with `f_scale`
    the residual size, in pass-rate units, where Huber turns linear).
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=float)
    fit_r0 = r0 is None
    lx = np.log(x)
    m_lo, m_hi = log_c_mid_bounds(x)
    start = _grid_start(x, y, w, 0.0 if fit_r0 else r0, fit_r0)
    sw = np.sqrt(w)
    if fit_r0:
        p0 = start
        lo = np.array([0.0, 0.0, B_BOUNDS[0], m_lo])
        hi = np.array([1.0, 1.0, B_BOUNDS[1], m_hi])
        r0_fixed = None
    else:
        p0 = start[1:]
        lo = np.array([r0, B_BOUNDS[0], m_lo])
        hi = np.array([1.0, B_BOUNDS[1], m_hi])
        r0_fixed = r0
    p0 = np.clip(p0, lo + 1e-12, hi - 1e-12)
    sol = least_squares(
        lambda p: _residual_jac(p, lx, y, sw, r0_fixed)[0],
        p0,
        jac=lambda p: _residual_jac(p, lx, y, sw, r0_fixed)[1],
        bounds=(lo, hi),
        loss=loss,
        f_scale=f_scale,
        method="trf",
        x_scale="jac",
    )
    p = sol.x
    if fit_r0:
        r0_hat, a, b, m = p
        # A >= R0 is a constraint the box can't express; the closed-form start respects it and the
        # optimum rarely crosses it, but enforce it rather than report an inverted curve.
        a = max(a, r0_hat)
    else:
        r0_hat = r0
        a, b, m = p
    pf = PointFit(
        r0=float(r0_hat),
        a=float(a),
        b=float(b),
        c_mid=float(np.exp(m)),
        sse=0.0,
        n_points=len(x),
        fit_r0=fit_r0,
        at_bound=[],
        success=bool(sol.success),
    )
    pf.sse = float((w * (pf.predict(x) - y) ** 2).sum())
    pf.at_bound = _at_bound(pf, m_lo, m_hi)
    return pf


def _at_bound(pf: PointFit, m_lo: float, m_hi: float) -> list[str]:
    out = []
    if pf.a >= 1.0 - AT_BOUND_TOL:
        out.append("A=1")
    if pf.a <= pf.r0 + AT_BOUND_TOL:
        out.append("A=R0")
    if pf.b <= B_BOUNDS[0] * (1 + 1e-3) or pf.b >= B_BOUNDS[1] * (1 - 1e-3):
        out.append("B")
    m = np.log(pf.c_mid)
    if m <= m_lo + 1e-3 or m >= m_hi - 1e-3:
        out.append("C_mid")
    return out


def fit_batch(
    x,
    Y,
    start: PointFit,
    *,
    weights=None,
    huber: float | None = None,
    iters: int = 40,
    fix_a: float | None = None,
    r0=None,
) -> np.ndarray:
    """Refit K curves that share x (e.g. bootstrap resamples) from one start, all at once.

    x: [n]; Y: [K, n] or [n] (shared); weights: [n] or [K, n] (a run bootstrap is a reweighting).
    Returns params [K, 4] = (R0, A, B, C_mid). A projected Levenberg-Marquardt on
    (A, B, ln C_mid) (+ R0 when `start.fit_r0`), vectorised over K, same bounds as `fit_sigmoid`; with
    `huber`, iteratively reweighted (the Huber loss's IRLS form). `fix_a` holds A at that value (the
    shared-ceiling refits of `rank`'s efficiency comparison). `r0` ([K]) gives each curve its own fixed
    R0 (a bootstrap resamples the R0 measurement too); default: `start.r0` for all.
    """
    x = np.asarray(x, dtype=float)
    w0 = np.ones(x.shape) if weights is None else np.asarray(weights, dtype=float)
    K = max(np.atleast_2d(Y).shape[0], np.atleast_2d(w0).shape[0])
    n = x.size
    Y = np.broadcast_to(np.asarray(Y, dtype=float), (K, n))
    w0 = np.broadcast_to(w0, (K, n))
    lx = np.log(x)
    m_lo, m_hi = log_c_mid_bounds(x)
    free_r0 = start.fit_r0
    r0_k = np.full((K, 1), start.r0) if r0 is None else np.asarray(r0, dtype=float).reshape(K, 1)
    p = np.tile(start.params if free_r0 else start.params[1:], (K, 1))
    if free_r0:
        lo = np.tile([0.0, 0.0, B_BOUNDS[0], m_lo], (K, 1))
        hi = np.tile([1.0, 1.0, B_BOUNDS[1], m_hi], (K, 1))
    else:
        lo = np.tile([0.0, B_BOUNDS[0], m_lo], (K, 1))
        lo[:, 0:1] = r0_k
        hi = np.tile([1.0, B_BOUNDS[1], m_hi], (K, 1))
    p = np.clip(p, lo, hi)
    ia = 1 if free_r0 else 0  # column of A in p
    frozen = np.zeros(p.shape[1])
    if fix_a is not None:
        p[:, ia] = lo[:, ia] = hi[:, ia] = fix_a
        frozen[ia] = 1.0
    lam = np.full(K, 1e-3)

    def unpack(p, idx):  # idx: a slice or index array over the K curves
        if free_r0:
            return p[:, 0:1], p[:, 1:2], p[:, 2:3], p[:, 3:4]
        return r0_k[idx], p[:, 0:1], p[:, 1:2], p[:, 2:3]

    def resid(p, idx):
        r0, a, b, m = unpack(p, idx)
        s = expit(b * (lx - m))
        return r0 + (a - r0) * s - Y[idx], s

    def weights_for(r, idx):
        if huber is None:
            return w0[idx]
        return w0[idx] * np.minimum(1.0, huber / np.maximum(np.abs(r), 1e-12))

    everyone = np.arange(K)
    r, s = resid(p, everyone)
    w = np.array(weights_for(r, everyone))
    sse = (w * r * r).sum(1)
    eye = np.eye(p.shape[1])
    act = everyone  # curves still iterating: each stops on its own, so one slow resample costs only itself
    for _ in range(iters):
        full = act.size == K  # slices are views; fancy indexing copies [K, n] arrays
        sel = slice(None) if full else act
        pa, ra, sa, wa = p[sel], r[sel], s[sel], w[sel]
        r0, a, b, m = unpack(pa, sel)
        gds = (a - r0) * (sa * (1.0 - sa))
        cols = [sa, gds * (lx - m), gds * -b]
        if free_r0:
            cols.insert(0, 1.0 - sa)
        # normal equations H = J^T W J, g = J^T W r from the columns directly (P <= 4: a few row sums are
        # much cheaper than stacking J and a batched matmul); a frozen parameter's column is left out
        live = [i for i in range(len(cols)) if not frozen[i]]
        P = len(cols)
        wcols = {i: wa * cols[i] for i in live}
        H = np.zeros((pa.shape[0], P, P))
        g = np.zeros((pa.shape[0], P, 1))
        for i in live:
            g[:, i, 0] = np.einsum("kn,kn->k", wcols[i], ra)
            for j in live:
                if j >= i:
                    H[:, i, j] = H[:, j, i] = np.einsum("kn,kn->k", wcols[i], cols[j])
        D = H * eye + frozen * eye
        step = -np.linalg.solve(H + lam[sel, None, None] * (D + 1e-12 * eye), g)[:, :, 0]
        p_new = np.clip(pa + step, lo[sel], hi[sel])
        r_new, s_new = resid(p_new, sel)
        sse_new = np.einsum("kn,kn->k", wa * r_new, r_new)
        sse_a = sse[sel]
        better = sse_new < sse_a
        gain = np.where(better, (sse_a - sse_new) / np.maximum(sse_a, 1e-300), 0.0)
        upd = act[better]
        p[upd], r[upd], s[upd], sse[upd] = p_new[better], r_new[better], s_new[better], sse_new[better]
        lam[act] = np.where(better, lam[act] / 3.0, lam[act] * 4.0)
        if huber is not None:
            w[act] = weights_for(r[act], act)
            sse[act] = (w[act] * r[act] ** 2).sum(1)
        # a curve is done when a successful step gained < 1e-8 relative SSE (parameters to ~1e-4 of their spread),
        # or damping ran away (stuck)
        done = (better & (gain < 1e-8)) | (lam[act] > 1e8)
        act = act[~done]
        if act.size == 0:
            break
    r0, a, b, m = unpack(p, everyone)
    a = np.maximum(a, r0)
    return np.concatenate([r0, a, b, np.exp(m)], axis=1)
