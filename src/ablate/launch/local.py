"""The local executor: a detached runner process per submission that keeps a sweep's parallelism bounded.

submitit's LocalExecutor has no parallelism limit and its controllers keep the caller's stdio open, so
`ablate sweep` spawns one detached *runner* (new session, its queue and log in `launch/`: docs/run-directory.md)
and returns at once. The runner starts its runs as LocalExecutor jobs, at most `max_parallel` runs of the whole
sweep at once: runs of other runners (a second `ablate sweep`, or jobs orphaned by a runner that died) count too.
It records each job it starts (`dispatched`), records a job that ended without recording a result (killed) as
failed, and exits when its queue is empty. Nothing else has to stay up: a run whose runner died before starting it
is new again on the next `ablate sweep`.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import submitit

from ablate.compose.spec import RunSpec
from ablate.errors import ErrorKind, UserError
from ablate.launch.job import RunJob
from ablate.launch.liveness import finished_event
from ablate.states import TERMINAL, RunState
from ablate.storage import fs, ownership, store
from ablate.storage.ledger import Ledger, proc_alive, proc_start
from ablate.storage.rundir import RunDir
from ablate.topology.process import start_module


def spawn_runner(
    ledger: Ledger,
    batch: str,
    jobs: list[RunJob],
    max_parallel: int,
    timeout_min: float,
    max_requeues: int,
    signal_delay_s: int | None = None,
) -> dict[str, int]:
    """Write the queue and start the detached runner; returns its {pid, start}."""
    launch_dir = fs.make_dirs(fs.check_no_links(ledger.dir / "launch", ledger.dir))  # as private as the sweep
    queue = launch_dir / f"{batch}.json"
    if signal_delay_s is None:
        signal_delay_s = min(30, int(timeout_min * 60 * 0.1) + 1)
    store.write_json(
        queue,
        {
            "sweep_dir": str(ledger.dir),
            "batch": batch,
            "max_parallel": max_parallel,
            "timeout_min": timeout_min,
            "max_requeues": max_requeues,
            "signal_delay_s": signal_delay_s,
            "jobs": [{"spec": j.spec.to_json(), "job": j.job, "threads": j.threads} for j in jobs],
        },
    )
    with fs.safe_open(launch_dir / f"{batch}.log", "ab") as log:
        proc = start_module("ablate.launch.local", [str(queue)], log=log, detach=True)  # `ablate sweep | cat` returns
    return {"pid": proc.pid, "start": proc_start(proc.pid) or 0}


def busy_runs(ledger: Ledger) -> set[str]:
    """Runs of the sweep that hold a local slot: running (or being requeued), or dispatched by a runner whose job
    controller is alive and has not started yet."""
    busy = set()
    for rid, r in ledger.fold().items():
        if r.executor != "local":
            continue
        controller = r.dispatched if r.state == RunState.QUEUED else None  # started by a runner, not yet running
        if r.state in (RunState.RUNNING, RunState.REQUEUED) or (
            controller and proc_alive(controller.get("pid"), controller.get("start"))
        ):
            busy.add(rid)
    return busy


def run_queue(queue_file: str | Path, poll_s: float = 0.2) -> None:
    """The runner (see the module docstring). Runs superseded meanwhile (a later submission) are skipped.

    The queue names the job function, code this process imports and runs, and submitit's pickles in jobs/ are
    unpickled by the jobs: a queue (or its folder) that is a link, or that someone else owns or could write, is
    refused (UserError, in the runner's log), and so is a jobs/ folder that is not private."""
    why = ownership.private_problem(queue_file)
    if why:
        raise UserError(
            f"refusing the runner queue {queue_file}: {why}; only a queue its owner alone can write is "
            "run (launch the sweep again from a directory of your own)",
            kind=ErrorKind.FILE,
        )
    q = store.read_json(queue_file)
    sweep_dir, batch, limit = Path(q["sweep_dir"]), q["batch"], int(q["max_parallel"])
    jobs_dir = fs.make_dirs(fs.check_no_links(sweep_dir / "jobs", sweep_dir))
    why = ownership.private_problem(jobs_dir)
    if why:
        raise UserError(
            f"refusing to run jobs from {jobs_dir}: {why}; launch the sweep again from a directory of your own",
            kind=ErrorKind.FILE,
        )
    ledger = Ledger(sweep_dir)
    ex = submitit.LocalExecutor(folder=str(sweep_dir / "jobs" / "%j"), max_num_timeout=q["max_requeues"])
    ex.update_parameters(timeout_min=q["timeout_min"], signal_delay_s=q["signal_delay_s"])
    todo = deque(q["jobs"])
    active: dict[str, Any] = {}
    waiting = False
    while todo or active:
        while todo:
            with ledger.lock():
                rid = todo[0]["spec"]["run_id"]
                rec = ledger.fold().get(rid)
                if rec is None or rec.batch != batch or rec.state not in (RunState.SUBMITTING, RunState.QUEUED):
                    todo.popleft()  # superseded, or already ended
                    continue
                in_use = busy_runs(ledger) | set(active)
                if len(in_use) >= limit:
                    if not waiting:
                        print(
                            f"{time.strftime('%H:%M:%S')} waiting: {len(in_use)} of {limit} slots of this sweep in use",
                            flush=True,
                        )
                    waiting = True
                    break
                waiting = False
                item = todo.popleft()
                job = RunJob(
                    RunSpec.from_json(item["spec"]),
                    str(sweep_dir),
                    batch,
                    item["job"],
                    item["threads"],
                    q["max_requeues"],
                    q["timeout_min"],
                )
                active[rid] = ex.submit(job)
                ctl = int(active[rid].job_id)
                ledger.append(
                    {
                        "event": "dispatched",
                        "run_id": rid,
                        "batch": batch,
                        "job_id": active[rid].job_id,
                        "controller": {"pid": ctl, "start": proc_start(ctl) or 0},
                    }
                )
            print(f"{time.strftime('%H:%M:%S')} started {rid} as local job {active[rid].job_id}", flush=True)
        ended = [rid for rid, j in active.items() if j.done()]
        for rid in ended:
            _finalize(ledger, batch, rid, active.pop(rid))
        if not ended:
            time.sleep(poll_s)


def _finalize(ledger: Ledger, batch: str, run_id: str, job: Any) -> None:
    """A local job ended: if it could not record its own end (killed), record it as failed, unless its run.json
    says it finished (it was killed after writing that): then record the `finished` event it did not write."""
    with ledger.lock():
        rec = ledger.fold().get(run_id)
        if rec is None or rec.batch != batch or rec.state in TERMINAL:
            return
        finished = finished_event(ledger, rec)
        if finished is not None:
            ledger.append(finished)
            return
        state = job.state
        cause = "cancelled" if state == "INTERRUPTED" else "killed"
        err = {  # submitit's word for it: FINISHED is a process that exited, whatever killed the run inside it
            "FINISHED": f"local job {job.job_id} ended without recording a result (killed: OOM killer, kill -9; "
            "its log may say more)",
            "INTERRUPTED": f"local job {job.job_id} was stopped by a signal before recording a result",
        }.get(state, f"local job {job.job_id} ended ({state.lower()}) without recording a result")
        RunDir.of(ledger.dir.parent, ledger.dir.name, run_id).try_failed(cause, err)  # run.json first, as jobs do
        ledger.append(
            {
                "event": "failed",
                "run_id": run_id,
                "batch": batch,
                "job_id": job.job_id,
                "cause": cause,
                "error": err,
                "log": str(job.paths.stderr),
            }
        )


if __name__ == "__main__":  # the detached runner `spawn_runner` starts: python -m ablate.launch.local QUEUE_FILE
    run_queue(sys.argv[1])
