"""What `rank` returns: each arm's fit with its verdict (`ArmResult`) and the whole ranking (`Ranking`), and the
verdicts' vocabulary. `to_json()` gives the keys documented in docs/json.md; docs/verdicts.md says what each
verdict means."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, field, replace
from enum import StrEnum
from typing import Any

from ablate.fit.curve import NotFitted
from ablate.fit.notes import Note
from ablate.fit.result import FitOptions, FitResult, finite_or_none
from ablate.fit.spread import MinEffect, NoiseFloor


class Verdict(StrEnum):
    """An arm's verdict against the baseline (docs/verdicts.md). A str: it compares, prints and serialises as its
    value (`"ceiling_up"`), which docs/json.md documents."""

    BASELINE = "baseline"
    CEILING_UP = "ceiling_up"
    CEILING_DOWN = "ceiling_down"
    EFFICIENCY_UP = "efficiency_up"
    EFFICIENCY_DOWN = "efficiency_down"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"
    NOT_IDENTIFIED = "not_identified"


VERDICTS = tuple(Verdict)
CHANGED = (Verdict.CEILING_UP, Verdict.CEILING_DOWN, Verdict.EFFICIENCY_UP, Verdict.EFFICIENCY_DOWN)
VERDICT_TEXT = {
    "baseline": "baseline",
    "ceiling_up": "ceiling ↑",
    "ceiling_down": "ceiling ↓",
    "efficiency_up": "efficiency ↑",
    "efficiency_down": "efficiency ↓",
    "equivalent": "equivalent",
    "inconclusive": "inconclusive",
    "not_identified": "not identified",
    None: "—",
}
PRACTICAL = ("material", "negligible", "unclear")


def verdict_words(code: str) -> str:
    """A verdict's code as `rank` prints it: `ceiling_up` is `ceiling ↑`; a not-identified arm's end-of-window call
    (`not_identified_lower`) is `not identified (R lower)`; any other code with spaces for its underscores."""
    if code.startswith("not_identified_"):
        return f"not identified (R {code.removeprefix('not_identified_')})"
    return VERDICT_TEXT.get(code, code.replace("_", " "))


@dataclass(frozen=True)
class EndSpread:
    """The end of the window every arm covers (`at`), and the seed spread of the fitted pass rate there, pooled over
    the arms with two seeds or more: what arms whose A is not identified are compared on (docs/json.md)."""

    at: float
    sd_R: float
    dof: int

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "sd_R": self.sd_R, "dof": self.dof}


@dataclass(frozen=True)
class SharedA:
    """An arm and the baseline refitted with one A (`ArmResult.shared`; docs/json.md, `shared_A`): each arm's B and
    C_mid under it, the compute each needs to `gain_share` of its gain and their ratio; once the efficiency test
    has read the seeds, the ratio it tested and its interval."""

    A_shared: float
    B: float
    C_mid: float
    B_baseline: float
    C_mid_baseline: float
    gain_share: float
    compute_to_share: float
    compute_to_share_baseline: float
    compute_ratio: float
    """The shared fit's own ratio, arm to baseline."""
    compute_ratio_ci: tuple[float, float] | None = None
    compute_ratio_tested: float | None = None
    """The ratio the efficiency test judged (the seeds' mean log compute where the arms have seeds); None when
    not tested."""

    @property
    def tested_ratio(self) -> float:
        """The ratio the efficiency test read, or the shared fit's where none was tested."""
        return self.compute_ratio if self.compute_ratio_tested is None else self.compute_ratio_tested

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "A_shared": self.A_shared,
            "B": self.B,
            "C_mid": self.C_mid,
            "B_baseline": self.B_baseline,
            "C_mid_baseline": self.C_mid_baseline,
            "gain_share": self.gain_share,
            "compute_to_share": self.compute_to_share,
            "compute_to_share_baseline": self.compute_to_share_baseline,
            "compute_ratio": self.compute_ratio,
            "compute_ratio_ci": None if self.compute_ratio_ci is None else list(self.compute_ratio_ci),
        }
        if self.compute_ratio_tested is not None:
            out["compute_ratio_tested"] = self.compute_ratio_tested
        return out


@dataclass(frozen=True)
class SeedsToDecide:
    """What would decide an inconclusive arm (`ArmResult.decide`; docs/json.md, `decide`)."""

    seeds: int | None
    """The fewest seeds per arm (this arm and the baseline) that decide it with `power`; None: more than the
    ladder's top."""
    compute: float
    """The per-run compute they run to: the arm's window end now."""
    power: float
    text: str
    """The same in words."""

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "compute": self.compute, "power": self.power, "text": self.text}


