"""One RL run: a typed config in, a run directory out. `run()` is what `ablate train` and every launched job execute.

The loop, every step: the feeder hands over a batch (feeders.py), the learner takes an optimizer step (step.py);
every `train.eval_every` steps the evaluator measures the held-out pass rate and one line is appended to
metrics.jsonl (evaluate.py); every `train.checkpoint_every` steps, at the end and on a stop request, a checkpoint is
saved (checkpoint.py). The run directory's files are written only through ablate.rundir.

Resume: a run directory with a checkpoint continues from it: the newest one that loads, fits the model and agrees
with metrics.jsonl, else the one before (checkpoint.py; with none usable, a fresh start only while no training is
recorded). metrics.jsonl is cut back to the lines with step <= the checkpoint's step (lines after it belong to
work that is redone), and the checkpoint's own evaluation line is written again if a crash tore it, so no line is
lost or duplicated.

Stop requests (stopping.py): at the next step boundary the run checkpoints and returns status `preempted`. It never
talks to a scheduler: the launcher's job side decides what a stop means (submitit requeues the job).

Status at the end: done (train.max_steps reached, or the prompt pool exhausted), preempted, diverged (a non-finite
loss, gradient or sampler logit, or a collapsed pass rate: `reason` says which), or failed (an exception, recorded
in run.json with its class, message and traceback, then re-raised).

Data-parallel runs (resources.nproc x nodes > 1; distributed.py, docs/distributed.md): every rank runs this loop
and agrees with the others at each step boundary (stop, end of pool); rank 0 alone writes the run directory, the
others (`_follow`) their own log and, when they fail, a report, so that rank 0 records the rank that broke first
(`_guarded`). Started here, the ranks are spawned and waited for (`_spawn_ranks`), which names a rank killed
without a word.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from ablate import store
from ablate.config import RunConfig
from ablate.errors import UserError
from ablate.identity import arm_id, canonical, run_id
from ablate.rundir import METRICS, DirectoryGone, RunDir, cause_of, no_space
from ablate.train import distributed
from ablate.train.checkpoint import BadCheckpoint, Checkpoints, check_state, metric_steps
from ablate.train.compute import Compute, device_count
from ablate.train.evaluate import Accumulator, Evaluator, Health
from ablate.train.feeders import make_feeder
from ablate.train.step import Diverged, Learner, resolve_device
from ablate.train.stopping import stop_on_signals

log = logging.getLogger("ablate.train")


def run(config: RunConfig, run_dir: Path | str, *, threads: int = 1, stop: threading.Event | None = None) -> dict[str, Any]:
    """Execute (or resume) one run in `run_dir`. Returns a summary: status (done | preempted | diverged), step,
    val_pass_rate, r0, reason, gpu_hours, samples, warnings, max_lag.

    `stop`: an event the caller sets to stop the run at the next step boundary; without one, SIGTERM/SIGINT/
    SIGUSR1/SIGUSR2 stop it. Raises UserError on bad input (nothing written when it is found before the run starts)
    and re-raises any crash after recording it in run.json.

    With resources.nproc x resources.nodes > 1 the run is data-parallel (see distributed.py): inside a process
    group (a multi-task SLURM job) this process is one rank; otherwise the ranks are spawned here and waited for.
    """
    world = distributed.current()
    if config.resources.world > 1 and world.size == 1:
        return _spawn_ranks(config, run_dir, threads=threads, stop=stop)
    if world.size != config.resources.world:
        raise UserError(f"resources.nproc x resources.nodes = {config.resources.world}, but this process is one of "
                        f"{world.size} ranks; launch with as many tasks as the run has ranks")
    if not world.lead:
        return _follow(world, config, run_dir, threads, stop)
    try:
        return _lead(world, config, run_dir, threads, stop)
    except DirectoryGone:
        raise  # the directory is another run's now: nothing goes into it
    except BaseException as e:
        if world.size > 1:  # what rank 0 ended on, for whoever attributes the run's end (a peer that broke first
            RunDir(run_dir).write_rank_report(0, e)  # has written its report earlier)
        raise


def _lead(world: distributed.World, config: RunConfig, run_dir: Path | str, threads: int,
          stop: threading.Event | None) -> dict[str, Any]:
    """Rank 0 (or the one process): the writer of the run directory."""
    rd = preflight(config, run_dir)
    torch.set_num_threads(int(threads))
    with rd.writer():
        _check_config(config, rd)  # again, now that no one else can write it
        store.atomic_write_text(rd.config_path, OmegaConf.to_yaml(OmegaConf.create(config.to_dict())))
        handler = _attach_log(rd.train_log)
        rd.tensorboard = config.train.tensorboard
        try:
            with stop_on_signals(stop) as stop_event:
                return _guarded(config, rd, stop_event, world)
        finally:
            rd.close_tensorboard()
            log.removeHandler(handler)
            handler.close()


def _rank(world: distributed.World, config: dict[str, Any], run_dir: str, threads: int,
          stop: threading.Event) -> dict[str, Any]:
    """What a spawned rank runs (distributed.spawn): the config comes as plain JSON."""
    from ablate.config import validate

    return run(validate(config), run_dir, threads=threads, stop=stop)


def _follow(world: distributed.World, config: RunConfig, run_dir: Path | str, threads: int,
            stop: threading.Event | None) -> dict[str, Any]:
    """A rank other than 0: the same loop, writing nothing but its own log (and a report when it fails)."""
    rd = RunDir(run_dir)
    torch.set_num_threads(int(threads))
    try:
        handler = _attach_log(rd.logs_dir / f"rank-{world.rank}.log")
    except OSError as e:
        rd.write_rank_report(world.rank, e)
        raise
    log.info("rank %d of %d: pid %d on %s", world.rank, world.size, os.getpid(), socket.gethostname())
    try:
        with stop_on_signals(stop) as stop_event:
            summary = _loop(config, rd, stop_event, world).main()
        if summary["status"] == "diverged":  # perhaps found here alone (a sampler's logits): rank 0 reads this
            rd.write_rank_report(world.rank, Diverged(summary["reason"]), status="diverged")
        return summary
    except BaseException as e:
        rd.write_rank_report(world.rank, e)
        log.exception("rank %d failed", world.rank)
        raise
    finally:
        log.removeHandler(handler)
        handler.close()


class RankFailed(RuntimeError):
    """A rank of a data-parallel run failed first; the message names it and its error. `cause` is what run.json
    and the ledger record (killed: the rank died of a signal)."""

    def __init__(self, message: str, cause: str = "exception") -> None:
        super().__init__(message)
        self.cause = cause


def _peer_failure(rd: RunDir, world: distributed.World, wait_s: float = 5.0) -> dict[str, Any] | None:
    """After rank 0 failed in a data-parallel run: the earliest report of another rank, if one failed (its report
    is written before its sockets close, so it is there at once on a local disk; a shared one may lag a little)."""
    if world.size == 1:
        return None
    t_end = time.monotonic() + wait_s
    while True:
        reports = [r for r in rd.rank_reports() if r.get("rank") != world.rank]
        if reports or time.monotonic() > t_end:
            return reports[0] if reports else None
        time.sleep(0.1)


def _ended_early(status: str, reason: str) -> dict[str, Any]:
    """The summary of a data-parallel run whose rank 0 could not give one."""
    return {"status": status, "reason": reason, "step": None, "r0": None, "val_pass_rate": None, "gpu_hours": None,
            "samples": None, "warnings": [], "max_lag": None}


def _peer_diverged(rd: RunDir, report: dict[str, Any]) -> dict[str, Any]:
    """A rank that found a divergence alone (its report says so): the run ended diverged; recorded, summarised."""
    reason = f"rank {report['rank']}: {report.get('message')}"
    rd.ended("diverged", reason=reason, diverged_reason=reason)
    log.error("diverged on %s", reason)
    return _ended_early("diverged", reason)


def _peer_error(report: dict[str, Any], size: int) -> RankFailed:
    """The error a failed rank's report makes of the run."""
    return RankFailed(f"rank {report['rank']} of {size} failed: {report.get('class')}: {report.get('message')}",
                      cause="oom" if "OutOfMemory" in str(report.get("class")) else "exception")


