"""One run's record over its run directory, whatever trainer trains it: `RunSession`.

The session owns what every trainer shares: the refusals before anything is written (`preflight`), the writer's
hold on the directory (`writing`: the lock, config.yaml, train.log), run.json's start and end, the evaluation
record and the per-step bookkeeping (metrics.jsonl, Health, Compute), the mending of metrics.jsonl on resume, and
the divergence handling and summary at the end. A trainer (the `Trainer` protocol; one `TrainerClass` per
`trainer.name` in loop.TRAINERS) brings the learner, its checkpoints and its steps. The run's lifecycle is in
docs/run-directory.md; the trainers, in docs/trainers.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from omegaconf import OmegaConf

from ablate.config.identity import arm_id, canonical, run_id
from ablate.config.schema import RunConfig
from ablate.errors import ErrorKind, UserError
from ablate.states import RunState, RunSummary
from ablate.storage import fs, store
from ablate.storage.metricsfile import METRICS
from ablate.storage.rundir import DirectoryGone, RunDir
from ablate.topology.world import World
from ablate.train.build import warmup_record
from ablate.train.checkpoint import metric_steps
from ablate.train.compute import Compute, device_count
from ablate.train.evaluate import Accumulator, Evaluator, Health
from ablate.train.step import Diverged, Learner, resolve_device

log = logging.getLogger("ablate.train")


class Trainer(Protocol):
    """What a trainer offers its session. `label` and `scheme` name it in train.log's headline, `facts` are what
    run.json records of it, `max_lag` how stale its batches got."""

    @property
    def label(self) -> str: ...

    @property
    def scheme(self) -> str: ...

    @property
    def facts(self) -> dict[str, Any]: ...

    @property
    def max_lag(self) -> int: ...

    def resume(self, steps: list[int]) -> bool:
        """Load the newest usable checkpoint into the trainer and its session, given the steps metrics.jsonl
        records (checkpoint.check_state; with none usable: checkpoint.start_afresh). False: a fresh start."""
        ...

    def train(self, start: Start) -> tuple[bool, str | None]:
        """Call `start.clock()` where the run's time starts counting and `start.evaluate()` once ready to step,
        then train until train.max_steps, a stop request or the end of the prompt pool: (whether a stop request
        ended it before train.max_steps, the reason it ended otherwise, None at train.max_steps)."""
        ...


class Start:
    """What the session does as a trainer starts training; the trainer says when (its own set-up may come before
    the clock starts, or between the clock and the first evaluation)."""

    def __init__(self, session: RunSession, resumed: bool):
        self._session, self._resumed = session, resumed

    def clock(self) -> None:
        """The run's clock (wall_s, gpu_hours) starts, or resumes, here."""
        self._session.compute.start()

    def evaluate(self) -> None:
        """A fresh run is evaluated at step 0 (a resumed one has that line already)."""
        if not self._resumed:
            self._session.log_eval()


class TrainerClass(Protocol):
    """A trainer's class: built over a session, with what it refuses before anything is written (`preflight`)."""

    def __call__(self, session: RunSession) -> Trainer: ...

    def preflight(self, cfg: RunConfig) -> None: ...


def preflight(config: RunConfig, run_dir: Path | str, trainer: TrainerClass) -> RunDir:
    """What can be refused before anything is written: a missing GPU, what the recipe's `trainer` lacks, a run
    directory that is a file (or under one), or one that holds another run. Raises UserError."""
    rd = RunDir(run_dir)
    resolve_device(config.train.device)
    trainer.preflight(config)
    _check_directory(rd.path)
    check_config(config, rd)
    return rd


def _check_directory(path: Path) -> None:
    """A run directory must be a directory (or not exist yet) with no file in the way."""
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            where = "is a file" if p == path else f"is under {p}, which is a file"
            raise UserError(f"{path}: {where}; give a directory for the run (--run-dir)", kind=ErrorKind.FILE)
        if p.exists():
            break


def check_config(config: RunConfig, rd: RunDir) -> None:
    """A run directory is never silently reused for another config: an existing config.yaml must be this one
    (resource-only fields may change on a retry)."""
    path = rd.config_path
    if not path.exists():
        return
    try:
        old = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        same = canonical(old) == canonical(config)
    except Exception as e:
        raise UserError(
            f"{path}: unreadable ({type(e).__name__}); this directory holds something else: give "
            "another directory or remove it",
            kind=ErrorKind.FILE,
        ) from None
    if not same:
        raise UserError(
            f"{rd.path} holds a run of another config; pick another --run-dir or remove it", kind=ErrorKind.STATE
        )


class _LogFile(logging.FileHandler):
    """train.log; a failed write (a full disk) is dropped quietly: the run's error says what happened."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass

    def _open(self) -> Any:
        """Opened without following a link (fs.safe_open): a link planted at train.log is refused in one line,
        recorded as the run's failure, instead of appending to the file it points to."""
        return fs.safe_open(self.baseFilename, self.mode, encoding=self.encoding, errors=self.errors)


