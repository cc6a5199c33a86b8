"""One RL run: resolved config -> run directory (design.md §4). `run()` is what `ablate train` and every launched
job execute.

A step: draw `batch.prompts` prompts from the pool -> `batch.generations` completions each (rollout backend)
-> verifiable rewards (+ length penalty) -> group advantages -> zero-variance filter -> the chosen loss and
aggregation -> AdamW. Every `train.eval_every` steps: mean@k pass rate on the held-out split, one line appended
to metrics.jsonl. The algorithm pieces are the registries in losses.py / advantages.py / filters.py / length.py;
this file only wires them.

Off-policy schemes (ScaleRL §3):
- `ppo` (PPO-off-policy-k): generate k batches with the current weights (theta_old), then take k optimizer
  steps on them; the IS ratio is against the generating policy's log-probs, kept per token by the sampler.
- `pipeline` (PipelineRL-k): a generator thread with its own copy of the weights keeps generating into a
  queue; the trainer publishes new weights after every step and the generator loads them before its next
  batch. The generator starts a batch only when the queue has room for it, and the queue holds at most k
  batches, so a batch made with version v is trained at version <= v + k: the trainer waits (on the queue)
  rather than run more than k steps ahead. The trainer checks lag <= k on every batch. This thread mode
  (`offpolicy.generator=thread`, the default with vLLM or on CUDA) is not bit-reproducible: batch contents
  depend on timing. With the torch sampler on a CPU the two threads could only take turns on the run's core,
  so `generator=auto` runs them in turn in one thread (`_InlinePipelineFeeder`): the steady state of a generator
  faster than the trainer (every batch exactly k steps stale), deterministic, without thread switching.

Restart safety: a checkpoint (ckpt/last.pt: model, optimizer, RNG, prompt pool, step, compute, the metric
accumulators since the last evaluation) is written every `checkpoint_every` steps, at the end, and at the next
step boundary after SIGTERM/SIGUSR1/SIGUSR2 (then run.json says `preempted` and `run` returns). A restarted run
loads it and rewrites metrics.jsonl back to the lines with step <= the checkpoint's step (atomically), so no
line is lost or duplicated. Under submitit (SUBMITIT_EXECUTOR set) submitit owns the signals: its USR2 handler
(preemption, time limit) records, requeues and exits (launch.RunJob.checkpoint). The run takes USR2 first, saves
at the next step boundary, then hands the signal to submitit's handler, so the requeued job resumes from the
step the signal arrived at, not from the last periodic checkpoint.

Divergence: a non-finite loss, gradient norm or sampler logit, or a pass rate that collapses to <= 0.01 from an
R0 above it on the validation split AND on the training completions since the last evaluation, stops the run with
status `diverged` and the reason (a collapsed policy gets no reward, hence no gradient, and never recovers:
tiny-rl-notes.md, lr 1e-3; requiring both keeps a small, noisy validation split from triggering it).
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import os
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ablate import store
from ablate.errors import UserError
from ablate.train import advantages, filters, length, losses
from ablate.train.compute import Compute, device_count
from ablate.train.policy import Policy, build_policy, warmup_info, warmed_up_folder
from ablate.train.rollout import BACKENDS, Rollouts, SampleSpec
from ablate.train.tasks import Task, build_task

log = logging.getLogger("ablate.train")

COLLAPSE_PASS_RATE = 0.01
TASK_PHRASE = {"synthetic_math": ">", "jsonl": "</think>"}


class Diverged(Exception):
    pass


def resolve_device(name: str) -> torch.device:
    """train.device: `auto` is CUDA when a device is visible, else the CPU; `cuda` without one is a UserError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("train.device=cuda but no CUDA device is visible to this process; use train.device=auto or cpu")
    if name not in ("cpu", "cuda"):
        raise UserError(f"train.device={name!r}: valid: auto, cpu, cuda")
    return torch.device(name)


