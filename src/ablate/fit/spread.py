"""The yardsticks `rank` judges differences by: the seed-to-seed spread (`NoiseFloor`), the smallest effect that
matters (`MinEffect`), the paper's margins, and the checked reading of the small JSON files that store them
(`--noise`, `--calibration`). docs/verdicts.md says how they are used."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ablate.errors import UserError

PAPER_A_MARGIN = 0.02  # ScaleRL §2: +-0.02 on A between single-seed runs is within noise (their seeds' spread)
PAPER_COMPUTE_MARGIN = float(np.log(1.15))  # the efficiency counterpart: +-15% compute
FDR = 0.05


@dataclass(frozen=True)
class MinEffect:
    """The smallest effect that matters (`--min-effect`, `--min-effect-compute`): a difference of `a` on A, and a
    compute ratio of `ratio` (1.15: +-15% compute) either way. Defaults: the paper's (ScaleRL treats +-0.02 on A
    between seeds as noise)."""

    a: float = PAPER_A_MARGIN
    ratio: float = 1.15

    def __post_init__(self) -> None:
        if not (isinstance(self.a, (int, float)) and math.isfinite(self.a) and 0.0 < self.a < 1.0):
            raise UserError(
                f"--min-effect {self.a}: the smallest change of A that matters, a number in (0, 1) (the paper's: 0.02)"
            )
        if not (isinstance(self.ratio, (int, float)) and math.isfinite(self.ratio) and 1.0 < self.ratio <= 100.0):
            raise UserError(
                f"--min-effect-compute {self.ratio}: the smallest compute ratio that matters, a number "
                "in (1, 100] (the paper's: 1.15, i.e. ±15% compute)"
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

    @classmethod
    def load(cls, path: Path | str) -> NoiseFloor:
        """A stored measurement (`--save-noise`); a UserError naming what is wrong with the file. Each number is
        range-checked: a spread is finite and > 0 (a zero spread would make every difference significant), at most
        MAX_SD_A / MAX_SD_LOGC (beyond them it describes no seeds), and dof an integer in [1, MAX_DOF]."""
        where = f"--noise {path}"
        d = read_json_object(
            path, "--noise", "write one with `ablate rank SWEEP --save-noise FILE` on a sweep with seeds"
        )
        fix = "it needs sd_A, sd_logc and dof, as --save-noise writes"
        source = d.get("source", "?")
        if not isinstance(source, str):
            raise UserError(f"{where}: not a noise file (source is {shown(source)}, not text); {fix}")
        floor = cls(
            sd_A=number(d, "sd_A", where, 0.0, MAX_SD_A, fix=fix, above=True),
            sd_logc=number(d, "sd_logc", where, 0.0, MAX_SD_LOGC, fix=fix, above=True),
            dof=number(d, "dof", where, 1, MAX_DOF, fix=fix, integer=True),
            source=f"stored measurement {path} ({source})",
        )
        if d.get("log_compute") != LOG_COMPUTE:
            raise UserError(
                f"{where}: its sd_logc is not the spread of log compute to three quarters of the gain that "
                "efficiency is tested on now (written by an older ablate); write it again with `ablate rank SWEEP "
                "--save-noise FILE`"
            )
        return floor


LOG_COMPUTE = "to 0.75 of the gain under a shared A"
"""What a noise file's sd_logc is the spread of (`--save-noise` writes it; `--noise` refuses a file without it)."""

# Bounds on what a noise or calibration file may say (fit/planning.py's calibration uses them too).
MAX_FILE_BYTES = 1 << 20
"""A noise file is ~200 bytes and a calibration ~1 KB: a file past 1 MiB is not one, and is not read into memory."""
MAX_SD_A = 1.0
"""A is a pass rate in [0, 1]: its spread between seeds cannot exceed 1."""
MAX_SD_LOGC = 10.0
"""A spread of log compute of 10 is e^10 = 22,000x between seeds: no measurement of seeds of one recipe."""
MAX_DOF = 10**9
"""Degrees of freedom behind a spread: beyond a billion the spread is exact in every simulation (and chi-square
draws stay finite)."""


def shown(v: Any) -> str:
    """A value from a file, for an error line: its JSON, cut to 40 characters."""
    try:
        text = json.dumps(v, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def read_json_object(path: Path | str, flag: str, fix: str) -> dict[str, Any]:
    """The JSON object of a small file ablate wrote (`--save-noise`, `--save-calibration`): anything else (no file,
    a folder, a huge file, not UTF-8, not JSON, nested too deeply, not an object) is one UserError line naming
    `flag path`, ending with `fix`."""
    p = Path(path)
    where = f"{flag} {p}"
    try:
        if p.is_dir():
            raise UserError(f"{where}: is a directory, not a file; {fix}")
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UserError(
                f"{where}: {size:,} bytes, more than a {flag[2:]} file ever holds ({MAX_FILE_BYTES:,}); {fix}"
            )
        with open(p, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        d = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{where}: no such file; {fix}") from None
    except UnicodeDecodeError:
        raise UserError(f"{where}: not UTF-8 text, so not a {flag[2:]} file; {fix}") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply, so not a {flag[2:]} file; {fix}") from None
    except ValueError as e:
        raise UserError(f"{where}: not valid JSON ({str(e).split(':')[0]}); {fix}") from None
    except OSError as e:
        raise UserError(f"{where}: can't read the file ({e.strerror or e}); {fix}") from None
    if not isinstance(d, dict):
        raise UserError(f"{where}: not a {flag[2:]} file (a JSON {type(d).__name__}, not an object); {fix}")
    return d


def number(
    d: dict[str, Any],
    key: str,
    where: str,
    lo: float,
    hi: float,
    *,
    fix: str,
    integer: bool = False,
    above: bool = False,
    optional: bool = False,
) -> Any:
    """`d[key]` checked: a JSON number (true/false and "0.1" are not), an integer when `integer`, finite, in
    [lo, hi] (`above`: > lo). None when `optional` and missing or null. Else one UserError line naming the field."""
    if d.get(key) is None:
        if optional:
            return None
        raise UserError(f"{where}: no {key}; {fix}")
    v = d[key]
    kind = "an integer" if integer else "a number"
    if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)):
        raise UserError(f"{where}: {key} is {shown(v)}, not {kind}; {fix}")
    try:
        fv = float(v)
    except OverflowError:
        fv = math.inf
    low = f"({lo:g}" if above else f"[{lo:g}"
    if not (math.isfinite(fv) and (fv > lo if above else fv >= lo) and fv <= hi):
        raise UserError(f"{where}: {key} is {shown(v)}, out of range: {kind} in {low}, {hi:g}]; {fix}")
    return int(v) if integer else fv
