"""The threat model of a sweep directory: it is safe when only its owner can write it.

So ablate makes its directories owner-only (0700; 0750 with --group-read), refuses to launch into a directory
someone else could change, refuses to load code (a runner's queue, cached weights) from a file that is not private,
and follows no symbolic link inside a sweep: each planted link below leaves the file it points to byte-identical
and is refused in one line (or, for a background writer, recorded as the run's failure naming the link). Tests run
as root, which bypasses permission bits, so "another user" is a chown to uid 65534 and modes are checked
explicitly.
"""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import ErrorKind
from ablate.launch.local import run_queue
from ablate.launch.submit import launch_sweep
from ablate.storage import fs, ownership, store
from ablate.storage.ledger import Ledger
from ablate.storage.rundir import RunDir
from ablate.train import run
from ablate.train.checkpoint import Checkpoints
from jobs import RECIPE, SMALL_TRAIN, TOY_JOB, one_error, refused, small_config, toy_sweep

runner = CliRunner()
SECRET = b"private key material\n"


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def one_line(exc: pytest.ExceptionInfo, *parts: str) -> str:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    for p in parts:
        assert p in msg, (p, msg)
    return msg


def outside(tmp_path: Path, name: str = "victim") -> Path:
    """A private file outside every sweep: what a planted link points at."""
    f = tmp_path / "elsewhere" / name
    f.parent.mkdir(exist_ok=True)
    f.write_bytes(SECRET)
    f.chmod(0o600)
    return f


def mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


# ---- 1. directories: owner-only, or group-readable when asked ----


@pytest.mark.parametrize("group_read", [False, True])
def test_a_sweep_is_made_owner_only_or_group_readable_when_asked(tmp_path, group_read):
    old = os.umask(0o002)  # a umask that would make group-writable directories
    try:
        sw = toy_sweep(tmp_path / "root", arms=("a",), seeds=(0,))
        (tmp_path / "root" / "toy" / "toy.json").unlink()
        (tmp_path / "root" / "toy").rmdir()  # let the launch make the sweep directory itself
        launch_sweep(sw, root=tmp_path / "root", executor="debug", job=TOY_JOB, echo=None, group_read=group_read)
    finally:
        os.umask(old)
    sdir = tmp_path / "root" / "toy"
    want = 0o750 if group_read else 0o700
    for d in (sdir, sdir / "runs", sdir / "runs" / "toy-a0", sdir / "jobs", sdir / "launch"):
        assert mode(d) == want, (d, oct(mode(d)))
    # what submitit made on its own (jobs/<id>/, its pickle) is no more open than the sweep, whatever the umask
    made = [Path(d) for d, _, _ in os.walk(sdir)] + [Path(d) / f for d, _, fs in os.walk(sdir) for f in fs]
    assert any(p.name.endswith("_submitted.pkl") for p in made) or any(p.parent.name == "jobs" for p in made)
    assert len([p for p in made if p.parent.name == "jobs"]) >= 1
    for p in made:
        assert mode(p) & 0o022 == 0 and mode(p) & 0o007 == 0, (p, oct(mode(p)))
    assert store.read_json(sdir / "runs" / "toy-a0" / "run.json")["status"] == "done"
    assert mode(sdir / "runs" / "toy-a0" / "run.json") & 0o022 == 0  # files: never writable by others


def test_group_read_opens_an_existing_owner_only_sweep_to_the_group_but_never_for_writing(tmp_path):
    sw = toy_sweep(tmp_path, arms=("a",), seeds=(0,))
    launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    sdir = tmp_path / "toy"
    assert mode(sdir) == 0o700 and mode(sdir / "runs" / "toy-a0") == 0o700
    launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None, group_read=True)
    for d in (sdir, sdir / "runs", sdir / "runs" / "toy-a0", sdir / "jobs"):
        assert mode(d) == 0o750, (d, oct(mode(d)))


def test_make_dirs_ignores_a_permissive_umask_and_inherits_the_parent_s_privacy(tmp_path):
    old = os.umask(0)
    try:
        top = fs.make_dirs(tmp_path / "a" / "sweep", fs.DIR_MODE)
        inner = fs.make_dirs(top / "runs" / "r1")
    finally:
        os.umask(old)
    assert mode(top) == 0o700 and mode(top / "runs") == 0o700 and mode(inner) == 0o700
    assert mode(tmp_path / "a") & 0o022 == 0  # a folder above it: never writable by others either


def test_train_group_read_makes_the_run_directory_group_readable(tmp_path):
    out = tmp_path / "run"
    res = runner.invoke(
        app, ["train", str(RECIPE), *SMALL_TRAIN, "train.max_steps=2", "--run-dir", str(out), "--group-read"]
    )
    assert res.exit_code == 0, res.output
    for d in (out, out / "ckpt", out / "logs"):
        assert mode(d) == 0o750, (d, oct(mode(d)))
    assert "--group-read" in runner.invoke(app, ["train", "--help"]).output
    assert "--group-read" in runner.invoke(app, ["sweep", "--help"]).output


