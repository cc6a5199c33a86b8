"""The noise of one training curve, measured from its residuals, and simulated again for intervals.

A pass-rate curve departs from its sigmoid in two ways:
- evaluation noise: a mean@k pass rate over a fixed validation set is a mean of `n` graded samples (`val_n`), with
  variance at most p(1 - p) / n, independent from one evaluation to the next;
- policy drift: the policy wanders around its trend (learning rate, staleness, batch noise), so the residuals of
  consecutive evaluations are correlated. Modelled as AR(1): stationary variance `drift_var`, coefficient `rho`
  per median spacing of the evaluations (rho^(dx / dx_median) for uneven spacing).

`estimate_noise` splits the residual variance into the two. With `n` known, the evaluation part is p(1 - p)/n and
the drift is what remains; the residuals' lag-1 autocorrelation gives rho. Without `n`, the whole residual
variance is treated as drift: correlated noise averages out more slowly than white noise, so the intervals come
out wider, never narrower. `simulate_noise` draws residual vectors from the estimate for a parametric bootstrap.

Residuals of a fitted curve understate the noise: the fit follows part of the drift, so their variance and their
autocorrelation both come out too small, the more so the stronger the drift. `debias` corrects both by simulation
(the bootstrap's own first pass): simulate from the estimate, refit, measure again, and move the estimate by the
shrinkage the simulation shows.

The estimate itself is uncertain: forty evaluations with rho 0.9 carry the information of a handful, and their
lag-1 autocorrelation can come out anywhere from 0.5 to 0.9. A bootstrap that simulates from the point estimate
alone then undercovers exactly where the drift is strongest. `debias` therefore also keeps one plausible
(drift variance, rho) per first-pass simulation, by the same pivot (how far that simulation's moments fell from
the truth it was drawn from, applied to the observed moments), and `simulate_noise` draws each resample's noise
from those: the bootstrap carries the noise model's own uncertainty into the intervals.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

RHO_MAX = 0.95


@dataclass
class NoiseEstimate:
    """Residual noise of one curve: AR(1) drift plus white evaluation noise."""

    rho: float
    """Drift autocorrelation per median evaluation spacing."""
    drift_var: float
    """Stationary variance of the drift."""
    eval_var: np.ndarray
    """[n] evaluation variance of each point."""
    eval_known: bool
    """True when the graded-sample counts were known (else the evaluation noise is folded into the drift)."""
    step: np.ndarray
    """[n] each point's distance to the previous one in median spacings (1 for the first)."""
    point_drift_var: float | None = None
    """When the series are batch means: the drift variance of one evaluation (what a new evaluation carries),
    larger than the batch means' own; None otherwise (then `drift_var` is one evaluation's)."""
    plausible: tuple[np.ndarray, np.ndarray] | None = None
    """([k] drift variances, [k] rhos) the data allow (see the module docstring); None: the point estimate only."""

    def eval_var_at(self, p, n: float | None):
        """Evaluation variance of one new evaluation at pass rate(s) p (0 when the counts are unknown: then the
        evaluation noise is part of the drift)."""
        if n is None or not self.eval_known:
            return np.zeros_like(np.asarray(p, dtype=float))
        q = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
        return q * (1.0 - q) / n

    def describe(self) -> str:
        ev = (
            f"evaluation sd {np.sqrt(self.eval_var.mean()):.4f}" if self.eval_known else "evaluation noise in the drift"
        )
        return f"AR(1) drift sd {np.sqrt(self.drift_var):.4f}, rho {self.rho:.2f}; {ev}"


