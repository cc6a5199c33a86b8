"""`ablate plan`'s fast engine: the power of a design from simulated sweeps, every trial of a compute rung at once.

The exact engine (`exact.trial`) ranks each simulated sweep with `compare.rank`: per sweep, a grid-started scipy
fit of every seed and of every arm, a 100-resample parametric bootstrap per arm, and a scipy shared-A refit per
pair. That costs ~0.15 s per 2-arm, 3-seed sweep on one core, and a plan visits ~30 designs of up to 100 sweeps:
3 min 28 s for two arms of three seeds. This engine draws the same sweeps (the same task model, seed spread,
drift and evaluation noise) and reaches the same verdicts by the same rules, with three changes that make it fast:

1. Batched fits. Every seed of every trial is fitted in one vectorised Levenberg-Marquardt (`sigmoid.fit_batch`),
   started at the simulated truth instead of a grid (the truth lies in the optimum's basin). An arm's pooled fit
   is the fit to its seeds' mean curve (all runs share the evaluation points and weights, so the pooled sum of
   squares is S times the mean curve's, plus a constant). The pair's shared-A refit is a profile over A (three
   values, a parabola, once refined), each point one batched fit with A held.
2. Seeds reused across seed counts. A rung's trials are simulated once, and a design with s seeds uses each
   trial's first s (common random numbers: more seeds only add runs). The seeds' own fits are done once per rung.
3. The pooled arm's identification without resampling. `rank` reads the bootstrap's 95% intervals of the gain
   fraction, of the rise in the window and of A against its thresholds. Here each interval comes from the pooled
   fit's linearised covariance under the noise the bootstrap would use: per run, the residuals' variance and lag-1
   autocorrelation split into binomial evaluation noise and AR(1) drift (`noise.estimate_noise`), corrected for
   what the refit absorbs (`noise.debias`, with the linearised refit's expected residual moments instead of
   simulated ones). The seeds' own departures from the pooled curve show up there as strong, slow drift, as they do
   in the bootstrap. As in `noise.debias`, each resample draws its own noise level, so the interval's end is a
   quantile of a scale mixture of normals (heavy-tailed when the residuals rest on few effective points), taken on
   the logit for the gain fraction. Each step counts: the share of pooled arms identified was 0.37 and 0.60 by
   `fit_curves` (3 and 8 seeds, a window at 70% of the gain, ScaleRL 8B with seed spread; 30 trials each), and
   0.57 and 0.90 here from the raw noise estimate, 0.50 and 0.81 debiased, 0.38 and 0.62 with the mixture too
   (200 trials each; at 55% of the gain 0.03 and 0.00 against 0 and 0; at 90%, 1.0 against 1.0).

The tests (t-tests of ΔA and of the log compute ratio, TOST, one Benjamini-Hochberg family per sweep) are those of
`verdicts.decide_verdicts`, in closed form for all trials at once; a null arm not identified takes a uniform p-value.
Measured (bench/plan.py; docs/verdicts.md, Planning): 5.5 s against the exact engine's 279 s for two arms of three
seeds, with the same seeds per arm at every rung but one (8 seeds at 0.80 against 0.79 power).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import expit, ndtr

from ablate.fit.batch_verdicts import CODES, decide_codes
from ablate.fit.identify import CI_CLOSED_TOL, MIN_RISE
from ablate.fit.noise import RHO_MAX
from ablate.fit.sigmoid import (
    AT_BOUND_TOL,
    B_BOUNDS,
    PointFit,
    fit_batch,
    log_c_mid_bounds,
    measured_log_compute,
    sigmoid,
)
from ablate.fit.spread import FDR, MinEffect, NoiseFloor
from ablate.fit.taskmodel import MAX_POINTS, TaskModel, seed_spread
from ablate.fit.uncertainty import DEBIAS_ROUNDS


@dataclass
class Truth:
    """One arm's simulated curve (seed spread is added per trial)."""

    a: float
    b: float
    c_mid: float