# ---- 2. launching into a directory someone else could change ----


@pytest.mark.parametrize("bits", [0o777, 0o770, 0o702])
def test_a_sweep_directory_others_can_write_is_refused_before_anything_is_written(tmp_path, bits):
    sw = toy_sweep(tmp_path, arms=("a",), seeds=(0,))
    sdir = tmp_path / "toy"
    sdir.chmod(bits)
    os.chown(sdir, os.getuid(), 65534)  # a group others are in (nogroup), not the user's private group
    before = sorted(p.name for p in sdir.iterdir())
    with refused(ErrorKind.FILE) as e:
        launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    one_line(e, str(sdir), f"{bits:04o}", f"chmod go-w {sdir}")
    assert sorted(p.name for p in sdir.iterdir()) == before  # no ledger, no runs/


def test_a_sweep_directory_another_user_owns_is_refused(tmp_path):
    sw = toy_sweep(tmp_path, arms=("a",), seeds=(0,))
    sdir = tmp_path / "toy"
    os.chown(sdir, 65534, 65534)
    with refused(ErrorKind.FILE) as e:
        launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    one_line(e, str(sdir), "nobody", "--run-dir")
    assert not (sdir / "ledger.jsonl").exists()


def test_a_root_others_can_write_without_the_sticky_bit_is_refused_and_a_sticky_one_is_not(tmp_path):
    root = tmp_path / "root"
    sw = toy_sweep(root, arms=("a",), seeds=(0,))
    root.chmod(0o777)
    with refused(ErrorKind.FILE) as e:
        launch_sweep(sw, root=root, executor="debug", job=TOY_JOB, echo=None)
    one_line(e, str(root), str(root / "toy"), f"chmod go-w {root}", "chmod +t")
    assert not (root / "toy" / "ledger.jsonl").exists()
    root.chmod(0o1777)  # as /tmp: others cannot rename what they do not own
    launch_sweep(sw, root=root, executor="debug", job=TOY_JOB, echo=None)
    assert store.read_json(root / "toy" / "runs" / "toy-a0" / "run.json")["status"] == "done"


def test_cli_sweep_into_a_world_writable_sweep_directory_is_one_line(tmp_path):
    sdir = tmp_path / "loss"
    sdir.mkdir()
    sdir.chmod(0o777)
    res = runner.invoke(
        app, ["sweep", str(RECIPE.parent / "loss.yaml"), "--root", str(tmp_path), "-e", "debug", "--job", TOY_JOB]
    )
    one_error(res, ErrorKind.FILE, str(sdir), "chmod go-w")
    assert list(sdir.iterdir()) == []


@pytest.mark.parametrize("how", ["writable", "foreign"])
def test_cli_train_into_a_directory_someone_else_controls_is_one_line(tmp_path, how):
    out = tmp_path / "run"
    out.mkdir()
    if how == "writable":
        out.chmod(0o777)
    else:
        os.chown(out, 65534, 65534)
    res = runner.invoke(app, ["train", str(RECIPE), *SMALL_TRAIN, "--run-dir", str(out)])
    one_error(res, ErrorKind.FILE, str(out), f"chmod go-w {out}" if how == "writable" else "nobody")
    assert list(out.iterdir()) == []


# ---- 3. no link inside a sweep is followed ----


def test_a_link_planted_at_the_checkpoint_temp_file_is_refused_and_its_target_untouched(tmp_path):
    victim = outside(tmp_path)
    ckpt = tmp_path / "r" / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "last.pt.tmp").symlink_to(victim)
    with refused(ErrorKind.FILE) as e:
        Checkpoints(ckpt).save({"step": 1})
    one_line(e, str(ckpt / "last.pt.tmp"))
    assert isinstance(e.value, fs.LinkRefused)
    assert victim.read_bytes() == SECRET
    assert not (ckpt / "last.pt").exists()


def test_a_linked_checkpoint_is_refused_not_loaded(tmp_path):
    ckpt = tmp_path / "r" / "ckpt"
    ckpt.mkdir(parents=True)
    real = tmp_path / "elsewhere.pt"
    torch.save({"step": 3}, real)
    (ckpt / "last.pt").symlink_to(real)
    with refused(ErrorKind.FILE) as e:
        Checkpoints(ckpt).resume(lambda state: None, fresh_ok=True)
    one_line(e, str(ckpt / "last.pt"))
    assert isinstance(e.value, fs.LinkRefused)
    assert (ckpt / "last.pt").is_symlink() and real.exists()  # not set aside as damaged either


