"""What the ranks of the data-parallel tests run (targets of ablate.topology.workers.spawn, imported by module name).

`grad_identity`: for each case (a config and a global batch saved by the test), take one optimizer step on this
rank's share of the batch's groups and save the gradient, the update, the metrics and the pool it ends with. The
test compares every rank's with one process stepping on the whole batch.
"""

from __future__ import annotations

import dataclasses

import torch

from ablate.config.schema import validate
from ablate.topology.world import World
from ablate.train.step import Batch, Learner


def shard_batch(b: Batch, world: World) -> Batch:
    """This rank's groups of a global batch (every size-th group, as Learner.make_batch shards), re-indexed."""
    groups = list(range(world.rank, len(b.prompt_ids), world.size))
    rows = torch.cat([(b.ro.group == g).nonzero().squeeze(1) for g in groups])
    remap = torch.full((len(b.prompt_ids),), -1, dtype=torch.long)
    remap[groups] = torch.arange(len(groups))
    ro = dataclasses.replace(
        b.ro,
        prompt_ids=b.ro.prompt_ids[groups],
        prompt_mask=b.ro.prompt_mask[groups],
        group=remap[b.ro.group[rows]],
        tokens=b.ro.tokens[rows],
        present=b.ro.present[rows],
        mask=b.ro.mask[rows],
        logp=b.ro.logp[rows],
        truncated=b.ro.truncated[rows],
        interrupted=b.ro.interrupted[rows],
        entropy=None if b.ro.entropy is None else b.ro.entropy[rows],
        texts=[b.ro.texts[i] for i in rows.tolist()],
    )
    return Batch(ro, b.rewards[rows], b.correct[rows], [b.prompt_ids[g] for g in groups], b.version)


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A tensor whole (a DTensor shard under fsdp is gathered: every rank must call this)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def flat_params(learner: Learner) -> torch.Tensor:
    return torch.cat([_whole(p.detach()).reshape(-1).double() for p in learner.policy.model.parameters()])


def flat_grads(learner: Learner) -> torch.Tensor:
    return torch.cat([_whole(p.grad).reshape(-1).double() for p in learner.policy.model.parameters()])


def grad_identity(world: World, cases: str, out: str, sharding: str = "ddp", stop=None) -> dict:
    saved = torch.load(cases, weights_only=False)
    results = []
    for case in saved:
        learner = Learner(
            validate(
                {
                    **case["config"],
                    "train": {**case["config"]["train"], "sharding": sharding},
                    "resources": {**case["config"]["resources"], "nproc": world.size},
                }
            ),
            world,
        )
        before = flat_params(learner)
        m = learner.step(shard_batch(case["batch"], world), 0)
        grad = flat_grads(learner)
        results.append(
            {
                "delta": flat_params(learner) - before,
                "grad": grad,
                "metrics": m,
                "pool": learner.pool.state_dict(),
                "sampled": torch.cat([p.detach().reshape(-1).double() for p in learner.sampled.model.parameters()]),
            }
        )
    torch.save(results, out if world.lead else f"{out}.rank{world.rank}")  # every rank's view, for the test
    return {"cases": len(results)}
