"""One analysis behind every verb: the settings a ranking is made with (compute axis, fit window, target,
resamples, seed, smallest effect that matters). `rank` builds one from its flags, `report` and `plan` from the same
defaults, the `--prune` monitor records the one it settles arms with, and a later `rank` or `report` of that sweep
compares its own with the recorded one (ablate.analysis.verbs.decided_elsewhere): the same
settings give the same verdicts, and different ones are said, with the settings that reproduce the recorded
ranking."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ablate.fit.result import FitOptions
from ablate.fit.spread import MinEffect

DEFAULT_N_BOOT = FitOptions.n_boot
"""rank's resamples; the monitor, the plan's measured ranking and the page use the same."""
MOST_N_BOOT = 10_000
"""The most resamples a recorded analysis may ask for (the command line's cap: more need memory, not precision)."""


@dataclass(frozen=True)
class Analysis:
    """How a sweep is ranked. `to` None: each ranking's default target (twice the largest compute fitted)."""

    x: str
    """The compute axis (`--x`)."""
    to: float | None = None
    """The compute the verdicts are read at (`--to`)."""
    fit_from: float | None = None
    """Points below this compute are left out of the fits (`--fit-from`)."""
    fit_until: float | None = None
    """Points above this compute are left out of the fits (`--fit-until`)."""
    n_boot: int = DEFAULT_N_BOOT
    """Bootstrap resamples per fit (`--n-boot`)."""
    seed: int = 0
    """The resampling seed (`--seed`)."""
    min_effect: MinEffect = field(default_factory=MinEffect)
    """The smallest effects that matter (`--min-effect`, `--min-effect-compute`)."""

    def options(self, target: float, *, level: float | None = None) -> FitOptions:
        """The fit options of a ranking at `target` (the resolved `to`), at the false-discovery `level` given."""
        opts = FitOptions(
            fit_from=self.fit_from, fit_until=self.fit_until, n_boot=self.n_boot, target=target, seed=self.seed
        )
        return opts if level is None else replace(opts, level=level)

    @classmethod
    def of(cls, x: str, opts: FitOptions, min_effect: MinEffect, *, to: float | None) -> Analysis:
        """The analysis a ranking was made with: its axis, its fit options and smallest effects, at `to`."""
        return cls(x, to, opts.fit_from, opts.fit_until, opts.n_boot, opts.seed, min_effect)

    def to_json(self) -> dict[str, Any]:
        return {
            "x": self.x,
            "to": self.to,
            "fit_from": self.fit_from,
            "fit_until": self.fit_until,
            "n_boot": self.n_boot,
            "seed": self.seed,
            "min_effect": self.min_effect.to_json(),
        }

    @classmethod
    def from_json(cls, d: object) -> Analysis | None:
        """The analysis a sweep recorded, or None when the record is not one a ranking could be made with (a damaged
        or foreign line: a number that is not finite or out of range, an empty fit window, too many resamples)."""
        if not isinstance(d, dict) or not isinstance(d.get("x"), str):
            return None
        nums = {k: d.get(k) for k in ("to", "fit_from", "fit_until")}
        if any(v is not None and not _compute(v) for v in nums.values()) or nums["to"] == 0:
            return None
        lo, hi = nums["fit_from"], nums["fit_until"]
        if lo is not None and hi is not None and lo >= hi:
            return None
        n_boot, seed, me = d.get("n_boot"), d.get("seed"), d.get("min_effect")
        if not (_count(n_boot, 1, MOST_N_BOOT) and _count(seed, 0, 2**32 - 1) and isinstance(me, dict)):
            return None
        try:
            smallest = MinEffect(a=me.get("A"), ratio=me.get("compute_ratio"))  # type: ignore[arg-type]
        except Exception:  # MinEffect refuses out-of-range values with a UserError
            return None
        return cls(d["x"], nums["to"], lo, hi, n_boot, seed, smallest)  # type: ignore[arg-type]

    def settings(self) -> list[tuple[str, str]]:
        """The settings that reproduce this analysis, each as (its keyword, its value as text that reads back
        exactly): the defaults left out, the axis and the target always given. A front end spells the keywords
        (the command line: `--min-effect`)."""
        out = [("x", self.x)]
        out += [
            (name, _number(v)) for name in ("to", "fit_from", "fit_until") if (v := getattr(self, name)) is not None
        ]
        if self.n_boot != DEFAULT_N_BOOT:
            out.append(("n_boot", str(self.n_boot)))
        if self.seed != 0:
            out.append(("seed", str(self.seed)))
        paper = MinEffect()
        if self.min_effect.a != paper.a:
            out.append(("min_effect", _number(self.min_effect.a)))
        if self.min_effect.ratio != paper.ratio:
            out.append(("min_effect_compute", _number(self.min_effect.ratio)))
        return out

    def differences(self, other: Analysis) -> list[Difference]:
        """What `other` (a recorded analysis) sets differently from this one; a recorded `to` of None (each look's
        default target) is not a difference."""
        out = []
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "to" and theirs is None:
                continue
            if f.name == "min_effect":
                for attr, name in (("a", "min_effect"), ("ratio", "min_effect_compute")):
                    a, b = getattr(mine, attr), getattr(theirs, attr)
                    if not math.isclose(a, b, rel_tol=1e-9):
                        out.append(Difference(name, _number(b), _number(a)))
                continue
            if not _same(mine, theirs):
                out.append(Difference(f.name, _text(theirs), _text(mine)))
        return out


@dataclass(frozen=True)
class Difference:
    """One setting a recorded analysis made otherwise than a ranking: its keyword, and both values as text."""

    setting: str
    recorded: str
    here: str


@dataclass(frozen=True)
class Elsewhere:
    """A sweep whose stopped arms its `--prune` monitor settled with another analysis than a ranking's."""

    sweep: Path
    by: str
    """Who decided: `--prune monitor`."""
    recorded: Analysis
    differences: list[Difference]
    """Each recorded setting that differs (Analysis.differences)."""


def _same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6)
    return a == b


def _text(v: object) -> str:
    if v is None:
        return "none"
    return _number(v) if isinstance(v, float) else str(v)


def _number(v: float) -> str:
    """A number as a flag's value that reads back exactly: short when `g` keeps it (32000), else every digit."""
    short = f"{v:g}"
    return short if float(short) == v else repr(float(v))


def _compute(v: object) -> bool:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v) and v >= 0
    except OverflowError:  # an integer too large for a float (JSON allows any)
        return False


def _count(v: object, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
