"""Intervals for the sigmoid's parameters and predictions.

One run: a parametric bootstrap from the run's measured noise (fit/noise.py: AR(1) drift plus evaluation noise).
Each resample is the fitted curve plus simulated residuals, with the R0 measurement redrawn too (R0 is one noisy
evaluation, and the fit holds it fixed), refitted by the same estimator as the point fit. A prediction for what
the run will show at --to adds what a new evaluation there carries: the drift's stationary spread and the
evaluation noise. Autocorrelated residuals are why a resampling of single points, or a band on the fitted curve
alone, is too narrow: n evaluations with lag-1 correlation rho carry about n(1 - rho)/(1 + rho) points' worth of
information.

An arm with seeds: the spread that matters is between seeds (each reaches its own plateau at its own speed), and
one run cannot show it. The arm's intervals are t-intervals over its seeds' own fits (`seed_interval`), which
include each seed's fit noise; the pooled resamples still serve for the gain fraction and the figure's band.

The resamples are [n_boot, n] arrays. A curve of more than BOOT_POINTS points is resampled as batch means instead
(consecutive points averaged, refitted with the batch's count as its weight), so memory and time stay bounded for
any n (1,000 resamples of 1.5 million points would need 12 GB per array); the noise is then measured on the batch
means themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import t as student_t

from ablate.fit.noise import NoiseEstimate, debias, estimate_noise, moments, simulate_noise
from ablate.fit.sigmoid import PointFit, batch_means, fit_batch, sigmoid

BOOT_POINTS = 2048
DEBIAS_ROUNDS = 3


@dataclass
class _Part:
    """One run's points as the bootstrap sees them: [m] arrays in compute order (batch means for a long run)."""

    run: int
    x: np.ndarray
    y: np.ndarray
    n: np.ndarray | None
    """Graded samples behind each point (summed over a batch), None if unknown."""
    w: np.ndarray
    n_point: float | None
    """Median graded samples of one evaluation (what the R0 measurement and a new evaluation rest on)."""
    var_point: float | None = None
    """Batch means only: the residual variance of one evaluation."""


