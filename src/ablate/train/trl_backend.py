"""`trainer=trl`: the recipe run by Hugging Face TRL's `GRPOTrainer`, writing the same run directory as ablate's own.

    args = grpo_config(cfg, output_dir, device)   # the recipe as a GRPOConfig (the mapping; tested field by field)
    TRLLoop(cfg, rd, stop).main()                  # one run, like loop.RunLoop: a summary dict

What is ablate's and what is TRL's:
- TRL generates, computes advantages and the loss, and steps the optimizer (`GRPOTrainer.train`). The recipe maps
  onto `GRPOConfig` (`grpo_config`); options TRL lacks are refused by validation (ablate.trainers).
- The reward is the task's verifier (and DAPO's overlong penalty for length=penalty), as one reward function that
  also counts what the run generated: samples, tokens, truncation, train reward.
- Evaluation is ablate's: `Evaluator` over TRL's live model (no copy), mean@k on the held-out split at the same
  steps, so metrics.jsonl has the built-in trainer's fields and `status`, `rank` and `extrapolate` work unchanged.
  TRL's own logs (entropy, clip ratio, gradient norm) come in through `on_log`.
- Checkpoints are TRL's (`ckpt/checkpoint-N/`: weights, optimizer, scheduler, RNG), with ablate's state beside them
  (`ablate_state.json`: compute, accumulators, health, the last evaluation). A resume picks the newest checkpoint
  that has both and passes `check_checkpoint` (every file TRL will load is there, loads, and fits the model;
  ablate's state fits the run: checkpoint.check_state), else the next older one (a failed one is set aside as
  `bad-checkpoint-N`, out of TRL's rotation), cuts metrics.jsonl back to its step, and calls
  `train(resume_from_checkpoint=...)`. With none usable, the run starts afresh only while metrics.jsonl records
  no training (as the built-in trainer's checkpoint.Checkpoints.resume), else fails in one line.
- A stop request (SIGTERM, SIGUSR2, ...) makes the callback ask TRL to save and stop at the step's end: the run
  ends `preempted` and resumes there.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import torch

from ablate import store
from ablate.config import RunConfig
from ablate.errors import UserError
from ablate.identity import arm_id, run_id
from ablate.rundir import RunDir
from ablate.train import distributed, length
from ablate.train.checkpoint import BadCheckpoint, check_state, faults, first_line, metric_steps
from ablate.train.compute import Compute, device_count
from ablate.train.evaluate import Accumulator, Evaluator, Health
from ablate.train.loop import Recorder
from ablate.train.step import Diverged, Learner

log = logging.getLogger("ablate.train")

STATE = "ablate_state.json"
"""ablate's part of a TRL checkpoint, written into `checkpoint-N/` once TRL has saved it."""

_CKPT = re.compile(r"checkpoint-(\d+)")

# TRL's log keys -> metrics.jsonl fields (means since the previous evaluation). Not zero_variance_frac: TRL drops
# no group, and its frac_reward_zero_std means another thing under scale_rewards=batch.
TRL_METRICS = {"entropy": "entropy", "grad_norm": "grad_norm", "clip_ratio/region_mean": "is_clip_frac",
               "cispo_clip_ratio": "is_clip_frac", "loss": "loss"}


def require_trl() -> None:
    """A UserError naming the fix when TRL is not installed (it is an extra: `pip install '.[trl]'`)."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        raise UserError("trainer=trl needs Hugging Face TRL: pip install '.[trl]' (or use trainer=ablate)")


def check_devices(cfg: RunConfig) -> None:
    """One process holds one GPU: HF's Trainer would wrap a model in nn.DataParallel over every visible GPU, which
    TRL refuses. A UserError before anything is written, naming the fix."""
    if cfg.resources.world == 1 and torch.cuda.is_available() and torch.cuda.device_count() > 1 \
            and cfg.train.device != "cpu":
        n = torch.cuda.device_count()
        raise UserError(f"trainer=trl on one process sees {n} GPUs: set resources.nproc={n} (one rank per GPU), or "
                        "make one visible (CUDA_VISIBLE_DEVICES=0)")


def prompt_prefix(tok: Any) -> str:
    """The text put before every prompt so that TRL's tokenization starts with BOS once, as ablate's does: the BOS
    text when the tokenizer does not add it itself, else nothing (a Llama tokenizer would otherwise give two)."""
    if tok.bos_token is None:
        return ""
    adds_bos = tok("1")["input_ids"][:1] == [tok.bos_token_id]
    return "" if adds_bos else tok.bos_token


def _quiet() -> None:
    """No progress bars from transformers, and not the deprecation notices TRL's own settings trigger in it (they
    are TRL's to fix, and would fill every run's log)."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)


