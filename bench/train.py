"""Throughput of one RL step: ablate's trainer vs Hugging Face TRL's GRPOTrainer, same model, task, batch and loss.

    .venv/bin/python bench/train.py [--steps 20] [--warmup-steps 3] [--threads 1] [--json out.json]

Both sides: the warmed-up tiny Llama of recipes/base.yaml (the cached warm-up folder, so the same weights),
the base recipe's task (3-digit sums, 20% unseen subtractions) and batch (32 prompts x 8 completions per step), the CISPO loss (eps_max 5), batch-std advantages,
at most `length.max_new_tokens` new tokens, temperature 1, one torch thread, on-policy (one update per batch:
TRL's default num_iterations=1; ablate's offpolicy=ppo with k=1). Measured: completions/s and completion
tokens/s over `--steps` steps after `--warmup-steps` untimed ones (the two are measured in turn, in one process),
per wall-clock second and per CPU-second of the process (`time.process_time`): on a machine other jobs share,
wall-clock rates swing with their load, CPU-time rates do not.
ablate is also measured running its default scheme (PipelineRL-8, base.yaml) through `run()` over `--default-steps`
steps, evaluation excluded (the k batches generated ahead at the start count against it).

TRL is installed into the venv on first use (`pip install trl`; it leaves torch at the pinned CPU build).
Not like-for-like in one respect, on purpose: ablate skips the backward pass of zero-variance groups (ScaleRL's
zero-variance filtering); TRL trains on every completion. The unseen subtractions are always zero-variance, so
`bench/train.py task.unseen_frac=0` (addition only, both sides) is the stricter comparison; record both.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ensure_trl() -> None:
    if importlib.util.find_spec("trl") is None:
        print("installing trl into the venv (bench only) ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "trl"], check=True)


def ablate_config(extra: list[str]):
    from ablate.compose import compose_run

    return compose_run(ROOT / "recipes" / "base.yaml", ["offpolicy=ppo", "offpolicy.k=1", *extra])


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
    return {"completions_per_s": n / dt, "tokens_per_s": tok / dt, "s_per_step": dt / steps,
            "completions_per_cpu_s": n / dc, "tokens_per_cpu_s": tok / dc, "cpu_s_per_step": dc / steps}


def bench_ablate_default(extra: list[str], steps: int) -> dict:
    """The default run (base.yaml: PipelineRL-8) through `ablate.train.run`, evaluation time excluded."""
    from ablate import store
    from ablate.compose import compose_run
    from ablate.train import run
    from ablate.train.evaluate import Evaluator
    from ablate.train.step import Learner

    cfg = compose_run(ROOT / "recipes" / "base.yaml", [f"train.max_steps={steps}", f"train.eval_every={steps}", *extra])
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


def bench_trl(cfg, steps: int, warm: int) -> dict:
    """TRL GRPOTrainer on the same folder, task and batch; timed with a callback between optimizer steps."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from ablate.train.step import TASK_PHRASE
    from ablate.train.tasks import build_task
    from ablate.train.warmup import warmed_up_folder

    task = build_task(cfg.task, cfg.train.val_size, TASK_PHRASE[cfg.task.name])
    folder = warmed_up_folder(cfg, task)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    G, n = cfg.batch.prompts, cfg.batch.generations
    rows = task.train[: G * (warm + steps + 2)]
    # ablate prompts start with BOS; TRL tokenizes the text as is, so give it the same token sequence
    ds = Dataset.from_dict({"prompt": [tok.bos_token + p.prompt for p in rows], "answer": [p.answer for p in rows]})
    counts = {"tokens": 0, "completions": 0}

    def reward(completions, answer, **kw):
        out = []
        for c, a in zip(completions, answer):
            counts["completions"] += 1
            counts["tokens"] += len(tok.encode(c, add_special_tokens=False)) + 1
            out.append(1.0 if task.check(c, a) else 0.0)
        return out

    class Timer(TrainerCallback):
        def __init__(self):
            self.t = []
            self.marks = []

        def on_step_end(self, args, state, control, **kw):
            self.t.append((time.perf_counter(), time.process_time()))
            self.marks.append((counts["completions"], counts["tokens"]))

    timer = Timer()
    with tempfile.TemporaryDirectory() as d:
        args = GRPOConfig(
            output_dir=d, per_device_train_batch_size=G * n, num_generations=n, gradient_accumulation_steps=1,
            max_completion_length=cfg.length.max_new_tokens, temperature=1.0, learning_rate=cfg.optim.lr,
            adam_beta1=0.9, adam_beta2=0.99, max_grad_norm=1.0, loss_type="cispo", epsilon_high=5.0,
            scale_rewards="batch", beta=0.0, max_steps=warm + steps, logging_steps=1000, save_strategy="no",
            report_to="none", use_cpu=True, bf16=False, seed=0, dataloader_num_workers=0, disable_tqdm=True,
            shuffle_dataset=False,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok,
                              callbacks=[timer])
        trainer.train()
    t, m = timer.t, timer.marks
    dt, dc = t[-1][0] - t[warm - 1][0], t[-1][1] - t[warm - 1][1]
    return _rates(m[-1][0] - m[warm - 1][0], m[-1][1] - m[warm - 1][1], dt, dc, steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--default-steps", type=int, default=100,
                    help="steps of the default run (its PipelineRL queue is filled k batches ahead at the start: "
                         "a short window over-counts that start)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("overrides", nargs="*", help="extra recipe overrides for both sides (key=value)")
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ensure_trl()
    import torch

    torch.set_num_threads(a.threads)
    cfg = ablate_config(a.overrides)
    def show(name: str, d: dict) -> None:
        print(f"{name:36s} {d['completions_per_s']:7.0f} completions/s ({d['completions_per_cpu_s']:7.0f} per CPU-s)"
              + (f" {d['tokens_per_s']:7.0f} tokens/s ({d['tokens_per_cpu_s']:7.0f} per CPU-s)" if "tokens_per_s" in d else ""),
              flush=True)

    res = {"ablate": bench_ablate(cfg, a.steps, a.warmup_steps)}
    show("ablate (on-policy, cispo)", res["ablate"])
    res["trl"] = bench_trl(cfg, a.steps, a.warmup_steps)
    show("TRL GRPOTrainer (cispo)", res["trl"])
    res["ablate_default"] = bench_ablate_default(a.overrides, a.default_steps)
    show("ablate default run (PipelineRL-8)", res["ablate_default"])
    for unit in ("s", "cpu_s"):
        res[f"ratio_completions_per_{unit}"] = res["ablate"][f"completions_per_{unit}"] / res["trl"][f"completions_per_{unit}"]
        res[f"ratio_tokens_per_{unit}"] = res["ablate"][f"tokens_per_{unit}"] / res["trl"][f"tokens_per_{unit}"]
        res[f"ratio_default_completions_per_{unit}"] = (res["ablate_default"][f"completions_per_{unit}"]
                                                        / res["trl"][f"completions_per_{unit}"])
    print(f"ratio ablate/TRL, wall clock:  {res['ratio_completions_per_s']:.2f}x completions, "
          f"{res['ratio_tokens_per_s']:.2f}x tokens (default run {res['ratio_default_completions_per_s']:.2f}x)")
    print(f"ratio ablate/TRL, CPU time:    {res['ratio_completions_per_cpu_s']:.2f}x completions, "
          f"{res['ratio_tokens_per_cpu_s']:.2f}x tokens (default run {res['ratio_default_completions_per_cpu_s']:.2f}x)"
          "  [target >= 3x; CPU time is the fair measure on a shared machine]")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
