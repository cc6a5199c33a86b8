"""Whether a fit measures A: the checks that make a fit `not_identified` (the window past C_mid, a rise inside it,
parameters off their bounds, intervals that close before the bounds). docs/verdicts.md says what each means."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ablate.errors import Phrase, phrased
from ablate.fit.result import FitOptions
from ablate.fit.sigmoid import PointFit, gain_fraction
from ablate.fit.uncertainty import percentile_ci

CI_CLOSED_TOL = 1e-3
MIN_RISE = 0.10
"""The share of the gain A - R0 that the fitted curve must climb inside the fit window, from its first point to its
last, for B, C_mid and so A to be measured. A window of plateau points only (`--fit-from` past the rise) shows a
level, not a shape: any steep enough (B, C_mid) puts the curve flat across it, so the fit picks one pair and the
bootstrap refits, which start there and see no gradient, stay on it (intervals of zero width around a guess). In
simulation (the ScaleRL 8B curve, realistic noise, 16 runs per window, 95% intervals) a window that sees 17% or
more of the gain covers the true A and B in at least 13 of 16 runs, one that sees 12% in 12, one that sees 7% in
9 to 10, and one that sees 2% in 1 to 2: the fits get worse smoothly, and a tenth is where the rise is still the
data's, a few times the evaluation noise for a realistic gain (0.03 in pass rate for a gain of 0.3). The
bootstrap's lower end is held to the same share, so a noisy window must show it whatever the noise."""


def window_rise(x_lo: float, x_hi: float, b, c_mid):
    """Share of the gain A - R0 the curve climbs between compute x_lo and x_hi (the window's first and last points):
    f(x_hi) - f(x_lo) with f the gain fraction; b, c_mid: scalars or [k] arrays (bootstrap draws)."""
    b, c_mid = np.asarray(b, dtype=float), np.asarray(c_mid, dtype=float)
    return expit(b * (np.log(x_hi) - np.log(c_mid))) - expit(b * (np.log(x_lo) - np.log(c_mid)))


def _collapsed(draws: np.ndarray | None) -> bool:
    """True when the bootstrap refits of B or C_mid never left the point fit (no gradient there: unconstrained)."""
    if draws is None:
        return False
    for col in (2, 3):
        d = draws[:, col][np.isfinite(draws[:, col])]
        if d.size >= 10 and np.ptp(d) <= 1e-6 * max(abs(float(np.median(d))), 1e-12):
            return True
    return False


def not_identified(
    pf: PointFit,
    draws: np.ndarray | None,
    x: np.ndarray,
    window: tuple[float, float],
    A_ci: tuple[float, float] | None,
    opts: FitOptions,
) -> tuple[list[str], bool, float, tuple[float, float] | None]:
    """Why A is not measured (empty when it is), whether B and C_mid are unconstrained by the data, and the gain
    fraction the window reached with its interval."""
    f = gain_fraction(window[1], pf.b, pf.c_mid) if np.isfinite(pf.b) else float("nan")
    f_ci = None
    if draws is not None:
        f_ci = percentile_ci(expit(draws[:, 2] * (np.log(window[1]) - np.log(draws[:, 3]))), opts.ci)
    x_lo = float(x.min())
    rise = float(window_rise(x_lo, window[1], pf.b, pf.c_mid)) if np.isfinite(pf.b) else float("nan")
    rise_ci = None
    if draws is not None:
        rise_ci = percentile_ci(window_rise(x_lo, window[1], draws[:, 2], draws[:, 3]), opts.ci)
    reasons = []
    if "A=R0" in pf.at_bound:
        reasons.append("the pass rate does not rise above R0 (a flat or falling curve): there is no gain to fit")
    if not np.isfinite(pf.b) or pf.b <= 0 or "B" in pf.at_bound:
        reasons.append("B is not positive or sits on its bound (a flat curve, or a step)")
    if not f >= 0.5:
        reasons.append(f"the window reached {f:.0%} of the gain (< 50%: it has not passed C_mid)")
    elif f_ci is not None and f_ci[0] < 0.5:
        reasons.append(f"the gain reached could be as low as {f_ci[0]:.0%} (< 50%: C_mid may lie beyond the window)")
    no_rise = not rise >= MIN_RISE or (rise_ci is not None and rise_ci[0] < MIN_RISE)
    # moving the window's start helps only a window that starts late
    earlier = Phrase("; start it earlier ({fit_from})", "fit_from") if opts.fit_from else ""
    if not rise >= MIN_RISE:
        reasons.append(
            phrased(
                f"the window holds no points on the rise: the fitted curve climbs {rise:.0%} of the gain "
                f"inside it (< {MIN_RISE:.0%}: a plateau's level, not B and C_mid)",
                earlier,
            )
        )
    elif rise_ci is not None and rise_ci[0] < MIN_RISE:
        reasons.append(
            phrased(
                f"the rise inside the window could be as small as {rise_ci[0]:.0%} of the gain "
                f"(< {MIN_RISE:.0%}: B and C_mid may not be measured)",
                earlier,
            )
        )
    collapsed = _collapsed(draws)
    if collapsed and not no_rise:
        reasons.append("the bootstrap refits of B and C_mid never leave the fit: the data do not constrain them")
    # B and C_mid unconstrained: their intervals open to the search box rather than collapse onto a guess
    unconstrained = no_rise or collapsed or "B" in pf.at_bound or "C_mid" in pf.at_bound
    if any(b.startswith("A") for b in pf.at_bound):
        reasons.append("A is on its bound")
    if A_ci is not None and (A_ci[1] >= 1.0 - CI_CLOSED_TOL or A_ci[0] <= pf.r0 + CI_CLOSED_TOL):
        reasons.append("A's interval reaches its bound")
    return reasons, unconstrained, f, f_ci


def fit_status(pf: PointFit, identifiable: bool) -> str:
    """A fit's status: failed, not_identified, at_bound or converged."""
    if not pf.success:
        return "failed"
    if not identifiable:
        return "not_identified"
    return "at_bound" if pf.at_bound else "converged"
