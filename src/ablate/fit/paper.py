"""The ScaleRL paper's own fitting procedure, kept faithful as the reference to compare against.

Khatri et al. 2025 (arXiv 2510.13786), Appendix "Fitting": R0 fixed; a grid over A in 0.450..0.800
(step 0.005) and 100 linearly spaced C_mid in [100, 40000] GPU-hours (a 16k GPU-hour run); at each grid point
`scipy.optimize.curve_fit` fits B alone; the grid point with the lowest SSE wins.

That grid assumes the paper's units and pass rates: on a samples or steps axis, or with a ceiling above 0.8, it
cannot hold the answer. So the grid is scaled to the data (`paper_grid`): C_mid over [x_max / 160, 2.5 x_max],
the paper's span relative to its 16k window, and A widened beyond 0.450..0.800 where the data needs it. On the
paper's own data it is the paper's grid; otherwise the fit says which grid it used.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from ablate.fit.sigmoid import PointFit, sigmoid

A_GRID = np.round(np.arange(0.450, 0.800 + 1e-9, 0.005), 3)
CMID_GRID = np.linspace(100.0, 40000.0, 100)


def _batch_b(x: np.ndarray, y: np.ndarray, r0: float, a: np.ndarray, c_mid: np.ndarray) -> np.ndarray:
    """The SSE at every grid point ([G] each of `a`, `c_mid`) with B fitted by least squares from B = 1, as
    `curve_fit` does, for all points at once (damped Gauss-Newton on the one parameter, each point until its SSE
    stops falling); inf where it fails."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        log_ratio = np.log(c_mid[:, None] / x[None, :])  # [G, n]; x > 0: a fit window holds no compute 0
        gain = (a - r0)[:, None]

        def residual(b: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            e = np.exp(np.clip(b[:, None] * log_ratio[rows], -700.0, 700.0))
            return r0 + gain[rows] / (1.0 + e) - y[None, :], e

        b, damping = np.ones(a.size), np.full(a.size, 1e-3)
        r, e = residual(b, np.arange(a.size))
        sse = (r * r).sum(axis=1)
        live = np.arange(a.size)
        for _ in range(500):
            lr, g = log_ratio[live], gain[live]
            jac = -g * e * lr / (1.0 + e) ** 2
            step = -(jac * r).sum(axis=1) / ((jac * jac).sum(axis=1) * (1.0 + damping[live]) + 1e-300)
            r_new, e_new = residual(b[live] + step, live)
            sse_new = (r_new * r_new).sum(axis=1)
            better = sse_new < sse[live]
            done = ~better & (damping[live] > 1e8) | better & (sse[live] - sse_new <= 1e-12 * sse[live])
            b[live] = np.where(better, b[live] + step, b[live])
            sse[live] = np.where(better, sse_new, sse[live])
            damping[live] = np.where(better, damping[live] / 3.0, damping[live] * 4.0)
            r, e = np.where(better[:, None], r_new, r), np.where(better[:, None], e_new, e)
            keep = ~done
            live, r, e = live[keep], r[keep], e[keep]
            if not live.size:
                break
    return np.where(np.isfinite(sse), sse, np.inf)


def _candidates(x, y, r0: float, a_grid, cmid_grid) -> list[tuple[float, float]]:
    """The SHORTLIST grid points with the lowest SSE by `_batch_b`, in the paper's grid order (A, then C_mid)."""
    a, c_mid = (g.ravel() for g in np.meshgrid(np.asarray(a_grid, float), np.asarray(cmid_grid, float), indexing="ij"))
    chunk = max(1, BATCH_VALUES // max(len(x), 1))  # grid points per batch: memory bounded whatever the run length
    sse = np.concatenate([_batch_b(x, y, r0, a[i : i + chunk], c_mid[i : i + chunk]) for i in range(0, a.size, chunk)])
    keep = np.sort(np.argsort(sse, kind="stable")[:SHORTLIST])
    return [(a_grid[k // len(cmid_grid)], cmid_grid[k % len(cmid_grid)]) for k in keep]


def _curve_fit_b(x, y, r0: float, points) -> tuple[float, tuple[float, float, float] | None]:
    """The paper's step at each (A, C_mid) of `points`, in order: `curve_fit` for B from 1.0; the lowest SSE wins
    (the first on a tie). Returns (SSE, (A, B, C_mid)), or (inf, None) when it converged nowhere."""
    best_sse, best = np.inf, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for a, c_mid in points:
            f = lambda c, b, a=a, c_mid=c_mid: sigmoid(c, r0, a, b, c_mid)  # noqa: E731
            try:
                (b,), _ = curve_fit(f, x, y, p0=[1.0])
            except RuntimeError:  # curve_fit did not converge at this grid point
                continue
            sse = float(((f(x, b) - y) ** 2).sum())
            if sse < best_sse:
                best_sse, best = sse, (a, b, c_mid)
    return best_sse, best


def paper_grid(x, y, r0: float) -> tuple[np.ndarray, np.ndarray, str | None]:
    """The (A, C_mid) grid for data x, y ([n]): the paper's, scaled (see the module docstring), and a note saying
    so when it differs from the paper's."""
    x_max, y_max = float(np.max(x)), float(np.max(y))
    # the paper's A range holds curves whose best evaluation lies between about 0.50 and 0.70; beyond that, widen it
    lo = (
        0.450 if y_max >= 0.50 else max(np.floor((y_max - 0.05) / 0.005) * 0.005, np.ceil((r0 + 0.005) / 0.005) * 0.005)
    )
    hi = 0.800 if y_max <= 0.70 else min(np.ceil((y_max + 0.20) / 0.005) * 0.005, 1.0)
    a_grid = np.round(np.arange(lo, hi + 1e-9, 0.005), 3)
    cmid_grid = np.linspace(x_max / 160.0, 2.5 * x_max, 100)
    same = a_grid.size == A_GRID.size and np.allclose(a_grid, A_GRID) and np.allclose(cmid_grid, CMID_GRID)
    note = (
        None
        if same
        else (
            f"the paper's grid scaled to the data: A {a_grid[0]:.3f}..{a_grid[-1]:.3f} (step "
            f"0.005), C_mid {cmid_grid[0]:.4g}..{cmid_grid[-1]:.4g} (100 values)"
        )
    )
    return a_grid, cmid_grid, note


SHORTLIST = 8
BATCH_VALUES = 1 << 20
"""Grid points x data points per batch of `_batch_b` (each of its few arrays is then 8 MiB)."""
"""Grid points whose B `curve_fit` fits, the best of the whole grid by the batched fit (`_candidates`)."""


def fit_paper(x, y, *, r0: float, a_grid=None, cmid_grid=None) -> tuple[PointFit, str | None]:
    """Exhaustive (A, C_mid) grid with `curve_fit` for B at each point; x, y: [n]; R0 fixed. Returns the fit and
    the note `paper_grid` gives (None when the grid is the paper's own or given).

    The paper calls `curve_fit` at every grid point (7,100 of them, seconds per curve). Here B is first fitted at
    every grid point at once (`_batch_b`, the same one-parameter least squares from the same start), and
    `curve_fit` then fits the SHORTLIST best of them exactly as the paper does, in grid order: the same winner and
    the same B as calling it everywhere (tests/fit/test_paper_method.py checks it against the full loop)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    note = None
    if a_grid is None or cmid_grid is None:
        a_grid, cmid_grid, note = paper_grid(x, y, r0)
    best_sse, best = _curve_fit_b(x, y, r0, _candidates(x, y, r0, a_grid, cmid_grid))
    if best is None:  # curve_fit failed at every point of the shortlist: the paper's full loop, as it runs it
        best_sse, best = _curve_fit_b(x, y, r0, [(a, c_mid) for a in a_grid for c_mid in cmid_grid])
    if best is None:
        return PointFit(
            r0=r0,
            a=float("nan"),
            b=float("nan"),
            c_mid=float("nan"),
            sse=float("nan"),
            n_points=len(x),
            fit_r0=False,
            at_bound=[],
            success=False,
        ), note
    a, b, c_mid = best
    at_bound = []
    if a in (a_grid[0], a_grid[-1]):
        at_bound.append("A(grid edge)")
    if c_mid in (cmid_grid[0], cmid_grid[-1]):
        at_bound.append("C_mid(grid edge)")
    if not b > 0:  # curve_fit is unbounded: B <= 0 is a flat line (or a falling curve), not a sigmoid
        at_bound.append("B")
    return PointFit(
        r0=r0,
        a=float(a),
        b=float(b),
        c_mid=float(c_mid),
        sse=best_sse,
        n_points=len(x),
        fit_r0=False,
        at_bound=at_bound,
    ), note
