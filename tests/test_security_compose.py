"""Reading a sweep runs nothing a folder configures, and composition stays inside the recipe folders.

Provenance: `git status` on a checkout runs the programs the checkout's own config names (a clean filter its
`.gitattributes` picks, core.fsmonitor, hooks); a checkout received as a tarball is its recipient's own, so git's
ownership check does not stop them. ablate reads the commit from the `.git` files as data instead.

Composition: a config-group option or a defaults entry with `..` in it, or a link in the recipes folder, made Hydra
read YAML from anywhere, past the checks every recipe file gets. Each is now one `error[KIND]:` line naming the culprit.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.project import git_commit
from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from jobs import git, one_error

runner = CliRunner()
MARKER = "0.271828"  # the value only the outside file holds


# ---- provenance: no program the checkout configures ----


def hostile_checkout(tmp_path: Path) -> tuple[Path, str, Path]:
    """A committed checkout whose config names a clean filter (picked by `.gitattributes`), an fsmonitor, a hooks
    folder, an external diff and a pager, each a script that leaves a file in `marks/`; a tracked file is then
    modified, so `git status` would run the clean filter. Returns (checkout, commit, marks folder)."""
    repo, marks = tmp_path / "proj", tmp_path / "marks"
    (repo / "sweeps" / "s").mkdir(parents=True)
    marks.mkdir()
    (repo / "mine.yaml").write_text(f"base: {RECIPES_DIR / 'base.yaml'}\nseeds: [0]\n")
    (repo / "notes.txt").write_text("first\n")
    git(repo, "init", "-q")
    git(repo, "add", "mine.yaml", "notes.txt")
    git(repo, "commit", "-qm", "recipes")
    head = git(repo, "rev-parse", "HEAD")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("fsmonitor", "post-index-change", "pre-commit", "diff", "pager"):
        script = hooks / name
        script.write_text(f"#!/bin/sh\ntouch '{marks}/{name}'\ncat\n")
        script.chmod(0o755)
    for key, value in [
        ("filter.evil.clean", f"sh -c 'touch {marks}/clean; cat'"),
        ("filter.evil.smudge", f"sh -c 'touch {marks}/smudge; cat'"),
        ("core.fsmonitor", str(hooks / "fsmonitor")),
        ("core.hooksPath", str(hooks)),
        ("diff.external", str(hooks / "diff")),
        ("core.pager", str(hooks / "pager")),
    ]:
        git(repo, "config", key, value)
    (repo / ".gitattributes").write_text("* filter=evil\n")
    (repo / "notes.txt").write_text("changed since the commit\n")
    return repo, head, marks


def test_the_commit_is_read_without_running_what_the_checkout_configures(tmp_path):
    from ablate.launch.submit import launch_event
    from ablate.report.data import provenance

    repo, head, marks = hostile_checkout(tmp_path)
    assert git_commit(repo) == f"{head} + uncommitted changes"
    assert git_commit(repo / "sweeps" / "s") == f"{head} + uncommitted changes"
    prov = provenance(repo / "sweeps" / "s", [])  # what `ablate report` shows with no launch recorded
    assert prov["commit"].startswith(f"{head} + uncommitted changes (the sweep folder's checkout today")
    event = launch_event("b1", SimpleNamespace(path=repo / "mine.yaml"), "ablate sweep mine.yaml")
    assert event["commit"] == f"{head} + uncommitted changes"
    assert sorted(p.name for p in marks.iterdir()) == []
    # the checkout is as hostile as it says: git itself runs the filter. `git hash-object` always cleans the file;
    # `git status` only when the index cannot tell the change by size and time (which depends on the clock)
    git(repo, "hash-object", "notes.txt")
    assert "clean" in {p.name for p in marks.iterdir()}


def test_an_unchanged_checkout_and_a_file_outside_the_index(tmp_path):
    repo, head, _ = hostile_checkout(tmp_path)
    (repo / "notes.txt").write_text("first\n")  # back as committed: same size, another time stamp (hashed)
    assert git_commit(repo / "mine.yaml") == head
    (repo / "new.yaml").write_text("base: base\n")
    assert git_commit(repo / "new.yaml") == f"{head} + uncommitted changes"  # the sweep file is not committed


def test_branches_packed_refs_detached_heads_and_worktrees_read_as_git_does(tmp_path):
    repo, head, _ = hostile_checkout(tmp_path)
    (repo / "notes.txt").write_text("first\n")
    (repo / ".gitattributes").unlink()
    git(repo, "config", "--unset", "filter.evil.clean")
    git(repo, "pack-refs", "--all")
    assert not any((repo / ".git" / "refs" / "heads").iterdir()) and git_commit(repo) == head
    git(repo, "commit", "-qam", "second", "--allow-empty", "--no-verify")
    second = git(repo, "rev-parse", "HEAD")
    assert second != head and git_commit(repo) == second  # a loose ref newer than packed-refs
    git(repo, "update-index", "--index-version", "4")
    assert git_commit(repo) == second
    git(repo, "-c", "core.hooksPath=/dev/null", "worktree", "add", "-q", "--detach", str(tmp_path / "wt"), head)
    assert git_commit(tmp_path / "wt") == head
    (tmp_path / "wt" / "mine.yaml").write_text("grid: {}\n")
    assert git_commit(tmp_path / "wt" / "mine.yaml") == f"{head} + uncommitted changes"


@pytest.mark.parametrize("odd", ["fifo", "link", "ref-escape", "not-a-commit", "huge"])
def test_odd_git_files_read_as_unknown_without_blocking(tmp_path, odd):
    repo, _, _ = hostile_checkout(tmp_path)
    dot = repo / ".git"
    if odd == "fifo":
        (dot / "HEAD").unlink()
        os.mkfifo(dot / "HEAD")
    elif odd == "link":
        secret = tmp_path / "elsewhere"
        secret.write_text("0" * 40 + "\n")
        (dot / "refs" / "heads" / "main").unlink(missing_ok=True)
        (dot / "refs" / "heads" / "master").unlink(missing_ok=True)
        (dot / "HEAD").write_text("ref: refs/heads/main\n")
        (dot / "refs" / "heads" / "main").symlink_to(secret)
    elif odd == "ref-escape":
        (tmp_path / "x").write_text("1" * 40 + "\n")
        (dot / "HEAD").write_text("ref: refs/../../../x\n")
    elif odd == "not-a-commit":
        (dot / "HEAD").write_text("hello\n")
    else:
        (dot / "HEAD").write_bytes(b"ref: refs/heads/" + b"a" * (1 << 20) + b"\n")
    assert git_commit(repo) is None


# ---- composition stays inside the recipe folders ----


def project(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the recipes, and beside it a loss option file outside the folder holding MARKER."""
    d = tmp_path / "proj" / "recipes"
    shutil.copytree(RECIPES_DIR, d)
    outside = tmp_path / "proj" / "outside"
    outside.mkdir()
    (outside / "far.yaml").write_text(f"name: dapo\neps_low: {MARKER}\neps_high: 0.28\n")
    return d, outside


