"""Which worker of a data-parallel run broke first, and what the run records of it: the workers' failure reports
(ablate.storage.failure_reports) and the exits by a signal (which leave none), by time. See docs/distributed.md.
"""

from __future__ import annotations

import logging
import signal
import time

from ablate.errors import ErrorKind, UserError
from ablate.states import RunState, RunSummary
from ablate.storage import failure_reports
from ablate.storage.failure_reports import FailureReport
from ablate.storage.rundir import RunDir
from ablate.topology.workers import Spawned, exit_reason
from ablate.topology.world import World

log = logging.getLogger("ablate.train")


class RankFailed(RuntimeError):
    """A worker of a data-parallel run failed first; the message names it and its error. `cause` is what run.json
    and the ledger record (killed: the worker died of a signal)."""

    def __init__(self, message: str, cause: str = "exception") -> None:
        super().__init__(message)
        self.cause = cause


def peer_failure(rd: RunDir, world: World, wait_s: float = 5.0) -> FailureReport | None:
    """After worker 0 failed in a data-parallel run: the earliest report of another worker, if one failed (its
    report is written before its sockets close, so it is there at once on a local disk; a shared one may lag)."""
    if world.size == 1:
        return None
    t_end = time.monotonic() + wait_s
    while True:
        reports = [r for r in failure_reports.read(rd) if r.rank != world.rank]
        if reports or time.monotonic() > t_end:
            return reports[0] if reports else None
        time.sleep(0.1)


def ended_early(status: RunState, reason: str) -> RunSummary:
    """The summary of a data-parallel run whose worker 0 could not give one."""
    return RunSummary(status, reason=reason)


def peer_diverged(rd: RunDir, report: FailureReport) -> RunSummary:
    """A worker that found a divergence alone (its report says so): the run ended diverged; recorded, summarised."""
    reason = f"rank {report.rank}: {report.message}"
    rd.ended(RunState.DIVERGED, reason=reason, diverged_reason=reason)
    log.error("diverged on %s", reason)
    return ended_early(RunState.DIVERGED, reason)


def peer_error(report: FailureReport, size: int) -> RankFailed:
    """The error a failed worker's report makes of the run."""
    return RankFailed(
        f"rank {report.rank} of {size} failed: {report.error_class}: {report.message}",
        cause="oom" if report.kind == "out_of_memory" else "exception",
    )


def spawned_outcome(rd: RunDir, size: int, sp: Spawned, *, stopped: bool) -> RunSummary:
    """Worker 0 gave no summary: what broke first, from the workers' reports and the exits by a signal, by time.
    Recorded in run.json (worker 0 may have been killed before it could) and raised; a summary when the run
    ended without an error (a divergence, a stop that came before a worker was ready)."""
    reports = {d.rank: d for d in failure_reports.read(rd)}
    events: list[tuple[float, int, FailureReport | int]] = [(d.time, r, d) for r, d in reports.items()]
    events += [(sp.ended_at[r], r, c) for r, c in sp.codes.items() if c is not None and c < 0 and r not in reports]
    if not events:
        r = next((r for r, c in sorted(sp.codes.items()) if c != 0), 0)
        err = RankFailed(f"rank {r} of {size} {exit_reason(sp.codes.get(r))}")
        rd.try_failed(err.cause, err)
        raise err
    _, r, what = min(events, key=lambda e: e[0])
    log_path = rd.logs_dir / ("train.log" if r == 0 else f"rank-{r}.log")
    if isinstance(what, int):  # killed by a signal without a word (SIGKILL, the OOM killer)
        if stopped and -what in (signal.SIGTERM, signal.SIGINT):  # a stop that reached it before it was ready
            reason = f"stopped by a signal before rank {r} had started: resumes from the last checkpoint"
            rd.ended(RunState.PREEMPTED, reason=reason)
            return ended_early(RunState.PREEMPTED, reason)
        err = RankFailed(f"rank {r} of {size} {exit_reason(what)} (its log: {log_path})", cause="killed")
    elif what.status == RunState.DIVERGED:
        return peer_diverged(rd, what)
    elif what.kind == "user_error":
        # bad input: worker 0 recorded it where it had a run to record
        raise UserError(what.message or "", kind=what.error_kind or ErrorKind.RECIPE)
    else:
        err = peer_error(what, size)
    rd.try_failed(err.cause, err)
    raise err
