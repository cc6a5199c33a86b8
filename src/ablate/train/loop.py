"""One RL run: a typed config in, a run directory out. `run()` is what `ablate train` and every launched job execute.

The loop, every step: the feeder hands over a batch (feeders.py), the learner takes an optimizer step (step.py);
every `train.eval_every` steps the evaluator measures the held-out pass rate and one line is appended to
metrics.jsonl (evaluate.py); every `train.checkpoint_every` steps, at the end and on a stop request, a checkpoint is
saved (checkpoint.py). The run directory's files are written only through ablate.rundir.

Resume: a run directory with a checkpoint continues from it. metrics.jsonl is cut back to the lines with step <= the
checkpoint's step (lines after it belong to work that is redone), and the checkpoint's own evaluation line is
written again if a crash tore it, so no line is lost or duplicated.

Stop requests (stopping.py): at the next step boundary the run checkpoints and returns status `preempted`. It never
talks to a scheduler: the launcher's job side decides what a stop means (submitit requeues the job).

Status at the end: done (train.max_steps reached, or the prompt pool exhausted), preempted, diverged (a non-finite
loss, gradient or sampler logit, or a collapsed pass rate: `reason` says which), or failed (an exception, recorded
in run.json with its class, message and traceback, then re-raised).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from ablate import store
from ablate.config import RunConfig
from ablate.errors import UserError
from ablate.identity import arm_id, canonical, run_id
from ablate.rundir import METRICS, DirectoryGone, RunDir, cause_of, no_space
from ablate.train.checkpoint import Checkpoints
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
    """
    rd = preflight(config, run_dir)
    torch.set_num_threads(int(threads))
    with rd.writer():
        _check_config(config, rd)  # again, now that no one else can write it
        store.atomic_write_text(rd.config_path, OmegaConf.to_yaml(OmegaConf.create(config.to_dict())))
        handler = _attach_log(rd)
        try:
            with stop_on_signals(stop) as stop_event:
                return _guarded(config, rd, stop_event)
        finally:
            log.removeHandler(handler)
            handler.close()


def _guarded(config: RunConfig, rd: RunDir, stop: threading.Event) -> dict[str, Any]:
    """The loop, with whatever stops it recorded in run.json (nothing may stay "running")."""
    try:
        return RunLoop(config, rd, stop).main()
    except DirectoryGone:
        raise  # another directory is at this path now: write nothing to it
    except KeyboardInterrupt:
        rd.ended("preempted", reason="interrupted: resumes from the last checkpoint")
        raise
    except UserError as e:  # bad input found once the run had started: say so in run.json, not "running"
        rd.try_failed("input", e)
        raise
    except Exception as e:
        if no_space(e):
            rd.try_failed("no_space", e)
            raise UserError(f"no space left on the device while writing {rd.path}: free some space and run again "
                            "(the run resumes from its last checkpoint)") from e
        rd.try_failed(cause_of(e), e)
        log.exception("run failed")
        raise


def preflight(config: RunConfig, run_dir: Path | str) -> RunDir:
    """What can be refused before anything is written: a missing GPU, a run directory that is a file (or under one),
    or one that holds another run. Raises UserError."""
    rd = RunDir(run_dir)
    resolve_device(config.train.device)
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


def _attach_log(rd: RunDir) -> logging.Handler:
    rd.logs_dir.mkdir(parents=True, exist_ok=True)
    log.setLevel(logging.INFO)
    h = _LogFile(rd.train_log)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(h)
    return h


