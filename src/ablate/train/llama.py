"""The tiny model read back without transformers: its warm-up folder as a plain torch module and a character
tokenizer, for the built-in trainer's runs.

Importing transformers costs about 3.5 s of every run's start on a CPU, more than the 40 first steps of the tiny
model take. The warm-up (warmup.py) still builds and saves the model with transformers, once per machine; a run of
the built-in trainer with the torch sampler then loads that folder here:

    model, tok = load_tiny(folder)     # TinyLlama + CharTokenizer, the same weights and vocabulary
    skeleton(shape)                    # the module on the meta device (the cache check reads its keys)

`TinyLlama` holds the parameters under the Hugging Face names (`model.layers.0.self_attn.q_proj.weight`, ...,
`lm_head.weight` tied to `model.embed_tokens.weight`), so checkpoints, weight syncs and `decoder.decoder_forward`
see the same model either way; it has no forward of its own: the decoder runs it (`fast_supported` is true), and
`rotary_emb` computes RoPE's cos/sin as transformers' default RoPE does, to the bit (tested). What needs the
transformers object (TRL, the vLLM sampler, FSDP's own forward) loads the folder with `policy.load_hf` instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class LlamaShape:
    """What the decoder reads of a Llama config (the attribute names are transformers', so `decoder` reads both)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    pad_token_id: int | None = None
    """The embedding's padding row: it gets no gradient from the lookup (transformers' `padding_idx`)."""
    model_type: str = "llama"
    hidden_act: str = "silu"


def shape_of(config: dict) -> LlamaShape | None:
    """The shape of a saved config.json, or None when it is not a Llama this module runs exactly as transformers
    would (another architecture or activation, biases, untied head, scaled or partial RoPE, in either config format)."""
    rope = config.get("rope_parameters") or {"rope_type": "default", "rope_theta": config.get("rope_theta")}
    plain = (
        config.get("rope_scaling") is None  # (the older config format's scaled RoPE)
        and config.get("partial_rotary_factor", 1.0) == 1.0
        and config.get("model_type") == "llama"
        and config.get("hidden_act") == "silu"
        and not config.get("attention_bias")
        and not config.get("mlp_bias")
        and config.get("tie_word_embeddings") is True
        and config.get("pretraining_tp", 1) == 1
        and rope.get("rope_type") == "default"
        and isinstance(rope.get("rope_theta"), (int, float))
    )
    if not plain:
        return None
    heads = int(config["num_attention_heads"])
    return LlamaShape(
        vocab_size=int(config["vocab_size"]),
        hidden_size=int(config["hidden_size"]),
        intermediate_size=int(config["intermediate_size"]),
        num_hidden_layers=int(config["num_hidden_layers"]),
        num_attention_heads=heads,
        num_key_value_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
        rms_norm_eps=float(config["rms_norm_eps"]),
        rope_theta=float(rope["rope_theta"]),
        pad_token_id=None if config.get("pad_token_id") is None else int(config["pad_token_id"]),
    )


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps


class _Attention(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        kv = s.num_key_value_heads * s.head_dim
        self.q_proj = nn.Linear(s.hidden_size, s.num_attention_heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden_size, kv, bias=False)
        self.v_proj = nn.Linear(s.hidden_size, kv, bias=False)
        self.o_proj = nn.Linear(s.num_attention_heads * s.head_dim, s.hidden_size, bias=False)


class _MLP(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)


class _Layer(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.self_attn = _Attention(s)
        self.mlp = _MLP(s)
        self.input_layernorm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = _RMSNorm(s.hidden_size, s.rms_norm_eps)


class RotaryEmbedding(nn.Module):
    """RoPE's cos/sin [B, L, D] at positions [B, L]: transformers' default RoPE, operation for operation."""

    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        inv_freq = 1.0 / (s.rope_theta ** (torch.arange(0, s.head_dim, 2, dtype=torch.float) / s.head_dim))
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)  # (transformers scales by 1.0 here)


class _Decoder(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size, padding_idx=s.pad_token_id)
        self.layers = nn.ModuleList(_Layer(s) for _ in range(s.num_hidden_layers))
        self.norm = _RMSNorm(s.hidden_size, s.rms_norm_eps)


class TinyLlama(nn.Module):
    """A Llama-layout causal LM's parameters under transformers' names, with a tied head (see the module doc)."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.config = shape
        self.model = _Decoder(shape)
        self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight
        with torch.device("cpu"):  # a buffer, not a weight: computed even when the skeleton is built on meta
            self.model.rotary_emb = RotaryEmbedding(shape)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head


def skeleton(shape: LlamaShape) -> TinyLlama:
    """The module with no weights (on the meta device): its parameter names and shapes, built in no time."""
    with torch.device("meta"):
        return TinyLlama(shape)


@dataclass(frozen=True)
class CharTokenizer:
    """The tiny model's character tokenizer (policy.build_char_tokenizer's, as saved in tokenizer.json) through the
    `tokenizers` library: the ids, encode and batch_decode the policy and the sampler use."""

    backend: object  # tokenizers.Tokenizer
    bos_token_id: int
    eos_token_id: int
    pad_token_id: int

    def __len__(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))  # type: ignore[attr-defined]

    def get_vocab(self) -> dict[str, int]:
        return dict(self.backend.get_vocab(with_added_tokens=True))  # type: ignore[attr-defined]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)  # type: ignore[attr-defined]

    def batch_decode(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        return list(self.backend.decode_batch(ids, skip_special_tokens=skip_special_tokens))  # type: ignore[attr-defined]


def load_char_tokenizer(folder: Path) -> CharTokenizer | None:
    """The folder's tokenizer.json, with the special tokens tokenizer_config.json names (a KeyError if one is
    missing from the vocabulary); None when that config asks transformers to clean up decoded text, which the
    tokenizers library does not do."""
    from tokenizers import Tokenizer

    names = json.loads((folder / "tokenizer_config.json").read_text())
    if names.get("clean_up_tokenization_spaces"):
        return None
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab(with_added_tokens=True)
    return CharTokenizer(tok, vocab[names["bos_token"]], vocab[names["eos_token"]], vocab[names["pad_token"]])


def load_tiny(folder: Path) -> tuple[TinyLlama, CharTokenizer] | None:
    """The model and tokenizer of a warm-up folder, or None when its config is not one `shape_of` runs exactly (or
    its tokenizer asks transformers to clean up decoded text). The weights load strictly, as float32: every one of
    the model's and none other, the tied head from whichever of its two names the file holds."""
    from safetensors.torch import load_file

    shape = shape_of(json.loads((folder / "config.json").read_text()))
    tok = load_char_tokenizer(folder)
    if shape is None or tok is None:
        return None
    # float32 as `policy.load_hf` loads it, whatever the file holds (the warm-up saves float32)
    weights = {k: v.to(torch.float32) for k, v in load_file(str(folder / "model.safetensors")).items()}
    tied = ("lm_head.weight", "model.embed_tokens.weight")  # saved once, under either name
    for a, b in (tied, tied[::-1]):
        if a not in weights and b in weights:
            weights[a] = weights[b]
    model = skeleton(shape)
    model.load_state_dict(weights, strict=True, assign=True)
    model.lm_head.weight = model.model.embed_tokens.weight  # tied again (assign replaced both Parameters)
    return model.eval(), tok
