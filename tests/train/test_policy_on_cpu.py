"""The policy: local tokenizer + tiny HF model, the prefix-shared trainer forward vs the HF forward, FP32 head,
warm-up cache."""

from __future__ import annotations

import threading

import pytest
import torch

from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.config.sections import ModelConfig
from ablate.errors import ErrorKind
from ablate.train.build import build_policy
from ablate.train.policy import Policy, build_char_tokenizer, build_tiny_model, load_hf
from ablate.train.tasks import build_task
from ablate.train.warmup import warmed_up_folder, warmup_info, warmup_key
from jobs import refused

torch.set_num_threads(1)
SMALL = ModelConfig(name="tiny", n_layers=2, hidden=32, n_heads=2, mlp=64)
RECIPE = RECIPES_DIR / "base.yaml"


def _policy(head=torch.float32, model_cfg=SMALL, alphabet="0123456789+=>", seed=0) -> Policy:
    tok = build_char_tokenizer(alphabet)
    return Policy(build_tiny_model(model_cfg, len(tok), seed), tok, head)


def test_char_tokenizer_round_trip_and_specials(tmp_path):
    tok = build_char_tokenizer("0123456789+=>")
    ids = tok.encode("347+285=", add_special_tokens=False)
    assert len(ids) == 8 and tok.decode(ids) == "347+285="
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.decode([1] + ids + [2, 0], skip_special_tokens=True) == "347+285="
    pol = _policy()
    pol.model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model, tok2 = load_hf(tmp_path)  # the folder is a normal HF folder (the `hf` path and vLLM read it)
    assert tok2.encode("12>3", add_special_tokens=False) == tok.encode("12>3", add_special_tokens=False)
    assert sum(p.numel() for p in model.parameters()) == pol.n_params


def test_missing_hf_folder_is_a_user_error(tmp_path):
    with refused(ErrorKind.RECIPE, "model.path", str(tmp_path), "config.json"):
        load_hf(tmp_path)
    with refused(ErrorKind.RECIPE, "model=hf", "model.path"):
        compose_run(RECIPE, ["model=hf"])


def _hf_logits(pol: Policy, pids, pmask, group, tokens):
    ids = torch.cat([pids[group], tokens], 1)
    am = torch.cat([pmask[group], torch.ones_like(tokens)], 1)
    pos = (am.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        out = pol.model(input_ids=ids, attention_mask=am, position_ids=pos)
    return out.logits[:, pids.shape[1] - 1 : -1].float()


@pytest.mark.parametrize("padded", [False, True])
def test_prefix_shared_trainer_forward_matches_hf_forward(padded):
    pol = _policy()
    prompts = ["12+34=", "5+6=", "777+1=", "9+9="] if padded else ["123+456=", "999+001=", "500+500="]
    pids, pmask = pol.encode_prompts(prompts)
    assert bool(pmask.all()) != padded
    G = len(prompts)
    group = torch.arange(G).repeat_interleave(3)
    tokens = torch.randint(3, 16, (3 * G, 6))
    ours = pol.completion_logits(pids, pmask, group, tokens).float()
    ref = _hf_logits(pol, pids, pmask, group, tokens)
    assert ours.shape == (3 * G, 6, 16)
    assert torch.allclose(ours, ref, atol=2e-5), (ours - ref).abs().max()
    # and the gradient flows through the shared prompt K/V into every parameter
    pol.model.zero_grad()
    pol.completion_logits(pids, pmask, group, tokens).float().logsumexp(-1).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for n, p in pol.model.named_parameters())


def test_fp32_head_logits_are_float32_in_the_trainer_and_bf16_is_not():
    pids, pmask = _policy().encode_prompts(["12+34="])
    group, tokens = torch.zeros(2, dtype=torch.long), torch.randint(3, 16, (2, 4))
    fp32 = _policy(torch.float32).completion_logits(pids, pmask, group, tokens)
    bf16 = _policy(torch.bfloat16).completion_logits(pids, pmask, group, tokens)
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    assert not torch.equal(fp32, bf16.float())  # same weights (seed 0): the difference is the head's rounding
    assert torch.allclose(fp32, bf16.float(), atol=0.1)


def _warm_cfg(**warmup):
    over = {"max_steps": 20, "check_every": 10, "batch": 16, "target_pass_rate": 1.0, **warmup}
    return compose_run(
        RECIPE,
        [
            "model.n_layers=2",
            "model.hidden=32",
            "model.n_heads=2",
            "model.mlp=64",
            "task.digits=2",
            "task.train_size=300",
            "task.digits_min=2",
            "task.unseen_frac=0",
            "train.val_size=20",
            "length=none",
            "length.max_new_tokens=6",
        ]
        + [f"train.warmup.{k}={v}" for k, v in over.items()],
    )


def test_warmup_is_cached_by_config_hash_and_built_once_under_a_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    cfg = _warm_cfg()
    task = build_task(cfg.task, cfg.train.val_size, ">")
    folders = []
    threads = [threading.Thread(target=lambda: folders.append(warmed_up_folder(cfg, task))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert folders[0] == folders[1] and folders[0].name == warmup_key(cfg, task)
    info = warmup_info(folders[0])
    assert info["steps"] == 20 and [s for s, _ in info["history"]] == [0, 10, 20]  # checked every check_every steps
    stamp = (folders[0] / "model.safetensors").stat().st_mtime_ns
    assert warmed_up_folder(cfg, task) == folders[0]
    assert (folders[0] / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt
    other = _warm_cfg(lr=5e-4)
    assert warmup_key(other, task) != warmup_key(cfg, task)
    cfg_seed = cfg.replace(seed=3)
    assert warmup_key(cfg_seed, task) == warmup_key(cfg, task)  # every seed of a sweep starts from the same weights
    pol = build_policy(cfg_seed, task)
    ref, _ = load_hf(folders[0])
    assert all(torch.equal(a, b) for a, b in zip(pol.model.state_dict().values(), ref.state_dict().values()))


def test_warmup_stops_at_the_target_pass_rate_and_draws_no_progress_bar(tmp_path, monkeypatch, capfd):
    from transformers.utils import logging as hf_logging

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    hf_logging.enable_progress_bar()  # as in a fresh process (another test may have turned the bars off)
    cfg = _warm_cfg(target_pass_rate=0.0)  # reached by the first check: no training step at all
    task = build_task(cfg.task, cfg.train.val_size, ">")
    info = warmup_info(warmed_up_folder(cfg, task))
    assert info["steps"] == 0
    assert "Writing model shards" not in capfd.readouterr().err  # transformers' bar would fill a first run's output