class RunLoop:
    """The loop of one run over its run directory (see the module docstring)."""

    def __init__(self, cfg: RunConfig, rd: RunDir, stop: threading.Event) -> None:
        self.cfg, self.rd, self.stop = cfg, rd, stop
        self.learner = Learner(cfg)
        self.evaluator = Evaluator(self.learner)
        self.ckpt = Checkpoints(rd.ckpt_dir)
        dev = self.learner.device
        self.compute = Compute(devices=device_count() if dev.type == "cuda" else 1, params=self.learner.policy.n_params)
        self.acc = Accumulator()
        self.health = Health()
        self.step = 0
        self.last_eval: dict[str, Any] | None = None

    # ---- checkpoints ----

    def save(self) -> None:
        self.rd.guard()
        self.ckpt.save({"step": self.step, **self.learner.state_dict(), "compute": self.compute.state_dict(),
                        "acc": self.acc.state_dict(), "health": self.health.state_dict(), "eval": self.last_eval})

    def resume(self) -> bool:
        st = self.ckpt.load()
        if st is None:
            self.rd.keep_metrics_until(-1)  # a crash before the first checkpoint left nothing to keep
            return False
        self.learner.load_state_dict(st)
        self.compute.load_state_dict(st["compute"])
        self.acc.load_state_dict(st["acc"])
        self.health.load_state_dict(st["health"])
        self.step, self.last_eval = st["step"], st["eval"]
        kept = self.rd.keep_metrics_until(self.step)
        if self.last_eval is not None and not any(r.get("step") == self.last_eval["step"] for r in kept):
            self.rd.append_metrics(self.last_eval)  # its line was torn by the crash: write it again
        log.info("resumed from step %d", self.step)
        return True

    # ---- evaluation ----

    def log_eval(self) -> None:
        self.compute.tick()
        rate = self.evaluator.pass_rate(self.step)
        self.compute.tick()
        means = self.acc.means()
        rec: dict[str, Any] = {"step": self.step, "gpu_hours": self.compute.gpu_hours, "flops": self.compute.flops,
                               "samples": self.compute.samples, "val_pass_rate": rate, "val_n": self.evaluator.n,
                               "wall_s": self.compute.wall_s}
        rec.update({k: v for k, v in means.items() if k in METRICS and k not in rec})
        self.rd.append_metrics(rec)
        self.last_eval = rec
        self.acc = Accumulator()
        log.info("eval step %d: val_pass_rate %.3f  (%s)", self.step, rate,
                 ", ".join(f"{k} {v:.3g}" for k, v in rec.items() if k not in ("step", "val_pass_rate")))
        self.health.after_eval(rate, means.get("train_pass_rate", 1.0), self.step)
        self.rd.progress(step=self.step, val_pass_rate=rate, r0=self.health.r0, samples=self.compute.samples,
                         gpu_hours=self.compute.gpu_hours)

    # ---- the loop ----

    def main(self) -> dict[str, Any]:
        cfg, tr = self.cfg, self.cfg.train
        resumed = self.resume()
        info = {}
        if cfg.model.name == "tiny":
            from ablate.train.warmup import warmed_up_folder, warmup_info

            info = {k: v for k, v in warmup_info(warmed_up_folder(cfg, self.learner.task)).items() if k != "history"}
        ids = {} if self.rd.info_path.exists() else {"run_id": run_id(cfg), "arm_id": arm_id(cfg), "overrides": []}
        self.rd.started(**ids, pid=os.getpid(), resumed_from=self.step if resumed else None,
                        logs={"train": str(self.rd.train_log)}, warmup=info, params=self.learner.policy.n_params,
                        max_steps=tr.max_steps, device=str(self.learner.device))
        log.info("run %s: %d params, %s x %s per step, loss %s, offpolicy %s-%d, %d steps%s", self.rd.path.name,
                 self.learner.policy.n_params, cfg.batch.prompts, cfg.batch.generations, cfg.loss.name,
                 cfg.offpolicy.name, cfg.offpolicy.k, tr.max_steps, f" (resuming at {self.step})" if resumed else "")
        self.compute.start()
        feeder = make_feeder(self.learner, self.step)
        status, reason = "done", None
        try:
            if not resumed:
                self.log_eval()
            while self.step < tr.max_steps and not self.stop.is_set():
                b = feeder.next(self.step)
                if b is None:
                    reason = "prompt pool exhausted (every prompt passed no-positive-resampling)"
                    log.info(reason)
                    break
                self.compute.add_generation(int(b.ro.prompt_mask.sum()), int(b.ro.present.sum()), b.ro.group.numel())
                m = self.learner.step(b, self.step)
                self.step += 1
                self.compute.add_training(int(m.pop("trained_tokens")))
                feeder.after_step(self.step)
                self.acc.add(m)
                warning = self.health.after_step(m["truncation_rate"], self.step)
                if warning:
                    log.warning(warning)
                    self.rd.progress(warnings=self.health.warnings, truncation_warning=True)
                if self.step % tr.eval_every == 0 or self.step == tr.max_steps:
                    self.log_eval()
                if self.step % tr.checkpoint_every == 0 or self.step == tr.max_steps:
                    self.save()
            if self.stop.is_set() and self.step < tr.max_steps:
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
        self.rd.ended(status, reason=reason, step=self.step, max_lag=feeder.max_lag,
                      **({"diverged_reason": reason} if status == "diverged" else {}))
        log.info("run %s: %s at step %d (%s)", self.rd.path.name, status, self.step, reason or "max_steps reached")
        return summary
