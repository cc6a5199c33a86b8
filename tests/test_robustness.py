"""Bad input, faults and hostile files on the sweep / launch / train side: one line and exit 2 for bad input, nothing
lost or stale after a fault, no code run from a file someone else wrote. (The fit side's bad input is tested in
tests/fit/.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.recipe import compose_run
from ablate.config.schema import ConfigErrors
from ablate.errors import ErrorKind
from ablate.launch.status import sweep_status
from ablate.storage import fs, store
from ablate.storage.ledger import Ledger
from ablate.storage.rundir import DirectoryGone, RunDir
from ablate.train import run
from jobs import RECIPE, SMALL_TRAIN, TOY_JOB, error_kind, one_error, refused, small_config, toy_sweep, until

RECIPES = RECIPE.parent
runner = CliRunner()


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


# ---- bad input ----


def test_train_out_at_a_file_under_a_file_or_holding_an_unreadable_config(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for out in (f, f / "run"):
        one_error(
            runner.invoke(app, ["train", str(RECIPE), *SMALL_TRAIN, "--run-dir", str(out)]),
            ErrorKind.FILE,
            str(out),
            "--run-dir",
        )
    assert f.read_text() == "x"
    d = tmp_path / "other"
    d.mkdir()
    (d / "config.yaml").write_bytes(b"\xff\xfe: [")
    one_error(
        runner.invoke(app, ["train", str(RECIPE), *SMALL_TRAIN, "--run-dir", str(d)]),
        ErrorKind.FILE,
        str(d / "config.yaml"),
        "UnicodeDecodeError",
    )
    assert sorted(p.name for p in d.iterdir()) == ["config.yaml"]  # nothing written beside it


def test_threads_max_parallel_and_job_are_checked_before_anything_runs(tmp_path):
    one_error(runner.invoke(app, ["train", str(RECIPE), "--threads", "0"]), ErrorKind.SETTING, "--threads 0")
    loss = str(RECIPES / "loss.yaml")
    one_error(
        runner.invoke(app, ["sweep", loss, "--root", str(tmp_path), "--max-parallel", "0"]),
        ErrorKind.SETTING,
        "--max-parallel 0",
    )
    one_error(
        runner.invoke(app, ["sweep", loss, "--root", str(tmp_path), "--job", "no_such_module:run"]),
        ErrorKind.SETTING,
        "--job",
        "no_such_module:run",
        "ModuleNotFoundError",
    )
    one_error(
        runner.invoke(app, ["sweep", loss, "--root", str(tmp_path), "--job", "ablate.train:nope"]),
        ErrorKind.SETTING,
        "--job",
        "ablate.train:nope",
        "'nope'",
    )
    assert not (tmp_path / "loss").exists()  # nothing launched, nothing written


def test_out_of_range_and_non_finite_values_are_refused_by_validation():
    for override, culprits in (
        ("seed=99999999999999999999999", ("seed", "99999999999999999999999", "4294967295")),
        ("optim.lr=inf", ("optim.lr",)),  # ("inf" alone would be found in "finite")
        ("loss.eps_max=nan", ("loss.eps_max", "nan")),
        ("train.max_steps=99999999999999999999999", ("train.max_steps", "99999999999999999999999")),
    ):
        with refused(ErrorKind.RECIPE, *culprits) as e:
            compose_run(RECIPE, [override])
        assert isinstance(e.value, ConfigErrors), override  # refused by validation
    res = runner.invoke(app, ["sweep", str(RECIPES / "loss.yaml"), "seed=0,4294967296", "--dry-run"])
    one_error(res, ErrorKind.RECIPE, "seed=0,4294967296", "[0, 4294967295]")


def test_an_empty_sweep_file_and_a_sweep_name_that_is_not_a_plain_name(tmp_path):
    (tmp_path / "base.yaml").write_text(RECIPE.read_text())
    for f in (RECIPES / "loss").parent.iterdir():
        if f.is_dir():
            shutil.copytree(f, tmp_path / f.name)
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    one_error(runner.invoke(app, ["sweep", str(empty), "--dry-run"]), ErrorKind.RECIPE, str(empty), "base: base")
    dots = tmp_path / "...yaml"
    dots.write_text("base: base\ngrid: {loss: [grpo]}\n")
    root = tmp_path / "root"
    one_error(
        runner.invoke(app, ["sweep", str(dots), "--root", str(root), "--job", TOY_JOB]),
        ErrorKind.RECIPE,
        str(dots),
        "'..'",
    )
    assert not root.exists() and not (tmp_path / "runs").exists()


def test_markup_in_labels_and_values_is_printed_literally(tmp_path):
    res = runner.invoke(app, ["sweep", str(RECIPES / "loss.yaml"), "task.path='[/]','x[bold]y'", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "task.path='[/]'" in res.output and "task.path='x[bold]y'" in res.output
    led = Ledger(tmp_path / "m")
    led.append(
        {
            "event": "submitting",
            "run_id": "r1",
            "batch": "b",
            "label": "[bold]x[/],seed=0",
            "executor": "local",
            "launcher": {"pid": 1, "start": 1},
        },
        {"event": "failed", "run_id": "r1", "batch": "b", "cause": "exception", "error": "E: [/] broke"},
    )
    res = runner.invoke(app, ["status", "m", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "[bold]x[/],seed=0" in res.output and "E: [/] broke" in res.output


def test_slurm_without_a_controller_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither scontrol nor sbatch
    res = runner.invoke(app, ["sweep", str(RECIPES / "loss.yaml"), "--root", str(tmp_path / "r"), "-e", "slurm"])
    one_error(res, ErrorKind.ENVIRONMENT, "-e slurm", "scontrol ping", "-e local")
    assert not (tmp_path / "r").exists()


def test_ledger_lines_with_wrong_types_or_hostile_run_ids_are_ignored(tmp_path):
    sdir = tmp_path / "toy"
    led = Ledger(sdir)
    led.append(
        {
            "event": "submitting",
            "run_id": "ok1",
            "batch": "b",
            "label": "a,seed=0",
            "executor": "local",
            "launcher": "nope",
            "max_steps": "ten",
        },
        {"event": "started", "run_id": "ok1", "batch": "b", "pid": "x", "attempt": [1], "job_id": {"a": 1}},
    )
    with open(led.path, "a") as f:
        f.write('{"event": "started", "run_id": "ok1", "batch": "b", "t": "yesterday"}\n[1, 2]\n"text"\n')
    led.append(
        {"event": "finished", "run_id": "ok1", "batch": "b", "status": 3},
        {"event": "submitting", "run_id": "../../escape", "batch": "b", "label": "x"},
        {"event": "submitting", "run_id": 7, "batch": "b"},
        {"event": "preempted", "run_id": "ok1", "batch": ["b"], "requeue": "yes"},
    )
    recs = led.fold()
    assert list(recs) == ["ok1"] and recs["ok1"].state == "done"  # an ill-typed status reads as done
    [st] = sweep_status(tmp_path, "toy")
    assert st.run_id == "ok1" and st.max_steps is None
    sw = toy_sweep(tmp_path, arms=("a",), seeds=(0,))
    from ablate.launch.submit import launch_sweep

    launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    assert not (tmp_path.parent / "escape").exists() and not (tmp_path / "escape").exists()


def test_status_reads_past_damaged_metrics_lines(tmp_path):
    led = Ledger(tmp_path / "s")
    led.append(
        {
            "event": "submitting",
            "run_id": "r1",
            "batch": "b",
            "label": "a,seed=0",
            "executor": "local",
            "launcher": {"pid": 1, "start": 1},
            "max_steps": 10,
        },
        {"event": "finished", "run_id": "r1", "batch": "b", "status": "done"},
    )
    path = RunDir.of(tmp_path, "s", "r1").metrics_path
    path.parent.mkdir(parents=True)
    path.write_bytes(
        b'{"step": 2, "val_pass_rate": 0.5}\n\xff\xfe\n{"step": null, "val_pass_rate": "high", '
        b'"gpu_hours": "x", "truncation_rate": null}\n'
    )
    res = runner.invoke(app, ["status", "s", "--root", str(tmp_path)])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    [st] = sweep_status(tmp_path, "s")
    assert (st.step, st.val_pass_rate, st.gpu_hours) == (None, None, None)


@pytest.mark.parametrize("group_read", [False, True])
def test_a_run_is_owner_only_unless_group_read_is_asked_for(tmp_path, group_read):
    """Owner-only by default, group read (never write) when asked; a file is never more open than its folder."""
    old = os.umask(0o022)
    try:
        d = tmp_path / "r"
        if group_read:
            fs.make_dirs(d, fs.dir_mode(group_read=True))  # what `ablate train --group-read` does first
        run(small_config("train.max_steps=2"), d)
    finally:
        os.umask(old)
    for name in ("config.yaml", "run.json", "metrics.jsonl", "ckpt/last.pt"):
        assert (d / name).stat().st_mode & 0o777 == (0o640 if group_read else 0o600), name
    for folder in (d, d / "ckpt", d / "logs"):
        assert folder.stat().st_mode & 0o777 == (0o750 if group_read else 0o700), folder


# ---- faults ----


def test_a_second_writer_on_a_run_directory_is_refused(tmp_path):
    d = tmp_path / "r"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from ablate.storage.rundir import RunDir\n"
                "with RunDir(sys.argv[1]).writer():\n    print('writing', flush=True); time.sleep(600)"
            ),
            str(d),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "writing"
        with refused(ErrorKind.STATE, str(d), f"pid {holder.pid}"):
            run(small_config(), d)
        assert not (d / "config.yaml").exists() and not (d / "metrics.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    assert run(small_config(), d)["status"] == "done"  # the kernel released the lock with its holder


@pytest.mark.parametrize("how", ["replaced", "removed"])
def test_a_writer_whose_directory_is_replaced_or_removed_writes_nothing_more(tmp_path, how):
    """`make clean` or `rm -rf` while a run trains, then a new launch: the old writer must not write into the new
    directory at that path (its metrics would interleave with the new run's)."""
    d = tmp_path / "r"
    rd = RunDir(d)
    with rd.writer():
        rd.append_metrics({"step": 0})
        if how == "replaced":
            d.rename(tmp_path / "moved")
            d.mkdir()
        else:
            shutil.rmtree(d)
        for write in (
            lambda: rd.append_metrics({"step": 2}),
            lambda: rd.progress(step=2),
            lambda: rd.keep_metrics_until(0),
            lambda: rd.ended("done"),
        ):
            with refused(ErrorKind.STATE, str(d)) as e:
                write()
            assert isinstance(e.value, DirectoryGone)
    if how == "replaced":
        assert list(d.iterdir()) == []
        assert [r["step"] for r in store.read_jsonl(tmp_path / "moved" / "metrics.jsonl")] == [0]
    else:
        assert not d.exists()


def test_a_run_json_write_under_way_when_the_directory_is_replaced_lands_in_the_old_one(tmp_path, monkeypatch):
    """The replacement comes after the writer's check and before its write (the window a busy machine opens): the
    write goes through the locked directory, so the new directory at the path gets no run.json at all."""
    d = tmp_path / "r"
    rd = RunDir(d)
    with rd.writer():
        rd.started(pid=os.getpid())
        real_guard = rd.guard

        def replaced_after_the_check() -> None:
            real_guard()
            d.rename(tmp_path / "moved")
            d.mkdir()
            monkeypatch.setattr(rd, "guard", real_guard)

        monkeypatch.setattr(rd, "guard", replaced_after_the_check)
        rd.progress(step=2)
    assert list(d.iterdir()) == []
    moved = store.read_json(tmp_path / "moved" / "run.json")
    assert moved["status"] == "running" and moved["pid"] == os.getpid()


def test_a_run_whose_directory_is_replaced_stops_with_one_line(tmp_path):
    """End to end: `ablate train` on a run far too long to finish; once it has written evaluations its directory is
    moved away and a new one made at its path. The run stops with one line and exit 2, and never says in the new
    directory that it is running or done."""
    d = tmp_path / "r"
    cmd = [
        sys.executable,
        "-m",
        "ablate",
        "train",
        str(RECIPE),
        *SMALL_TRAIN,
        "train.max_steps=1000000",
        "train.eval_every=2",
        "--run-dir",
        str(d),
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    until(lambda: (d / "metrics.jsonl").exists() and len(store.read_jsonl(d / "metrics.jsonl")) >= 2, "2 evaluations")
    d.rename(tmp_path / "moved")
    d.mkdir(exist_ok=True)  # (a write already under way may have made it again)
    try:
        out, _ = p.communicate(timeout=300)
    finally:
        p.kill()
    assert p.returncode == 2, out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("error[")]
    assert error_kind(line) is ErrorKind.STATE and str(d) in line and "Traceback" not in out, out
    meta = store.read_json(d / "run.json") if (d / "run.json").exists() else {}
    assert "status" not in meta, meta  # at most a progress write that was already under way
    assert len(store.read_jsonl(tmp_path / "moved" / "metrics.jsonl")) >= 2


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(tmp_path):
    d = tmp_path / "r"
    cfg = small_config("train.checkpoint_every=2", "train.max_steps=6")
    run(cfg, d)  # checkpoints at 2, 4, 6: last.pt is step 6, prev.pt step 4
    (d / "ckpt" / "last.pt").write_bytes((d / "ckpt" / "last.pt").read_bytes()[:100])  # torn
    summary = run(cfg, d)
    assert summary["status"] == "done" and store.read_json(d / "run.json")["resumed_from"] == 4
    assert [r["step"] for r in store.read_jsonl(d / "metrics.jsonl")] == [0, 2, 4, 6]
    for name in ("last.pt", "prev.pt"):
        (d / "ckpt" / name).write_bytes(b"")
    with refused(ErrorKind.STATE, str(d / "ckpt"), "last.pt", "prev.pt"):
        run(cfg, d)
    assert store.read_json(d / "run.json")["status"] == "failed"


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {MARK}",))


MARK = Path("/tmp") / f"ablate-test-pwned-{os.getpid()}"


def test_a_crafted_checkpoint_cannot_run_code_on_resume(tmp_path):
    d = tmp_path / "r"
    cfg = small_config()
    run(cfg, d)
    MARK.unlink(missing_ok=True)
    for name in ("last.pt", "prev.pt"):
        torch.save({"step": 6, "model": _Payload()}, d / "ckpt" / name)
    with refused(ErrorKind.STATE, str(d / "ckpt"), "last.pt", "prev.pt", "UnpicklingError"):
        run(cfg, d)
    assert not MARK.exists(), "loading a checkpoint ran code"


def test_a_torn_metrics_line_is_written_again_on_resume(tmp_path):
    d = tmp_path / "r"
    cfg = small_config("train.checkpoint_every=2", "train.max_steps=4")
    run(cfg, d)
    full = (d / "metrics.jsonl").read_text().splitlines()
    # the process died while appending the evaluation of step 4, after checkpoint 4 (the next run resumes there)
    (d / "metrics.jsonl").write_text("\n".join(full[:-1]) + "\n" + full[-1][:20])
    (d / "run.json").write_text(json.dumps({"status": "running"}))
    cfg6 = small_config("train.checkpoint_every=2", "train.max_steps=4")
    assert run(cfg6, d)["status"] == "done"
    assert (d / "metrics.jsonl").read_text().splitlines() == full  # the same line, not a gap


@pytest.fixture
def tiny_disk(tmp_path):
    """A 160 KiB tmpfs: room for a run's small files, not for its checkpoints (needs root, as `make test` has)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(
            f"cannot mount a tmpfs for the full-disk test ({res.stderr.strip()}); run the suite as root "
            "(make test does)",
            pytrace=False,
        )
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_is_one_error_and_leaves_nothing_stale(tiny_disk):
    d = tiny_disk / "r"
    res = runner.invoke(app, ["train", str(RECIPE), *SMALL_TRAIN, "--run-dir", str(d)])
    one_error(res, ErrorKind.ENVIRONMENT, str(d), stream="stderr")
    info = store.read_json(d / "run.json")
    assert (info["status"], info["cause"]) == ("failed", "no_space")
    leftovers = [p.name for p in (d / "ckpt").iterdir()] if (d / "ckpt").exists() else []
    assert not [n for n in leftovers if n.endswith(".tmp")]


# ---- hostile files ----


def test_a_recipe_cannot_name_a_slurm_profile(tmp_path):
    with refused(ErrorKind.RECIPE, "launcher.profile") as e:
        compose_run(RECIPE, ["launcher.profile=/tmp/evil.yaml"])
    assert isinstance(e.value, ConfigErrors)
    f = tmp_path / "evil.yaml"
    f.write_text(f"base: {RECIPE}\ngrid: {{loss: [grpo]}}\noverrides: [launcher.profile=/tmp/evil.yaml]\n")
    one_error(runner.invoke(app, ["sweep", str(f), "--dry-run"]), ErrorKind.RECIPE, "launcher.profile")


def test_recipes_may_not_call_resolvers_and_the_compose_cache_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    with refused(ErrorKind.RECIPE, "task.path", "${oc.env:SECRET_TOKEN}") as e:
        compose_run(RECIPE, ["task.path=${oc.env:SECRET_TOKEN}"])
    assert isinstance(e.value, ConfigErrors)
    assert compose_run(RECIPE, ["train.eval_k=${batch.generations}"]).train.eval_k == 8  # keys may be interpolated
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    from ablate.compose.hydra import Composer

    Composer._memory.clear()
    honest = compose_run(RECIPE, ["optim.lr=1e-4"])
    entries = list((tmp_path / "cache" / "compose").iterdir())
    assert entries and all(p.stat().st_mode & 0o077 == 0 for p in entries)  # private to its user
    for p in entries:  # someone else rewrites the cache: a world-writable entry is not trusted
        data = json.loads(p.read_text())
        data["optim"]["lr"] = 0.5
        p.write_text(json.dumps(data))
        p.chmod(0o666)
    Composer._memory.clear()
    assert compose_run(RECIPE, ["optim.lr=1e-4"]) == honest
