"""The yardsticks `rank` judges differences by: the seed-to-seed spread (`NoiseFloor`), the smallest effect that
matters (`MinEffect`) and the paper's margins. storage/measurements.py reads a stored spread back;
docs/verdicts.md says how they are used."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ablate.errors import SettingError

PAPER_A_MARGIN = 0.02  # ScaleRL §2: +-0.02 on A between single-seed runs is within noise (their seeds' spread)
PAPER_COMPUTE_MARGIN = float(np.log(1.15))  # the efficiency counterpart: +-15% compute
FDR = 0.05


@dataclass(frozen=True)
class MinEffect:
    """The smallest effect that matters (settings `min_effect`, `min_effect_compute`): a difference of `a` on A, and a
    compute ratio of `ratio` (1.15: +-15% compute) either way. Defaults: the paper's (ScaleRL treats +-0.02 on A
    between seeds as noise)."""

    a: float = PAPER_A_MARGIN
    ratio: float = 1.15

    def __post_init__(self) -> None:
        if not (isinstance(self.a, (int, float)) and math.isfinite(self.a) and 0.0 < self.a < 1.0):
            raise SettingError(
                f"{{min_effect}} {self.a}: the smallest change of A that matters, a number in (0, 1) (the paper's: "
                "0.02)",
                "min_effect",
            )
        if not (isinstance(self.ratio, (int, float)) and math.isfinite(self.ratio) and 1.0 < self.ratio <= 100.0):
            raise SettingError(
                f"{{min_effect_compute}} {self.ratio}: the smallest compute ratio that matters, a number "
                "in (1, 100] (the paper's: 1.15, i.e. ±15% compute)",
                "min_effect_compute",
            )

    @property
    def log_ratio(self) -> float:
        return math.log(self.ratio)

    @property
    def text_compute(self) -> str:
        return f"±{(self.ratio - 1) * 100:.3g}%" if self.ratio < 2 else f"{self.ratio:g}x either way in"

    def describe(self) -> str:
        return f"±{self.a:g} on A, {self.text_compute} compute"

    def to_json(self) -> dict[str, float]:
        return {"A": self.a, "compute_ratio": self.ratio}


@dataclass
class NoiseFloor:
    """The seed-to-seed spread comparisons are judged against: sd of one seed's A, and of one seed's log compute
    to three quarters of its gain under a shared A, around its arm's value; `dof` degrees of freedom behind them."""

    sd_A: float
    sd_logc: float
    dof: int
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "sd_A": self.sd_A,
            "sd_logc": self.sd_logc,
            "dof": self.dof,
            "source": self.source,
            "log_compute": LOG_COMPUTE,
        }


LOG_COMPUTE = "to 0.75 of the gain under a shared A"
"""What a noise file's sd_logc is the spread of (`--save-noise` writes it; `--noise` refuses a file without it)."""

# Bounds on what a noise or calibration file may say (storage/measurements.py reads them):
MAX_SD_A = 1.0
"""A is a pass rate in [0, 1]: its spread between seeds cannot exceed 1."""
MAX_SD_LOGC = 10.0
"""A spread of log compute of 10 is e^10 = 22,000x between seeds: no measurement of seeds of one recipe."""
MAX_DOF = 10**9
"""Degrees of freedom behind a spread: beyond a billion the spread is exact in every simulation (and chi-square
draws stay finite)."""
