"""What each trainer supports: the option x trainer matrix, and the refusals that validation reports for `trainer=trl`.

One table, read three ways: `ablate show --trainers` prints it, docs/trainers.md shows it (a test keeps the two
the same), and `trl_refusals` turns its "no" rows into one line per option of a config that TRL cannot run, naming
the option and the trainer that supports it. Kept free of heavy imports: validation runs on every config.

How the supported options map onto TRL's `GRPOConfig` is in train/trl_config.py (`grpo_config`); a test checks it
field by field. The class behind each `trainer.name` is in `ablate.train.loop.TRAINERS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TRL_VERSION = "1.16.0"
"""The TRL release the mapping is written against (the `trl` extra pins it)."""

Row = tuple[str, str, str]
"""(option, the built-in trainer, TRL)."""

SUPPORT: list[Row] = [
    ("loss=grpo", "yes", "yes: loss_type grpo (aggregation=sample) or dapo (aggregation=token), epsilon=loss.eps"),
    ("loss=dapo", "yes", "yes: epsilon=loss.eps_low, epsilon_high=loss.eps_high; loss_type as for grpo"),
    ("loss=gspo", "yes", "yes: importance_sampling_level=sequence, loss_type grpo (aggregation=sample)"),
    ("loss=cispo", "yes", "yes with aggregation=token: loss_type cispo, epsilon_high=loss.eps_max"),
    ("aggregation=sample", "yes", "yes (loss_type grpo), not with loss=cispo"),
    ("aggregation=token", "yes", "yes (loss_type dapo or cispo: tokens averaged over the whole step)"),
    ("aggregation=prompt", "yes", "no"),
    ("normalization=prompt", "yes", "yes: scale_rewards=group"),
    (
        "normalization=batch",
        "yes",
        "yes: scale_rewards=batch (TRL divides by the std of the generation round's "
        "rewards over all ranks, ablate by the std of the step's group-centred advantages)",
    ),
    ("normalization=none", "yes", "yes: scale_rewards=none"),
    ("precision=fp32_head", "yes", "yes: cast_lm_head_to_fp32 (the body trains in the model's dtype, as in ablate)"),
    ("precision=bf16", "yes", "yes: the head in the model's dtype"),
    ("filtering.zero_variance", "yes", "no (set filtering.zero_variance=false)"),
    ("filtering.no_positive_resampling", "yes", "no (set filtering.no_positive_resampling=false)"),
    ("length=none", "yes", "yes: max_completion_length=length.max_new_tokens"),
    ("length=penalty", "yes", "yes: DAPO's overlong penalty, added in the reward function"),
    ("length=interrupt", "yes", "no"),
    (
        "offpolicy=ppo (k)",
        "yes",
        "yes: steps_per_generation = k x gradient accumulation (k optimizer steps per "
        "generation round; TRL shuffles the round's completions across its steps)",
    ),
    ("offpolicy=pipeline", "yes", "no"),
    (
        "batch.prompts x generations",
        "yes",
        "yes: per_device_train_batch_size (the step's completions / ranks), num_generations",
    ),
    (
        "optim (lr, betas, eps, weight decay, clip)",
        "yes",
        "yes: learning_rate, adam_beta1/2, adam_epsilon, weight_decay (HF spares biases and norms), max_grad_norm",
    ),
    ("optim.lr_warmup_steps", "yes", "yes: constant_with_warmup (HF's warm-up starts at lr 0, ablate's at lr/steps)"),
    ("optim.micro_batch", "yes", "yes: gradient_accumulation_steps (must divide a rank's share of the step)"),
    ("rollout=torch", "yes", "yes: transformers generate"),
    ("rollout=vllm", "yes", "yes: use_vllm, trainer.vllm_mode colocate or server"),
    ("task.reward binary | signed", "yes", "yes: the task's verifier as the reward function"),
    ("model=tiny | hf", "yes", "yes: the same Hugging Face folder"),
    (
        "resources.nproc x nodes > 1",
        "yes (DDP, FSDP)",
        "yes: DDP through accelerate, one process per rank (the same launcher: local ranks or SLURM tasks)",
    ),
    ("train.sharding=fsdp", "yes", "no"),
    ("checkpoint, resume, preemption", "yes", "yes: TRL's checkpoints (checkpoint-N/) and resume_from_checkpoint"),
    ("metrics.jsonl (val_pass_rate mean@k, ...)", "yes", "yes, through a callback (the same fields)"),
]

# The refusals: (is the option set?, the line that names it and the way out)
_REFUSE: list[tuple[Callable[[dict[str, Any]], bool], str]] = [
    (
        lambda c: c["aggregation"]["name"] == "prompt",
        "aggregation=prompt: TRL has no prompt-level loss averaging; use aggregation=token (or sample), or "
        "trainer=ablate",
    ),
    (
        lambda c: c["loss"]["name"] == "cispo" and c["aggregation"]["name"] == "sample",
        "loss=cispo with aggregation=sample: TRL's CISPO averages tokens over the step; use aggregation=token, or "
        "trainer=ablate",
    ),
    (
        lambda c: c["filtering"]["zero_variance"],
        "filtering.zero_variance=true: TRL keeps zero-variance groups in the loss's denominator; set "
        "filtering.zero_variance=false, or use trainer=ablate",
    ),
    (
        lambda c: c["filtering"]["no_positive_resampling"],
        "filtering.no_positive_resampling=true: TRL samples every prompt each epoch; set "
        "filtering.no_positive_resampling=false, or use trainer=ablate",
    ),
    (
        lambda c: c["length"]["name"] == "interrupt",
        "length=interrupt: TRL cannot interrupt generation at a thinking budget; use length=none or length=penalty, or "
        "trainer=ablate",
    ),
    (
        lambda c: c["offpolicy"]["name"] == "pipeline",
        "offpolicy=pipeline: TRL has no in-flight weight updates (PipelineRL); use offpolicy=ppo (offpolicy.k=1 is "
        "on-policy), or trainer=ablate",
    ),
    (
        lambda c: c["train"]["sharding"] == "fsdp",
        "train.sharding=fsdp with trainer=trl: TRL's ranks run DDP here; use train.sharding=ddp, or trainer=ablate",
    ),
]


def trl_refusals(cfg: dict[str, Any]) -> list[str]:
    """One line per option of a resolved config (plain dict) that `trainer=trl` cannot run."""
    errs = [msg for applies, msg in _REFUSE if applies(cfg)]
    world = cfg["resources"]["nproc"] * cfg["resources"]["nodes"]
    step = cfg["batch"]["prompts"] * cfg["batch"]["generations"]
    micro = cfg["optim"].get("micro_batch")
    if step % world:
        errs.append(
            f"batch.prompts x batch.generations ({step}) with trainer=trl on {world} ranks: TRL splits the "
            f"step's completions evenly over the ranks; use a batch divisible by {world}"
        )
    elif micro is not None and (step // world) % micro:
        errs.append(
            f"optim.micro_batch={micro} with trainer=trl: TRL accumulates whole micro-batches, and {micro} "
            f"does not divide the {step // world} completions of a rank's step; pick a divisor"
        )
    return errs


PRESET_HINT = (
    "trainer=trl aggregation=token filtering.zero_variance=false filtering.no_positive_resampling=false "
    "length=none offpolicy=ppo offpolicy.k=1"
)
"""Overrides that make the base recipe (ScaleRL) runnable by TRL: what `ablate show --trainers` suggests."""
