"""Intervals for the sigmoid's parameters and predictions, by bootstrap.

One run: a training curve's residuals are autocorrelated (consecutive evaluations share most of their
training history), so resampling single points would understate the spread. We resample residuals in
circular moving blocks of length L ~ n^(1/3) (Künsch 1989; Politis & Romano 1994) and refit.
Several runs of one arm (seeds): resample whole runs with replacement — the spread ScaleRL reports
across seeds — which is a reweighting of the pooled points, so all resamples are refitted in one
vectorised call (`fit_batch`).

The resamples are [n_boot, n] arrays. A curve of more than BOOT_POINTS points is resampled as batch means
instead (consecutive points of a run averaged, refitted with the batch's count as its weight): the mean of a
batch carries its points' noise, autocorrelation included, so the interval keeps its width while memory and time
stay bounded for any n (1,000 resamples of 1.5 million points would need 12 GB per array).
"""

from __future__ import annotations

import math

import numpy as np

from ablate.fit.sigmoid import PointFit, batch_means, fit_batch

BOOT_POINTS = 2048


def block_length(resid: np.ndarray) -> int:
    """Block length for residuals with lag-1 autocorrelation rho: the AR(1) rule of Politis & White
    (2004), L = (2 rho / (1 - rho^2))^(2/3) n^(1/3), and never below n^(1/3)."""
    n = resid.size
    e = resid - resid.mean()
    denom = float((e * e).sum())
    rho = float((e[1:] * e[:-1]).sum() / denom) if denom > 0 and n > 2 else 0.0
    rho = min(max(rho, 0.0), 0.95)
    L = max((2 * rho / (1 - rho**2)) ** (2.0 / 3.0), 1.0) * n ** (1.0 / 3.0)
    return max(1, min(n // 2 or 1, math.ceil(L)))


def block_bootstrap_residuals(resid: np.ndarray, n_boot: int, rng: np.random.Generator, block: int) -> np.ndarray:
    """[n_boot, n] resampled residuals: circular blocks of `block` consecutive residuals (centred first)."""
    n = resid.size
    e = resid - resid.mean()
    n_blocks = math.ceil(n / block)
    starts = rng.integers(0, n, size=(n_boot, n_blocks))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(n_boot, -1)[:, :n] % n
    return e[idx]


def bootstrap_single(x, y, fit: PointFit, *, n_boot: int, rng, weights=None, huber=None,
                     fix_a: float | None = None) -> tuple[np.ndarray, str]:
    """Parameter draws [n_boot, 4] (R0, A, B, C_mid) for one curve, and a description of the method.

    A fixed R0 is itself one noisy evaluation: each resample perturbs it by a resampled residual, or the
    interval would ignore that R0 error shifts A and the predictions.
    """
    resid = y - fit.predict(x)
    xb, rb, wb = batch_means(x, resid, weights, BOOT_POINTS)  # x, resid, weights themselves when n <= BOOT_POINTS
    L = block_length(rb)
    Y = fit.predict(xb)[None, :] + block_bootstrap_residuals(rb, n_boot, rng, L)
    r0 = None if fit.fit_r0 else fit.r0 + rng.choice(resid - resid.mean(), size=n_boot)  # one point's noise
    how = f"block bootstrap of residuals (block {L}, {n_boot} resamples)"
    if xb.size < x.size:
        how = how[:-1] + f" of {xb.size} batch means)"
    return fit_batch(xb, Y, fit, weights=wb, huber=huber, fix_a=fix_a, r0=r0), how


def bootstrap_runs(x, y, run_index, fit: PointFit, *, n_boot: int, rng, weights=None, huber=None,
                   fix_a: float | None = None, run_r0=None) -> tuple[np.ndarray, str]:
    """Parameter draws for an arm of several runs: resample runs with replacement (as point weights) and,
    within each run, its residuals in blocks — with only 2-3 seeds, resampling runs alone would give an
    interval from 3-10 distinct resamples.

    x, y, run_index: [n] pooled points and the run (0..R-1) each belongs to; run_r0: [R] each run's
    measured R0 (a resample's R0 is the mean over its resampled runs).
    """
    R = int(run_index.max()) + 1
    counts = rng.multinomial(R, np.full(R, 1.0 / R), size=n_boot)  # [n_boot, R]
    resid = y - fit.predict(x)
    n = x.size
    if n > BOOT_POINTS:
        x, resid, weights, run_index = _run_batch_means(x, resid, weights, run_index, R)
    W = counts[:, run_index].astype(float)
    if weights is not None:
        W = W * np.asarray(weights, dtype=float)[None, :]
    yhat = fit.predict(x)
    Y = np.empty((n_boot, x.size))
    L = 1
    for r in range(R):
        idx = np.nonzero(run_index == r)[0]  # this run's points, in compute order
        L = block_length(resid[idx])
        Y[:, idx] = yhat[idx] + block_bootstrap_residuals(resid[idx], n_boot, rng, L)
    r0 = None
    if not fit.fit_r0 and run_r0 is not None:
        r0 = counts @ np.asarray(run_r0, dtype=float) / R
    draws = fit_batch(x, Y, fit, weights=W, huber=huber, fix_a=fix_a, r0=r0)
    batched = f", {x.size} batch means" if x.size < n else ""
    return draws, f"run bootstrap x block bootstrap of residuals ({R} runs, block {L}, {n_boot} resamples{batched})"


def _run_batch_means(x, resid, weights, run_index, R: int):
    """Each run's points reduced to at most BOOT_POINTS / R batch means; returns (x, resid, weights, run_index),
    each [m] with m <= BOOT_POINTS (+ R), runs one after the other."""
    parts = []
    for r in range(R):
        idx = np.nonzero(run_index == r)[0]
        w = None if weights is None else np.asarray(weights, dtype=float)[idx]
        xb, rb, wb = batch_means(x[idx], resid[idx], w, max(1, BOOT_POINTS // R))
        parts.append((xb, rb, np.ones(xb.size) if wb is None else wb, np.full(xb.size, r)))
    return tuple(np.concatenate(col) for col in zip(*parts))


def percentile_ci(draws: np.ndarray, level: float) -> tuple[float, float] | None:
    """Percentile interval of the finite draws ([n_boot]), or None when there are too few."""
    d = draws[np.isfinite(draws)]
    if d.size < 10:
        return None
    q = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(d, [q, 100.0 - q])
    return float(lo), float(hi)