def _spawn_ranks(config: RunConfig, run_dir: Path | str, *, threads: int,
                 stop: threading.Event | None) -> dict[str, Any]:
    """Start the run's ranks on this machine, wait for them, and return rank 0's summary (see distributed.spawn);
    when rank 0 gives none, say (and record) what ended the run (`_rank_outcome`)."""
    res = config.resources
    if res.nodes > 1:
        raise UserError(f"resources.nodes={res.nodes}: runs over several nodes start as SLURM tasks; launch the "
                        "sweep with -e slurm (or set resources.nodes=1)")
    rd = preflight(config, run_dir)
    backend = distributed.backend_for(config.train.device)
    gpus = distributed.visible_gpus() if backend == "nccl" else []
    if backend == "nccl" and len(gpus) < res.world:
        raise UserError(f"resources.nproc={res.nproc} ranks on CUDA need a GPU each, and {len(gpus)} are visible here; "
                        f"set resources.nproc<={len(gpus)} or launch with -e slurm on GPU nodes")
    with rd.writer():
        pass  # another process writing this run is refused now, in one line, before anything of it is touched
    rd.clear_rank_reports()  # a previous attempt's
    with stop_on_signals(stop) as stop_event:
        sp = distributed.spawn("ablate.train.loop:_rank", res.world,
                               {"config": config.to_dict(), "run_dir": str(rd.path), "threads": threads},
                               rd.logs_dir, backend=backend, timeout_s=res.collective_timeout_s, stop=stop_event)
    if sp.result is not None:
        return sp.result
    return _rank_outcome(rd, res.world, sp, stopped=stop_event.is_set())


