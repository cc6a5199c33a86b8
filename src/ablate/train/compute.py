"""Compute accounting of a run: cumulative device-hours, estimated FLOPs, samples.

The x-axis of every fit is compute, so it must survive restarts: `Compute` is part of the checkpoint and
keeps counting from where the run stopped (the wall-clock of a killed, unsaved segment is lost, as it is on
a real cluster's accounting of a preempted job's useful work).

- gpu_hours: wall-clock seconds of the run x devices it holds / 3600. A CPU run counts 1 device
  (ScaleRL reports GPU-hours; on a laptop "device-hours" is the honest equivalent); a data-parallel run one
  device per rank.
- flops: 2 * params per token a forward pass processes, 6 * params per token trained (forward + backward;
  Kaplan et al. 2020's approximation). Counted on the tokens the recipe computes: a prompt prefilled once for
  its group counts once, a completion dropped by zero-variance filtering is not trained and does not count. A
  kept completion whose advantage is zero counts as trained, although the built-in trainer skips its exactly-zero
  gradient (step.py): the compute axis is the recipe's, the same for every trainer (gpu_hours, wall-clock, is not).
- samples: completions generated for training (evaluation excluded).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field


@dataclass
class Compute:
    devices: int = 1
    params: int = 0
    wall_s: float = 0.0
    flops: float = 0.0
    samples: int = 0
    _t0: float | None = field(default=None, repr=False, compare=False)

    def start(self) -> None:
        """Start (or resume) the wall clock."""
        self._t0 = time.perf_counter()

    def tick(self) -> None:
        """Fold the time since the last tick into wall_s."""
        now = time.perf_counter()
        if self._t0 is not None:
            self.wall_s += now - self._t0
        self._t0 = now

    @property
    def gpu_hours(self) -> float:
        return self.wall_s * self.devices / 3600.0

    def add_generation(self, prompt_tokens: float, new_tokens: float, completions: int) -> None:
        """A training rollout batch: prompt tokens prefilled, tokens decoded, completions made (the samples)."""
        self.flops += 2.0 * self.params * (prompt_tokens + new_tokens)
        self.samples += completions

    def add_training(self, tokens: float) -> None:
        """Tokens that went through forward + backward in an optimizer step."""
        self.flops += 6.0 * self.params * tokens

    def state_dict(self) -> dict:
        self.tick()
        d = asdict(self)
        d.pop("_t0")
        return d

    def load_state_dict(self, d: dict) -> None:
        for k in ("wall_s", "flops", "samples"):
            setattr(self, k, type(getattr(self, k))(d[k]))


def device_count() -> int:
    """Accelerators this process holds: CUDA devices visible to it, else 1 (a CPU run counts one device)."""
    import torch

    return max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1