def _steps(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return np.zeros(0)
    dx = np.diff(x)
    med = float(np.median(dx)) if dx.size else 1.0
    med = med if med > 0 else 1.0
    return np.concatenate([[1.0], dx / med])


def moments(E: np.ndarray, n_params: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Residual variance (dof-corrected) and lag-1 autocorrelation of each row of E ([k, m] or [m])."""
    E = np.atleast_2d(E)
    m = E.shape[1]
    ss = (E * E).sum(1)
    s0 = ss / max(m - n_params, 1)
    r1 = (E[:, 1:] * E[:, :-1]).sum(1) / np.maximum(ss, 1e-300)
    return s0, r1


def estimate_noise(x, y, yhat, n=None, n_params: int = 3) -> NoiseEstimate:
    """The noise of one curve from its fitted residuals. x, y, yhat: [m] in compute order; n: [m] graded samples
    per point, or None when unknown; n_params: parameters the fit used (for the residual variance's dof)."""
    x, y, yhat = (np.asarray(v, dtype=float) for v in (x, y, yhat))
    e = y - yhat
    m = e.size
    (s0,), (r1,) = moments(e, n_params)
    s0, r1 = float(s0), float(r1)
    known = n is not None and np.all(np.isfinite(n)) and np.all(np.asarray(n) > 0)
    if known:
        p = np.clip(yhat, 1e-4, 1 - 1e-4)
        eval_var = p * (1 - p) / np.asarray(n, dtype=float)
        drift_var = max(s0 - float(eval_var.mean()), 0.0)
    else:
        eval_var = np.zeros(m)
        drift_var = s0
    rho = float(np.clip(r1 * s0 / drift_var, 0.0, RHO_MAX)) if m > 3 and drift_var > 0 else 0.0
    return NoiseEstimate(rho=rho, drift_var=drift_var, eval_var=eval_var, eval_known=bool(known), step=_steps(x))


def debias(
    est: NoiseEstimate, observed: tuple[float, float], simulated: tuple[np.ndarray, np.ndarray]
) -> NoiseEstimate:
    """`est` corrected for what fitting does to residuals: `observed` = (variance, lag-1 autocorrelation) of the real
    residuals; `simulated` = the same ([k] each) for residuals of refits to data simulated from `est`. The total
    variance is scaled up by the share the refits lost, the autocorrelation moved by the bias the refits showed,
    and the drift takes what the evaluation noise does not explain."""
    s_sim, r_sim = (np.asarray(v, dtype=float) for v in simulated)
    s_obs, r_obs = observed
    ev = float(est.eval_var.mean()) if est.eval_known else 0.0
    total = est.drift_var + ev
    ok = np.isfinite(s_sim) & np.isfinite(r_sim) & (s_sim > 0)
    if not (ok.any() and total > 0):
        return est
    s_sim, r_sim = s_sim[ok], r_sim[ok]
    r_model = est.rho * est.drift_var / total  # the lag-1 autocorrelation the simulated noise had

    def solve(total_new, r_new):
        drift = np.maximum(total_new - ev, 0.0)
        rho = np.where(drift > 0, np.clip(r_new * total_new / np.where(drift > 0, drift, 1.0), 0.0, RHO_MAX), 0.0)
        return drift, rho

    # the point estimate: the mean shrinkage (< 1: refits absorb part of the noise) and mean bias (< 0: the refits'
    # residuals decorrelate)
    shrink = float(np.clip(s_sim.mean() / total, 0.2, 1.0))
    drift_var, rho = solve(s_obs / shrink, np.clip(r_obs - (r_sim.mean() - r_model), 0.0, RHO_MAX))
    # what else the data allow: each simulation's own shrinkage and bias
    shrink_k = np.clip(s_sim / total, 0.2, 5.0)
    drift_k, rho_k = solve(s_obs / shrink_k, np.clip(r_obs - (r_sim - r_model), 0.0, RHO_MAX))
    return replace(est, drift_var=float(drift_var), rho=float(rho), plausible=(drift_k, np.maximum(rho_k, 0.0)))


def simulate_noise(est: NoiseEstimate, k: int, rng: np.random.Generator) -> np.ndarray:
    """[k, m] residual draws: AR(1) drift (stationary from the first point) plus independent evaluation noise.
    Each draw takes its drift variance and rho from `est.plausible` when set, else the point estimate."""
    m = est.step.size
    if est.plausible is not None:
        pick = rng.integers(0, est.plausible[0].size, k)
        sd, rho = np.sqrt(est.plausible[0][pick]), est.plausible[1][pick]
    else:
        sd, rho = np.full(k, np.sqrt(est.drift_var)), np.full(k, est.rho)
    innov = rng.standard_normal((m, k))  # [m, k]: time-major, so each step works on contiguous rows
    if m and np.allclose(est.step[1:], 1.0, rtol=1e-9, atol=0.0):  # evenly spaced: one coefficient per draw
        innov[1:] *= sd * np.sqrt(np.maximum(1.0 - rho * rho, 0.0))
        coef = np.broadcast_to(rho, (m, k))
    else:
        coef = rho[None, :] ** est.step[:, None]
        innov[1:] *= (sd[None, :] * np.sqrt(np.maximum(1.0 - coef * coef, 0.0)))[1:]
    if m:
        innov[0] *= sd  # stationary from the first point
    for t in range(1, m):
        innov[t] += coef[t] * innov[t - 1]
    out = innov.T
    if est.eval_known:
        out += np.sqrt(est.eval_var)[None, :] * rng.standard_normal((k, m))
    return out
