"""Which runs the ledger calls live still are: one batched sacct/squeue call for SLURM runs, /proc for local and
debug runs (a process id plus its start time, so a recycled pid is never taken for the original process).

A run whose job is gone is not always dead: the job writes the run's end to run.json before the ledger's
`finished` event, so a job killed between the two (or whose `finished` line was torn) leaves a finished run.json
and a ledger that says live. Its verdict is then its run.json's (`finished_event`), never `failed`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.launch.slurm import SACCT_CAUSE, SACCT_LIVE, sacct_states
from ablate.states import FINISHED, LIVE, RunState
from ablate.storage import failure_reports
from ablate.storage.ledger import Ledger, RunRecord, proc_alive
from ablate.storage.rundir import RunDir


@dataclass
class Verdict:
    """What a liveness check concluded about one run."""

    state: str
    """new, failed, preempted, or done / diverged: it finished, and the ledger is missing its `finished` event"""
    cause: str | None = None
    error: str | None = None


def finished_event(ledger: Ledger, rec: RunRecord) -> dict[str, Any] | None:
    """The `finished` event to append for a run whose run.json says it finished (done or diverged) while the
    ledger does not (its job died between the two writes, or tore the line), or None. Every path that would record
    such a run's job as dead or preempted appends this instead, so the run is counted done and never resubmitted."""
    if rec.state in FINISHED:
        return None
    status = RunDir.of(ledger.dir.parent, ledger.dir.name, rec.run_id).info().status
    if status not in FINISHED:
        return None
    return {
        "event": "finished",
        "run_id": rec.run_id,
        "batch": rec.batch,
        "job_id": rec.job_id,
        "status": status,
        "recovered": "run.json says the run finished; its job did not record that here",
    }


def check_live(recs: dict[str, RunRecord], *, locked: bool) -> dict[str, Verdict]:
    """For each run in a live state, whether it still is. Returns only the runs whose state changes.

    `locked`: the caller holds the ledger lock, so a `submitting` run can only belong to a launcher that died
    mid-submission (it is new again); without the lock it may be a launcher at work.
    """
    out: dict[str, Verdict] = {}
    slurm = [r for r in recs.values() if r.state in LIVE and r.state != RunState.SUBMITTING and r.executor == "slurm"]
    sacct = sacct_states([r.job_id for r in slurm if r.job_id]) if slurm else {}
    for r in recs.values():
        if r.state not in LIVE:
            continue
        if r.state == RunState.SUBMITTING:
            if locked or not (r.launcher and proc_alive(r.launcher.get("pid"), r.launcher.get("start"))):
                out[r.run_id] = Verdict(RunState.NEW)
            continue
        if r.executor == "slurm":
            s = sacct.get(r.job_id or "")
            if s is None or s[0] in SACCT_LIVE:
                continue
            if s[0] == "PREEMPTED":
                out[r.run_id] = Verdict(RunState.PREEMPTED, "preempted")
            else:
                why = (
                    "left the queue without recording a result (no accounting to say why)"
                    if s[0] == "GONE"
                    else f"ended {s[0]} (exit {s[1]}) without recording a result"
                )
                out[r.run_id] = Verdict(
                    RunState.FAILED, SACCT_CAUSE.get(s[0], s[0].lower()), f"slurm job {r.job_id} {why}"
                )
            continue
        # local and debug: the job process (running) or the runner/launcher that will start it (queued)
        owner = r.runner if r.executor == "local" else r.launcher
        alive = (
            proc_alive(r.pid, r.pid_start)
            if r.state == RunState.RUNNING
            else (
                proc_alive((owner or {}).get("pid"), (owner or {}).get("start"))
                or proc_alive(r.pid, r.pid_start)
                or proc_alive((r.dispatched or {}).get("pid"), (r.dispatched or {}).get("start"))
            )
        )
        if alive:
            continue
        if r.state == RunState.QUEUED:
            out[r.run_id] = Verdict(RunState.NEW)  # its runner died before starting it: it never ran
        else:
            out[r.run_id] = Verdict(
                RunState.FAILED,
                "killed",
                f"{r.executor} job process {r.pid} died without "
                "recording a result (killed: OOM killer, kill -9, or its launcher died)",
            )
    return out


def current_states(ledger: Ledger, *, locked: bool = False) -> tuple[dict[str, RunRecord], dict[str, Verdict]]:
    """Fold the ledger and check liveness; re-read once if anything looked dead, so that a job that recorded its
    own end between our two reads is not called dead (relevant without the lock)."""
    recs = ledger.fold()
    verdicts = check_live(recs, locked=locked)
    if verdicts and not locked:
        recs = ledger.fold()
        verdicts = {k: v for k, v in verdicts.items() if recs[k].state in LIVE}
    for rid, v in verdicts.items():
        ev = finished_event(ledger, recs[rid])
        if ev is not None:  # it finished; only the ledger's line is missing
            verdicts[rid] = Verdict(ev["status"])
            continue
        if v.state == RunState.FAILED:  # a data-parallel run whose job died: the rank that broke first says why
            first = failure_reports.first(RunDir.of(ledger.dir.parent, ledger.dir.name, rid))
            if first is not None:
                v.error = f"{v.error}; rank {first.rank} {first.status} first: {first.error_class}: {first.message}"
    return recs, verdicts


def record_deaths(
    ledger: Ledger, root: Path, name: str, recs: dict[str, RunRecord], verdicts: dict[str, Verdict]
) -> None:
    """Persist what the liveness checks found, so the verdict survives sacct forgetting the job. A run whose job is
    gone but whose run.json says it finished gets the `finished` event its job did not live to write."""
    dead = []
    for rid, v in verdicts.items():
        ev = finished_event(ledger, recs[rid])  # whatever happened to its job (v.state done or diverged)
        if ev is not None:
            dead.append(ev)
        elif v.state == RunState.FAILED:
            dead.append(
                {
                    "event": "failed",
                    "run_id": rid,
                    "batch": recs[rid].batch,
                    "job_id": recs[rid].job_id,
                    "cause": v.cause,
                    "error": v.error,
                    "log": recs[rid].log,
                }
            )
            RunDir.of(root, name, rid).try_failed(v.cause or "killed", v.error)
        elif v.state == RunState.PREEMPTED:
            dead.append(
                {
                    "event": "preempted",
                    "run_id": rid,
                    "batch": recs[rid].batch,
                    "job_id": recs[rid].job_id,
                    "requeue": False,
                    "reason": "preemption",
                }
            )
            RunDir.of(root, name, rid).ended(RunState.PREEMPTED, reason="preempted by the scheduler")
    ledger.append(*dead)
