"""What a run starts from, wired together: the task, the starting policy (the warmed-up tiny model, or a Hugging
Face folder) and the warm-up record run.json keeps. Kept apart from policy.py and warmup.py so that neither
imports the other's users (the warm-up samples with rollout.py, which builds on policy.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.config.schema import RunConfig
from ablate.errors import ErrorKind, UserError
from ablate.train.llama import load_tiny
from ablate.train.policy import HEAD_DTYPES, Policy, load_hf
from ablate.train.tasks import Task
from ablate.train.warmup import warmed_up_folder, warmup_info


def build_policy(cfg: RunConfig, task: Task, *, transformers: bool = True) -> Policy:
    """The starting policy of a run: for `tiny`, the cached warmed-up model (warming it up once if needed).

    transformers=False: the caller only runs the model through `decoder.decoder_forward` (the built-in trainer with
    the torch sampler), so the tiny model is read back as a plain torch module (llama.py), which spares the run
    importing transformers; the weights, and so every result, are the same."""
    head_dtype = HEAD_DTYPES[cfg.precision.name]
    path = cfg.model.path if cfg.model.name == "hf" else None
    if cfg.model.name == "hf" and path is None:
        raise UserError("model=hf needs model.path: the folder of a Hugging Face model", kind=ErrorKind.RECIPE)
    folder = path if path is not None else warmed_up_folder(cfg, task, transformers=transformers)
    lite = load_tiny(Path(folder)) if path is None and not transformers else None
    model, tok = lite if lite is not None else load_hf(folder)
    return Policy(model, tok, head_dtype)


def warmup_record(cfg: RunConfig, task: Task) -> dict[str, Any]:
    """The warm-up behind the run's starting policy, as run.json records it (its history left out); {} for a
    model that was not warmed up here (`hf`)."""
    if cfg.model.name != "tiny":
        return {}
    return {k: v for k, v in warmup_info(warmed_up_folder(cfg, task)).items() if k != "history"}