def attach_log(path: Path) -> logging.Handler:
    """The run's log lines go to `path` too (train.log, or a worker's own log) until `detach_log`."""
    fs.make_dirs(path.parent)  # logs/ takes the run directory's permissions
    log.setLevel(logging.INFO)
    h = _LogFile(path)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(h)
    return h


def detach_log(handler: logging.Handler) -> None:
    log.removeHandler(handler)
    handler.close()


@contextlib.contextmanager
def writing(config: RunConfig, rd: RunDir) -> Iterator[None]:
    """The writer's hold on the run directory for the run's length: the lock (another process writing it is
    refused), config.yaml, train.log and the trackers (`track.to`), which follow metrics.jsonl as RunDir's mirror
    and are told the run's end state as the hold ends (ablate.track.fanout; only the writer, worker 0, tracks)."""
    from ablate.track.fanout import end_state, open_fanout

    with rd.writer():
        check_config(config, rd)  # again, now that no one else can write it
        store.atomic_write_text(rd.config_path, OmegaConf.to_yaml(OmegaConf.create(config.to_dict())))
        handler = attach_log(rd.train_log)
        rd.mirror = fanout = open_fanout(config, rd, _device_kind(config))
        gone = False
        try:
            yield
        except DirectoryGone:
            gone = True  # run.json is another run's now: not read for the trackers
            raise
        finally:
            rd.mirror = None
            try:
                if fanout is not None:
                    fanout.close(RunState.FAILED if gone else end_state(rd))
            finally:  # a Ctrl-C during the trackers' wait still lets go of train.log
                detach_log(handler)


def _device_kind(config: RunConfig) -> str | None:
    """The kind of device `train.device` resolves to here (cpu, cuda), which the trackers tag the run with; None
    when it does not resolve (the run itself then says why)."""
    from ablate.train.step import resolve_device

    try:
        return resolve_device(config.train.device).type
    except UserError:
        return None