class Rung:
    """Every trial of one compute rung: runs simulated and fitted lazily, as more seeds per arm are asked for."""

    def __init__(self, m: TaskModel, compute: float, arms: list[Truth], trials: int, rng: np.random.Generator):
        self.m, self.compute, self.arms, self.trials, self.rng = m, compute, arms, trials, rng
        n_pts = int(np.clip(round(compute / m.eval_every), 8, MAX_POINTS))
        self.x = np.linspace(0.0, compute, n_pts + 1)
        self.rho = m.drift_rho ** ((compute / n_pts) / m.eval_every)
        self.rng_ident = np.random.default_rng(rng.integers(2**63))
        self.spread = np.array([seed_spread(m, rng) for _ in range(trials)])  # [T, 2]: sd A, sd log C_mid
        k = len(arms)
        self.y = np.zeros((trials, k, 0, self.x.size))  # [T, arms, seeds, points]
        self.seed_fit = np.zeros((trials, k, 0, 4))  # (R0, A, B, C_mid) of each seed fitted alone
        self.seed_ok = np.zeros((trials, k, 0), dtype=bool)

    def grow(self, seeds: int) -> None:
        """Simulate and fit more seeds until every arm of every trial has `seeds`."""
        have = self.y.shape[2]
        if seeds <= have:
            return
        new = seeds - have
        m, T, K = self.m, self.trials, len(self.arms)
        a = np.array([t.a for t in self.arms])[None, :, None]
        c = np.array([t.c_mid for t in self.arms])[None, :, None]
        b = np.array([t.b for t in self.arms])[None, :, None, None]
        a_j = np.clip(a + self.spread[:, 0, None, None] * self.rng.standard_normal((T, K, new)), m.r0 + 0.02, 0.99)
        c_j = c * np.exp(self.spread[:, 1, None, None] * self.rng.standard_normal((T, K, new)))
        mean = sigmoid(self.x, m.r0, a_j[..., None], b, c_j[..., None])
        innov = self.rng.standard_normal(mean.shape) * m.drift_sd * math.sqrt(max(1.0 - self.rho**2, 0.0))
        drift = np.zeros_like(mean)
        for t in range(1, self.x.size):
            drift[..., t] = self.rho * drift[..., t - 1] + innov[..., t]
        p = np.clip(mean + drift, 0.0, 1.0)
        if m.val_n:
            n = round(m.val_n)
            y = self.rng.binomial(n, p) / n
        else:
            y = p
        fits = np.stack([self._fit(k, y[:, k].reshape(T * new, -1)).reshape(T, new, 4) for k in range(K)], axis=1)
        self.y = np.concatenate([self.y, y], axis=2)
        self.seed_fit = np.concatenate([self.seed_fit, fits], axis=2)
        self.seed_ok = np.concatenate([self.seed_ok, self.point_ok(fits)], axis=2)

    def _fit(self, k: int, y: np.ndarray, fix_a=None, start: Truth | None = None) -> np.ndarray:
        """Fits [N, 4] of curves y ([N, points], the first at compute 0: each curve's own R0), from arm k's truth."""
        t = start or self.arms[k]
        pf = PointFit(
            r0=self.m.r0, a=t.a, b=t.b, c_mid=t.c_mid, sse=0.0, n_points=self.x.size - 1, fit_r0=False, at_bound=[]
        )
        return fit_batch(self.x[1:], y[:, 1:], pf, r0=y[:, 0], fix_a=fix_a)

    def point_ok(self, f: np.ndarray) -> np.ndarray:
        """Which fits ([..., 4]) pass the identification checks a point fit alone can pass (`fit_curves` with no
        bootstrap): A off its bounds, B and C_mid off theirs, the window past C_mid, a rise of MIN_RISE in it."""
        r0, a, b, c = (f[..., i] for i in range(4))
        xs = self.x[1:]
        m_lo, m_hi = log_c_mid_bounds(xs)
        lm = np.log(c)
        frac = expit(b * (np.log(xs[-1]) - lm))
        rise = frac - expit(b * (np.log(xs[0]) - lm))
        return (
            (a < 1.0 - AT_BOUND_TOL)
            & (a > r0 + AT_BOUND_TOL)
            & (b > B_BOUNDS[0] * (1 + 1e-3))
            & (b < B_BOUNDS[1] * (1 - 1e-3))
            & (lm > m_lo + 1e-3)
            & (lm < m_hi - 1e-3)
            & (frac >= 0.5)
            & (rise >= MIN_RISE)
        )