def _series(x, y, run_index, fit: PointFit, n, weights) -> list[_Part]:
    """Each run's points as a series, batch means beyond BOOT_POINTS / R points. Runs with no point in the window
    are left out."""
    R = int(run_index.max()) + 1
    yhat_all = fit.predict(x)
    out = []
    for r in range(R):
        idx = np.nonzero(run_index == r)[0]
        if idx.size == 0:
            continue
        xr, yr = x[idx].astype(float), y[idx].astype(float)
        nr = None if n is None else np.asarray(n, dtype=float)[idx]
        wr = None if weights is None else np.asarray(weights, dtype=float)[idx]
        part = _Part(
            r, xr, yr, nr, np.ones(xr.size) if wr is None else wr, None if nr is None else float(np.median(nr))
        )
        cap = max(8, BOOT_POINTS // R)
        if idx.size > cap:  # batch means (weighted by their counts); their own noise is measured as such
            e = yr - yhat_all[idx]
            part.var_point = float(e @ e / max(e.size - 3, 1))
            xb, eb, cnt = batch_means(xr, e, wr, cap)
            if nr is not None:  # a batch mean rests on the graded samples of all its points
                _, n_mean, n_cnt = batch_means(xr, nr, None, cap)
                part.n = n_mean * n_cnt
            part.x, part.w, part.y = xb, cnt, fit.predict(xb) + eb
        out.append(part)
    return out


def _first_row(m: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    """The (variance, lag-1 autocorrelation) of `noise.moments`' first row."""
    return float(m[0][0]), float(m[1][0])


def _simulate(fit: PointFit, parts, noises: list[NoiseEstimate], k: int, rng) -> np.ndarray:
    return np.concatenate(
        [fit.predict(p.x)[None, :] + simulate_noise(est, k, rng) for p, est in zip(parts, noises)], axis=1
    )


def parametric_bootstrap(
    x,
    y,
    run_index,
    fit: PointFit,
    *,
    n_boot: int,
    rng,
    n=None,
    weights=None,
    huber=None,
    fix_a: float | None = None,
    run_r0=None,
) -> tuple[np.ndarray, list[NoiseEstimate], str]:
    """Parameter draws [n_boot, 4] (R0, A, B, C_mid), each run's noise estimate, and a description.

    x, y, run_index, n: [m] pooled points (n: graded samples per point, None if unknown); run_r0: [R] each run's
    measured R0, None when R0 is fitted or given. Each run's residuals are simulated with its own noise, measured
    in two passes: first, smaller simulations show how much of the noise the refits absorb (noise.debias, iterated
    DEBIAS_ROUNDS times to the noise whose refits' residuals look like the data's), then the draws come from the
    corrected estimate, each resample with its own plausible drift (the estimate's own uncertainty)."""
    x, y, run_index = (np.asarray(v) for v in (x, y, run_index))
    n_params = 3 if not fit.fit_r0 else 4
    parts = _series(x, y, run_index, fit, n, weights)
    noises = [estimate_noise(p.x, p.y, fit.predict(p.x), n=p.n, n_params=n_params) for p in parts]
    xb = np.concatenate([p.x for p in parts])
    wb = np.concatenate([p.w for p in parts])
    wts = None if np.all(wb == 1) else wb
    bounds = np.cumsum([0] + [p.x.size for p in parts])
    # pass 1: how much of the noise does a refit absorb? Iterated to the noise whose refits look like the data
    k1 = int(min(64, max(32, n_boot // 16)))
    observed = [_first_row(moments(p.y - fit.predict(p.x), n_params)) for p in parts]
    for _ in range(DEBIAS_ROUNDS):
        point = [replace(e, plausible=None) for e in noises]
        Y1 = _simulate(fit, parts, point, k1, rng)
        d1 = fit_batch(xb, Y1, fit, weights=wts, huber=huber, fix_a=fix_a)
        E1 = Y1 - sigmoid(xb[None, :], d1[:, 0:1], d1[:, 1:2], d1[:, 2:3], d1[:, 3:4])
        noises = [
            debias(point[i], observed[i], moments(E1[:, bounds[i] : bounds[i + 1]], n_params))
            for i in range(len(parts))
        ]
    # pass 2: the draws, each from a noise the data allow (noise.debias)
    Y = _simulate(fit, parts, noises, n_boot, rng)
    for i, p in enumerate(parts):  # batch means: what one evaluation carries, for predictions
        if p.var_point is not None:
            ev = float(noises[i].eval_var_at(float(np.mean(p.y)), p.n_point))
            noises[i] = replace(noises[i], point_drift_var=max(p.var_point - ev, noises[i].drift_var))
    r0 = None
    if not fit.fit_r0 and run_r0 is not None:  # each R0 measurement: one evaluation's noise (all of it if n unknown)
        r0_noise = np.zeros(n_boot)
        of_run = {p.run: i for i, p in enumerate(parts)}
        for r, r0_i in enumerate(run_r0):
            i = of_run.get(r, 0)  # a run with no point in the window: its R0 has the noise of the others'
            est = noises[i]
            var = (
                float(est.eval_var_at(r0_i, parts[i].n_point))
                if est.eval_known
                else (est.point_drift_var or est.drift_var)
            )
            r0_noise += np.sqrt(var) * rng.standard_normal(n_boot)
        r0 = np.clip(fit.r0 + r0_noise / len(run_r0), 0.0, 1.0 - 1e-6)
    draws = fit_batch(xb, Y, fit, weights=wts, huber=huber, fix_a=fix_a, r0=r0)
    R = len(parts)
    how = (
        f"parametric bootstrap from the measured noise ({n_boot} resamples; "
        + ("; ".join(f"run {i}: {e.describe()}" for i, e in enumerate(noises)) if R > 1 else noises[0].describe())
        + (f"; {xb.size} batch means" if xb.size < x.size else "")
        + ")"
    )
    return draws, noises, how


def prediction_draws(draws: np.ndarray, at: float, noise: NoiseEstimate, n_eval: float | None, rng) -> np.ndarray:
    """[n_boot] draws of what one run will show at compute `at`: the fitted curve there (per parameter draw) plus
    the drift's stationary spread and one evaluation's noise."""
    mean = sigmoid(at, draws[:, 0], draws[:, 1], draws[:, 2], draws[:, 3])
    drift = noise.point_drift_var if noise.point_drift_var is not None else noise.drift_var
    var = drift + noise.eval_var_at(mean, n_eval)
    return mean + np.sqrt(var) * rng.standard_normal(mean.size)


def percentile_ci(draws: np.ndarray, level: float) -> tuple[float, float] | None:
    """Percentile interval of the finite draws ([n_boot]), or None when there are too few."""
    d = draws[np.isfinite(draws)]
    if d.size < 10:
        return None
    q = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(d, [q, 100.0 - q])
    return float(lo), float(hi)


def seed_interval(center: float, values, level: float, *, log: bool = False) -> tuple[float, float] | None:
    """t-interval for an arm's value from its seeds' own estimates ([k], NaN for a seed that could not say):
    center +- t(k-1) * sd / sqrt(k); on the log scale with `log`. None with fewer than two finite values."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    if v.size < 2 or not np.isfinite(center) or (log and center <= 0):
        return None
    if log:
        v, center = np.log(v), np.log(center)
    half = student_t.ppf(0.5 + level / 2.0, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
    lo, hi = center - half, center + half
    return (float(np.exp(lo)), float(np.exp(hi))) if log else (float(lo), float(hi))
