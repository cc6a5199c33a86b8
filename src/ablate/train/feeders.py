"""Off-policy schemes (ScaleRL §3): which weights generate each training batch.

    feeder = make_feeder(learner, step)   # PPOFeeder | InlinePipelineFeeder | ThreadPipelineFeeder
    batch = feeder.next(step)             # the batch for optimizer step `step` (None: the prompt pool is exhausted)
    feeder.after_step(step)               # the trainer took a step: `step` steps taken now
    feeder.close()

- `ppo` (PPO-off-policy-k): generate k batches with the current weights (theta_old), then take k optimizer steps on
  them; the IS ratio is against the generating policy's log-probs, kept per token by the sampler. k = 1 is
  on-policy.
- `pipeline` (PipelineRL-k): the generator has its own copy of the weights; new weights reach it after every
  optimizer step, and a batch made with version v is trained at version <= v + k (the trainer never runs more
  than k steps ahead). Two ways to run it (`offpolicy.generator`):
  - `thread`: a generator thread keeps generating into a queue of at most k batches, concurrently with training
    (the default with vLLM or on CUDA). Not bit-reproducible: batch contents depend on timing. Not with several
    ranks and no-positive-resampling: each rank's thread would draw from the pool at its own moment, so the ranks
    would not agree on the step's prompts (validation refuses it; `auto` picks `inline` there).
  - `inline`: generator and trainer take turns in one thread, in the steady state of a generator faster than the
    trainer: every batch is trained exactly k steps after the weights that made it (the first k batches come from
    version 0). Deterministic given the seed; with the torch sampler on a CPU (`auto`) the two could only share
    the run's core anyway.
Every feeder checks the staleness bound on every batch it hands out (`check_lag`) and tracks the largest lag.
A checkpoint drops whatever batches are queued; the resumed run regenerates them from its current weights.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
from typing import Any

import torch

from ablate.topology.world import worker_seed
from ablate.train.policy import Policy
from ablate.train.step import Batch, Learner

log = logging.getLogger("ablate.train")


class Feeder:
    """What every feeder shares: the lag bound and the largest lag seen."""

    def __init__(self, learner: Learner, k: int) -> None:
        self.learner, self.k = learner, k
        self.max_lag = 0

    def check_lag(self, b: Batch, step: int) -> Batch:
        """`b` after checking that it is at most k steps stale at `step` (a broken bound must never pass silently)."""
        lag = step - b.version
        if lag > self.k:
            raise RuntimeError(f"off-policy lag {lag} exceeds k={self.k}")
        self.max_lag = max(self.max_lag, lag)
        return b

    def next(self, step: int) -> Batch | None:
        raise NotImplementedError

    def after_step(self, step: int) -> None:
        pass

    def close(self) -> None:
        pass


class PPOFeeder(Feeder):
    """PPO-off-policy-k: k batches from the current weights (theta_old), then k steps on them, in order."""

    def __init__(self, learner: Learner, k: int) -> None:
        super().__init__(learner, k)
        self.sampler = learner.sampler()  # over the trained policy: it generates with the weights of the round's start
        self.buf: list[Batch] = []

    def next(self, step: int) -> Batch | None:
        if not self.buf:
            self.sampler.version = step
            for _ in range(self.k):
                b = self.learner.make_batch(self.sampler, self.learner.gen, self.learner.rollout_gen)
                if b is None:
                    break
                self.buf.append(b)
        if not self.buf:
            return None
        # PPO's bound is k - 1: the last batch of a round is trained k - 1 steps after the weights that made it
        return self.check_lag(self.buf.pop(0), step)


def _generator_side(learner: Learner, step: int) -> tuple[Any, torch.Generator, torch.Generator | None]:
    """PipelineRL's generator: a sampler over its own copy of the weights (version = `step`) and its own RNGs, one
    for the prompt draws (the same on every rank) and, in a data-parallel run, one for this rank's rollouts."""
    pol = learner.sampled  # the trained weights, whole (under fsdp: the copy refreshed after every step)
    sampler = learner.sampler(Policy(copy.deepcopy(pol.model), pol.tokenizer, pol.head_dtype))
    sampler.version = step
    seed = learner.cfg.seed * 7919 + step + 1
    world = learner.world
    rollouts = None if world.size == 1 else torch.Generator().manual_seed(worker_seed(seed, world.rank))
    return sampler, torch.Generator().manual_seed(seed), rollouts


