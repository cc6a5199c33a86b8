"""Sweep expansion and run ids: every shipped sweep expands into valid runs; ids are canonical; bad sweeps fail
whole."""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.compose.sweep import load_sweep
from ablate.config import schema
from ablate.config.identity import arm_id, canonical, run_id
from ablate.config.schema import ConfigErrors, validate
from ablate.errors import ErrorKind
from ablate.render.runs import run_cells
from jobs import refused

SWEEPS = sorted(p for p in RECIPES_DIR.glob("*.yaml") if p.name != "base.yaml")
EXPECTED_SWEEPS = {
    "loss",
    "aggregation",
    "normalization",
    "precision",
    "filtering",
    "length",
    "offpolicy",
    "batch",
    "loo",
    "loo_extra",
    "prevalent",
}


@pytest.fixture(scope="module")
def loaded() -> dict:
    return {p.stem: load_sweep(p) for p in SWEEPS}


@pytest.fixture(scope="module")
def base() -> dict:
    return compose_run(RECIPES_DIR / "base.yaml").to_dict()


def test_all_sweep_files_are_shipped():
    assert {p.stem for p in SWEEPS} >= EXPECTED_SWEEPS


def test_every_run_of_every_sweep_validates(loaded):
    for name, sw in loaded.items():
        assert sw.runs, name
        assert sw.baseline is not None and sw.baseline in sw.arms, name  # each names its baseline arm
        assert sw.seeds, name
        assert len(sw.runs) == len(sw.arms) * len(sw.seeds), name
        for r in sw.runs:
            assert validate(r.config) == r.config, (name, r.label)
            assert r.run_id == run_id(r.config) and r.arm_id == arm_id(r.config)
            assert r.sweep == name and r.label.endswith(f",seed={r.config.seed}")
            assert r.baseline == (r.arm_label == sw.baseline)
            # the overrides reproduce the config (what `ablate show`/`train` will recompose)
        assert len({r.run_id for r in sw.runs}) == len(sw.runs), name
        assert len({r.arm_id for r in sw.runs}) == len(sw.arms), name


def test_overrides_reproduce_the_config(loaded):
    # what `ablate show` / `ablate train` recompose from a RunSpec; prevalent has the longest override lists
    for r in loaded["prevalent"].runs:
        assert compose_run(RECIPES_DIR / "base.yaml", list(r.overrides)) == r.config, r.label


def test_loss_sweep_is_four_losses_with_cispo_as_baseline(loaded):
    sw = loaded["loss"]
    assert sw.arms == ["loss=grpo", "loss=dapo", "loss=gspo", "loss=cispo"]
    assert sw.baseline == "loss=cispo"
    assert [r.config.loss.name for r in sw.runs[:: len(sw.seeds)]] == ["grpo", "dapo", "gspo", "cispo"]


# The paper's leave-one-out arms (§4, Fig. 7; names from Fig. 15): each reverts one ScaleRL choice. Pinned here so
# that an edit of recipes/loo.yaml cannot drift from the paper silently.
PAPER_LOO = {
    "loo-plan": {"normalization": {"name": "prompt"}},
    "loo-lp": {"length": {"name": "penalty"}},
    "loo-batch": {"filtering": {"zero_variance": False}},
    "loo-8op": {"offpolicy": {"name": "ppo", "k": 8}},
    "loo-fp32": {"precision": {"name": "bf16"}},
    "loo-savg": {"aggregation": {"name": "sample"}},
    "loo-dapo": {"loss": {"name": "dapo"}},
}


def test_loo_is_exactly_the_papers_seven_arms(loaded, base):
    sw = loaded["loo"]
    assert sw.baseline == "scalerl" and sw.arms == ["scalerl", *PAPER_LOO]
    by_arm = {r.arm_label: r.config.to_dict() for r in sw.runs if r.config.seed == sw.seeds[0]}
    assert arm_id(by_arm["scalerl"]) == arm_id(base)
    for arm, changes in PAPER_LOO.items():
        cfg = by_arm[arm]
        for section, values in changes.items():
            for key, value in values.items():
                assert cfg[section][key] == value, (arm, section, key)
        changed = {s for s in cfg if s != "seed" and cfg[s] != base[s]}
        assert changed == set(changes), (arm, changed)  # exactly one component left ScaleRL


