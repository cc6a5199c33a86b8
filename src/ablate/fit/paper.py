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


def fit_paper(x, y, *, r0: float, a_grid=None, cmid_grid=None) -> tuple[PointFit, str | None]:
    """Exhaustive (A, C_mid) grid with `curve_fit` for B at each point; x, y: [n]; R0 fixed. Returns the fit and
    the note `paper_grid` gives (None when the grid is the paper's own or given)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    note = None
    if a_grid is None or cmid_grid is None:
        a_grid, cmid_grid, note = paper_grid(x, y, r0)
    best_sse, best = np.inf, None
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
                if sse < best_sse:
                    best_sse, best = sse, (a, b, c_mid)
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
