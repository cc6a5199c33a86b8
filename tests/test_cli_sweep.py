"""`ablate sweep --dry-run` and `ablate show` through typer's CliRunner: the plan, the resolved config, the errors."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.resources import RECIPES_DIR
from ablate.compose.sweep import load_sweep
from ablate.errors import ErrorKind
from jobs import error_kind, one_error

runner = CliRunner()
LOSS = str(RECIPES_DIR / "loss.yaml")
LOO = str(RECIPES_DIR / "loo.yaml")


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Run every command in an empty folder, so that 'launches nothing' can be checked as 'wrote nothing'."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path


def _ids(text: str) -> list[str]:
    return re.findall(r"\b[0-9a-f]{12}\b", text)


def test_dry_run_lists_four_arms_times_the_seeds(in_tmp):
    res = runner.invoke(app, ["sweep", LOSS, "--dry-run"])
    assert res.exit_code == 0, res.output
    sw = load_sweep(LOSS)
    assert len(sw.runs) == 4 * len(sw.seeds)
    for r in sw.runs:
        line = next(ln for ln in res.output.splitlines() if r.label in ln)
        assert r.run_id in line and r.arm_id in line
    assert "4 arms x 1 seed = 4 runs" in res.output
    assert "baseline: loss=cispo" in res.output
    assert list(in_tmp.iterdir()) == []  # nothing launched, nothing written


def test_dry_run_with_overrides_from_the_issue(in_tmp):
    res = runner.invoke(app, ["sweep", LOSS, "seed=0,1,2", "loss.eps_max=4", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "4 arms x 3 seeds = 12 runs" in res.output
    assert len(set(_ids(res.output))) == 12 + 4  # 12 run ids, 4 arm ids
    assert "loss.eps_max=4 applies to loss=cispo only" in " ".join(res.output.split())
    assert list(in_tmp.iterdir()) == []


def test_loo_dry_run_lists_scalerl_plus_the_papers_seven_arms():
    res = runner.invoke(app, ["sweep", LOO, "--dry-run"])
    assert res.exit_code == 0, res.output
    for arm in ("scalerl", "loo-plan", "loo-lp", "loo-batch", "loo-8op", "loo-fp32", "loo-savg", "loo-dapo"):
        assert f"{arm},seed=0" in res.output, arm
    assert "8 arms x 1 seed = 8 runs" in res.output


@pytest.mark.parametrize(
    "args,kind,culprits",
    [
        (["loss.eps_mx=4"], ErrorKind.RECIPE, [["loss.eps_mx", "'loss.eps_max'"]]),
        (["loss=cispoo"], ErrorKind.RECIPE, [["'cispo'"]]),
        (["batch.prompts=abc"], ErrorKind.RECIPE, [["batch.prompts", "'abc'"]]),
        (["offpolicy.k=0", "batch.generations=1"], ErrorKind.RECIPE, [["offpolicy.k"], ["batch.generations"]]),
        (["aggregation=token"], ErrorKind.RECIPE, [["loss=gspo", "aggregation=token"]]),
        (["model=hf"], ErrorKind.RECIPE, [["model=hf", "model.path"]]),
        (["--executor", "nope"], ErrorKind.SETTING, [["--executor nope", "local, slurm, debug, auto"]]),
    ],
)
@pytest.mark.parametrize("dry", [True, False])
def test_bad_input_is_one_line_per_error_and_launches_nothing(in_tmp, args, kind, culprits, dry):
    """One `error[KIND]:` line per problem, each naming its culprits (the key, the value, the choices)."""
    res = runner.invoke(app, ["sweep", LOSS, *args] + (["--dry-run"] if dry else []))
    assert res.exit_code == 2
    err_lines = res.stderr.strip().splitlines()
    assert len(err_lines) == len(culprits) and all(error_kind(ln) is kind for ln in err_lines), res.stderr
    for names in culprits:
        assert any(all(n in ln for n in names) for ln in err_lines), (names, res.stderr)
    assert res.stdout == ""  # no plan printed
    assert list(in_tmp.iterdir()) == []  # nothing submitted


def test_show_prints_the_resolved_config():
    res = runner.invoke(app, ["show", str(RECIPES_DIR / "base.yaml"), "loss=dapo", "aggregation=token"])
    assert res.exit_code == 0, res.output
    source, head, body = res.output.split("\n", 2)
    cfg = yaml.safe_load(body)
    assert cfg["loss"] == {"name": "dapo", "eps": None, "eps_low": 0.2, "eps_high": 0.28, "eps_max": None}
    assert cfg["aggregation"]["name"] == "token" and cfg["seed"] == 0
    assert re.fullmatch(r"# run_id: [0-9a-f]{12}  arm_id: [0-9a-f]{12}", head)
    assert source == f"# recipe: {RECIPES_DIR / 'base.yaml'} (ablate's packaged recipes)"  # read as given


def test_show_names_the_recipe_it_read_your_folder_first(tmp_path, monkeypatch):
    """`recipes/base.yaml` is the packaged recipe until the folder has its own (after `ablate init`): then that one."""
    monkeypatch.chdir(tmp_path)
    packaged = runner.invoke(app, ["show", "recipes/base.yaml"])
    assert packaged.exit_code == 0, packaged.output
    assert packaged.output.splitlines()[0] == f"# recipe: {RECIPES_DIR / 'base.yaml'} (ablate's packaged recipes)"
    made = runner.invoke(app, ["init"])
    assert made.exit_code == 0, made.output
    assert (tmp_path / "recipes" / "base.yaml").is_file() and (tmp_path / "slurm" / "example.yaml").is_file()
    assert made.output.startswith("wrote ") and "slurm/example.yaml" in made.output
    mine = runner.invoke(app, ["show", "recipes/base.yaml"])
    assert mine.output.splitlines()[0] == "# recipe: recipes/base.yaml (your folder)"
    assert mine.output.splitlines()[1:] == packaged.output.splitlines()[1:]  # the same recipe: the same run
    again = runner.invoke(app, ["init"])
    one_error(again, ErrorKind.FILE, "already exists")


def test_show_one_run_of_a_sweep_matches_the_plan():
    res = runner.invoke(app, ["show", LOSS, "loss=gspo"])
    assert res.exit_code == 0, res.output
    gspo = next(r for r in load_sweep(LOSS).runs if r.arm_label == "loss=gspo")
    assert f"run_id: {gspo.run_id}" in res.output
    assert yaml.safe_load(res.output.partition("\n")[2]) == gspo.config.to_dict()


def test_show_errors():
    one_error(runner.invoke(app, ["show", LOSS]), ErrorKind.RECIPE, "4 runs", "loss=gspo")
    res = runner.invoke(app, ["show", str(RECIPES_DIR / "base.yaml"), "loss=dapo", "loss.eps_max=4"])
    one_error(res, ErrorKind.RECIPE, "loss.eps_max", "loss=dapo", "eps_low, eps_high", "loss=cispo")
    one_error(runner.invoke(app, ["show", "no/such.yaml"]), ErrorKind.FILE, "no/such.yaml")


def test_show_prints_a_run_directorys_config_and_points_a_sweep_directory_to_status(tmp_path):
    """A run directory (or its config.yaml) shows the config it ran with; a sweep's directory, and `status` given a
    run's, name the command that does what was asked."""
    from omegaconf import OmegaConf

    gspo = next(r for r in load_sweep(LOSS).runs if r.arm_label == "loss=gspo")
    run = tmp_path / "sweeps" / "loss" / "runs" / gspo.run_id
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"status": "done"}')
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(gspo.config.to_dict())))
    for given in (run, run / "config.yaml"):
        res = runner.invoke(app, ["show", str(given)])
        assert res.exit_code == 0, res.output
        head, ids, body = res.output.split("\n", 2)
        assert head == f"# run directory: {run}" and f"run_id: {gspo.run_id}" in ids
        assert yaml.safe_load(body) == gspo.config.to_dict()
    one_error(runner.invoke(app, ["show", str(run), "loss=dapo"]), ErrorKind.USAGE, "loss=dapo", "drop the overrides")
    sweep = tmp_path / "sweeps" / "loss"
    one_error(runner.invoke(app, ["show", str(sweep)]), ErrorKind.FILE, f"ablate status {sweep}")
    one_error(runner.invoke(app, ["status", str(run)]), ErrorKind.FILE, "a run directory", f"ablate fit {run}")
    # the other way round: a sweep's directory where a recipe goes, and a recipe where results go
    one_error(runner.invoke(app, ["sweep", str(sweep)]), ErrorKind.FILE, "a sweep directory", f"ablate status {sweep}")
    one_error(runner.invoke(app, ["sweep", str(run / "..")]), ErrorKind.FILE, "a directory, not a recipe")
    (sweep / "ledger.jsonl").write_text("")
    for verb in ("rank", "extrapolate", "fit"):
        one_error(runner.invoke(app, [verb, "recipes/loss.yaml"]), ErrorKind.FILE, "recipes/loss.yaml", "sweeps/loss")
    one_error(runner.invoke(app, ["rank", str(run / "config.yaml")]), ErrorKind.FILE, f"give its run directory, {run}")
    res = runner.invoke(app, ["rank", "recipes/base.yaml"])
    one_error(res, ErrorKind.FILE, "ablate sweep recipes/base.yaml", "sweeps/base", stream="stderr")


