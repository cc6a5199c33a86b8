"""The policy: a Hugging Face causal LM + tokenizer, built locally (`tiny`) or loaded from a folder (`hf`).

- `tiny`: a `LlamaForCausalLM` created with `from_config` (random init, so nothing is downloaded; the code path
  is the one real models take) and a character tokenizer over the task's alphabet, both saved as a normal HF
  folder (so vLLM could load it too). A short supervised warm-up (`warmup`) lifts the pass rate R0 clearly
  above 0 before RL, as a real run starts from an SFT model; the warmed-up folder is cached by a hash of
  (model, task, warm-up) configs, under a file lock, so every run of a sweep starts from the same weights.
- `hf`: `AutoModelForCausalLM` + `AutoTokenizer` from `model.path` (local files only).

Precision (design.md §4, ScaleRL §3.2 "FP32 precision at the LM head"): `head_logits` computes the LM head in
`head_dtype` (float32 for `fp32_head`, bfloat16 for `bf16`); the sampler and the trainer both call it, so the
generator's and the trainer's log-probs come from the same head arithmetic.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ablate import store
from ablate.errors import UserError

log = logging.getLogger("ablate.train")

SPECIALS = ("<pad>", "<s>", "</s>")
HEAD_DTYPES = {"fp32_head": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Policy:
    model: Any  # transformers.PreTrainedModel (a causal LM)
    tokenizer: Any  # transformers.PreTrainedTokenizerFast
    head_dtype: torch.dtype

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def pad_id(self) -> int:
        t = self.tokenizer
        return int(t.pad_token_id if t.pad_token_id is not None else t.eos_token_id)

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def hidden(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Final hidden states [B, T, H] of input_ids [B, T] (left padding allowed: attention_mask [B, T])."""
        pos = None
        if attention_mask is not None:
            pos = (attention_mask.long().cumsum(1) - 1).clamp(min=0)
        out = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos, use_cache=False)
        return out.last_hidden_state

    def head_logits(self, h: Tensor) -> Tensor:
        """LM-head logits [..., V] of hidden states [..., H], computed in head_dtype (float32 under fp32_head)."""
        return head_logits(self.model, h, self.head_dtype)

    @property
    def fast(self) -> bool:
        """True when the functional Llama-layout forward below applies (llama/qwen2/mistral decoders)."""
        if not hasattr(self, "_fast"):
            self._fast = fast_supported(self.model)
        return self._fast

    def prefix(self, prompt_ids: Tensor, prompt_mask: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """Forward of G prompts [G, P] (left-padded): last hidden state [G, H] and per-layer (K, V) [G, Hkv, P, D]."""
        pos = (prompt_mask.long().cumsum(1) - 1).clamp(min=0)
        P = prompt_ids.shape[1]
        padded = not bool(prompt_mask.all())
        mask = None
        if padded:
            causal = torch.ones(P, P, dtype=torch.bool, device=prompt_ids.device).tril()
            eye = torch.eye(P, dtype=torch.bool, device=prompt_ids.device)  # pad rows would otherwise see nothing
            mask = (prompt_mask.bool()[:, None, None, :] & causal) | eye
        x = self.model.model.embed_tokens(prompt_ids)
        h, kv = decoder_forward(self.model, x, pos, None, mask, causal=not padded)
        return h[:, -1], kv

    def completion_logits(self, prompt_ids: Tensor, prompt_mask: Tensor, group: Tensor, tokens: Tensor) -> Tensor:
        """Logits [N, T, V] (head_dtype) predicting tokens [N, T] of completion n after prompt group[n] (prompts [G, P]).

        Llama-layout models: the prompt is run ONCE per group and its K/V shared by the group's completions
        (autograd sums their gradients back), which saves the prompt's share of the FLOPs G-fold. Other models:
        the HF forward on the concatenated [N, P+T] sequences. Both give the same logits (tested).
        """
        N, T = tokens.shape
        P = prompt_ids.shape[1]
        if not self.fast:
            ids = torch.cat([prompt_ids[group], tokens], 1)
            am = torch.cat([prompt_mask[group], torch.ones_like(tokens)], 1)
            am = None if bool(am.all()) else am
            return self.head_logits(self.hidden(ids, am)[:, P - 1 : -1])
        h_last, kv = self.prefix(prompt_ids, prompt_mask)
        if T == 1:
            return self.head_logits(h_last[group][:, None])
        kv = [(k[group], v[group]) for k, v in kv]
        pos0 = prompt_mask.long().sum(1)[group]  # position of the first completion token [N]
        pos = pos0[:, None] + torch.arange(T - 1, device=tokens.device)[None]
        causal = torch.ones(T - 1, T - 1, dtype=torch.bool, device=tokens.device).tril()
        if bool(prompt_mask.all()):
            mask = torch.cat([torch.ones(T - 1, P, dtype=torch.bool, device=tokens.device), causal], 1)
        else:
            pm = prompt_mask.bool()[group][:, None, None, :].expand(N, 1, T - 1, P)
            mask = torch.cat([pm, causal.expand(N, 1, T - 1, T - 1)], 3)
        x = self.model.model.embed_tokens(tokens[:, :-1])
        h, _ = decoder_forward(self.model, x, pos, kv, mask, causal=False)
        h = torch.cat([h_last[group][:, None], h], 1)  # [N, T, H]
        return self.head_logits(h)

    def encode_prompts(self, prompts: list[str]) -> tuple[Tensor, Tensor]:
        """Token ids [B, P] and attention mask [B, P] of prompts (BOS first if the tokenizer has one), LEFT-padded."""
        tok = self.tokenizer
        bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
        ids = [bos + tok.encode(p, add_special_tokens=False) for p in prompts]
        P = max(len(x) for x in ids)
        out = torch.full((len(ids), P), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), P), dtype=torch.long)
        for i, x in enumerate(ids):
            out[i, P - len(x):] = torch.tensor(x, dtype=torch.long)
            mask[i, P - len(x):] = 1
        return out, mask


