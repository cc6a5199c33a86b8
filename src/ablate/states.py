"""The one vocabulary of run states, shared by the run directory (run.json), the ledger, `ablate status`, the
launchers, the prune monitor and the fits; and `RunSummary`, how a run ended. A `StrEnum`: a member is the very
string written to disk and compared in JSON, so files written before it existed read the same. What each state
means: docs/run-directory.md, "Run states".
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any


class RunState(StrEnum):
    """Where a run is. run.json holds the states a run records itself (RUN_JSON); the ledger adds the launcher's
    (new: never handed to an executor, or its submitter died; submitting, queued, requeued) and `ablate status` the
    one it infers (lost)."""

    NEW = "new"
    PENDING = "pending"
    SUBMITTING = "submitting"
    QUEUED = "queued"
    RUNNING = "running"
    REQUEUED = "requeued"
    DONE = "done"
    FAILED = "failed"
    PREEMPTED = "preempted"
    DIVERGED = "diverged"
    PRUNED = "pruned"
    UNSTABLE = "unstable"
    LOST = "lost"


RUN_JSON = frozenset(
    {
        RunState.PENDING,
        RunState.RUNNING,
        RunState.DONE,
        RunState.FAILED,
        RunState.PREEMPTED,
        RunState.DIVERGED,
        RunState.PRUNED,
        RunState.UNSTABLE,
    }
)
"""The states run.json may hold."""

FINISHED = frozenset({RunState.DONE, RunState.DIVERGED})
"""A run's own verdict on its end: only the run itself moves run.json out of it."""

STOPPED = frozenset({RunState.PRUNED, RunState.UNSTABLE})
"""Ended by the prune monitor; resumable with `ablate sweep --resume-pruned`."""

LIVE = frozenset({RunState.SUBMITTING, RunState.QUEUED, RunState.RUNNING, RunState.REQUEUED})
"""Handed to an executor and not ended."""

TERMINAL = frozenset(
    {RunState.DONE, RunState.DIVERGED, RunState.FAILED, RunState.PREEMPTED, RunState.PRUNED, RunState.UNSTABLE}
)
"""States a run does not leave by itself."""


@dataclass(frozen=True)
class RunSummary:
    """How one run ended, as `ablate.train.run` returns it and `ablate train` prints it: `status` (done, preempted
    or diverged), the step it reached, its R0 and last pass rate, why it stopped, the compute it spent, its health
    warnings and how stale its rollouts ran (`max_lag`). The numbers are None when a data-parallel run's worker 0
    could not give them. As JSON (`to_json`), it is what a job function returns to the launcher."""

    status: RunState
    step: int | None = None
    r0: float | None = None
    val_pass_rate: float | None = None
    reason: str | None = None
    gpu_hours: float | None = None
    samples: float | None = None
    warnings: tuple[str, ...] = ()
    max_lag: int | None = None
    val_step: int | None = None
    """The step of the evaluation `val_pass_rate` is from (a run stopped between evaluations ends past it)."""
    resumed_from: int | None = None
    """The checkpoint's step this attempt resumed from (None: it started the run)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "status": str(self.status),
            "step": self.step,
            "r0": self.r0,
            "val_pass_rate": self.val_pass_rate,
            "reason": self.reason,
            "gpu_hours": self.gpu_hours,
            "samples": self.samples,
            "warnings": list(self.warnings),
            "max_lag": self.max_lag,
            "val_step": self.val_step,
            "resumed_from": self.resumed_from,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunSummary:
        """Read back what `to_json` wrote (a spawned worker 0 hands its summary over as JSON)."""
        plain = {f.name: d.get(f.name) for f in fields(cls) if f.name not in ("status", "warnings")}
        return cls(status=RunState(d["status"]), warnings=tuple(d.get("warnings") or ()), **plain)
