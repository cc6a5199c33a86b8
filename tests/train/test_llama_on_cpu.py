"""The tiny model read back without transformers (ablate.train.llama): the same names, weights, RoPE, logits,
tokenizer and training steps as transformers' own objects, refused where it would compute anything else, and a
built-in-trainer run that never imports transformers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.config.sections import ModelConfig
from ablate.train import llama
from ablate.train.policy import Policy, build_char_tokenizer, build_tiny_model, char_vocab, load_hf
from jobs import small_config

torch.set_num_threads(1)
SMALL = ModelConfig(name="tiny", n_layers=2, hidden=32, n_heads=2, mlp=64)
ALPHABET = "0123456789+-=> "


@pytest.fixture
def folder(tmp_path):
    """A tiny model folder as the warm-up saves it (transformers' save_pretrained)."""
    tok = build_char_tokenizer(ALPHABET)
    model = build_tiny_model(SMALL, len(tok), seed=3)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    return tmp_path


def test_the_plain_module_has_transformers_names_shapes_and_tied_head(folder):
    hf, _ = load_hf(folder)
    shape = llama.shape_of(json.loads((folder / "config.json").read_text()))
    assert shape is not None and shape.pad_token_id == 0
    plain = llama.skeleton(shape)
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in hf.state_dict().items()}
    assert [k for k, _ in plain.named_parameters()] == [k for k, _ in hf.named_parameters()]  # the optimizer's order
    model, _ = llama.load_tiny(folder)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.model.embed_tokens.padding_idx == hf.model.embed_tokens.padding_idx == 0


def test_weights_rope_and_logits_are_transformers_to_the_bit(folder):
    hf, _ = load_hf(folder)
    model, tok = llama.load_tiny(folder)
    for k, v in hf.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    pos = torch.randint(0, 200, (3, 11), generator=torch.Generator().manual_seed(0))
    x = torch.zeros(3, 11, SMALL.hidden)
    for got, want in zip(model.model.rotary_emb(x, pos), hf.model.rotary_emb(x, pos)):
        assert torch.equal(got, want)
    a, b = Policy(model, tok, torch.float32), Policy(hf, tok, torch.float32)
    assert a.fast and b.fast
    pids, pmask = a.encode_prompts(["12+3=", "7-45="])
    group = torch.tensor([0, 0, 1, 1])
    tokens = torch.randint(3, len(tok), (4, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(
            a.completion_logits(pids, pmask, group, tokens), b.completion_logits(pids, pmask, group, tokens)
        )


def test_the_char_tokenizer_reads_back_as_transformers_does(folder):
    _, hf_tok = load_hf(folder)
    tok = llama.load_char_tokenizer(folder)
    assert tok.get_vocab() == hf_tok.get_vocab() == char_vocab(ALPHABET)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (
        hf_tok.pad_token_id,
        hf_tok.bos_token_id,
        hf_tok.eos_token_id,
    )
    g = torch.Generator().manual_seed(2)
    texts = ["".join(ALPHABET[i] for i in torch.randint(len(ALPHABET), (12,), generator=g)) for _ in range(20)]
    for t in texts:
        assert tok.encode(t) == hf_tok.encode(t, add_special_tokens=False)
    rows = torch.randint(0, len(tok), (20, 9), generator=g).tolist()  # specials anywhere, pads included
    assert tok.batch_decode(rows) == hf_tok.batch_decode(rows, skip_special_tokens=True)


@pytest.mark.parametrize(
    "change",
    [
        {"model_type": "qwen2"},
        {"hidden_act": "gelu"},
        {"attention_bias": True},
        {"mlp_bias": True},
        {"tie_word_embeddings": False},
        {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
        {"pretraining_tp": 2},
        {"rope_scaling": {"type": "linear", "factor": 2.0}},  # the older config format
        {"partial_rotary_factor": 0.5},
    ],
)
def test_a_config_it_would_compute_differently_is_left_to_transformers(folder, change):
    cfg = json.loads((folder / "config.json").read_text())
    assert llama.shape_of(cfg) is not None
    (folder / "config.json").write_text(json.dumps({**cfg, **change}))
    assert llama.shape_of({**cfg, **change}) is None
    assert llama.load_tiny(folder) is None


def test_the_builtin_trainer_trains_the_same_steps_as_with_transformers(monkeypatch):
    """Two learners of one seed, one on transformers' model, one on the plain module: the same parameters, to the
    bit, after every step (batches, log-probs and optimizer state included)."""
    from ablate.train import step as step_module
    from ablate.train.feeders import make_feeder

    cfg = small_config()
    build = step_module.build_policy
    learners = []
    for via_transformers in (True, False):
        monkeypatch.setattr(
            step_module, "build_policy", lambda c, t, transformers, v=via_transformers: build(c, t, transformers=v)
        )
        learners.append(step_module.Learner(cfg))
    assert [type(L.policy.model).__name__ for L in learners] == ["LlamaForCausalLM", "TinyLlama"]
    feeders = [make_feeder(L, 0) for L in learners]
    for s in range(6):
        batches = [f.next(s) for f in feeders]
        assert torch.equal(batches[0].ro.tokens, batches[1].ro.tokens)
        for L, b in zip(learners, batches):
            L.step(b, s)
        for f in feeders:
            f.after_step(s + 1)
        for (k, p), (_, q) in zip(*(L.policy.model.named_parameters() for L in learners)):
            assert torch.equal(p, q), (s, k)


def test_a_builtin_trainer_run_never_imports_transformers(tmp_path):
    """A run of the built-in trainer with the torch sampler starts without transformers (its import is most of a
    short run's start); the cache is warmed first, in this process, where transformers builds it."""
    from ablate.train.tasks import build_task
    from ablate.train.warmup import warmed_up_folder

    cfg = small_config()
    warmed_up_folder(cfg, build_task(cfg.task, cfg.train.val_size, ">"))
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from jobs import small_config\n"
        "from ablate.train.loop import run\n"
        f"run(small_config('train.max_steps=2', 'train.eval_every=2'), {str(tmp_path / 'run')!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") >= 2


def test_a_tokenizer_that_cleans_up_decoded_text_is_left_to_transformers(folder):
    names = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**names, "clean_up_tokenization_spaces": True}))
    assert llama.load_tiny(folder) is None


@pytest.mark.parametrize("saved_as", ["lm_head.weight", "model.embed_tokens.weight"])
def test_the_tied_head_loads_from_either_name_and_any_float_file_as_float32(folder, saved_as):
    from safetensors.torch import load_file, save_file

    hf, _ = load_hf(folder)
    w = {k: v.to(torch.bfloat16) for k, v in load_file(folder / "model.safetensors").items()}
    w[saved_as] = hf.state_dict()["model.embed_tokens.weight"].to(torch.bfloat16)
    w.pop(({"lm_head.weight", "model.embed_tokens.weight"} - {saved_as}).pop(), None)
    save_file(w, folder / "model.safetensors", metadata={"format": "pt"})
    model, _ = llama.load_tiny(folder)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert torch.equal(model.lm_head.weight, w[saved_as].float())