def _rank_outcome(rd: RunDir, size: int, sp: distributed.Spawned, *, stopped: bool) -> dict[str, Any]:
    """Rank 0 gave no summary: what broke first, from the ranks' reports and the exits by a signal (which leave
    none), by time. Recorded in run.json (rank 0 may have been killed before it could) and raised."""
    reports = {d["rank"]: d for d in rd.rank_reports()}
    events = [(d.get("time", 0.0), r, d) for r, d in reports.items()]
    events += [(sp.ended_at[r], r, c) for r, c in sp.codes.items() if c is not None and c < 0 and r not in reports]
    if not events:
        r = next((r for r, c in sorted(sp.codes.items()) if c != 0), 0)
        err = RankFailed(f"rank {r} of {size} {distributed.exit_reason(sp.codes.get(r))}")
        rd.try_failed(err.cause, err)
        raise err
    _, r, what = min(events, key=lambda e: e[0])
    log_path = rd.logs_dir / ("train.log" if r == 0 else f"rank-{r}.log")
    if isinstance(what, int):  # killed by a signal without a word (SIGKILL, the OOM killer)
        if stopped and -what in (signal.SIGTERM, signal.SIGINT):  # a stop that reached it before it was ready
            reason = f"stopped by a signal before rank {r} had started: resumes from the last checkpoint"
            rd.ended("preempted", reason=reason)
            return _ended_early("preempted", reason)
        err = RankFailed(f"rank {r} of {size} {distributed.exit_reason(what)} (its log: {log_path})", cause="killed")
    elif what.get("status") == "diverged":
        return _peer_diverged(rd, what)
    elif what.get("class") in ("UserError", "ConfigErrors"):
        raise UserError(what.get("message", ""))  # bad input: rank 0 recorded it where it had a run to record
    else:
        err = _peer_error(what, size)
    rd.try_failed(err.cause, err)
    raise err


def _loop(config: RunConfig, rd: RunDir, stop: threading.Event, world: distributed.World) -> Any:
    """The loop of the recipe's trainer: ablate's own (RunLoop) or TRL's GRPOTrainer (trl_backend.TRLLoop)."""
    if config.trainer.name == "trl":
        from ablate.train.trl_backend import TRLLoop

        return TRLLoop(config, rd, stop, world)
    return RunLoop(config, rd, stop, world)


def _guarded(config: RunConfig, rd: RunDir, stop: threading.Event, world: distributed.World) -> dict[str, Any]:
    """The loop, with whatever stops it recorded in run.json (nothing may stay "running"). In a data-parallel run
    a crash here may be a peer's: when another rank reported first, its error (or divergence) is what is recorded."""
    try:
        summary = _loop(config, rd, stop, world).main()
    except DirectoryGone:
        raise  # another directory is at this path now: write nothing to it
    except KeyboardInterrupt:
        rd.ended("preempted", reason="interrupted: resumes from the last checkpoint")
        raise
    except UserError as e:  # bad input found once the run had started: say so in run.json, not "running"
        rd.try_failed("input", e)
        raise
    except Exception as e:
        peer = _peer_failure(rd, world)
        if peer is not None and peer.get("status") == "diverged":
            return _peer_diverged(rd, peer)
        if peer is not None:
            err = _peer_error(peer, world.size)
            rd.try_failed(err.cause, err)
            log.error("%s", err)
            raise err from e
        if no_space(e):
            rd.try_failed("no_space", e)
            raise UserError(f"no space left on the device while writing {rd.path}: free some space and run again "
                            "(the run resumes from its last checkpoint)") from e
        rd.try_failed(cause_of(e), e)
        log.exception("run failed")
        raise
    return summary


