"""`extrapolate`: fit up to `--fit-until`, predict the pass rate at `--to` with an interval, the compute to
reach `--target-r`, and — where the run has points past the window — the error on them (ScaleRL §2's check:
fit to 8k GPU-hours, compare at 16k). A `--to` the fitted window reaches is an interpolation, never a projection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ablate.errors import ErrorKind, SettingError, UserError
from ablate.fit.analysis import fit_curves, group_arms, rank_key
from ablate.fit.curve import Curve
from ablate.fit.result import FitOptions, FitResult


def is_interpolation(to: float, top: float) -> bool:
    """A target inside the fitted window (up to its largest compute `top`) is read off the fitted curve where it has
    data: no projection."""
    return to <= top


@dataclass(frozen=True)
class Extrapolation:
    subject: str
    fit: FitResult
    heldout: list[dict[str, float]]
    heldout_mae: float | None
    target_source: str = ""
    """How --to was chosen (choices.choose_target): given, the paper's scale, or twice the largest compute fitted."""

    @property
    def interpolated(self) -> bool:
        """The target lies inside the fitted window: the fit is read where it has data, not projected past it."""
        return is_interpolation(self.fit.target, self.fit.window[1])

    @property
    def reach_word(self) -> str:
        """ "interpolated" or "projected": the one word every title and line uses for reaching the target."""
        return "interpolated" if self.interpolated else "projected"

    def to_json(self) -> dict[str, Any]:
        f = self.fit
        return {
            "subject": self.subject,
            "fit_until": f.window[1],
            "to": f.target,
            "target_source": self.target_source,
            "interpolated": self.interpolated,
            "pred": f.pred_at_target,
            "pred_ci": None if f.pred_ci is None else list(f.pred_ci),
            "target_r": f.target_r,
            "compute_to_target": f.compute_to_target,
            "compute_to_target_ci": None if f.compute_to_target_ci is None else list(f.compute_to_target_ci),
            "heldout": self.heldout,
            "heldout_mae": self.heldout_mae,
            "fit": f.to_json(),
        }


def extrapolate(curves: list[Curve], opts: FitOptions, *, subject: str, target_source: str = "") -> Extrapolation:
    """Fit the subject's curves (its seeds pooled) on the window and score the points after it. `target_source`
    says how opts.target was chosen (kept for the header and the JSON)."""
    fit = fit_curves(curves, opts, name=subject, group=subject)
    heldout = []
    if opts.fit_until is not None:
        for c in curves:
            later = c.x > opts.fit_until
            for xi, yi, pi in zip(c.x[later], c.y[later], fit.predict(c.x[later])):
                heldout.append({"x": float(xi), "y": float(yi), "pred": float(pi)})
    mae = float(np.mean([abs(h["y"] - h["pred"]) for h in heldout])) if heldout else None
    return Extrapolation(subject=subject, fit=fit, heldout=heldout, heldout_mae=mae, target_source=target_source)


def winner(curves: list[Curve], opts: FitOptions) -> str:
    """The arm `rank` puts first: the best predicted pass rate at the target (ties: A, then B), among the arms
    that can be fitted on the window."""
    fits = []
    for label, cs in group_arms(curves).items():
        try:
            fits.append(fit_curves(cs, opts, name=label, group=label))
        except UserError:
            continue  # too few points yet
    if not fits:
        raise SettingError(
            "no arm has enough points in the fit window to pick a winner; pass {arm} or widen the window",
            "arm",
            kind=ErrorKind.DATA,
        )
    best = max(fits, key=rank_key)
    return best.run