def pooled_identified(rung: Rung, fit: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Whether each pooled fit ([N, 4]) of runs y ([N, S, points]) is identified as `fit_curves` with its bootstrap
    would say: the point checks, then the 95% intervals of the gain fraction, of the rise in the window and of A
    (see the module docstring for how the intervals are had without resampling)."""
    xs, ys = rung.x[1:], y[..., 1:]
    S, n = ys.shape[1], xs.size
    r0, a, b, c = (fit[:, i, None] for i in range(4))
    lx, lm = np.log(xs)[None, :], np.log(c)
    s = expit(b * (lx - lm))
    yhat = r0 + (a - r0) * s
    e = ys - yhat[:, None, :]  # [N, S, n]
    ss = (e * e).sum(-1)
    s0 = ss / max(n - 3, 1)
    r1 = (e[..., 1:] * e[..., :-1]).sum(-1) / np.maximum(ss, 1e-300)
    ev = np.zeros_like(yhat)
    if rung.m.val_n:
        p = np.clip(yhat, 1e-4, 1 - 1e-4)
        ev = p * (1 - p) / rung.m.val_n
    ds = s * (1 - s)
    jac = np.stack([s, (a - r0) * ds * (lx - lm), -(a - r0) * ds * b], axis=-1)  # [N, n, 3]: A, B, ln C_mid
    info = np.einsum("kni,knj->kij", jac, jac) * S
    inv = np.linalg.pinv(info)
    one, shrink, dof = _debiased_noise(s0.mean(1), r1.mean(1), ev, jac, inv * S, S)
    cov = S * one  # [N, n, n]: summed over the runs
    z = _spread_quantile(shrink, dof, S, rung.rng_ident)
    meat = np.einsum("kni,knm,kmj->kij", jac, cov, jac)
    theta = inv @ meat @ inv  # [N, 3, 3]

    def sd(grad: np.ndarray) -> np.ndarray:
        return np.sqrt(np.maximum(np.einsum("ki,kij,kj->k", grad, theta, grad), 0.0))

    b1, lm1 = b[:, 0], lm[:, 0]
    l_end, l_lo = math.log(xs[-1]), math.log(xs[0])
    zero = np.zeros_like(b1)
    z_end = b1 * (l_end - lm1)
    f_lo = expit(z_end - z * sd(np.stack([zero, l_end - lm1, -b1], -1)))
    f1, f0 = expit(z_end), expit(b1 * (l_lo - lm1))
    g1, g0 = f1 * (1 - f1), f0 * (1 - f0)
    rise = f1 - f0
    rise_lo = rise - z * sd(np.stack([zero, g1 * (l_end - lm1) - g0 * (l_lo - lm1), -b1 * (g1 - g0)], -1))
    sd_a = sd(np.stack([np.ones_like(b1), zero, zero], -1))
    a1, r01 = a[:, 0], r0[:, 0]
    a_ok = (a1 + z * sd_a < 1.0 - CI_CLOSED_TOL) & (a1 - z * sd_a > r01 + CI_CLOSED_TOL)
    return rung.point_ok(fit) & (f_lo >= 0.5) & (rise_lo >= MIN_RISE) & a_ok


def _ar_cov(drift: np.ndarray, rho: np.ndarray, ev: np.ndarray) -> np.ndarray:
    """[N, n, n] covariance of AR(1) drift (stationary variance drift, coefficient rho: [N]) plus white evaluation
    noise of variance ev ([N, n])."""
    n = ev.shape[1]
    lags = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    return drift[:, None, None] * rho[:, None, None] ** lags + ev[:, :, None] * np.eye(n)


def _debiased_noise(
    s_obs, r_obs, ev, jac, inv1, S: int, rounds: int = DEBIAS_ROUNDS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One run's noise covariance ([N, n, n]) as the bootstrap measures it: split into evaluation noise and AR(1)
    drift (`noise.estimate_noise`), then corrected for what the pooled refit absorbs (`noise.debias`), with the
    expected residual moments of a linearised refit in place of simulated ones. s_obs, r_obs: [N] the runs' mean
    residual variance and lag-1 autocorrelation; jac [N, n, 3], inv1 = (J'J)^-1 [N, 3, 3]; S runs pooled."""
    n = ev.shape[1]
    ev_m = ev.mean(1)
    hat = np.einsum("kni,kij,kmj->knm", jac, inv1, jac)  # the pooled fit's hat matrix, per run's points

    def split(total, r):
        drift = np.maximum(total - ev_m, 0.0)
        rho = np.where(drift > 0, np.clip(r * total / np.where(drift > 0, drift, 1.0), 0.0, RHO_MAX), 0.0)
        return drift, rho

    drift, rho = split(s_obs, r_obs)
    for _ in range(rounds):
        sig = _ar_cov(drift, rho, ev)
        hs = hat @ sig
        cov_e = sig - (hs + np.swapaxes(hs, 1, 2)) / S + hs @ hat / S  # one run's residuals around the pooled fit
        tr = np.trace(cov_e, axis1=1, axis2=2)
        s_sim = tr / max(n - 3, 1)
        r_sim = np.trace(cov_e, offset=1, axis1=1, axis2=2) / np.maximum(tr, 1e-300)
        total = drift + ev_m
        r_model = np.where(total > 0, rho * drift / np.where(total > 0, total, 1.0), 0.0)
        shrink = np.clip(s_sim / np.maximum(total, 1e-300), 0.2, 1.0)
        drift, rho = split(s_obs / shrink, np.clip(r_obs - (r_sim - r_model), 0.0, RHO_MAX))
    dof = tr**2 / np.maximum(np.einsum("kij,kji->k", cov_e, cov_e), 1e-300)  # Satterthwaite: the residual
    return _ar_cov(drift, rho, ev), shrink, dof  # variance's effective dof


def _spread_quantile(
    shrink: np.ndarray, dof: np.ndarray, S: int, rng: np.random.Generator, draws: int = 400
) -> np.ndarray:
    """The normal quantile the bootstrap's 95% percentile interval reaches, in units of the point estimate's sd:
    each run's resamples draw their own noise level from what the data allow (`noise.debias`: the measured
    variance over one simulation's shrinkage, clipped as there), so the draws are a scale mixture of normals,
    wider in the tails the fewer effective points the residual variance rests on (dof [N]) and the fewer runs
    (S) average it out. [N] quantiles."""
    N = shrink.size
    chi = rng.chisquare(np.maximum(dof, 0.1)[:, None, None], (N, draws, S)) / np.maximum(dof, 0.1)[:, None, None]
    scale = shrink[:, None, None] / np.clip(shrink[:, None, None] * chi, 0.2, 5.0)  # drift_k / drift
    mult = np.sqrt(scale.mean(2))  # [N, draws]: each resample's sd over the point estimate's
    lo, hi = np.full(N, 0.5), np.full(N, 20.0)
    for _ in range(30):  # bisection: P(Z * mult > q) = 2.5%
        q = (lo + hi) / 2
        tail = (1.0 - ndtr(q[:, None] / mult)).mean(1)
        lo, hi = np.where(tail > 0.025, q, lo), np.where(tail > 0.025, hi, q)
    return (lo + hi) / 2


def shared_a(
    rung: Rung, k: int, ybar_k: np.ndarray, ybar_b: np.ndarray, fit_k: np.ndarray, fit_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pair's shared-A refit (`shared.fit_shared_a` on the pooled points): A, and (R0, A, B, C_mid) of arm k
    and of the baseline under it ([N] and [N, 4] each). A profile over A: the summed squares at three values, the
    vertex of their parabola, refined once with a narrower step."""
    N = ybar_k.shape[0]
    lo = np.maximum(fit_k[:, 0], fit_b[:, 0])
    centre = np.clip((fit_k[:, 1] + fit_b[:, 1]) / 2, lo + 1e-6, 1.0)
    xs = rung.x[1:]

    def sse(a_try: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        J = a_try.shape[1]
        a_flat = a_try.reshape(-1)
        fk = rung._fit(k, np.repeat(ybar_k, J, axis=0), fix_a=a_flat)
        fb = rung._fit(1, np.repeat(ybar_b, J, axis=0), fix_a=a_flat)
        out = sum(
            ((sigmoid(xs, f[:, 0:1], f[:, 1:2], f[:, 2:3], f[:, 3:4]) - np.repeat(y, J, axis=0)[:, 1:]) ** 2).sum(1)
            for f, y in ((fk, ybar_k), (fb, ybar_b))
        )
        return out.reshape(N, J), fk.reshape(N, J, 4), fb.reshape(N, J, 4)

    best = centre
    for h in (0.01, 0.0025):
        grid = np.clip(best[:, None] + h * np.array([-1.0, 0.0, 1.0]), lo[:, None], 1.0)
        v, _, _ = sse(grid)
        curv = v[:, 0] - 2 * v[:, 1] + v[:, 2]
        step = np.where(curv > 0, h * (v[:, 0] - v[:, 2]) / (2 * np.where(curv > 0, curv, 1.0)), 0.0)
        vertex = np.clip(best + np.clip(step, -2 * h, 2 * h), lo, 1.0)
        best = np.where(curv > 0, vertex, grid[np.arange(N), np.argmin(v, 1)])
    _, fk, fb = sse(best[:, None])
    return best, fk[:, 0], fb[:, 0]


def verdict_codes(
    rung: Rung,
    seeds: int,
    *,
    noise: NoiseFloor | None,
    me: MinEffect,
    extra_arms: int,
    rng: np.random.Generator,
    q: float = FDR,
    horizon: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The effect arm's (arm 0's) verdict in each trial with `seeds` seeds per arm (the trial's first ones), and
    whether `sweep --decide` stops it there (`batch_verdicts.decide_codes`, `horizon` its most seeds over `seeds`);
    arm 1 is the baseline; the tests held to false-discovery rate q."""
    rung.grow(seeds)
    T, K = rung.trials, len(rung.arms)
    y = rung.y[:, :, :seeds]
    seed_a = np.where(rung.seed_ok[:, :, :seeds], rung.seed_fit[:, :, :seeds, 1], np.nan)  # [T, K, s]
    ybar = y.mean(2)  # [T, K, points]: the pooled fit is the mean curve's; its R0 the seeds' mean
    pooled = np.stack([rung._fit(k, ybar[:, k]) for k in range(K)], axis=1)  # [T, K, 4]
    ident = np.stack([pooled_identified(rung, pooled[:, k], y[:, k]) for k in range(K)], axis=1)
    compared = ident & ident[:, 1:2]
    compared[:, 1] = False
    # the shared-A comparison of every arm with the baseline (computed for all; used where compared)
    logc = np.full((T, K, seeds), np.nan)
    lr_fallback = np.full((T, K), np.nan)
    base_logc = np.full((T, K, seeds), np.nan)
    ref = np.full((T, K), np.nan)  # the baseline's pooled log compute to the gain share under each pair's shared A
    for k in [k for k in range(K) if k != 1]:
        a_s, fk, fb = shared_a(rung, k, ybar[:, k], ybar[:, 1], pooled[:, k], pooled[:, 1])
        xs = rung.x[1:]
        ref[:, k] = measured_log_compute(fb[:, 2], fb[:, 3], a_s - fb[:, 0], xs)
        lr_fallback[:, k] = measured_log_compute(fk[:, 2], fk[:, 3], a_s - fk[:, 0], xs) - ref[:, k]  # its ratio
        for who, dst in ((k, logc[:, k]), (1, base_logc[:, k])):
            start = Truth(float(np.median(a_s)), rung.arms[who].b, rung.arms[who].c_mid)
            f = rung._fit(who, y[:, who].reshape(T * seeds, -1), fix_a=np.repeat(a_s, seeds), start=start)
            dst[:] = measured_log_compute(f[:, 2], f[:, 3], f[:, 1] - f[:, 0], xs).reshape(T, seeds)
    # the baseline's seeds' log compute: from its first comparison (arms in order)
    first = np.argmax(compared, axis=1)
    logc[:, 1] = base_logc[np.arange(T), first]
    has_logc = compared | (compared.any(1, keepdims=True) & (np.arange(K) == 1))
    tests = (noise, me, extra_arms, rng, q, horizon)
    return decide_codes(seed_a, logc, has_logc, lr_fallback, pooled[:, :, 1], compared, ident, ref, *tests)


def rung_for(m: TaskModel, compute: float, effect: dict[str, float], trials: int, sim_arms: int, seed: int) -> Rung:
    """The trials of one design question at one compute: arm 0 carries the effect, the rest are the baseline's."""
    arm = Truth(min(m.a + effect.get("a", 0.0), 0.99), m.b * effect.get("b", 1.0), m.c_mid * effect.get("c_mid", 1.0))
    base = Truth(m.a, m.b, m.c_mid)
    rng = np.random.default_rng([seed, int(compute * 1e6) % (2**31), 17])
    return Rung(m, compute, [arm] + [base] * (sim_arms - 1), trials, rng)


def cell_power(
    rung: Rung,
    seeds: int,
    wanted: str,
    *,
    noise: NoiseFloor | None,
    me: MinEffect,
    extra_arms: int,
    goal: float,
    seed: int,
) -> dict[str, Any]:
    """`exact.power_cell`'s answer from every trial of the rung at once (no early stop: all trials count)."""
    rng = np.random.default_rng([seed, seeds, 29])
    codes, _ = verdict_codes(rung, seeds, noise=noise, me=me, extra_arms=extra_arms, rng=rng)
    n = codes.size
    p = float(np.mean(codes == CODES.index(wanted)))
    return {
        "seeds": seeds,
        "compute": rung.compute,
        "power": p,
        "se": math.sqrt(max(p * (1 - p), 1e-9) / n),
        "trials": n,
        "reached": p >= goal,
    }
