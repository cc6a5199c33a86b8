"""The fit's records: the options of a fit (`FitOptions`), its result (`FitResult`) and an arm's seeds fitted alone
(`SeedFits`). `FitResult.to_json()` gives the keys documented in docs/json.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ablate.errors import ErrorKind, SettingError, UserError
from ablate.fit.curve import Curve
from ablate.fit.noise import NoiseEstimate
from ablate.fit.notes import Note
from ablate.fit.sigmoid import PointFit, sigmoid
from ablate.fit.spread import FDR

METHODS = ("default", "paper")


def finite_or_none(v: float | None) -> float | None:
    """A number as JSON holds it: a float, or null for a missing or non-finite one."""
    return None if v is None or not np.isfinite(v) else float(v)


@dataclass
class FitOptions:
    method: str = "default"
    """`default` (grid + least_squares + bootstrap) or `paper` (the ScaleRL appendix procedure)."""
    fit_from: float | None = None
    """Exclude points with compute below this (ScaleRL drops ~1.5k of 16k GPU-hours)."""
    fit_until: float | None = None
    """Fit only points with compute up to this (for extrapolation checks)."""
    fit_r0: bool = False
    """Free R0 instead of holding it at the measured pass rate at compute 0."""
    r0: float | None = None
    """R0 to use when the data has no point at compute 0 (else R0 is fitted)."""
    loss: str = "linear"
    """least_squares loss: `linear` or `huber` (robust to a few outlying evaluations)."""
    n_boot: int = 1000
    ci: float = 0.95
    target: float = 16000.0
    """Compute at which to predict the pass rate (`--to`)."""
    target_r: float | None = None
    """Report the compute needed to reach this pass rate (`--target-r`)."""
    seed: int = 0
    level: float = FDR
    """The false-discovery rate the ranking's tests are held to: 5%, or what a look of `sweep --decide` spends."""

    def validate(self) -> None:
        """Reject impossible options with one SettingError naming the setting and the fix (by its API keyword:
        `target` is `to`)."""
        if self.method not in METHODS:
            raise SettingError(f"{{method}} {self.method}: unknown; valid: {', '.join(METHODS)}", "method")
        if self.loss not in ("linear", "huber"):
            raise SettingError(f"{{loss}} {self.loss}: unknown; valid: linear, huber", "loss")
        if self.n_boot < 0:
            raise SettingError(f"{{n_boot}} {self.n_boot}: must be >= 0", "n_boot")
        if not 0.0 < self.ci < 1.0:
            raise SettingError(f"{{ci}} {self.ci}: must be between 0 and 1 (e.g. 0.95)", "ci")
        if not 0.0 < self.level < 1.0:
            raise UserError(
                f"level {self.level}: the false-discovery rate must be between 0 and 1 (e.g. 0.05)",
                kind=ErrorKind.SETTING,
            )
        if not (math.isfinite(self.target) and self.target > 0):  # NaN would predict R0 for every arm
            raise SettingError(f"{{to}} {self.target:g}: target compute must be a finite number > 0", "to")
        for name, v in (("fit_from", self.fit_from), ("fit_until", self.fit_until)):
            if v is not None and not math.isfinite(v):
                raise SettingError(f"{{{name}}} {v:g}: must be a finite compute (leave it out for no limit)", name)
        if self.seed < 0:
            raise SettingError(f"{{seed}} {self.seed}: must be >= 0", "seed")
        if self.fit_from is not None and self.fit_until is not None and self.fit_from >= self.fit_until:
            raise SettingError(
                f"{{fit_from}} {self.fit_from:g} is not below {{fit_until}} {self.fit_until:g}: the window is empty",
                "fit_from",
                "fit_until",
            )
        if self.target_r is not None and not 0.0 < self.target_r < 1.0:
            raise SettingError(f"{{target_r}} {self.target_r}: a pass rate strictly between 0 and 1", "target_r")
        if self.r0 is not None and not 0.0 <= self.r0 <= 1.0:
            raise SettingError(f"{{r0}} {self.r0}: a pass rate in [0, 1]", "r0")
        if self.r0 is not None and self.fit_r0:
            raise SettingError(
                f"{{r0}} {self.r0:g} and {{fit_r0}} conflict: {{r0}} holds R0 fixed, {{fit_r0}} frees it; give one",
                "r0",
                "fit_r0",
            )

    def window_text(self) -> str:
        lo = "0" if self.fit_from is None else f"{self.fit_from:g}"
        hi = "end" if self.fit_until is None else f"{self.fit_until:g}"
        return f"[{lo}, {hi}]"


