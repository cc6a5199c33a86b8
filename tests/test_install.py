"""ablate as installed, not as checked out: the recipes and SLURM profiles ship inside the package, a recipe path
resolves in the user's folder first and then among the packaged recipes, and `ablate init` writes a copy to edit.

The last test builds the wheel, installs it into a fresh venv and runs the first commands of a newcomer from an empty
folder. Nothing is downloaded: the wheel is built without build isolation, and the venv finds ablate's dependencies
in this project's venv through a path entry (which leaves out the checkout's own src/, an editable install's .pth).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ablate.compose.project import init_project
from ablate.compose.resources import PACKAGED, PROFILES_DIR, RECIPES_DIR, YOUR_FOLDER, find_recipe
from ablate.compose.sweep import load_sweep
from ablate.curves.tables import write_csv
from ablate.errors import ErrorKind
from ablate.fit.synthetic import PAPER_CURVES, synthetic_curve
from jobs import refused

CHECKOUT = Path(__file__).resolve().parent.parent


def test_a_recipe_path_resolves_in_your_folder_first_then_among_the_packaged_recipes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_recipe("recipes/loss.yaml") == (RECIPES_DIR / "loss.yaml", PACKAGED)
    assert find_recipe("loss.yaml") == (RECIPES_DIR / "loss.yaml", PACKAGED)
    assert find_recipe("recipes/loss/dapo.yaml") == (RECIPES_DIR / "loss" / "dapo.yaml", PACKAGED)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "loss.yaml").write_text("base: base\n")
    assert find_recipe("recipes/loss.yaml") == (Path("recipes/loss.yaml"), YOUR_FOLDER)
    for missing in ("recipes/nope.yaml", "recipes/../../pyproject.toml"):
        with refused(ErrorKind.FILE, missing, "ablate init"):
            find_recipe(missing)
    with refused(ErrorKind.FILE, str(tmp_path / "absent.yaml")) as e:
        find_recipe(tmp_path / "absent.yaml")  # an absolute path is only ever itself
    assert "ablate init" not in str(e.value)  # not looked for among the packaged recipes
    assert find_recipe(RECIPES_DIR / "base.yaml") == (RECIPES_DIR / "base.yaml", PACKAGED)  # named where it lies


def test_init_writes_an_editable_copy_and_never_overwrites(tmp_path):
    written = init_project(tmp_path / "proj")
    proj = tmp_path / "proj"
    assert proj / "recipes" / "base.yaml" in written and proj / "recipes" / "loss" / "dapo.yaml" in written
    assert (proj / "slurm" / "example.yaml").read_bytes() == (PROFILES_DIR / "example-cluster.yaml").read_bytes()
    assert all(
        p.read_bytes() == (RECIPES_DIR / p.relative_to(proj / "recipes")).read_bytes()
        for p in written
        if p.parent != proj / "slurm"
    )
    copied = load_sweep(proj / "recipes" / "loss.yaml").runs
    assert [r.run_id for r in copied] == [r.run_id for r in load_sweep(RECIPES_DIR / "loss.yaml").runs]
    (proj / "recipes" / "loss.yaml").unlink()
    with refused(ErrorKind.FILE, str(proj / "recipes" / "README.md")):
        init_project(proj)
    assert not (proj / "recipes" / "loss.yaml").exists()  # refused before writing anything


def test_init_never_writes_through_a_link_and_never_stops_half_way(tmp_path):
    outside = tmp_path / "outside.yaml"
    dangling = tmp_path / "dangling"
    (dangling / "slurm").mkdir(parents=True)
    (dangling / "slurm" / "example.yaml").symlink_to(outside)  # a dangling link where init writes the profile
    with refused(ErrorKind.FILE, str(dangling / "slurm" / "example.yaml")):
        init_project(dangling)
    assert not outside.exists() and not (dangling / "recipes").exists()

    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "slurm").write_text("a file where init makes a folder")
    with refused(ErrorKind.FILE, str(blocked / "slurm"), "a link or a file"):  # tells it from "already exists"
        init_project(blocked)
    assert not (blocked / "recipes").exists()  # refused before the recipes were written

    linked = tmp_path / "linked"
    linked.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (linked / "recipes").symlink_to(tmp_path / "elsewhere")
    with refused(ErrorKind.FILE, str(linked / "recipes"), "a link or a file"):  # tells it from "already exists"
        init_project(linked)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def _run(cmd: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, (cmd, res.stdout[-3000:], res.stderr[-3000:])
    return res.stdout


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Path:
    """The bin/ folder of a fresh venv holding ablate's wheel, built from a copy of the checkout."""
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    shutil.copytree(CHECKOUT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(CHECKOUT / name, source / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            base / "dist",
            source,
        ],
        base,
        env,
    )
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], base, env)
    wheel = next((base / "dist").glob("ablate-*.whl"))
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            venv / "bin" / "python",
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            wheel,
        ],
        base,
        env,
    )
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "ablate-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def test_the_installed_wheel_shows_sweeps_trains_and_ranks_from_any_folder(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["ABLATE_CACHE"] = os.environ["ABLATE_CACHE"]  # the session's cache (conftest.py), shared with the other tests
    work = tmp_path / "anywhere"
    work.mkdir()
    where = _run([installed / "python", "-c", "import ablate; print(ablate.__file__)"], work, env)
    assert Path(where.strip()).is_relative_to(installed.parent), where  # the wheel, not the checkout

    shown = _run([installed / "ablate", "show", "recipes/base.yaml"], work, env)
    assert f"({PACKAGED})" in shown and "site-packages/ablate/recipes/base.yaml" in shown and "# run_id: " in shown
    plan = _run(
        [installed / "ablate", "sweep", "recipes/loss.yaml", "--dry-run", "--root", tmp_path / "sweeps"], work, env
    )
    assert "4 arms" in plan and "loss=dapo" in plan and not (tmp_path / "sweeps").exists()

    # five RL steps on the tiny model as built: the supervised warm-up (its own tests' subject) is skipped
    _run(
        [
            installed / "ablate",
            "train",
            "recipes/base.yaml",
            "train.max_steps=5",
            "train.warmup.max_steps=0",
            "--run-dir",
            tmp_path / "run",
        ],
        work,
        env,
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "done", run
    assert (tmp_path / "run" / "metrics.jsonl").read_text().strip()

    curves = []
    for arm, seed in (("a", 0), ("a", 1), ("b", 2), ("b", 3)):
        c = synthetic_curve(
            **PAPER_CURVES["scalerl-8b" if arm == "a" else "scalerl-scout"], seed=seed, n_points=30, run=f"{arm}{seed}"
        )
        c.group = arm
        curves.append(c)
    write_csv(curves, tmp_path / "curves.csv")
    ranked = _run(
        [
            installed / "ablate",
            "rank",
            tmp_path / "curves.csv",
            "--group",
            "group",
            "--baseline",
            "a",
            "--n-boot",
            "50",
        ],
        work,
        env,
    )
    assert "baseline: a" in ranked, ranked

    _run([installed / "ablate", "init", "proj"], work, env)
    own = _run([installed / "ablate", "show", "recipes/base.yaml"], work / "proj", env)
    assert f"({YOUR_FOLDER})" in own and own.split("\n", 1)[1] == shown.split("\n", 1)[1]