def test_the_extra_loo_arm_is_apart_and_says_it_is_not_the_papers(loaded, base):
    sw = loaded["loo_extra"]
    assert sw.arms == ["scalerl", "loo-npr"]
    cfg = next(r.config.to_dict() for r in sw.runs if r.arm_label == "loo-npr")
    assert cfg["filtering"]["no_positive_resampling"] is False
    assert "NOT one of the paper's sweeps" in (RECIPES_DIR / "loo_extra.yaml").read_text()


# The prevalent recipes as the paper defines them (App. A.16), every choice named; batch 1,280 vs 768 -> 5/3 of
# the base's 32 prompts. The choices A.16 leaves open come from each recipe's own paper (see the sweep file).
PAPER_PREVALENT = {
    "deepseek": dict(
        loss=("grpo", {"eps": 0.2}),
        aggregation="sample",
        offpolicy=("ppo", 8),
        normalization="prompt",
        precision="bf16",
        length="none",
        zero_variance=False,
        prompts=32,
    ),
    "qwen25_dapo": dict(
        loss=("dapo", {"eps_low": 0.2, "eps_high": 0.26}),
        aggregation="prompt",
        offpolicy=("ppo", 8),
        normalization="prompt",
        precision="bf16",
        length="penalty",
        zero_variance=True,
        prompts=53,
    ),
    "magistral": dict(
        loss=("dapo", {"eps_low": 0.2, "eps_high": 0.28}),
        aggregation="token",
        offpolicy=("pipeline", 8),
        normalization="batch",
        precision="bf16",
        length="penalty",
        zero_variance=True,
        prompts=32,
    ),
    "minimax_m1": dict(
        loss=("cispo", {"eps_max": 5.0}),
        aggregation="prompt",
        offpolicy=("ppo", 8),
        normalization="prompt",
        precision="fp32_head",
        length="none",
        zero_variance=True,
        prompts=53,
    ),
    "scalerl": dict(
        loss=("cispo", {"eps_max": 5.0}),
        aggregation="prompt",
        offpolicy=("pipeline", 8),
        normalization="batch",
        precision="fp32_head",
        length="interrupt",
        zero_variance=True,
        prompts=32,
    ),
}


def test_prevalent_recipes_are_the_papers_definitions(loaded):
    sw = loaded["prevalent"]
    assert sw.baseline == "scalerl" and set(sw.arms) == set(PAPER_PREVALENT)
    for r in sw.runs:
        c, want = r.config, PAPER_PREVALENT[r.arm_label]
        _, eps = want["loss"]
        got = {
            "loss": (c.loss.name, {k: getattr(c.loss, k) for k in eps}),
            "aggregation": c.aggregation.name,
            "offpolicy": (c.offpolicy.name, c.offpolicy.k),
            "normalization": c.normalization.name,
            "precision": c.precision.name,
            "length": c.length.name,
            "zero_variance": c.filtering.zero_variance,
            "prompts": c.batch.prompts,
        }
        assert got == want, r.arm_label
        no_npr = r.arm_label != "scalerl"  # no-positive-resampling is ScaleRL's own
        assert c.filtering.no_positive_resampling is not no_npr, r.arm_label
    text = (RECIPES_DIR / "prevalent.yaml").read_text()
    for arm in set(PAPER_PREVALENT) - {"scalerl"}:  # every arm names every choice, not only what differs
        block = text.split("label: " + arm)[1].split("- label")[0]
        for key in (
            "loss=",
            "aggregation=",
            "offpolicy=",
            "offpolicy.k=",
            "normalization=",
            "precision=",
            "length=",
            "filtering.zero_variance=",
            "filtering.no_positive_resampling=",
        ):
            assert key in block, (arm, key)
        # the 1,280-completion batch follows the scale the sweep runs at (53 here, 80 under preset=scalerl_8b)
        assert ("batch.prompts=${setup.large_batch_prompts}" in block) == (PAPER_PREVALENT[arm]["prompts"] == 53)


def test_offpolicy_arms(loaded):
    got = [(r.config.offpolicy.name, r.config.offpolicy.k) for r in loaded["offpolicy"].runs]
    assert got == [("ppo", 1), ("ppo", 8), ("pipeline", 1), ("pipeline", 4), ("pipeline", 8)]


# ---- command-line overrides ----


