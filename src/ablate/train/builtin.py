"""`trainer=ablate`: ablate's own trainer, the loop of one run over its session (see train/loop.py for how a run
starts and ends, train/session.py for what every trainer shares).

Every step the feeder hands over a batch (feeders.py) and the learner takes an optimizer step (step.py); the
session evaluates every `train.eval_every` steps; every `train.checkpoint_every` steps, at the end and on a stop
request, a checkpoint is saved (checkpoint.py). A stop request (stopping.py) checkpoints at the next step boundary
and ends the run `preempted`.

Resume: the newest checkpoint that loads, fits the model and agrees with metrics.jsonl, else the one before
(checkpoint.Checkpoints.resume; with none usable, a fresh start only while no training is recorded).
metrics.jsonl is cut back to the checkpoint's step by the session (RunSession.run).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ablate.config.schema import RunConfig
from ablate.topology.world import worker_seed
from ablate.train.checkpoint import BadCheckpoint, Checkpoints, check_state, fresh_ok
from ablate.train.feeders import Feeder, make_feeder
from ablate.train.session import RunSession, Start
from ablate.train.step import Batch, Learner

log = logging.getLogger("ablate.train")


def _check_optimizer(opt: torch.optim.Optimizer) -> None:
    """BadCheckpoint when a loaded optimizer state does not fit its parameters (torch checks the groups' sizes, not
    the moments' shapes: a wrong one would fail at the first step, far from its cause)."""
    for group in opt.param_groups:
        for p in group["params"]:
            for key, v in opt.state.get(p, {}).items():
                if torch.is_tensor(v) and v.dim() > 0 and v.shape != p.shape:
                    raise BadCheckpoint(
                        f"its optimizer state {key!r} has shape {tuple(v.shape)} for a parameter of "
                        f"shape {tuple(p.shape)}"
                    )


class BuiltinTrainer:
    """ablate's trainer over a run session (see the module docstring); a `session.Trainer`."""

    label = ""
    feeder: Feeder  # (the batches of the current train())

    @property
    def facts(self) -> dict[str, Any]:
        return {}

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.world = session.world
        self.ckpt = Checkpoints(session.rd.ckpt_dir, lead=session.lead)
        self._build()

    @staticmethod
    def preflight(cfg: RunConfig) -> None:
        """Nothing beyond what the session refuses for every trainer."""

    @property
    def scheme(self) -> str:
        cfg = self.session.cfg
        return f"loss {cfg.loss.name}, offpolicy {cfg.offpolicy.name}-{cfg.offpolicy.k}"

    @property
    def max_lag(self) -> int:
        return self.feeder.max_lag

    def _build(self) -> None:
        """The state a run starts from: policy, optimizer, counters at step 0 (built again when a checkpoint failed
        half-way through being applied and the run starts afresh)."""
        self.learner = Learner(self.session.cfg, self.world)
        self.session.attach(self.learner)

    # ---- checkpoints ----

    def state(self) -> dict[str, Any]:
        """The checkpoint of the run now. Every worker calls it (the workers' rollout RNG states, and under fsdp
        the shards, are gathered)."""
        rngs = {}
        if self.world.size > 1:
            rngs = {"rollout_rngs": self.world.gather(self.learner.rollout_gen.get_state())}
        learner_state = self.learner.state_dict()
        return {**self.session.state(), **learner_state, "world": self.world.size, **rngs}

    def save(self) -> None:
        """Every worker calls it; worker 0 writes (RunSession.save)."""
        st = self.state()
        self.session.save(lambda: self.ckpt.save(st))

    def resume(self, steps: list[int]) -> bool:
        """Every worker loads and applies worker 0's checkpoint (model, optimizer, pool and prompt RNG are the same
        on every worker) and its own rollout RNG, as one step that falls back to the previous checkpoint when
        anything in it fails (Checkpoints.resume: a fresh start only while metrics.jsonl records no training)."""
        s = self.session
        self._touched = False
        st = self.ckpt.resume(lambda st: self._apply(st, steps), fresh_ok=fresh_ok(steps))
        touched = self.world.any(self._touched)  # (a collective: every worker is past its attempt, and rebuilds)
        self.ckpt.set_aside()
        if st is None:
            if touched:
                s.release()
                del self.learner  # (a model's memory is freed before the next one is built)
                self._build()
            return False
        log.info("resumed from step %d", s.step)
        return True

    def _apply(self, st: dict[str, Any], steps: list[int]) -> None:
        """Put checkpoint `st` into the run, or raise (BadCheckpoint, or whatever loading it raised)."""
        s, tr = self.session, self.session.cfg.train
        check_state(st, max_steps=tr.max_steps, eval_every=tr.eval_every, steps=steps)
        for key in ("model", "optim", "rng", "pool"):
            if key not in st:
                raise BadCheckpoint(f"it has no {key!r}")
        self._touched = True
        self.learner.load_state_dict(st)
        _check_optimizer(self.learner.optimizer)
        rngs = st.get("rollout_rngs") or []
        if self.world.size > 1:
            if len(rngs) == self.world.size:
                self.learner.rollout_gen.set_state(rngs[self.world.rank])
            else:  # saved by another number of workers: a fresh stream per worker, for this step
                self.learner.rollout_gen.manual_seed(worker_seed(s.cfg.seed, self.world.rank, st["step"]))
                log.info(
                    "checkpoint saved by %s rank(s), resumed on %d: new rollout streams",
                    st.get("world", 1),
                    self.world.size,
                )
        s.load_state(st)

    # ---- the loop ----

    def train(self, start: Start) -> tuple[bool, str | None]:
        s, tr = self.session, self.session.cfg.train
        start.clock()  # the feeder's set-up (a sampler, a pipeline's copy of the policy) is the run's time
        self.feeder = feeder = make_feeder(self.learner, s.step)
        reason, stopping = None, False
        try:
            start.evaluate()
            while s.step < tr.max_steps and not (stopping := s.stop_requested()):
                b = feeder.next(s.step)
                dry = self.world.any(b is None)  # the workers share one pool: when it runs dry, it does for all
                if dry or b is None:
                    reason = "prompt pool exhausted (every prompt passed no-positive-resampling)"
                    log.info(reason)
                    break
                self._step(b)
            stopping = stopping or s.stop_requested()  # a stop that came while the pool ran dry
            stopped = stopping and s.step < tr.max_steps
            if stopped:
                self.save()
            elif reason:
                if s.step % tr.eval_every:
                    s.log_eval()
                self.save()
        finally:
            feeder.close()
        return stopped, reason

    def _step(self, b: Batch) -> None:
        """One optimizer step on batch `b`, counted, evaluated and checkpointed when due."""
        s, tr = self.session, self.session.cfg.train
        s.compute.add_generation(*self.learner.generated(b))
        m = self.learner.step(b, s.step)
        s.step += 1
        s.compute.add_training(int(m.pop("trained_tokens")))
        self.feeder.after_step(s.step)
        s.acc.add(m)
        s.after_step(m["truncation_rate"])
        if s.step % tr.checkpoint_every == 0 or s.step == tr.max_steps:
            self.save()
