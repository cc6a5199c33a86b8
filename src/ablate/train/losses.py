"""Policy losses (registry `loss`) and loss aggregation (registry `aggregation`), as pure functions over tensors.

Per token, rho = pi_theta / pi_old, A = the completion's advantage, sg = stop-gradient:
    grpo  (Shao et al. 2024, arXiv 2402.03300; PPO clip, Schulman et al. 2017):  -min(rho*A, clip(rho, 1-eps, 1+eps)*A)
    dapo  (Yu et al. 2025, arXiv 2503.14476, "Clip-Higher"):        -min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A)
    gspo  (Zheng et al. 2025, arXiv 2507.18071):  s = exp(mean_t log rho) per completion;
                                                  -min(s*A, clip(s, 1-eps_low, 1+eps_high)*A)
    cispo (MiniMax-M1, arXiv 2506.13585; ScaleRL, Khatri et al. 2025, arXiv 2510.13786):
                                                  -sg(clamp(rho, 0, eps_max))*A*log pi_theta
Aggregation: loss = sum_{i,t} w_{i,t} * per_token_loss_{i,t} with weights w that sum to 1 over the whole
optimizer-step batch (`token_weights`: sample | prompt | token).

Why weights instead of `.mean()`: a mean taken per micro-batch changes with how the step is split (the bug most
RL-for-LLM trainers have shipped). Computing w once for the whole step and slicing it with the rows makes
sum over micro-batches of (loss_mb * w_mb).sum() equal the full-batch loss, so the gradient is the same for any
micro-batching or gradient accumulation.

Interface (the algorithm core's, for tests and outside checks):
    get(name) -> fn(logp, old_logp, advantages, mask, **params) -> (per_token_loss [N, T], metrics: dict[str, float])
    token_weights(mask [N, T], group_ids [N], mode) -> weights [N, T]

A rule every registered loss keeps (a test checks each): a completion whose advantage is zero contributes zero
gradient. The built-in trainer relies on it and runs no forward/backward for such rows (step.py); a loss with a term
that does not scale with the advantage (a KL or entropy bonus) would need that shortcut changed.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ablate.errors import ErrorKind, UserError
from ablate.registry import Registry

LossFn = Callable[..., tuple[Tensor, dict[str, float]]]
LOSSES: Registry[LossFn] = Registry("loss")
AGGREGATIONS: Registry[Callable[..., Tensor]] = Registry("aggregation")
"""fn(mask [N, T] as floats, group ids [N], total) -> weights [N, T]; `total` maps the mode's local denominator
count to the whole step's (the identity in one process, a sum over ranks in a data-parallel run)."""

# exp() of a log-ratio beyond this overflows float32 and turns a clipped (zero) gradient into 0*inf = NaN.
# Gradients are unchanged for |log rho| < 20 (rho in [2e-9, 5e8]), far outside any sane off-policy gap
# (verl clamps the same way).
_MAX_LOG_RATIO = 20.0


# ---------------------------------------------------------------------------------------------- registry plumbing


def register_loss(name: str) -> Callable[[LossFn], LossFn]:
    """Register a loss under `name`. Its hyper-parameters are its keyword-only arguments (with defaults); the
    wrapper rejects any other non-None keyword with a UserError naming the valid ones, and checks tensor shapes."""

    def deco(fn: LossFn) -> LossFn:
        sig = inspect.signature(fn)
        defaults = {p.name: p.default for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}

        @functools.wraps(fn)
        def wrapped(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, **params: Any):
            # None means "not set" (config.LossConfig keeps the other losses' fields null): it is dropped, so the
            # loop can pass the whole loss section minus `name`, and an own parameter left null takes its default.
            params = {k: v for k, v in params.items() if v is not None}
            unknown = sorted(set(params) - set(defaults))
            if unknown:
                raise UserError(
                    f"loss {name!r} has no parameter {unknown[0]!r}; valid: {', '.join(sorted(defaults)) or '(none)'}",
                    kind=ErrorKind.RECIPE,
                )
            _check_shapes(logp, old_logp, advantages, mask)
            return fn(logp, old_logp, advantages, mask, **params)

        wrapped.defaults = dict(defaults)  # type: ignore[attr-defined]
        LOSSES.add(name, wrapped)
        return wrapped

    return deco


