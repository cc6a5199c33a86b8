"""Data-parallel scaling of the built-in trainer: steps/s at 1 and N processes, the same global batch.

    .venv/bin/python bench/scale.py [--nproc 2] [--steps 40] [--warmup-steps 2] [--json out.json] [overrides ...]
    .venv/bin/python bench/scale.py train.sharding=fsdp          # the N-rank side with FSDP2 instead of DDP

Both sides run the base recipe's model, task and batch (32 prompts x 8 completions per step) on-policy
(offpolicy=ppo, k=1: one batch, one update), one torch thread per process, measured in one invocation: first one
process, then N ranks over torch.distributed (gloo on the CPU, NCCL on CUDA with train.device=cuda). Each rank
generates and trains on its share of the prompt groups, so the work per step is the same in both.

Printed: steps/s (wall clock) of each, the speed-up, completion tokens/s per device, and the communication share
of a step: the time rank 0 spends in the process group's collectives (the profiler's gloo:/nccl: events: DDP's
gradient all-reduce, which overlaps the backward pass, and the small all-reduces of normalisers, pool and
metrics), including waiting for the slower rank, over the step time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from ablate.compose.resources import RECIPES_DIR

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


def config(overrides: list[str], nproc: int):
    """The measured recipe; the one-process side drops a train.sharding override (it shards over ranks)."""
    from ablate.compose.recipe import compose_run

    if nproc == 1:
        overrides = [o for o in overrides if not o.startswith("train.sharding=")]
    return compose_run(
        RECIPES_DIR / "base.yaml", ["offpolicy=ppo", "offpolicy.k=1", f"resources.nproc={nproc}", *overrides]
    )


def measure(world, cfg: dict, steps: int, warm: int) -> dict:
    """Time `steps` optimizer steps after `warm` untimed ones on this rank (a spawned rank, or the one process)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ablate.config.schema import validate
    from ablate.train.feeders import PPOFeeder
    from ablate.train.step import Learner

    torch.set_num_threads(1)
    learner = Learner(validate(cfg), world)
    feeder = PPOFeeder(learner, 1)
    for i in range(warm):
        learner.step(feeder.next(i), i)
    world.barrier()
    tokens = 0.0
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for i in range(warm, warm + steps):
            m = learner.step(feeder.next(i), i)
            tokens += m["new_tokens"]
        wall = time.perf_counter() - t0
    comm = (
        sum(e.cpu_time_total for e in prof.events() if e.name.startswith(("gloo:", "nccl:"))) / 1e6
        if world.size > 1
        else 0.0
    )
    return {
        "steps": steps,
        "wall_s": wall,
        "steps_per_s": steps / wall,
        "tokens_per_s": tokens / wall,
        "comm_s": comm,
        "ranks": world.size,
    }


@contextlib.contextmanager
def _quiet_stderr():
    """The profiler's C++ side prints start/stop lines straight to file descriptor 2: send them nowhere."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    os.environ.setdefault("ABLATE_CACHE", str(ROOT / "bench" / "out" / "ablate-cache"))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    from ablate.topology.workers import spawn
    from ablate.topology.world import World, backend_for
    from ablate.train.step import Learner

    one_cfg = config(a.overrides, 1)
    Learner(one_cfg)  # builds (and caches) the warmed-up policy before anything is timed
    print(
        f"base recipe, {one_cfg.batch.prompts} prompts x {one_cfg.batch.generations} completions per step, "
        f"{one_cfg.model.name} model, on-policy; {a.steps} timed steps after {a.warmup_steps}",
        flush=True,
    )
    one = measure(World(), one_cfg.to_dict(), a.steps, a.warmup_steps)
    print(f"1 process : {one['steps_per_s']:.3f} steps/s, {one['tokens_per_s']:.0f} completion tokens/s", flush=True)
    cfg = config(a.overrides, a.nproc)
    with tempfile.TemporaryDirectory() as tmp:
        sp = spawn(
            "scale:worker",
            a.nproc,
            {"cfg": cfg.to_dict(), "steps": a.steps, "warm": a.warmup_steps},
            Path(tmp),
            backend=backend_for(cfg.train.device),
            timeout_s=600,
            stop=threading.Event(),
        )
    many = sp.result
    if many is None or any(sp.codes.values()):
        sys.exit(f"the {a.nproc}-rank measurement failed: exit codes {sp.codes}")
    speedup = many["steps_per_s"] / one["steps_per_s"]
    share = many["comm_s"] / many["wall_s"]
    print(
        f"{a.nproc} processes: {many['steps_per_s']:.3f} steps/s, {many['tokens_per_s']:.0f} completion tokens/s "
        f"({many['tokens_per_s'] / a.nproc:.0f} per device)"
    )
    print(
        f"speed-up {speedup:.2f}x on {a.nproc} processes (ideal {a.nproc}x); communication {share:.1%} of a step "
        f"(rank 0 in collectives, waiting for the slower rank included)"
    )
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"one": one, "many": many, "speedup": speedup, "comm_share": share}, indent=1))


def worker(world, cfg: dict, steps: int, warm: int, stop=None) -> dict:
    """What each spawned worker runs (the target `main` gives topology.workers.spawn): `measure`."""
    return measure(world, cfg, steps, warm)


if __name__ == "__main__":
    main()
