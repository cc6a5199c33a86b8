"""Policy losses and aggregation weights on small hand-built tensors; expected numbers are worked out here by hand."""

import math

import pytest
import torch

from ablate.errors import ErrorKind
from ablate.registry import Registry
from ablate.train import losses
from jobs import refused

F64 = torch.float64
LOSS_NAMES = ["grpo", "dapo", "gspo", "cispo"]
MODES = ["sample", "prompt", "token"]


def t(x, **kw):
    return torch.tensor(x, dtype=F64, **kw)


def leaf(x):
    return torch.tensor(x, dtype=F64, requires_grad=True)


def old_for(logp, ratios):
    """old log-probs that make rho = exp(logp - old) equal `ratios` (NaN ratio = padding: any old value)."""
    lp = torch.as_tensor(logp, dtype=F64)
    r = torch.as_tensor(ratios, dtype=F64)
    return torch.where(torch.isnan(r), torch.full_like(lp, 123.0), lp - torch.log(r))


# ------------------------------------------------------------------------------------------ registries


def test_registry_basics():
    reg = Registry("widget")

    @reg.register("b")
    def b():
        return 2

    reg.add("a", 1)
    assert reg.names() == ["a", "b"] and reg.get("b") is b and "a" in reg and len(reg) == 2
    with refused(ErrorKind.RECIPE, "widget", "'c'", "a, b"):
        reg.get("c")
    with pytest.raises(ValueError, match="already registered"):
        reg.add("a", 3)


def test_unknown_loss_lists_valid_names():
    with refused(ErrorKind.RECIPE, "'foo'", "cispo, dapo, grpo, gspo"):
        losses.get("foo")
    with refused(ErrorKind.RECIPE, "'cipso'", "'cispo'"):
        losses.get("cipso")
    assert losses.names() == ["cispo", "dapo", "grpo", "gspo"]


def test_unknown_aggregation_lists_valid_names():
    with refused(ErrorKind.RECIPE, "'tokens'", "prompt, sample, token"):
        losses.token_weights(torch.ones(2, 2), [0, 0], "tokens")


def test_params_defaults_and_unexpected_param_is_user_error():
    assert losses.loss_params("grpo") == {"eps": 0.2}
    assert losses.loss_params("dapo") == {"eps_low": 0.2, "eps_high": 0.28}
    assert losses.loss_params("gspo") == {"eps_low": 3e-3, "eps_high": 4e-3}
    assert losses.loss_params("cispo") == {"eps_max": 5.0}
    lp = torch.zeros(1, 2, dtype=F64)
    args = (lp, lp, torch.ones(1, dtype=F64), torch.ones(1, 2))
    with refused(ErrorKind.RECIPE, "'grpo'", "'eps_max'"):
        losses.get("grpo")(*args, eps_max=5.0)
    with refused(ErrorKind.RECIPE, "'cispo'", "'eps'", "eps_max"):
        losses.get("cispo")(*args, eps=0.2)
    # the config keeps the other losses' fields null: None is "unset", so the whole section can be passed
    lp1 = leaf([[0.0, 0.0]])
    loss, _ = losses.get("cispo")(lp1, lp1.detach() - math.log(8.0), *args[2:], eps=None, eps_low=None, eps_max=None)
    assert torch.allclose(loss, torch.zeros(1, 2, dtype=F64))  # logp 0; default eps_max=5 applies below
    loss.sum().backward()
    assert torch.allclose(lp1.grad, t([[-5.0, -5.0]]))
    with refused(ErrorKind.RECIPE, "'grpo'", "eps", "[0, 1)", "1.5"):
        losses.get("grpo")(*args, eps=1.5)
    with refused(ErrorKind.RECIPE, "'cispo'", "eps_max", "(0, inf)", "0.0"):
        losses.get("cispo")(*args, eps_max=0)


# ------------------------------------------------------------------------------------------ values and gradients


