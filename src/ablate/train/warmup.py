"""Supervised warm-up of the tiny model, cached per machine: every run of a sweep starts from the same weights.

A real RL run starts from an SFT model; the tiny model starts from random weights, so it first imitates the task's
supervised targets until a pass-rate check reaches `train.warmup.target_pass_rate` (R0 well above 0). The check is
mean@k at the rollout temperature on the first problems with targets, every `check_every` steps: the pass rate of
a tiny model jumps sharply during warm-up, so a coarser check overshoots R0.

The warmed-up model is saved as a Hugging Face folder under the cache (`$ABLATE_CACHE/warmup/<key>/`), keyed by a
hash of everything the weights depend on, and built under a file lock, so parallel runs build it once. The cache
must be private to the user (fs.private_cache: a UserError otherwise), since runs load weights from it. Every
use checks the entry under the lock (`fault`: private, complete, loadable, the model's own keys and shapes); a
torn, truncated, garbage or foreign entry is built again. A build writes into a folder of its own and
renames it into place (the old entry renamed aside first), so no reader ever sees a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ablate.config.schema import RunConfig
from ablate.errors import ErrorKind, UserError
from ablate.storage import fs, ownership
from ablate.train import llama
from ablate.train.checkpoint import first_line
from ablate.train.policy import (
    HEAD_DTYPES,
    Policy,
    build_char_tokenizer,
    build_tiny_model,
    char_vocab,
    load_hf,
    no_progress_bars,
    tiny_shape,
)
from ablate.train.tasks import Task

log = logging.getLogger("ablate.train")

# Fixed parts of the procedure (not design choices, so not in the schema): the check's size and k, and the seed of
# the initial weights and of the warm-up's own sampling.
CHECK_SIZE = 200
CHECK_K = 2
SEED = 0


def warmup_key(cfg: RunConfig, task: Task) -> str:
    """Hash of everything the warmed-up weights depend on: model, task, warm-up settings, phrase, alphabet."""
    d = cfg.to_dict()
    blob = {
        "v": 1,
        "model": d["model"],
        "task": {k: v for k, v in d["task"].items() if k != "reward"},
        "warmup": d["train"]["warmup"],
        "phrase": task.phrase,
        "alphabet": task.alphabet,
        "temperature": cfg.rollout.temperature,
        "max_new_tokens": cfg.length.max_new_tokens,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def warmed_up_folder(cfg: RunConfig, task: Task, *, transformers: bool = False) -> Path:
    """The cached warm-up folder for this config: checked under a file lock, and built (again) when it is missing,
    damaged or not private (`fault`; transformers=True: also when transformers cannot load it). A UserError when the
    cache itself is not private."""
    from filelock import FileLock

    key = warmup_key(cfg, task)
    root = fs.private_cache("warmup")  # weights are loaded from it: refused unless only this user can write it
    folder = root / key
    with FileLock(str(root / f"{key}.lock")):
        why = fault(folder, cfg, task, transformers=transformers) if os.path.lexists(folder) else "missing"
        if why is not None:
            if why != "missing":
                log.warning("the cached warm-up %s is unusable (%s): building it again", folder, why)
            _build(cfg, task, root, key)
    return folder


def fault(folder: Path, cfg: RunConfig, task: Task, *, transformers: bool = False) -> str | None:
    """Why cached warm-up `folder` cannot be this config's warmed-up model, or None: an entry or file of it not
    private to this user, no warm-up record, a weights file that is torn (its header does not cover the file) or
    does not hold the model's own keys and shapes (Hugging Face would fill a missing weight with random values and
    only warn), a config that is not the recipe's tiny model, files that do not load, a tokenizer that is not the
    task's. Shapes are read from the header and the model's skeleton is built on the meta device, without
    transformers (llama.py): the check costs about what loading the folder does. transformers=True (a run that
    loads the folder with transformers: TRL, the vLLM sampler, FSDP) also loads it there."""
    from safetensors import safe_open

    try:
        for p in (folder, *sorted(folder.iterdir())):
            why = ownership.private_problem(p)
            if why:
                return f"not private: {why}"
        info = warmup_info(folder)
        if not (
            isinstance(info, dict)
            and type(info.get("steps")) is int
            and isinstance(info.get("check_pass_rate"), (int, float))
        ):
            return "warmup.json is not a warm-up record"
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            saved = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (a safetensors handle)
        vocab = char_vocab(task.alphabet)
        shape = llama.shape_of(json.loads((folder / "config.json").read_text()))
        if shape is None or shape != tiny_shape(cfg.model, len(vocab)):
            return "config.json is not this recipe's tiny model"
        want = {k: tuple(t.shape) for k, t in llama.skeleton(shape).state_dict().items()}
        for k, got in saved.items():
            if k not in want:
                return f"weight {k} is not one of the model's"
            if got != want[k]:
                return f"weight {k} has shape {got}, not {want[k]}"
        tied = {"lm_head.weight", "model.embed_tokens.weight"}  # a tied weight is saved once, under one of its names
        missing = [k for k in want if k not in saved and not (k in tied and tied & saved.keys())]
        if missing:
            return f"weights missing: {', '.join(missing[:3])}"
        loaded = llama.load_tiny(folder)  # the config and tokenizer files parse, and the weights load
        if loaded is None or loaded[1].get_vocab() != vocab:
            return "its tokenizer is not the task's"
        if transformers and load_hf(folder)[1].get_vocab() != vocab:  # and so they do in transformers
            return "its tokenizer is not the task's"
    except Exception as e:
        return f"{type(e).__name__}: {first_line(e)}"
    return None


def _build(cfg: RunConfig, task: Task, root: Path, key: str) -> None:
    """Warm up and put the result at `root/key` atomically (the caller holds the key's lock): the folder is written
    under a name of its own, synced, and renamed into place; an old entry is renamed aside first, then removed."""
    for old in (*root.glob(f".{key}.tmp*"), *root.glob(f".{key}.old*")):  # left by a process killed mid-build
        shutil.rmtree(old, ignore_errors=True)
    folder = root / key
    t0 = time.time()
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{key}.tmp."))
    try:
        model, tok, info = warm_up(cfg, task)
        no_progress_bars()
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        info["seconds"] = round(time.time() - t0, 1)
        (tmp / "warmup.json").write_text(json.dumps(info, indent=2) + "\n")
        for p in (*tmp.iterdir(), tmp):
            os.chmod(p, 0o700 if p.is_dir() else 0o600)
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)  # the data is on disk before the rename makes it the entry
            finally:
                os.close(fd)
        if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
            os.unlink(folder)
        elif os.path.lexists(folder):
            aside = root / f".{key}.old.{os.getpid()}"
            os.replace(folder, aside)
            shutil.rmtree(aside, ignore_errors=True)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("warm-up done in %.1fs: %s (cached at %s)", info["seconds"], info, folder)


def warmup_info(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / "warmup.json").read_text())


def warm_up(cfg: RunConfig, task: Task) -> tuple[Any, Any, dict[str, Any]]:
    """Supervised warm-up on the task's training targets until the pass-rate check reaches the target.
    Returns (model, tokenizer, info)."""
    from ablate.train.rollout import SampleSpec
    from ablate.train.samplers import make_sampler

    w = cfg.train.warmup
    tok = build_char_tokenizer(task.alphabet)
    model = build_tiny_model(cfg.model, len(tok), SEED)
    pol = Policy(model, tok, HEAD_DTYPES[cfg.precision.name])
    probs = [p for p in task.train if p.target]
    if not probs:
        raise UserError(
            "the task has no supervised targets for the warm-up; set train.warmup.max_steps=0", kind=ErrorKind.RECIPE
        )
    g = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=w.lr, betas=(0.9, 0.99), weight_decay=0.0)
    check = probs[:CHECK_SIZE]
    sampler = make_sampler("torch", pol)
    spec = SampleSpec(max_new_tokens=cfg.length.max_new_tokens, temperature=cfg.rollout.temperature)

    def pass_rate() -> float:
        ro = sampler.generate([p.prompt for p in check], CHECK_K, spec, generator=g)
        ok = task.grade(ro.texts, [check[i].answer for i in ro.group.tolist()], ro.truncated.tolist())
        return sum(ok) / len(ok)

    step, rate = 0, pass_rate() if w.max_steps else 0.0
    history = [(0, rate)]
    model.train()
    while step < w.max_steps and rate < w.target_pass_rate:
        idx = torch.randint(len(probs), (w.batch,), generator=g).tolist()
        batch = [probs[i] for i in idx]
        loss = supervised_loss(pol, [p.prompt for p in batch], [p.target for p in batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % w.check_every == 0:
            rate = pass_rate()
            history.append((step, rate))
    model.eval()
    return model, tok, {"steps": step, "check_pass_rate": rate, "history": history}


def supervised_loss(pol: Policy, prompts: list[str], targets: list[str]) -> Tensor:
    """Mean next-token cross-entropy on the target tokens (+ EOS) after each prompt; prompt tokens are not trained."""
    tok = pol.tokenizer
    p_ids, p_mask = pol.encode_prompts(prompts)
    t_ids = [tok.encode(t, add_special_tokens=False) + [pol.eos_id] for t in targets]
    T = max(len(x) for x in t_ids)
    tgt = torch.full((len(t_ids), T), pol.pad_id, dtype=torch.long)
    tmask = torch.zeros((len(t_ids), T), dtype=torch.bool)
    for i, x in enumerate(t_ids):
        tgt[i, : len(x)] = torch.tensor(x)
        tmask[i, : len(x)] = True
    ids = torch.cat([p_ids, tgt], 1)
    am = None if bool(p_mask.all()) else torch.cat([p_mask, torch.ones_like(tgt)], 1)
    P = p_ids.shape[1]
    h = pol.hidden(ids, am)[:, P - 1 : -1]
    logits = pol.head_logits(h).float()
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none").view_as(tgt.float())
    return (ce * tmask).sum() / tmask.sum()