def test_seed_override_replaces_seeds_and_constant_applies_where_it_exists():
    sw = load_sweep(RECIPES_DIR / "loss.yaml", ["seed=0,1,2", "loss.eps_max=4"])
    assert sw.seeds == [0, 1, 2] and len(sw.runs) == 12
    assert [r.label for r in sw.runs[:3]] == ["loss=grpo,seed=0", "loss=grpo,seed=1", "loss=grpo,seed=2"]
    for r in sw.runs:
        expect = 4.0 if r.config.loss.name == "cispo" else None
        assert r.config.loss.eps_max == expect
    assert any("loss.eps_max=4 applies to loss=cispo only" in n for n in sw.notes)
    # seeds share an arm id, differ in run id
    cispo = [r for r in sw.runs if r.arm_label == "loss=cispo"]
    assert len({r.arm_id for r in cispo}) == 1 and len({r.run_id for r in cispo}) == 3


def test_sweep_values_replace_or_add_grid_axes():
    sw = load_sweep(RECIPES_DIR / "loss.yaml", ["loss=grpo,dapo", "optim.lr=choice(1e-4,3e-4)"])
    assert sw.arms == [
        "loss=grpo,optim.lr=0.0001",
        "loss=grpo,optim.lr=0.0003",
        "loss=dapo,optim.lr=0.0001",
        "loss=dapo,optim.lr=0.0003",
    ]
    assert sw.baseline is None and any("baseline" in n for n in sw.notes)
    sw = load_sweep(RECIPES_DIR / "batch.yaml", ["batch.prompts=range(4,13,4)", "seed=range(2)"])
    assert [r.config.batch.prompts for r in sw.runs] == [4, 4, 8, 8, 12, 12]
    sw = load_sweep(RECIPES_DIR / "loss.yaml", ["loss=dapo"])  # a single value narrows the axis
    assert [r.label for r in sw.runs] == ["loss=dapo,seed=0"]


