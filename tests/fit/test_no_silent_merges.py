"""No silent merges: distinct inputs keep distinct arm names, arms are a sweep's configs (not its run.json labels),
and distinct integer configs get distinct ids."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from sweep_writer import write_sweep
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.compose.sweep import load_sweep
from ablate.config.identity import arm_id, canonical, run_id
from ablate.curves import inputs as curves_mod
from ablate.curves.inputs import curves_from_sweep, load_inputs
from ablate.curves.tables import write_csv
from ablate.errors import ErrorKind
from ablate.fit.analysis import group_arms
from ablate.fit.compare import rank
from ablate.fit.curve import Curve, RunFacts
from ablate.fit.result import FitOptions
from ablate.fit.synthetic import synthetic_curve
from ablate.storage import store
from ablate.storage.rundir import RunDir
from jobs import one_error, refused

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
BASE = dict(b=1.92, c_mid=2542.0)


def seeds(a: float, first: int, k: int = 3) -> list[Curve]:
    return [synthetic_curve(a=a, **BASE, seed=first + s) for s in range(k)]


# ---- item 1: inputs whose names collide ----


def test_two_sweeps_of_one_name_under_two_roots_stay_two_sweeps(tmp_path):
    # the same sweep name on two roots: each a real ceiling change of +0.05 over its own baseline, at another level.
    # Merged by name, each arm would pool both sweeps' seeds (spread 0.05 between them) and the change would drown.
    a = write_sweep(tmp_path / "a" / "sweeps", "loss", {"base": seeds(0.61, 0), "up": seeds(0.66, 10)}, baseline="base")
    b = write_sweep(
        tmp_path / "b" / "sweeps", "loss", {"base": seeds(0.56, 20), "up": seeds(0.61, 30)}, baseline="base"
    )
    curves, _ = load_inputs([a, b])
    arms = group_arms(curves)
    assert {k: len(v) for k, v in arms.items()} == {
        "a/sweeps/loss:base": 3,
        "a/sweeps/loss:up": 3,
        "b/sweeps/loss:base": 3,
        "b/sweeps/loss:up": 3,
    }
    for base in ("a/sweeps/loss:base", "b/sweeps/loss:base"):
        up = base.replace(":base", ":up")
        ranking = rank([c for c in curves if c.group in (base, up)], FitOptions(n_boot=300), baseline=base)
        assert {r.arm: r.verdict for r in ranking.arms} == {base: "baseline", up: "ceiling_up"}


def test_two_files_of_one_name_in_two_folders_stay_apart(tmp_path):
    for folder, a in (("x", 0.61), ("y", 0.66)):
        (tmp_path / folder).mkdir()
        cs = seeds(a, 0 if folder == "x" else 10)
        for i, c in enumerate(cs):
            c.run, c.group = f"s{i}", "arm"
        write_csv(cs, tmp_path / folder / "curves.csv")
    curves, _ = load_inputs([tmp_path / "x" / "curves.csv", tmp_path / "y" / "curves.csv"], group="group")
    assert {k: len(v) for k, v in group_arms(curves).items()} == {"x/curves.csv:arm": 3, "y/curves.csv:arm": 3}
    res = runner.invoke(
        app,
        [
            "rank",
            str(tmp_path / "x" / "curves.csv"),
            str(tmp_path / "y" / "curves.csv"),
            "--group",
            "group",
            "--baseline",
            "x/curves.csv:arm",
            "--json",
            "--n-boot",
            "200",
        ],
    )
    assert res.exit_code == 0, res.output
    assert '"y/curves.csv:arm"' in res.output and '"ceiling_up"' in res.output


def test_input_names_take_the_shortest_path_end_no_other_input_shares():
    paths = [
        Path("/r/a/sweeps/loss"),
        Path("/r/b/sweeps/loss"),
        Path("/r/c/loss"),
        Path("/r/d/other"),
        Path("/q/a/sweeps/loss"),
    ]
    assert curves_mod.input_names(paths) == ["r/a/sweeps/loss", "b/sweeps/loss", "c/loss", "other", "q/a/sweeps/loss"]
    assert curves_mod.input_names([Path("/r/loss"), Path("/r/old/loss")]) == ["r/loss", "old/loss"]
    assert curves_mod.input_names([Path("/r/one")]) == ["one"]  # a single input is named as before


def test_one_input_given_twice_is_refused(tmp_path, monkeypatch):
    sweep = write_sweep(tmp_path / "sweeps", "loss", {"base": seeds(0.61, 0, 2)}, baseline="base")
    monkeypatch.chdir(tmp_path)
    one_error(
        runner.invoke(app, ["rank", "sweeps/loss", str(sweep), "--n-boot", "50"]),
        ErrorKind.SETTING,
        str(sweep),
        "sweeps/loss",
    )
    one_error(runner.invoke(app, ["rank", "loss", "./sweeps/loss", "--n-boot", "50"]), ErrorKind.SETTING, "sweeps/loss")


# ---- item 2: arms are configs ----


def write_configured_sweep(root: Path, overrides: list[str], *, first_seed: int = 0, a: float = 0.61) -> Path:
    """recipes/loss.yaml's runs as a trainer leaves them: config.yaml (as train writes it), run.json, metrics."""
    sweep = load_sweep(RECIPES_DIR / "loss.yaml", overrides)
    for i, r in enumerate(sweep.runs):
        rd = RunDir.of(root, sweep.name, r.run_id)
        rd.path.mkdir(parents=True, exist_ok=True)
        store.atomic_write_text(rd.config_path, OmegaConf.to_yaml(OmegaConf.create(r.config.to_dict())))
        store.write_json(
            rd.info_path,
            {
                "run_id": r.run_id,
                "arm_id": r.arm_id,
                "label": r.label,
                "overrides": list(r.overrides),
                "status": "done",
                "baseline": r.baseline,
            },
        )
        c = synthetic_curve(a=a, **BASE, seed=first_seed + i, n_points=30)
        store.write_jsonl(
            rd.metrics_path,
            [
                {
                    "step": k * 10,
                    "gpu_hours": float(x),
                    "val_pass_rate": float(y),
                    "samples": k * 1280,
                    "flops": float(x) * 1e15,
                }
                for k, (x, y) in enumerate(zip(c.x, c.y))
            ],
        )
    return root / sweep.name