class InlinePipelineFeeder(Feeder):
    """PipelineRL-k, generator and trainer in turn (see the module docstring)."""

    def __init__(self, learner: Learner, k: int, step: int) -> None:
        super().__init__(learner, k)
        self.sampler, self.gen, self.rollout_gen = _generator_side(learner, step)
        self.buf: list[Batch] = []
        self.exhausted = False

    def _make(self) -> None:
        b = None if self.exhausted else self.learner.make_batch(self.sampler, self.gen, self.rollout_gen)
        if b is None:
            self.exhausted = True
        else:
            self.buf.append(b)

    def next(self, step: int) -> Batch | None:
        while not self.exhausted and len(self.buf) < self.k:  # the start (or a resume): k batches from these weights
            self._make()
        if not self.buf:
            return None
        b = self.buf.pop(0)
        self._make()  # the generator keeps k batches in flight, made with the weights of this step
        return self.check_lag(b, step)

    def after_step(self, step: int) -> None:
        """The new weights (version = steps taken) reach the generator before its next batch."""
        sd = {k: v.detach() for k, v in self.learner.sampled.model.state_dict().items()}
        self.sampler.load_weights(sd, step)

    def close(self) -> None:
        self.buf.clear()


class ThreadPipelineFeeder(Feeder):
    """PipelineRL-k with a generator thread (see the module docstring): the generator starts a batch only when the
    queue has room, and the queue holds at most k batches."""

    def __init__(self, learner: Learner, k: int, step: int) -> None:
        super().__init__(learner, k)
        self.sampler, self.gen, self.rollout_gen = _generator_side(learner, step)
        self.q: queue.Queue = queue.Queue()
        self.room = threading.Semaphore(k)  # batches the generator may start before the trainer takes one
        self.lock = threading.Lock()
        self.latest: tuple[int, dict] | None = None
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="pipeline-generator", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.room.acquire(timeout=0.05):
                    continue
                with self.lock:
                    latest, self.latest = self.latest, None
                if latest is not None:
                    self.sampler.load_weights(latest[1], latest[0])
                b = self.learner.make_batch(self.sampler, self.gen, self.rollout_gen)
                self.q.put(b)
                if b is None:
                    return
        except BaseException as e:  # surfaced in the trainer thread
            self.error = e
            self.q.put(None)

    def next(self, step: int) -> Batch | None:
        while True:
            try:
                b = self.q.get(timeout=0.5)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.q.empty():
                    b = None
                    break
        if self.error is not None:
            raise self.error
        if b is None:
            return None
        self.room.release()
        return self.check_lag(b, step)

    def after_step(self, step: int) -> None:
        """Publish the trainer's new weights; the generator loads them before its next batch."""
        sd = {k: v.detach().clone() for k, v in self.learner.sampled.model.state_dict().items()}
        with self.lock:
            self.latest = (step, sd)

    def close(self) -> None:
        self.stop.set()
        try:
            while True:
                self.q.get_nowait()
                self.room.release()
        except queue.Empty:
            pass
        self.thread.join(timeout=30)


def make_feeder(learner: Learner, step: int) -> Feeder:
    """The recipe's off-policy scheme, starting at `step` (0, or the step a resumed run continues from)."""
    off = learner.cfg.offpolicy
    if off.name == "ppo":
        return PPOFeeder(learner, off.k)
    mode = off.generator
    if mode == "auto":  # on one CPU the generator thread would only time-share the trainer's core; across ranks
        # with no-positive-resampling, threads would draw from the shared pool at different moments (validation
        # refuses `thread` there), so the ranks take turns with their generators
        cpu = learner.cfg.rollout.name == "torch" and learner.device.type == "cpu"
        shared_pool = learner.world.size > 1 and learner.cfg.filtering.no_positive_resampling
        mode = "inline" if cpu or shared_pool else "thread"
    log.info("PipelineRL-%d: generator %s", off.k, mode)
    return (
        InlinePipelineFeeder(learner, off.k, step) if mode == "inline" else ThreadPipelineFeeder(learner, off.k, step)
    )