@dataclass
class ArmResult:
    """One arm's fit and its verdict against the baseline. `rank` fills it in stages (the fit, the comparison, the
    tests) and seals it before it returns: from then on it is frozen, and a changed copy is made with `replace`."""

    arm: str
    arm_id: str | None
    fit: FitResult
    seeds: int
    partial: bool
    truncation_warning: bool
    verdict: Verdict | None = None
    margin: float | None = None
    """The paper rule's margin on A (None under the calibrated tests)."""
    delta_A: float | None = None
    delta_A_ci: list[float] | None = None
    """dA's interval at the ranking's --ci level (None without a seed spread)."""
    practical: str | None = None
    """A compared arm's effect against the smallest that matters: material, negligible or unclear (PRACTICAL)."""
    effect: str = ""
    """The short why: the effect that decided and its interval (the table's why cell)."""
    detail: str = ""
    """The long why: every test, its p-value and interval, what would decide (`--explain`)."""
    decide: SeedsToDecide | None = None
    """An inconclusive arm: the seeds per arm that would decide it."""
    shared: SharedA | None = None
    """The shared-A comparison: A_shared, B and C_mid of both arms under it, compute ratio and interval."""
    p_ceiling: float | None = None
    p_efficiency: float | None = None
    p_equivalent: float | None = None
    """The equivalence test (TOST on A and on compute, the larger p)."""
    delta_R_end: float | None = None
    """Not identified: the arm's pass rate minus the baseline's at the end of the window they share."""
    p_at_end: float | None = None
    r_call: str | None = None
    """Not identified: `higher` / `lower` when the test at the shared window's end finds a difference, else None."""
    stopped: list[str] = field(default_factory=list)
    """`pruned` / `unstable` when `ablate sweep --prune` stopped some of its runs: ranked on what they have."""
    log_compute_seeds: list[float] | None = field(default=None, repr=False)
    """Each seed's log compute to three quarters of its gain (sigmoid.GAIN_SHARE) under the shared A."""
    base_log_compute_seeds: list[float] | None = field(default=None, repr=False)
    """The baseline's seeds' log compute to that share under this pair's shared A (each pair has its own)."""
    _sealed: bool = field(default=False, init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_sealed", False):
            raise FrozenInstanceError(f"cannot assign to field {name!r}: a ranked arm is frozen (use replace)")
        super().__setattr__(name, value)

    def seal(self) -> ArmResult:
        """Freeze this arm (rank's last stage); returns it."""
        object.__setattr__(self, "_sealed", True)
        return self

    def refitted(self, fit: FitResult) -> ArmResult:
        """A sealed copy with another fit of the same arm (the window-sensitivity refits)."""
        return replace(self, fit=fit).seal()

    @property
    def seed_A(self) -> list[float]:
        """A of each seed fitted alone (NaN where not identified); the pooled A for a single run."""
        if self.fit.seeds is not None:
            return [float(v) for v in self.fit.seeds.A]
        return [self.fit.A if self.fit.identifiable else float("nan")]

    def comparison(self) -> tuple[float, SharedA]:
        """dA and the shared-A comparison of an arm compared with its baseline (both set before any verdict)."""
        if self.delta_A is None or self.shared is None:
            raise ValueError(f"arm {self.arm!r} has not been compared with the baseline")
        return self.delta_A, self.shared

    def to_json(self) -> dict[str, Any]:
        r = finite_or_none

        return {
            "arm": self.arm,
            "arm_id": self.arm_id,
            "seeds": self.seeds,
            **self.fit.to_json(),
            "verdict": self.verdict,
            "practical": self.practical,
            "margin": self.margin,
            "delta_A": r(self.delta_A),
            "delta_A_ci": self.delta_A_ci,
            "effect": self.effect,
            "detail": self.detail,
            "decide": None if self.decide is None else self.decide.to_json(),
            "p_equivalent": r(self.p_equivalent),
            "partial": self.partial,
            "truncation_warning": self.truncation_warning,
            "shared_A": None if self.shared is None else self.shared.to_json(),
            "p_ceiling": r(self.p_ceiling),
            "p_efficiency": r(self.p_efficiency),
            "delta_R_end": r(self.delta_R_end),
            "p_at_end": r(self.p_at_end),
            "r_call": self.r_call,
            "stopped": self.stopped,
        }


@dataclass(frozen=True)
class Ranking:
    arms: list[ArmResult]
    baseline: str | None
    margin_source: str
    target: float
    x: str
    opts: FitOptions
    not_fitted: list[NotFitted] = field(default_factory=list)
    floor: NoiseFloor | None = None
    rule: str = "test"
    """test (calibrated t-tests with FDR control) | paper (the paper's threshold convention)."""
    end_spread: EndSpread | None = None
    """{"at", "sd_R", "dof"}: the seed spread of the pass rate at the end of the window all arms share, which the
    not-identified arms are compared on; None when no arm has two seeds."""
    shared_mode: str = ""
    """How the efficiency comparison's shared A was set (per pair, or one A for every arm), in words."""
    shared_a: str | float | None = None
    """--shared-a: None (per pair), "all", or the value given."""
    min_effect: MinEffect = field(default_factory=MinEffect)
    notes: list[Note] = field(default_factory=list)
    """What applies to every arm (needs seeds, ...), said once under the table instead of in every row."""
    target_source: str = ""
    """How the target compute was chosen, in words (set by the command: `--to X`, or the default it picked)."""
    axis_note: str | None = None
    """A warning about the compute axis (wall-clock varying between seeds), set by the command."""

    def to_json(self) -> dict[str, Any]:
        margins = {a.margin for a in self.arms if a.margin is not None}
        return {
            "baseline": self.baseline,
            "margin": margins.pop() if len(margins) == 1 else None,
            "margin_source": self.margin_source,
            "rule": self.rule,
            "fdr": self.opts.level if self.rule == "test" else None,
            "noise_floor": None if self.floor is None else self.floor.to_json(),
            "end_spread": None if self.end_spread is None else self.end_spread.to_json(),
            "shared_a": self.shared_a,
            "shared_mode": self.shared_mode,
            "min_effect": self.min_effect.to_json(),
            "notes": [n.text for n in self.notes],
            "target": self.target,
            "target_source": self.target_source,
            "axis_note": self.axis_note,
            "x": self.x,
            "window": self.opts.window_text(),
            "arms": [a.to_json() for a in self.arms],
            "not_fitted": [n.to_json() for n in self.not_fitted],
        }
