"""Throughput: ablate's trainer vs Hugging Face TRL's GRPOTrainer, same model, task, batch and loss.

    .venv/bin/python bench/train.py [--steps 20] [--warmup-steps 3] [--threads 1] [--json out.json] [key=value ...]

First end to end (bench/train_e2e.py): `ablate train` with `trainer=ablate` and `trainer=trl`, each one process
timed from its start to its exit, the way a user runs them, and where ours spends its time. Then the step alone,
the earlier harness below, whose figures are not like for like (ablate's bare learner loop against TRL inside its
full trainer): kept so that the older numbers can be read.

TRL runs through ablate's own backend (`trainer=trl`, src/ablate/train/trl_backend.py): the recipe mapped onto
GRPOConfig, the task's verifier as the reward. Both sides run one recipe: the base recipe minus what TRL lacks
(`COMPAT`: token-level CISPO, batch-std advantages, no zero-variance filtering or no-positive-resampling, no length
control, on-policy: one update per generated batch), on the warmed-up tiny Llama of recipes/base.yaml (the cached
warm-up folder, so the same weights), its task (3-digit sums, 20% unseen subtractions) and batch (32 prompts x 8
completions per step), at most `length.max_new_tokens` new tokens, temperature 1, one torch thread.
Measured: completions/s and completion tokens/s over `--steps` steps after `--warmup-steps` untimed ones (the two
are measured in turn, in one process), per wall-clock second and per CPU-second of the process
(`time.process_time`): on a machine other jobs share, wall-clock rates swing with their load, CPU-time rates do not.
ablate is also measured running its default recipe (base.yaml: PipelineRL-8, zero-variance filtering, ...) through
`run()` over `--default-steps` steps, evaluation excluded (the k batches generated ahead at the start count
against it).

`make setup` installs TRL (the `trl` extra); run by hand in another venv, `pip install '.[trl]'` first.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from ablate.compose.resources import RECIPES_DIR

ROOT = Path(__file__).resolve().parents[1]


COMPAT = [
    "aggregation=token",
    "filtering.zero_variance=false",
    "filtering.no_positive_resampling=false",
    "length=none",
    "offpolicy=ppo",
    "offpolicy.k=1",
]
"""The base recipe minus what TRL lacks (ablate.config.support): both sides run exactly this recipe."""


def ablate_config(extra: list[str]):
    from ablate.compose.recipe import compose_run

    return compose_run(RECIPES_DIR / "base.yaml", [*COMPAT, *extra])


def bench_ablate(cfg, steps: int, warm: int) -> dict:
    """ablate's step (generation + rewards + update), on-policy, timed over `steps` steps."""
    from ablate.train.feeders import PPOFeeder
    from ablate.train.step import Learner

    learner = Learner(cfg)
    f = PPOFeeder(learner, 1)
    n = tok = 0
    for i in range(warm + steps):
        if i == warm:
            t0, c0 = time.perf_counter(), time.process_time()
        b = f.next(i)
        learner.step(b, i)
        if i >= warm:
            n += b.ro.group.numel()
            tok += int(b.ro.present.sum())
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    return _rates(n, tok, dt, dc, steps)


def _rates(n: int, tok: int, dt: float, dc: float, steps: int) -> dict:
    """Wall-clock rates, and rates per CPU-second of this process (robust to other load on a shared machine)."""
    return {
        "completions_per_s": n / dt,
        "tokens_per_s": tok / dt,
        "s_per_step": dt / steps,
        "completions_per_cpu_s": n / dc,
        "tokens_per_cpu_s": tok / dc,
        "cpu_s_per_step": dc / steps,
    }


def bench_ablate_default(extra: list[str], steps: int) -> dict:
    """The default run (base.yaml: PipelineRL-8) through `ablate.train.run`, evaluation time excluded."""
    from ablate.compose.recipe import compose_run
    from ablate.storage import store
    from ablate.train import run
    from ablate.train.evaluate import Evaluator
    from ablate.train.step import Learner

    cfg = compose_run(RECIPES_DIR / "base.yaml", [f"train.max_steps={steps}", f"train.eval_every={steps}", *extra])
    with tempfile.TemporaryDirectory() as d:
        probe = Evaluator(Learner(cfg))  # the CPU cost of one evaluation, to take the two of the run out
        c0 = time.process_time()
        probe.pass_rate(0)
        eval_cpu = time.process_time() - c0
        c0 = time.process_time()
        run(cfg, Path(d) / "run")
        dc = time.process_time() - c0 - 2 * eval_cpu
        recs = store.read_jsonl(Path(d) / "run" / "metrics.jsonl")
    # wall_s at the last line includes the final evaluation; the first line's wall_s is the step-0 evaluation
    dt = recs[-1]["wall_s"] - 2 * recs[0]["wall_s"]
    n = recs[-1]["samples"]
    return {"completions_per_s": n / dt, "s_per_step": dt / steps, "completions_per_cpu_s": n / dc}