def run_of(sweep: Path, label: str) -> RunDir:
    return next(RunDir(p) for p in (sweep / "runs").iterdir() if RunDir(p).info().label == label)


@pytest.fixture
def configured(tmp_path):
    return write_configured_sweep(tmp_path, ["seed=0,1,2"])


def test_a_sweeps_arms_are_read_from_its_configs(configured):
    curves, skipped = curves_from_sweep(configured)
    assert not skipped and len(curves) == 12
    launched = {r.run_id: r.arm_id for r in load_sweep(RECIPES_DIR / "loss.yaml", ["seed=0,1,2"]).runs}
    assert {c.run_id: c.arm_id for c in curves} == launched  # config.yaml hashes to the launch ids
    assert {k: len(v) for k, v in group_arms(curves).items()} == {
        f"loss={x}": 3 for x in ("grpo", "dapo", "gspo", "cispo")
    }


def test_a_label_moved_to_another_arm_is_refused_naming_the_run(configured):
    rd = run_of(configured, "loss=dapo,seed=2")
    store.update_json(rd.info_path, label="loss=cispo,seed=2")  # the label of another arm, the config of its own
    one_error(
        runner.invoke(app, ["rank", str(configured), "--n-boot", "50"]),
        ErrorKind.FILE,
        str(rd.path),
        "'loss=cispo,seed=2'",
        "run.json",
    )


def test_a_run_json_of_another_arm_is_refused_naming_the_run(configured):
    rd, other = run_of(configured, "loss=dapo,seed=2"), run_of(configured, "loss=cispo,seed=2").info()
    own = rd.info().arm_id
    store.update_json(rd.info_path, label=other.label, arm_id=other.arm_id)  # run.json says cispo: config is dapo
    one_error(
        runner.invoke(app, ["rank", str(configured), "--n-boot", "50"]), ErrorKind.FILE, str(rd.path), other.arm_id, own
    )


