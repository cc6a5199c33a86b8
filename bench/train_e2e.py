"""Both trainers timed the way a user runs them: `ablate train` with `trainer=ablate` and with `trainer=trl`, one
process each from its start to its exit, the same recipe, weights, threads and batch, evaluation identical, in
one run; and where ours spends its time.

    .venv/bin/python bench/train_e2e.py [--steps 40] [--threads 1] [--repeats 2] [--json FILE] [key=value ...]

The recipe is bench/train.py's COMPAT (the base recipe minus what TRL lacks) with `train.max_steps` steps, one
evaluation at step 0 and one at the end on `train.val_size=32` prompts (the same evaluator on both sides), no
checkpoint in between. The warm-up cache entry is built first, untimed. Each process is timed from `Popen` to its
exit (wall), and by the CPU time the kernel charged it (`os.wait4`: user + system), so start-up (imports, model
load) is counted as a user pays it; the processes run one after the other, `--repeats` times each, and the best
of each is kept (load from other jobs only slows a run). Completions are the run's `samples`; tokens are
completions x its last `mean_response_len` (an estimate: the metrics log lengths at evaluations only).

The split of ours: the same command in this process under cProfile, each phase the cumulative time of the
functions that do it: start-up (building the Learner: checking and loading the warmed-up model),
generation (the sampler's `generate` called for training batches), scoring (`score`), forward/backward
(`_backward`), optimizer (AdamW's `step`), evaluation (`pass_rate`) and the rest (bookkeeping: metrics, run.json,
the loop).
cProfile slows Python-heavy code more than torch's kernels, so the split is a guide, not a measurement.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ablate.storage import store
from train import COMPAT


def command(trainer: str, steps: int, out: Path, threads: int, extra: list[str]) -> list[str]:
    every = [f"train.max_steps={steps}", f"train.eval_every={steps}", "train.val_size=32"]
    every += [f"train.checkpoint_every={steps}", f"trainer={trainer}", *COMPAT, *extra]
    return ["ablate", "train", "recipes/base.yaml", *every, "--run-dir", str(out), "--threads", str(threads)]


def warm(steps: int, threads: int, extra: list[str]) -> None:
    """Build the recipe's warm-up cache entry first, untimed (the first run on a machine would pay it alone)."""
    from ablate.compose.recipe import compose_run
    from ablate.compose.resources import RECIPES_DIR
    from ablate.train.step import Learner

    Learner(compose_run(RECIPES_DIR / "base.yaml", command("ablate", steps, Path("x"), threads, extra)[3:-4]))


def timed(trainer: str, steps: int, threads: int, extra: list[str]) -> dict:
    """One `ablate train` process: wall and CPU seconds from start to exit, completions and estimated tokens."""
    with tempfile.TemporaryDirectory() as d:
        args = command(trainer, steps, Path(d) / "run", threads, extra)
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "ablate", *args[1:]], stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"bench: `{' '.join(args)}` failed (exit {os.waitstatus_to_exitcode(status)})")
        last = store.read_jsonl(Path(d) / "run" / "metrics.jsonl")[-1]
    n = int(last["samples"])
    tokens = n * float(last.get("mean_response_len") or 0.0)
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "completions": n, "tokens": tokens, "per_s": n / wall, "per_cpu_s": n / cpu}


PHASES = {
    "start-up (imports, the model)": (("step.py",), "__init__"),
    "generation": (("rollout.py",), "generate"),
    "scoring": (("step.py",), "score"),
    "forward/backward": (("step.py",), "_backward"),
    "optimizer": (("adamw.py", "adam.py"), "step"),
    "evaluation": (("evaluate.py",), "pass_rate"),
}


def split(steps: int, threads: int, extra: list[str]) -> dict[str, float]:
    """Seconds per phase of one `ablate train` run of ours, in this process, under cProfile."""
    import torch

    from ablate.compose.recipe import compose_run
    from ablate.compose.resources import RECIPES_DIR
    from ablate.train import run

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    every = command("ablate", steps, Path("x"), threads, extra)[3:-4]
    cfg = compose_run(RECIPES_DIR / "base.yaml", every)
    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory() as d:
        prof.enable()
        run(cfg, Path(d) / "run")
        prof.disable()
    total = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    got: dict[str, float] = {}
    for phase, (files, fn) in PHASES.items():
        got[phase] = 0.0
        for (path, _, name), (_, _, _, cumulative, callers) in stats.items():
            if not (path.endswith(files) and name == fn):
                continue
            training = sum(c[3] for (cp, _, _), c in callers.items() if not cp.endswith("evaluate.py"))
            # generation: training batches only (the evaluator's calls are evaluation's)
            got[phase] += training if phase == "generation" else cumulative
    got["other (imports, bookkeeping)"] = max(0.0, total - sum(got.values()))
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("overrides", nargs="*", help="extra recipe overrides for both sides (key=value)")
    a = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    res: dict = {"steps": a.steps, "threads": a.threads}
    warm(a.steps, a.threads, a.overrides)
    for trainer in ("ablate", "trl"):
        runs = [timed(trainer, a.steps, a.threads, a.overrides) for _ in range(a.repeats)]
        best = min(runs, key=lambda r: r["wall_s"])
        res[trainer] = best
        print(
            f"ablate train, trainer={trainer:6s} {best['wall_s']:6.1f} s wall, {best['cpu_s']:6.1f} CPU-s: "
            f"{best['per_s']:6.1f} completions/s ({best['per_cpu_s']:6.1f} per CPU-s), "
            f"{best['tokens'] / best['wall_s']:7.0f} tokens/s (est.)",
            flush=True,
        )
    for unit in ("per_s", "per_cpu_s"):
        res[f"ratio_{unit}"] = res["ablate"][unit] / res["trl"][unit]
    print(
        f"ratio ablate/TRL, end to end: {res['ratio_per_s']:.2f}x completions per wall-s, "
        f"{res['ratio_per_cpu_s']:.2f}x per CPU-s ({a.steps} steps, start-up included)"
    )
    res["split"] = split(a.steps, a.threads, a.overrides)
    total = sum(res["split"].values())
    print(
        "where ours spends it (one run under cProfile): "
        + ", ".join(f"{k} {v / total:.0%}" for k, v in res["split"].items())
    )
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
