"""One training curve as data: the (compute, pass rate) points of one run, its name, its arm and facts for reports.

Pure data: reading curves from files and run directories is `ablate.curves.inputs`; fitting them is the rest of `fit/`.
The curve's R0 is the measured pass rate at compute 0 (the evaluation before the first step), which the fit holds
fixed; points at compute 0 are not fitted (the model is in ln C).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RunFacts:
    """What a sweep's run directory says of a run beside its points (None for a curve read from a file or a log).
    docs/json.md, `not_fitted`, names the first five."""

    run_id: str | None
    arm_id: str | None
    """The hash of the run's config.yaml (what seeds of one arm share), or what run.json says."""
    status: str | None
    """The run's state in its run.json."""
    baseline: bool
    partial: bool
    """The run may still add points (it is running, or was stopped and can resume)."""
    truncation_warning: bool = False
    end: dict[str, float] = field(default_factory=dict)
    """Each compute axis the run had spent at its last point."""


@dataclass
class Curve:
    run: str
    group: str | None
    """The arm this run is a seed of, or None when each run is its own arm."""
    x: np.ndarray
    """Compute of each point ([n], strictly increasing)."""
    y: np.ndarray
    """Pass rate of each point ([n], in [0, 1])."""
    facts: RunFacts | None = None
    """What the run's directory says of it (ids, state, baseline flag), for a run of a sweep."""
    n: np.ndarray | None = None
    """Graded samples behind each pass rate ([n]; `val_n` in a run's metrics), or None when unknown: the
    evaluation noise of a point is then estimated from the curve's residuals."""
    stopped: str | None = None
    """The state a monitor stopped the run in (`pruned`, `unstable`), or None when it ran its course: `rank` compares
    a stopped arm with the baseline on the stopped arm's window."""

    @property
    def arm_id(self) -> str | None:
        return None if self.facts is None else self.facts.arm_id

    @property
    def run_id(self) -> str | None:
        return None if self.facts is None else self.facts.run_id

    @property
    def r0(self) -> float | None:
        """Measured pass rate at compute 0, or None when the curve has no such point."""
        at0 = self.y[self.x == 0]
        return float(at0.mean()) if at0.size else None


@dataclass(frozen=True)
class NotFitted:
    """A run, or an arm, that could not be fitted, and why in one line. `facts`: the run's own, for a run of a sweep
    (None for an arm, or a run read from a file). `missing`: the metric a run does not log, as (name, the option
    that chooses it, the metrics it does log), so a reader can say once that the name is wrong, not the runs."""

    label: str
    arm: str
    reason: str
    facts: RunFacts | None = None
    missing: tuple[str, str, tuple[str, ...]] | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        if self.facts is None:
            return {"label": self.label, "arm": self.arm, "reason": self.reason}
        f = self.facts
        return {
            "run_id": f.run_id,
            "arm_id": f.arm_id,
            "label": self.label,
            "arm": self.arm,
            "status": f.status,
            "baseline": f.baseline,
            "partial": f.partial,
            "reason": self.reason,
        }
