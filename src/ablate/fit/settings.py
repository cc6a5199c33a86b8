"""One analysis behind every verb: the settings a ranking is made with (compute axis, fit window, target,
resamples, seed, smallest effect that matters). `rank` builds one from its flags, `report` and `plan` from the same
defaults, the `--prune` monitor records the one it settles arms with, and a later `rank` or `report` of that sweep
compares its own with the recorded one (ablate.analysis.verbs.decided_elsewhere): the same
settings give the same verdicts, and different ones are said, with the flags that reproduce the recorded ranking."""

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

    def flags(self) -> list[str]:
        """rank's flags that reproduce this analysis (the defaults left out, the axis and target always given)."""
        out = ["--x", self.x]
        for name, flag in (("to", "--to"), ("fit_from", "--fit-from"), ("fit_until", "--fit-until")):
            v = getattr(self, name)
            if v is not None:
                out += [flag, _number(v)]
        if self.n_boot != DEFAULT_N_BOOT:
            out += ["--n-boot", str(self.n_boot)]
        if self.seed != 0:
            out += ["--seed", str(self.seed)]
        paper = MinEffect()
        if self.min_effect.a != paper.a:
            out += ["--min-effect", _number(self.min_effect.a)]
        if self.min_effect.ratio != paper.ratio:
            out += ["--min-effect-compute", _number(self.min_effect.ratio)]
        return out

    def differences(self, other: Analysis) -> list[str]:
        """What `other` (a recorded analysis) sets differently from this one, each as `--flag value (here: value)`;
        a recorded `to` of None (each look's default target) is not a difference."""
        out = []
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "to" and theirs is None:
                continue
            if f.name == "min_effect":
                for attr, flag in (("a", "--min-effect"), ("ratio", "--min-effect-compute")):
                    a, b = getattr(mine, attr), getattr(theirs, attr)
                    if not math.isclose(a, b, rel_tol=1e-9):
                        out.append(f"{flag} {_number(b)} (here: {_number(a)})")
                continue
            if not _same(mine, theirs):
                flag = "--" + f.name.replace("_", "-")
                out.append(f"{flag} {_text(theirs)} (here: {_text(mine)})")
        return out


@dataclass(frozen=True)
class Elsewhere:
    """A sweep whose stopped arms its `--prune` monitor settled with another analysis than a ranking's."""

    sweep: Path
    by: str
    """Who decided: `--prune monitor`."""
    recorded: Analysis
    differences: list[str]
    """Each recorded setting that differs, as `--flag value (here: value)` (Analysis.differences)."""


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
