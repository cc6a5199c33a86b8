"""`trainer=trl`: the recipe run by Hugging Face TRL's `GRPOTrainer`, writing the same run directory as ablate's own.

    TRLTrainer(session).train(begin)     # one run's training under TRL, driven by RunSession.run

What is ablate's and what is TRL's:
- TRL generates, computes advantages and the loss, and steps the optimizer (`GRPOTrainer.train`). The recipe maps
  onto `GRPOConfig` (trl_config.grpo_config); options TRL lacks are refused by validation (ablate.config.support).
- The reward is the task's verifier (and DAPO's overlong penalty for length=penalty), as one reward function that
  also counts what the run generated: samples, tokens, truncation, train reward.
- Evaluation is ablate's (the session's): `Evaluator` over TRL's live model (no copy), mean@k on the held-out
  split at the same steps, so metrics.jsonl has the built-in trainer's fields and `status`, `rank` and
  `extrapolate` work unchanged. TRL's own logs (entropy, clip ratio, gradient norm) come in through `on_log`.
- Checkpoints are TRL's (`ckpt/checkpoint-N/`: weights, optimizer, scheduler, RNG), with ablate's state beside them
  (`ablate_state.json`: compute, accumulators, health, the last evaluation). A resume picks the newest checkpoint
  that has both and passes `check_checkpoint` (every file TRL will load is there, loads, and fits the model;
  ablate's state fits the run: checkpoint.check_state), else the next older one (a failed one is set aside as
  `bad-checkpoint-N`, out of TRL's rotation; the session cuts metrics.jsonl back to its step), and calls
  `train(resume_from_checkpoint=...)`. With none usable, the run starts afresh only while metrics.jsonl records
  no training (as the built-in trainer's checkpoint.Checkpoints.resume), else fails in one line.
- A stop request (SIGTERM, SIGUSR2, ...) makes the callback ask TRL to save and stop at the step's end: the run
  ends `preempted` and resumes there.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from ablate.config.schema import RunConfig
from ablate.storage import store
from ablate.topology.world import World
from ablate.train import length
from ablate.train.checkpoint import BadCheckpoint, check_state, first_line, fresh_ok, set_aside, start_afresh
from ablate.train.session import RunSession, Start
from ablate.train.step import Diverged, Learner
from ablate.train.trl_config import (
    TRL_METRICS,
    check_devices,
    grpo_config,
    loss_type,
    prompt_prefix,
    quiet,
    require_trl,
)

log = logging.getLogger("ablate.train")

STATE = "ablate_state.json"
"""ablate's part of a TRL checkpoint, written into `checkpoint-N/` once TRL has saved it."""

_CKPT = re.compile(r"checkpoint-(\d+)")


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


def check_checkpoint(path: Path, step: int, model: Any, world: World) -> dict[str, Any]:
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
        saved = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (a safetensors handle)
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
    if (
        not isinstance(groups, list)
        or sum(len(g.get("params", ())) for g in groups) != len(params)
        or not isinstance(opt.get("state"), dict)
    ):
        raise BadCheckpoint(f"its optimizer.pt is not the state of an optimizer over the model's {len(params)} tensors")
    moments = Counter(
        tuple(v.shape) for s in opt["state"].values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0
    )
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


