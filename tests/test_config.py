"""The recipe tree and the schema: every option composes and validates; every class of bad config is caught.

Composition goes through Hydra's compose API on the packaged recipes/ folder (compose.compose_run).
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
from omegaconf import OmegaConf

from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.config import schema
from ablate.config.combinations import OPTION_PARAMS
from ablate.config.schema import ConfigErrors, validate
from ablate.config.sections import WarmupConfig
from ablate.errors import ErrorKind
from jobs import one_error, refused

BASE = RECIPES_DIR / "base.yaml"
GROUPS = [
    "loss",
    "aggregation",
    "normalization",
    "precision",
    "length",
    "offpolicy",
    "model",
    "task",
    "rollout",
    "launcher",
]
# options that need a path to be valid (config.validate says so when it is missing)
NEEDS = {("model", "hf"): ["model.path=/models/m"], ("task", "jsonl"): ["task.path=/data/p.jsonl"]}


@pytest.fixture(scope="module")
def base() -> dict:
    return compose_run(BASE).to_dict()


def test_group_folders_are_the_schema_choices():
    # option file name = schema value = registry key: the folder lists exactly the schema's choices
    for group in GROUPS:
        files = sorted(p.stem for p in (RECIPES_DIR / group).glob("*.yaml"))
        assert files == sorted(schema.choices(group)), group


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in schema.choices(g)])
def test_every_option_composes_and_validates(group, option):
    extra = NEEDS.get((group, option), [])
    cfg = compose_run(BASE, [f"{group}={option}"] + extra).to_dict()
    assert cfg[group]["name"] == option
    # the option file's own keys arrive as written (YAML -> schema types), except those the test set
    raw = OmegaConf.to_container(OmegaConf.load(RECIPES_DIR / group / f"{option}.yaml"))
    for key, written in raw.items():
        value = written
        if isinstance(written, str) and written.startswith("${setup."):  # the scale the recipe runs at
            value = cfg["setup"][written[len("${setup.") : -1]]
        if not any(o.startswith(f"{group}.{key}=") for o in extra):
            assert cfg[group][key] == value, (group, option, key)


def test_base_is_the_scalerl_recipe(base):
    # ScaleRL (arXiv 2510.13786 §4): CISPO cap 5, prompt averaging, batch normalisation, FP32 head,
    # zero-variance filtering, no-positive-resampling at 0.9, forced interruption, PipelineRL-8
    assert base["loss"] == {"name": "cispo", "eps": None, "eps_low": None, "eps_high": None, "eps_max": 5.0}
    assert base["aggregation"]["name"] == "prompt"
    assert base["normalization"]["name"] == "batch"
    assert base["precision"]["name"] == "fp32_head"
    assert base["filtering"]["zero_variance"] and base["filtering"]["no_positive_resampling"]
    assert base["filtering"]["pass_threshold"] == 0.9
    assert base["length"]["name"] == "interrupt"
    assert base["offpolicy"] == {"name": "pipeline", "k": 8, "generator": "auto"}
    assert base["model"]["name"] == "tiny" and base["task"]["name"] == "synthetic_math"
    assert base["launcher"]["name"] == "local"


def test_loss_clip_parameters_match_the_issue():
    assert compose_run(BASE, ["loss=grpo"]).loss.eps == 0.2
    dapo = compose_run(BASE, ["loss=dapo"]).loss
    assert (dapo.eps_low, dapo.eps_high) == (0.2, 0.28)
    gspo = compose_run(BASE, ["loss=gspo"]).loss
    assert (gspo.eps_low, gspo.eps_high) == (3e-3, 4e-3)


def test_every_design_choice_in_base_is_commented():
    # each design choice in base.yaml says what it is / where it comes from, on its own line
    # (the optim/train sections below belong to the training owner and are not checked here)
    text = BASE.read_text().split("\noptim:")[0]
    for line in text.splitlines():
        body = line.split("#")[0].strip()
        if body and not body.endswith(":") and body != "defaults:":
            assert "#" in line, f"uncommented: {line!r}"


def test_validate_fills_defaults_and_widens_ints(base):
    d = copy.deepcopy(base)
    del d["train"]["warmup"]
    d["loss"]["eps_max"] = 5  # an int where a float belongs
    out = validate(d)
    assert out.loss.eps_max == 5.0 and isinstance(out.loss.eps_max, float)
    assert out.train.warmup == WarmupConfig()
    assert isinstance(out, schema.RunConfig) and out.to_dict()["optim"]["betas"] == [0.9, 0.99]
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.seed = 3  # a validated run is frozen: nothing downstream can change what was validated


def _errors(cfg: dict) -> list[str]:
    with pytest.raises(ConfigErrors) as e:
        validate(cfg)
    return e.value.errors


def test_unknown_key_names_the_closest(base):
    d = copy.deepcopy(base)
    d["loss"]["eps_mx"] = 4.0
    d["batchh"] = {}
    errs = _errors(d)
    assert any(e.startswith("loss.eps_mx:") and "'eps_max'" in e for e in errs)
    assert any(e.startswith("batchh:") and "'batch'" in e for e in errs)


def test_wrong_type_and_out_of_range_are_all_reported(base):
    d = copy.deepcopy(base)
    d["batch"]["prompts"] = "many"
    d["offpolicy"]["k"] = 0
    d["batch"]["generations"] = 1
    d["filtering"]["pass_threshold"] = 1.5
    d["filtering"]["zero_variance"] = "yes"
    d["task"]["digits"] = 1_000_000  # would build an enormous task: refused before anything is generated
    errs = _errors(d)
    by_key = {e.partition(":")[0]: e for e in errs}  # one line a key: the key, then what is wrong with it
    culprits = {
        "batch.prompts": ("int", "'many'"),
        "offpolicy.k": (">= 1",),
        "batch.generations": (">= 2",),
        "filtering.pass_threshold": ("<= 1.0", "1.5"),
        "filtering.zero_variance": ("bool", "'yes'"),
        "task.digits": ("<= 30", "1000000"),
    }
    assert by_key.keys() == culprits.keys(), errs
    for key, parts in culprits.items():
        for p in parts:
            assert p in by_key[key], (p, by_key[key])
    assert all("\n" not in e for e in errs)


def test_unknown_option_value(base):
    d = copy.deepcopy(base)
    d["aggregation"]["name"] = "tokn"
    (err,) = _errors(d)
    assert err.startswith("aggregation.name:") and "'tokn'" in err and "'token'" in err


@pytest.mark.parametrize(
    "overrides,keys",
    [
        (["loss=gspo", "aggregation=token"], ["loss=gspo", "aggregation=token", "aggregation=sample"]),
        (["length=penalty", "length.l_cache=9"], ["length.l_cache", "length.l_max"]),
        (["length=penalty", "length.l_max=20"], ["length.l_max", "length.max_new_tokens"]),
        (["length.think_budget_min=7", "length.think_budget_max=6"], ["think_budget_min", "think_budget_max"]),
        (["length.think_budget_max=8"], ["length.think_budget_max", "length.max_new_tokens"]),
        (["model=hf"], ["model=hf", "model.path"]),
        (["task=jsonl"], ["task=jsonl", "task.path"]),
        (["model.hidden=130"], ["model.hidden", "model.n_heads"]),
        (["task.digits=2"], ["task.train_size (20000)", "train.val_size (200)", "task.train_size=9800"]),
        (["task.digits=1"], ["task.train_size", "100 distinct", "train.val_size=10 task.train_size=90"]),
    ],
)
def test_impossible_combinations_name_both_keys(overrides, keys):
    with pytest.raises(ConfigErrors) as e:
        compose_run(BASE, overrides)
    (err,) = e.value.errors
    for k in keys:
        assert k in err, (k, err)


def test_parameter_of_another_option_is_an_error(base):
    d = copy.deepcopy(base)
    d["loss"]["name"] = "dapo"
    d["loss"]["eps_low"], d["loss"]["eps_high"] = 0.2, 0.28  # eps_max (cispo's) stays set
    (err,) = _errors(d)
    assert err.startswith("loss.eps_max:") and "loss=dapo" in err and "loss=cispo" in err
    d["loss"]["eps_max"] = None
    d["loss"]["eps_high"] = None
    (err,) = _errors(d)
    assert err.startswith("loss.eps_high:") and "loss=dapo" in err


def test_compose_errors_are_one_line_user_errors():
    cases = {
        ("loss=cispoo",): ["loss=cispoo", "'cispo'", "cispo, dapo, grpo, gspo"],
        ("los=dapo",): ["los:", "'loss'"],
        ("loss.eps_mx=4",): ["loss.eps_mx", "'loss.eps_max'"],
        ("loss=dapo", "loss.eps_max=4"): ["loss.eps_max", "loss=dapo", "eps_low, eps_high", "loss=cispo"],
        ("batch.prompts=abc",): ["batch.prompts", "int", "'abc'"],
        ("seed=0,1",): ["seed=0,1", "ablate sweep"],
        ("a==",): [str(BASE), "'a=='"],
    }
    for overrides, parts in cases.items():
        with refused(ErrorKind.RECIPE, *parts) as e:
            compose_run(BASE, list(overrides))
        assert "\n" not in str(e.value), str(e.value)


def test_schema_choices_are_the_trainer_registry_keys():
    # recipe option = schema value = registry key, checked against the trainer's registries
    from ablate.train import advantages, losses

    assert losses.LOSSES.names() == sorted(schema.choices("loss"))
    assert losses.AGGREGATIONS.names() == sorted(schema.choices("aggregation"))
    assert advantages.NORMALIZATIONS.names() == sorted(schema.choices("normalization"))
    for name in schema.choices("loss"):
        # each loss option file sets exactly the parameters its function takes, with its defaults
        assert set(losses.loss_params(name)) == set(OPTION_PARAMS["loss"][name]), name
        cfg = compose_run(BASE, [f"loss={name}"]).to_dict()["loss"]
        assert {k: cfg[k] for k in losses.loss_params(name)} == losses.loss_params(name), name


# ---- the paper's setup as a preset ----

PATHS = ["model.path=/models/my-8b", "task.path=/data/math.jsonl"]


def test_the_paper_preset_sets_what_its_appendix_states(base):
    """preset=scalerl_8b: the setup of the paper's App. A.3 (not the algorithm: that stays the recipe's)."""
    cfg = compose_run(BASE, ["preset=scalerl_8b", *PATHS]).to_dict()
    assert (cfg["batch"]["prompts"], cfg["batch"]["generations"]) == (48, 16)  # 768 completions per step
    assert cfg["length"]["name"] == "interrupt" and cfg["length"]["max_new_tokens"] == 14336
    assert (cfg["length"]["think_budget_min"], cfg["length"]["think_budget_max"]) == (10240, 12288)
    assert cfg["rollout"]["name"] == "vllm" and cfg["rollout"]["max_model_len"] == 16384
    assert (cfg["optim"]["lr"], cfg["optim"]["lr_warmup_steps"], cfg["optim"]["eps"], cfg["optim"]["weight_decay"]) == (
        5e-7,
        100,
        1e-15,
        0.01,
    )
    assert (cfg["train"]["eval_every"], cfg["train"]["eval_k"], cfg["train"]["val_size"]) == (100, 16, 1000)
    assert cfg["train"]["device"] == "cuda" and cfg["task"]["reward"] == "signed"
    assert (cfg["model"]["name"], cfg["model"]["path"], cfg["task"]["name"]) == ("hf", "/models/my-8b", "jsonl")
    for group in ("loss", "aggregation", "normalization", "precision", "offpolicy", "filtering"):
        assert cfg[group] == base[group], group  # ScaleRL's algorithm, untouched
    # a sweep arm still changes its one choice on top of the preset, and keeps the paper's scale when it does
    assert compose_run(BASE, ["preset=scalerl_8b", "loss=dapo", *PATHS]).loss.name == "dapo"
    lp = compose_run(BASE, ["preset=scalerl_8b", "length=penalty", *PATHS]).length
    assert (lp.name, lp.l_max, lp.l_cache, lp.max_new_tokens) == ("penalty", 14336, 2048, 14336)
    cpu = compose_run(BASE, ["length=penalty"]).length
    assert (cpu.l_max, cpu.l_cache) == (8, 3)


@pytest.mark.parametrize("sweep", sorted(p.stem for p in RECIPES_DIR.glob("*.yaml") if p.stem not in ("base", "demo")))
def test_every_sweep_file_runs_under_the_preset(sweep):
    """The README's use: any sweep file at the paper's scale. Every arm composes, validates and runs at 768 (or, for
    Qwen2.5 and MiniMax-M1, 1,280) completions with the paper's length budgets, whatever length option it picks."""
    from ablate.compose.sweep import load_sweep

    sw = load_sweep(RECIPES_DIR / f"{sweep}.yaml", ["preset=scalerl_8b", *PATHS])
    for r in sw.runs:
        c = r.config
        assert c.length.max_new_tokens == 14336 and c.train.device == "cuda", r.label
        if c.length.name == "interrupt":
            assert (c.length.think_budget_min, c.length.think_budget_max) == (10240, 12288), r.label
        if c.length.name == "penalty":
            assert (c.length.l_max, c.length.l_cache) == (14336, 2048), r.label
        big = sweep == "prevalent" and r.arm_label in ("qwen25_dapo", "minimax_m1")
        if sweep != "batch":
            assert c.batch.prompts * c.batch.generations == (1280 if big else 768), r.label


