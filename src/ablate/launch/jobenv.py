"""What a job reads from, and tells, the process it runs in: its threads, submitit's job id, log paths and task
count, the start of the process (submitit times a job from it), the other tasks of a data-parallel job, the prune
monitor's stop requests, and the fault injection the robustness tests use (`crashpoint`)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import submitit

from ablate.storage.ledger import proc_start
from ablate.storage.rundir import RunDir

log = logging.getLogger("ablate.launch")


def set_threads(n: int) -> None:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def job_env() -> tuple[str | None, dict[str, str]]:
    """(job id, log paths) from submitit's environment in the job process."""
    try:
        env = submitit.JobEnvironment()
        job_id = env.job_id
    except RuntimeError:
        return None, {}
    try:
        paths = env.paths
        return job_id, {"stdout": str(paths.stdout), "stderr": str(paths.stderr)}
    except KeyError:
        return job_id, {}


def num_tasks() -> int:
    """Tasks of this submitit job (1 outside submitit)."""
    try:
        return submitit.JobEnvironment().num_tasks
    except RuntimeError:
        return 1


def tell_ranks(world: Any, go: bool) -> None:
    """Task 0 of a data-parallel job tells the other tasks whether the claim succeeded."""
    if world is not None and world.size > 1:
        import torch.distributed as dist

        dist.broadcast_object_list([go], src=0)


def watch_stop_requests(rd: RunDir, stop: threading.Event, done: threading.Event, every_s: float = 1.0) -> None:
    """Set `stop` once the run directory holds a stop request (the prune monitor's); return when `done` is set."""
    while not done.wait(every_s):
        request = rd.stop_request()
        if request is not None:
            log.warning("stop requested (%s): the run checkpoints at its next step boundary", request.reason)
            stop.set()
            return


def crashpoint(name: str) -> None:
    """Fault injection for the robustness tests: SIGKILL this process at the point named by ABLATE_CRASHPOINT.
    Submission: after_submitting, after_spawn (launch/submit.py). A job recording its end: job_after_ended (run.json
    says how it ended, the ledger not yet), job_after_finished (both)."""
    if os.environ.get("ABLATE_CRASHPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def process_age() -> float | None:
    """Seconds since this process started (submitit times a job from its process start, too)."""
    try:
        start = proc_start(os.getpid())
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start / os.sysconf("SC_CLK_TCK") if start is not None else None
    except (OSError, ValueError):
        return None