def bench_trl(extra: list[str], steps: int, warm: int) -> dict:
    """TRL's GRPOTrainer through ablate's backend (trainer=trl), the same recipe; timed between optimizer steps."""
    import threading

    from transformers import TrainerCallback

    from ablate.compose.recipe import compose_run
    from ablate.storage.rundir import RunDir
    from ablate.train.session import RunSession
    from ablate.train.trl_backend import TRLTrainer

    cfg = compose_run(
        RECIPES_DIR / "base.yaml",
        [
            *COMPAT,
            "trainer=trl",
            f"train.max_steps={warm + steps}",
            "train.eval_every=1000000",
            "train.checkpoint_every=1000000",
            *extra,
        ],
    )

    class Timer(TrainerCallback):  # called before ablate's callback: the run's last evaluation is not timed
        def __init__(self):
            self.t, self.marks = [], []

        def on_step_end(self, args, state, control, **kw):
            self.t.append((time.perf_counter(), time.process_time()))
            self.marks.append((session.compute.samples, trainer.new_tokens))

    timer = Timer()
    with tempfile.TemporaryDirectory() as d:
        session = RunSession(cfg, RunDir(Path(d) / "run"), threading.Event())
        trainer = TRLTrainer(session, callbacks=[timer])
        session.run(trainer)
    t, m = timer.t, timer.marks
    dt, dc = t[-1][0] - t[warm - 1][0], t[-1][1] - t[warm - 1][1]
    return _rates(m[-1][0] - m[warm - 1][0], m[-1][1] - m[warm - 1][1], dt, dc, steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument(
        "--default-steps",
        type=int,
        default=100,
        help="steps of the default run (its PipelineRL queue is filled k batches ahead at the start: "
        "a short window over-counts that start)",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--e2e-steps", type=int, default=40, help="steps of each end-to-end `ablate train` process")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("overrides", nargs="*", help="extra recipe overrides for both sides (key=value)")
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from ablate.train.trl_config import require_trl

    require_trl()
    import torch

    torch.set_num_threads(a.threads)
    cfg = ablate_config(a.overrides)

    def show(name: str, d: dict) -> None:
        print(
            f"{name:36s} {d['completions_per_s']:7.0f} completions/s ({d['completions_per_cpu_s']:7.0f} per CPU-s)"
            + (
                f" {d['tokens_per_s']:7.0f} tokens/s ({d['tokens_per_cpu_s']:7.0f} per CPU-s)"
                if "tokens_per_s" in d
                else ""
            ),
            flush=True,
        )

    from train_e2e import main as end_to_end

    print("end to end (bench/train_e2e.py: `ablate train` as a user runs it, both trainers):", flush=True)
    end_to_end(["--steps", str(a.e2e_steps), "--threads", str(a.threads), *a.overrides])
    print("the step alone (the earlier harness: ablate's bare learner loop, TRL inside its trainer):", flush=True)
    res = {"ablate": bench_ablate(cfg, a.steps, a.warmup_steps)}
    show("ablate (on-policy, cispo)", res["ablate"])
    res["trl"] = bench_trl(a.overrides, a.steps, a.warmup_steps)
    show("TRL GRPOTrainer (cispo)", res["trl"])
    res["ablate_default"] = bench_ablate_default(a.overrides, a.default_steps)
    show("ablate default run (PipelineRL-8)", res["ablate_default"])
    for unit in ("s", "cpu_s"):
        res[f"ratio_completions_per_{unit}"] = (
            res["ablate"][f"completions_per_{unit}"] / res["trl"][f"completions_per_{unit}"]
        )
        res[f"ratio_tokens_per_{unit}"] = res["ablate"][f"tokens_per_{unit}"] / res["trl"][f"tokens_per_{unit}"]
        res[f"ratio_default_completions_per_{unit}"] = (
            res["ablate_default"][f"completions_per_{unit}"] / res["trl"][f"completions_per_{unit}"]
        )
    print(
        f"ratio ablate/TRL, wall clock:  {res['ratio_completions_per_s']:.2f}x completions, "
        f"{res['ratio_tokens_per_s']:.2f}x tokens (default run {res['ratio_default_completions_per_s']:.2f}x)"
    )
    print(
        f"ratio ablate/TRL, CPU time:    {res['ratio_completions_per_cpu_s']:.2f}x completions, "
        f"{res['ratio_tokens_per_cpu_s']:.2f}x tokens (default run {res['ratio_default_completions_per_cpu_s']:.2f}x)"
        "  [CPU time is the fair measure on a shared machine]"
    )
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