def loss_type(cfg: RunConfig) -> str:
    """TRL's loss_type for the recipe's loss x aggregation (validation has refused the pairs TRL lacks)."""
    if cfg.loss.name == "cispo":
        return "cispo"
    return "dapo" if cfg.aggregation.name == "token" else "grpo"


def grpo_config(cfg: RunConfig, output_dir: Path | str, device: torch.device):
    """The recipe as TRL's GRPOConfig (see ablate.trainers.SUPPORT for the option-by-option mapping)."""
    from trl import GRPOConfig

    loss, o, lc = cfg.loss, cfg.optim, cfg.length
    per_rank = cfg.batch.prompts * cfg.batch.generations // cfg.resources.world  # the step's completions per rank
    micro = o.micro_batch or per_rank
    accum = per_rank // micro
    eps = {"grpo": {"epsilon": loss.eps, "epsilon_high": loss.eps},  # symmetric
           "dapo": {"epsilon": loss.eps_low, "epsilon_high": loss.eps_high},
           "gspo": {"epsilon": loss.eps_low, "epsilon_high": loss.eps_high},
           "cispo": {"epsilon_high": loss.eps_max}}[loss.name]
    vllm: dict[str, Any] = {}
    if cfg.rollout.name == "vllm":
        vllm = {"use_vllm": True, "vllm_mode": cfg.trainer.vllm_mode,
                "vllm_gpu_memory_utilization": cfg.rollout.gpu_memory_utilization,
                "vllm_enable_sleep_mode": False}
        if cfg.rollout.max_model_len:
            vllm["vllm_max_model_length"] = cfg.rollout.max_model_len
        if cfg.trainer.vllm_mode == "server" and cfg.trainer.vllm_server_url:
            vllm["vllm_server_base_url"] = cfg.trainer.vllm_server_url
    return GRPOConfig(
        output_dir=str(output_dir),
        # the loss
        loss_type=loss_type(cfg),
        importance_sampling_level="sequence" if loss.name == "gspo" else "token",
        **eps,
        beta=0.0,  # ScaleRL and ablate have no KL term
        scale_rewards={"prompt": "group", "batch": "batch", "none": "none"}[cfg.normalization.name],
        cast_lm_head_to_fp32=cfg.precision.name == "fp32_head",
        mask_truncated_completions=False,  # a truncated completion is graded wrong (reward 0), as in ablate
        # the batch and the off-policy scheme: k optimizer steps per generation round, one pass over each batch
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accum,
        num_generations=cfg.batch.generations,
        steps_per_generation=cfg.offpolicy.k * accum,
        num_iterations=1,
        shuffle_dataset=True,
        # generation
        max_completion_length=lc.max_new_tokens,
        temperature=cfg.rollout.temperature,
        top_p=1.0,
        top_k=0,
        **vllm,
        # the optimizer and its schedule
        learning_rate=o.lr,
        adam_beta1=o.betas[0],
        adam_beta2=o.betas[1],
        adam_epsilon=o.eps if o.eps is not None else 1e-8,
        weight_decay=o.weight_decay,
        max_grad_norm=o.grad_clip,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=o.lr_warmup_steps,
        # the run
        max_steps=cfg.train.max_steps,
        seed=cfg.seed,
        data_seed=cfg.seed,
        save_strategy="steps",
        save_steps=cfg.train.checkpoint_every,
        save_total_limit=2,
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        use_cpu=device.type == "cpu",
        bf16=False,  # the model trains in its own dtype (float32), as ablate's does; `precision` sets the head
        gradient_checkpointing=False,  # TRL's default recomputes the forward: compute the flops count does not see
        logging_nan_inf_filter=False,  # a non-finite loss must reach on_log (divergence)
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )


def checkpoints(ckpt_dir: Path) -> list[tuple[int, Path, bool]]:
    """TRL's checkpoint-N folders, oldest first, each with whether ablate finished saving it (its state file is
    there: only those are resumed from)."""
    found = []
    if ckpt_dir.is_dir():
        for p in ckpt_dir.iterdir():
            m = _CKPT.fullmatch(p.name)
            if m:
                found.append((int(m.group(1)), p, (p / STATE).is_file()))
    return sorted(found)


def check_checkpoint(path: Path, step: int, model: Any, world: distributed.World) -> dict[str, Any]:
    """ablate's state of TRL checkpoint `path` (checkpoint-`step`), once every file HF's Trainer will load from it
    is there, loads, and fits `model`; else BadCheckpoint. HF's own loading would take missing weights silently
    (a warning, and the warmed-up ones stay) and skip a missing optimizer, and fail on the rest only once training
    has begun; this reads shapes only (memory-mapped), not the tensors' data."""
    from collections import Counter

    from safetensors import safe_open
    from transformers.trainer_pt_utils import safe_globals

    st = json.loads((path / STATE).read_text())
    if not isinstance(st, dict) or st.get("step") != step or type(st.get("step")) is not int:
        raise BadCheckpoint(f"its {STATE} is for step {st.get('step') if isinstance(st, dict) else st!r}, not {step}")
    ts = json.loads((path / "trainer_state.json").read_text())
    if not isinstance(ts, dict) or type(ts.get("global_step")) is not int or ts["global_step"] != step:
        raise BadCheckpoint(f"its trainer_state.json is not at step {step}")
    if not (path / "model.safetensors").is_file():
        raise BadCheckpoint("it has no model.safetensors")
    ours = model.state_dict()
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        saved = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    for k, shape in saved.items():
        if k not in ours or tuple(ours[k].shape) != shape:
            raise BadCheckpoint(f"its weight {k} {'is not in the model' if k not in ours else f'has shape {shape}'}")
    # a weight may be left out only when it is tied to one saved (save_pretrained writes a tied tensor once)
    storage = {ours[k].untyped_storage().data_ptr() for k in saved}
    missing = [k for k in ours if k not in saved and ours[k].untyped_storage().data_ptr() not in storage]
    if missing:
        raise BadCheckpoint(f"its weights lack {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    opt = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True, mmap=True)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = opt.get("param_groups") if isinstance(opt, dict) else None
    if not isinstance(groups, list) or sum(len(g.get("params", ())) for g in groups) != len(params) \
            or not isinstance(opt.get("state"), dict):
        raise BadCheckpoint(f"its optimizer.pt is not the state of an optimizer over the model's {len(params)} tensors")
    moments = Counter(tuple(v.shape) for s in opt["state"].values() for v in s.values()
                      if torch.is_tensor(v) and v.dim() > 0)
    if moments - Counter(tuple(p.shape) for p in params for _ in range(2)):
        raise BadCheckpoint("its optimizer state has shapes the model's parameters do not")
    if not isinstance(torch.load(path / "scheduler.pt", weights_only=True), dict):
        raise BadCheckpoint("its scheduler.pt is not a scheduler's state")
    rng = path / (f"rng_state_{world.rank}.pth" if world.size > 1 else "rng_state.pth")
    if rng.exists():  # (optional for HF too: a checkpoint of another number of ranks has others)
        with safe_globals():
            if not isinstance(torch.load(rng, weights_only=True), dict):
                raise BadCheckpoint(f"its {rng.name} is not an RNG state")
    return st


class TRLLoop(Recorder):
    """One run under TRL over its run directory: what loop.RunLoop is for the built-in trainer (the evaluation
    record and the mending of metrics.jsonl are theirs in common: loop.Recorder)."""

    def __init__(self, cfg: RunConfig, rd: RunDir, stop: threading.Event,
                 world: distributed.World | None = None, callbacks: list[Any] = ()) -> None:
        require_trl()
        _quiet()
        self.cfg, self.rd, self.stop = cfg, rd, stop
        self.world = world = world or distributed.World()
        self.lead = world.lead  # rank 0 writes the run directory
        self.callbacks = list(callbacks)  # more TrainerCallbacks, called before ablate's (bench/train.py's timer)
        # task, validation split and the policy (the warmed-up tiny folder, or model.path) as the built-in trainer
        # loads them; TRL trains this very model (accelerate wraps it for the ranks), and the evaluator samples
        # from it: each rank grades its share of the validation prompts and the counts are summed
        if not world.lead:
            world.barrier()  # rank 0 builds (and caches) the warmed-up policy first; the others load it
        self.learner = Learner(cfg)
        if world.lead:
            world.barrier()
        self.learner.opt = None  # TRL brings its own optimizer
        self.learner.world = world
        self.policy = self.learner.policy
        self.evaluator = Evaluator(self.learner)
        self.task = self.learner.task
        dev = self.learner.device
        devices = world.size if world.size > 1 else (device_count() if dev.type == "cuda" else 1)
        self.compute = Compute(devices=devices, params=self.policy.n_params)
        self.acc = Accumulator()
        self.health = Health()
        self.step = 0
        self.last_eval: dict[str, Any] | None = None
        self.round: dict[str, float] = {}  # the current generation round's totals over all ranks
        self.round_left = 0  # its steps not yet counted (a round feeds offpolicy.k optimizer steps)
        self.round_truncation = 0.0
        self.new_tokens = 0  # completion tokens generated for training (the benchmark's throughput)
        self.seen_step = -1  # the last step whose end was handled (on_log)

    # ---- the reward: the task's verifier, and what the run generated ----

    def reward(self, prompts: list[str], completions: list[str], completion_ids: list[list[int]],
               answer: list[str], **_: Any) -> list[float]:
        tok, lc = self.policy.tokenizer, self.cfg.length
        eos = tok.eos_token_id
        lengths = torch.tensor([len(ids) for ids in completion_ids])
        truncated = [eos not in ids and len(ids) >= lc.max_new_tokens for ids in completion_ids]
        ok = self.task.grade(completions, answer, truncated)
        rewards = torch.tensor([self.task.reward(c) for c in ok], dtype=torch.float32)
        if lc.name == "penalty":
            rewards = rewards + length.length_penalty(lengths, torch.tensor(ok), lc.l_max, lc.l_cache).float()
        prompt_tokens = sum(len(tok.encode(p, add_special_tokens=False)) for p in prompts)
        # every rank scores its share of the round, once per round, in step: the round's totals over all ranks
        n, prompt_tokens, new_tokens, n_trunc, reward_sum, passed = self.world.totals(
            [len(completions), prompt_tokens, int(lengths.sum()), sum(truncated), float(rewards.sum()), sum(ok)])
        self.new_tokens += int(new_tokens)
        # counted step by step as the round is trained (k steps), like the built-in trainer counts each batch; a
        # resume mid-round makes TRL generate a new round, which replaces what was left of the old one
        self.round = {"n": n, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "truncated": n_trunc,
                      "reward": reward_sum, "passed": passed}
        self.round_left = self.cfg.offpolicy.k
        return rewards.tolist()

    def count_step(self) -> None:
        """One optimizer step's share of the current round: compute, samples and the training metrics."""
        if self.round_left <= 0:
            return
        self.round_left -= 1
        r, k = self.round, self.cfg.offpolicy.k
        self.compute.add_generation(r["prompt_tokens"] / k, r["new_tokens"] / k, int(r["n"]) // k)
        self.compute.add_training((r["prompt_tokens"] + r["new_tokens"]) / k)  # each completion is trained once
        self.round_truncation = r["truncated"] / r["n"]
        self.acc.add({"train_reward": r["reward"] / r["n"], "train_pass_rate": r["passed"] / r["n"],
                      "truncation_rate": self.round_truncation, "mean_response_len": r["new_tokens"] / r["n"],
                      "lag": 0.0})

    # ---- ablate's side of a checkpoint ----

    def state(self) -> dict[str, Any]:
        return {"step": self.step, "compute": self.compute.state_dict(), "acc": self.acc.state_dict(),
                "health": self.health.state_dict(), "eval": self.last_eval}

    def resume(self) -> Path | None:
        """The checkpoint to resume from (ablate's state loaded, metrics.jsonl mended), or None for a fresh start:
        the newest complete one that passes `check_checkpoint`, else the next older one (see the module docstring)."""
        every = checkpoints(self.rd.ckpt_dir)
        found = [(step, path) for step, path, complete in every if complete]
        if self.lead:  # checkpoints TRL saved but ablate did not finish (a crash between the two): never resumed
            newest = found[-1][0] if found else -1
            for step, path, complete in every:
                if step > newest and not complete:
                    shutil.rmtree(path, ignore_errors=True)
        steps = metric_steps(self.rd.metrics_path)
        tr, rejected = self.cfg.train, []
        for step, path in reversed(found):
            try:
                st = check_checkpoint(path, step, self.policy.model, self.world)
                check_state(st, max_steps=tr.max_steps, eval_every=tr.eval_every, steps=steps)
                self.compute.load_state_dict(st["compute"])
                self.acc.load_state_dict(st["acc"])
                self.health.load_state_dict(st["health"])
            except (MemoryError, torch.cuda.OutOfMemoryError):
                raise
            except Exception as e:
                why = str(e) if isinstance(e, BadCheckpoint) else f"{type(e).__name__}: {first_line(e)}"
                log.warning("checkpoint %s cannot be resumed from (%s); trying the one before", path, why)
                rejected.append((path, why))
                continue
            self.step, self.last_eval = st["step"], st.get("eval")
            self.world.barrier()  # every rank is past its attempt before rank 0 renames what failed
            self._set_aside(rejected)
            log.info("resuming from %s (step %d)", path.name, step)
            if self.lead:
                self.mend_metrics()
            return path
        if rejected:
            what = faults([p.name for p, _ in rejected], [why for _, why in rejected])
            if any(s > 0 for s in steps):
                raise UserError(f"{self.rd.ckpt_dir}: no usable checkpoint ({what}), and metrics.jsonl records "
                                f"training past step 0; delete {self.rd.ckpt_dir} to start the run over (its "
                                "metrics.jsonl lines after step 0 will be rewritten)")
            self.world.barrier()
            self._set_aside(rejected)
            log.warning("no usable checkpoint (%s) and no training recorded yet: starting afresh", what)
            self.compute = Compute(devices=self.compute.devices, params=self.policy.n_params)
            self.acc, self.health = Accumulator(), Health()
        if self.lead:
            self.rd.keep_metrics_until(-1)
        return None

    def _set_aside(self, rejected: list[tuple[Path, str]]) -> None:
        """Rank 0 renames failed checkpoints to `bad-checkpoint-N`: kept to look at, never resumed from, and out of
        TRL's checkpoint rotation (which would otherwise take them for the newest and save over them)."""
        if not self.lead:
            return
        for path, _ in rejected:
            aside = path.with_name("bad-" + path.name)
            shutil.rmtree(aside, ignore_errors=True)
            try:
                os.replace(path, aside)
            except FileNotFoundError:
                pass

    # ---- the run ----

    def main(self) -> dict[str, Any]:
        from datasets import Dataset
        from trl import GRPOTrainer

        cfg, tr = self.cfg, self.cfg.train
        resume_from = self.resume()
        info = {}
        if cfg.model.name == "tiny":
            from ablate.train.warmup import warmed_up_folder, warmup_info

            info = {k: v for k, v in warmup_info(warmed_up_folder(cfg, self.task)).items() if k != "history"}
        if self.lead:
            ids = {} if self.rd.info_path.exists() else {"run_id": run_id(cfg), "arm_id": arm_id(cfg), "overrides": []}
            ranks = {"ranks": self.world.size} if self.world.size > 1 else {}
            self.rd.started(**ids, pid=os.getpid(), resumed_from=self.step if resume_from else None, trainer="trl",
                            logs={"train": str(self.rd.train_log)}, warmup=info, params=self.policy.n_params,
                            max_steps=tr.max_steps, device=str(self.learner.device), **ranks)
        log.info("run %s under TRL: %d params, %s x %s per step, loss_type %s, %d steps%s", self.rd.path.name,
                 self.policy.n_params, cfg.batch.prompts, cfg.batch.generations, loss_type(cfg), tr.max_steps,
                 f" (resuming at {self.step})" if resume_from else "")
        tok = self.policy.tokenizer
        bos = prompt_prefix(tok)  # ablate's prompts start with BOS, once
        train = self.task.train
        data = Dataset.from_dict({"prompt": [bos + p.prompt for p in train], "answer": [p.answer for p in train]})
        args = grpo_config(cfg, self.rd.ckpt_dir, self.learner.device)

        def verifier(**kw: Any) -> list[float]:  # TRL names the reward in its logs after the function
            return self.reward(**kw)

        from transformers import PrinterCallback

        trainer = GRPOTrainer(model=self.policy.model, reward_funcs=verifier, args=args, train_dataset=data,
                              processing_class=tok, callbacks=[*self.callbacks, _Callback(self)])
        trainer.remove_callback(PrinterCallback)  # train.log has ablate's evaluations; TRL's per-step dicts stay out
        self.compute.start()
        status, reason = "done", None
        try:
            if resume_from is None:
                self.log_eval()
            if self.step < tr.max_steps and not self.world.any(self.stop.is_set()):  # every rank, or none
                trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
            if self.step < tr.max_steps:
                status, reason = "preempted", f"stopped by a signal at step {self.step}"
        except (Diverged, FloatingPointError) as e:
            status, reason = "diverged", str(e) if isinstance(e, Diverged) else f"{e} at step {self.step}"
            log.error("diverged: %s", reason)
        self.compute.tick()
        if self.lead:
            self.rd.ended(status, reason=reason, step=self.step, max_lag=0,
                          **({"diverged_reason": reason} if status == "diverged" else {}))
        log.info("run %s: %s at step %d (%s)", self.rd.path.name, status, self.step, reason or "max_steps reached")
        return {"status": status, "step": self.step, "r0": self.health.r0,
                "val_pass_rate": self.last_eval["val_pass_rate"] if self.last_eval else None, "reason": reason,
                "gpu_hours": self.compute.gpu_hours, "samples": self.compute.samples,
                "warnings": self.health.warnings, "max_lag": 0}


def _callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


class _Callback(_callback_base()):
    """TRL's step boundaries, seen by ablate. HF's Trainer calls, at the end of each optimizer step and on every
    rank: on_step_end (here: the stop check, so that TRL saves this step and stops), then on_log with the step's
    metrics (here: divergence, the step's counts, the evaluation), then on_save (here: ablate's state, evaluation
    included)."""

    def __init__(self, loop: TRLLoop) -> None:
        self.loop = loop

    def on_step_end(self, args, state, control, **kw):
        lp = self.loop
        if lp.world.any(lp.stop.is_set()) and state.global_step < lp.cfg.train.max_steps:  # one answer on every rank
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kw):
        lp = self.loop
        logs = logs or {}
        if "loss" not in logs or state.global_step == lp.seen_step:
            return  # not a training step's log (the end-of-training summary)
        for key in ("loss", "grad_norm"):
            v = logs.get(key)
            if isinstance(v, (int, float)) and not math.isfinite(v):
                raise Diverged(f"non-finite {key} ({v}) at step {state.global_step}")
        lp.seen_step = lp.step = state.global_step
        lp.count_step()
        lp.acc.add({ours: float(logs[theirs]) for theirs, ours in TRL_METRICS.items()
                    if isinstance(logs.get(theirs), (int, float))})
        lp.after_step(lp.round_truncation)

    def on_save(self, args, state, control, **kw):
        lp = self.loop
        if not lp.lead:
            return
        lp.rd.guard()
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        store.write_json(path / STATE, lp.state())