def test_a_label_with_another_seed_is_refused(configured):
    rd = run_of(configured, "loss=dapo,seed=2")
    store.update_json(rd.info_path, label="loss=dapo,seed=1")  # would count as a second seed 1
    one_error(runner.invoke(app, ["rank", str(configured), "--n-boot", "50"]), ErrorKind.FILE, str(rd.path), "seed=2")


def test_a_run_json_copied_from_another_run_is_refused(configured):
    rd, other = run_of(configured, "loss=dapo,seed=2"), run_of(configured, "loss=dapo,seed=1")
    store.write_json(rd.info_path, store.read_json(other.info_path))
    one_error(
        runner.invoke(app, ["rank", str(configured), "--n-boot", "50"]),
        ErrorKind.FILE,
        str(rd.path),
        other.path.name,  # the run whose run.json it holds
    )


def test_one_label_over_two_configs_is_two_arms(tmp_path):
    # the sweep launched again with a hashed override: same labels, other configs. Both stay, apart, each with its
    # own three seeds, and a ceiling change between them is not averaged away
    sweep = write_configured_sweep(tmp_path, ["seed=0,1,2"])
    write_configured_sweep(tmp_path, ["seed=0,1,2", "train.max_steps=500"], first_seed=50, a=0.66)
    curves, _ = curves_from_sweep(sweep)
    arms = group_arms(curves)
    assert len(arms) == 8 and all(len(v) == 3 for v in arms.values())
    dapo = sorted(k for k in arms if k.startswith("loss=dapo@"))
    assert len(dapo) == 2 and len({c.arm_id for k in dapo for c in arms[k]}) == 2
    assert all(c.run.startswith("loss=dapo,seed=") and "@" in c.run for k in dapo for c in arms[k])
    again = load_sweep(RECIPES_DIR / "loss.yaml", ["seed=0,1,2", "train.max_steps=500"])
    relaunched = next(r.arm_id for r in again.runs if r.label.startswith("loss=dapo,"))
    first, up = sorted(dapo, key=lambda k: arms[k][0].arm_id == relaunched)
    ranking = rank([c for k in dapo for c in arms[k]], FitOptions(n_boot=300), baseline=first)
    assert {a.arm: a.verdict for a in ranking.arms} == {first: "baseline", up: "ceiling_up"}


def test_runs_without_a_config_are_read_as_before(configured):
    for p in (configured / "runs").iterdir():
        RunDir(p).config_path.unlink()  # a foreign tool's run directories, or runs from before config.yaml
    curves, skipped = curves_from_sweep(configured)
    assert not skipped and {k: len(v) for k, v in group_arms(curves).items()} == {
        f"loss={x}": 3 for x in ("grpo", "dapo", "gspo", "cispo")
    }


def test_a_damaged_config_is_refused_in_one_line(configured):
    rd = run_of(configured, "loss=gspo,seed=0")
    rd.config_path.write_text("loss: [unclosed\n")
    one_error(runner.invoke(app, ["rank", str(configured), "--n-boot", "50"]), ErrorKind.FILE, str(rd.config_path))


def test_group_arms_keeps_two_configs_under_one_name_apart():
    # curves from anywhere (not only a sweep's reader): one name over two arm ids is two arms
    cs = []
    for i in range(4):
        c = synthetic_curve(a=0.61, **BASE, seed=i, run=f"r{i}", group="arm")
        arm_id = "aaaaaaaaaaaa" if i < 2 else "bbbbbbbbbbbb"
        c.facts = RunFacts(run_id=None, arm_id=arm_id, status=None, baseline=False, partial=False)
        cs.append(c)
    assert {k: [c.run for c in v] for k, v in group_arms(cs).items()} == {
        "arm@aaaaaaaa": ["r0", "r1"],
        "arm@bbbbbbbb": ["r2", "r3"],
    }


# ---- item 3: integers hash as integers ----


