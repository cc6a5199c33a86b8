"""Evaluation and the run's health checks: the held-out pass rate, divergence, and ScaleRL's truncation warning.

- `Evaluator.pass_rate(step)`: mean@k on the validation split at the recipe's temperature, under a generator seeded
  by (run seed, step), so an evaluation is reproducible and a resumed run's evaluations match an uninterrupted one.
- `Health`: a pass rate that collapses to <= 0.01 from an R0 above it, on the validation split AND on the training
  completions since the last evaluation, is divergence (a collapsed policy gets no reward, hence no gradient, and
  never recovers; requiring both keeps a small, noisy validation split from triggering it). Truncation above 10%
  of completions over the recent steps is ScaleRL's instability sign: a warning, not a stop.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ablate.storage.metricsfile import TRUNCATION_WARN
from ablate.topology.world import worker_seed
from ablate.train.step import Diverged, Learner

COLLAPSE_PASS_RATE = 0.01
TRUNCATION_WINDOW = 10  # steps over which the truncation rate is averaged
TRUNCATION_MIN_STEPS = 5  # steps needed before the average is trusted


class Evaluator:
    """The held-out pass rate of the learner's current weights."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.sampler = learner.sampler()
        self.k = learner.cfg.train.eval_k

    @property
    def n(self) -> int:
        """Graded samples behind one evaluation (validation prompts x k): the `val_n` metric."""
        return len(self.learner.val) * self.k

    @torch.no_grad()
    def pass_rate(self, step: int) -> float:
        """mean@k over the validation split. Data-parallel: each rank grades its share of the prompts under its
        own (seed, step, rank) generator and the counts are summed, so every rank returns the same rate."""
        lr, world = self.learner, self.learner.world
        seed = 10_000_019 * (lr.cfg.seed + 1) + step
        g = torch.Generator().manual_seed(seed if world.size == 1 else worker_seed(seed, world.rank))
        val = world.shard(lr.val)
        correct = 0.0
        if val:
            ro = self.sampler.generate([p.prompt for p in val], self.k, lr.spec(len(val) * self.k, None), g)
            _, ok = lr.score(ro, [p.answer for p in val])
            if world.size == 1:
                return float(ok.float().mean())
            correct = float(ok.double().sum())
        return world.totals([correct])[0] / self.n


class Accumulator:
    """Means of per-step training metrics since the last evaluation (checkpointed with the run)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, d: dict[str, float]) -> None:
        for k, v in d.items():
            if v is None or not math.isfinite(v):
                continue
            self.sums[k] = self.sums.get(k, 0.0) + float(v)
            self.counts[k] = self.counts.get(k, 0) + 1

    def means(self) -> dict[str, float]:
        return {k: self.sums[k] / self.counts[k] for k in self.sums}

    def state_dict(self) -> dict[str, Any]:
        return {"sums": dict(self.sums), "counts": dict(self.counts)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.sums, self.counts = dict(d["sums"]), dict(d["counts"])


class Health:
    """R0, the divergence check and the truncation warning (see the module docstring)."""

    def __init__(self) -> None:
        self.r0: float | None = None
        self.trunc_window: list[float] = []
        self.warnings: list[str] = []
        self.last_warning_kind: str | None = None  # what warnings[-1] warns of ("truncation")

    def after_eval(self, rate: float, train_pass: float, step: int) -> None:
        """Record R0 at the first evaluation; raise Diverged on a collapse."""
        if self.r0 is None:
            self.r0 = rate
        if step > 0 and rate <= COLLAPSE_PASS_RATE < self.r0 and train_pass <= COLLAPSE_PASS_RATE:
            raise Diverged(
                f"pass rate collapsed from R0={self.r0:.3f} to {rate:.3f} (validation) and "
                f"{train_pass:.3f} (training) at step {step}"
            )

    def after_step(self, truncation_rate: float, step: int) -> str | None:
        """A new truncation warning (once per episode above the threshold), or None."""
        self.trunc_window = (self.trunc_window + [truncation_rate])[-TRUNCATION_WINDOW:]
        recent = sum(self.trunc_window) / len(self.trunc_window)
        if len(self.trunc_window) < TRUNCATION_MIN_STEPS or recent <= TRUNCATION_WARN:
            return None
        if self.last_warning_kind == "truncation":
            return None
        msg = f"truncation rate {recent:.0%} over the last {len(self.trunc_window)} steps (> 10%) at step {step}"
        self.warnings.append(msg)
        self.last_warning_kind = "truncation"
        return msg

    def state_dict(self) -> dict[str, Any]:
        return {
            "r0": self.r0,
            "trunc_window": list(self.trunc_window),
            "warnings": list(self.warnings),
            "last_warning_kind": self.last_warning_kind,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.r0, self.trunc_window, self.warnings = d["r0"], list(d["trunc_window"]), list(d["warnings"])
        # a checkpoint from before the kind was kept: every warning it holds is a truncation warning
        self.last_warning_kind = d.get("last_warning_kind", "truncation" if self.warnings else None)
