"""Realistic synthetic training curves with known sigmoid parameters (for the demo, tests and benchmarks).

Generation only: `ablate.curves.tables.write_csv` writes curves as a file, and the tests write sweep directories.

Noise model: the validation set is a fixed set of `n_prompts` prompts of varied difficulty (per-prompt
pass probabilities at the quantiles of a Beta distribution whose mean is R(C)), each scored mean@k, so an
evaluation's noise is the binomial noise of k samples per prompt (sd <= 0.004 for 1,000 x 16); on top,
the policy drifts between evaluations (an AR(1) process), so consecutive residuals are correlated as in
real runs, with optional heavy-tailed jumps (Student-t with 3 degrees of freedom, at a given rate per
evaluation) that the drift then carries on. Seed-to-seed spread (random effects on A and C_mid per run) is
drawn by the caller (fit/calibrate.py), which passes each run its own parameters.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.stats import beta as beta_dist

from ablate.fit.curve import Curve
from ablate.fit.sigmoid import sigmoid

# ScaleRL paper, Table 1 (GPU-hours): (C_mid, B, A). R0 is not tabulated; ~0.3 matches its Figure 1.
PAPER_CURVES: dict[str, dict[str, float]] = {
    "scalerl-8b": dict(c_mid=2542.0, b=1.92, a=0.610),
    "scalerl-8b-32k-gen": dict(c_mid=11272.0, b=1.89, a=0.645),
    "scalerl-scout": dict(c_mid=4242.0, b=1.65, a=0.710),
}


_TABLE_MEANS = np.linspace(1e-3, 1 - 1e-3, 400)


@functools.lru_cache(maxsize=4)
def _prompt_table(n_prompts: int, concentration: float) -> np.ndarray:
    """Per-prompt pass probabilities [len(_TABLE_MEANS), n_prompts]: Beta quantiles for each mean pass rate."""
    q = (np.arange(n_prompts) + 0.5) / n_prompts
    m = _TABLE_MEANS[:, None]
    return beta_dist.ppf(q[None, :], m * concentration, (1 - m) * concentration)


def synthetic_curve(
    *,
    a: float,
    b: float,
    c_mid: float,
    r0: float = 0.3,
    c_max: float = 16000.0,
    n_points: int = 100,
    n_prompts: int = 1000,
    k: int = 16,
    drift_sd: float = 0.002,
    drift_phi: float = 0.8,
    jump_rate: float = 0.0,
    jump_sd: float = 0.0,
    concentration: float = 4.0,
    seed: int | np.random.Generator = 0,
    run: str = "run",
    group: str | None = None,
) -> Curve:
    """One curve: a point at compute 0 (R0) plus `n_points` evenly spaced evaluations up to `c_max`.

    drift_sd: stationary sd of the AR(1) drift (coefficient drift_phi per evaluation); jump_rate, jump_sd: chance
    per evaluation of a t(3) jump of scale jump_sd in the drift. `seed`: an int or a numpy Generator."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    x = np.linspace(0.0, c_max, n_points + 1)
    mean = sigmoid(x, r0, a, b, c_mid)
    drift = np.zeros_like(x)
    for i in range(1, x.size):
        drift[i] = drift_phi * drift[i - 1] + rng.normal(0.0, drift_sd * np.sqrt(1 - drift_phi**2))
        if jump_rate and rng.random() < jump_rate:
            drift[i] += jump_sd * rng.standard_t(3)
    table = _prompt_table(n_prompts, concentration)  # the same prompts at every evaluation
    m = np.clip(mean + drift, 1e-3, 1 - 1e-3)
    pos = np.interp(m, _TABLE_MEANS, np.arange(_TABLE_MEANS.size))
    lo = np.floor(pos).astype(int).clip(max=_TABLE_MEANS.size - 2)
    frac = (pos - lo)[:, None]
    p = (1 - frac) * table[lo] + frac * table[lo + 1]  # [points, prompts] per-prompt pass probabilities
    y = rng.binomial(k, np.clip(p, 0.0, 1.0)).mean(axis=1) / k
    return Curve(run=run, group=group, x=x, y=y, n=np.full(x.size, float(n_prompts * k)))


def paper_curves(seed: int = 0, **kw) -> list[Curve]:
    """The three curves of the paper's Table 1, with realistic evaluation noise."""
    return [
        synthetic_curve(a=p["a"], b=p["b"], c_mid=p["c_mid"], seed=seed + i, run=name, **kw)
        for i, (name, p) in enumerate(PAPER_CURVES.items())
    ]