class RunSession:
    """One run of one process over its run directory (see the module docstring). Worker 0 (`lead`) writes the
    directory; the other workers of a data-parallel run keep the same counters and write nothing."""

    def __init__(self, cfg: RunConfig, rd: RunDir, stop: threading.Event, world: World | None = None) -> None:
        self.cfg, self.rd, self.stop = cfg, rd, stop
        self.world = world or World()
        self.lead = self.world.lead

    learner: Learner  # (set by attach)
    evaluator: Evaluator

    # ---- the counters a checkpoint holds ----

    def attach(self, learner: Learner) -> None:
        """The run starts from `learner` at step 0: its evaluator and fresh counters."""
        self.learner = learner
        self.evaluator = Evaluator(learner)
        # a data-parallel run holds one device per worker (a CPU worker counts one, as a single CPU run does)
        w = self.world
        self.devices = w.size if w.size > 1 else (device_count() if learner.device.type == "cuda" else 1)
        self.reset_counters()
        self.step = 0
        self.last_eval: dict[str, Any] | None = None

    def release(self) -> None:
        """Let go of the learner (its model's memory is freed before the next one is built)."""
        del self.learner, self.evaluator

    def reset_counters(self) -> None:
        """Compute, the training metrics' means and Health as at a fresh start."""
        self.compute = Compute(devices=self.devices, params=self.learner.policy.n_params)
        self.acc = Accumulator()
        self.health = Health()

    def state(self) -> dict[str, Any]:
        """The session's part of a checkpoint."""
        return {
            "step": self.step,
            "compute": self.compute.state_dict(),
            "acc": self.acc.state_dict(),
            "health": self.health.state_dict(),
            "eval": self.last_eval,
        }

    def load_state(self, st: dict[str, Any]) -> None:
        """Put the session's part of checkpoint `st` back (or raise: it did not fit)."""
        self.compute.load_state_dict(st["compute"])
        self.acc.load_state_dict(st["acc"])
        self.health.load_state_dict(st["health"])
        self.step, self.last_eval = st["step"], st.get("eval")

    def _resume(self, trainer: Trainer) -> bool:
        """The trainer resumes (or starts afresh); worker 0 mends metrics.jsonl to match: cut back to the
        checkpoint's lines (later ones belong to work that is redone), with the checkpoint's own evaluation written
        again if a crash tore its line; on a fresh start, none kept (a crash before the first checkpoint)."""
        resumed = trainer.resume(metric_steps(self.rd.metrics_path))
        if not self.lead:
            return resumed
        if not resumed:
            self.rd.keep_metrics_until(-1)
            return resumed
        kept = self.rd.keep_metrics_until(self.step)
        if self.last_eval is not None and not any(r.get("step") == self.last_eval["step"] for r in kept):
            self.rd.append_metrics(self.last_eval)
        return resumed

    def save(self, write: Callable[[], None]) -> None:
        """Worker 0 writes a checkpoint with `write`, once the run directory is still this run's (RunDir.guard);
        the other workers write nothing."""
        if self.lead:
            self.rd.guard()
            write()

    def stop_requested(self) -> bool:
        """Whether the run stops at this step boundary: a stop request on any worker stops every worker here."""
        return self.world.any(self.stop.is_set())

    # ---- the record ----

    def log_eval(self) -> None:
        """The held-out pass rate now: a metrics.jsonl line with the training means since the last one."""
        self.compute.tick()
        rate = self.evaluator.pass_rate(self.step)  # (the torch sampler samples in eval mode, whatever TRL set)
        self.compute.tick()
        means = self.acc.means()
        rec: dict[str, Any] = {
            "step": self.step,
            "gpu_hours": self.compute.gpu_hours,
            "flops": self.compute.flops,
            "samples": self.compute.samples,
            "val_pass_rate": rate,
            "val_n": self.evaluator.n,
            "wall_s": self.compute.wall_s,
        }
        rec.update({k: v for k, v in means.items() if k in METRICS and k not in rec})
        if self.lead:
            self.rd.append_metrics(rec)
        self.last_eval = rec
        self.acc = Accumulator()
        log.info(
            "eval step %d: val_pass_rate %.3f  (%s)",
            self.step,
            rate,
            ", ".join(f"{k} {v:.3g}" for k, v in rec.items() if k not in ("step", "val_pass_rate")),
        )
        self.health.after_eval(rate, means.get("train_pass_rate", 1.0), self.step)
        if self.lead:
            self.rd.progress(
                step=self.step,
                val_pass_rate=rate,
                r0=self.health.r0,
                samples=self.compute.samples,
                gpu_hours=self.compute.gpu_hours,
            )

    def after_step(self, truncation_rate: float) -> None:
        """Step self.step was taken: ScaleRL's truncation warning, and the evaluation when one is due."""
        warning = self.health.after_step(truncation_rate, self.step)
        if warning:
            log.warning(warning)
            if self.lead:
                self.rd.progress(warnings=self.health.warnings, truncation_warning=True)
        if self.step % self.cfg.train.eval_every == 0 or self.step == self.cfg.train.max_steps:
            self.log_eval()

    def _record_start(self, resumed: bool, trainer: Trainer) -> None:
        """run.json says the run is running (worker 0), and train.log's headline says what runs."""
        cfg, rd, learner = self.cfg, self.rd, self.learner
        if self.lead:
            ids = {} if rd.info_path.exists() else {"run_id": run_id(cfg), "arm_id": arm_id(cfg), "overrides": []}
            ranks = {"ranks": self.world.size} if self.world.size > 1 else {}
            rd.started(
                **ids,
                pid=os.getpid(),
                resumed_from=self.step if resumed else None,
                **trainer.facts,
                logs={"train": str(rd.train_log)},
                warmup=warmup_record(cfg, learner.task),
                params=learner.policy.n_params,
                max_steps=cfg.train.max_steps,
                device=str(learner.device),
                **ranks,
            )
        log.info(
            "run %s%s: %d params, %s x %s per step, %s, %d steps%s",
            rd.path.name,
            trainer.label,
            learner.policy.n_params,
            cfg.batch.prompts,
            cfg.batch.generations,
            trainer.scheme,
            cfg.train.max_steps,
            f" (resuming at {self.step})" if resumed else "",
        )

    def run(self, trainer: Trainer) -> RunSummary:
        """Resume, train and end the run with `trainer`; how it ended."""
        resumed = self._resume(trainer)
        resumed_from = self.step if resumed else None
        self._record_start(resumed, trainer)
        status = RunState.DONE
        try:
            stopped, reason = trainer.train(Start(self, resumed))
            if stopped:
                status, reason = RunState.PREEMPTED, f"stopped by a signal at step {self.step}"
        except (Diverged, FloatingPointError) as e:
            status, reason = RunState.DIVERGED, str(e) if isinstance(e, Diverged) else f"{e} at step {self.step}"
            log.error("diverged: %s", reason)
        self.compute.tick()
        summary = RunSummary(
            status=status,
            step=self.step,
            r0=self.health.r0,
            val_pass_rate=self.last_eval["val_pass_rate"] if self.last_eval else None,
            reason=reason,
            gpu_hours=self.compute.gpu_hours,
            samples=self.compute.samples,
            warnings=tuple(self.health.warnings),
            max_lag=trainer.max_lag,
            val_step=self.last_eval.get("step") if self.last_eval else None,
            resumed_from=resumed_from,
        )
        if self.lead:
            self.rd.ended(
                status,
                reason=reason,
                step=self.step,
                max_lag=trainer.max_lag,
                **({"diverged_reason": reason} if status == RunState.DIVERGED else {}),
            )
        log.info("run %s: %s at step %d (%s)", self.rd.path.name, status, self.step, reason or "max_steps reached")
        return summary
