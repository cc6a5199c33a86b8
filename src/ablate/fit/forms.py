"""Alternative saturating forms, and a rolling-origin backtest of which one extrapolates best.

ScaleRL (§2) chose the sigmoid over a power law because the power law fitted worse at low compute and its
asymptote was unstable. `--compare-forms` lets the data say so: each form is fitted on the first part of
the curve and scored on the later points it did not see (rolling forecasting origin; Tashman 2000).

    sigmoid:      R = R0 + (A - R0) * expit(B (ln C - ln C_mid))
    power:        R = A - D * C^-B                (power law with asymptote A)
    exponential:  R = A - (A - R0) * exp(-C / tau) (exponential saturation)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.optimize import least_squares

from ablate.fit.sigmoid import fit_sigmoid

Predictor = Callable[[np.ndarray], np.ndarray]


def _fit_sigmoid(x, y, r0) -> Predictor:
    return fit_sigmoid(x, y, r0=r0).predict


def _fit_power(x, y, r0) -> Predictor:
    # For fixed B the model is linear in (A, D): grid B, solve, refine all three.
    best_sse, best = np.inf, None
    for b in np.exp(np.linspace(np.log(0.05), np.log(5.0), 60)):
        u = x ** (-b)
        M = np.stack([np.ones_like(u), -u], 1)
        (a, d), *_ = np.linalg.lstsq(M, y, rcond=None)
        a, d = min(max(a, 0.0), 1.0), max(d, 0.0)
        sse = ((a - d * u - y) ** 2).sum()
        if sse < best_sse:
            best_sse, best = sse, (a, d, b)
    if best is None:  # no grid point gave a finite fit: data that are not finite
        raise ValueError("the power law has no finite fit on these points")
    a, d, b = best
    sol = least_squares(
        lambda p: p[0] - p[1] * x ** (-p[2]) - y, [a, max(d, 1e-9), b], bounds=([0.0, 0.0, 1e-3], [1.0, np.inf, 10.0])
    )
    a, d, b = sol.x
    return lambda c: a - d * np.asarray(c, dtype=float) ** (-b)


def _fit_exponential(x, y, r0) -> Predictor:
    r0 = float(y[0]) if r0 is None else r0
    best_sse, best = np.inf, None
    for log_tau in np.linspace(np.log(x.min()) - 2, np.log(x.max()) + 3, 80):
        e = 1.0 - np.exp(-x / np.exp(log_tau))  # y - r0 = (A - r0) * e
        g = np.clip((e * (y - r0)).sum() / max((e * e).sum(), 1e-300), 0.0, 1.0 - r0)
        sse = ((r0 + g * e - y) ** 2).sum()
        if sse < best_sse:
            best_sse, best = sse, (r0 + g, log_tau)
    if best is None:  # no grid point gave a finite fit: data that are not finite
        raise ValueError("the exponential has no finite fit on these points")
    sol = least_squares(
        lambda p: p[0] - (p[0] - r0) * np.exp(-x / np.exp(p[1])) - y, list(best), bounds=([r0, -50.0], [1.0, 50.0])
    )
    a, log_tau = sol.x
    return lambda c: a - (a - r0) * np.exp(-np.asarray(c, dtype=float) / np.exp(log_tau))


FORMS: dict[str, Callable[..., Predictor]] = {
    "sigmoid": _fit_sigmoid,
    "power": _fit_power,
    "exponential": _fit_exponential,
}


def backtest(x, y, r0, *, origins=(0.5, 0.6, 0.7, 0.8), forms=tuple(FORMS)) -> dict[str, float]:
    """Mean absolute error on the points after each forecasting origin, averaged over origins, per form.

    x, y: [n] sorted by x (the fit window's points). An origin at 0.6 fits the first 60% of the points.
    A form that fails to fit at an origin scores inf there.
    """
    n = len(x)
    scores: dict[str, list[float]] = {f: [] for f in forms}
    for frac in origins:
        k = round(frac * n)
        if k < 5 or n - k < 1:
            continue
        for name in forms:
            try:
                pred = FORMS[name](x[:k], y[:k], r0)
                scores[name].append(float(np.abs(pred(x[k:]) - y[k:]).mean()))
            except (ValueError, np.linalg.LinAlgError, FloatingPointError):
                scores[name].append(float("inf"))
    return {name: (float(np.mean(s)) if s else float("nan")) for name, s in scores.items()}