def head_logits(model: Any, h: Tensor, dtype: torch.dtype) -> Tensor:
    """The output embedding applied in `dtype`: logits [..., V] of h [..., H] (float32 or bfloat16 result)."""
    head = model.get_output_embeddings()
    bias = head.bias.to(dtype) if getattr(head, "bias", None) is not None else None
    return F.linear(h.to(dtype), head.weight.to(dtype), bias)


# ---- building ----


def build_char_tokenizer(alphabet: str):
    """A character-level `PreTrainedTokenizerFast`: <pad>=0, <s>=1, </s>=2, then the sorted alphabet."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(alphabet))
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<pad>"
    )


def build_tiny_model(model_cfg: dict[str, Any], vocab_size: int, seed: int):
    """A LlamaForCausalLM from a local config (random init under `seed`). Fields: n_layers, hidden, n_heads, mlp."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, heads = int(model_cfg.get("hidden") or 128), int(model_cfg.get("n_heads") or 4)
    if hidden % heads:
        raise UserError(f"model.hidden={hidden} must be a multiple of model.n_heads={heads}")
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=int(model_cfg.get("mlp") or 4 * hidden),
        num_hidden_layers=int(model_cfg.get("n_layers") or 2),
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    return model


def load_hf(path: str | Path):
    """(model, tokenizer) from a local Hugging Face folder; a UserError if it is missing or not loadable."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    if not (p / "config.json").is_file():
        raise UserError(f"model.path: {str(p)!r} is not a Hugging Face model folder (no config.json)")
    tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=torch.float32)
    if tok.eos_token_id is None:
        raise UserError(f"model.path: the tokenizer in {str(p)!r} has no eos_token")
    return model, tok


def build_policy(cfg: dict[str, Any], task: Any) -> Policy:
    """The starting policy of a run: for `tiny`, the cached warmed-up model (warming it up once if needed)."""
    head_dtype = HEAD_DTYPES.get(cfg["precision"]["name"])
    if head_dtype is None:
        raise UserError(f"unknown precision {cfg['precision']['name']!r}; valid: {', '.join(HEAD_DTYPES)}")
    mcfg = cfg["model"]
    if mcfg["name"] == "hf":
        if not mcfg.get("path"):
            raise UserError("model.path is required for model=hf (a local Hugging Face folder)")
        model, tok = load_hf(mcfg["path"])
        return Policy(model, tok, head_dtype)
    if mcfg["name"] != "tiny":
        raise UserError(f"unknown model {mcfg['name']!r}; valid: hf, tiny")
    folder = warmed_up_folder(cfg, task)
    model, tok = load_hf(folder)
    return Policy(model, tok, head_dtype)


# ---- supervised warm-up, cached ----


def warmup_key(cfg: dict[str, Any], task: Any) -> str:
    """Hash of everything the warmed-up weights depend on: model, task, warm-up settings, phrase, alphabet."""
    blob = {
        "v": 1,
        "model": cfg["model"],
        "task": {k: v for k, v in cfg["task"].items() if k != "reward"},
        "warmup": cfg["train"].get("warmup", {}),
        "phrase": task.phrase,
        "alphabet": task.alphabet,
        "temperature": cfg["rollout"].get("temperature", 1.0),
        "max_new_tokens": cfg["length"]["max_new_tokens"],
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def warmed_up_folder(cfg: dict[str, Any], task: Any) -> Path:
    """The cached warm-up folder for this config (created under a file lock if missing)."""
    from filelock import FileLock

    key = warmup_key(cfg, task)
    root = store.cache_dir() / "warmup"
    root.mkdir(parents=True, exist_ok=True)
    folder = root / key
    with FileLock(str(root / f"{key}.lock")):
        if not (folder / "warmup.json").is_file():
            t0 = time.time()
            tmp = root / f".{key}.tmp"
            model, tok, info = warm_up(cfg, task)
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            info["seconds"] = round(time.time() - t0, 1)
            (tmp / "warmup.json").write_text(json.dumps(info, indent=2) + "\n")
            if folder.exists():  # a stale half-written folder from a killed process
                import shutil

                shutil.rmtree(folder)
            os.replace(tmp, folder)
            log.info("warm-up done in %.1fs: %s (cached at %s)", info["seconds"], info, folder)
    return folder


def warmup_info(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / "warmup.json").read_text())


def warm_up(cfg: dict[str, Any], task: Any):
    """Supervised warm-up on the task's training targets until a pass-rate check reaches `warmup.target`.

    The check (mean@k at the rollout temperature on `check_size` training problems, every `check_every`
    steps) stops the warm-up as soon as the pass rate crosses the target: the pass rate jumps sharply for a
    tiny model (0.03 -> 0.31 over 100 steps in tiny-rl-notes.md), so a coarser check overshoots R0.
    Returns (model, tokenizer, info).
    """
    from ablate.train.rollout import TorchSampler, SampleSpec

    w = {**DEFAULT_WARMUP, **{k: v for k, v in cfg["train"].get("warmup", {}).items() if v is not None}}
    tok = build_char_tokenizer(task.alphabet)
    model = build_tiny_model(cfg["model"], len(tok), int(w["seed"]))
    head = HEAD_DTYPES.get(cfg["precision"]["name"], torch.float32)
    pol = Policy(model, tok, head)
    probs = [p for p in task.train if p.target]
    if not probs:
        raise UserError("the task has no supervised targets for the warm-up; set train.warmup.max_steps=0")
    g = torch.Generator().manual_seed(int(w["seed"]))
    opt = torch.optim.AdamW(model.parameters(), lr=float(w["lr"]), betas=(0.9, 0.99), weight_decay=0.0)
    check = probs[: int(w["check_size"])]
    sampler = TorchSampler(pol)
    spec = SampleSpec(
        max_new_tokens=int(cfg["length"]["max_new_tokens"]),
        temperature=float(cfg["rollout"].get("temperature", 1.0)),
    )

    def pass_rate() -> float:
        k = int(w["check_k"])
        ro = sampler.generate([p.prompt for p in check], k, spec, generator=g)
        answers = [check[i].answer for i in ro.group.tolist()]
        ok = [task.check(t, a) and not tr for t, a, tr in zip(ro.texts, answers, ro.truncated.tolist())]
        return sum(ok) / len(ok)

    step, rate = 0, pass_rate() if int(w["max_steps"]) else 0.0
    history = [(0, rate)]
    model.train()
    while step < int(w["max_steps"]) and rate < float(w["target_pass_rate"]):
        idx = torch.randint(len(probs), (int(w["batch"]),), generator=g).tolist()
        batch = [probs[i] for i in idx]
        loss = supervised_loss(pol, [p.prompt for p in batch], [p.target for p in batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % int(w["check_every"]) == 0:
            rate = pass_rate()
            history.append((step, rate))
    model.eval()
    return model, tok, {"steps": step, "check_pass_rate": rate, "history": history}


DEFAULT_WARMUP = {
    "max_steps": 3000,
    "lr": 1e-3,
    "batch": 64,
    "target_pass_rate": 0.15,
    "check_every": 25,
    "check_size": 200,
    "check_k": 2,
    "seed": 0,
}


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


# ---- a functional Llama-layout decoder (shared by the sampler and the trainer) ----


def fast_supported(model: Any) -> bool:
    """True for Llama/Qwen2/Mistral-shaped decoders (the parameter layout `decoder_forward` reads)."""
    base = getattr(model, "model", None)
    try:
        layer = base.layers[0]
        a, mlp = layer.self_attn, layer.mlp
        _ = (a.q_proj, a.k_proj, a.v_proj, a.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj, base.norm, base.rotary_emb)
        _ = (layer.input_layernorm, layer.post_attention_layernorm, base.embed_tokens)
    except (AttributeError, IndexError, TypeError):
        return False
    cfg = model.config
    return (
        cfg.model_type in ("llama", "qwen2", "mistral")
        and getattr(cfg, "hidden_act", "silu") == "silu"
        and not getattr(cfg, "sliding_window", None)
        and not getattr(cfg, "use_sliding_window", False)
    )


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def decoder_forward(
    model: Any,
    x: Tensor,
    pos: Tensor,
    past: list[tuple[Tensor, Tensor]] | None,
    mask: Tensor | None,
    causal: bool,
    cache_pos: int | None = None,
) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """The model's decoder on its own parameters, without HF's per-call machinery (masks, cache objects).

    x: [B, L, H] input embeddings at positions pos [B, L]; past: per layer (K, V) [B, Hkv, S, D] or None;
    mask: bool, broadcastable to [B, 1, L, S+L] (True = attend), or None with causal=True (plain causal
    prefill) or causal=False (attend to everything: one query token). Returns the final-normed hidden states
    [B, L, H] and per-layer (K, V) [B, Hkv, S+L, D]. Mirrors LlamaDecoderLayer (pre-norm, RoPE, SwiGLU).
    cache_pos: decoding into a static cache instead: `past` holds preallocated (K, V) [B, Hkv, S_max, D] whose
    first cache_pos positions are filled; the new K/V are written in place at cache_pos.. (no concatenation,
    which costs more than the matmuls at this size) and attention reads [:cache_pos+L]. No autograd here.
    """
    base, cfg = model.model, model.config
    B, L, _ = x.shape
    H = cfg.num_attention_heads
    Hkv = getattr(cfg, "num_key_value_heads", None) or H
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    cos, sin = base.rotary_emb(x, pos)
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)  # [B, 1, L, D]
    out_kv = []
    for i, layer in enumerate(base.layers):
        a, ln = layer.self_attn, layer.input_layernorm
        hn = F.rms_norm(x, (x.shape[-1],), ln.weight, ln.variance_epsilon)
        q = F.linear(hn, a.q_proj.weight, a.q_proj.bias).view(B, L, H, D).transpose(1, 2)
        k = F.linear(hn, a.k_proj.weight, a.k_proj.bias).view(B, L, Hkv, D).transpose(1, 2)
        v = F.linear(hn, a.v_proj.weight, a.v_proj.bias).view(B, L, Hkv, D).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        if cache_pos is not None:
            kc, vc = past[i]
            kc[:, :, cache_pos : cache_pos + L] = k
            vc[:, :, cache_pos : cache_pos + L] = v
            k, v = kc[:, :, : cache_pos + L], vc[:, :, : cache_pos + L]
        elif past is not None:
            k = torch.cat([past[i][0], k], 2)
            v = torch.cat([past[i][1], v], 2)
        out_kv.append((k, v))
        if L == 1:  # one query (decoding): einsum beats SDPA's CPU kernel and bmm on short strided caches (~2x)
            kk, vv = (k, v) if Hkv == H else (k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1))
            sc = torch.einsum("bhqd,bhkd->bhqk", q, kk) * D**-0.5
            if mask is not None:
                sc = sc.masked_fill(~mask, float("-inf"))
            o = torch.einsum("bhqk,bhkd->bhqd", sc.softmax(-1), vv)
        else:
            o = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal and mask is None, enable_gqa=Hkv != H
            )
        o = o.transpose(1, 2).reshape(B, L, H * D)
        x = x + F.linear(o, a.o_proj.weight, a.o_proj.bias)
        ln2, mlp = layer.post_attention_layernorm, layer.mlp
        hn = F.rms_norm(x, (x.shape[-1],), ln2.weight, ln2.variance_epsilon)
        g, u, d = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        x = x + F.linear(F.silu(F.linear(hn, g.weight, g.bias)) * F.linear(hn, u.weight, u.bias), d.weight, d.bias)
    n = base.norm
    return F.rms_norm(x, (x.shape[-1],), n.weight, n.variance_epsilon), out_kv
