"""The vLLM rollout backend (`rollout=vllm`): same interface and `Rollouts` as the torch sampler (rollout.py).

samplers.BACKENDS names this module's `VLLMSampler` as `vllm` (imported on first use); the engine it samples from,
and how it follows the trainer's weights, is vllm_engine.py.

- Sampling: token-id prompts (the policy's own encoding, BOS included), `n` completions per prompt, temperature,
  `max_tokens`, stop at EOS, `logprobs=0` in `processed_logprobs` mode: the sampled token's log-prob AFTER the
  temperature, i.e. log softmax(logits / T), which is what the trainer recomputes (Learner.step). Per-request
  seeds come from the caller's `torch.Generator`, so runs are reproducible (generator=None: vLLM's own RNG).
- Forced interruption (ScaleRL §3.2) in rounds. Thinking round: sample up to the remaining budget, stopping at EOS
  or at the end-of-thinking phrase; a row that used its budget gets what `length.interrupt` forces (mask 0,
  log-prob 0, exactly as the torch sampler); answer round: continue from prompt + everything so far up to
  max_new_tokens. Continuations are new requests whose prefix the prefix cache serves; a sample cut into rounds is
  still a sample of the same policy.
- Entropy: vLLM does not return the sampling distribution, so `Rollouts.entropy` is the Monte Carlo estimate
  mean(-log p(sampled token)) per row (unbiased for the expected per-token entropy); the torch sampler's is exact.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ablate.errors import ErrorKind, UserError
from ablate.train import length
from ablate.train.policy import Policy
from ablate.train.rollout import PolicySampler, Rollouts, SampleSpec, pack
from ablate.train.vllm_engine import (
    VLLM_VERSION,
    Engine,
    EngineOptions,
    engine_dtype,
    get_engine,
    head_dtype_name,
    shutdown_engines,
    vllm_import,
)

__all__ = ["VLLM_VERSION", "VLLMSampler", "shutdown_engines"]
GREEDY_EPS = 1e-5  # vLLM treats temperature below this as greedy (its _SAMPLING_EPS)


class VLLMSampler(PolicySampler):
    """Rollouts from a shared vLLM engine, synced to `policy`'s weights before every generation that needs it.

    `policy` is the source of truth, as for `TorchSampler`: `load_weights` copies into `policy.model` and the
    engine follows (immediately, so the sync time lands on the step that published the weights).
    """

    def __init__(self, policy: Policy, **options: Any) -> None:
        super().__init__(policy)
        self.opts = EngineOptions(**options)
        engine_dtype(policy, self.opts.dtype)  # refuse bad settings before starting anything
        head_dtype_name(policy)
        vllm_import()  # without vLLM: the UserError that says how to install it, before a run starts
        self._engine: Engine | None = None
        self._seeded = True

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = get_engine(self.policy, self.opts)
        return self._engine

    @property
    def sync_seconds(self) -> list[float]:
        return self.engine.sync_seconds

    def load_weights(self, state_dict: dict[str, Tensor], version: int) -> None:
        super().load_weights(state_dict, version)
        with self.engine.lock:
            self.engine.sync(self.policy.model, version)

    def _ensure_synced(self) -> None:
        eng = self.engine
        if not eng.holds(self.policy.model):
            eng.sync(self.policy.model, self.version, published=False)

    @torch.no_grad()
    def generate_ids(
        self, ids: Tensor, pmask: Tensor, n: int, spec: SampleSpec, generator: torch.Generator | None = None
    ) -> Rollouts:
        """As `generate`, from prompt token ids [G, P] and mask [G, P] (left-padded)."""
        pol = self.policy
        G = ids.shape[0]
        N, T = G * n, int(spec.max_new_tokens)
        group = torch.arange(G).repeat_interleave(n)
        prompt_lists = [ids[g][pmask[g].bool()].tolist() for g in range(G)]
        if max(len(p) for p in prompt_lists) + T > self.engine.max_model_len:
            raise UserError(
                f"prompt + length.max_new_tokens={T} exceeds the vLLM engine's max_model_len "
                f"{self.engine.max_model_len}; raise rollout.max_model_len or shorten the generation",
                kind=ErrorKind.RECIPE,
            )
        # per-request seeds from the caller's generator: reproducible runs. generator=None: vLLM's own RNG (like the
        # torch sampler's global RNG), which skips vLLM's per-request generators (faster on CPU, not reproducible)
        self._seeded = generator is not None
        seeds = torch.randint(0, 2**31 - 1, (N,), generator=generator).tolist()
        rows = [_Row() for _ in range(N)]
        phrase = list(spec.phrase_ids)
        think_budget = spec.think_budget if len(phrase) > 0 else None
        interrupt = think_budget is not None
        budget = think_budget.tolist() if think_budget is not None else None
        with self.engine.lock:
            self._ensure_synced()
            if not interrupt and spec.temperature >= GREEDY_EPS:
                # the plain case: one request per prompt with n completions (prompt prefilled once per group)
                outs = self._run(
                    [prompt_lists[g] for g in range(G)],
                    [T] * G,
                    spec.temperature,
                    [seeds[g * n] for g in range(G)],
                    n=n,
                )
                for g, out in enumerate(outs):
                    for j, c in enumerate(out.outputs):
                        rows[g * n + j].extend(c.token_ids, _logps(c), pol.eos_id)
            elif not interrupt:  # greedy: vLLM wants n=1 per request
                outs = self._run([prompt_lists[g] for g in group.tolist()], [T] * N, 0.0, seeds, n=1)
                for i, out in enumerate(outs):
                    rows[i].extend(out.outputs[0].token_ids, _logps(out.outputs[0]), pol.eos_id)
            else:
                self._interrupted(rows, prompt_lists, group.tolist(), budget, phrase, T, spec.temperature, seeds)
        return self._pack(rows, ids, pmask, group, T)

    # ---- forced interruption in rounds ----

    def _interrupted(self, rows, prompts, group, budget, phrase, T, temp, seeds) -> None:
        L, eos = len(phrase), self.policy.eos_id
        for r in rows:
            r.in_think = True
        rnd = 0
        while True:
            think = [i for i, r in enumerate(rows) if not r.done and r.in_think and len(r.tokens) < T]
            if not think:
                break
            # thinking round: at most the remaining budget; the phrase as a stop string ends thinking early
            maxt = [min(budget[i] - rows[i].n_think, T - len(rows[i].tokens)) for i in think]
            outs = self._run(
                [prompts[group[i]] + rows[i].tokens for i in think],
                maxt,
                temp,
                [seeds[i] + rnd for i in think],
                n=1,
                stop=self._phrase_text(phrase),
            )
            for i, out in zip(think, outs):
                r, c = rows[i], out.outputs[0]
                start = len(r.tokens)
                r.extend(c.token_ids, _logps(c), eos)
                r.n_think += len(r.tokens) - start
                end = length.phrase_end(r.tokens, phrase, max(0, start - L + 1))
                if end is not None:  # the model ended its thinking itself: drop anything sampled after the phrase
                    r.cut(end)
                    r.in_think = False
                    r.done = bool(r.tokens) and r.tokens[-1] == eos
                elif not r.done and r.n_think >= budget[i]:
                    extra = length.interrupt(r.tokens, phrase)[len(r.tokens) :]
                    r.force(extra[: T - len(r.tokens)])  # the budget is spent: the phrase goes in (mask 0)
                    r.in_think = False
            rnd += 1
        answer = [i for i, r in enumerate(rows) if not r.done and not r.in_think and len(r.tokens) < T]
        if answer:
            outs = self._run(
                [prompts[group[i]] + rows[i].tokens for i in answer],
                [T - len(rows[i].tokens) for i in answer],
                temp,
                [seeds[i] + 7919 for i in answer],
                n=1,
            )
            for i, out in zip(answer, outs):
                rows[i].extend(out.outputs[0].token_ids, _logps(out.outputs[0]), eos)

    def _phrase_text(self, phrase: list[int]) -> list[str]:
        text = self.policy.tokenizer.decode(phrase, skip_special_tokens=True)
        return [text] if text else []

    # ---- vLLM calls ----

    def _run(
        self,
        prompts: list[list[int]],
        max_tokens: list[int],
        temp: float,
        seeds: list[int],
        n: int,
        stop: list[str] | None = None,
    ) -> list[Any]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        greedy = temp < GREEDY_EPS
        params = [
            SamplingParams(
                n=n,
                temperature=0.0 if greedy else float(temp),
                max_tokens=int(m),
                logprobs=0,
                seed=int(s) if self._seeded and not greedy else None,
                stop_token_ids=[self.policy.eos_id],
                stop=stop or None,
                include_stop_str_in_output=True,
                skip_special_tokens=True,
            )
            for m, s in zip(max_tokens, seeds)
        ]
        reqs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        return self.engine.llm.generate(reqs, params, use_tqdm=False)

    def _pack(self, rows: list[_Row], ids: Tensor, pmask: Tensor, group: Tensor, T: int) -> Rollouts:
        pol = self.policy
        N = len(rows)
        Tu = max([len(r.tokens) for r in rows] + [0])
        tokens = torch.full((N, Tu), pol.pad_id, dtype=torch.long)
        present = torch.zeros((N, Tu), dtype=torch.bool)
        forced = torch.zeros((N, Tu), dtype=torch.bool)
        logp = torch.zeros((N, Tu), dtype=torch.float32)
        for i, r in enumerate(rows):
            k = len(r.tokens)
            tokens[i, :k] = torch.tensor(r.tokens, dtype=torch.long)
            present[i, :k] = True
            forced[i, :k] = torch.tensor(r.forced, dtype=torch.bool)
            logp[i, :k] = torch.tensor(r.logp, dtype=torch.float32)
        done = torch.tensor([r.done for r in rows], dtype=torch.bool)
        # entropy=None: the Monte Carlo estimate (vLLM does not return the full distribution)
        return pack(pol, ids, pmask, group, tokens, present, forced, logp, done, T, self.version)


class _Row:
    """One completion being built: tokens, which were forced, their log-probs, thinking state."""

    __slots__ = ("done", "forced", "in_think", "logp", "n_think", "tokens")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.forced: list[bool] = []
        self.logp: list[float] = []
        self.done = False
        self.in_think = False
        self.n_think = 0

    def extend(self, toks: Any, lps: list[float], eos: int) -> None:
        toks = list(toks)
        if eos in toks:  # EOS ends the completion (kept, as the torch sampler keeps it)
            k = toks.index(eos) + 1
            toks, lps = toks[:k], lps[:k]
            self.done = True
        self.tokens += toks
        self.forced += [False] * len(toks)
        self.logp += lps

    def cut(self, k: int) -> None:
        del self.tokens[k:], self.forced[k:], self.logp[k:]

    def force(self, toks: list[int]) -> None:
        self.tokens += toks
        self.forced += [True] * len(toks)
        self.logp += [0.0] * len(toks)


def _logps(c: Any) -> list[float]:
    """The sampled tokens' log-probs from a vLLM CompletionOutput (logprobs=0: one dict per token)."""
    return [float(d[t].logprob) for t, d in zip(c.token_ids, c.logprobs)]
