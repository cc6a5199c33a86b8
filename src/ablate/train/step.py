"""The RL step: prompts -> rollouts -> rewards -> advantages -> filters -> loss -> optimizer.

`Learner` owns what one optimizer step needs: the task, the policy and its optimizer, the prompt pool, the run's
RNG and the registry functions the recipe names (loss, aggregation, normalisation). The loop (loop.py) decides when
to step, evaluate and checkpoint; the feeders (feeders.py) decide which weights generate each batch.

    learner = Learner(cfg)                       # task, warmed-up policy, AdamW, pool; no run directory
    Learner(cfg, world, optimizer=None)          # no optimizer: a learner another trainer steps (TRL)
    batch = learner.make_batch(sampler, gen)     # G prompts x n completions, scored
    metrics = learner.step(batch, step)          # one optimizer step; `step` = steps taken before it

Data-parallel (`Learner(cfg, world)` with world.size > 1, see docs/distributed.md): every rank draws the same G prompts,
generates and scores its share of the groups, and `step` takes the same optimizer step on every rank: the batch
normalisers are summed over ranks, DDP sums the gradients, and the pool and metrics are reduced. Every rank makes
the same collective calls in the same order whatever its share holds (a rank whose groups were all filtered out
runs a zero-weight forward/backward), so no rank waits on a collective the others skip.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ablate.config.schema import RunConfig
from ablate.config.sections import OptimConfig
from ablate.errors import ErrorKind, UserError
from ablate.topology.world import World, worker_seed
from ablate.train import advantages, filters, length, losses, sharding
from ablate.train.build import build_policy
from ablate.train.policy import Policy
from ablate.train.rollout import PolicySampler, Rollouts, SampleSpec
from ablate.train.samplers import make_sampler
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
        raise UserError(
            "train.device=cuda but no CUDA device is visible to this process; use train.device=auto or cpu",
            kind=ErrorKind.ENVIRONMENT,
        )
    return torch.device(name)


@dataclass
class Batch:
    ro: Rollouts
    rewards: torch.Tensor  # [N] float
    correct: torch.Tensor  # [N] bool
    prompt_ids: list[int]  # [G] pool ids of the prompts
    version: int


Optimizer = Callable[[Iterable[torch.nn.Parameter], OptimConfig], torch.optim.Optimizer]
"""Builds a learner's optimizer over the policy's parameters from the recipe's `optim` section."""


def adamw(params: Iterable[torch.nn.Parameter], o: OptimConfig) -> torch.optim.Optimizer:
    """The built-in trainer's optimizer: AdamW with the recipe's lr, betas, weight decay and eps."""
    beta1, beta2 = o.betas
    eps: dict[str, Any] = {} if o.eps is None else {"eps": o.eps}
    return torch.optim.AdamW(params, lr=o.lr, betas=(beta1, beta2), weight_decay=o.weight_decay, **eps)


