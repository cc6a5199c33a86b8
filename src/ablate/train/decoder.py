"""A functional decoder for Llama-layout causal LMs (llama, qwen2, mistral), shared by the sampler and the trainer.

`decoder_forward` runs the model's own parameters without Hugging Face's per-call machinery (mask builders, cache
objects, output dataclasses): at the tiny model's size that machinery, paid per decoded token, costs more than
the matmuls. `fast_supported` says whether a model has the layout it reads; other models use their HF forward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor


def fast_supported(model: Any) -> bool:
    """True for Llama/Qwen2/Mistral-shaped decoders (the parameter layout `decoder_forward` reads)."""
    base = getattr(model, "model", None)
    if base is None:
        return False
    try:
        layer = base.layers[0]
        a, mlp = layer.self_attn, layer.mlp
        _ = (
            a.q_proj,
            a.k_proj,
            a.v_proj,
            a.o_proj,
            mlp.gate_proj,
            mlp.up_proj,
            mlp.down_proj,
            base.norm,
            base.rotary_emb,
        )
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
            if past is None:
                raise ValueError("decoding at cache_pos needs the static cache in past")
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
