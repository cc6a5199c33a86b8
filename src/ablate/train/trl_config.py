"""How `trainer=trl` maps a recipe onto TRL's `GRPOConfig` (`grpo_config`; tested field by field), and what is
checked before a TRL run starts (`require_trl`, `check_devices`). The trainer itself is train/trl_backend.py; the
option-by-option support, ablate.config.support.SUPPORT and docs/trainers.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ablate.config.schema import RunConfig
from ablate.errors import ErrorKind, UserError

TRL_METRICS = {
    "entropy": "entropy",
    "grad_norm": "grad_norm",
    "clip_ratio/region_mean": "is_clip_frac",
    "cispo_clip_ratio": "is_clip_frac",
    "loss": "loss",
}
"""TRL's log keys -> metrics.jsonl fields (means since the previous evaluation). Not zero_variance_frac: TRL drops
no group, and its frac_reward_zero_std means another thing under scale_rewards=batch."""


def require_trl() -> None:
    """A UserError naming the fix when TRL is not installed (it is an extra: `pip install '.[trl]'`)."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        raise UserError(
            "trainer=trl needs Hugging Face TRL: pip install '.[trl]' (or use trainer=ablate)",
            kind=ErrorKind.ENVIRONMENT,
        )


def check_devices(cfg: RunConfig) -> None:
    """One process holds one GPU: HF's Trainer would wrap a model in nn.DataParallel over every visible GPU, which
    TRL refuses. A UserError before anything is written, naming the fix."""
    if (
        cfg.resources.world == 1
        and torch.cuda.is_available()
        and torch.cuda.device_count() > 1
        and cfg.train.device != "cpu"
    ):
        n = torch.cuda.device_count()
        raise UserError(
            f"trainer=trl on one process sees {n} GPUs: set resources.nproc={n} (one rank per GPU), or "
            "make one visible (CUDA_VISIBLE_DEVICES=0)",
            kind=ErrorKind.RECIPE,
        )


def prompt_prefix(tok: Any) -> str:
    """The text put before every prompt so that TRL's tokenization starts with BOS once, as ablate's does: the BOS
    text when the tokenizer does not add it itself, else nothing (a Llama tokenizer would otherwise give two)."""
    if tok.bos_token is None:
        return ""
    adds_bos = tok("1")["input_ids"][:1] == [tok.bos_token_id]
    return "" if adds_bos else tok.bos_token


def quiet() -> None:
    """No progress bars from transformers, and not the deprecation notices TRL's own settings trigger in it (they
    are TRL's to fix, and would fill every run's log)."""
    import warnings

    from ablate.train.policy import no_progress_bars

    no_progress_bars()
    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)


def loss_type(cfg: RunConfig) -> str:
    """TRL's loss_type for the recipe's loss x aggregation (validation has refused the pairs TRL lacks)."""
    if cfg.loss.name == "cispo":
        return "cispo"
    return "dapo" if cfg.aggregation.name == "token" else "grpo"


def grpo_config(cfg: RunConfig, output_dir: Path | str, device: torch.device) -> Any:
    """The recipe as TRL's GRPOConfig (see ablate.config.support.SUPPORT for the option-by-option mapping)."""
    from trl import GRPOConfig

    loss, o, lc = cfg.loss, cfg.optim, cfg.length
    per_rank = cfg.batch.prompts * cfg.batch.generations // cfg.resources.world  # the step's completions per rank
    micro = o.micro_batch or per_rank
    accum = per_rank // micro
    eps: dict[str, Any] = {
        "grpo": {"epsilon": loss.eps, "epsilon_high": loss.eps},  # symmetric
        "dapo": {"epsilon": loss.eps_low, "epsilon_high": loss.eps_high},
        "gspo": {"epsilon": loss.eps_low, "epsilon_high": loss.eps_high},
        "cispo": {"epsilon_high": loss.eps_max},
    }[loss.name]
    vllm: dict[str, Any] = {}
    if cfg.rollout.name == "vllm":
        vllm = {
            "use_vllm": True,
            "vllm_mode": cfg.trainer.vllm_mode,
            "vllm_gpu_memory_utilization": cfg.rollout.gpu_memory_utilization,
            "vllm_enable_sleep_mode": False,
        }
        if cfg.rollout.max_model_len:
            vllm["vllm_max_model_length"] = cfg.rollout.max_model_len
        if cfg.trainer.vllm_mode == "server" and cfg.trainer.vllm_server_url:
            vllm["vllm_server_base_url"] = cfg.trainer.vllm_server_url
    return GRPOConfig(
        output_dir=str(output_dir),
        # the loss
        loss_type=loss_type(cfg),
        importance_sampling_level="sequence" if loss.name == "gspo" else "token",
        **eps,
        beta=0.0,  # ScaleRL and ablate have no KL term
        scale_rewards={"prompt": "group", "batch": "batch", "none": "none"}[cfg.normalization.name],
        cast_lm_head_to_fp32=cfg.precision.name == "fp32_head",
        mask_truncated_completions=False,  # a truncated completion is graded wrong (reward 0), as in ablate
        # the batch and the off-policy scheme: k optimizer steps per generation round, one pass over each batch
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accum,
        num_generations=cfg.batch.generations,
        steps_per_generation=cfg.offpolicy.k * accum,
        num_iterations=1,
        shuffle_dataset=True,
        # generation
        max_completion_length=lc.max_new_tokens,
        temperature=cfg.rollout.temperature,
        top_p=1.0,
        top_k=0,
        **vllm,
        # the optimizer and its schedule
        learning_rate=o.lr,
        adam_beta1=o.betas[0],
        adam_beta2=o.betas[1],
        adam_epsilon=o.eps if o.eps is not None else 1e-8,
        weight_decay=o.weight_decay,
        max_grad_norm=o.grad_clip,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=o.lr_warmup_steps,
        # the run
        max_steps=cfg.train.max_steps,
        seed=cfg.seed,
        data_seed=cfg.seed,
        save_strategy="steps",
        save_steps=cfg.train.checkpoint_every,
        save_total_limit=2,
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        use_cpu=device.type == "cpu",
        bf16=False,  # the model trains in its own dtype (float32), as ablate's does; `precision` sets the head
        gradient_checkpointing=False,  # TRL's default recomputes the forward: compute the flops count does not see
        logging_nan_inf_filter=False,  # a non-finite loss must reach on_log (divergence)
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )
