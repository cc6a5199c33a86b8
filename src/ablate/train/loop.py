"""One RL run: a typed config in, a run directory out. `run()` is what `ablate train` and every launched job execute.

The run is a `RunSession` (session.py: preflight, the writer's hold on the directory, run.json, metrics.jsonl,
the summary) driven by the recipe's trainer (`TRAINERS`: builtin.py, trl_backend.py). Stop requests
(stopping.py) end the run `preempted` at the next step boundary; it never talks to a scheduler: the launcher's job
side decides what a stop means (submitit requeues the job). The states a run ends in, and what run.json records of
a failure: docs/run-directory.md.

Data-parallel runs (resources.nproc x nodes > 1; docs/distributed.md): every worker runs the same trainer and
agrees with the others at each step boundary (stop, end of pool); worker 0 alone writes the run directory, the
others (`_follow`) their own log and, when they fail, a report, so that worker 0 records the worker that broke
first (`_guarded`, ablate.topology.failure). Started here, the workers are spawned and waited for
(`_start_workers`, ablate.topology.workers), which names a worker killed without a word.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ablate.config.schema import RunConfig
from ablate.errors import ErrorKind, UserError
from ablate.registry import Registry
from ablate.states import RunState, RunSummary
from ablate.storage import failure_reports
from ablate.storage.rundir import DirectoryGone, RunDir
from ablate.storage.runinfo import cause_of, no_space
from ablate.topology import failure, workers
from ablate.topology.world import World, backend_for, current, visible_gpus
from ablate.train.session import RunSession, TrainerClass, attach_log, detach_log, preflight, writing
from ablate.train.step import Diverged
from ablate.train.stopping import stop_on_signals

log = logging.getLogger("ablate.train")

TRAINERS: Registry[TrainerClass] = Registry("trainer")
"""`trainer.name` -> the trainer's class (a session.TrainerClass). Lazy entries: choosing a trainer imports its code
(torch, and TRL for `trl`) only then; the support matrix of each is ablate.config.support.SUPPORT."""
TRAINERS.add_lazy("ablate", "ablate.train.builtin:BuiltinTrainer")
TRAINERS.add_lazy("trl", "ablate.train.trl_backend:TRLTrainer")

if TYPE_CHECKING:  # the lazy entries are not type-checked: mypy checks here that each class is a TrainerClass
    from ablate.train.builtin import BuiltinTrainer
    from ablate.train.trl_backend import TRLTrainer

    _CLASSES: tuple[TrainerClass, ...] = (BuiltinTrainer, TRLTrainer)


def run(config: RunConfig, run_dir: Path | str, *, threads: int = 1, stop: threading.Event | None = None) -> RunSummary:
    """Execute (or resume) one run in `run_dir`; how it ended (status done, preempted or diverged, the step, the
    last pass rate, the compute spent).

    `stop`: an event the caller sets to stop the run at the next step boundary; without one, SIGTERM/SIGINT/
    SIGUSR1/SIGUSR2 stop it. Raises UserError on bad input (nothing written when it is found before the run starts)
    and re-raises any crash after recording it in run.json.

    With resources.nproc x resources.nodes > 1 the run is data-parallel: inside a process group (a multi-task SLURM
    job) this process is one worker; otherwise the workers are spawned here and waited for.
    """
    world = current()
    if config.resources.world > 1 and world.size == 1:
        return _start_workers(config, run_dir, threads=threads, stop=stop)
    if world.size != config.resources.world:
        raise UserError(
            f"resources.nproc x resources.nodes = {config.resources.world}, but this process is one of "
            f"{world.size} ranks; launch with as many tasks as the run has ranks",
            kind=ErrorKind.RECIPE,
        )
    if not world.lead:
        return _follow(world, config, run_dir, threads, stop)
    try:
        return _lead(world, config, run_dir, threads, stop)
    except DirectoryGone:
        raise  # the directory is another run's now: nothing goes into it
    except BaseException as e:
        if world.size > 1:  # what worker 0 ended on, for whoever attributes the run's end (a peer that broke
            failure_reports.write(RunDir(run_dir), 0, e)  # first has written its report earlier)
        raise


def run_worker(
    world: World, config: dict[str, Any], run_dir: str, threads: int, stop: threading.Event
) -> dict[str, Any]:
    """What a spawned worker runs (the target `_start_workers` gives topology.workers.spawn): the config comes
    as plain JSON, and so does the summary go back."""
    from ablate.config.schema import validate

    return run(validate(config), run_dir, threads=threads, stop=stop).to_json()


def _lead(
    world: World, config: RunConfig, run_dir: Path | str, threads: int, stop: threading.Event | None
) -> RunSummary:
    """Worker 0 (or the one process): the writer of the run directory."""
    trainer = TRAINERS.get(config.trainer.name)
    rd = preflight(config, run_dir, trainer)
    torch.set_num_threads(int(threads))
    with writing(config, rd), stop_on_signals(stop) as stop_event:
        return _guarded(RunSession(config, rd, stop_event, world), trainer)


def _follow(
    world: World, config: RunConfig, run_dir: Path | str, threads: int, stop: threading.Event | None
) -> RunSummary:
    """A worker other than 0: the same trainer, writing nothing but its own log (and a report when it fails)."""
    rd = RunDir(run_dir)
    torch.set_num_threads(int(threads))
    try:
        handler = attach_log(rd.logs_dir / f"rank-{world.rank}.log")
    except OSError as e:
        failure_reports.write(rd, world.rank, e)
        raise
    log.info("rank %d of %d: pid %d on %s", world.rank, world.size, os.getpid(), socket.gethostname())
    try:
        with stop_on_signals(stop) as stop_event:
            session = RunSession(config, rd, stop_event, world)
            summary = session.run(TRAINERS.get(config.trainer.name)(session))
        if summary.status == RunState.DIVERGED:  # perhaps found here alone (a sampler's logits): worker 0 reads it
            failure_reports.write(rd, world.rank, Diverged(summary.reason or ""), status=RunState.DIVERGED)
        return summary
    except BaseException as e:
        failure_reports.write(rd, world.rank, e)
        log.exception("rank %d failed", world.rank)
        raise
    finally:
        detach_log(handler)


def _start_workers(config: RunConfig, run_dir: Path | str, *, threads: int, stop: threading.Event | None) -> RunSummary:
    """Start the run's workers on this machine, wait for them, and return worker 0's summary (see
    topology.workers.spawn); when worker 0 gives none, say (and record) what ended the run
    (topology.failure.spawned_outcome)."""
    res = config.resources
    if res.nodes > 1:
        raise UserError(
            f"resources.nodes={res.nodes}: runs over several nodes start as SLURM tasks; launch the "
            "sweep with -e slurm (or set resources.nodes=1)",
            kind=ErrorKind.RECIPE,
        )
    rd = preflight(config, run_dir, TRAINERS.get(config.trainer.name))
    backend = backend_for(config.train.device)
    gpus = visible_gpus() if backend == "nccl" else []
    if backend == "nccl" and len(gpus) < res.world:
        raise UserError(
            f"resources.nproc={res.nproc} ranks on CUDA need a GPU each, and {len(gpus)} are visible here; "
            f"set resources.nproc<={len(gpus)} or launch with -e slurm on GPU nodes",
            kind=ErrorKind.RECIPE,
        )
    with rd.writer():
        pass  # another process writing this run is refused now, in one line, before anything of it is touched
    failure_reports.clear(rd)  # a previous attempt's
    with stop_on_signals(stop) as stop_event:
        sp = workers.spawn(
            "ablate.train.loop:run_worker",
            res.world,
            {"config": config.to_dict(), "run_dir": str(rd.path), "threads": threads},
            rd.logs_dir,
            backend=backend,
            timeout_s=res.collective_timeout_s,
            stop=stop_event,
        )
    if sp.result is not None:
        return RunSummary.from_json(sp.result)
    return failure.spawned_outcome(rd, res.world, sp, stopped=stop_event.is_set())


def _guarded(session: RunSession, trainer: TrainerClass) -> RunSummary:
    """The run, with whatever stops it recorded in run.json (nothing may stay "running"). In a data-parallel run
    a crash here may be a peer's: when another worker reported first, its error (or divergence) is recorded."""
    rd = session.rd
    try:
        return session.run(trainer(session))
    except DirectoryGone:
        raise  # another directory is at this path now: write nothing to it
    except KeyboardInterrupt:
        rd.ended(RunState.PREEMPTED, reason="interrupted: resumes from the last checkpoint")
        raise
    except UserError as e:  # bad input found once the run had started: say so in run.json, not "running"
        rd.try_failed("input", e)
        raise
    except Exception as e:
        peer = failure.peer_failure(rd, session.world)
        if peer is not None and peer.status == RunState.DIVERGED:
            return failure.peer_diverged(rd, peer)
        if peer is not None:
            err = failure.peer_error(peer, session.world.size)
            rd.try_failed(err.cause, err)
            log.error("%s", err)
            raise err from e
        if no_space(e):
            rd.try_failed("no_space", e)
            raise UserError(
                f"no space left on the device while writing {rd.path}: free some space and run again "
                "(the run resumes from its last checkpoint)",
                kind=ErrorKind.ENVIRONMENT,
            ) from e
        rd.try_failed(cause_of(e), e)
        log.exception("run failed")
        raise
