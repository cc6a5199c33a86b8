"""Intervals for the sigmoid's parameters and predictions, by bootstrap.

One run: a training curve's residuals are autocorrelated (consecutive evaluations share most of their
training history), so resampling single points would understate the spread. We resample residuals in
circular moving blocks of length L ~ n^(1/3) (Künsch 1989; Politis & Romano 1994) and refit.
Several runs of one arm (seeds): resample whole runs with replacement — the spread ScaleRL reports
across seeds — which is a reweighting of the pooled points, so all resamples are refitted in one
vectorised call (`fit_batch`).
"""

from __future__ import annotations

import math

import numpy as np

from ablate.fit.sigmoid import PointFit, fit_batch


def block_length(n: int) -> int:
    return max(1, min(n, math.ceil(n ** (1.0 / 3.0))))


def block_bootstrap_residuals(resid: np.ndarray, n_boot: int, rng: np.random.Generator, block: int) -> np.ndarray:
    """[n_boot, n] resampled residuals: circular blocks of `block` consecutive residuals (centred first)."""
    n = resid.size
    e = resid - resid.mean()
    n_blocks = math.ceil(n / block)
    starts = rng.integers(0, n, size=(n_boot, n_blocks))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(n_boot, -1)[:, :n] % n
    return e[idx]


def bootstrap_single(x, y, fit: PointFit, *, n_boot: int, rng, weights=None, huber=None) -> tuple[np.ndarray, str]:
    """Parameter draws [n_boot, 4] (R0, A, B, C_mid) for one curve, and a description of the method."""
    L = block_length(len(x))
    yhat = fit.predict(x)
    Y = yhat[None, :] + block_bootstrap_residuals(y - yhat, n_boot, rng, L)
    return fit_batch(x, Y, fit, weights=weights, huber=huber), f"block bootstrap of residuals (block {L}, {n_boot} resamples)"


def bootstrap_runs(x, y, run_index, fit: PointFit, *, n_boot: int, rng, weights=None, huber=None) -> tuple[np.ndarray, str]:
    """Parameter draws for an arm of several runs: resample runs with replacement (as point weights).

    run_index: [n] which run each pooled point belongs to (0..R-1).
    """
    R = int(run_index.max()) + 1
    counts = rng.multinomial(R, np.full(R, 1.0 / R), size=n_boot)  # [n_boot, R]
    W = counts[:, run_index].astype(float)
    if weights is not None:
        W = W * np.asarray(weights, dtype=float)[None, :]
    return fit_batch(x, y, fit, weights=W, huber=huber), f"run bootstrap ({R} runs, {n_boot} resamples)"


def percentile_ci(draws: np.ndarray, level: float) -> tuple[float, float] | None:
    """Percentile interval of the finite draws ([n_boot]), or None when there are too few."""
    d = draws[np.isfinite(draws)]
    if d.size < 10:
        return None
    q = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(d, [q, 100.0 - q])
    return float(lo), float(hi)