def get(name: str) -> LossFn:
    """The loss function registered as `name` (grpo, dapo, gspo, cispo); UserError listing the valid names otherwise."""
    return LOSSES.get(name)


def names() -> list[str]:
    """Registered loss names, sorted."""
    return LOSSES.names()


def loss_params(name: str) -> dict[str, Any]:
    """The hyper-parameters loss `name` accepts, with their defaults, e.g. {'eps_max': 5.0} for cispo."""
    return dict(get(name).defaults)  # type: ignore[attr-defined]


def _check_shapes(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor) -> None:
    # Shape errors are programming errors in the caller (the loop), not user input: ValueError.
    if logp.dim() != 2:
        raise ValueError(f"logp must be [N, T], got shape {tuple(logp.shape)}")
    if old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask {tuple(mask.shape)} must match"
        )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages must be [N] = [{logp.shape[0]}], got {tuple(advantages.shape)}")


def _number(loss: str, key: str, value: Any, lo: float, hi: float, lo_open: bool = False) -> float:
    """`value` as a float in [lo, hi) (or (lo, hi) when lo_open); a UserError naming the loss and key otherwise."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        value = float(value)
        ok = (value > lo if lo_open else value >= lo) and value < hi
    if not ok:
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g})"
        raise UserError(f"loss {loss!r}: {key} must be a number in {interval}, got {value!r}", kind=ErrorKind.RECIPE)
    return float(value)


# ---------------------------------------------------------------------------------------------- shared pieces


def _log_ratio(logp: Tensor, old_logp: Tensor, m: Tensor) -> Tensor:
    """log rho per token [N, T]; 0 at padding (so garbage or -inf log-probs there can never produce NaN)."""
    lr = torch.where(m, logp - old_logp.detach(), torch.zeros((), dtype=logp.dtype, device=logp.device))
    return lr.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)


def _clipped_surrogate(ratio: Tensor, adv: Tensor, lo: float, hi: float) -> Tensor:
    """-min(ratio*A, clip(ratio, lo, hi)*A) elementwise: the PPO pessimistic bound, to be minimised."""
    return -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)


def _metrics(ratio: Tensor, m: Tensor, low: Tensor, high: Tensor) -> dict[str, float]:
    """IS-ratio and clip statistics over the valid tokens (mask). With no valid token: ratio 1, nothing clipped."""
    n = int(m.sum())
    if n == 0:
        return {
            "is_ratio_mean": 1.0,
            "is_ratio_max": 1.0,
            "clip_frac_low": 0.0,
            "clip_frac_high": 0.0,
            "is_clip_frac": 0.0,
        }
    r = ratio.detach()[m]
    f_low = float((low & m).sum()) / n
    f_high = float((high & m).sum()) / n
    return {
        "is_ratio_mean": float(r.mean()),
        "is_ratio_max": float(r.max()),
        "clip_frac_low": f_low,
        "clip_frac_high": f_high,
        "is_clip_frac": f_low + f_high,
    }


def _clipped(ratio: Tensor, advantages: Tensor, m: Tensor, lo: float, hi: float) -> tuple[Tensor, dict[str, float]]:
    """The clipped surrogate of per-token ratios [N, T] (token-level for grpo/dapo, the sequence ratio repeated on
    every token for gspo) and its clip statistics.

    A clip "counts" only where it binds, i.e. where it zeroes the token's gradient: rho below lo with A < 0, or above
    hi with A > 0 (the TRL/verl convention). Outside those cases min() picks the unclipped term."""
    adv = advantages.detach().to(ratio.dtype)[:, None]
    loss = _clipped_surrogate(ratio, adv, lo, hi) * m
    low = (ratio < lo) & (adv < 0)
    high = (ratio > hi) & (adv > 0)
    return loss, _metrics(ratio, m, low, high)


def _ppo_clip(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, lo: float, hi: float):
    m = mask.bool()
    return _clipped(torch.exp(_log_ratio(logp, old_logp, m)), advantages, m, lo, hi)


# ---------------------------------------------------------------------------------------------- losses


@register_loss("grpo")
def grpo(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps: float = 0.2):
    """GRPO / PPO-clip per token (DeepSeekMath, arXiv 2402.03300, eq. 3 without the KL term):
    L = -min(rho*A, clip(rho, 1-eps, 1+eps)*A).

    logp, old_logp, mask: [N, T]; advantages: [N]. Returns per-token loss [N, T] (0 at padding) and metrics.
    """
    eps = _number("grpo", "eps", eps, 0.0, 1.0)
    return _ppo_clip(logp, old_logp, advantages, mask, 1.0 - eps, 1.0 + eps)


@register_loss("dapo")
def dapo(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float = 0.2, eps_high: float = 0.28
):
    """DAPO's decoupled clip, "Clip-Higher" (arXiv 2503.14476 §3.1):
    L = -min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A).

    DAPO's token-level averaging is not here: it is the `token` aggregation, a separate axis.
    Shapes as for grpo.
    """
    eps_low = _number("dapo", "eps_low", eps_low, 0.0, 1.0)
    eps_high = _number("dapo", "eps_high", eps_high, 0.0, math.inf)
    return _ppo_clip(logp, old_logp, advantages, mask, 1.0 - eps_low, 1.0 + eps_high)


@register_loss("gspo")
def gspo(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float = 3e-3, eps_high: float = 4e-3
):
    """GSPO (arXiv 2507.18071): one length-normalised sequence ratio per completion,
    s_i = (pi_theta(y_i)/pi_old(y_i))^(1/|y_i|) = exp(mean_t log rho_{i,t}),
    L = -min(s*A, clip(s, 1-eps_low, 1+eps_high)*A).

    Written in the paper's token-level form (GSPO-token): s_{i,t} = sg(s_i) * pi_theta(y_t)/sg(pi_theta(y_t)), whose
    value is s_i on every token and whose gradient is s_i * grad log pi(y_t). Any aggregation that weights a
    completion's tokens equally (all three here) then gives exactly the sequence-level GSPO gradient
    s_i*A_i * mean_t grad log pi(y_t) per completion (for `sample`). The clip decision is per completion.
    Default eps are the ScaleRL ones (1e-3 scale). Metrics count each token with its completion's ratio.
    Shapes as for grpo.
    """
    eps_low = _number("gspo", "eps_low", eps_low, 0.0, 1.0)
    eps_high = _number("gspo", "eps_high", eps_high, 0.0, math.inf)
    m = mask.bool()
    lr = _log_ratio(logp, old_logp, m)
    n_tok = m.sum(dim=1).clamp(min=1).to(lr.dtype)
    seq_lr = lr.sum(dim=1) / n_tok  # [N]: log s_i, mean over the completion's own tokens only
    ratio = torch.exp(seq_lr.detach()[:, None] + (lr - lr.detach()))  # value s_i, gradient s_i * d log pi_t
    return _clipped(ratio, advantages, m, 1.0 - eps_low, 1.0 + eps_high)


@register_loss("cispo")
def cispo(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_max: float = 5.0):
    """CISPO as ScaleRL uses it (arXiv 2510.13786; MiniMax-M1 arXiv 2506.13585 §3.1):
    L = -sg(clamp(rho, 0, eps_max))*A*log pi_theta.

    eps_max is an absolute cap on the IS weight (ScaleRL: 5), not 1+eps_high around 1 as in MiniMax-M1's
    clip(rho, 1-eps_low, 1+eps_high) reading; the floor is 0 (rho is never negative; the clamp makes it explicit).
    The weight is detached, so the cap rescales a token's REINFORCE gradient A*grad log pi but never zeroes or
    flips it: unlike PPO clipping, every token keeps a gradient. metrics['capped_frac'] = share of valid tokens
    with rho > eps_max (also reported as clip_frac_high and is_clip_frac; clip_frac_low is always 0).
    Shapes as for grpo.
    """
    eps_max = _number("cispo", "eps_max", eps_max, 0.0, math.inf, lo_open=True)
    m = mask.bool()
    ratio = torch.exp(_log_ratio(logp, old_logp, m))
    weight = ratio.detach().clamp(min=0.0, max=eps_max)  # sg(min(rho, eps_max)), floor 0
    adv = advantages.detach().to(logp.dtype)[:, None]
    logp_valid = torch.where(m, logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
    loss = -(weight * adv * logp_valid) * m
    capped = ratio.detach() > eps_max
    metrics = _metrics(ratio, m, torch.zeros_like(m), capped)
    metrics["capped_frac"] = metrics["clip_frac_high"]
    return loss, metrics


# ---------------------------------------------------------------------------------------------- aggregation


def token_weights(
    mask: Tensor,
    group_ids: Tensor | list[int],
    mode: str,
    dtype: torch.dtype | None = None,
    reduce: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """Per-token weights [N, T] for loss = (per_token_loss * weights).sum(), over the WHOLE optimizer-step batch.

    mask: [N, T] (bool or 0/1; rows of all zeros are completions dropped by a filter and count in no denominator);
    group_ids: [N] ints, the prompt group of each completion; mode: sample | prompt | token (registry
    `aggregation`). The weights sum to 1 (0 everywhere if no token is valid: the step then has no loss).
    Slice the result with the same rows as the micro-batch; never recompute it per micro-batch.
    dtype: the weights' dtype (default: mask's if floating, else torch's default).
    reduce: in a data-parallel run, sums over ranks: the mode's denominator (valid completions, valid groups or
    tokens) is then the whole step's, so the weights sum to 1 over all ranks and each rank's loss is its share of
    the one-process loss. Every rank calls it once, whatever its rows (N may be 0).
    """
    fn = AGGREGATIONS.get(mode)
    if mask.dim() != 2:
        raise ValueError(f"mask must be [N, T], got shape {tuple(mask.shape)}")
    gids = torch.as_tensor(group_ids, device=mask.device)
    if gids.shape != mask.shape[:1]:
        raise ValueError(f"group_ids must be [N] = [{mask.shape[0]}], got {tuple(gids.shape)}")
    if dtype is None:
        dtype = mask.dtype if mask.dtype.is_floating_point else torch.get_default_dtype()
    m = (mask != 0).to(dtype)
    if reduce is None:
        if not bool(m.any()):
            return torch.zeros_like(m)
        return fn(m, gids, lambda count: count)
    return fn(m, gids, lambda count: reduce(count.to(torch.float64)).to(count.dtype))


@AGGREGATIONS.register("sample")
def _sample_weights(m: Tensor, gids: Tensor, total: Callable[[Tensor], Tensor]) -> Tensor:
    """Mean over a completion's tokens, then over completions (GRPO's original): w = 1/(N_valid*|y_i|)."""
    lens = m.sum(dim=1)
    n_valid = total((lens > 0).sum().to(m.dtype))
    return m / (lens.clamp(min=1) * n_valid.clamp(min=1))[:, None]


@AGGREGATIONS.register("prompt")
def _prompt_weights(m: Tensor, gids: Tensor, total: Callable[[Tensor], Tensor]) -> Tensor:
    """Token-mean within each prompt group, then mean over groups (ScaleRL's choice): w = 1/(G_valid*tokens_g).
    A group whose completions were all dropped (zero-variance filter) has no tokens and is not counted in G_valid."""
    _, inv = torch.unique(gids, return_inverse=True)
    lens = m.sum(dim=1)
    groups = int(inv.max()) + 1 if inv.numel() else 0
    group_tokens = torch.zeros(groups, dtype=m.dtype, device=m.device).index_add_(0, inv, lens)
    g_valid = total((group_tokens > 0).sum().to(m.dtype))
    return m / (group_tokens[inv].clamp(min=1) * g_valid.clamp(min=1))[:, None]


@AGGREGATIONS.register("token")
def _token_weights(m: Tensor, gids: Tensor, total: Callable[[Tensor], Tensor]) -> Tensor:
    """All valid tokens of the step pooled (DAPO's token-level loss, arXiv 2503.14476 §3.3): w = 1/total_tokens."""
    return m / total(m.sum()).clamp(min=1)