@dataclass
class Batch:
    ro: Rollouts
    rewards: torch.Tensor  # [N] float
    correct: torch.Tensor  # [N] bool
    prompt_ids: list[int]  # [G] pool ids of the prompts
    version: int


class _Accum:
    """Means of per-step training metrics since the last evaluation (checkpointed with the run)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, d: dict[str, float]) -> None:
        for k, v in d.items():
            if v is None or not math.isfinite(v):
                continue
            self.sums[k] = self.sums.get(k, 0.0) + float(v)
            self.counts[k] = self.counts.get(k, 0) + 1

    def means(self) -> dict[str, float]:
        return {k: self.sums[k] / self.counts[k] for k in self.sums}

    def state_dict(self) -> dict:
        return {"sums": dict(self.sums), "counts": dict(self.counts)}

    def load_state_dict(self, d: dict) -> None:
        self.sums, self.counts = dict(d["sums"]), dict(d["counts"])


# ---------------------------------------------------------------------------------------------- the run


def run(config: dict[str, Any], run_dir: Path | str, *, threads: int = 1) -> dict[str, Any]:
    """Execute one run in the foreground, writing (or resuming) `run_dir`. Returns a summary dict with `status`
    (done | preempted | diverged), `step`, `val_pass_rate`, `r0`, `reason`. Raises UserError on bad input and
    re-raises any crash after recording it in run.json (status failed, error)."""
    run_dir = Path(run_dir)
    resolve_device(str(config.get("train", {}).get("device") or "auto"))  # refuse a missing GPU before writing anything
    torch.set_num_threads(int(threads))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    _write_config(config, run_dir)
    handler = _attach_log(run_dir / "logs" / "train.log")
    try:
        runner = _Run(config, run_dir)
        try:
            return runner.main()
        except KeyboardInterrupt:
            raise
        except UserError as e:  # bad input found once the run had started: say so in run.json, not "running"
            runner.update_run_json(status="failed", error={"class": "UserError", "message": str(e), "traceback": []},
                                   ended_at=time.time())
            raise
        except Exception as e:
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip().splitlines()[-15:]
            runner.update_run_json(status="failed", error={"class": type(e).__name__, "message": str(e), "traceback": tb},
                                   ended_at=time.time())
            log.exception("run failed")
            raise
    finally:
        logging.getLogger("ablate.train").removeHandler(handler)
        handler.close()


def _write_config(config: dict[str, Any], run_dir: Path) -> None:
    """config.yaml, once: a run directory is never silently reused for another config (style.md §9)."""
    from omegaconf import OmegaConf

    from ablate.sweep import canonical

    text = OmegaConf.to_yaml(OmegaConf.create(config))
    path = run_dir / "config.yaml"
    if path.exists():
        old = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        # what run ids hash must match; launcher and resource-only fields (hash=False) may change on a retry
        if canonical(old) != canonical(config):
            raise UserError(f"{run_dir} holds a run of another config; pick another --out or remove it")
    store.atomic_write_text(path, text)


def _attach_log(path: Path) -> logging.Handler:
    lg = logging.getLogger("ablate.train")
    lg.setLevel(logging.INFO)
    h = logging.FileHandler(path)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    lg.addHandler(h)
    return h


class _Run:
    def __init__(self, cfg: dict[str, Any], run_dir: Path) -> None:
        self.cfg, self.dir = cfg, run_dir
        self.ckpt = run_dir / "ckpt" / "last.pt"
        self.metrics_path = run_dir / "metrics.jsonl"
        tr = cfg["train"]
        self.max_steps, self.eval_every = int(tr["max_steps"]), int(tr["eval_every"])
        self.ckpt_every, self.eval_k = int(tr["checkpoint_every"]), int(tr["eval_k"])
        lcfg = cfg["length"]
        self.phrase = lcfg.get("phrase") or TASK_PHRASE.get(cfg["task"]["name"], "</think>")
        task_cfg = dict(cfg["task"])
        if task_cfg.get("val_size") is None:  # missing or null: the train section's
            task_cfg["val_size"] = tr.get("val_size", 200)
        self.task: Task = build_task(task_cfg, self.phrase)
        self.val = self.task.val[: int(tr.get("val_size", len(self.task.val)))]
        self.seed = int(cfg["seed"])
        self.G, self.n = int(cfg["batch"]["prompts"]), int(cfg["batch"]["generations"])
        self.loss_fn = losses.get(cfg["loss"]["name"])
        self.loss_params = {k: v for k, v in cfg["loss"].items() if k != "name" and v is not None}
        self.agg = cfg["aggregation"]["name"]
        losses.AGGREGATIONS.get(self.agg)
        self.norm = cfg["normalization"]["name"]
        advantages.NORMALIZATIONS.get(self.norm)
        self.fcfg = cfg["filtering"]
        self.off = cfg["offpolicy"]["name"]
        self.k = int(cfg["offpolicy"].get("k", 1))
        if self.off not in ("ppo", "pipeline"):
            raise UserError(f"unknown offpolicy {self.off!r}; valid: pipeline, ppo")
        self.temperature = float(cfg["rollout"].get("temperature", 1.0))
        self.backend_cls = BACKENDS.get(cfg["rollout"]["name"])
        if cfg["rollout"]["name"] == "vllm":  # the recipe's engine settings: dtype, KV-cache cap, GPU memory share
            from ablate.train.rollout_vllm import engine_options

            self.backend_cls = functools.partial(self.backend_cls, **engine_options(cfg["rollout"]))

        self.device = resolve_device(str(tr.get("device") or "auto"))
        self.policy: Policy = build_policy(cfg, self.task)
        self.policy.model.to(self.device)  # sampler and trainer follow the parameters' device
        self.phrase_ids = tuple(self.policy.tokenizer.encode(self.phrase, add_special_tokens=False))
        ocfg = cfg["optim"]
        self.opt = torch.optim.AdamW(
            self.policy.model.parameters(), lr=float(ocfg["lr"]), betas=tuple(ocfg.get("betas", (0.9, 0.99))),
            weight_decay=float(ocfg.get("weight_decay", 0.0)),
        )
        self.grad_clip = float(ocfg.get("grad_clip", 1.0))
        self.lr, self.lr_warmup = float(ocfg["lr"]), int(ocfg.get("lr_warmup_steps") or 0)
        self.micro = ocfg.get("micro_batch")
        self.pool = filters.PromptPool(len(self.task.train), float(self.fcfg.get("pass_threshold", 0.9)))
        self.pool_lock = threading.Lock()
        self.gen = torch.Generator().manual_seed(self.seed)
        self.compute = Compute(devices=device_count() if self.device.type == "cuda" else 1, params=self.policy.n_params)
        self.acc = _Accum()
        self.step, self.r0 = 0, None
        self.trunc_window: list[float] = []
        self.warnings: list[str] = []
        self.stop_signal: str | None = None
        self.hand_over: dict = {}  # under submitit: its handler per signal, called after our checkpoint

    # ---- bookkeeping ----

    def update_run_json(self, **fields: Any) -> None:
        path = self.dir / "run.json"
        if not path.exists():  # a foreground `ablate train` has no launcher to write the ids (design §4)
            from ablate.sweep import arm_id, run_id

            fields = {"run_id": run_id(self.cfg), "arm_id": arm_id(self.cfg), "overrides": [], **fields}
        store.update_json(path, **fields)

    def spec(self, N: int, gen: torch.Generator | None) -> SampleSpec:
        """Sampling settings for N completions; gen=None (evaluation) uses the top of the thinking-budget window."""
        lcfg = self.cfg["length"]
        budget = None
        if lcfg["name"] == "interrupt":
            lo, hi = int(lcfg["think_budget_min"]), int(lcfg["think_budget_max"])
            if not 1 <= lo <= hi:
                raise UserError(f"length.think_budget_min={lo} and think_budget_max={hi}: need 1 <= min <= max")
            # ScaleRL draws the budget per generation in a window below the max (length.draw_think_budget, vectorised)
            budget = torch.randint(lo, hi + 1, (N,), generator=gen) if gen is not None else torch.full((N,), hi)
        return SampleSpec(int(lcfg["max_new_tokens"]), self.temperature, budget, self.phrase_ids)

    # ---- rollouts and rewards ----

    def make_batch(self, sampler: Any, gen: torch.Generator) -> Batch | None:
        with self.pool_lock:
            ids = self.pool.sample(self.G, gen)
        if not ids:
            return None
        probs = [self.task.train[i] for i in ids]
        spec = self.spec(len(ids) * self.n, gen)
        ro = sampler.generate([p.prompt for p in probs], self.n, spec, gen)
        rewards, correct = self.score(ro, [p.answer for p in probs])
        return Batch(ro, rewards, correct, ids, ro.version)

    def score(self, ro: Rollouts, answers: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rewards [N] and verdicts [N]: correct = finished with EOS and the checker accepts the final answer."""
        trunc = ro.truncated.tolist()
        g = ro.group.tolist()
        ok = [(not tr) and self.task.check(t, answers[gi]) for t, tr, gi in zip(ro.texts, trunc, g)]
        correct = torch.tensor(ok, device=ro.tokens.device)
        rewards = torch.tensor([self.task.reward(c) for c in ok], dtype=torch.float32, device=ro.tokens.device)
        lcfg = self.cfg["length"]
        if lcfg["name"] == "penalty":
            rewards = rewards + length.length_penalty(ro.lengths, correct, int(lcfg["l_max"]), int(lcfg["l_cache"])).float()
        return rewards, correct

    # ---- one optimizer step ----

    def train_step(self, b: Batch) -> dict[str, float]:
        ro, pol = b.ro, self.policy
        group = ro.group
        zv = bool(self.fcfg.get("zero_variance", True))
        keep = filters.zero_variance_mask(b.rewards, group, float(self.fcfg.get("zero_variance_tol", 1e-6))) if zv else None
        adv = advantages.group_advantages(b.rewards, group, self.norm, keep=keep)
        keep_m = keep if keep is not None else torch.ones_like(b.correct)
        m = {
            "train_reward": float(b.rewards.mean()),
            "train_pass_rate": float(b.correct.float().mean()),
            "truncation_rate": length.truncation_rate(ro.truncated),
            "mean_response_len": float(ro.lengths.float().mean()),
            "zero_variance_frac": filters.zero_variance_frac(keep_m, group),
            "interrupt_rate": float(ro.interrupted.float().mean()),
            "entropy": float(ro.entropy.mean()) if ro.entropy is not None else float("nan"),
            "lag": float(self.step - b.version),
        }
        if self.fcfg.get("no_positive_resampling", True):
            with self.pool_lock:
                self.pool.update(torch.tensor(b.prompt_ids)[group.cpu()], b.correct.cpu())
        m["pool_size"] = float(len(self.pool))
        rows = keep_m.nonzero().squeeze(1)
        if rows.numel() == 0:  # every group had equal rewards: nothing to learn from this batch
            m.update(grad_norm=0.0, is_clip_frac=0.0, trained_frac=0.0)
            return m
        # Only the kept rows go through forward/backward (zero-variance groups carry no gradient). Their prompts
        # are re-indexed so each is run once for its group (Policy.completion_logits).
        used, gsub = torch.unique(group[rows], return_inverse=True)
        T = int(ro.present[rows].sum(1).max())
        tokens, mask = ro.tokens[rows, :T], ro.mask[rows, :T]
        old, a = ro.logp[rows, :T], adv[rows]
        pids, pmask = ro.prompt_ids[used], ro.prompt_mask[used]
        w = losses.token_weights(mask, gsub, self.agg, dtype=torch.float32)
        chunk = int(self.micro) if self.micro else rows.numel()
        self.opt.zero_grad(set_to_none=True)
        tot_loss, clip_sum, ntok = 0.0, 0.0, int(mask.sum())
        for s in range(0, rows.numel(), chunk):
            sl = slice(s, s + chunk)
            logits = pol.completion_logits(pids, pmask, gsub[sl], tokens[sl]).float()
            if self.temperature != 1.0:
                logits = logits / self.temperature
            logp = torch.log_softmax(logits, -1).gather(2, tokens[sl, :, None]).squeeze(2)
            ptl, lm = self.loss_fn(logp, old[sl], a[sl], mask[sl], **self.loss_params)
            loss = (ptl * w[sl]).sum()
            if not torch.isfinite(loss):
                raise Diverged(f"non-finite loss ({float(loss)}) at step {self.step + 1}")
            loss.backward()
            tot_loss += float(loss.detach())
            clip_sum += lm.get("is_clip_frac", 0.0) * float(mask[sl].sum())
        gn = float(torch.nn.utils.clip_grad_norm_(pol.model.parameters(), self.grad_clip))
        if not math.isfinite(gn):
            raise Diverged(f"non-finite gradient norm at step {self.step + 1}")
        for grp in self.opt.param_groups:  # linear lr warm-up, a function of the step: restarts resume it exactly
            grp["lr"] = self.lr * min(1.0, (self.step + 1) / max(1, self.lr_warmup))
        self.opt.step()
        self.compute.add_training(int(pmask.sum()) + int(ro.present[rows, :T].sum()))
        m.update(loss=tot_loss, grad_norm=gn, is_clip_frac=clip_sum / max(ntok, 1),
                 trained_frac=rows.numel() / group.numel())
        return m

    # ---- evaluation ----

    @torch.no_grad()
    def evaluate(self) -> float:
        """mean@k pass rate on the validation split, under a generator seeded by (seed, step): reproducible."""
        sampler = self.backend_cls(self.policy)
        g = torch.Generator().manual_seed(10_000_019 * (self.seed + 1) + self.step)
        spec = self.spec(len(self.val) * self.eval_k, None)
        ro = sampler.generate([p.prompt for p in self.val], self.eval_k, spec, g)
        _, correct = self.score(ro, [p.answer for p in self.val])
        return float(correct.float().mean())

    def log_eval(self) -> dict[str, Any]:
        self.compute.tick()
        rate = self.evaluate()
        self.compute.tick()
        if self.r0 is None:
            self.r0 = rate
        rec: dict[str, Any] = {
            "step": self.step,
            "gpu_hours": self.compute.gpu_hours,
            "flops": self.compute.flops,
            "samples": self.compute.samples,
            "val_pass_rate": rate,
            "wall_s": self.compute.wall_s,
        }
        means = self.acc.means()
        rec.update({k: v for k, v in means.items() if k in store.METRICS})
        store.append_jsonl(self.metrics_path, rec)
        self.acc = _Accum()
        log.info("eval step %d: val_pass_rate %.3f  (%s)", self.step, rate,
                 ", ".join(f"{k} {v:.3g}" for k, v in rec.items() if k not in ("step", "val_pass_rate")))
        self.update_run_json(step=self.step, val_pass_rate=rate, r0=self.r0, samples=self.compute.samples,
                             gpu_hours=self.compute.gpu_hours)
        train_pass = means.get("train_pass_rate", 1.0)
        if self.step > 0 and rate <= COLLAPSE_PASS_RATE < self.r0 and train_pass <= COLLAPSE_PASS_RATE:
            raise Diverged(f"pass rate collapsed from R0={self.r0:.3f} to {rate:.3f} (validation) and "
                           f"{train_pass:.3f} (training) at step {self.step}")
        return rec

    def check_truncation(self, rate: float) -> None:
        """ScaleRL's instability signal: truncation rate > 10% over the recent steps -> warn in the log and run.json."""
        self.trunc_window = (self.trunc_window + [rate])[-10:]
        recent = sum(self.trunc_window) / len(self.trunc_window)
        if len(self.trunc_window) >= 5 and recent > store.TRUNCATION_WARN:
            msg = f"truncation rate {recent:.0%} over the last {len(self.trunc_window)} steps (> 10%) at step {self.step}"
            if not self.warnings or not self.warnings[-1].startswith("truncation"):
                log.warning(msg)
                self.warnings.append(msg)
                self.update_run_json(warnings=self.warnings, truncation_warning=True)

    # ---- checkpoints ----

    def save(self) -> None:
        state = {
            "step": self.step,
            "model": self.policy.model.state_dict(),
            "optim": self.opt.state_dict(),
            "rng": self.gen.get_state(),
            "pool": self.pool.state_dict(),
            "compute": self.compute.state_dict(),
            "acc": self.acc.state_dict(),
            "r0": self.r0,
            "trunc_window": self.trunc_window,
            "warnings": self.warnings,
        }
        self.ckpt.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.ckpt.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.ckpt)
        log.info("checkpoint at step %d", self.step)

    def load(self) -> bool:
        if not self.ckpt.exists():
            return False
        # on the CPU: the RNG state must stay a CPU tensor; load_state_dict copies weights and optimizer state onto
        # the parameters' device
        st = torch.load(self.ckpt, weights_only=False, map_location="cpu")
        self.policy.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["optim"])
        self.gen.set_state(st["rng"])
        self.pool.load_state_dict(st["pool"])
        self.compute.load_state_dict(st["compute"])
        self.acc.load_state_dict(st["acc"])
        self.step, self.r0 = int(st["step"]), st["r0"]
        self.trunc_window, self.warnings = list(st["trunc_window"]), list(st["warnings"])
        # Lines written after the checkpoint belong to work that is about to be redone: drop them (atomically).
        recs = store.read_jsonl(self.metrics_path)
        store.write_jsonl(self.metrics_path, [r for r in recs if int(r.get("step", -1)) <= self.step])
        log.info("resumed from step %d", self.step)
        return True

    # ---- signals ----

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_signal = signal.Signals(signum).name
        log.warning("received %s: checkpointing at the next step boundary", self.stop_signal)

    def _install_signals(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        under_submitit = bool(os.environ.get("SUBMITIT_EXECUTOR"))
        # under submitit only USR2 (its checkpoint-and-requeue signal); TERM stays submitit's "bypass"
        sigs = (signal.SIGUSR2,) if under_submitit else (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
        old = {s: signal.signal(s, self._on_signal) for s in sigs}
        self.hand_over = {s: h for s, h in old.items() if callable(h)} if under_submitit else {}
        return old

    def make_feeder(self) -> "_PPOFeeder | _PipelineFeeder | _InlinePipelineFeeder":
        if self.off == "ppo":
            return _PPOFeeder(self)
        mode = self.cfg["offpolicy"].get("generator") or "auto"
        if mode == "auto":  # on one CPU the generator thread would only time-share the trainer's core
            mode = "inline" if self.cfg["rollout"]["name"] == "torch" and self.device.type == "cpu" else "thread"
        log.info("PipelineRL-%d: generator %s", self.k, mode)
        return _InlinePipelineFeeder(self) if mode == "inline" else _PipelineFeeder(self)

    # ---- the loop ----

    def main(self) -> dict[str, Any]:
        resumed = self.load()
        if not resumed:
            store.write_jsonl(self.metrics_path, [])  # a crash before the first checkpoint left nothing to keep
        info = {}
        if self.cfg["model"]["name"] == "tiny":
            info = {k: v for k, v in warmup_info(warmed_up_folder(self.cfg, self.task)).items() if k != "history"}
        self.update_run_json(status="running", started_at=time.time(), pid=os.getpid(), resumed_from=self.step if resumed else None,
                             logs={"train": str(self.dir / "logs" / "train.log")}, warmup=info,
                             params=self.policy.n_params, max_steps=self.max_steps, device=str(self.device))
        log.info("run %s: %d params, %s x %s per step, loss %s, offpolicy %s-%d, %d steps%s", self.dir.name,
                 self.policy.n_params, self.G, self.n, self.cfg["loss"]["name"], self.off, self.k, self.max_steps,
                 f" (resuming at {self.step})" if resumed else "")
        old = self._install_signals()
        self.compute.start()
        feeder = self.make_feeder()
        status, reason = "done", None
        try:
            if not resumed:
                self.log_eval()
            while self.step < self.max_steps and self.stop_signal is None:
                b = feeder.next()
                if b is None:
                    reason = "prompt pool exhausted (every prompt passed no-positive-resampling)"
                    log.info(reason)
                    break
                self.compute.add_generation(int(b.ro.prompt_mask.sum()), int(b.ro.present.sum()), b.ro.group.numel())
                m = self.train_step(b)
                self.step += 1
                feeder.after_step()
                self.acc.add(m)
                self.check_truncation(m["truncation_rate"])
                if self.step % self.eval_every == 0 or self.step == self.max_steps:
                    self.log_eval()
                if self.step % self.ckpt_every == 0 or self.step == self.max_steps:
                    self.save()
            if self.stop_signal is not None and self.step < self.max_steps:
                status, reason = "preempted", f"stopped by {self.stop_signal} at step {self.step}"
                self.save()
            elif reason:
                if self.step % self.eval_every:
                    self.log_eval()
                self.save()
        except (Diverged, FloatingPointError) as e:
            status, reason = "diverged", str(e) if isinstance(e, Diverged) else f"{e} at step {self.step}"
            log.error("diverged: %s", reason)
        finally:
            feeder.close()
            for s, h in old.items():
                signal.signal(s, h)
        self.compute.tick()
        if status == "preempted" and self.hand_over:
            sig = signal.Signals[self.stop_signal]
            log.info("checkpointed at step %d; handing %s to submitit (record, requeue, exit)", self.step, sig.name)
            self.hand_over[sig](sig, None)  # exits the process when the job is requeued
        last = store.read_jsonl(self.metrics_path)
        summary = {
            "status": status,
            "step": self.step,
            "r0": self.r0,
            "val_pass_rate": last[-1]["val_pass_rate"] if last else None,
            "reason": reason,
            "gpu_hours": self.compute.gpu_hours,
            "samples": self.compute.samples,
            "warnings": self.warnings,
            "max_lag": getattr(feeder, "max_lag", 0),
        }
        self.update_run_json(status=status, reason=reason, ended_at=time.time(), step=self.step, max_lag=summary["max_lag"],
                             **({"diverged_reason": reason} if status == "diverged" else {}))
        log.info("run %s: %s at step %d (%s)", self.dir.name, status, self.step, reason or "max_steps reached")
        return summary


# ---------------------------------------------------------------------------------------------- off-policy feeders


class _PPOFeeder:
    """PPO-off-policy-k: k batches from the current weights (theta_old), then k steps on them, in order.
    k = 1 is on-policy. A checkpoint taken mid-round drops the round's remaining batches; the resumed run
    regenerates them from its current weights."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.sampler = run.backend_cls(run.policy)
        self.buf: list[Batch] = []
        self.max_lag = 0

    def next(self) -> Batch | None:
        r = self.run
        if not self.buf:
            self.sampler.version = r.step
            for _ in range(r.k):
                b = r.make_batch(self.sampler, r.gen)
                if b is None:
                    break
                self.buf.append(b)
        if not self.buf:
            return None
        b = self.buf.pop(0)
        self.max_lag = max(self.max_lag, r.step - b.version)
        return b

    def after_step(self) -> None:
        pass

    def close(self) -> None:
        pass


def _generator_side(run: _Run) -> tuple[Any, torch.Generator]:
    """PipelineRL's generator: a sampler over its own copy of the weights (version = the run's step) and its own RNG."""
    sampler = run.backend_cls(Policy(copy.deepcopy(run.policy.model), run.policy.tokenizer, run.policy.head_dtype))
    sampler.version = run.step
    return sampler, torch.Generator().manual_seed(run.seed * 7919 + run.step + 1)


class _InlinePipelineFeeder:
    """PipelineRL-k with generation and training taken in turn (`offpolicy.generator=inline`): the schedule a
    generator thread reaches when it is faster than the trainer, without the thread. Before step v the trainer
    takes the oldest of k queued batches (made at version v - k) and the generator makes the next one with the
    current weights (version v), so every batch is trained exactly k steps after the weights that made it (the
    first k steps use batches from version 0). Same staleness as the thread, but deterministic given the seed,
    and on one core no time is lost to switching between two threads. A checkpoint drops the queue; the resumed
    run refills it from its current weights."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.sampler, self.gen = _generator_side(run)
        self.buf: list[Batch] = []
        self.max_lag = 0
        self.exhausted = False

    def _make(self) -> None:
        b = None if self.exhausted else self.run.make_batch(self.sampler, self.gen)
        if b is None:
            self.exhausted = True
        else:
            self.buf.append(b)

    def next(self) -> Batch | None:
        r = self.run
        while not self.exhausted and len(self.buf) < r.k:  # the start (or a resume): k batches from these weights
            self._make()
        if not self.buf:
            return None
        b = self.buf.pop(0)
        self._make()  # the generator keeps k batches in flight, made with the weights of this step
        lag = r.step - b.version
        if lag > r.k:
            raise RuntimeError(f"PipelineRL lag {lag} exceeds k={r.k}")
        self.max_lag = max(self.max_lag, lag)
        return b

    def after_step(self) -> None:
        """The new weights (version = steps taken) reach the generator before its next batch."""
        sd = {k: v.detach() for k, v in self.run.policy.model.state_dict().items()}
        self.sampler.load_weights(sd, self.run.step)

    def close(self) -> None:
        self.buf.clear()


class _PipelineFeeder:
    """PipelineRL-k: a generator thread with its own copy of the weights; see the module docstring for the bound."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.sampler, self.gen = _generator_side(run)
        self.q: queue.Queue = queue.Queue()
        self.room = threading.Semaphore(run.k)  # batches the generator may start before the trainer takes one
        self.lock = threading.Lock()
        self.latest: tuple[int, dict] | None = None
        self.stop = threading.Event()
        self.max_lag = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="pipeline-generator", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.room.acquire(timeout=0.05):
                    continue
                with self.lock:
                    latest, self.latest = self.latest, None
                if latest is not None:
                    self.sampler.load_weights(latest[1], latest[0])
                b = self.run.make_batch(self.sampler, self.gen)
                self.q.put(b)
                if b is None:
                    return
        except BaseException as e:  # surfaced in the trainer thread
            self.error = e
            self.q.put(None)

    def next(self) -> Batch | None:
        while True:
            try:
                b = self.q.get(timeout=0.5)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.q.empty():
                    b = None
                    break
        if self.error is not None:
            raise self.error
        if b is None:
            return None
        self.room.release()
        lag = self.run.step - b.version
        if lag > self.run.k:  # cannot happen with the semaphore above; a broken bound must not pass silently
            raise RuntimeError(f"PipelineRL lag {lag} exceeds k={self.run.k}")
        self.max_lag = max(self.max_lag, lag)
        return b

    def after_step(self) -> None:
        """Publish the trainer's new weights (version = steps taken); the generator loads them before its next batch."""
        sd = {k: v.detach().clone() for k, v in self.run.policy.model.state_dict().items()}
        with self.lock:
            self.latest = (self.run.step, sd)

    def close(self) -> None:
        self.stop.set()
        try:
            while True:
                self.q.get_nowait()
                self.room.release()
        except queue.Empty:
            pass
        self.thread.join(timeout=30)
