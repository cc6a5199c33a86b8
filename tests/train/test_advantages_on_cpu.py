"""Group-relative advantages under each normalisation key; expected numbers are worked out here by hand."""

import math

import pytest
import torch

from ablate.errors import ErrorKind
from ablate.train.advantages import NORMALIZATIONS, group_advantages
from jobs import refused

F64 = torch.float64
# g0: one success in four; g1: all solved (zero variance); g2: signed rewards +1/-1
REWARDS = torch.tensor([1, 0, 0, 0, 1, 1, 1, 1, 1, -1], dtype=F64)
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
CENTRED = [0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0, 1, -1]  # r - group mean (.25, 1, 0)


def test_none_is_mean_centring_only():
    adv = group_advantages(REWARDS, GROUPS, "none")
    assert torch.allclose(adv, torch.tensor(CENTRED, dtype=F64))


def test_prompt_divides_by_the_group_population_std():
    adv = group_advantages(REWARDS, GROUPS, "prompt", eps=1e-12)
    s0 = math.sqrt((0.75**2 + 3 * 0.25**2) / 4)  # 0.4330
    exp = [0.75 / s0] + [-0.25 / s0] * 3 + [0.0] * 4 + [1.0, -1.0]  # g1: 0/(0+eps) = 0, not NaN
    assert torch.allclose(adv, torch.tensor(exp, dtype=F64))
    assert adv[0].item() == pytest.approx(math.sqrt(3))  # one success in four: +sqrt(3), the rest -1/sqrt(3)


def test_batch_divides_by_the_std_of_all_advantages():
    adv = group_advantages(REWARDS, GROUPS, "batch", eps=1e-12)
    sb = math.sqrt((0.75**2 + 3 * 0.25**2 + 1 + 1) / 10)  # zero-variance rows are in the loss, so in the std
    assert sb == pytest.approx(0.5244, abs=1e-4)
    assert torch.allclose(adv, torch.tensor([c / sb for c in CENTRED], dtype=F64))


def test_batch_std_excludes_rows_the_filter_dropped():
    keep = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 1, 1], dtype=torch.bool)  # g1 dropped by zero-variance filtering
    adv = group_advantages(REWARDS, GROUPS, "batch", keep=keep, eps=1e-12)
    sk = math.sqrt((0.75**2 + 3 * 0.25**2 + 1 + 1) / 6)  # 0.6770: only the 6 rows that enter the loss
    exp = [c / sk if k else 0.0 for c, k in zip(CENTRED, keep.tolist())]
    assert torch.allclose(adv, torch.tensor(exp, dtype=F64))


def test_dropped_rows_get_zero_under_every_key():
    keep = torch.tensor([0, 1, 1, 1, 1, 1, 1, 1, 1, 1], dtype=torch.bool)
    for key in NORMALIZATIONS.names():
        adv = group_advantages(REWARDS, GROUPS, key, keep=keep)
        assert adv[0].item() == 0.0
        # the group mean still counts the dropped row 0 (mean .25), so row 1 (reward 0) stays negative
        assert adv[1].item() < 0


def test_group_ids_need_not_be_contiguous_or_sorted():
    r = torch.tensor([1.0, 3.0, 0.0, 5.0], dtype=F64)
    gids = [42, 7, 42, 7]  # groups {1, 0} and {3, 5}
    adv = group_advantages(r, gids, "none")
    assert torch.allclose(adv, torch.tensor([0.5, -1.0, -0.5, 1.0], dtype=F64))
    adv = group_advantages(r, gids, "prompt", eps=1e-12)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=F64))  # stds .5 and 1


def test_zero_variance_group_gives_zero_not_nan_with_default_eps():
    for key in NORMALIZATIONS.names():
        adv = group_advantages(torch.ones(4, dtype=F64), [0, 0, 1, 1], key)
        assert torch.equal(adv, torch.zeros(4, dtype=F64))


def test_unknown_normalization_lists_valid_names():
    with refused(ErrorKind.RECIPE, "'group'", "batch, none, prompt"):
        group_advantages(REWARDS, GROUPS, "group")
