"""Rollouts: generate completions and keep the generating policy's log-probs (the backends by name: samplers.py).

The interface every backend implements (`torch` here; `vllm` in rollout_vllm.py, which imports this module and is
never imported by it):

    backend.generate(prompts: list[str], n: int, spec: SampleSpec, generator) -> Rollouts   # n completions per prompt
    backend.load_weights(state_dict, version)      # weight sync after an optimizer step (PipelineRL)
    backend.version                                # the policy version that generates now

Both backends build their `Rollouts` with `pack`, and take what interruption forces and what truncation means
from length.py.

`TorchSampler` is the CPU/GPU torch backend: batched, a static KV cache allocated once per call, temperature
sampling, stop at EOS, a hard max length, and forced interruption: a row whose thinking reaches its budget
gets the end-of-thinking phrase forced in and then answers (ScaleRL §3.2, "forced length interruption").
Forced tokens are part of the context but not the policy's actions: their `mask` is 0, so no loss sees them.

Speed: prompts come with a group size n (G prompts x n completions each); each prompt is prefilled ONCE and
its K/V shared by its n completions. For Llama/Qwen2-family models the decoder step is `policy.decoder_forward`
on the model's own parameters (no HF cache objects, masks or output dataclasses per token: that per-token
overhead dominates a tiny model); tests/train/test_rollout_on_cpu.py checks it against the model's HF forward.
Other architectures use the HF forward with a DynamicCache.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ablate.train import length
from ablate.train.decoder import decoder_forward
from ablate.train.policy import Policy, head_logits


@dataclass
class SampleSpec:
    max_new_tokens: int
    temperature: float = 1.0
    think_budget: Tensor | None = None
    """[N] long: thinking tokens allowed per completion before the phrase is forced in; None = no interruption."""
    phrase_ids: tuple[int, ...] = ()
    """The end-of-thinking phrase as token ids (forced at the budget; sampling it ends the thinking)."""


@dataclass
class Rollouts:
    """G prompts x n completions; completion rows are grouped by prompt (rows g*n .. g*n+n-1 belong to prompt g)."""

    prompt_ids: Tensor  # [G, P] long, left-padded
    prompt_mask: Tensor  # [G, P] long
    group: Tensor  # [N] long: the prompt row of each completion
    tokens: Tensor  # [N, T] long, pad after EOS
    present: Tensor  # [N, T] bool: token exists (sampled or forced; EOS included)
    mask: Tensor  # [N, T] bool: a sampled token (the policy's action): present and not forced
    logp: Tensor  # [N, T] float32: log-prob of the token under the generating policy (0 where mask is 0)
    truncated: Tensor  # [N] bool: hit max_new_tokens without EOS
    interrupted: Tensor  # [N] bool: the phrase was forced in
    entropy: Tensor | None = (
        None  # [N] mean per-token entropy of the sampling distribution over the row's sampled tokens
    )
    texts: list[str] = field(default_factory=list)  # completions, special tokens removed
    version: int = 0  # policy version that generated them

    @property
    def lengths(self) -> Tensor:
        """[N] completion lengths in tokens (EOS and forced tokens included)."""
        return self.present.sum(1)


def pack(
    policy: Policy,
    ids: Tensor,
    pmask: Tensor,
    group: Tensor,
    tokens: Tensor,
    present: Tensor,
    forced: Tensor,
    logp: Tensor,
    finished: Tensor,
    max_new_tokens: int,
    version: int,
    entropy: Tensor | None = None,
) -> Rollouts:
    """`Rollouts` from what a backend sampled. tokens, present, forced, logp: [N, T]; finished: [N] bool (ended with
    EOS); entropy: [N] or None (then the Monte Carlo estimate mean(-log p) over the sampled tokens).
    Forced tokens are context, not actions: mask and log-prob 0. Truncated = hit max_new_tokens without EOS."""
    mask = present & ~forced
    logp = logp * mask
    if entropy is None:
        entropy = (-logp).sum(1) / mask.sum(1).clamp(min=1)
    texts = policy.tokenizer.batch_decode(
        torch.where(present, tokens, policy.pad_id).tolist(), skip_special_tokens=True
    )
    trunc = length.truncated(present.sum(1), max_new_tokens, finished)
    return Rollouts(ids, pmask, group, tokens, present, mask, logp, trunc, forced.any(1), entropy, texts, version)


class PolicySampler:
    """What every backend shares: `policy` is the source of truth for the weights (`load_weights` copies into
    `policy.model`), and prompts are encoded once, then handed to the backend's `generate_ids`."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.version = 0

    def load_weights(self, state_dict: dict[str, Tensor], version: int) -> None:
        with torch.no_grad():
            self.policy.model.load_state_dict(state_dict, strict=True)
        self.version = version

    @torch.no_grad()
    def generate(
        self, prompts: list[str], n: int, spec: SampleSpec, generator: torch.Generator | None = None
    ) -> Rollouts:
        """n completions for each of the G prompts: N = G*n rows, grouped by prompt."""
        ids, pmask = self.policy.encode_prompts(prompts)
        return self.generate_ids(ids, pmask, n, spec, generator)

    def generate_ids(
        self, ids: Tensor, pmask: Tensor, n: int, spec: SampleSpec, generator: torch.Generator | None = None
    ) -> Rollouts:
        raise NotImplementedError


