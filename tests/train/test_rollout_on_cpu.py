"""The torch KV-cache sampler: log-probs of the generating policy, EOS stop, max length, forced interruption,
FP32 head."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ablate.config.sections import ModelConfig
from ablate.train.policy import Policy, build_char_tokenizer, build_tiny_model
from ablate.train.rollout import SampleSpec, TorchSampler
from ablate.train.samplers import BACKENDS

torch.set_num_threads(1)
SMALL = ModelConfig(n_layers=2, hidden=32, n_heads=2, mlp=64)
PROMPTS = ["123+456=", "999+001=", "500+500="]


def _policy(head=torch.float32, seed=0) -> Policy:
    tok = build_char_tokenizer("0123456789+=>")
    return Policy(build_tiny_model(SMALL, len(tok), seed), tok, head)


def _recompute_logp(pol: Policy, ro) -> torch.Tensor:
    """Log-probs of the sampled tokens under an fp32 HF forward of the full sequences [N, T]."""
    ids = torch.cat([ro.prompt_ids[ro.group], ro.tokens], 1)
    am = torch.cat([ro.prompt_mask[ro.group], torch.ones_like(ro.tokens)], 1)
    with torch.no_grad():
        lg = pol.model(input_ids=ids, attention_mask=am, position_ids=(am.cumsum(1) - 1).clamp(min=0)).logits
    lg = lg[:, ro.prompt_ids.shape[1] - 1 : -1].float()
    return torch.log_softmax(lg, -1).gather(2, ro.tokens[..., None]).squeeze(2)


@pytest.mark.parametrize("prompts", [PROMPTS, ["1+2=", "345+67=", "8="]], ids=["same-length", "left-padded"])
def test_sampler_logp_are_the_generating_policys(prompts):
    pol = _policy()
    ro = TorchSampler(pol).generate(prompts, 4, SampleSpec(max_new_tokens=7), torch.Generator().manual_seed(0))
    assert ro.tokens.shape[0] == 12 and ro.group.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    ref = _recompute_logp(pol, ro)
    assert torch.allclose(ref * ro.mask, ro.logp, atol=1e-5)
    assert ro.logp.dtype == torch.float32 and bool((ro.logp[ro.mask] < 0).all())


def test_fast_path_and_hf_path_sample_the_same_tokens():
    pol = _policy()
    spec = SampleSpec(max_new_tokens=6)
    a = TorchSampler(pol).generate(PROMPTS, 3, spec, torch.Generator().manual_seed(1))
    pol._fast = False
    b = TorchSampler(pol).generate(PROMPTS, 3, spec, torch.Generator().manual_seed(1))
    assert torch.equal(a.tokens, b.tokens) and torch.allclose(a.logp, b.logp, atol=1e-5)


def test_qwen2_on_the_fast_path_and_on_the_hf_fallback():
    tok = build_char_tokenizer("0123456789+=>")
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    pol = Policy(Qwen2ForCausalLM(cfg), tok, torch.float32)
    assert pol.fast  # qwen2 (biases on q/k/v, grouped K/V heads) runs on the fast path too
    ro = TorchSampler(pol).generate(PROMPTS, 2, SampleSpec(max_new_tokens=5), torch.Generator().manual_seed(0))
    assert torch.allclose(_recompute_logp(pol, ro) * ro.mask, ro.logp, atol=1e-5)
    pol._fast = False
    ro = TorchSampler(pol).generate(PROMPTS, 2, SampleSpec(max_new_tokens=5), torch.Generator().manual_seed(0))
    assert torch.allclose(_recompute_logp(pol, ro) * ro.mask, ro.logp, atol=1e-5)


def test_stop_at_eos_pads_after_and_max_length_truncates():
    pol = _policy(seed=3)
    ro = TorchSampler(pol).generate(PROMPTS * 10, 4, SampleSpec(max_new_tokens=5), torch.Generator().manual_seed(0))
    eos = pol.eos_id
    ended = (ro.tokens == eos) & ro.present
    assert bool(ended.any()) and bool(ro.truncated.any())  # both outcomes occur in 120 samples at random init
    for i in range(ro.tokens.shape[0]):
        n = int(ro.present[i].sum())
        assert bool(ro.present[i, :n].all()) and not bool(ro.present[i, n:].any())
        assert bool((ro.tokens[i, n:] == pol.pad_id).all())
        hit = ended[i].nonzero()
        if ro.truncated[i]:
            assert n == 5 and hit.numel() == 0
        else:
            assert hit.numel() == 1 and int(hit[0]) == n - 1  # EOS is the last token, and it is kept
    assert torch.equal(ro.lengths, ro.present.sum(1))


def test_forced_interruption_appends_the_phrase_at_the_budget_and_masks_it():
    pol = _policy(seed=1)
    phrase = tuple(pol.tokenizer.encode(">", add_special_tokens=False))
    N = 3 * 8
    budget = torch.tensor([1, 2, 3] * 8)
    spec = SampleSpec(max_new_tokens=8, think_budget=budget, phrase_ids=phrase)
    ro = TorchSampler(pol).generate(PROMPTS, 8, spec, torch.Generator().manual_seed(0))
    assert ro.tokens.shape[0] == N
    forced = ro.present & ~ro.mask
    assert bool(ro.interrupted.any())
    for i in range(N):
        toks = ro.tokens[i].tolist()
        b = int(budget[i])
        if ro.interrupted[i]:
            # the model itself wrote no phrase in its first b tokens; token b is the forced phrase; nothing else forced
            assert phrase[0] not in toks[:b] and toks[b] == phrase[0]
            assert forced[i].nonzero().squeeze(1).tolist() == [b]
            assert ro.logp[i, b] == 0
        else:
            assert not bool(forced[i].any())
            assert phrase[0] in toks[: b + 1] or pol.eos_id in toks[: b + 1]  # thinking ended (or EOS) in budget
    ref = _recompute_logp(pol, ro)
    assert torch.allclose(ref * ro.mask, ro.logp, atol=1e-5)  # the answer after the phrase is still the policy's


def test_fp32_head_in_the_sampler_and_bf16_head_differs():
    """Under fp32_head the sampler's log-probs equal an fp32 recompute; a bf16 head visibly does not."""
    pol32, pol16 = _policy(torch.float32), _policy(torch.bfloat16)
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    ro32 = TorchSampler(pol32).generate(PROMPTS, 8, SampleSpec(max_new_tokens=6), g())
    ro16 = TorchSampler(pol16).generate(PROMPTS, 8, SampleSpec(max_new_tokens=6), g())
    err32 = ((_recompute_logp(pol32, ro32) - ro32.logp) * ro32.mask).abs().max()
    err16 = ((_recompute_logp(pol16, ro16) - ro16.logp) * ro16.mask).abs().max()
    assert err32 < 1e-5 < 1e-3 < err16


def test_weight_sync_and_registry():
    assert BACKENDS.get("torch") is TorchSampler
    a, b = _policy(seed=0), _policy(seed=1)
    s = TorchSampler(b)
    s.load_weights(a.model.state_dict(), version=7)
    assert s.version == 7
    ro_a = TorchSampler(a).generate(PROMPTS, 2, SampleSpec(6), torch.Generator().manual_seed(0))
    ro_b = s.generate(PROMPTS, 2, SampleSpec(6), torch.Generator().manual_seed(0))
    assert torch.equal(ro_a.tokens, ro_b.tokens) and ro_b.version == 7
