"""The world of a data-parallel run: this process's place among the run's workers (torch.distributed ranks), the
process group they share, and the collectives the trainer uses. The contract the trainers keep over it is in
docs/distributed.md.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """This process's place among the run's workers; with size 1 every collective is the identity."""

    rank: int = 0
    size: int = 1
    device: str = "cpu"  # where collective tensors live (NCCL needs CUDA tensors)

    @property
    def lead(self) -> bool:
        """Worker 0: the one that writes the run directory."""
        return self.rank == 0

    def shard(self, items: Sequence[Any]) -> list[Any]:
        """This worker's share of `items` (every size-th item from its rank): groups stay whole."""
        return list(items[self.rank :: self.size])

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """x summed over workers (a new tensor on x's device)."""
        if self.size == 1:
            return x
        y = x.detach().to(self.device, copy=True)
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
        return y.to(x.device)

    def totals(self, values: Sequence[float]) -> list[float]:
        """Floats summed over workers, in one float64 all-reduce."""
        if self.size == 1:
            return [float(v) for v in values]
        return self.sum(torch.tensor(list(values), dtype=torch.float64)).tolist()

    def any(self, flag: bool) -> bool:
        """Whether any worker's flag is set (every worker gets the same answer)."""
        return flag if self.size == 1 else self.totals([float(bool(flag))])[0] > 0

    def max(self, n: int) -> int:
        if self.size == 1:
            return int(n)
        y = torch.tensor([int(n)], dtype=torch.int64, device=self.device)
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        return int(y.item())

    def gather(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every worker's x (same shape and dtype on every worker), in rank order."""
        if self.size == 1:
            return [x]
        y = x.to(self.device)
        out = [torch.empty_like(y) for _ in range(self.size)]
        dist.all_gather(out, y)
        return [o.cpu() for o in out]

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()


def current() -> World:
    """The World of this process: from the process group when one is initialised, else a single worker."""
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    backend = dist.get_backend()
    return World(
        rank=dist.get_rank(),
        size=dist.get_world_size(),
        device=f"cuda:{torch.cuda.current_device()}" if backend == "nccl" else "cpu",
    )


def worker_seed(seed: int, rank: int, salt: int = 0) -> int:
    """A worker's own generator seed, derived from the run's (worker 0 of a multi-worker run differs from a
    single-process run's stream on purpose: rollouts and prompt draws use separate generators there)."""
    return (int(seed) * 1_000_003 + 7_919 * (int(rank) + 1) + int(salt)) % (2**63 - 1)


def backend_for(device: str) -> str:
    """gloo for CPU workers, NCCL when the workers train on CUDA."""
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return "nccl" if cuda else "gloo"


def init(backend: str, timeout_s: float) -> World:
    """Join the process group from the env:// variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)."""
    if backend == "nccl":  # a task that sees one GPU (SLURM's gpus_per_task, or a local start) uses it; else its
        # local rank's
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count()))
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return current()


def init_from_submitit(backend: str, timeout_s: float) -> World:
    """Inside a multi-task SLURM job: export submitit's view of the job (rank, world size, master node) to the
    env:// variables and join the process group. CUDA_VISIBLE_DEVICES is left as SLURM set it."""
    import submitit

    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return init(backend, timeout_s)


def shutdown() -> None:
    """Leave the process group. A vLLM engine in this process (rollout=vllm) built its groups inside it, so vLLM
    takes its own down first (else its exit-time cleanup trips over a group that is gone)."""
    if "vllm" in sys.modules:
        with contextlib.suppress(Exception):
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES entries."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [d.strip() for d in env.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
