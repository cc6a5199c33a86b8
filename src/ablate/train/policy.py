"""The policy: a Hugging Face causal LM + tokenizer, built locally (`tiny`) or loaded from a folder (`hf`).

- `tiny`: a `LlamaForCausalLM` created with `from_config` (random init, so nothing is downloaded; the code path
  is the one real models take) and a character tokenizer over the task's alphabet, both saved as a normal HF
  folder (so vLLM could load it too), after the supervised warm-up of warmup.py.
- `hf`: `AutoModelForCausalLM` + `AutoTokenizer` from `model.path` (local files only).
A run of the built-in trainer reads the warmed-up `tiny` folder back without transformers (llama.py): the same
weights and vocabulary as a plain torch module and the `tokenizers` library.

Precision (ScaleRL §3.2 "FP32 precision at the LM head"): `head_logits` computes the LM head in
`head_dtype` (float32 for `fp32_head`, bfloat16 for `bf16`); the sampler and the trainer both call it, so the
generator's and the trainer's log-probs come from the same head arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ablate.config.sections import ModelConfig
from ablate.errors import ErrorKind, UserError
from ablate.train.decoder import decoder_forward, fast_supported
from ablate.train.llama import LlamaShape

SPECIALS = ("<pad>", "<s>", "</s>")
TINY_NORM_EPS = 1e-6
TINY_ROPE_THETA = 10000.0
"""The tiny model's RMSNorm epsilon and RoPE base: transformers' LlamaConfig defaults (a build that came out
otherwise would fail the warm-up cache check at once, which its tests run)."""
HEAD_DTYPES = {"fp32_head": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Policy:
    model: Any  # transformers.PreTrainedModel (a causal LM), or the tiny model as llama.TinyLlama
    tokenizer: Any  # transformers.PreTrainedTokenizerFast, or the tiny model's llama.CharTokenizer
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
        out = self.model.base_model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=pos, use_cache=False
        )
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
        """Logits [N, T, V] (head_dtype) predicting tokens [N, T] of completion n after prompt group[n] (prompts
        [G, P]).

        Llama-layout models: the prompt is run ONCE per group and its K/V shared by the group's completions
        (autograd sums their gradients back), which saves the prompt's share of the FLOPs G-fold. Other models:
        the HF forward on the concatenated [N, P+T] sequences. Both give the same logits (tested).
        """
        N, T = tokens.shape
        P = prompt_ids.shape[1]
        if not self.fast:
            ids = torch.cat([prompt_ids[group], tokens], 1)
            am = torch.cat([prompt_mask[group], torch.ones_like(tokens)], 1)
            return self.head_logits(self.hidden(ids, None if bool(am.all()) else am)[:, P - 1 : -1])
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
            out[i, P - len(x) :] = torch.tensor(x, dtype=torch.long)
            mask[i, P - len(x) :] = 1
        return out, mask


def head_logits(model: Any, h: Tensor, dtype: torch.dtype) -> Tensor:
    """The output embedding applied in `dtype`: logits [..., V] of h [..., H] (float32 or bfloat16 result)."""
    head = model.get_output_embeddings()
    bias = head.bias.to(dtype) if getattr(head, "bias", None) is not None else None
    return F.linear(h.to(dtype), head.weight.to(dtype), bias)


# ---- building ----


def char_vocab(alphabet: str) -> dict[str, int]:
    """The character tokenizer's vocabulary: <pad>=0, <s>=1, </s>=2, then the sorted alphabet."""
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for c in sorted(set(alphabet)):
        vocab.setdefault(c, len(vocab))
    return vocab


def build_char_tokenizer(alphabet: str):
    """A character-level `PreTrainedTokenizerFast`: <pad>=0, <s>=1, </s>=2, then the sorted alphabet."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = char_vocab(alphabet)
    special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<pad>"}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=special["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, **special)


def tiny_shape(model_cfg: ModelConfig, vocab_size: int) -> LlamaShape:
    """The tiny model's shape from the recipe's model.n_layers, hidden, n_heads, mlp (validated: all set, hidden
    divisible by n_heads): what `build_tiny_model` builds and the warm-up cache check expects."""
    hidden, mlp, n_layers, n_heads = model_cfg.hidden, model_cfg.mlp, model_cfg.n_layers, model_cfg.n_heads
    if hidden is None or mlp is None or n_layers is None or n_heads is None:
        raise UserError(
            "model=tiny needs model.hidden, model.mlp, model.n_layers and model.n_heads", kind=ErrorKind.RECIPE
        )
    return LlamaShape(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=mlp,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_heads,
        head_dim=hidden // n_heads,
        rms_norm_eps=TINY_NORM_EPS,
        rope_theta=TINY_ROPE_THETA,
        pad_token_id=0,
    )


def build_tiny_model(model_cfg: ModelConfig, vocab_size: int, seed: int):
    """A LlamaForCausalLM of `tiny_shape` from a local config (random init under `seed`)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    s = tiny_shape(model_cfg, vocab_size)
    cfg = LlamaConfig(
        vocab_size=s.vocab_size,
        hidden_size=s.hidden_size,
        intermediate_size=s.intermediate_size,
        num_hidden_layers=s.num_hidden_layers,
        num_attention_heads=s.num_attention_heads,
        num_key_value_heads=s.num_key_value_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=s.pad_token_id,
        rms_norm_eps=s.rms_norm_eps,  # (and LlamaConfig's default RoPE base, TINY_ROPE_THETA)
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    return model


def no_progress_bars() -> None:
    """Transformers' bars off: a tiny model's "Loading weights" or "Writing model shards" bar would fill a run's
    output, which already says what it does."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def load_hf(path: str | Path):
    """(model, tokenizer) from a local Hugging Face folder; a UserError if it is missing or not loadable."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    no_progress_bars()
    p = Path(path)
    if not (p / "config.json").is_file():
        raise UserError(
            f"model.path: {str(p)!r} is not a Hugging Face model folder (no config.json)", kind=ErrorKind.RECIPE
        )
    tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=torch.float32)
    if tok.eos_token_id is None:
        raise UserError(f"model.path: the tokenizer in {str(p)!r} has no eos_token", kind=ErrorKind.RECIPE)
    return model, tok
