"""The optimizer step's forward/backward skips the rows whose advantage is zero (every loss is its advantage times
a function of the log-probs): the gradient is the whole batch's, and a step of nothing but such rows still steps."""

from __future__ import annotations

import pytest
import torch

from ablate.train import advantages, losses
from ablate.train.step import Learner
from jobs import small_config

torch.set_num_threads(1)


def _learner_and_batch(want_mixed: bool):
    """A learner whose recipe keeps zero-variance groups, and a batch with (or without) a group of mixed rewards."""
    cfg = small_config("filtering.zero_variance=false", "aggregation=prompt")
    learner = Learner(cfg)
    sampler = learner.sampler()
    for _ in range(200):
        b = learner.make_batch(sampler, learner.gen)
        assert b is not None
        per_group = [set(b.rewards[b.ro.group == g].tolist()) for g in range(int(b.ro.prompt_ids.shape[0]))]
        mixed = sum(len(r) > 1 for r in per_group)
        if (0 < mixed < len(per_group)) if want_mixed else mixed == 0:
            return learner, b
    pytest.fail("no batch of the wanted kind in 200 draws")


def _reference_grads(learner: Learner, b) -> dict[str, torch.Tensor]:
    """The whole batch's clipped gradient, every row through forward/backward (the loss written out as the step
    defines it)."""
    ro, cfg = b.ro, learner.cfg
    adv = advantages.group_advantages(b.rewards, ro.group, cfg.normalization.name)
    T = int(ro.present.sum(1).max())
    tokens, mask = ro.tokens[:, :T], ro.mask[:, :T]
    w = losses.token_weights(mask, ro.group, cfg.aggregation.name, dtype=torch.float32)
    learner.policy.model.zero_grad(set_to_none=True)
    logits = learner.policy.completion_logits(ro.prompt_ids, ro.prompt_mask, ro.group, tokens).float()
    logp = torch.log_softmax(logits, -1).gather(2, tokens[:, :, None]).squeeze(2)
    ptl, _ = learner.loss_fn(logp, ro.logp[:, :T], adv, mask, **learner.loss_params)
    (ptl * w).sum().backward()
    torch.nn.utils.clip_grad_norm_(learner.policy.model.parameters(), cfg.optim.grad_clip)  # as the step clips
    grads = {k: p.grad.clone() for k, p in learner.policy.model.named_parameters()}
    learner.policy.model.zero_grad(set_to_none=True)
    return grads


def test_zero_advantage_rows_skip_the_backward_and_leave_the_gradient_as_it_was():
    learner, b = _learner_and_batch(want_mixed=True)
    want = _reference_grads(learner, b)
    seen: list[int] = []
    forward = learner.scorer.forward
    learner.scorer.forward = lambda pids, pmask, group, tokens: (
        seen.append(len(tokens))
        or forward(  # type: ignore[method-assign]
            pids, pmask, group, tokens
        )
    )
    adv = advantages.group_advantages(b.rewards, b.ro.group, learner.cfg.normalization.name)
    sums = {"clipped": 0.0, "loss": 0.0}
    learner._backward(b, adv, torch.arange(len(adv)), 0, None, sums)
    assert seen == [int((adv != 0).sum())] and seen[0] < len(adv)  # only the rows with a gradient went through
    assert sums["trained_tokens"] == float(int(b.ro.prompt_mask.sum()) + int(b.ro.present.sum()))  # the recipe's count
    for k, p in learner.policy.model.named_parameters():
        torch.testing.assert_close(p.grad, want[k], rtol=1e-5, atol=1e-7, msg=k)


def test_a_step_of_zero_advantages_alone_still_steps_adamw_on_zero_gradients():
    learner, b = _learner_and_batch(want_mixed=False)
    adv = advantages.group_advantages(b.rewards, b.ro.group, learner.cfg.normalization.name)
    assert bool((adv == 0).all())
    learner._backward(b, adv, torch.arange(len(adv)), 0, None, {"clipped": 0.0, "loss": 0.0})
    for k, p in learner.policy.model.named_parameters():
        assert p.grad is not None and not bool(p.grad.any()), k  # zeros, as the whole batch's backward gives
