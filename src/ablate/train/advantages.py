"""Group-relative advantages with a normalisation axis (registry `normalization`: prompt | batch | none).

    A_i = (r_i - mean_{j in group(i)} r_j) / D,   D = std of the group (prompt; GRPO, arXiv 2402.03300),
                                                  std of the batch's advantages (batch; ScaleRL, arXiv 2510.13786),
                                                  1 (none; Dr. GRPO, arXiv 2503.20783)

Choices, and why:
- Standard deviations are population ones (ddof 0): normalised advantages then have unit RMS over the set
  they are normalised on (a group of 2 with rewards 1, 0 gets +-1, not +-0.71 as with Bessel's correction).
- `batch` takes the std over the rows that enter the loss (`keep`). With zero-variance filtering on, the dropped
  groups (advantage 0) would otherwise shrink the std and inflate every other advantage by a factor that grows
  with the share of solved/failed prompts, so the effective step size would drift as training progresses. With
  filtering off, `keep` is None: zero-variance rows are in the loss (with A = 0) and in the std.
- `eps` guards the division only; a zero-variance group gets A = 0 under every normalisation.
Rows with keep False get advantage exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ablate.registry import Registry

Reduce = Callable[[Tensor], Tensor]
"""Sums a tensor over the run's data-parallel ranks (World.sum); None in a single process."""
NormFn = Callable[[Tensor, Tensor, Tensor, float, "Reduce | None"], Tensor]
NORMALIZATIONS: Registry[NormFn] = Registry("normalization")


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor | list[int],
    normalization: str,
    *,
    keep: Tensor | None = None,
    eps: float = 1e-6,
    reduce: Reduce | None = None,
) -> Tensor:
    """Advantages [N] from rewards [N] (float) and prompt-group ids [N] (ints).

    normalization: prompt | batch | none. keep: optional bool [N], the rows that enter the loss (e.g.
    `filters.zero_variance_mask`); rows not kept get 0 and do not count in the batch std. The group mean is
    always over the whole group. Returns the dtype of rewards if floating, else torch's default.
    reduce: in a data-parallel run, sums over ranks (each rank holds whole groups, so only `batch`'s std spans
    ranks); it is called by every rank whatever its rows, so the ranks' collectives stay in step.
    """
    norm = NORMALIZATIONS.get(normalization)
    r = rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    r = r.detach()
    if r.dim() != 1:
        raise ValueError(f"rewards must be [N], got shape {tuple(r.shape)}")
    gids = torch.as_tensor(group_ids, device=r.device)
    if gids.shape != r.shape:
        raise ValueError(f"group_ids must be [N] = [{r.shape[0]}], got {tuple(gids.shape)}")
    keep_m = torch.ones_like(r, dtype=torch.bool) if keep is None else keep.to(torch.bool)
    if keep_m.shape != r.shape:
        raise ValueError(f"keep must be [N] = [{r.shape[0]}], got {tuple(keep_m.shape)}")
    if r.numel() == 0:
        return norm(r.clone(), gids.long(), keep_m, eps, reduce) if reduce is not None else r.clone()
    _, inv = torch.unique(gids, return_inverse=True)
    centred = r - _group_mean(r, inv)[inv]
    adv = norm(centred, inv, keep_m, eps, reduce)
    return torch.where(keep_m, adv, torch.zeros_like(adv))


def _group_mean(x: Tensor, inv: Tensor) -> Tensor:
    """Mean of x [N] per group; inv [N] in 0..G-1. Returns [G]."""
    g = int(inv.max()) + 1 if inv.numel() else 0
    sums = torch.zeros(g, dtype=x.dtype, device=x.device).index_add_(0, inv, x)
    counts = torch.zeros(g, dtype=x.dtype, device=x.device).index_add_(0, inv, torch.ones_like(x))
    return sums / counts


@NORMALIZATIONS.register("prompt")
def _by_prompt(centred: Tensor, inv: Tensor, keep: Tensor, eps: float, reduce: Reduce | None) -> Tensor:
    """A / (std of the group's rewards + eps), population std (GRPO's group normalisation)."""
    std = _group_mean(centred * centred, inv).sqrt()
    return centred / (std[inv] + eps)


@NORMALIZATIONS.register("batch")
def _by_batch(centred: Tensor, inv: Tensor, keep: Tensor, eps: float, reduce: Reduce | None) -> Tensor:
    """A / (std of the kept rows' advantages + eps), population std (ScaleRL's batch-level normalisation).
    Across ranks: the std from the summed count, sum and sum of squares of the kept rows (float64)."""
    kept = centred[keep]
    if reduce is not None:
        k = kept.double()
        n, s1, s2 = reduce(torch.stack([k.new_tensor(float(k.numel())), k.sum(), (k * k).sum()])).tolist()
        if n == 0:
            return torch.zeros_like(centred)
        std = max(s2 / n - (s1 / n) ** 2, 0.0) ** 0.5
        return centred / (std + eps)
    if kept.numel() == 0:
        return torch.zeros_like(centred)
    std = kept.std(correction=0)
    return centred / (std + eps)


@NORMALIZATIONS.register("none")
def _none(centred: Tensor, inv: Tensor, keep: Tensor, eps: float, reduce: Reduce | None) -> Tensor:
    """A = r - mean(group), unscaled (Dr. GRPO argues the std division biases toward easy/hard prompts)."""
    return centred
