"""A round trip on the paper's parameters, not a reproduction of its data (the paper publishes its fitted parameters,
not the points behind them): curves built from the ScaleRL paper's Table 1 (App. A.13) with realistic noise (the
calibration harness's `ar0.5` drift on top of mean@16 over 1,000 prompts) are fitted with both methods; the fit
must give back the A it was built with within the paper's ±0.02 margin, and B inside the default method's interval.
And the paper's window-sensitivity table for its 100k GPU-hour run (fits over (1.5k, 50k), (0, 100k), (0, 50k), (5k,
50k) agree on A within 0.01; B moves more, 1.56-1.70) is reproduced in shape on a curve built from that run's
parameters.
"""

import numpy as np
import pytest

from ablate.fit.analysis import fit_curves
from ablate.fit.calibrate import NOISES, POINTS
from ablate.fit.result import FitOptions
from ablate.fit.sensitivity import window_sensitivity
from ablate.fit.synthetic import synthetic_curve

# Table 1 of the paper: (C_mid, B, A) of its fitted large runs
TABLE_1 = {
    "ScaleRL": (2542, 1.92, 0.610),
    "ScaleRL-32k": (11272, 1.89, 0.645),
    "8 generations": (2542, 2.44, 0.585),
    "24 generations": (3054, 2.22, 0.590),
    "32 generations": (2936, 2.07, 0.595),
    "Scout": (4242, 1.65, 0.710),
    "batch 512": (2818, 1.77, 0.605),
    "batch 2048": (10909, 1.70, 0.645),
    "math+code: math": (2896, 2.05, 0.595),
    "math+code: code": (1675, 1.09, 0.615),
}
R0 = 0.30
MARGIN = 0.02  # the paper's margin on A
NOISE = NOISES["ar0.5"]


def _curve(c_mid, b, a, c_max, seed, n_points=2 * POINTS):
    return synthetic_curve(
        a=a,
        b=b,
        c_mid=c_mid,
        r0=R0,
        c_max=c_max,
        n_points=n_points,
        n_prompts=1000,
        k=16,
        drift_sd=NOISE.drift_sd,
        drift_phi=NOISE.drift_phi,
        seed=seed,
        run="r",
    )


def _window(c_mid, b, f=0.95):
    """Compute where the curve has made 95% of its gain: the paper's runs are fitted well past C_mid."""
    return c_mid * (f / (1.0 - f)) ** (1.0 / b)


@pytest.mark.parametrize("run", list(TABLE_1))
def test_table_1_parameters_come_back_from_their_curves(run):
    c_mid, b, a = TABLE_1[run]
    b_covered = paper_within = 0
    for seed in range(3):
        c = _curve(c_mid, b, a, _window(c_mid, b), seed=1000 * seed + len(run))
        default = fit_curves([c], FitOptions(n_boot=300, seed=seed, target=2 * _window(c_mid, b)))
        paper = fit_curves([c], FitOptions(method="paper", target=2 * _window(c_mid, b)))
        assert default.identifiable, (run, seed, default.notes)
        assert abs(default.A - a) <= MARGIN, (run, seed, default.A)
        paper_within += abs(paper.A - a) <= MARGIN
        b_covered += default.B_ci[0] <= b <= default.B_ci[1]
    # The paper's procedure (a 0.005 grid on A, curve_fit for B) has no intervals and misses the margin once in
    # three on the shallow code curve (B 1.09: A 0.640 for 0.615), where the default's fit stays within it.
    assert paper_within >= 2, run
    assert b_covered >= 2, run  # a 95% interval: missing twice in three is a 1-in-140 event


def test_the_papers_window_sensitivity_is_reproduced_in_shape():
    # The 100k GPU-hour ScaleRL run fits A 0.655, B 1.56 over (0, 100k); its C_mid is not printed, so Table 1's
    # ScaleRL value (2,542) stands in. The paper's four windows agree on A within 0.01 (0.645-0.655) and on B
    # within 0.14 (1.56-1.70).
    a, b, c_mid = 0.655, 1.56, 2542.0
    c = _curve(c_mid, b, a, 100_000, seed=7, n_points=200)
    windows = [(1500, 50_000), (0, 100_000), (0, 50_000), (5000, 50_000)]
    fits = [
        fit_curves([c], FitOptions(n_boot=300, fit_from=lo or None, fit_until=hi, target=100_000)) for lo, hi in windows
    ]
    As, Bs = [f.A for f in fits], [f.B for f in fits]
    assert all(f.identifiable for f in fits)
    assert max(As) - min(As) <= 0.01 and all(abs(v - a) <= MARGIN for v in As), As
    # B moves more than A between windows (the paper's: 1.56-1.70); every window's B interval overlaps the full
    # window's, so the windows agree within what the noise allows
    full_b = fits[1].B_ci
    assert all(f.B_ci[0] <= full_b[1] and full_b[0] <= f.B_ci[1] for f in fits), [f.B_ci for f in fits]
    assert all(abs(v - b) <= 0.4 for v in Bs), Bs
    # and --window-sensitivity (cutoffs at 50%, 75%, 100% of the window) finds the full fit stable
    full = window_sensitivity(fits[1], FitOptions(n_boot=300, target=100_000))
    assert not full.unstable and len(full.sensitivity) == 3
    assert np.ptp([row["A"] for row in full.sensitivity]) <= 0.01
