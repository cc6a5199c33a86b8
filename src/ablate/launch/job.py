"""The job side: what runs inside every submitted job, on any executor.

`RunJob` (a submitit `Checkpointable`) claims its run in the ledger, calls the job function (`ablate.train:run`
by default) and records how it ended: in the ledger and, through ablate.storage.rundir, in run.json.

How a job meets preemption, time limits, stop requests and data-parallel tasks: docs/run-directory.md, "Jobs".
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from ablate.compose.spec import RunSpec
from ablate.errors import ErrorKind, UserError
from ablate.launch.jobenv import (
    crashpoint,
    job_env,
    num_tasks,
    process_age,
    set_threads,
    tell_ranks,
    watch_stop_requests,
)
from ablate.launch.jobfn import DEFAULT_JOB, resolve_job, takes_stop
from ablate.launch.liveness import finished_event
from ablate.states import FINISHED, STOPPED, TERMINAL, RunState
from ablate.storage import fs
from ablate.storage.ledger import Ledger, RunRecord, hostname, me
from ablate.storage.rundir import DirectoryGone, RunDir
from ablate.storage.runinfo import cause_of, error_record

log = logging.getLogger("ablate.launch")


class RunJob(submitit.helpers.Checkpointable):
    """One run, as submitted to any executor (docs/run-directory.md, "Jobs")."""

    timeouts: int = 0
    """USR2s that came at the time limit, over every attempt (the requeued job unpickles this object): past
    `max_requeues`, submitit (given max_num_timeout=max_requeues) ends the job instead of requeueing it. A class
    default too, so a job pickled before the count existed reads 0."""
    _loaded_at: float = 0.0
    """When this process unpickled the job: milliseconds before submitit's signal handler starts the clock by which
    it tells a timeout from a preemption, so both call a signal the same."""

    def __init__(
        self,
        spec: RunSpec,
        sweep_dir: str,
        batch: str,
        job: str = DEFAULT_JOB,
        threads: int = 1,
        max_requeues: int = 3,
        timeout_min: float = 60.0,
    ):
        self.spec, self.sweep_dir, self.batch, self.job = spec, str(sweep_dir), batch, job
        self.threads, self.max_requeues, self.timeout_min = threads, max_requeues, timeout_min
        self._t0 = 0.0
        self.timeouts = 0
        self._sweep_inode: tuple[int, int] | None = None  # the sweep directory this job claimed its run in

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._loaded_at = time.time()

    def _sweep_moved(self) -> bool:
        """Whether the sweep directory was removed or replaced since the claim (make clean, then a new launch):
        its ledger and run directories are another launch's now, so this job must write nothing there."""
        try:
            st = os.stat(self.sweep_dir)
        except OSError:
            return True
        return self._sweep_inode is not None and (st.st_dev, st.st_ino) != self._sweep_inode

    @property
    def out_of_time(self) -> bool:
        """Whether the job timed out more often than it may be requeued for (submitit then ends it)."""
        return self.timeouts > self.max_requeues

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    def _run_dir(self) -> RunDir:
        return RunDir.of(Path(self.sweep_dir).parent, Path(self.sweep_dir).name, self.run_id)

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"event": kind, "run_id": self.run_id, "batch": self.batch, **fields}

    def __call__(self) -> dict[str, Any]:
        with fs.sweep_umask(fs.group_readable(self.sweep_dir)):  # what the trainer's libraries make too
            return self._call_tasks()

    def _call_tasks(self) -> dict[str, Any]:
        tasks = num_tasks()
        if tasks <= 1:
            return self._run()
        from ablate.topology import world as distributed

        res = self.spec.config.resources
        if tasks != res.world:
            raise UserError(
                f"{self.run_id}: the job has {tasks} tasks but resources.nproc x nodes = {res.world}",
                kind=ErrorKind.RECIPE,
            )
        world = distributed.init_from_submitit(
            distributed.backend_for(self.spec.config.train.device), res.collective_timeout_s
        )
        try:
            return self._run(world) if world.lead else self._follow(world)
        finally:
            distributed.shutdown()

    def _follow(self, world: Any) -> dict[str, Any]:
        """A task other than 0 of a data-parallel run: wait for task 0's claim, then train; record nothing."""
        import torch.distributed as dist

        go = [None]
        dist.broadcast_object_list(go, src=0)
        if not go[0]:
            return {"run_id": self.run_id, "skipped": "superseded", "rank": world.rank}
        summary, _ = self._call(threading.Event())  # submitit lets task 0 alone requeue: no handover here
        return {"run_id": self.run_id, "rank": world.rank, **(summary if isinstance(summary, dict) else {})}

    def _call(self, stop: threading.Event) -> tuple[Any, Callable[..., Any] | None]:
        """Call the job function on this run (with `stop`, USR2 intercepted, when it takes one); returns its
        summary and submitit's USR2 handler to hand the signal to afterwards (None when not intercepted)."""
        set_threads(self.threads)
        fn = resolve_job(self.job)
        kwargs: dict[str, Any] = {"threads": self.threads}
        handover = None
        if takes_stop(fn):
            kwargs["stop"] = stop
            handover = self._intercept_usr2(stop)
        return fn(self.spec.config, self._run_dir().path, **kwargs), handover

    def _run(self, world: Any = None) -> dict[str, Any]:
        """The job (task 0 of a data-parallel one): claim, run, record."""
        self._t0 = time.time()
        ledger = Ledger(self.sweep_dir)
        job_id, logs = job_env()
        log_path = logs.get("stderr")
        rec, skipped = self._claim(ledger, world, job_id, log_path)
        if rec is None:
            return skipped
        rd = self._run_dir()
        # `job_logs`: submitit's stdout/stderr of this job (the trainer keeps its own `logs`).
        rd.started(job_id=job_id, job_logs=logs, attempt=rec.attempts + 1)
        stop = threading.Event()
        finished = threading.Event()
        threading.Thread(
            target=watch_stop_requests, args=(rd, stop, finished), daemon=True, name="ablate-stop-watch"
        ).start()
        try:
            summary, handover = self._call(stop)
        except DirectoryGone as e:
            # the sweep directory was removed (and perhaps made again by another launch): its ledger and run.json
            # are not this job's any more, so it records nothing
            log.error("%s", e)
            return {"run_id": self.run_id, "abandoned": str(e)}
        except submitit.core.utils.UncompletedJobError as e:
            # Raised by submitit's signal handler when it will not requeue: out of requeues (our checkpoint
            # returned None: the run is `preempted`, already recorded) or timed out too often.
            if self.out_of_time:
                self._fail("timeout", e, log_path)
            raise
        except Exception as e:
            # the traceback goes to the job's log before the ledger says `failed`: whoever reads the log then finds it
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            self._fail(cause_of(e), e, log_path)
            raise
        finally:
            finished.set()
        status, reason = self._how_it_ended(summary, rd, stop, handover)
        if self._sweep_moved():
            log.error(
                "the sweep directory %s was removed or replaced while this run trained: recording nothing",
                self.sweep_dir,
            )
            return {"run_id": self.run_id, "abandoned": "sweep directory removed or replaced"}
        self._record_end(ledger, rd, rec, job_id, status, reason)
        return summary if isinstance(summary, dict) else {"result": summary}

    def _claim(
        self, ledger: Ledger, world: Any, job_id: str | None, log_path: str | None
    ) -> tuple[RunRecord | None, dict[str, Any]]:
        """Claim the run under the ledger lock: only the current submission of a run that has not ended may run it.
        Returns (its record, {}) when claimed, else (None, what the job returns); the other tasks of a
        data-parallel job hear either way whether to run."""
        told = False
        try:
            with ledger.lock():
                rec = ledger.fold().get(self.run_id)
                if rec is None or rec.batch != self.batch or rec.state in TERMINAL:
                    told = True
                    tell_ranks(world, False)
                    return None, {"run_id": self.run_id, "skipped": "superseded"}
                finished = finished_event(ledger, rec)
                if finished is not None:  # an earlier job of it finished it, then died before the ledger said so
                    told = True
                    tell_ranks(world, False)
                    ledger.append(finished)
                    return None, {"run_id": self.run_id, "skipped": "finished"}
                events = []
                if rec.state == RunState.REQUEUED:
                    events.append(self._event("requeued", job_id=job_id, requeues=rec.requeues))
                events.append(
                    self._event(
                        "started", job_id=job_id, host=hostname(), attempt=rec.attempts + 1, log=log_path, **me()
                    )
                )
                ledger.append(*events)
                st = os.stat(self.sweep_dir)
                self._sweep_inode = (st.st_dev, st.st_ino)
        except BaseException:
            if not told:
                tell_ranks(world, False)  # the other tasks must not wait on a claim that will not come
            raise
        tell_ranks(world, True)
        return rec, {}

    def _how_it_ended(
        self, summary: Any, rd: RunDir, stop: threading.Event, handover: Callable[..., Any] | None
    ) -> tuple[RunState, str | None]:
        """The state the job function's return leaves the run in, and why: a stop the prune monitor asked for is
        recorded (never requeued); a scheduler's USR2 is handed to submitit (which records, requeues and exits)."""
        status = summary.get("status", RunState.DONE) if isinstance(summary, dict) else RunState.DONE
        request = rd.stop_request() if stop.is_set() else None
        reason = None
        if status == RunState.PREEMPTED and request is not None:
            status, reason = request.state, request.reason
            log.warning("stopped by the prune monitor: %s (%s)", status, reason)
        elif status == RunState.PREEMPTED and stop.is_set() and handover is not None:
            log.warning(
                "checkpointed at step %s; handing SIGUSR2 to submitit (record, requeue, exit)",
                summary.get("step") if isinstance(summary, dict) else "?",
            )
            signal.signal(signal.SIGUSR2, handover)
            handover(signal.SIGUSR2, None)  # records the preemption and exits when the job is requeued
        if status != RunState.PREEMPTED:
            status = status if isinstance(status, str) and status in FINISHED | STOPPED else RunState.DONE
        return RunState(status), reason

    def _record_end(
        self, ledger: Ledger, rd: RunDir, rec: RunRecord, job_id: str | None, status: RunState, reason: str | None
    ) -> None:
        """run.json first (for a job function that keeps none): whoever sees the ledger say the run ended finds
        run.json saying so too."""
        if status in STOPPED:
            rd.ended(status, reason=reason)
        elif rd.info().status not in FINISHED | {RunState.PREEMPTED}:
            rd.ended(status)
        final = rd.info().status
        if final in FINISHED and final != status:  # the run's own verdict stands (run.json keeps it): say the same
            status, reason = RunState(final), None
        rd.clear_stop_request()  # obeyed, or too late: the run's state says what happened
        crashpoint("job_after_ended")
        with ledger.lock():
            if status == RunState.PREEMPTED:  # stopped on a signal that was not the scheduler's: resume later
                ledger.append(
                    self._event("preempted", job_id=job_id, reason="signal", requeue=False, requeues=rec.requeues)
                )
            else:
                ledger.append(
                    self._event("finished", job_id=job_id, status=status, **({"reason": reason} if reason else {}))
                )
        crashpoint("job_after_finished")

    def _intercept_usr2(self, stop: threading.Event) -> Callable[..., Any] | None:
        """Under submitit, make USR2 only set `stop`; return submitit's own handler to hand the signal to later."""
        if not os.environ.get("SUBMITIT_EXECUTOR") or threading.current_thread() is not threading.main_thread():
            return None
        theirs = signal.getsignal(signal.SIGUSR2)
        if not callable(theirs):
            return None

        def on_usr2(signum: int, frame: Any) -> None:
            stop.set()
            log.warning("received SIGUSR2: the run checkpoints at its next step boundary")

        signal.signal(signal.SIGUSR2, on_usr2)
        return theirs

    def _fail(self, cause: str, exc: BaseException, log_path: str | None) -> None:
        if self._sweep_moved():
            return
        ledger = Ledger(self.sweep_dir)
        job_id, _ = job_env()
        err = error_record(exc)
        self._run_dir().try_failed(cause, exc, log=log_path)  # run.json first: it agrees once the ledger says failed
        with ledger.lock(timeout=5):
            # A run that finished before the error (the job function wrote its end, then raised) stays finished:
            # run.json kept its verdict, and the ledger gets the `finished` event rather than `failed`.
            rec = ledger.fold().get(self.run_id)
            current = rec if rec is not None and rec.batch == self.batch else None
            if current is not None and current.state in FINISHED:
                return
            finished = finished_event(ledger, current) if current is not None else None
            ledger.append(
                finished
                or self._event("failed", job_id=job_id, cause=cause, error="\n".join(err["traceback"]), log=log_path)
            )

    def checkpoint(  # type: ignore[override]  # None: no requeue, which submitit handles (it types only the other)
        self, *args: Any, **kwargs: Any
    ) -> submitit.helpers.DelayedSubmission | None:
        """Called by submitit on USR2 (preemption, or the time limit close): record, then requeue.

        Runs inside a signal handler, possibly while this process holds the ledger lock, hence the lock timeout.
        What the requeued job resumes from is the run's own checkpoint (docs/run-directory.md, "Jobs").
        """
        if self._sweep_moved():
            return None  # another launch owns that path now: no record, no requeue
        ledger = Ledger(self.sweep_dir)
        job_id, _ = job_env()
        started = self._loaded_at or self._t0  # a job run in this process (debug) was never unpickled
        elapsed = time.time() - started if started else (process_age() or 0.0)
        limit = self.timeout_min * 60  # same rule as submitit's SignalHandler.has_timed_out
        reason = "timeout" if elapsed >= min(0.8 * limit, limit - 600) else "preemption"
        self.timeouts += int(reason == "timeout")
        with ledger.lock(timeout=5):
            rec = ledger.fold().get(self.run_id)
            if rec is not None and rec.batch == self.batch and rec.state in FINISHED:
                return None  # the signal came after the run's end: nothing to resume
            finished = finished_event(ledger, rec) if rec is not None and rec.batch == self.batch else None
            if finished is not None:  # it ended before the signal, which came before the ledger said so
                ledger.append(finished)
                return None
            done = rec.requeues if rec and rec.batch == self.batch else 0
            requeue = done < self.max_requeues
            self._run_dir().ended(RunState.PREEMPTED, reason=reason, requeues=done + int(requeue))
            ledger.append(
                self._event("preempted", job_id=job_id, reason=reason, requeue=requeue, requeues=done + int(requeue))
            )
        return submitit.helpers.DelayedSubmission(self) if requeue else None
