"""How the ranks of a data-parallel run hold the policy (`train.sharding`), and the state that follows from it.

- `ddp`: every rank holds the whole policy and its optimizer state; DistributedDataParallel sums the gradients.
- `fsdp`: FSDP2 (`torch.distributed.fsdp.fully_shard`): parameters, gradients and optimizer state are sharded over
  the ranks, each decoder layer a unit and the embeddings, final norm and head in the root. The training forward
  is the model's own forward (FSDP gathers a unit's weights as it runs, and the LM head computes in the recipe's
  head dtype inside it). Generation needs whole weights, so each rank keeps a plain copy of the policy for its
  samplers, refreshed from the shards after every optimizer step (an all-gather). What it saves is the optimizer
  state and gradients (Adam's two moments are twice the parameters), not the weights for generation.

In one process neither applies: the policy is trained and sampled as it is.

    scorer, sampled = wrap(policy, world, device, sharding)   # the module the training forward goes through,
                                                              # and the policy the samplers read
    with grad_sync(scorer, last_micro_batch): loss.backward()
    refresh(policy, sampled)                                  # after each optimizer step (fsdp: all ranks)
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from ablate.topology.world import World
from ablate.train.policy import Policy


class Scorer(torch.nn.Module):
    """Policy.completion_logits as a module's forward, so that DDP sees the forward it must synchronise."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.model = policy.model  # registered: DDP finds the parameters here
        self.policy = policy

    def forward(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group: torch.Tensor, tokens: torch.Tensor
    ) -> torch.Tensor:
        return self.policy.completion_logits(prompt_ids, prompt_mask, group, tokens)


class FullForwardScorer(Scorer):
    """Completion logits through the model's own forward (FSDP's units gather their weights there): the same
    logits as Policy.completion_logits, computed on the [N, P+T] sequences."""

    def forward(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group: torch.Tensor, tokens: torch.Tensor
    ) -> torch.Tensor:
        T = tokens.shape[1]
        ids = torch.cat([prompt_ids[group], tokens], 1)
        am = torch.cat([prompt_mask[group], torch.ones_like(tokens)], 1)
        pos = (am.long().cumsum(1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False, logits_to_keep=T + 1)
        return out.logits[:, :-1]  # the positions that predict the T completion tokens


class _HeadInDtype(torch.nn.Module):
    """The LM head as a module that computes in `dtype` (the recipe's FP32 head), so the model's own forward
    honours it. Holds the same Parameter as the head it replaces (tied embeddings stay tied)."""

    def __init__(self, head: torch.nn.Linear, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = head.weight
        self.bias = getattr(head, "bias", None)
        self.dtype = dtype

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        bias = self.bias.to(self.dtype) if self.bias is not None else None
        return F.linear(h.to(self.dtype), self.weight.to(self.dtype), bias)


def _is_fsdp(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def wrap(policy: Policy, world: World, device: torch.device, sharding: str) -> tuple[torch.nn.Module, Policy]:
    """(the module the training forward goes through, the policy the samplers read); see the module docstring."""
    if world.size == 1:
        return Scorer(policy), policy
    if sharding == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        # no buffer sync per forward: the samplers run the model outside DDP, at their own pace
        return DistributedDataParallel(
            Scorer(policy), device_ids=[device.index] if device.type == "cuda" else None, forward_sync_buffers=False
        ), policy
    from torch.distributed.fsdp import fully_shard

    model = policy.model
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        from ablate.errors import ErrorKind, UserError

        raise UserError(
            f"train.sharding=fsdp shards a decoder's layers (model.model.layers, the Llama layout); "
            f"{type(model).__name__} has none: use train.sharding=ddp",
            kind=ErrorKind.RECIPE,
        )
    sampled = Policy(copy.deepcopy(model), policy.tokenizer, policy.head_dtype)
    model.set_output_embeddings(_HeadInDtype(model.get_output_embeddings(), policy.head_dtype))
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    return FullForwardScorer(policy), sampled


@contextlib.contextmanager
def grad_sync(scorer: torch.nn.Module, on: bool) -> Iterator[None]:
    """Gradient accumulation over micro-batches: the ranks' gradients are reduced only on the last backward."""
    wrapped: Any = scorer  # a DDP wrapper, or a Scorer whose model may be FSDP-sharded
    if hasattr(wrapped, "no_sync"):  # DDP
        with contextlib.nullcontext() if on else wrapped.no_sync():
            yield
    elif _is_fsdp(wrapped.model):
        wrapped.model.set_requires_gradient_sync(on)
        yield
    else:
        yield


def grad_norm(total: torch.Tensor) -> float:
    """clip_grad_norm_'s result as a float (a DTensor under FSDP)."""
    return float(total.full_tensor() if hasattr(total, "full_tensor") else total)


def refresh(policy: Policy, sampled: Policy) -> None:
    """After an optimizer step under fsdp (every rank calls it): the samplers' copy gets the new whole weights."""
    if sampled is policy:
        return
    sampled.model.load_state_dict(full_weights(policy))


def full_weights(policy: Policy) -> dict[str, Any]:
    """The policy's whole weights on every rank (an all-gather under fsdp; every rank must call it)."""
    if not _is_fsdp(policy.model):
        return {k: v.detach() for k, v in policy.model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(policy.model, options=StateDictOptions(full_state_dict=True))


def state(policy: Policy, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Model and optimizer state for a checkpoint (under fsdp: gathered whole onto rank 0; every rank calls it)."""
    if not _is_fsdp(policy.model):
        return {"model": policy.model.state_dict(), "optim": opt.state_dict()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {
        "model": get_model_state_dict(policy.model, options=opts),
        "optim": get_optimizer_state_dict(policy.model, opt, options=opts),
        "sharding": "fsdp",
    }


def load_state(policy: Policy, sampled: Policy, opt: torch.optim.Optimizer, st: dict[str, Any]) -> None:
    """Restore a checkpoint's model and optimizer state (every rank reads the whole checkpoint)."""
    from ablate.errors import ErrorKind, UserError

    fsdp = _is_fsdp(policy.model)
    if (st.get("sharding") == "fsdp") != fsdp:
        raise UserError(
            f"the checkpoint was saved with train.sharding={st.get('sharding', 'ddp')}: its optimizer "
            "state is laid out for that; resume with the same train.sharding",
            kind=ErrorKind.STATE,
        )
    if not fsdp:
        policy.model.load_state_dict(st["model"])
        opt.load_state_dict(st["optim"])
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    sampled.model.load_state_dict(st["model"])  # first: set_model_state_dict turns the dict's tensors into shards
    opts = StateDictOptions(full_state_dict=True)
    set_model_state_dict(policy.model, st["model"], options=opts)
    set_optimizer_state_dict(policy.model, opt, st["optim"], options=opts)
