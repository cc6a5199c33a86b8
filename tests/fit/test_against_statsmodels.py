"""The arithmetic of `rank`'s tests checked against a reference implementation, statsmodels, on rankings of simulated
arms with known truth: the ceiling and efficiency t-tests are two-sample pooled t-tests of the seeds' A and log
compute (`ttest_ind`), the equivalence test is the larger p of two TOSTs (`ttost_ind`, intersection-union), and the
false-discovery control is Benjamini-Hochberg (`multipletests(method="fdr_bh")`). The same numbers to 1e-9."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttest_ind, ttost_ind

from ablate.fit.calibrate import NOISES, SHAPES, simulate_arm, window_end
from ablate.fit.compare import rank
from ablate.fit.result import FitOptions
from ablate.fit.spread import MinEffect
from ablate.fit.stats import benjamini_hochberg, discoveries


def _finite(values) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return v[np.isfinite(v)]


@pytest.mark.parametrize("effect, seed", [({}, 1), ({"a": 0.03}, 2), ({"cmid": 0.5}, 3), ({"a": -0.02}, 4)])
def test_a_two_arm_rankings_p_values_are_statsmodels_pooled_t_tests_and_tosts(effect, seed):
    shape, noise = SHAPES["scalerl-8b"], NOISES["seeds"]
    rng = np.random.default_rng(seed)
    curves = []
    for name, eff in (("base", {}), ("arm", effect)):
        curves += simulate_arm(shape, noise, eff, 4, 0.85, rng, name)[0]
    to = 2 * window_end(shape, 0.85)
    ranking = rank(curves, FitOptions(n_boot=100, target=to), baseline="base")
    arm = next(a for a in ranking.arms if a.arm == "arm")
    base = next(a for a in ranking.arms if a.arm == "base")
    assert ranking.floor is not None and arm.verdict != "not_identified", (arm.verdict, arm.detail)
    a_arm, a_base = _finite(arm.seed_A), _finite(base.seed_A)
    lc_arm = _finite(arm.log_compute_seeds)
    lc_base = _finite(arm.base_log_compute_seeds or base.log_compute_seeds)
    # the floor pools exactly these two arms when every seed measured both values
    assert len(a_arm) == len(a_base) == len(lc_arm) == len(lc_base) == 4
    _, p_ceiling, _ = ttest_ind(a_arm, a_base, usevar="pooled")
    _, p_efficiency, _ = ttest_ind(lc_arm, lc_base, usevar="pooled")
    me = MinEffect()
    p_eq_a = ttost_ind(a_arm, a_base, -me.a, me.a, usevar="pooled")[0]
    p_eq_c = ttost_ind(lc_arm, lc_base, -me.log_ratio, me.log_ratio, usevar="pooled")[0]
    assert arm.p_ceiling == pytest.approx(p_ceiling, rel=1e-9, abs=1e-12)
    assert arm.p_efficiency == pytest.approx(p_efficiency, rel=1e-9, abs=1e-12)
    assert arm.p_equivalent == pytest.approx(max(p_eq_a, p_eq_c), rel=1e-9, abs=1e-12)


def test_benjamini_hochberg_and_the_rankings_discoveries_are_statsmodels_fdr_bh():
    rng = np.random.default_rng(7)
    for _ in range(300):
        m = int(rng.integers(1, 30))
        p = np.where(rng.random(m) < 0.4, rng.random(m) * 0.02, rng.random(m))
        p[rng.random(m) < 0.1] = np.nan  # tests that were not made
        finite = np.isfinite(p)
        want = np.zeros(m, dtype=bool)
        if finite.any():
            want[finite] = multipletests(p[finite], alpha=0.05, method="fdr_bh")[0]
        assert benjamini_hochberg(list(p)) == list(want), p
        # the ranking's family: changes among the changes alone, equivalences among every test
        eq = list(rng.random(m) < 0.3)
        change = np.where(eq, np.nan, p)
        want_change = np.zeros(m, dtype=bool)
        if np.isfinite(change).any():
            want_change[np.isfinite(change)] = multipletests(change[np.isfinite(change)], 0.05, "fdr_bh")[0]
        got = discoveries(list(p), eq)
        assert got == [bool(want[k] if eq[k] else want_change[k]) for k in range(m)], (p, eq)