class TorchSampler(PolicySampler):
    """KV-cached batched sampler over a `Policy` (its own model object: give it a copy for PipelineRL)."""

    @torch.no_grad()
    def generate_ids(
        self, ids: Tensor, pmask: Tensor, n: int, spec: SampleSpec, generator: torch.Generator | None = None
    ) -> Rollouts:
        """As `generate`, from prompt token ids [G, P] and mask [G, P] (left-padded)."""
        pol, model = self.policy, self.policy.model
        dev = next(model.parameters()).device
        ids, pmask = ids.to(dev), pmask.to(dev)
        if generator is not None and generator.device != dev:
            # the run's generators live on the CPU (checkpointed, device-independent); sampling on an accelerator
            # draws from a device generator seeded by them, so a run stays reproducible from its seed
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            generator = torch.Generator(device=dev).manual_seed(seed)
        G = ids.shape[0]
        N, T = G * n, int(spec.max_new_tokens)
        group = torch.arange(G, device=dev).repeat_interleave(n)
        was_training = model.training
        model.eval()
        dec = _FastDecoder(pol, ids, pmask, group, T) if pol.fast else _HFDecoder(pol, ids, pmask, group)

        tokens = torch.full((N, T), pol.pad_id, dtype=torch.long, device=dev)
        present = torch.zeros((N, T), dtype=torch.bool, device=dev)
        forced = torch.zeros((N, T), dtype=torch.bool, device=dev)
        logp = torch.zeros((N, T), dtype=torch.float32, device=dev)
        ent = torch.zeros((N, T), dtype=torch.float32, device=dev)
        done = torch.zeros(N, dtype=torch.bool, device=dev)
        interrupt = spec.think_budget is not None and len(spec.phrase_ids) > 0
        if interrupt:
            force = _Forcing(spec, N, dev)
        temp = float(spec.temperature)
        eos, pad = pol.eos_id, pol.pad_id

        h = dec.h_last  # [N, H]
        for t in range(T):
            lg = head_logits(model, h, pol.head_dtype).float()
            if not bool(torch.isfinite(lg).all()):  # a blown-up policy: the loop marks the run diverged
                raise FloatingPointError("non-finite logits in the sampler")
            lp = torch.log_softmax(lg / temp if temp != 1.0 else lg, -1)  # [N, V]
            probs = lp.exp()
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            ent[:, t] = -(probs * lp).sum(-1)
            tok_lp = lp.gather(1, nxt[:, None]).squeeze(1)
            live = ~done
            if interrupt:
                nxt, forced[:, t] = force.apply(nxt, live, tokens[:, :t])
            nxt = torch.where(live, nxt, torch.full_like(nxt, pad))
            tokens[:, t] = nxt
            present[:, t] = live
            logp[:, t] = torch.where(live & ~forced[:, t], tok_lp, torch.zeros_like(tok_lp))
            if interrupt:
                force.observe(tokens[:, : t + 1], live & ~forced[:, t])
            done |= nxt == eos
            if t == T - 1 or bool(done.all()):
                break
            h = dec.step(nxt, t)
        if was_training:
            model.train()
        Tu = int(present.sum(1).max()) if N else 0  # drop all-pad columns (every row finished early)
        tokens, present, forced, logp = tokens[:, :Tu], present[:, :Tu], forced[:, :Tu], logp[:, :Tu]
        row_ent = (ent[:, :Tu] * (present & ~forced)).sum(1) / (present & ~forced).sum(1).clamp(min=1)
        return pack(pol, ids, pmask, group, tokens, present, forced, logp, done, T, self.version, row_ent)