class TRLTrainer:
    """One run under TRL over its session: what builtin.BuiltinTrainer is for ablate's own (a `session.Trainer`)."""

    label = " under TRL"
    max_lag = 0

    @property
    def facts(self) -> dict[str, Any]:
        return {"trainer": "trl"}

    def __init__(self, session: RunSession, callbacks: Sequence[Any] = ()) -> None:
        require_trl()
        quiet()
        self.session = session
        self.cfg, self.world = session.cfg, session.world
        self.callbacks = list(callbacks)  # more TrainerCallbacks, called before ablate's (bench/train.py's timer)
        # task, validation split and the policy (the warmed-up tiny folder, or model.path) as the built-in trainer
        # loads them, without an optimizer: TRL trains this very model (accelerate wraps it for the workers), and
        # the evaluator samples from it: each worker grades its share of the validation prompts
        self.learner = Learner(self.cfg, self.world, optimizer=None)
        self.policy, self.task = self.learner.policy, self.learner.task
        session.attach(self.learner)
        self.round: dict[str, float] = {}  # the current generation round's totals over all workers
        self.round_left = 0  # its steps not yet counted (a round feeds offpolicy.k optimizer steps)
        self.round_truncation = 0.0
        self.new_tokens = 0  # completion tokens generated for training (the benchmark's throughput)
        self.seen_step = -1  # the last step whose end was handled (on_log)
        self.resume_from: Path | None = None

    @staticmethod
    def preflight(cfg: RunConfig) -> None:
        """TRL installed, and one GPU per process."""
        require_trl()
        check_devices(cfg)

    @property
    def scheme(self) -> str:
        return f"loss_type {loss_type(self.cfg)}"

    # ---- the reward: the task's verifier, and what the run generated ----

    def reward(
        self, prompts: list[str], completions: list[str], completion_ids: list[list[int]], answer: list[str], **_: Any
    ) -> list[float]:
        tok, lc = self.policy.tokenizer, self.cfg.length
        eos = tok.eos_token_id
        lengths = torch.tensor([len(ids) for ids in completion_ids])
        truncated = [eos not in ids and len(ids) >= lc.max_new_tokens for ids in completion_ids]
        ok = self.task.grade(completions, answer, truncated)
        rewards = torch.tensor([self.task.reward(c) for c in ok], dtype=torch.float32)
        if lc.name == "penalty":
            l_max, l_cache = length.setting(lc.l_max, "length.l_max"), length.setting(lc.l_cache, "length.l_cache")
            rewards = rewards + length.length_penalty(lengths, torch.tensor(ok), l_max, l_cache).float()
        prompt_tokens_here = sum(len(tok.encode(p, add_special_tokens=False)) for p in prompts)
        # every worker scores its share of the round, once per round, in step: the round's totals over all workers
        n, prompt_tokens, new_tokens, n_trunc, reward_sum, passed = self.world.totals(
            [len(completions), prompt_tokens_here, int(lengths.sum()), sum(truncated), float(rewards.sum()), sum(ok)]
        )
        self.new_tokens += int(new_tokens)
        # counted step by step as the round is trained (k steps), like the built-in trainer counts each batch; a
        # resume mid-round makes TRL generate a new round, which replaces what was left of the old one
        self.round = {
            "n": n,
            "prompt_tokens": prompt_tokens,
            "new_tokens": new_tokens,
            "truncated": n_trunc,
            "reward": reward_sum,
            "passed": passed,
        }
        self.round_left = self.cfg.offpolicy.k
        return rewards.tolist()

    def count_step(self) -> None:
        """One optimizer step's share of the current round: compute, samples and the training metrics."""
        if self.round_left <= 0:
            return
        self.round_left -= 1
        r, k, s = self.round, self.cfg.offpolicy.k, self.session
        s.compute.add_generation(r["prompt_tokens"] / k, r["new_tokens"] / k, int(r["n"]) // k)
        s.compute.add_training((r["prompt_tokens"] + r["new_tokens"]) / k)  # each completion is trained once
        self.round_truncation = r["truncated"] / r["n"]
        s.acc.add(
            {
                "train_reward": r["reward"] / r["n"],
                "train_pass_rate": r["passed"] / r["n"],
                "truncation_rate": self.round_truncation,
                "mean_response_len": r["new_tokens"] / r["n"],
                "lag": 0.0,
            }
        )

    # ---- ablate's side of a checkpoint ----

    def state(self) -> dict[str, Any]:
        """ablate's part of a TRL checkpoint (TRL saves the model, optimizer and RNG itself)."""
        return self.session.state()

    def resume(self, steps: list[int]) -> bool:
        """Resume from the newest complete checkpoint that passes `check_checkpoint`, else the next older one (see
        the module docstring): the session's state loaded. False: a fresh start."""
        s = self.session
        every = checkpoints(s.rd.ckpt_dir)
        found = [(step, path) for step, path, complete in every if complete]
        if s.lead:  # checkpoints TRL saved but ablate did not finish (a crash between the two): never resumed
            newest = found[-1][0] if found else -1
            for step, path, complete in every:
                if step > newest and not complete:
                    shutil.rmtree(path, ignore_errors=True)
        tr, rejected = self.cfg.train, []
        for step, path in reversed(found):
            try:
                st = check_checkpoint(path, step, self.policy.model, self.world)
                check_state(st, max_steps=tr.max_steps, eval_every=tr.eval_every, steps=steps)
                s.load_state(st)
            except (MemoryError, torch.cuda.OutOfMemoryError):
                raise
            except Exception as e:
                why = str(e) if isinstance(e, BadCheckpoint) else f"{type(e).__name__}: {first_line(e)}"
                log.warning("checkpoint %s cannot be resumed from (%s); trying the one before", path, why)
                rejected.append((path, why))
                continue
            self.world.barrier()  # every worker is past its attempt before worker 0 renames what failed
            self._set_aside(rejected)
            log.info("resuming from %s (step %d)", path.name, step)
            self.resume_from = path
            return True
        if rejected:  # none usable: start afresh while metrics.jsonl records no training, else fail in one line
            start_afresh(
                s.rd.ckpt_dir, [p.name for p, _ in rejected], [why for _, why in rejected], fresh_ok=fresh_ok(steps)
            )
            self.world.barrier()
            self._set_aside(rejected)
            s.reset_counters()
        return False

    def _set_aside(self, rejected: list[tuple[Path, str]]) -> None:
        """Worker 0 renames failed checkpoints to `bad-checkpoint-N` (checkpoint.set_aside): out of TRL's checkpoint
        rotation too (which would otherwise take them for the newest and save over them)."""
        if self.session.lead:
            set_aside([path for path, _ in rejected], lambda path: path.with_name("bad-" + path.name))

    # ---- the run ----

    def _grpo_trainer(self) -> Any:
        """TRL's GRPOTrainer over the session's policy, the task's training prompts and the verifier."""
        from datasets import Dataset  # type: ignore[import-untyped]  # datasets ships no type information
        from transformers import PrinterCallback
        from trl import GRPOTrainer

        tok = self.policy.tokenizer
        bos = prompt_prefix(tok)  # ablate's prompts start with BOS, once
        train = self.task.train
        data = Dataset.from_dict({"prompt": [bos + p.prompt for p in train], "answer": [p.answer for p in train]})
        args = grpo_config(self.cfg, self.session.rd.ckpt_dir, self.learner.device)

        def verifier(**kw: Any) -> list[float | None]:  # TRL names the reward in its logs after the function
            rewards: list[float | None] = list(self.reward(**kw))  # TRL's reward functions may leave one out
            return rewards

        trainer = GRPOTrainer(
            model=self.policy.model,
            reward_funcs=verifier,
            args=args,
            train_dataset=data,
            processing_class=tok,
            callbacks=[*self.callbacks, _Callback(self)],
        )
        trainer.remove_callback(PrinterCallback)  # train.log has ablate's evaluations; TRL's per-step dicts stay out
        return trainer

    def train(self, start: Start) -> tuple[bool, str | None]:
        s, max_steps = self.session, self.cfg.train.max_steps
        trainer = self._grpo_trainer()  # building TRL's trainer is set-up, not the run's time
        start.clock()
        start.evaluate()
        if s.step < max_steps and not s.stop_requested():  # every worker, or none
            trainer.train(resume_from_checkpoint=str(self.resume_from) if self.resume_from else None)
        return s.step < max_steps, None


class _Callback(TrainerCallback):
    """TRL's step boundaries, seen by ablate. HF's Trainer calls, at the end of each optimizer step and on every
    worker: on_step_end (here: the stop check, so that TRL saves this step and stops), then on_log with the step's
    metrics (here: divergence, the step's counts, the evaluation), then on_save (here: ablate's state, evaluation
    included)."""

    def __init__(self, trainer: TRLTrainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kw):
        s = self.trainer.session
        if s.stop_requested() and state.global_step < s.cfg.train.max_steps:  # one answer on every worker
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kw):
        t = self.trainer
        logs = logs or {}
        if "loss" not in logs or state.global_step == t.seen_step:
            return  # not a training step's log (the end-of-training summary)
        for key in ("loss", "grad_norm"):
            v = logs.get(key)
            if isinstance(v, (int, float)) and not math.isfinite(v):
                raise Diverged(f"non-finite {key} ({v}) at step {state.global_step}")
        t.seen_step = t.session.step = state.global_step
        t.count_step()
        t.session.acc.add(
            {
                ours: float(logs[theirs])
                for theirs, ours in TRL_METRICS.items()
                if isinstance(logs.get(theirs), (int, float))
            }
        )
        t.session.after_step(t.round_truncation)

    def on_save(self, args, state, control, **kw):
        t = self.trainer
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        t.session.save(lambda: store.write_json(path / STATE, t.state()))