def test_the_preset_needs_its_model_and_data_and_a_gpu(tmp_path, monkeypatch):
    import torch
    from typer.testing import CliRunner

    from ablate.cli import app

    with refused(ErrorKind.RECIPE, "model=hf", "model.path") as e:
        compose_run(BASE, ["preset=scalerl_8b", "task.path=/data/math.jsonl"])
    assert isinstance(e.value, ConfigErrors)
    res = CliRunner().invoke(app, ["show", str(BASE), "preset=scalerl_8b", *PATHS])
    assert res.exit_code == 0 and "eps: 1.0e-15" in res.output and "device: cuda" in res.output
    # a machine with no CUDA device (as CI's): the local executor would run it here, so it is refused up front
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = CliRunner().invoke(
        app, ["sweep", str(RECIPES_DIR / "loss.yaml"), "preset=scalerl_8b", *PATHS, "--root", str(tmp_path / "sweeps")]
    )
    one_error(res, ErrorKind.ENVIRONMENT, "loss=grpo,seed=0", "train.device=cuda", "-e slurm")
    assert not (tmp_path / "sweeps").exists()


def test_adamw_epsilon_is_optional_and_keeps_old_run_ids(base):
    from ablate.config.identity import run_id

    assert base["optim"]["eps"] is None  # PyTorch's default, and the ids of runs made before the field existed
    assert run_id(compose_run(BASE, ["optim.eps=1e-15"])) != run_id(base)
    # an optional value outside the config groups can be set from the command line (was "unknown key")
    assert compose_run(BASE, ["optim.micro_batch=4"]).optim.micro_batch == 4