def preflight(config: RunConfig, run_dir: Path | str) -> RunDir:
    """What can be refused before anything is written: a missing GPU, a run directory that is a file (or under one),
    or one that holds another run. Raises UserError."""
    rd = RunDir(run_dir)
    resolve_device(config.train.device)
    if config.trainer.name == "trl":
        from ablate.train.trl_backend import check_devices, require_trl

        require_trl()
        check_devices(config)
    _check_directory(rd.path)
    _check_config(config, rd)
    return rd


def _check_directory(path: Path) -> None:
    """A run directory must be a directory (or not exist yet) with no file in the way."""
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            where = "is a file" if p == path else f"is under {p}, which is a file"
            raise UserError(f"{path}: {where}; give a directory for the run (--out)")
        if p.exists():
            break


def _check_config(config: RunConfig, rd: RunDir) -> None:
    """A run directory is never silently reused for another config: an existing config.yaml must be this one
    (resource-only fields may change on a retry)."""
    path = rd.config_path
    if not path.exists():
        return
    try:
        old = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        same = canonical(old) == canonical(config)
    except Exception as e:
        raise UserError(f"{path}: unreadable ({type(e).__name__}); this directory holds something else: give "
                        "another directory or remove it") from None
    if not same:
        raise UserError(f"{rd.path} holds a run of another config; pick another --out or remove it")


class _LogFile(logging.FileHandler):
    """train.log; a failed write (a full disk) is dropped quietly: the run's error says what happened."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass

    def _open(self) -> Any:
        """Opened without following a link (store.safe_open): a link planted at train.log is refused in one line,
        recorded as the run's failure, instead of appending to the file it points to."""
        return store.safe_open(self.baseFilename, self.mode, encoding=self.encoding, errors=self.errors)


def _attach_log(path: Path) -> logging.Handler:
    store.make_dirs(path.parent)  # logs/ takes the run directory's permissions
    log.setLevel(logging.INFO)
    h = _LogFile(path)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(h)
    return h


class Recorder:
    """What the loops of both trainers (RunLoop here, trl_backend.TRLLoop) share: the evaluation record written to
    metrics.jsonl and run.json after each step, and the mending of metrics.jsonl on resume. A subclass sets cfg,
    rd, lead, evaluator, compute, acc, health, step and last_eval."""

    def log_eval(self) -> None:
        self.compute.tick()
        rate = self.evaluator.pass_rate(self.step)  # (the torch sampler samples in eval mode, whatever TRL set)
        self.compute.tick()
        means = self.acc.means()
        rec: dict[str, Any] = {"step": self.step, "gpu_hours": self.compute.gpu_hours, "flops": self.compute.flops,
                               "samples": self.compute.samples, "val_pass_rate": rate, "val_n": self.evaluator.n,
                               "wall_s": self.compute.wall_s}
        rec.update({k: v for k, v in means.items() if k in METRICS and k not in rec})
        if self.lead:
            self.rd.append_metrics(rec)
        self.last_eval = rec
        self.acc = Accumulator()
        log.info("eval step %d: val_pass_rate %.3f  (%s)", self.step, rate,
                 ", ".join(f"{k} {v:.3g}" for k, v in rec.items() if k not in ("step", "val_pass_rate")))
        self.health.after_eval(rate, means.get("train_pass_rate", 1.0), self.step)
        if self.lead:
            self.rd.progress(step=self.step, val_pass_rate=rate, r0=self.health.r0, samples=self.compute.samples,
                             gpu_hours=self.compute.gpu_hours)

    def after_step(self, truncation_rate: float) -> None:
        """Step self.step was taken: ScaleRL's truncation warning, and the evaluation when one is due."""
        warning = self.health.after_step(truncation_rate, self.step)
        if warning:
            log.warning(warning)
            if self.lead:
                self.rd.progress(warnings=self.health.warnings, truncation_warning=True)
        if self.step % self.cfg.train.eval_every == 0 or self.step == self.cfg.train.max_steps:
            self.log_eval()

    def mend_metrics(self) -> None:
        """Rank 0, on resume at self.step: cut metrics.jsonl back to the checkpoint's lines (later ones belong to
        work that is redone) and write the checkpoint's own evaluation again if a crash tore its line."""
        kept = self.rd.keep_metrics_until(self.step)
        if self.last_eval is not None and not any(r.get("step") == self.last_eval["step"] for r in kept):
            self.rd.append_metrics(self.last_eval)