class Learner:
    """Everything one optimizer step needs (see the module docstring). `optimizer=None`: a learner that does not
    step itself (TRL's trainer wraps, steps and shards the model): no optimizer, no DDP/FSDP wrapping."""

    def __init__(self, cfg: RunConfig, world: World | None = None, optimizer: Optimizer | None = adamw) -> None:
        self.cfg = cfg
        self.world = world = world or World()
        self.device = resolve_device(cfg.train.device)
        if self.device.type == "cuda" and world.size > 1 and optimizer is not None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.phrase = cfg.length.phrase or TASK_PHRASE[cfg.task.name]
        self.task: Task = build_task(cfg.task, cfg.train.val_size, self.phrase)
        self.val = self.task.val[: cfg.train.val_size]
        self.G, self.n = cfg.batch.prompts, cfg.batch.generations
        self.loss_fn = losses.get(cfg.loss.name)
        self.loss_params = {k: v for k, v in vars(cfg.loss).items() if k != "name" and v is not None}
        if not world.lead:
            world.barrier()  # rank 0 builds (and caches) the warmed-up policy first; the others load it
        # transformers' model object is needed by TRL (optimizer=None), the vLLM sampler and FSDP's own forward;
        # otherwise the model only ever runs through decoder.decoder_forward, and loads without transformers
        fsdp = world.size > 1 and cfg.train.sharding == "fsdp"
        plain = optimizer is not None and cfg.rollout.name == "torch" and not fsdp
        self.policy: Policy = build_policy(cfg, self.task, transformers=not plain)
        if world.lead:
            world.barrier()
        self.policy.model.to(self.device)  # sampler and trainer follow the parameters' device
        # the module the training forward goes through (DDP / FSDP in a data-parallel run), and the policy the
        # samplers read (the trained one, or under fsdp a whole copy refreshed after every step): sharding.py
        self.scorer, self.sampled = (
            sharding.wrap(self.policy, world, self.device, cfg.train.sharding)
            if optimizer is not None
            else (sharding.Scorer(self.policy), self.policy)
        )
        self.phrase_ids = tuple(self.policy.tokenizer.encode(self.phrase, add_special_tokens=False))
        self.opt = optimizer(self.policy.model.parameters(), cfg.optim) if optimizer is not None else None
        self.pool = filters.PromptPool(len(self.task.train), cfg.filtering.pass_threshold)
        self.pool_lock = threading.Lock()  # the PipelineRL generator thread draws from the pool too
        self.gen = torch.Generator().manual_seed(cfg.seed)  # the prompt draws: the same stream on every rank
        # the rollouts: one stream with the prompt draws in a single process, each rank its own otherwise
        self.rollout_gen = (
            self.gen if world.size == 1 else torch.Generator().manual_seed(worker_seed(cfg.seed, world.rank))
        )

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer this learner steps with; a learner built without one (TRL's) never steps or saves."""
        if self.opt is None:
            raise RuntimeError("this Learner was built with optimizer=None: its trainer steps the model")
        return self.opt

    # ---- samplers ----

    def sampler(self, policy: Policy | None = None) -> PolicySampler:
        """A sampler of the recipe's backend over `policy` (default: the trained policy's weights)."""
        opts = {}
        if self.cfg.rollout.name == "vllm":
            from ablate.train.vllm_engine import engine_options

            opts = engine_options(self.cfg.rollout)
        return make_sampler(self.cfg.rollout.name, policy or self.sampled, **opts)

    def spec(self, N: int, gen: torch.Generator | None) -> SampleSpec:
        """Sampling settings for N completions; gen=None (evaluation) uses the top of the thinking-budget window."""
        lc = self.cfg.length
        budget = None
        if lc.name == "interrupt":
            hi = length.setting(lc.think_budget_max, "length.think_budget_max")
            budget = (
                length.draw_think_budgets(gen, length.setting(lc.think_budget_min, "length.think_budget_min"), hi, N)
                if gen is not None
                else torch.full((N,), hi)
            )
        return SampleSpec(lc.max_new_tokens, self.cfg.rollout.temperature, budget, self.phrase_ids)

    # ---- rollouts and rewards ----

    def make_batch(
        self, sampler: PolicySampler, gen: torch.Generator, rollout_gen: torch.Generator | None = None
    ) -> Batch | None:
        """G prompts from the pool (drawn with `gen`), n completions each (sampled with `rollout_gen`, default
        `gen`), scored; None when the pool is exhausted. Data-parallel: this rank's share of the G groups, and None
        when fewer prompts than ranks are left (every rank sees the same pool, so all stop together)."""
        with self.pool_lock:
            ids = self.pool.sample(self.G, gen)
        if len(ids) < max(1, self.world.size):
            return None
        ids = self.world.shard(ids)
        rgen = gen if rollout_gen is None else rollout_gen
        probs = [self.task.train[i] for i in ids]
        ro = sampler.generate([p.prompt for p in probs], self.n, self.spec(len(ids) * self.n, rgen), rgen)
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
            l_max, l_cache = length.setting(lc.l_max, "length.l_max"), length.setting(lc.l_cache, "length.l_cache")
            rewards = rewards + length.length_penalty(ro.lengths, correct, l_max, l_cache).float()
        return rewards, correct

    # ---- one optimizer step ----

    def step(self, b: Batch, step: int) -> dict[str, float]:
        """One optimizer step on batch `b`; `step` = optimizer steps taken before this one. Returns its metrics,
        over the whole step (all ranks), with `trained_tokens` for the loop's compute count (popped) and
        `new_tokens` (completion tokens generated: the benchmarks' throughput)."""
        ro, fc, world = b.ro, self.cfg.filtering, self.world
        reduce = world.sum if world.size > 1 else None
        group = ro.group
        keep = filters.zero_variance_mask(b.rewards, group, fc.zero_variance_tol) if fc.zero_variance else None
        adv = advantages.group_advantages(b.rewards, group, self.cfg.normalization.name, keep=keep, reduce=reduce)
        keep_m = keep if keep is not None else torch.ones_like(b.correct)
        if fc.no_positive_resampling:
            self._update_pool(b)
        rows = keep_m.nonzero().squeeze(1)
        N, n_groups = group.numel(), int(ro.prompt_ids.shape[0])
        # the step's sums over this rank's rows; one all-reduce at the end makes them the whole step's
        sums = {
            "rows": float(N),
            "groups": float(n_groups),
            "reward": float(b.rewards.double().sum()),
            "passed": float(b.correct.double().sum()),
            "truncated": float(ro.truncated.double().sum()),
            "length": float(ro.lengths.double().sum()),
            "interrupted": float(ro.interrupted.double().sum()),
            "entropy": float(ro.entropy.double().sum()) if ro.entropy is not None else 0.0,
            "entropy_rows": float(N) if ro.entropy is not None else 0.0,
            "dropped_groups": filters.zero_variance_frac(keep_m, group) * n_groups,
            "new_tokens": float(ro.present.sum()),
            "kept_rows": float(rows.numel()),
            "loss": 0.0,
            "clipped": 0.0,
            "tokens": 0.0,
            "trained_tokens": 0.0,  # filled in by _backward
        }
        trained = world.totals([rows.numel()])[0] > 0
        gn = 0.0
        if trained:  # (not when every group of the step had equal rewards: nothing to learn from this batch)
            gn = self._backward(b, adv, rows, step, reduce, sums)
            lr, warm = self.cfg.optim.lr, self.cfg.optim.lr_warmup_steps
            # linear lr warm-up, a function of the step: restarts resume it exactly
            for grp in self.optimizer.param_groups:
                grp["lr"] = lr * min(1.0, (step + 1) / max(1, warm))
            self.optimizer.step()
            sharding.refresh(self.policy, self.sampled)
        t = dict(zip(sums, world.totals(list(sums.values()))))
        m = {
            "train_reward": t["reward"] / t["rows"],
            "train_pass_rate": t["passed"] / t["rows"],
            "truncation_rate": t["truncated"] / t["rows"],
            "mean_response_len": t["length"] / t["rows"],
            "zero_variance_frac": t["dropped_groups"] / t["groups"],
            "interrupt_rate": t["interrupted"] / t["rows"],
            "entropy": t["entropy"] / t["entropy_rows"] if t["entropy_rows"] else float("nan"),
            "lag": float(step - b.version),
            "pool_size": float(len(self.pool)),
            "grad_norm": gn,
            "is_clip_frac": t["clipped"] / max(t["tokens"], 1.0),
            "trained_frac": t["kept_rows"] / t["rows"],
            "new_tokens": t["new_tokens"],
            "trained_tokens": t["trained_tokens"],
        }
        if trained:
            m["loss"] = t["loss"]
        return m

    def generated(self, b: Batch) -> tuple[int, int, int]:
        """(prompt tokens prefilled, tokens decoded, completions) of the step's batch on all ranks: compute.py's
        generation count."""
        ro = b.ro
        prompt_tokens, new_tokens, completions = self.world.totals(
            [int(ro.prompt_mask.sum()), int(ro.present.sum()), ro.group.numel()]
        )
        return int(prompt_tokens), int(new_tokens), int(completions)

    def _update_pool(self, b: Batch) -> None:
        """No-positive-resampling: record every completion of the step, from every rank, in the pool."""
        pids = torch.tensor(b.prompt_ids)[b.ro.group.cpu()]
        ok = b.correct.cpu()
        if self.world.size > 1:
            # (prompt id, passes, attempts) per group of this rank, padded to G rows, gathered from every rank
            rows = torch.full((self.G, 3), -1, dtype=torch.int64)
            for i, pid in enumerate(b.prompt_ids):
                hit = pids == pid
                rows[i] = torch.tensor([pid, int(ok[hit].sum()), int(hit.sum())])
            got = torch.cat(self.world.gather(rows))
            got = got[got[:, 0] >= 0]
            with self.pool_lock:
                self.pool.update_counts(got[:, 0].tolist(), got[:, 1].tolist(), got[:, 2].tolist())
            return
        with self.pool_lock:
            self.pool.update(pids, ok)

    def _backward(
        self, b: Batch, adv: torch.Tensor, rows: torch.Tensor, step: int, reduce: Any, sums: dict[str, float]
    ) -> float:
        """Forward/backward over this rank's kept rows of nonzero advantage in micro-batches (the loss normalised
        over all its kept rows), gradients summed over ranks; returns the clipped global gradient norm. Raises
        Diverged (on every rank alike) on a non-finite loss or gradient."""
        ro, world = b.ro, self.world
        # The step's loss is over the kept rows (zero-variance groups carry no gradient): their token weights
        # normalise it. Of them, only the rows with a nonzero advantage go through forward/backward: every loss here
        # is its advantage times a function of the log-probs, so a zero-advantage row adds exactly zero gradient.
        T = int(ro.present[rows].sum(1).max()) if rows.numel() else 1
        kept, gsub = torch.unique(ro.group[rows], return_inverse=True)
        # the compute count is the recipe's (the kept rows and their prompts), whatever this shortcut skips
        sums["trained_tokens"] = float(int(ro.prompt_mask[kept].sum()) + int(ro.present[rows, :T].sum()))
        w = losses.token_weights(ro.mask[rows, :T], gsub, self.cfg.aggregation.name, dtype=torch.float32, reduce=reduce)
        live = (adv[rows] != 0).nonzero().squeeze(1)
        rows, w = rows[live], w[live]
        tokens, mask, old, a = ro.tokens[rows, :T], ro.mask[rows, :T], ro.logp[rows, :T], adv[rows]
        # each prompt is run once for its group (Policy.completion_logits): the live rows' prompts, re-indexed
        used, gsub = torch.unique(ro.group[rows], return_inverse=True)
        pids, pmask = ro.prompt_ids[used], ro.prompt_mask[used]
        micro = self.cfg.optim.micro_batch
        chunk = micro if micro else max(rows.numel(), 1)
        chunks = -(-rows.numel() // chunk)
        # DDP needs the same number of backward passes on every rank: a rank with fewer chunks runs zero-weight ones;
        # a step whose kept rows all have zero advantage runs one, so that AdamW still steps on zero gradients
        total_chunks = max(world.max(chunks), 1)
        temperature = self.cfg.rollout.temperature
        self.optimizer.zero_grad(set_to_none=True)
        bad: float | None = None
        for c in range(total_chunks):
            sync = c == total_chunks - 1
            with sharding.grad_sync(self.scorer, sync):
                if c < chunks:
                    sl = slice(c * chunk, (c + 1) * chunk)
                    logits = self.scorer(pids, pmask, gsub[sl], tokens[sl]).float()
                    if temperature != 1.0:
                        logits = logits / temperature
                    logp = torch.log_softmax(logits, -1).gather(2, tokens[sl, :, None]).squeeze(2)
                    ptl, lm = self.loss_fn(logp, old[sl], a[sl], mask[sl], **self.loss_params)
                    loss = (ptl * w[sl]).sum()
                    sums["clipped"] += lm.get("is_clip_frac", 0.0) * float(mask[sl].sum())
                else:  # this rank has no rows left: a zero-weight pass keeps DDP's all-reduce in step
                    loss = (
                        self.scorer(ro.prompt_ids[:1], ro.prompt_mask[:1], ro.group[:1] * 0, ro.tokens[:1, :1])
                        .float()
                        .sum()
                        * 0.0
                    )
                if not torch.isfinite(loss) and bad is None:
                    bad = float(loss)
                # DDP averages the ranks' gradients; the weights already make each rank's loss its share of the
                # step's, so the sum is wanted: scale by the world size (exactly 1 in one process)
                (loss * world.size).backward()
                sums["loss"] += float(loss.detach())
        if world.any(bad is not None):
            raise Diverged(f"non-finite loss ({bad if bad is not None else 'on another rank'}) at step {step + 1}")
        params = self.policy.model.parameters()
        gn = sharding.grad_norm(torch.nn.utils.clip_grad_norm_(params, self.cfg.optim.grad_clip))
        if not math.isfinite(gn):
            raise Diverged(f"non-finite gradient norm at step {step + 1}")
        sums["tokens"] = float(mask.sum())
        return gn

    # ---- checkpoint state ----

    def state_dict(self) -> dict[str, Any]:
        """Model, optimizer, prompt RNG and pool (under fsdp every rank calls it: the shards are gathered)."""
        return {
            **sharding.state(self.policy, self.optimizer),
            "rng": self.gen.get_state(),
            "pool": self.pool.state_dict(),
        }

    def load_state_dict(self, st: dict[str, Any]) -> None:
        # weights and optimizer state are copied onto the parameters' device; the RNG state stays a CPU tensor
        # (checkpoints are loaded on the CPU)
        sharding.load_state(self.policy, self.sampled, self.optimizer, st)
        self.gen.set_state(st["rng"])
        self.pool.load_state_dict(st["pool"])
