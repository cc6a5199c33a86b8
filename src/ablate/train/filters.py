"""Data filters: zero-variance filtering and the no-positive-resampling prompt pool (ScaleRL, arXiv 2510.13786).

    zero-variance: keep_i = (max_{j in g(i)} r_j - min_{j in g(i)} r_j) > tol
                   (DAPO's dynamic sampling idea, arXiv 2503.14476)
    no-positive-resampling: drop prompt p for good once passes_p / attempts_p >= threshold
                   (0.9; Polaris-style curriculum)

A group whose rewards are all equal has A = 0 for every completion: it adds no gradient but, left in, it still
counts in the loss denominator and dilutes every other group's weight. So the loop drops it from the loss AND the
denominator by zeroing its rows of the mask before `losses.token_weights`:  mask = mask * keep[:, None].
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from ablate.errors import ErrorKind, UserError

STATE_VERSION = 1


def zero_variance_mask(rewards: Tensor, group_ids: Tensor | list[int], tol: float = 1e-6) -> Tensor:
    """bool [N], True = keep: the completion's prompt group has rewards that differ by more than `tol`.

    rewards: [N] float; group_ids: [N] ints. Compared with a tolerance, not `==`, because shaped rewards
    (e.g. a length penalty added to correct answers) are sums of floats.
    """
    r = rewards.detach()
    r = r if r.is_floating_point() else r.to(torch.get_default_dtype())
    gids = torch.as_tensor(group_ids, device=r.device)
    if r.dim() != 1 or gids.shape != r.shape:
        raise ValueError(f"rewards and group_ids must both be [N]; got {tuple(r.shape)} and {tuple(gids.shape)}")
    if r.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=r.device)
    _, inv = torch.unique(gids, return_inverse=True)
    g = int(inv.max()) + 1
    hi = torch.full((g,), -torch.inf, dtype=r.dtype, device=r.device).scatter_reduce(0, inv, r, "amax")
    lo = torch.full((g,), torch.inf, dtype=r.dtype, device=r.device).scatter_reduce(0, inv, r, "amin")
    return ((hi - lo) > tol)[inv]


def zero_variance_frac(keep: Tensor, group_ids: Tensor | list[int]) -> float:
    """Share of prompt groups dropped (the `zero_variance_frac` metric): groups with no kept completion / groups."""
    gids = torch.as_tensor(group_ids, device=keep.device)
    if gids.numel() == 0:
        return 0.0
    uniq, inv = torch.unique(gids, return_inverse=True)
    kept = torch.zeros(len(uniq), dtype=torch.long, device=keep.device).index_add_(0, inv, keep.to(torch.long))
    return float((kept == 0).sum()) / len(uniq)


class PromptPool:
    """The prompts still eligible for training under no-positive-resampling.

    A prompt's historical pass rate is passes / attempts over every completion it ever got. Once that rate
    reaches `threshold` (exactly at it counts: 9 passes of 10 at 0.9 removes it) the prompt leaves the pool for
    good, even if later updates for it arrive (e.g. from an in-flight off-policy batch): "never sampled again".
    A "pass" is a correct completion as the verifier judged it, before any length shaping: give `update` the
    boolean correctness, or raw verifier rewards, where pass = reward > 0 covers both +1/-1 and 1/0 rewards.
    (A length-penalised reward is not a pass test: a correct answer with penalty -1 scores 0 under 1/0 rewards.)

    The state (`state_dict`) is plain JSON (lists of ints), so it can live in a checkpoint; with the sampler's
    torch.Generator state saved beside it, a resumed run draws the same prompts as an uninterrupted one.
    """

    def __init__(self, prompt_ids: Iterable[int] | int, threshold: float = 0.9) -> None:
        ids = range(prompt_ids) if isinstance(prompt_ids, int) else prompt_ids
        self._ids: list[int] = sorted({int(i) for i in ids})
        if not (isinstance(threshold, (int, float)) and 0.0 < threshold <= 1.0):
            raise UserError(
                f"no-positive-resampling threshold must be in (0, 1], got {threshold!r}", kind=ErrorKind.RECIPE
            )
        self.threshold = float(threshold)
        self._passes: dict[int, int] = {}
        self._attempts: dict[int, int] = {}
        self._removed: set[int] = set()
        self._active: list[int] = list(self._ids)  # sorted: sampling depends only on the generator's state

    def __len__(self) -> int:
        """Prompts still in the pool (the `pool_size` metric)."""
        return len(self._active)

    @property
    def active(self) -> list[int]:
        """The prompt ids still eligible, sorted."""
        return list(self._active)

    @property
    def removed(self) -> list[int]:
        """The prompt ids removed for good, sorted."""
        return sorted(self._removed)

    def pass_rate(self, prompt_id: int) -> float | None:
        """Historical pass rate of a prompt, None before its first completion."""
        n = self._attempts.get(int(prompt_id), 0)
        return self._passes.get(int(prompt_id), 0) / n if n else None

    def sample(self, n: int, generator: torch.Generator | None = None) -> list[int]:
        """n distinct active prompt ids, uniformly without replacement. Returns all that remain (shuffled) when
        fewer than n are active, and [] when the pool is exhausted: the loop decides whether that ends the run."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        k = min(n, len(self._active))
        if k == 0:
            return []
        perm = torch.randperm(len(self._active), generator=generator)[:k]
        return [self._active[i] for i in perm.tolist()]

    def update(self, prompt_ids: Tensor | Iterable[int], passed: Tensor | Iterable[Any]) -> list[int]:
        """Record completions: prompt_ids [N] (one per completion) and passed [N] (bool, or raw rewards where
        pass = reward > 0). Returns the prompt ids this update removed from the pool."""
        pids = torch.as_tensor(prompt_ids).reshape(-1).tolist() if not isinstance(prompt_ids, list) else prompt_ids
        p = torch.as_tensor(passed).reshape(-1)
        ok = (p if p.dtype == torch.bool else p > 0).tolist()
        if len(pids) != len(ok):
            raise ValueError(f"prompt_ids ({len(pids)}) and passed ({len(ok)}) must have the same length")
        return self.update_counts(pids, [int(g) for g in ok], [1] * len(pids))

    def update_counts(self, prompt_ids: list[int], passes: list[int], attempts: list[int]) -> list[int]:
        """Record `attempts[i]` completions of prompt `prompt_ids[i]`, `passes[i]` of them passing (what the ranks
        of a data-parallel run exchange: one row per prompt group). Returns the prompt ids removed."""
        known = set(self._ids)
        for raw_id, good, tries in zip(prompt_ids, passes, attempts):
            pid = int(raw_id)
            if pid not in known:
                raise ValueError(f"prompt id {pid} is not in the pool")
            self._attempts[pid] = self._attempts.get(pid, 0) + int(tries)
            self._passes[pid] = self._passes.get(pid, 0) + int(good)
        newly = []
        for pid in sorted({int(x) for x in prompt_ids}):
            # Integer form of passes/attempts >= threshold, with slack for the float threshold: 9/10 at 0.9 counts.
            if pid not in self._removed and self._passes[pid] >= self.threshold * self._attempts[pid] - 1e-9:
                self._removed.add(pid)
                newly.append(pid)
        if newly:
            self._active = [i for i in self._active if i not in self._removed]
        return newly

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: {version, threshold, prompt_ids, counts: [[id, passes, attempts], ...], removed}."""
        return {
            "version": STATE_VERSION,
            "threshold": self.threshold,
            "prompt_ids": list(self._ids),
            "counts": [[pid, self._passes[pid], self._attempts[pid]] for pid in sorted(self._attempts)],
            "removed": sorted(self._removed),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from `state_dict()`. The pool must be built from the same prompts and threshold (the same
        config); anything else is a UserError, because resuming onto a different dataset would be silent nonsense."""
        if state.get("version") != STATE_VERSION:
            raise UserError(
                f"prompt pool state has version {state.get('version')!r}; this code reads {STATE_VERSION}",
                kind=ErrorKind.STATE,
            )
        if [int(i) for i in state["prompt_ids"]] != self._ids:
            raise UserError(
                "prompt pool state was saved for a different prompt set; resume with the run's own config",
                kind=ErrorKind.STATE,
            )
        if float(state["threshold"]) != self.threshold:
            raise UserError(
                f"prompt pool state has threshold {state['threshold']}, the config says {self.threshold}; "
                "resume with the run's own config",
                kind=ErrorKind.STATE,
            )
        self._passes = {int(pid): int(p) for pid, p, _ in state["counts"]}
        self._attempts = {int(pid): int(a) for pid, _, a in state["counts"]}
        self._removed = {int(i) for i in state["removed"]}
        self._active = [i for i in self._ids if i not in self._removed]
