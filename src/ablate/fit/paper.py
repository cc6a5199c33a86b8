"""The ScaleRL paper's own fitting procedure, kept faithful as the reference to compare against.

Khatri et al. 2025 (arXiv 2510.13786), Appendix "Fitting": R0 fixed; a grid over A in 0.450..0.800
(step 0.005) and 100 linearly spaced C_mid in [100, 40000] GPU-hours; at each grid point
`scipy.optimize.curve_fit` fits B alone; the grid point with the lowest SSE wins.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from ablate.fit.sigmoid import PointFit, sigmoid

A_GRID = np.round(np.arange(0.450, 0.800 + 1e-9, 0.005), 3)
CMID_GRID = np.linspace(100.0, 40000.0, 100)


def fit_paper(x, y, *, r0: float, a_grid=A_GRID, cmid_grid=CMID_GRID) -> PointFit:
    """Exhaustive (A, C_mid) grid with `curve_fit` for B at each point; x, y: [n]; R0 fixed."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    best = (np.inf, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for a in a_grid:
            for c_mid in cmid_grid:
                f = lambda c, b, a=a, c_mid=c_mid: sigmoid(c, r0, a, b, c_mid)  # noqa: E731
                try:
                    (b,), _ = curve_fit(f, x, y, p0=[1.0])
                except RuntimeError:  # curve_fit did not converge at this grid point
                    continue
                sse = float(((f(x, b) - y) ** 2).sum())
                if sse < best[0]:
                    best = (sse, (a, b, c_mid))
    if best[1] is None:
        return PointFit(r0=r0, a=float("nan"), b=float("nan"), c_mid=float("nan"), sse=float("nan"),
                        n_points=len(x), fit_r0=False, at_bound=[], success=False)
    a, b, c_mid = best[1]
    at_bound = []
    if a in (a_grid[0], a_grid[-1]):
        at_bound.append("A(grid edge)")
    if c_mid in (cmid_grid[0], cmid_grid[-1]):
        at_bound.append("C_mid(grid edge)")
    return PointFit(r0=r0, a=float(a), b=float(b), c_mid=float(c_mid), sse=best[0], n_points=len(x),
                    fit_r0=False, at_bound=at_bound)