def _check_optimizer(opt: torch.optim.Optimizer) -> None:
    """BadCheckpoint when a loaded optimizer state does not fit its parameters (torch checks the groups' sizes, not
    the moments' shapes: a wrong one would fail at the first step, far from its cause)."""
    for group in opt.param_groups:
        for p in group["params"]:
            for key, v in opt.state.get(p, {}).items():
                if torch.is_tensor(v) and v.dim() > 0 and v.shape != p.shape:
                    raise BadCheckpoint(f"its optimizer state {key!r} has shape {tuple(v.shape)} for a parameter of "
                                        f"shape {tuple(p.shape)}")


class RunLoop(Recorder):
    """The loop of one run over its run directory (see the module docstring)."""

    def __init__(self, cfg: RunConfig, rd: RunDir, stop: threading.Event,
                 world: distributed.World | None = None) -> None:
        self.cfg, self.rd, self.stop = cfg, rd, stop
        self.world = world = world or distributed.World()
        self.lead = world.lead  # rank 0 writes the run directory; the other ranks only compute
        self.ckpt = Checkpoints(rd.ckpt_dir, lead=self.lead)
        self._build()

    def _build(self) -> None:
        """The state a run starts from: policy, optimizer, counters at step 0 (built again when a checkpoint failed
        half-way through being applied and the run starts afresh)."""
        world = self.world
        self.learner = Learner(self.cfg, world)
        self.evaluator = Evaluator(self.learner)
        dev = self.learner.device
        # a data-parallel run holds one device per rank (a CPU rank counts one, as a single CPU run does)
        devices = world.size if world.size > 1 else (device_count() if dev.type == "cuda" else 1)
        self.compute = Compute(devices=devices, params=self.learner.policy.n_params)
        self.acc = Accumulator()
        self.health = Health()
        self.step = 0
        self.last_eval: dict[str, Any] | None = None

    # ---- checkpoints ----

    def save(self) -> None:
        """Every rank calls it (the ranks' rollout RNG states, and under fsdp the shards, are gathered); rank 0
        writes."""
        rngs = {}
        if self.world.size > 1:
            rngs = {"rollout_rngs": self.world.gather(self.learner.rollout_gen.get_state())}
        learner_state = self.learner.state_dict()
        if not self.lead:
            return
        self.rd.guard()
        self.ckpt.save({"step": self.step, **learner_state, "compute": self.compute.state_dict(),
                        "acc": self.acc.state_dict(), "health": self.health.state_dict(), "eval": self.last_eval,
                        "world": self.world.size, **rngs})

    def resume(self) -> bool:
        """Every rank loads and applies rank 0's checkpoint (model, optimizer, pool and prompt RNG are the same on
        every rank) and its own rollout RNG, as one step that falls back to the previous checkpoint when anything in
        it fails (Checkpoints.resume: a fresh start only while metrics.jsonl records no training); rank 0 alone
        mends metrics.jsonl."""
        steps = metric_steps(self.rd.metrics_path)
        self._touched = False
        st = self.ckpt.resume(lambda st: self._apply(st, steps), fresh_ok=not any(s > 0 for s in steps))
        touched = self.world.any(self._touched)  # (a collective: every rank is past its attempt, and rebuilds alike)
        self.ckpt.set_aside()
        if st is None:
            if touched:
                del self.learner, self.evaluator  # (a model's memory is freed before the next one is built)
                self._build()
            if self.lead:
                self.rd.keep_metrics_until(-1)  # a crash before the first checkpoint left nothing to keep
            return False
        if not self.lead:
            log.info("resumed from step %d", self.step)
            return True
        self.mend_metrics()
        log.info("resumed from step %d", self.step)
        return True

    def _apply(self, st: dict[str, Any], steps: list[int]) -> None:
        """Put checkpoint `st` into the run, or raise (BadCheckpoint, or whatever loading it raised)."""
        tr = self.cfg.train
        check_state(st, max_steps=tr.max_steps, eval_every=tr.eval_every, steps=steps)
        for key in ("model", "optim", "rng", "pool"):
            if key not in st:
                raise BadCheckpoint(f"it has no {key!r}")
        self._touched = True
        self.learner.load_state_dict(st)
        _check_optimizer(self.learner.opt)
        rngs = st.get("rollout_rngs") or []
        if self.world.size > 1:
            if len(rngs) == self.world.size:
                self.learner.rollout_gen.set_state(rngs[self.world.rank])
            else:  # saved by another number of ranks: a fresh stream per rank, for this step
                self.learner.rollout_gen.manual_seed(distributed.rank_seed(self.cfg.seed, self.world.rank, st["step"]))
                log.info("checkpoint saved by %s rank(s), resumed on %d: new rollout streams", st.get("world", 1),
                         self.world.size)
        self.compute.load_state_dict(st["compute"])
        self.acc.load_state_dict(st["acc"])
        self.health.load_state_dict(st["health"])
        self.step, self.last_eval = st["step"], st.get("eval")

    def stop_requested(self) -> bool:
        """Whether the run stops at this step boundary: a stop request on any rank stops every rank here."""
        return self.world.any(self.stop.is_set())

    # ---- the loop ----

    def main(self) -> dict[str, Any]:
        cfg, tr = self.cfg, self.cfg.train
        resumed = self.resume()
        info = {}
        if cfg.model.name == "tiny" and self.lead:
            from ablate.train.warmup import warmed_up_folder, warmup_info

            info = {k: v for k, v in warmup_info(warmed_up_folder(cfg, self.learner.task)).items() if k != "history"}
        if self.lead:
            ids = {} if self.rd.info_path.exists() else {"run_id": run_id(cfg), "arm_id": arm_id(cfg), "overrides": []}
            ranks = {"ranks": self.world.size} if self.world.size > 1 else {}
            self.rd.started(**ids, pid=os.getpid(), resumed_from=self.step if resumed else None,
                            logs={"train": str(self.rd.train_log)}, warmup=info, params=self.learner.policy.n_params,
                            max_steps=tr.max_steps, device=str(self.learner.device), **ranks)
        log.info("run %s: %d params, %s x %s per step, loss %s, offpolicy %s-%d, %d steps%s", self.rd.path.name,
                 self.learner.policy.n_params, cfg.batch.prompts, cfg.batch.generations, cfg.loss.name,
                 cfg.offpolicy.name, cfg.offpolicy.k, tr.max_steps, f" (resuming at {self.step})" if resumed else "")
        self.compute.start()
        feeder = make_feeder(self.learner, self.step)
        status, reason, stopping = "done", None, False
        try:
            if not resumed:
                self.log_eval()
            while self.step < tr.max_steps and not (stopping := self.stop_requested()):
                b = feeder.next(self.step)
                if self.world.any(b is None):  # the ranks share one pool: when it runs dry, it does for all
                    reason = "prompt pool exhausted (every prompt passed no-positive-resampling)"
                    log.info(reason)
                    break
                self.compute.add_generation(*self.learner.generated(b))
                m = self.learner.step(b, self.step)
                self.step += 1
                self.compute.add_training(int(m.pop("trained_tokens")))
                feeder.after_step(self.step)
                self.acc.add(m)
                self.after_step(m["truncation_rate"])
                if self.step % tr.checkpoint_every == 0 or self.step == tr.max_steps:
                    self.save()
            stopping = stopping or self.stop_requested()  # a stop that came while the pool ran dry
            if stopping and self.step < tr.max_steps:
                status, reason = "preempted", f"stopped by a signal at step {self.step}"
                self.save()
            elif reason:
                if self.step % tr.eval_every:
                    self.log_eval()
                self.save()
        except (Diverged, FloatingPointError) as e:
            status, reason = "diverged", str(e) if isinstance(e, Diverged) else f"{e} at step {self.step}"
            log.error("diverged: %s", reason)
        finally:
            feeder.close()
        self.compute.tick()
        summary = {"status": status, "step": self.step, "r0": self.health.r0,
                   "val_pass_rate": self.last_eval["val_pass_rate"] if self.last_eval else None, "reason": reason,
                   "gpu_hours": self.compute.gpu_hours, "samples": self.compute.samples,
                   "warnings": self.health.warnings, "max_lag": feeder.max_lag}
        if self.lead:
            self.rd.ended(status, reason=reason, step=self.step, max_lag=feeder.max_lag,
                          **({"diverged_reason": reason} if status == "diverged" else {}))
        log.info("run %s: %s at step %d (%s)", self.rd.path.name, status, self.step, reason or "max_steps reached")
        return summary
