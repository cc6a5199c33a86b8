"""The RL step: prompts -> rollouts -> rewards -> advantages -> filters -> loss -> optimizer.

`Learner` owns what one optimizer step needs: the task, the policy and its optimizer, the prompt pool, the run's
RNG and the registry functions the recipe names (loss, aggregation, normalisation). The loop (loop.py) decides when
to step, evaluate and checkpoint; the feeders (feeders.py) decide which weights generate each batch.

    learner = Learner(cfg)                       # task, warmed-up policy, AdamW, pool; no run directory
    batch = learner.make_batch(sampler, gen)     # G prompts x n completions, scored
    metrics = learner.step(batch, step)          # one optimizer step; `step` = steps taken before it
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import torch

from ablate.config import RunConfig
from ablate.errors import UserError
from ablate.train import advantages, filters, length, losses
from ablate.train.policy import Policy, build_policy
from ablate.train.rollout import PolicySampler, Rollouts, SampleSpec, make_sampler
from ablate.train.tasks import Task, build_task

TASK_PHRASE = {"synthetic_math": ">", "jsonl": "</think>"}
"""Each task's own end-of-thinking marker (the embedded task's character tokenizer has no `</think>`)."""


class Diverged(Exception):
    """The run left the regime where training means anything (non-finite loss, collapsed pass rate)."""


def resolve_device(name: str) -> torch.device:
    """train.device: `auto` is CUDA when a device is visible, else the CPU; `cuda` without one is a UserError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("train.device=cuda but no CUDA device is visible to this process; use train.device=auto or cpu")
    return torch.device(name)


@dataclass
class Batch:
    ro: Rollouts
    rewards: torch.Tensor  # [N] float
    correct: torch.Tensor  # [N] bool
    prompt_ids: list[int]  # [G] pool ids of the prompts
    version: int