@pytest.mark.parametrize("verb", ["sweep", "rank", "plan", "report", "status"])
def test_help_shows_flags_without_a_value_placeholder(verb, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    res = runner.invoke(app, [verb, "--help"])
    assert res.exit_code == 0
    flag_rows = [ln for ln in res.output.splitlines() if "--help" not in ln and "<bool>" in ln]
    assert flag_rows == []  # a flag takes no value: Typer's `<bool>` placeholder would say it does


def test_each_verbs_options_are_one_settings_class_whose_field_docs_are_the_help():
    """Every verb is built from one settings dataclass: its parameters are the class's fields (names, defaults),
    each option's flags and help are the field's, and a setting several verbs share (--x, --json, --from) is one
    field with one help everywhere (calibrate's --n-boot is its own: it takes 50 to 10,000)."""
    import dataclasses

    import typer

    from ablate.cli import VERBS

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    helps: dict[str, set[str]] = {}
    for verb in VERBS:
        cls = verb.settings
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
        params = {p.name: p for p in commands[verb.__name__].params if p.name != "help"}
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert set(params) == set(fields), verb.__name__
        for name, f in fields.items():
            p = params[name]
            assert p.help == f.metadata["doc"], (verb.__name__, name)
            if not f.metadata.get("argument"):
                assert set(p.opts + p.secondary_opts) == {
                    part for flag in f.metadata["flags"] for part in flag.split("/")
                }
                assert p.default == f.default, (verb.__name__, name)
                helps.setdefault(p.opts[0], set()).add(p.help)
    for flag in ("--x", "--json", "--from", "--group", "--run"):
        assert len(helps[flag]) == 1, (flag, helps[flag])


def test_out_is_the_file_a_verb_writes_and_a_run_directory_is_run_dir(tmp_path):
    """One meaning per option across the verbs: `--out` is a file the verb writes (report's page, calibrate's JSON),
    and train's run directory is `--run-dir`; train's old `--out` is refused in one line that names the new flag."""
    import typer

    for verb in ("report", "calibrate"):
        help_ = " ".join(runner.invoke(app, [verb, "--help"]).output.split())
        assert "--out" in help_ and "--run-dir" not in help_
    assert "--run-dir" in " ".join(runner.invoke(app, ["train", "--help"]).output.split())
    train = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    assert "--out" not in {o for p in train.params if not getattr(p, "hidden", False) for o in p.opts}
    res = runner.invoke(app, ["train", str(RECIPES_DIR / "base.yaml"), "--out", str(tmp_path / "r")])
    line = one_error(res, ErrorKind.SETTING, f"--run-dir {tmp_path / 'r'}")
    assert error_kind(line) is ErrorKind.SETTING and f"--out {tmp_path / 'r'}" in line and not (tmp_path / "r").exists()
