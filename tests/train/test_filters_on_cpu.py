"""Zero-variance filtering and the no-positive-resampling prompt pool; expected values worked out by hand."""

import json

import pytest
import torch

from ablate.errors import ErrorKind
from ablate.train import losses
from ablate.train.filters import PromptPool, zero_variance_frac, zero_variance_mask
from jobs import refused

F64 = torch.float64


# ------------------------------------------------------------------------------------------ zero variance


def test_zero_variance_mask_uses_a_tolerance():
    r = torch.tensor([1, 1, 1, 0, 1, 0, 0.5, 0.5 + 1e-9, -1, -1, 0.3], dtype=F64)
    g = [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 4]
    keep = zero_variance_mask(r, g, tol=1e-6)
    # g0 all 1, g2 equal within 1e-6, g3 all -1, g4 a single completion: dropped; g1 mixed: kept
    assert keep.tolist() == [False] * 3 + [True] * 3 + [False] * 5
    assert zero_variance_mask(r, g, tol=1e-12)[6:8].tolist() == [True, True]  # 1e-9 apart is not "equal" at 1e-12
    assert zero_variance_frac(keep, g) == pytest.approx(4 / 5)


def test_zero_variance_groups_leave_numerator_and_denominator():
    # 3 prompt groups x 2 completions, 2 tokens each; g1 (rows 2, 3) has equal rewards
    rewards = torch.tensor([1, 0, 1, 1, 0, 1], dtype=F64)
    gids = torch.tensor([0, 0, 1, 1, 2, 2])
    per_token = torch.tensor([[1, 2], [3, 4], [100, 100], [100, 100], [5, 6], [7, 8]], dtype=F64)
    mask = torch.ones(6, 2, dtype=F64)
    keep = zero_variance_mask(rewards, gids)
    assert keep.tolist() == [True, True, False, False, True, True]
    filtered = mask * keep[:, None]
    expected = {
        "token": (1 + 2 + 3 + 4 + 5 + 6 + 7 + 8) / 8,  # 8 kept tokens, not 12
        "sample": (1.5 + 3.5 + 5.5 + 7.5) / 4,  # 4 kept completions, not 6
        "prompt": ((1 + 2 + 3 + 4) / 4 + (5 + 6 + 7 + 8) / 4) / 2,  # 2 kept groups, not 3
    }
    for mode, value in expected.items():
        w = losses.token_weights(filtered, gids, mode)
        assert (per_token * w).sum().item() == pytest.approx(value), mode
        # identical to the batch that never contained the group
        rows = keep.nonzero().squeeze(1)
        w_without = losses.token_weights(mask[rows], gids[rows], mode)
        assert (per_token[rows] * w_without).sum().item() == pytest.approx(value), mode
    # the bug this guards against: weights computed on the unfiltered mask keep the dropped group's tokens in the
    # denominator, which shrinks the loss of the kept tokens
    w_unfiltered = losses.token_weights(mask, gids, "token")
    assert (per_token * w_unfiltered * filtered).sum().item() != pytest.approx(expected["token"])


# ------------------------------------------------------------------------------------------ prompt pool


def test_pool_drops_a_prompt_exactly_at_the_threshold():
    pool = PromptPool(4, threshold=0.9)
    removed = pool.update([0] * 10 + [1] * 10, [True] * 9 + [False] + [True] * 8 + [False] * 2)
    assert removed == [0]  # 9/10 = 0.9 reaches the threshold; 8/10 does not
    assert pool.active == [1, 2, 3] and pool.removed == [0] and len(pool) == 3
    assert pool.pass_rate(1) == pytest.approx(0.8) and pool.pass_rate(2) is None
    # 17/19 = 0.895 stays; one more pass makes 18/20 = 0.9 and removes it
    assert pool.update([2] * 19, [1.0] * 17 + [0.0] * 2) == []
    assert pool.update([2], [1.0]) == [2]
    assert pool.active == [1, 3]


def test_pass_means_reward_above_zero_for_signed_and_binary_rewards():
    signed = PromptPool([10, 11], threshold=0.5)
    assert signed.update([10, 10, 11, 11], torch.tensor([1.0, -1.0, -1.0, -1.0])) == [10]  # 1/2 vs 0/2
    binary = PromptPool([10, 11], threshold=0.5)
    assert binary.update(torch.tensor([10, 10, 11, 11]), torch.tensor([1, 0, 0, 0])) == [10]
    assert binary.pass_rate(11) == 0.0


def test_removed_prompts_are_never_sampled_again():
    pool = PromptPool(range(6), threshold=0.9)
    pool.update([3, 3, 3], [True, True, True])
    pool.update([3] * 20, [False] * 20)  # late (in-flight) failures do not bring it back
    assert 3 not in pool.active
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(50):
        draw = pool.sample(4, g)
        assert len(set(draw)) == 4
        seen.update(draw)
    assert seen == {0, 1, 2, 4, 5}
    assert sorted(pool.sample(10, g)) == [0, 1, 2, 4, 5]  # fewer left than asked: all of them
    pool.update([0, 1, 2, 4, 5], [True] * 5)
    assert pool.sample(2, g) == [] and len(pool) == 0


def test_pool_state_round_trips_through_json_and_resumes_identically():
    def run_first_half(pool):
        pool.update([0] * 5, [False] * 5)  # prompt 0: 0/5
        pool.update([1] * 8, [True] * 8)  # prompt 1: removed
        pool.update([2] * 4, [True, True, True, False])  # prompt 2: 3/4

    uninterrupted = PromptPool(range(8), threshold=0.9)
    run_first_half(uninterrupted)
    g1 = torch.Generator().manual_seed(5)
    uninterrupted.sample(3, g1)

    saved = PromptPool(range(8), threshold=0.9)
    run_first_half(saved)
    g2 = torch.Generator().manual_seed(5)
    saved.sample(3, g2)
    blob = json.dumps({"pool": saved.state_dict(), "rng": g2.get_state().tolist()})

    state = json.loads(blob)
    resumed = PromptPool(range(8), threshold=0.9)
    resumed.load_state_dict(state["pool"])
    g3 = torch.Generator()
    g3.set_state(torch.tensor(state["rng"], dtype=torch.uint8))
    assert resumed.active == uninterrupted.active and resumed.removed == [1]
    assert resumed.pass_rate(2) == pytest.approx(0.75)
    assert resumed.sample(4, g3) == uninterrupted.sample(4, g1)
    # history survived: 10/10 more passes give prompt 0 10/15 = .67 (stays), where a fresh pool would drop it
    assert resumed.update([0] * 10, [True] * 10) == []
    assert uninterrupted.update([0] * 10, [True] * 10) == []
    assert PromptPool(range(8)).update([0] * 10, [True] * 10) == [0]


def test_pool_refuses_a_state_from_another_config():
    pool = PromptPool(range(4), threshold=0.9)
    with refused(ErrorKind.STATE, "prompt set"):  # tells it from the threshold refusal below
        PromptPool(range(5), threshold=0.9).load_state_dict(pool.state_dict())
    with refused(ErrorKind.STATE, "threshold 0.9", "0.8"):
        PromptPool(range(4), threshold=0.8).load_state_dict(pool.state_dict())
    with refused(ErrorKind.RECIPE, "threshold", "(0, 1]", "1.5"):
        PromptPool(range(4), threshold=1.5)