def refused(args: list[str], kind: ErrorKind, *culprits: str) -> str:
    """jobs.one_error for `ablate ARGS`, and nothing of the file outside the folder in the output."""
    res = runner.invoke(app, args)
    assert MARKER not in res.output
    return one_error(res, kind, *culprits)


def test_a_group_option_on_the_command_line_cannot_leave_the_folder(tmp_path):
    d, _ = project(tmp_path)
    options = "cispo, dapo, grpo, gspo"  # the options it may name
    refused(
        ["show", str(d / "base.yaml"), "loss=../../outside/far"],
        ErrorKind.RECIPE,
        "loss=../../outside/far",
        str(d),
        options,
    )
    far = f"loss={tmp_path}/proj/outside/far"
    refused(["show", str(d / "base.yaml"), far], ErrorKind.RECIPE, far, options)
    refused(["show", str(d / "base.yaml"), "+../outside/far=x"], ErrorKind.RECIPE, "+../outside/far=x")
    ok = runner.invoke(app, ["show", str(d / "base.yaml"), "loss=dapo", "task.path=../data/x.jsonl"])
    assert ok.exit_code == 0 and "x.jsonl" in ok.output, ok.output  # a path as a value is still a value


@pytest.mark.parametrize(
    "entry", ["override loss: ../../outside/far", "loss@loss: [../../outside/far]", "/../outside/far"]
)
def test_a_defaults_entry_cannot_leave_the_folder(tmp_path, entry):
    d, _ = project(tmp_path)
    evil = d / "evil.yaml"
    evil.write_text(f"defaults:\n  - base\n  - {entry}\n  - _self_\n")
    refused(["show", str(evil)], ErrorKind.RECIPE, f"{evil}:3", "../outside/far")
    refused(
        ["show", str(d / "base.yaml")], ErrorKind.RECIPE, f"{evil}:3"
    )  # every file of the folder is checked, used or not


