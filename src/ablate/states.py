"""The one vocabulary of run states, shared by the run directory (run.json), the ledger, `ablate status`, the
launchers, the prune monitor and the fits. A `StrEnum`: a member is the very string written to disk and compared in
JSON, so files written before it existed read the same. What each state means: docs/run-directory.md, "Run states".
"""

from __future__ import annotations

from enum import StrEnum


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
