"""Data-parallel runs: `resources.nproc` x `resources.nodes` trainer ranks over torch.distributed.

Who starts the ranks:
- under SLURM, submitit starts one task per rank and each task joins the process group from SLURM's environment
  (`init_from_submitit`: submitit's TorchDistributedEnvironment names rank, world size and the master node);
- anywhere else, `run()` spawns the ranks on this machine (`spawn`, torchrun-style: one fresh interpreter per
  rank, a free port on 127.0.0.1, env:// rendezvous) and waits for them.
The backend is gloo on the CPU and NCCL on CUDA.

What a rank does (the contract the trainer keeps, written out in docs/distributed.md):
- every rank draws the step's prompts from the same pool with the same generator, so all ranks agree on the
  step's G prompt groups, and generates only its share of them (`World.shard`: a group never splits, so
  group-centred advantages are exact); its rollouts come from its own generator (`rank_seed`);
- the normalisers that span the batch (the batch std of `normalization=batch`, the sample/prompt/token counts of
  the aggregation) are summed over ranks before use, so each rank's loss is its share of the one-process loss;
- DDP all-reduces the gradients; the pool, the step's metrics and the compute counters are reduced the same way,
  so every rank holds the same pool and takes the same decisions (stop, divergence, end of pool);
- rank 0 alone writes metrics.jsonl, run.json and the checkpoints; every rank keeps its own log
  (`logs/rank-<r>.log`) and, when it fails, a report (RunDir.write_rank_report) that says which rank broke
  first and why.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.distributed as dist

from ablate import store

log = logging.getLogger("ablate.train")


@dataclass(frozen=True)
class World:
    """This process's place among the run's ranks; with size 1 every collective is the identity."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: str = "cpu"  # where collective tensors live (NCCL needs CUDA tensors)

    @property
    def lead(self) -> bool:
        """Rank 0: the one that writes the run directory."""
        return self.rank == 0

    def shard(self, items: Sequence[Any]) -> list[Any]:
        """This rank's share of `items` (every size-th item from its rank): groups stay whole."""
        return list(items[self.rank :: self.size])

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """x summed over ranks (a new tensor on x's device)."""
        if self.size == 1:
            return x
        y = x.detach().to(self.device, copy=True)
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
        return y.to(x.device)

    def totals(self, values: Sequence[float]) -> list[float]:
        """Floats summed over ranks, in one float64 all-reduce."""
        if self.size == 1:
            return [float(v) for v in values]
        return self.sum(torch.tensor(list(values), dtype=torch.float64)).tolist()

    def any(self, flag: bool) -> bool:
        """Whether any rank's flag is set (every rank gets the same answer)."""
        return flag if self.size == 1 else self.totals([float(bool(flag))])[0] > 0

    def max(self, n: int) -> int:
        if self.size == 1:
            return int(n)
        y = torch.tensor([int(n)], dtype=torch.int64, device=self.device)
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        return int(y.item())

    def gather(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's x (same shape and dtype on every rank), in rank order."""
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
    """The World of this process: from the process group when one is initialised, else a single rank."""
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    backend = dist.get_backend()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return World(rank=dist.get_rank(), size=dist.get_world_size(), local_rank=local,
                 device=f"cuda:{torch.cuda.current_device()}" if backend == "nccl" else "cpu")


def rank_seed(seed: int, rank: int, salt: int = 0) -> int:
    """A rank's own generator seed, derived from the run's (rank 0 of a multi-rank run differs from a
    single-process run's stream on purpose: rollouts and prompt draws use separate generators there)."""
    return (int(seed) * 1_000_003 + 7_919 * (int(rank) + 1) + int(salt)) % (2**63 - 1)


def backend_for(device: str) -> str:
    """gloo for CPU ranks, NCCL when the ranks train on CUDA."""
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return "nccl" if cuda else "gloo"


def init(backend: str, timeout_s: float) -> World:
    """Join the process group from the env:// variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)."""
    if backend == "nccl":  # a task that sees one GPU (SLURM's gpus_per_task, or `spawn`) uses it; else its local rank's
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


# ---- local spawning ----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Spawned:
    """What `spawn` saw: rank 0's return value, each rank's exit code (None: this function had to kill it) and
    when each exit was seen (time.time())."""

    result: Any
    codes: dict[int, int | None]
    ended_at: dict[int, float]


EXIT_GRACE_S = 60.0
"""After a rank has exited, how long the others may take to end by themselves before they are killed: far more
than a normal teardown takes, and a peer that waits on a dead rank in a collective (NCCL notices a dead peer only
at its timeout) is not left hanging."""


def spawn(target: str, size: int, payload: dict[str, Any], workdir: Path, *, backend: str, timeout_s: float,
          stop: threading.Event) -> Spawned:
    """Run `target` ("module:function", called as fn(world, stop=event, **payload) with a JSON payload) on `size`
    local ranks, each a fresh interpreter (`python -m ablate.train.rank_entry`, as torchrun starts its workers),
    and wait for all of them.

    When `stop` is set (a signal reached this process), the ranks get SIGTERM, which they take as a stop request
    from the moment they start (they agree on a step boundary, checkpoint and return). Once a rank has exited, the
    others have EXIT_GRACE_S to follow before they are killed."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = workdir / "ranks.json"
    result = workdir / "rank-0.result.json"
    result.unlink(missing_ok=True)
    spec.write_text(json.dumps({"target": target, "payload": payload, "result": str(result)}))
    ready = [workdir / f"rank-{r}.ready" for r in range(size)]  # rank_entry: its signal handlers are in place
    for f in ready:
        f.unlink(missing_ok=True)
    port = _free_port()
    src = str(Path(__file__).resolve().parents[2])  # the ranks import this very ablate
    gpus = visible_gpus() if backend == "nccl" else []
    procs = []
    for r in range(size):
        one_gpu = {"CUDA_VISIBLE_DEVICES": gpus[r]} if gpus else {}  # each rank (and its vLLM engine) on its own GPU
        env = {**os.environ, **one_gpu, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
               "WORLD_SIZE": str(size), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(size),
               "ABLATE_BACKEND": backend, "ABLATE_COLLECTIVE_TIMEOUT_S": str(timeout_s),
               "PYTHONPATH": src + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
        procs.append(subprocess.Popen([sys.executable, "-m", "ablate.train.rank_entry", str(spec)], env=env))

    def forward() -> None:
        stop.wait()
        todo = set(range(size))
        while todo:  # each rank once it can take the signal as a stop request (or has ended)
            for r in sorted(todo):
                p = procs[r]
                if p.poll() is not None:
                    todo.discard(r)
                elif ready[r].exists():
                    with contextlib.suppress(ProcessLookupError):
                        p.send_signal(signal.SIGTERM)
                    todo.discard(r)
            time.sleep(0.05)

    threading.Thread(target=forward, name="ablate-stop-forwarder", daemon=True).start()
    ended: dict[int, float] = {}
    reaped: set[int] = set()
    try:
        while len(ended) < size:
            for r, p in enumerate(procs):
                if r not in ended and p.poll() is not None:
                    ended[r] = time.time()
            if ended and len(ended) < size and time.time() > min(ended.values()) + EXIT_GRACE_S:
                for r, p in enumerate(procs):
                    if p.poll() is None:
                        p.kill()
                        reaped.add(r)
            time.sleep(0.1)
    finally:
        for r, p in enumerate(procs):
            if p.poll() is None:
                p.kill()
                reaped.add(r)
            p.wait()
            ended.setdefault(r, time.time())
    out = None
    with contextlib.suppress(OSError, ValueError):
        out = json.loads(result.read_text())
    return Spawned(out, {r: None if r in reaped else p.returncode for r, p in enumerate(procs)}, ended)


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES entries."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [d.strip() for d in env.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def main(spec_file: str, stop: threading.Event) -> None:
    """A spawned rank (see rank_entry): join the group from the environment `spawn` set, run the target with the
    stop event, write rank 0's result."""
    spec = json.loads(Path(spec_file).read_text())
    world = init(os.environ["ABLATE_BACKEND"], float(os.environ["ABLATE_COLLECTIVE_TIMEOUT_S"]))
    mod, _, name = spec["target"].partition(":")
    fn = getattr(importlib.import_module(mod), name)
    try:
        out = fn(world, stop=stop, **spec["payload"])
        if world.lead:
            store.write_json(spec["result"], out)
    finally:
        shutdown()


def exit_reason(code: int | None) -> str:
    """How a rank ended, in words: 'exited with code 1', 'was killed by SIGKILL', 'did not exit'."""
    if code is None:
        return "did not exit (killed after its peers had ended)"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"