def test_a_sweep_files_axis_cannot_leave_the_folder(tmp_path):
    d, _ = project(tmp_path)
    sweep = tmp_path / "proj" / "s.yaml"
    sweep.write_text(f"base: {d / 'base.yaml'}\nseeds: [0]\ngrid:\n  loss: [dapo, ../../outside/far]\n")
    root = tmp_path / "sweeps"
    refused(["sweep", str(sweep), "--dry-run", "--root", str(root)], ErrorKind.RECIPE, "loss=../../outside/far")
    refused(["show", str(sweep), "loss=../../outside/far"], ErrorKind.RECIPE, "loss=../../outside/far")
    sweep.write_text(f"base: {d / 'base.yaml'}\nseeds: [0]\nruns:\n  - [loss=../../outside/far]\n")
    refused(["sweep", str(sweep), "--dry-run", "--root", str(root)], ErrorKind.RECIPE, "loss=../../outside/far")
    assert not root.exists()


def test_a_link_in_the_recipes_folder_cannot_lead_out_of_it(tmp_path):
    d, outside = project(tmp_path)
    shutil.copytree(d / "loss", outside / "loss")
    (outside / "loss" / "dapo.yaml").write_text(f"name: dapo\neps_low: {MARKER}\neps_high: 0.28\n")
    shutil.rmtree(d / "loss")
    (d / "loss").symlink_to(outside / "loss", target_is_directory=True)  # its files skipped every check
    refused(["show", str(d / "base.yaml"), "loss=dapo"], ErrorKind.FILE, str(d / "loss"), str(outside / "loss"))
    (d / "loss").unlink()
    shutil.copytree(RECIPES_DIR / "loss", d / "loss")
    (d / "loss" / "far.yaml").symlink_to(outside / "far.yaml")
    refused(
        ["show", str(d / "base.yaml"), "loss=far"],
        ErrorKind.FILE,
        str(d / "loss" / "far.yaml"),
        str(outside / "far.yaml"),
    )
    (d / "loss" / "far.yaml").unlink()
    (d / "loss" / "near.yaml").symlink_to(d / "loss" / "dapo.yaml")  # a link that stays inside is fine
    (d / "notes.md").symlink_to(outside / "far.yaml")  # and so is one Hydra never reads (not YAML, not a folder)
    ok = runner.invoke(app, ["show", str(d / "base.yaml"), "loss=near"])
    assert ok.exit_code == 0, ok.output


def test_a_project_from_ablate_init_and_the_packaged_recipes_still_compose(tmp_path):
    res = runner.invoke(app, ["init", str(tmp_path / "mine")])
    assert res.exit_code == 0, res.output
    for recipe in (tmp_path / "mine" / "recipes" / "base.yaml", RECIPES_DIR / "base.yaml"):
        args = ["loss=dapo", "preset=scalerl_8b", "model.path=/m", "task.path=/t.jsonl"]  # `override /model: hf`
        ok = runner.invoke(app, ["show", str(recipe), *args])
        assert ok.exit_code == 0 and "eps_high" in ok.output, ok.output