def test_grpo_value_gradient_and_metrics_by_hand():
    # rho per token; the last column is padding with NaN log-probs, which must neither leak nor give NaN.
    nan = float("nan")
    logp = leaf([[0.0, 0.0, 0.0, nan], [0.0, 0.0, 0.0, nan]])
    old = old_for([[0.0, 0.0, 0.0, 0.0]] * 2, [[1.0, 1.5, 0.5, nan], [1.0, 1.5, 0.5, nan]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool)
    adv = t([1.0, -2.0])
    loss, m = losses.get("grpo")(logp, old, adv, mask, eps=0.2)
    # A=+1: rho 1 -> -1; rho 1.5 -> -min(1.5, 1.2) = -1.2 (clip binds); rho .5 -> -min(.5, .8) = -.5
    # A=-2: rho 1 -> 2; rho 1.5 -> -min(-3, -2.4) = 3; rho .5 -> -min(-1, -1.6) = 1.6 (clip binds)
    assert torch.allclose(loss, t([[-1.0, -1.2, -0.5, 0.0], [2.0, 3.0, 1.6, 0.0]]))
    loss.sum().backward()
    # d/dlogp of -rho*A is -rho*A where unclipped, 0 where the clip binds
    assert torch.allclose(logp.grad, t([[-1.0, 0.0, -0.5, 0.0], [2.0, 3.0, 0.0, 0.0]]))
    assert m["is_ratio_mean"] == pytest.approx(1.0) and m["is_ratio_max"] == pytest.approx(1.5)
    assert m["clip_frac_high"] == pytest.approx(1 / 6) and m["clip_frac_low"] == pytest.approx(1 / 6)
    assert m["is_clip_frac"] == pytest.approx(2 / 6)
    assert all(type(v) is float for v in m.values())


def test_dapo_asymmetric_clip_by_hand():
    logp = leaf([[0.0, 0.0], [0.0, 0.0]])
    old = old_for(torch.zeros(2, 2), [[1.25, 1.4], [0.75, 0.85]])
    adv = t([1.0, -1.0])
    loss, m = losses.get("dapo")(logp, old, adv, torch.ones(2, 2), eps_low=0.2, eps_high=0.28)
    # A=+1: 1.25 < 1.28 stays unclipped (GRPO's 1.2 would clip it); 1.4 -> 1.28, clipped.
    # A=-1: .75 < .8 -> -min(-.75, -.8) = .8, clipped; .85 -> .85 unclipped.
    assert torch.allclose(loss, t([[-1.25, -1.28], [0.8, 0.85]]))
    loss.sum().backward()
    assert torch.allclose(logp.grad, t([[-1.25, 0.0], [0.0, 0.85]]))
    assert m["clip_frac_high"] == pytest.approx(0.25) and m["clip_frac_low"] == pytest.approx(0.25)
    # the same tokens under GRPO eps=0.2: 1.25 is clipped too
    logp2 = leaf([[0.0, 0.0], [0.0, 0.0]])
    losses.get("grpo")(logp2, old, adv, torch.ones(2, 2), eps=0.2)[0].sum().backward()
    assert torch.allclose(logp2.grad, t([[0.0, 0.0], [0.0, 0.85]]))


def test_gspo_uses_the_length_normalised_sequence_ratio():
    lr = [[0.5, -0.5, 0.0], [0.01, 0.03, 0.0], [0.001, 0.002, 0.003], [-0.01, 0.0, 0.0]]
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    logp = leaf([[-1.0, -2.0, -3.0]] * 4)
    old = logp.detach() - t(lr)
    adv = t([1.0, 1.0, -1.0, -1.0])
    loss, m = losses.get("gspo")(logp, old, adv, mask, eps_low=3e-3, eps_high=4e-3)
    s0 = 1.0  # exp((.5 - .5)/2): token ratios 1.65 and .61 average out
    s1 = math.exp(0.02)  # 1.0202 > 1.004, A > 0: clipped to 1.004
    s2 = math.exp(0.002)  # inside [0.997, 1.004]
    # s3 = exp(-.01) = .990 < .997 with A < 0: clipped to .997
    expected = t([[-s0, -s0, 0.0], [-1.004, -1.004, 0.0], [s2, s2, s2], [0.997, 0.0, 0.0]])
    assert torch.allclose(loss, expected)
    # Gradient through the sequence ratio, with sample aggregation (each completion 1/4, spread over its tokens):
    # d(-(1/N) s_i A_i)/d logp_{i,t} = -(1/N) A_i s_i / |y_i| when unclipped, 0 when the clip binds.
    w = losses.token_weights(mask, [0, 0, 1, 1], "sample")
    (loss * w).sum().backward()
    g = t([[-s0 / 8, -s0 / 8, 0.0], [0.0, 0.0, 0.0], [s2 / 12, s2 / 12, s2 / 12], [0.0, 0.0, 0.0]])
    assert torch.allclose(logp.grad, g)
    # Token-level PPO clipping of row 0 (GRPO) differs: rho e^.5 = 1.65 > 1.2 is clipped, e^-.5 = .61 is not.
    lp_grpo = leaf([[-1.0, -2.0, -3.0]] * 4)
    (losses.get("grpo")(lp_grpo, old, adv, mask)[0] * w).sum().backward()
    assert torch.allclose(lp_grpo.grad[0], t([0.0, -math.exp(-0.5) / 8, 0.0]))
    assert m["is_ratio_max"] == pytest.approx(s1)
    assert m["clip_frac_high"] == pytest.approx(2 / 8) and m["clip_frac_low"] == pytest.approx(1 / 8)


def test_cispo_value_gradient_and_capped_fraction_by_hand():
    logp = leaf([[-1.0, -2.0, -0.5, -3.0], [-1.0, -2.0, 0.0, 0.0]])
    ratios = [[0.5, 1.0, 3.0, 8.0], [0.5, 8.0, float("nan"), float("nan")]]
    old = old_for(logp.detach(), ratios)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    adv = t([1.0, -2.0])
    loss, m = losses.get("cispo")(logp, old, adv, mask, eps_max=5.0)
    # weight = min(rho, 5): row0 [.5, 1, 3, 5], row1 [.5, 5]; loss = -weight * A * logp
    assert torch.allclose(loss, t([[0.5, 2.0, 1.5, 15.0], [-1.0, -20.0, 0.0, 0.0]]))
    loss.sum().backward()
    # stop-gradient on the weight: d/dlogp = -weight * A (were rho differentiated, row0 col0 would be 0, not -.5)
    assert torch.allclose(logp.grad, t([[-0.5, -1.0, -3.0, -5.0], [1.0, 10.0, 0.0, 0.0]]))
    assert m["capped_frac"] == pytest.approx(2 / 6) and m["is_clip_frac"] == pytest.approx(2 / 6)
    assert m["clip_frac_low"] == 0.0 and m["is_ratio_max"] == pytest.approx(8.0)


def _tiny_policy(n=6, t_len=4, vocab=5, dim=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(n, t_len, dim, generator=g, dtype=F64)
    tokens = torch.randint(vocab, (n, t_len), generator=g)
    weight = torch.randn(dim, vocab, generator=g, dtype=F64, requires_grad=True)

    def logp(rows=slice(None)):
        lp = torch.log_softmax(feats[rows] @ weight, dim=-1)
        return lp.gather(-1, tokens[rows].unsqueeze(-1)).squeeze(-1)

    return weight, logp, g


def test_cispo_gradient_is_capped_weight_times_reinforce_gradient():
    weight, logp_fn, _ = _tiny_policy(n=2, t_len=3)
    lp = logp_fn()
    log_rho = t([[0.0, 2.5, -0.3], [1.0, 3.0, 0.2]])  # rho = 1, 12.2, .74 / 2.7, 20.1, 1.22
    old = lp.detach() - log_rho
    adv = t([0.7, -1.3])
    mask = torch.ones(2, 3)
    loss, _ = losses.get("cispo")(lp, old, adv, mask, eps_max=2.0)
    (g_cispo,) = torch.autograd.grad(loss.sum(), weight)
    # expected: -sum_t sg(min(rho, 2)) * A * grad log pi, built from constants computed here
    coef = torch.exp(log_rho).clamp(max=2.0) * adv[:, None]
    (g_hand,) = torch.autograd.grad(-(coef * logp_fn()).sum(), weight)
    assert torch.allclose(g_cispo, g_hand)
    # one capped token alone: the cap rescales its gradient by 2/rho, the direction is unchanged
    one = torch.zeros(2, 3)
    one[0, 1] = 1
    (g_cap,) = torch.autograd.grad(losses.get("cispo")(logp_fn(), old, adv, one, eps_max=2.0)[0].sum(), weight)
    (g_raw,) = torch.autograd.grad(losses.get("cispo")(logp_fn(), old, adv, one, eps_max=1e9)[0].sum(), weight)
    assert torch.allclose(g_cap, g_raw * (2.0 / math.exp(2.5)))
    assert torch.nn.functional.cosine_similarity(g_cap.flatten(), g_raw.flatten(), dim=0) == pytest.approx(1.0)
    # whereas PPO clipping zeroes that token's gradient (rho 12 > 1.2 with A > 0)
    (g_grpo,) = torch.autograd.grad(losses.get("grpo")(logp_fn(), old, adv, one)[0].sum(), weight)
    assert torch.count_nonzero(g_grpo) == 0


def test_empty_mask_gives_zero_loss_and_neutral_metrics():
    lp = leaf([[0.0, 0.0]])
    for name in LOSS_NAMES:
        loss, m = losses.get(name)(lp, lp.detach() - 0.3, t([1.0]), torch.zeros(1, 2))
        assert torch.count_nonzero(loss) == 0
        assert m["is_ratio_mean"] == 1.0 and m["is_clip_frac"] == 0.0


# ------------------------------------------------------------------------------------------ aggregation


def _ragged_mask():
    # rows: g0 len 2, g0 len 4, g1 len 1, g1 dropped, g2 dropped, g2 dropped
    lens = [2, 4, 1, 0, 0, 0]
    return torch.tensor([[1.0] * n + [0.0] * (4 - n) for n in lens], dtype=F64)


def test_sample_weights_each_completion_equal():
    w = losses.token_weights(_ragged_mask(), [0, 0, 1, 1, 2, 2], "sample")
    # 3 completions with tokens: each gets 1/3, spread over its tokens
    exp = t([[1 / 6] * 2 + [0] * 2, [1 / 12] * 4, [1 / 3] + [0] * 3, [0] * 4, [0] * 4, [0] * 4])
    assert w.dtype == F64 and torch.allclose(w, exp) and w.sum().item() == pytest.approx(1.0)


def test_prompt_weights_each_group_equal():
    w = losses.token_weights(_ragged_mask(), [7, 7, 3, 3, 9, 9], "prompt")
    # groups 7 and 3 have tokens (group 9 was dropped entirely): 1/2 each, token-mean inside a group
    exp = t([[1 / 12] * 2 + [0] * 2, [1 / 12] * 4, [1 / 2] + [0] * 3, [0] * 4, [0] * 4, [0] * 4])
    assert torch.allclose(w, exp) and w.sum().item() == pytest.approx(1.0)


def test_token_weights_each_token_equal():
    w = losses.token_weights(_ragged_mask(), [0, 0, 1, 1, 2, 2], "token")
    exp = _ragged_mask() / 7
    assert torch.allclose(w, exp)


def test_weights_of_an_all_zero_mask_are_zero():
    for mode in MODES:
        w = losses.token_weights(torch.zeros(3, 2, dtype=F64), [0, 0, 1], mode)
        assert torch.count_nonzero(w) == 0 and not torch.isnan(w).any()


def _batch(seed=1, n=12, t_len=5):
    weight, logp_fn, g = _tiny_policy(n=n, t_len=t_len, seed=seed)
    lens = torch.randint(1, t_len + 1, (n,), generator=g)
    lens[4] = 0  # a completion dropped by a filter
    mask = (torch.arange(t_len)[None, :] < lens[:, None]).to(F64)
    old = logp_fn().detach() + 0.3 * torch.randn(n, t_len, generator=g, dtype=F64)
    adv = torch.randn(n, generator=g, dtype=F64)
    group_ids = torch.arange(n) // 4  # 3 prompt groups of 4
    return weight, logp_fn, old, adv, mask, group_ids


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("mode", MODES)
def test_micro_batching_and_accumulation_give_the_full_batch_gradient(name, mode):
    weight, logp_fn, old, adv, mask, gids = _batch()
    fn = losses.get(name)
    w = losses.token_weights(mask, gids, mode)  # once, for the whole optimizer step
    loss, _ = fn(logp_fn(), old, adv, mask)
    (g_full,) = torch.autograd.grad((loss * w).sum(), weight)
    assert g_full.abs().sum() > 0
    # uneven micro-batches that cut prompt groups apart; backward per micro-batch accumulates .grad
    for lo, hi in [(0, 5), (5, 7), (7, 12)]:
        rows = slice(lo, hi)
        mb_loss, _ = fn(logp_fn(rows), old[rows], adv[rows], mask[rows])
        (mb_loss * w[rows]).sum().backward()
    assert torch.allclose(weight.grad, g_full, rtol=1e-10, atol=1e-12)
    # control: the naive per-micro-batch normalisation (weights recomputed per micro-batch, then averaged)
    weight.grad = None
    for lo, hi in [(0, 5), (5, 7), (7, 12)]:
        rows = slice(lo, hi)
        mb_loss, _ = fn(logp_fn(rows), old[rows], adv[rows], mask[rows])
        (mb_loss * losses.token_weights(mask[rows], gids[rows], mode)).sum().div(3).backward()
    assert not torch.allclose(weight.grad, g_full, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_on_policy_grpo_dapo_gspo_cispo_share_one_gradient(mode):
    weight, logp_fn, _, adv, mask, gids = _batch(seed=3)
    w = losses.token_weights(mask, gids, mode)
    grads = {}
    for name in LOSS_NAMES:
        lp = logp_fn()
        loss, m = losses.get(name)(lp, lp.detach(), adv, mask)  # rho == 1 everywhere
        assert m["is_ratio_max"] == pytest.approx(1.0) and m["is_clip_frac"] == 0.0
        (grads[name],) = torch.autograd.grad((loss * w).sum(), weight)
    # the policy gradient by hand: -sum_{i,t} w_it * A_i * grad log pi_it
    (g_pg,) = torch.autograd.grad(-(w * adv[:, None] * logp_fn()).sum(), weight)
    for name, g in grads.items():
        cos = torch.nn.functional.cosine_similarity(g.flatten(), g_pg.flatten(), dim=0)
        assert cos.item() == pytest.approx(1.0, abs=1e-12), name
        assert torch.allclose(g, g_pg), name


@pytest.mark.parametrize("name", losses.names())
def test_a_zero_advantage_row_gives_zero_gradient_for_every_registered_loss(name):
    """The rule the built-in trainer's shortcut rests on (it runs no backward for such rows): checked for every loss
    the registry holds, at ratios inside and far outside the clip ranges."""
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 6, generator=g, dtype=F64) * 3).requires_grad_()
    old = logp.detach() + torch.randn(4, 6, generator=g, dtype=F64) * 2  # ratios from ~0.01 to ~100
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1, 4:] = False
    adv = t([0.0, 0.0, 1.3, -0.7])
    per_token, _ = losses.get(name)(logp, old, adv, mask, **losses.loss_params(name))
    (grad,) = torch.autograd.grad(per_token.sum(), logp)
    assert not bool(grad[:2].any()), grad[:2]  # exactly zero, not small
    assert bool(grad[2:].any())  # (and the rows with an advantage do get one)
