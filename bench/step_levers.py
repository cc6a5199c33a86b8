"""Benchmark: what two known levers buy the training step on this CPU, against today's eager float32 step, in one run.

The built-in trainer's step is limited by arithmetic: its matrix products run near this CPU's peak for their shapes
(bench/train_e2e.py's profile: `mm` is more than half of a run). Two levers trade that arithmetic for something else:

- `torch.compile` (Inductor, C++ kernels on the CPU): fuses the elementwise work around the products; it costs a
  compilation in each process (cold: the first on a machine; less once Inductor's on-disk cache is filled);
- bfloat16 autocast (the body's products in bf16, as GPU runs train): fast only where the CPU has bf16 instructions
  (avx512_bf16, AMX); elsewhere it is emulated and slower. It changes the run's numbers, not only its speed.

Measured: one forward and backward of the policy's loss on a batch of the base recipe's shape (`batch.prompts` x
`batch.generations` completions of `length.max_new_tokens` tokens after a prompt of the task's length), the way the
trainer runs it (`Policy.completion_logits`, log-softmax, the sampled tokens' log-probs), one torch thread, the
median of `--repeats` timed passes after three untimed ones. The eager step's bound is printed beside it: its matrix
products' FLOPs (torch's FlopCounterMode) over its time, against this core's float32 matmul on a 2048 x 2048
product, about the most that removing everything else could buy in float32 (a product of the step's own shapes can
run a few percent faster than the square one). Compilation is timed from the first call of the compiled function to
the end of its first backward pass, twice: cold (a fresh Inductor cache, as the first run on a machine; the second
lever's cold time already has Inductor imported) and recompiled in this process (a later run pays somewhat more: its
own imports and Inductor's in-memory caches). `dynamic=False`: the one shape measured; a run, whose batch lengths
vary from step to step, would compile again per shape or compile for dynamic shapes. Inductor needs a C++ compiler
on the machine.

    .venv/bin/python bench/step_levers.py [--repeats 20] [--threads 1] [key=value ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="recipe overrides (key=value)")
    a = ap.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # a fresh cache: the first compilation is cold

    import logging

    import torch

    from ablate.compose.recipe import compose_run
    from ablate.compose.resources import RECIPES_DIR
    from ablate.train.step import Learner

    torch.set_num_threads(a.threads)
    torch._logging.set_logs(dynamo=logging.ERROR)  # (its graph-break warnings: the policy's checks on masks)
    cfg = compose_run(RECIPES_DIR / "base.yaml", a.overrides)
    pol = Learner(cfg).policy
    gen = torch.Generator().manual_seed(0)
    prompts = [f"{x}+{y}=" for x, y in torch.randint(100, 1000, (cfg.batch.prompts, 2), generator=gen).tolist()]
    pids, pmask = pol.encode_prompts(prompts)
    G, n, T = cfg.batch.prompts, cfg.batch.generations, cfg.length.max_new_tokens
    group = torch.arange(G).repeat_interleave(n)
    vocab = pol.model.get_output_embeddings().weight.shape[0]
    tokens = torch.randint(0, vocab, (G * n, T), generator=gen)

    def loss(bf16: bool) -> Callable[[], torch.Tensor]:
        def f() -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
                lg = pol.completion_logits(pids, pmask, group, tokens).float()
                return torch.log_softmax(lg, -1).gather(2, tokens[:, :, None]).squeeze(2).sum()

        return f

    def timed(f: Callable[[], torch.Tensor]) -> float:
        for _ in range(3):
            f().backward()
        got = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            f().backward()
            got.append(time.perf_counter() - t0)
        return statistics.median(got) * 1e3

    print(f"forward+backward of a {G * n} x ({pids.shape[1]} + {T}) token batch, {a.threads} thread(s):")
    base = timed(loss(False))
    print(f"  eager float32 (today's step)       {base:7.1f} ms   1.00x")
    print(f"  {headroom(loss(False), base)}", flush=True)
    for name, bf16, compiled in (
        ("eager bf16 autocast", True, False),
        ("torch.compile float32", False, True),
        ("torch.compile bf16 autocast", True, True),
    ):
        f = loss(bf16)
        extra = ""
        if compiled:
            took = []
            for _ in ("cold", "again"):  # the second recompiles in this process, from Inductor's caches
                torch._dynamo.reset()
                c = torch.compile(f, dynamic=False)
                t0 = time.perf_counter()
                c().backward()
                took.append(time.perf_counter() - t0)
            f = c
            extra = f"   (compiled in {took[0]:.1f} s cold, {took[1]:.1f} s again in-process)"
        ms = timed(f)
        print(f"  {name:<33}  {ms:7.1f} ms   {base / ms:.2f}x{extra}", flush=True)
    shutil.rmtree(cache, ignore_errors=True)
    return 0


def headroom(f: Callable[[], Any], ms: float) -> str:
    """The eager step's matrix-product FLOPs (torch's FlopCounterMode) over its time, against this core's float32
    matmul on a large square product: how far arithmetic alone bounds the step in float32."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as count:
        f().backward()
    flops = count.get_total_flops()
    x, y = torch.randn(2048, 2048), torch.randn(2048, 2048)
    for _ in range(2):
        x @ y
    t0 = time.perf_counter()
    for _ in range(3):
        x @ y
    peak = 3 * 2 * 2048**3 / (time.perf_counter() - t0) / 1e9
    got = flops / (ms / 1e3) / 1e9
    return (
        f"its products: {flops / 1e9:.2f} GFLOP, so {got:.0f} GFLOPS over the whole step, {got / peak:.0%} of this "
        f"core's float32 matmul\n  ({peak:.0f} GFLOPS on 2048 x 2048): in float32, removing everything but the "
        f"products would make it about {peak / got:.2f}x faster at most"
    )


if __name__ == "__main__":
    sys.exit(main())