@dataclasses.dataclass(frozen=True)
class _Limits:
    """A schema section written with PEP 604 optionals, as config.py may be."""

    count: int | None = dataclasses.field(default=None, metadata={"ge": 1})
    ratio: float | None = None


def test_a_field_written_x_or_none_validates_its_values():
    from ablate.config.validation import check_config

    def no_rules(cfg: dict) -> list[str]:
        return []

    for given, want in (({"count": 3, "ratio": 1}, (3, 1.0)), ({"count": None}, (None, None)), ({}, (None, None))):
        section, errors = check_config(_Limits, given, no_rules)
        assert errors == [] and (section.count, section.ratio) == want, given
    assert check_config(_Limits, {"count": "3"}, no_rules)[1] == ["count: expected int or null, got '3'"]
    assert check_config(_Limits, {"count": 0}, no_rules)[1] == ["count: must be >= 1, got 0"]


def test_show_keys_prints_every_key_a_recipe_can_set_with_its_meaning():
    """`ablate show --keys [SECTION]`: each key of the schema, as an override names it, with its type, default,
    choices or bounds and its doc line; the keys are exactly the leaves of a resolved config."""
    import yaml
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.config.keys import keys

    runner = CliRunner()
    got = runner.invoke(app, ["show", "--keys", "loss"])
    assert got.exit_code == 0, got.output
    assert "loss.name: str = 'cispo'  one of: grpo, dapo, gspo, cispo" in got.output
    assert "loss.eps_max: float | None = null  (> 0)" in got.output and "ScaleRL uses 5" in got.output
    assert "train.max_steps" not in got.output
    shown = runner.invoke(app, ["show", "recipes/base.yaml"]).output
    config = yaml.safe_load(shown.split("\n", 1)[1])

    def leaves(node, prefix=""):
        for k, v in node.items():
            yield from leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]

    assert {k.name for k in keys()} == set(leaves(config))
    assert all(k.doc for k in keys()), [k.name for k in keys() if not k.doc]
    assert not next(k for k in keys() if k.name == "track.to").in_id
    bad = runner.invoke(app, ["show", "--keys", "los"])
    one_error(bad, ErrorKind.SETTING, "--keys 'los'", "'loss'")