# ids computed before integers beyond 2**53 were hashed as integers: they must never change
PINNED = {
    ("recipes/base.yaml", ""): ("7a75b21612e5", "ef6c1c270a57"),
    ("recipes/loss.yaml", "loss=grpo,seed=0"): ("5c351a10e677", "d5084c100e26"),
    ("recipes/loss.yaml", "loss=dapo,seed=0"): ("bae78788bd01", "57a81ca6f745"),
    ("recipes/loss.yaml", "loss=gspo,seed=0"): ("a534fdd5dd66", "b02f4135dc3b"),
    ("recipes/loss.yaml", "loss=cispo,seed=0"): ("7a75b21612e5", "ef6c1c270a57"),
    ("recipes/length.yaml", "length=none,seed=0"): ("d635f9f7ea42", "85d4efe6feb8"),
    ("recipes/length.yaml", "length=penalty,seed=0"): ("693adfe5f2e7", "480627950636"),
    ("recipes/demo.yaml", "scalerl,seed=1"): ("354dddde6eb8", "ef6c1c270a57"),
    ("recipes/demo.yaml", "small-policy,seed=2"): ("9dba800d3f7c", "86bfb1eec4af"),
    ("recipes/precision.yaml", "precision=bf16,seed=1"): ("e9cd33d389dc", "20c3a8ed363d"),
}


def test_existing_run_ids_are_unchanged():
    got = {}
    for path, label in PINNED:
        if not label:
            c = compose_run(RECIPES_DIR.parent / path, [])
            got[(path, label)] = (run_id(c), arm_id(c))
        else:
            r = next(r for r in load_sweep(RECIPES_DIR.parent / path).runs if r.label == label)
            got[(path, label)] = (r.run_id, r.arm_id)
    assert got == PINNED


def test_integers_beyond_2_53_get_their_own_run_ids():
    base = compose_run(RECIPES_DIR / "base.yaml", [])
    big = [base.replace(**{"train.max_steps": v}) for v in (2**53, 2**53 + 1, 2**53 + 2)]
    assert len({run_id(c) for c in big}) == 3 and len({arm_id(c) for c in big}) == 3
    # up to 2**53 a number is its float, as before: 5 and 5.0 are one value
    assert canonical({"n": 5}) == canonical({"n": 5.0}) and canonical({"n": 2**53}) == canonical({"n": float(2**53)})
    assert canonical({"n": -(2**53) - 1}) != canonical({"n": float(-(2**53) - 1)})
    # past 2**53 too, an integer a float holds exactly hashes as that float (no old id changes): 10**18 == 1e18
    assert canonical({"n": 10**18}) == canonical({"n": 1e18}) and canonical({"n": 2**60}) == canonical({"n": 2.0**60})
    assert canonical({"n": 10**400}) != canonical({"n": 10**400 + 1})  # no float at all: its digits
    # a run directory's config.yaml hashes to the same id as the config it was written from
    rd_cfg = OmegaConf.to_container(OmegaConf.create(OmegaConf.to_yaml(OmegaConf.create(big[1].to_dict()))))
    assert run_id(rd_cfg) == run_id(big[1])


def test_a_config_yaml_alias_bomb_or_deep_nesting_in_a_sweep_is_one_line_not_expanded(tmp_path):
    """A sweep someone else can hand you is read, not trusted: a config.yaml whose aliases would expand it to a
    billion nodes, or nested past the parser's depth, is one line naming the file, and never expanded."""
    from ablate.curves.sweeps import config_ids
    from ablate.storage.rundir import RunDir

    bomb = (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{k}: &{k} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
            for p, k in zip("abcdefgh", "bcdefghi")
        )
        + "seed: 0\n"
    )
    deep = "seed: 0\nx: " + "[" * 5000 + "]" * 5000 + "\n"
    for name, text in (("bomb", bomb), ("deep", deep)):
        rd = RunDir(tmp_path / name)
        rd.path.mkdir()
        rd.config_path.write_text(text)
        with refused(ErrorKind.FILE, str(rd.config_path)) as e:
            config_ids(rd)
        assert "\n" not in str(e.value)