class _Forcing:
    """Forced interruption while decoding token by token, for N rows at once. A row thinks until it samples the
    end-of-thinking phrase itself or its thinking budget is spent; then what `length.interrupt` says is forced in,
    one token per step (mask 0), and the row goes on to answer."""

    def __init__(self, spec: SampleSpec, N: int, dev: torch.device) -> None:
        self.phrase = torch.tensor(spec.phrase_ids, dtype=torch.long, device=dev)
        if spec.think_budget is None:
            raise ValueError("forced interruption needs a thinking budget per row")
        self.budget = spec.think_budget.to(dev)
        self.in_think = torch.ones(N, dtype=torch.bool, device=dev)
        self.n_think = torch.zeros(N, dtype=torch.long, device=dev)
        self.queue = torch.zeros((N, len(spec.phrase_ids)), dtype=torch.long, device=dev)  # tokens left to force
        self.left = torch.zeros(N, dtype=torch.long, device=dev)
        self.pos = torch.zeros(N, dtype=torch.long, device=dev)

    def apply(self, sampled: Tensor, live: Tensor, so_far: Tensor) -> tuple[Tensor, Tensor]:
        """The tokens to emit now [N] and which of them are forced [N]."""
        start = self.in_think & (self.n_think >= self.budget) & live
        if bool(start.any()):
            phrase = self.phrase.tolist()
            for i in start.nonzero().squeeze(1).tolist():
                row = so_far[i].tolist()
                extra = length.interrupt(row, phrase)[len(row) :]
                self.queue[i, : len(extra)] = torch.tensor(extra, dtype=torch.long)
                self.left[i], self.pos[i] = len(extra), 0
            self.in_think &= ~start
        forcing = (self.left > 0) & live
        if not bool(forcing.any()):
            return sampled, forcing
        tok = self.queue.gather(1, self.pos.clamp(max=self.queue.shape[1] - 1)[:, None]).squeeze(1)
        self.pos += forcing.long()
        self.left -= forcing.long()
        return torch.where(forcing, tok, sampled), forcing

    def observe(self, so_far: Tensor, sampled_now: Tensor) -> None:
        """After a token: count sampled thinking tokens; a row that sampled the phrase ends its thinking."""
        self.n_think += (sampled_now & self.in_think).long()
        self.in_think &= ~length.ends_with_phrase(so_far, self.phrase)


class _FastDecoder:
    """Llama-layout decoding with `decoder_forward`: each prompt prefilled once per group, then a static KV cache."""

    def __init__(self, pol: Policy, ids: Tensor, pmask: Tensor, group: Tensor, max_new: int) -> None:
        self.model = pol.model
        h, kv = pol.prefix(ids, pmask)
        P = ids.shape[1]
        self.P = P
        self.h_last = h[group]
        self.cache = []
        for k, v in kv:
            kc = k.new_empty(group.shape[0], k.shape[1], P + max_new, k.shape[3])
            vc = torch.empty_like(kc)
            kc[:, :, :P] = k[group]
            vc[:, :, :P] = v[group]
            self.cache.append((kc, vc))
        self.pos0 = pmask.long().sum(1)[group]  # [N] position of the first completion token
        self.keymask = None
        if not bool(pmask.all()):
            self.keymask = torch.ones(group.shape[0], 1, 1, P + max_new, dtype=torch.bool, device=ids.device)
            self.keymask[:, 0, 0, :P] = pmask.bool()[group]

    def step(self, tok: Tensor, t: int) -> Tensor:
        """Feed completion token t [N]; returns the hidden state that predicts token t+1 [N, H]."""
        mask = None if self.keymask is None else self.keymask[..., : self.P + t + 1]
        x = self.model.model.embed_tokens(tok[:, None])
        h, _ = decoder_forward(
            self.model, x, (self.pos0 + t)[:, None], self.cache, mask, causal=False, cache_pos=self.P + t
        )
        return h[:, -1]


class _HFDecoder:
    """Fallback for any HF causal LM: its own forward with a DynamicCache (prompts repeated per completion)."""

    def __init__(self, pol: Policy, ids: Tensor, pmask: Tensor, group: Tensor) -> None:
        self.model = pol.model
        self.mask = pmask[group]
        self.cache = None
        # transformers >= 5.2x calls the cache argument `cache` (and warns on `past_key_values`); older ones don't
        self.cache_kw = (
            "cache" if "cache" in inspect.signature(self.model.base_model.forward).parameters else "past_key_values"
        )
        self.h_last = self._run(ids[group])

    def _run(self, ids: Tensor) -> Tensor:
        pos = (self.mask.cumsum(1) - 1).clamp(min=0)[:, -ids.shape[1] :]
        out = self.model.base_model(
            input_ids=ids, attention_mask=self.mask, position_ids=pos, use_cache=True, **{self.cache_kw: self.cache}
        )
        self.cache = getattr(out, "past_key_values", None) or getattr(out, "cache", None)
        return out.last_hidden_state[:, -1]

    def step(self, tok: Tensor, t: int) -> Tensor:
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], 1)
        return self._run(tok[:, None])