class Learner:
    """Everything one optimizer step needs (see the module docstring)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.device = resolve_device(cfg.train.device)
        self.phrase = cfg.length.phrase or TASK_PHRASE[cfg.task.name]
        self.task: Task = build_task(cfg.task, cfg.train.val_size, self.phrase)
        self.val = self.task.val[: cfg.train.val_size]
        self.G, self.n = cfg.batch.prompts, cfg.batch.generations
        self.loss_fn = losses.get(cfg.loss.name)
        self.loss_params = {k: v for k, v in vars(cfg.loss).items() if k != "name" and v is not None}
        self.policy: Policy = build_policy(cfg, self.task)
        self.policy.model.to(self.device)  # sampler and trainer follow the parameters' device
        self.phrase_ids = tuple(self.policy.tokenizer.encode(self.phrase, add_special_tokens=False))
        o = cfg.optim
        self.opt = torch.optim.AdamW(self.policy.model.parameters(), lr=o.lr, betas=tuple(o.betas),
                                     weight_decay=o.weight_decay, **({} if o.eps is None else {"eps": o.eps}))
        self.pool = filters.PromptPool(len(self.task.train), cfg.filtering.pass_threshold)
        self.pool_lock = threading.Lock()  # the PipelineRL generator thread draws from the pool too
        self.gen = torch.Generator().manual_seed(cfg.seed)

    # ---- samplers ----

    def sampler(self, policy: Policy | None = None) -> PolicySampler:
        """A sampler of the recipe's backend over `policy` (default: the trained policy itself)."""
        opts = {}
        if self.cfg.rollout.name == "vllm":
            from ablate.train.rollout_vllm import engine_options

            opts = engine_options(self.cfg.rollout)
        return make_sampler(self.cfg.rollout.name, policy or self.policy, **opts)

    def spec(self, N: int, gen: torch.Generator | None) -> SampleSpec:
        """Sampling settings for N completions; gen=None (evaluation) uses the top of the thinking-budget window."""
        lc = self.cfg.length
        budget = None
        if lc.name == "interrupt":
            budget = (length.draw_think_budgets(gen, lc.think_budget_min, lc.think_budget_max, N) if gen is not None
                      else torch.full((N,), lc.think_budget_max))
        return SampleSpec(lc.max_new_tokens, self.cfg.rollout.temperature, budget, self.phrase_ids)

    # ---- rollouts and rewards ----

    def make_batch(self, sampler: PolicySampler, gen: torch.Generator) -> Batch | None:
        """G prompts from the pool, n completions each, scored; None when the pool is exhausted."""
        with self.pool_lock:
            ids = self.pool.sample(self.G, gen)
        if not ids:
            return None
        probs = [self.task.train[i] for i in ids]
        ro = sampler.generate([p.prompt for p in probs], self.n, self.spec(len(ids) * self.n, gen), gen)
        rewards, correct = self.score(ro, [p.answer for p in probs])
        return Batch(ro, rewards, correct, ids, ro.version)

    def score(self, ro: Rollouts, answers: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rewards [N] and verdicts [N] of rollouts whose group g answers answers[g] (+ the length penalty)."""
        ok = self.task.grade(ro.texts, [answers[g] for g in ro.group.tolist()], ro.truncated.tolist())
        dev = ro.tokens.device
        correct = torch.tensor(ok, device=dev)
        rewards = torch.tensor([self.task.reward(c) for c in ok], dtype=torch.float32, device=dev)
        lc = self.cfg.length
        if lc.name == "penalty":
            rewards = rewards + length.length_penalty(ro.lengths, correct, lc.l_max, lc.l_cache).float()
        return rewards, correct

    # ---- one optimizer step ----

    def step(self, b: Batch, step: int) -> dict[str, float]:
        """One optimizer step on batch `b`; `step` = optimizer steps taken before this one. Returns its metrics."""
        ro, pol, fc = b.ro, self.policy, self.cfg.filtering
        group = ro.group
        keep = filters.zero_variance_mask(b.rewards, group, fc.zero_variance_tol) if fc.zero_variance else None
        adv = advantages.group_advantages(b.rewards, group, self.cfg.normalization.name, keep=keep)
        keep_m = keep if keep is not None else torch.ones_like(b.correct)
        m = {
            "train_reward": float(b.rewards.mean()),
            "train_pass_rate": float(b.correct.float().mean()),
            "truncation_rate": length.truncation_rate(ro.truncated),
            "mean_response_len": float(ro.lengths.float().mean()),
            "zero_variance_frac": filters.zero_variance_frac(keep_m, group),
            "interrupt_rate": float(ro.interrupted.float().mean()),
            "entropy": float(ro.entropy.mean()) if ro.entropy is not None else float("nan"),
            "lag": float(step - b.version),
        }
        if fc.no_positive_resampling:
            with self.pool_lock:
                self.pool.update(torch.tensor(b.prompt_ids)[group.cpu()], b.correct.cpu())
        m["pool_size"] = float(len(self.pool))
        rows = keep_m.nonzero().squeeze(1)
        if rows.numel() == 0:  # every group had equal rewards: nothing to learn from this batch
            m.update(grad_norm=0.0, is_clip_frac=0.0, trained_frac=0.0, trained_tokens=0.0)
            return m
        # Only the kept rows go through forward/backward (zero-variance groups carry no gradient). Their prompts
        # are re-indexed so each is run once for its group (Policy.completion_logits).
        used, gsub = torch.unique(group[rows], return_inverse=True)
        T = int(ro.present[rows].sum(1).max())
        tokens, mask = ro.tokens[rows, :T], ro.mask[rows, :T]
        old, a = ro.logp[rows, :T], adv[rows]
        pids, pmask = ro.prompt_ids[used], ro.prompt_mask[used]
        w = losses.token_weights(mask, gsub, self.cfg.aggregation.name, dtype=torch.float32)
        micro = self.cfg.optim.micro_batch
        chunk = micro if micro else rows.numel()
        temperature = self.cfg.rollout.temperature
        self.opt.zero_grad(set_to_none=True)
        tot_loss, clip_sum, ntok = 0.0, 0.0, int(mask.sum())
        for s in range(0, rows.numel(), chunk):
            sl = slice(s, s + chunk)
            logits = pol.completion_logits(pids, pmask, gsub[sl], tokens[sl]).float()
            if temperature != 1.0:
                logits = logits / temperature
            logp = torch.log_softmax(logits, -1).gather(2, tokens[sl, :, None]).squeeze(2)
            ptl, lm = self.loss_fn(logp, old[sl], a[sl], mask[sl], **self.loss_params)
            loss = (ptl * w[sl]).sum()
            if not torch.isfinite(loss):
                raise Diverged(f"non-finite loss ({float(loss)}) at step {step + 1}")
            loss.backward()
            tot_loss += float(loss.detach())
            clip_sum += lm.get("is_clip_frac", 0.0) * float(mask[sl].sum())
        gn = float(torch.nn.utils.clip_grad_norm_(pol.model.parameters(), self.cfg.optim.grad_clip))
        if not math.isfinite(gn):
            raise Diverged(f"non-finite gradient norm at step {step + 1}")
        lr, warm = self.cfg.optim.lr, self.cfg.optim.lr_warmup_steps
        for grp in self.opt.param_groups:  # linear lr warm-up, a function of the step: restarts resume it exactly
            grp["lr"] = lr * min(1.0, (step + 1) / max(1, warm))
        self.opt.step()
        m.update(loss=tot_loss, grad_norm=gn, is_clip_frac=clip_sum / max(ntok, 1),
                 trained_frac=rows.numel() / group.numel(),
                 trained_tokens=float(int(pmask.sum()) + int(ro.present[rows, :T].sum())))
        return m

    # ---- checkpoint state ----

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.policy.model.state_dict(), "optim": self.opt.state_dict(), "rng": self.gen.get_state(),
                "pool": self.pool.state_dict()}

    def load_state_dict(self, st: dict[str, Any]) -> None:
        # load_state_dict copies weights and optimizer state onto the parameters' device; the RNG state stays a CPU
        # tensor (checkpoints are loaded on the CPU)
        self.policy.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["optim"])
        self.gen.set_state(st["rng"])
        self.pool.load_state_dict(st["pool"])