def test_sweep_file_elsewhere_names_its_base_by_path(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(f"base: {RECIPES_DIR / 'base.yaml'}\nseeds: [3]\ngrid: {{precision: [bf16]}}\n")
    sw = load_sweep(f)
    assert sw.name == "mine" and [r.label for r in sw.runs] == ["precision=bf16,seed=3"]
    assert sw.runs[0].config == compose_run(RECIPES_DIR / "base.yaml", ["precision=bf16", "seed=3"])


def test_the_baseline_matches_its_arm_by_value_not_spelling(tmp_recipes):
    """`optim.lr=3e-4` names the arm labelled `optim.lr=0.0003`, in either order of its parts."""
    f = tmp_recipes / "lr.yaml"
    f.write_text("seeds: [0]\nbaseline: loss=grpo,optim.lr=3e-4\ngrid: {optim.lr: [1e-4, 3e-4], loss: [grpo]}\n")
    sw = load_sweep(f)
    assert sw.baseline == "optim.lr=0.0003,loss=grpo"
    assert [r.label for r in sw.runs if r.baseline] == ["optim.lr=0.0003,loss=grpo,seed=0"]
    f.write_text("seeds: [0]\nbaseline: lr=1E-4\nruns: [{label: lr=1E-4, overrides: [optim.lr=1e-4]}, [loss=dapo]]\n")
    assert load_sweep(f).baseline == "lr=1E-4"  # a run's own label: matched as it is written


def test_runs_cross_the_grid(tmp_recipes):
    f = tmp_recipes / "two.yaml"
    f.write_text("seeds: [0]\nbaseline: scalerl\nruns: [{label: scalerl, overrides: []}, [loss=dapo]]\n")
    assert load_sweep(f).arms == ["scalerl", "loss=dapo"]
    sw = load_sweep(f, ["batch.prompts=8,16"])
    assert sw.arms == [
        "scalerl,batch.prompts=8",
        "scalerl,batch.prompts=16",
        "loss=dapo,batch.prompts=8",
        "loss=dapo,batch.prompts=16",
    ]
    assert [(r.config.loss.name, r.config.batch.prompts) for r in sw.runs] == [
        ("cispo", 8),
        ("cispo", 16),
        ("dapo", 8),
        ("dapo", 16),
    ]


def test_constant_that_no_arm_has_is_an_error():
    with pytest.raises(ConfigErrors) as e:
        load_sweep(RECIPES_DIR / "loss.yaml", ["loss=grpo,dapo", "loss.eps_max=4"])
    (err,) = e.value.errors
    assert err.startswith("loss.eps_max=4:") and "loss=grpo, loss=dapo" in err


# ---- ids ----


def _shuffled(d):
    if isinstance(d, dict):
        items = list(d.items())
        random.Random(len(items)).shuffle(items)
        return {k: _shuffled(v) for k, v in items}
    return d


def test_ids_ignore_key_order_and_number_formatting(base):
    assert list(_shuffled(base)) != list(base)
    assert run_id(_shuffled(base)) == run_id(base) and arm_id(_shuffled(base)) == arm_id(base)
    ids = {run_id(compose_run(RECIPES_DIR / "base.yaml", [f"loss.eps_max={v}"])) for v in ("5", "5.0", "5.00", "5e0")}
    assert ids == {run_id(base)}
    a = compose_run(RECIPES_DIR / "base.yaml", ["optim.lr=1e-3"])
    b = compose_run(RECIPES_DIR / "base.yaml", ["optim.lr=0.001"])
    assert run_id(a) == run_id(b) != run_id(base)
    raw = copy.deepcopy(base)
    raw["loss"]["eps_max"] = 5  # an int in a float field, before validation
    assert run_id(raw) == run_id(base)


def _leaves(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield prefix + k, v


def _set(d, dotted, value):
    *path, last = dotted.split(".")
    for p in path:
        d = d[p]
    d[last] = value


def _other(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value + [0.5]
    return "set"  # None


def test_ids_differ_when_any_semantic_field_differs(base):
    unhashed = set(schema.unhashed_keys())
    for key, value in _leaves(base):
        changed = copy.deepcopy(base)
        _set(changed, key, _other(value))
        if key.split(".")[0] in unhashed or key in unhashed:  # launcher, optim.micro_batch
            assert run_id(changed) == run_id(base) and arm_id(changed) == arm_id(base), key
        elif key == "seed":
            assert run_id(changed) != run_id(base) and arm_id(changed) == arm_id(base)
        else:
            assert run_id(changed) != run_id(base) and arm_id(changed) != arm_id(base), key
    assert "launcher" in unhashed and "optim.micro_batch" in unhashed


def test_ids_are_the_same_in_another_process(base):
    # another interpreter with another hash seed stands in for another machine
    code = (
        "from ablate.compose.resources import RECIPES_DIR; from ablate.compose.recipe import compose_run; "
        "from ablate.config.identity import run_id, arm_id; "
        "c = compose_run(RECIPES_DIR / 'base.yaml', ['loss=dapo']); print(run_id(c), arm_id(c))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    c = compose_run(RECIPES_DIR / "base.yaml", ["loss=dapo"])
    assert out == [run_id(c), arm_id(c)]
    assert len(out[0]) == 12 and json.loads(canonical(c))["loss"]["eps_high"] == 0.28


# ---- bad sweep files: each class gets its message, nothing is returned ----


@pytest.fixture
def tmp_recipes(tmp_path) -> Path:
    """A copy of the recipe tree (base + groups) to write broken sweep files beside."""
    dst = tmp_path / "recipes"
    shutil.copytree(
        RECIPES_DIR,
        dst,
        ignore=lambda d, names: [
            n for n in names if d == str(RECIPES_DIR) and n.endswith(".yaml") and n != "base.yaml"
        ],
    )
    return dst


@pytest.mark.parametrize(
    "body,parts",
    [
        ("base: base\nseeds: [0]\ngrid: {loss: [grpo]}\nbaselin: loss=grpo\n", ["'baselin'", "'baseline'"]),
        ("base: nope\ngrid: {loss: [grpo]}\n", ["'nope'", "nope.yaml"]),
        ("grid: {loss: [grpo, dapo]}\nbaseline: loss=cispo\n", ["'loss=cispo'", "loss=grpo, loss=dapo"]),
        ("grid: {seed: [0, 1]}\n", ["'seed'", "seeds: [...]"]),
        ("seeds: [0, -1]\ngrid: {loss: [grpo]}\n", ["[0, -1]", "[0, 4294967295]"]),
        ("runs: [loss=dapo]\n", ["runs[0]", "'loss=dapo'"]),
        ("runs: [[loss=dapo], [loss=dapo]]\n", ["two arms", "'loss=dapo'"]),
        ("runs: [[loss=dapo], {label: dapo2, overrides: [loss=dapo]}]\n", ["'loss=dapo'", "'dapo2'"]),
        ("runs: [[loss=dapo]]\ngrid: {loss: [grpo]}\n", ["loss", "run list", "grid axis"]),
        ("overrides: ['loss=grpo,dapo']\n", ["overrides: 'loss=grpo,dapo'", "`grid`"]),
        ("runs: [['loss=grpo,dapo']]\n", ["runs: 'loss=grpo,dapo'"]),
        (
            "grid: {loss: [grpo, gspo]}\noverrides: [aggregation=token]\n",
            ["arm loss=gspo", "aggregation=token", "aggregation=sample"],
        ),
        ("grid: {loss: [grpo, dapo]}\noverrides: [batch.generations=1]\n", ["batch.generations", ">= 2"]),
        ("grid: {loss: [grpo, dapoo]}\n", ["arm loss=dapoo", "'dapo'", "cispo, dapo, grpo, gspo"]),
    ],
)
def test_bad_sweep_files(tmp_recipes, body, parts):
    f = tmp_recipes / "bad.yaml"
    f.write_text(body)
    with refused(ErrorKind.RECIPE, *parts):
        load_sweep(f)


def test_all_errors_of_all_runs_are_collected(tmp_recipes):
    f = tmp_recipes / "bad.yaml"
    f.write_text("grid: {loss: [grpo, gspo]}\noverrides: [aggregation=token, offpolicy.k=0, batch.prompts=x]\n")
    with pytest.raises(ConfigErrors) as e:
        load_sweep(f)
    errs = e.value.errors
    assert all(m.startswith(f"{f}: ") for m in errs)  # the file's keys: the file named first
    by_key = {m.removeprefix(f"{f}: ").partition(":")[0]: m for m in errs}  # a key (or arm), then what is wrong
    assert ">= 1" in by_key["offpolicy.k"]  # shared by every arm: printed once
    assert "int" in by_key["batch.prompts"] and "'x'" in by_key["batch.prompts"]
    assert "aggregation=token" in by_key["arm loss=gspo"]
    assert len(errs) == 3 and str(e.value).count("\n") == 2 and e.value.kind is ErrorKind.RECIPE


def test_a_mistyped_key_names_the_sweep_file_it_is_in_not_the_command_line(tmp_recipes):
    f = tmp_recipes / "typo.yaml"
    f.write_text("grid: {los: [grpo, gspo]}\n")
    with pytest.raises(ConfigErrors) as e:
        load_sweep(f)
    assert e.value.errors == [f"{f}: los: unknown key (did you mean 'loss'?)"]
    with pytest.raises(ConfigErrors) as e:  # typed on the command line: the user sees it where they typed it
        load_sweep(tmp_recipes / "base.yaml", ["optim.lrr=1e-4"])
    assert e.value.errors == ["optim.lrr: unknown key (did you mean 'optim.lr'?)"]


def test_an_option_of_the_same_name_with_other_values_is_an_override_vs_base(tmp_recipes):
    wide = (tmp_recipes / "loss" / "cispo.yaml").read_text().replace("eps_max: 5.0", "eps_max: 8.0")
    assert "eps_max: 8.0" in wide
    (tmp_recipes / "loss" / "cispo_wide.yaml").write_text(wide)
    (tmp_recipes / "wide.yaml").write_text("baseline: loss=cispo\ngrid: {loss: [cispo, cispo_wide]}\n")
    assert [cells[3] for cells in run_cells(load_sweep(tmp_recipes / "wide.yaml"))] == ["(base)", "loss=cispo_wide"]


def test_run_cells(loaded):
    rows = run_cells(loaded["loss"])
    assert [label for label, *_ in rows] == [
        "loss=grpo,seed=0",
        "loss=dapo,seed=0",
        "loss=gspo,seed=0",
        "loss=cispo,seed=0 *",
    ]
    assert [overrides for *_, overrides in rows] == ["loss=grpo", "loss=dapo", "loss=gspo", "(base)"]


def test_a_run_label_is_read_back_by_one_parser():
    """The labels a sweep writes (`<overrides>,seed=<n>`) give back their seed and their arm through
    config.identity's one reader, which every module uses."""
    from ablate.config.identity import label_arm, label_seed

    sw = load_sweep(RECIPES_DIR / "loss.yaml", ["seed=0,7"])
    for run in sw.runs:
        assert label_seed(run.label) == str(run.config.seed) and label_arm(run.label) == run.arm_label
    assert label_seed("loss=dapo") is None and label_arm("seed=3") == "base"
    assert label_seed("loss=dapo, seed=3") == "3" and label_arm("loss=dapo, seed=3") == "loss=dapo"
