"""`--method paper` fits B with scipy's `curve_fit` only at the grid points a batched fit puts first; the paper calls
it at every grid point. Checked against that full loop (the reference: `curve_fit` everywhere, lowest SSE wins in
grid order) on curves of every shape the calibration uses, on a grid small enough to run the loop in a test."""

import warnings

import numpy as np
import pytest
from scipy.optimize import OptimizeWarning, curve_fit

from ablate.fit.calibrate import NOISES
from ablate.fit.paper import SHORTLIST, fit_paper
from ablate.fit.sigmoid import sigmoid
from ablate.fit.synthetic import synthetic_curve


def _reference(x, y, r0, a_grid, cmid_grid):
    """The paper's procedure as written: curve_fit for B at every (A, C_mid), the lowest SSE first in grid order."""
    best_sse, best = np.inf, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for a in a_grid:
            for c_mid in cmid_grid:

                def f(c, b, a=a, c_mid=c_mid):
                    return sigmoid(c, r0, a, b, c_mid)

                try:
                    (b,), _ = curve_fit(f, x, y, p0=[1.0])
                except RuntimeError:
                    continue
                sse = float(((f(x, b) - y) ** 2).sum())
                if sse < best_sse:
                    best_sse, best = sse, (a, b, c_mid)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_shortlist_finds_the_full_loops_winner_and_its_b(seed):
    rng = np.random.default_rng(seed)
    a, b, c_mid, r0 = rng.uniform(0.45, 0.9), rng.uniform(0.6, 3.0), 10 ** rng.uniform(2, 4.5), rng.uniform(0.05, 0.4)
    f = rng.uniform(0.3, 0.97)  # how much of its gain the window reaches
    noise = list(NOISES.values())[seed % len(NOISES)]
    c = synthetic_curve(
        a=a,
        b=b,
        c_mid=c_mid,
        r0=r0,
        c_max=c_mid * (f / (1 - f)) ** (1 / b),
        n_points=int(rng.integers(8, 60)),
        n_prompts=int(rng.choice([100, 1000])),
        k=4,
        drift_sd=noise.drift_sd,
        drift_phi=noise.drift_phi,
        seed=seed,
        run="r",
    )
    x, y = c.x[c.x > 0], c.y[c.x > 0]
    a_grid = np.round(np.arange(max(0.45, r0 + 0.05), 0.95, 0.03), 3)  # ~16 x 20: 40x past the shortlist
    cmid_grid = np.linspace(x.max() / 160, 2.5 * x.max(), 20)
    assert a_grid.size * cmid_grid.size > 20 * SHORTLIST
    got, _ = fit_paper(x, y, r0=r0, a_grid=a_grid, cmid_grid=cmid_grid)
    want = _reference(x, y, r0, a_grid, cmid_grid)
    assert want is not None
    assert (got.a, got.b, got.c_mid) == (float(want[0]), float(want[1]), float(want[2]))  # exactly: same calls