@dataclass(frozen=True)
class FitResult:
    run: str
    group: str | None
    method: str
    n_points: int
    n_runs: int
    window: tuple[float, float]
    fit: PointFit
    draws: np.ndarray | None
    """Bootstrap parameter draws [n_boot, 4] = (R0, A, B, C_mid), or None (paper method)."""
    interval_method: str
    A_ci: tuple[float, float] | None
    B_ci: tuple[float, float] | None
    C_mid_ci: tuple[float, float] | None
    gain_fraction: float
    identifiable: bool
    status: str
    target: float
    pred_at_target: float
    pred_ci: tuple[float, float] | None
    target_r: float | None = None
    compute_to_target: float | None = None
    compute_to_target_ci: tuple[float, float] | None = None
    notes: list[Note] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list, repr=False)
    f_ci: tuple[float, float] | None = None
    """Interval of the gain fraction the window reached (identifiability reads its lower end)."""
    why_not_identified: list[str] = field(default_factory=list)
    """The rules of identification (docs/verdicts.md) this fit fails, in words; empty when A is identified."""
    noise: list[NoiseEstimate] | None = field(default=None, repr=False)
    """Each run's measured noise (None for the paper's method or --n-boot 0)."""
    seeds: SeedFits | None = field(default=None, repr=False)
    """An arm's seeds fitted alone (None for a single run)."""
    sensitivity: list[dict[str, Any]] | None = None
    """Refits at earlier fit-until cutoffs (`window_sensitivity`), or None when not asked for."""
    unstable: bool | None = None
    """True when, at an earlier cutoff where A is identified, its interval of A does not overlap this fit's (None
    when not checked)."""

    @property
    def R0(self) -> float:
        return self.fit.r0

    @property
    def A(self) -> float:
        return self.fit.a

    @property
    def B(self) -> float:
        return self.fit.b

    @property
    def C_mid(self) -> float:
        return self.fit.c_mid

    def predict(self, c) -> np.ndarray:
        return self.fit.predict(c)

    def predict_band(self, c, level: float = 0.95) -> tuple[np.ndarray, np.ndarray] | None:
        """Pointwise percentile band of the fitted curve at compute values c ([m]) from the bootstrap draws."""
        if self.draws is None:
            return None
        c = np.asarray(c, dtype=float)
        d = self.draws
        preds = sigmoid(c[None, :], d[:, 0:1], d[:, 1:2], d[:, 2:3], d[:, 3:4])
        q = (1.0 - level) / 2.0 * 100.0
        lo, hi = np.nanpercentile(preds, [q, 100.0 - q], axis=0)
        return lo, hi

    def to_json(self) -> dict[str, Any]:
        r = finite_or_none

        def ci(v):
            return None if v is None else [r(v[0]), r(v[1])]

        return {
            "run": self.run,
            "group": self.group,
            "method": self.method,
            "n_points": self.n_points,
            "n_runs": self.n_runs,
            "window": [r(self.window[0]), r(self.window[1])],
            "R0": r(self.R0),
            "A": r(self.A),
            "B": r(self.B),
            "C_mid": r(self.C_mid),
            "A_ci": ci(self.A_ci),
            "B_ci": ci(self.B_ci),
            "C_mid_ci": ci(self.C_mid_ci),
            "gain_fraction": r(self.gain_fraction),
            "identifiable": self.identifiable,
            "status": self.status,
            "sse": r(self.fit.sse),
            "target": r(self.target),
            "pred_at_target": r(self.pred_at_target),
            "pred_ci": ci(self.pred_ci),
            "target_r": r(self.target_r),
            "compute_to_target": r(self.compute_to_target),
            "compute_to_target_ci": ci(self.compute_to_target_ci),
            "interval_method": self.interval_method,
            "fit_r0": self.fit.fit_r0,
            "at_bound": self.fit.at_bound,
            "notes": [n.text for n in self.notes],
            "gain_fraction_ci": ci(self.f_ci),
            "noise": None
            if not self.noise
            else [
                {
                    "rho": r(e.rho),
                    "drift_sd": r(np.sqrt(e.drift_var)),
                    "eval_sd": r(np.sqrt(e.eval_var.mean())) if e.eval_known else None,
                }
                for e in self.noise
            ],
            "seeds_identified": None if self.seeds is None else self.seeds.n_identified,
            "window_sensitivity": self.sensitivity,
            "unstable": self.unstable,
        }


@dataclass
class SeedFits:
    """Each seed of an arm fitted alone (no intervals): the spread the arm's intervals and `rank`'s tests use."""

    A: np.ndarray
    """[k] each seed's A (NaN where its fit is not identified)."""
    C_mid: np.ndarray
    B: np.ndarray
    pred: np.ndarray
    """[k] each seed's predicted pass rate at --to."""
    identified: np.ndarray
    fits: list = field(default_factory=list, repr=False)
    """Each seed's point fit (identified or not; None where it could not be fitted): its curve can be read
    inside the window whatever its A."""

    def at(self, c: float) -> np.ndarray:
        """[k] each seed's fitted pass rate at compute c (NaN where a seed could not be fitted)."""
        return np.array([float(f.predict(np.array([c]))[0]) if f is not None else np.nan for f in self.fits])

    @property
    def n_identified(self) -> int:
        return int(self.identified.sum())