def test_a_link_planted_at_train_log_is_refused_and_its_target_untouched(tmp_path):
    victim = outside(tmp_path)
    d = tmp_path / "r"
    (d / "logs").mkdir(parents=True)
    (d / "logs" / "train.log").symlink_to(victim)
    with refused(ErrorKind.FILE) as e:
        run(small_config("train.max_steps=2"), d)
    one_line(e, str(d / "logs" / "train.log"))
    assert isinstance(e.value, fs.LinkRefused)
    assert victim.read_bytes() == SECRET


def test_a_sweep_job_meeting_a_linked_train_log_records_a_failure_naming_it(tmp_path):
    from ablate.compose.spec import RunSpec
    from ablate.compose.sweep import Sweep

    victim = outside(tmp_path)
    cfg = small_config("train.max_steps=2").replace(**{"launcher.threads": 1})
    sw = Sweep(
        name="s",
        path=Path("s.yaml"),
        baseline="arm=a",
        seeds=[0],
        runs=[RunSpec("s", "arm=a,seed=0", "s-a0", "s-a", ("arm=a",), cfg, baseline=True)],
    )
    logs = fs.make_dirs(tmp_path / "s" / "runs" / "s-a0" / "logs")
    (logs / "train.log").symlink_to(victim)
    launch_sweep(sw, root=tmp_path, executor="debug", job="ablate.train:run", echo=None)
    assert victim.read_bytes() == SECRET
    meta = store.read_json(tmp_path / "s" / "runs" / "s-a0" / "run.json")
    assert meta["status"] == "failed" and meta["error"]["class"] == "LinkRefused", meta
    assert str(logs / "train.log") in meta["error"]["message"], meta
    ev = [e for e in Ledger(tmp_path / "s").events() if e["event"] == "failed"]
    assert len(ev) == 1 and str(logs / "train.log") in ev[0]["error"], ev


def test_a_linked_ledger_is_refused_and_its_target_gets_no_event(tmp_path):
    victim = outside(tmp_path)
    sw = toy_sweep(tmp_path, arms=("a",), seeds=(0,))
    (tmp_path / "toy" / "ledger.jsonl").symlink_to(victim)
    with refused(ErrorKind.FILE) as e:
        launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    one_line(e, str(tmp_path / "toy" / "ledger.jsonl"))
    assert isinstance(e.value, fs.LinkRefused)
    with refused(ErrorKind.FILE):
        Ledger(tmp_path / "toy").append({"event": "submitting", "run_id": "x", "batch": "b"})
    with refused(ErrorKind.FILE):
        Ledger(tmp_path / "toy").events()
    assert victim.read_bytes() == SECRET
    assert not (tmp_path / "toy" / "runs").exists()


def test_a_linked_run_directory_is_refused_and_the_run_does_not_land_elsewhere(tmp_path):
    sw = toy_sweep(tmp_path, arms=("a",), seeds=(0,))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "toy" / "runs").mkdir()
    (tmp_path / "toy" / "runs" / "toy-a0").symlink_to(elsewhere, target_is_directory=True)
    with refused(ErrorKind.FILE) as e:
        launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    one_line(e, str(tmp_path / "toy" / "runs" / "toy-a0"))
    assert isinstance(e.value, fs.LinkRefused)
    with refused(ErrorKind.FILE):  # and a job (or anyone) writing its run.json
        RunDir.of(tmp_path, "toy", "toy-a0").job(job_id="1")
    assert list(elsewhere.iterdir()) == []
    assert not (tmp_path / "toy" / "ledger.jsonl").exists()


def test_run_json_linked_to_a_private_file_is_refused_and_nothing_is_copied(tmp_path):
    victim = outside(tmp_path)
    victim.write_bytes(b'{"secret": "hunter2"}\n')
    rd = RunDir.of(tmp_path, "s", "r1")
    rd.path.mkdir(parents=True)
    rd.info_path.symlink_to(victim)
    with refused(ErrorKind.FILE) as e:
        rd.progress(step=1)
    one_line(e, str(rd.info_path))
    assert isinstance(e.value, fs.LinkRefused)
    assert victim.read_bytes() == b'{"secret": "hunter2"}\n' and rd.info_path.is_symlink()
    assert rd.info().raw == {}  # a reader takes the link as no run.json, not as its target's content


@pytest.mark.parametrize("writer", ["append_jsonl", "atomic_write_bytes", "update_json"])
def test_store_writers_refuse_a_link_at_their_path(tmp_path, writer):
    victim = outside(tmp_path)
    link = tmp_path / "f"
    link.symlink_to(victim)
    call = {
        "append_jsonl": lambda: store.append_jsonl(link, {"a": 1}),
        "atomic_write_bytes": lambda: store.atomic_write_bytes(link, b"x"),
        "update_json": lambda: store.update_json(link, a=1),
    }[writer]
    with pytest.raises(fs.LinkRefused):
        call()
    assert victim.read_bytes() == SECRET and link.is_symlink()


def test_metrics_jsonl_as_a_link_is_refused(tmp_path):
    victim = outside(tmp_path)
    rd = RunDir(tmp_path / "r")
    rd.path.mkdir()
    rd.metrics_path.symlink_to(victim)
    with refused(ErrorKind.FILE):
        rd.append_metrics({"step": 0})
    with refused(ErrorKind.FILE):
        rd.metric_lines()
    assert victim.read_bytes() == SECRET


# ---- 4. nothing that runs code is read from a place others could write ----


def _queue(tmp_path: Path) -> Path:
    sdir = fs.make_dirs(tmp_path / "sw", fs.DIR_MODE)
    q = fs.make_dirs(sdir / "launch") / "b.json"
    store.write_json(
        q,
        {
            "sweep_dir": str(sdir),
            "batch": "b",
            "max_parallel": 1,
            "timeout_min": 1,
            "max_requeues": 0,
            "signal_delay_s": 1,
            "jobs": [],
        },
    )
    return q


@pytest.mark.parametrize("how", ["link", "foreign", "writable", "folder_writable"])
def test_the_runner_refuses_a_queue_someone_else_could_have_written(tmp_path, how):
    q = _queue(tmp_path)
    if how == "link":
        real = tmp_path / "real.json"
        q.rename(real)
        q.symlink_to(real)
    elif how == "foreign":
        os.chown(q, 65534, 65534)
    elif how == "writable":
        q.chmod(0o666)
    else:
        q.parent.chmod(0o777)
    with refused(ErrorKind.FILE) as e:
        run_queue(q)
    one_line(e, str(q), {"link": "link", "foreign": "nobody", "writable": "0666", "folder_writable": "0777"}[how])
    assert not (tmp_path / "sw" / "jobs").exists()  # refused before the executor made anything


def test_a_private_queue_is_run(tmp_path):
    q = _queue(tmp_path)
    run_queue(q)  # an empty queue: returns at once
    assert mode(tmp_path / "sw" / "jobs") == 0o700


def test_a_cache_others_can_write_is_refused_for_warm_up_weights(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ABLATE_CACHE", str(cache))
    assert mode(fs.private_cache("warmup")) == 0o700 and mode(cache) == 0o700
    (cache / "warmup").chmod(0o777)
    with refused(ErrorKind.FILE) as e:
        fs.private_cache("warmup")
    one_line(e, str(cache / "warmup"), "ABLATE_CACHE")
    (cache / "warmup").chmod(0o700)
    os.chown(cache / "warmup", 65534, 65534)
    with refused(ErrorKind.FILE):
        fs.private_cache("warmup")


def test_private_ok_is_what_the_compose_cache_trusts(tmp_path):
    d = fs.make_dirs(tmp_path / "c", fs.DIR_MODE)
    f = d / "entry.json"
    store.write_json(f, {"a": 1})
    assert ownership.private_ok(f)
    f.chmod(0o666)
    assert not ownership.private_ok(f)
    f.chmod(0o644)
    d.chmod(0o777)
    assert not ownership.private_ok(f)
    d.chmod(0o700)
    link = d / "link.json"
    link.symlink_to(f)
    assert not ownership.private_ok(link)


def test_a_folder_only_the_users_private_group_can_write_is_the_users_own(tmp_path):
    """Under umask 002 (user private groups, as Debian and Red Hat make every account) folders are group-writable
    by the user's own group, which holds no one else: launching there is fine; the same bits for a shared group
    are refused."""
    me = pwd.getpwuid(os.getuid())
    assert grp.getgrgid(me.pw_gid).gr_name == me.pw_name  # this machine gives the user a private group
    sw = toy_sweep(tmp_path / "root", arms=("a",), seeds=(0,))
    for d in (tmp_path / "root", tmp_path / "root" / "toy"):
        d.chmod(0o775)
        os.chown(d, os.getuid(), me.pw_gid)
    launch_sweep(sw, root=tmp_path / "root", executor="debug", job=TOY_JOB, echo=None)
    assert store.read_json(tmp_path / "root" / "toy" / "runs" / "toy-a0" / "run.json")["status"] == "done"
    os.chown(tmp_path / "root" / "toy", os.getuid(), 65534)
    with refused(ErrorKind.FILE) as e:
        launch_sweep(sw, root=tmp_path / "root", executor="debug", job=TOY_JOB, echo=None, force=True)
    one_line(e, str(tmp_path / "root" / "toy"), "0775")
