"""`--track mlflow` against a real `mlflow server` (SQLite backend) started on localhost by the tests: the tracker
continues one MLflow run across a crash and a resume with each step once, ends it with the run's state, keeps its
default store under the sweep, fails fast when the server is down, and `ablate fit|rank` read the runs back."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from ablate.storage import store
from ablate.track import mlflow as tracker_mod
from ablate.track.base import ENVIRONMENT, TrackContext, set_environment
from ablate.track.fanout import WAIT_ENV
from ablate.track.mlflow import MlflowTracker
from jobs import SMALL_TRAIN, one_error, until

RECIPE = RECIPES_DIR / "base.yaml"

MLFLOW_BIN = Path(sys.executable).parent / "mlflow"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


ON_SERVER = pytest.mark.xdist_group("mlflow-server")
"""The tests that use the server run in one xdist worker (`make test` runs `--dist loadgroup`), so it starts once."""


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """A real tracking server (the .venv's `mlflow server`, one worker, a SQLite backend): its URI. Session-wide: a
    worker runs other modules' tests between these, which would stop and start a module-wide server each time (its
    start, the store's migrations included, takes a good part of a minute on 2 cores); every test makes runs of its
    own, so they share it safely."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    cmd = [str(MLFLOW_BIN), "server", "--backend-store-uri", f"sqlite:///{root / 'db'}", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--workers", "1", "--artifacts-destination", str(root / "artifacts")]
    with open(root / "server.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            until(lambda: proc.poll() is not None or _healthy(port), "the mlflow server's /health")
            assert proc.poll() is None, (root / "server.log").read_text()[-3000:]
            yield f"http://127.0.0.1:{port}"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # its store is thrown away: no need for a graceful stop
            proc.wait(timeout=60)


@pytest.fixture(autouse=True)
def _wait_for_trackers(monkeypatch):
    """A run's end waits for its trackers until they are done (it returns as soon as they are), so what the server
    holds is the same on a busy machine as on an idle one; the bounded wait is tested on the fan-out itself."""
    monkeypatch.setenv(WAIT_ENV, "3600")


@pytest.fixture(autouse=True)
def _mlflow_environment(monkeypatch):
    """The fan-out sets MLflow's HTTP limits and telemetry off for its process when unset: set here as it does, and
    restored after each test."""
    for var in ENVIRONMENT["mlflow"]:
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    set_environment(["mlflow"])


def _ctx(run_dir: Path, *, sweep_dir: Path | None = None, sweep: str = "sw", arm: str = "loss=grpo", seed: int = 0):
    return TrackContext(
        run_dir=run_dir,
        sweep_dir=sweep_dir,
        sweep=sweep,
        arm_id=f"id-{arm}",
        arm_label=arm,
        run_id=f"{arm}-{seed}",
        label=f"{arm},seed={seed}",
        config={"seed": seed, "train": {"lr": 1e-3, "max_steps": 9}, "loss": {"name": arm}, "note": "x" * 7000},
        options=SimpleNamespace(mlflow_uri=None),
    )


def _line(step: int, attempt: int) -> dict:
    return {"step": step, "val_pass_rate": 0.05 * step, "gpu_hours": step * 1e-3 + attempt, "ok": True, "src": "x"}


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@ON_SERVER
def test_a_resumed_attempt_continues_the_run_with_each_step_once(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    run_dir = tmp_path / "run"
    ctx = _ctx(run_dir)
    first = MlflowTracker()
    first.start(ctx, None)
    for step in range(7):
        first.log(_line(step, attempt=0))
    first.finish("preempted")
    saved = store.read_json(run_dir / "track" / "mlflow.json")
    client = MlflowClient(tracking_uri=server)
    run = client.get_run(saved["run_id"])
    assert saved["tracking_uri"] == server
    assert run.info.status == "KILLED" and run.data.tags["ablate.state"] == "preempted"
    assert run.info.run_name == "loss=grpo,seed=0"
    assert {k: run.data.tags[k] for k in tracker_mod.TAGS if k in run.data.tags} == {
        "ablate.arm_id": "id-loss=grpo",
        "ablate.arm": "loss=grpo",
        "ablate.run_id": "loss=grpo-0",
        "ablate.sweep": "sw",
        "ablate.baseline": "false",  # and no device tag: this context does not know it
    }
    assert run.data.params["train.lr"] == "0.001" and run.data.params["loss.name"] == "loss=grpo"
    assert run.data.params["note"] == "x" * tracker_mod.PARAM_VALUE_MAX  # cut to MLflow's limit, not refused
    assert client.get_experiment(run.info.experiment_id).name == "sw"

    client.delete_tag(saved["run_id"], "ablate.baseline")  # as a run created by a version that did not tag it
    second = MlflowTracker()  # a crash after step 6; this attempt resumed from the checkpoint at step 3
    second.start(replace(ctx, device="cpu"), 3)
    for step in range(4, 10):
        second.log(_line(step, attempt=1))
    second.finish("done")
    assert store.read_json(run_dir / "track" / "mlflow.json")["run_id"] == saved["run_id"]
    run = client.get_run(saved["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["ablate.state"] == "done"
    assert run.data.tags["ablate.baseline"] == "false" and run.data.tags["ablate.device"] == "cpu"  # tagged again
    hist = _history(client, saved["run_id"], "gpu_hours")
    assert [s for s, _ in hist] == list(range(10))  # each step once on the server
    assert [v for _, v in hist] == [s * 1e-3 + (s > 6) for s in range(10)]  # steps 4-6: the first attempt's
    assert set(run.data.metrics) == {"val_pass_rate", "gpu_hours"}  # a bool and a string are not metrics
    assert len(client.search_runs([run.info.experiment_id])) == 1

    res = CliRunner().invoke(app, ["fit", "mlflow:sw", "--x", "step", "--n-boot", "0", "--json"])
    assert res.exit_code == 0, res.output
    [fit] = json.loads(res.output)["fits"]
    assert fit["run"] == "loss=grpo,seed=0" and fit["group"] == "loss=grpo"


@ON_SERVER
def test_a_tracker_added_on_a_resume_first_sends_the_lines_kept(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    run_dir = tmp_path / "run"
    store.append_jsonl(run_dir / "metrics.jsonl", *(_line(step, attempt=0) for step in (0, 2, 4)))
    t = MlflowTracker()  # an attempt resumed at step 4, the first to mirror to MLflow
    t.start(_ctx(run_dir, sweep="added", arm="late"), 4)
    t.log(_line(4, attempt=1))  # the checkpoint's line, torn by the crash, appended again: already sent from the file
    for step in (6, 8):
        t.log(_line(step, attempt=1))
    t.finish("done")
    run_id = store.read_json(run_dir / "track" / "mlflow.json")["run_id"]
    hist = _history(MlflowClient(tracking_uri=server), run_id, "gpu_hours")
    assert hist == [(0, 0.0), (2, 0.002), (4, 0.004), (6, 1.006), (8, 1.008)]


@ON_SERVER
def test_each_end_state_ends_the_run_as_mlflow_says_it(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    client = MlflowClient(tracking_uri=server)
    for state in ("failed", "diverged", "unstable", "pruned"):
        t = MlflowTracker()
        t.start(_ctx(tmp_path / state, sweep="ends", arm=state), None)
        t.finish(state)
        run = client.get_run(store.read_json(tmp_path / state / "track" / "mlflow.json")["run_id"])
        assert run.info.status == ("KILLED" if state == "pruned" else "FAILED"), state
        assert run.data.tags["ablate.state"] == state


def test_the_default_store_is_a_sqlite_file_in_the_sweep_and_rank_reads_it(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    sweep = tmp_path / "sweeps" / "arms"
    for arm, lift in (("baseline", 0.0), ("loss=dapo", 0.3)):
        for seed in range(3):
            t = MlflowTracker()
            t.start(_ctx(sweep / "runs" / f"{arm}-{seed}", sweep_dir=sweep, sweep="arms", arm=arm, seed=seed), None)
            for step in range(0, 40, 2):
                rate = 0.1 + (0.4 + lift) * step / (step + 8) + 0.01 * seed
                t.log({"step": step, "val_pass_rate": rate, "samples": 16 * step, "gpu_hours": step * 1e-3})
            t.finish("done")
    assert list(cwd.iterdir()) == []  # nothing in the working directory (MLflow's default would be ./mlruns)
    db = sweep / "mlflow.db"
    assert db.is_file() and sorted(p.name for p in sweep.iterdir()) == ["mlflow-artifacts", "mlflow.db", "runs"]
    exp = MlflowClient(tracking_uri=f"sqlite:///{db}").get_experiment_by_name("arms")
    assert exp is not None and exp.artifact_location == (sweep / "mlflow-artifacts" / "arms").as_uri()

    res = CliRunner().invoke(app, ["rank", str(db), "--x", "samples", "--baseline", "baseline", "--json"])
    assert res.exit_code == 0, res.output
    ranked = json.loads(res.output)
    assert ranked["baseline"] == "baseline"  # the runs' ablate.arm tags are the arms, each with its three seeds
    assert sorted((a["group"], a["n_runs"]) for a in ranked["arms"]) == [("baseline", 3), ("loss=dapo", 3)]


def _start_error(tmp_path: Path) -> str:
    """The one line a tracker's failed start raises (the fan-out warns with it)."""
    with pytest.raises(RuntimeError) as got:
        MlflowTracker().start(_ctx(tmp_path / "run"), None)
    return str(got.value)


@pytest.mark.parametrize("given", ["file://{tmp}/mlruns", "{tmp}/mlruns"])
def test_a_file_store_is_refused_with_one_line_naming_the_sqlite_store(tmp_path, monkeypatch, given):
    uri = given.format(tmp=tmp_path)  # MLflow no longer writes file stores; its message runs over five sentences
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert _start_error(tmp_path) == (
        f"{uri}: MLflow no longer writes a file store; give a SQLite store (sqlite:///PATH/mlflow.db) or a tracking "
        "server (MLFLOW_TRACKING_URI or track.mlflow_uri)"
    )
    assert not (tmp_path / "mlruns").exists()


def test_a_server_that_is_down_fails_the_start_with_one_line(tmp_path, monkeypatch):
    for var in ENVIRONMENT["mlflow"]:  # as a process that never tracked has it
        monkeypatch.delenv(var)
    monkeypatch.setenv("WANDB_SILENT", "")
    monkeypatch.delenv("WANDB_SILENT")
    set_environment(["wandb", "mlflow"])  # what open_fanout does on the main thread before the trackers start
    uri = f"http://127.0.0.1:{_free_port()}"  # closed: nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert _start_error(tmp_path) == (
        f"{uri}: [Errno 111] Connection refused; start the server or fix the URI (MLFLOW_TRACKING_URI or "
        "track.mlflow_uri)"
    )
    want = {**ENVIRONMENT["mlflow"], "WANDB_SILENT": "true", "MLFLOW_DISABLE_TELEMETRY": "true"}
    assert {v: os.environ[v] for v in want} == want  # retries bounded, no telemetry, W&B silent
    assert not (tmp_path / "run" / "track").exists()
    res = CliRunner().invoke(app, ["fit", "mlflow:sw", "--x", "step"])
    one_error(res, ErrorKind.ENVIRONMENT, "mlflow:sw", uri, "Connection refused", "MLFLOW_TRACKING_URI")


def test_reading_errors_name_the_input_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    res = CliRunner().invoke(app, ["fit", "mlflow:sw"])
    one_error(res, ErrorKind.ENVIRONMENT, "mlflow:sw", "MLFLOW_TRACKING_URI")
    other = tmp_path / "other.db"
    import sqlite3

    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    res = CliRunner().invoke(app, ["fit", str(other)])
    one_error(res, ErrorKind.FILE, str(other), "no such table: runs")
    assert [r[0] for r in sqlite3.connect(other).execute("SELECT name FROM sqlite_master")] == ["t"]  # untouched
    res = CliRunner().invoke(app, ["fit", str(tmp_path), "--from", "mlflow"])  # a folder, not "no such file"
    one_error(res, ErrorKind.FILE, str(tmp_path), "folder", "mlflow.db")  # "folder" tells it from "no such file"


START_ONE = """
import sys
from pathlib import Path
from types import SimpleNamespace
from ablate.track.base import TrackContext
from ablate.track.mlflow import MlflowTracker
sweep, seed = Path(sys.argv[1]), int(sys.argv[2])
t = MlflowTracker()
t.start(TrackContext(sweep / "runs" / f"r{seed}", sweep, "together", "a", "baseline", f"r{seed}", f"seed={seed}",
                     {"seed": seed}, SimpleNamespace(mlflow_uri=None)), None)
t.log({"step": 0, "val_pass_rate": 0.1})
t.finish("done")
"""


def test_runs_that_start_together_create_one_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    sweep = tmp_path / "together"
    procs = [
        subprocess.Popen([sys.executable, "-c", START_ONE, str(sweep), str(seed)], stderr=subprocess.PIPE, text=True)
        for seed in range(3)
    ]
    for p in procs:
        _, err = p.communicate()
        assert p.returncode == 0, err[-3000:]  # no "table already exists" from two migrations at once
    client = MlflowClient(tracking_uri=f"sqlite:///{sweep / 'mlflow.db'}")
    [exp] = [e for e in client.search_experiments() if e.name == "together"]
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["seed=0", "seed=1", "seed=2"]
    assert all(r.info.status == "FINISHED" for r in runs)


# ---- end to end: `ablate train --track mlflow` ----


def _train(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ablate", "train", str(RECIPE), *SMALL_TRAIN, *extra, "--track", "mlflow"] + [
        "--run-dir",
        str(out),
    ]


def _steps(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    return [r["step"] for r in store.read_jsonl(path)] if path.exists() else []


@ON_SERVER
@pytest.mark.slow
def test_train_killed_and_resumed_holds_each_step_once_on_the_server(server, tmp_path):
    out = tmp_path / "e2e-run"
    # never done on its own: each attempt ends when the test says (a kill, then a stop), however loaded the machine
    cmd = _train(out, "train.max_steps=1000000", "train.eval_every=4", "train.checkpoint_every=8")
    env = {**os.environ, "MLFLOW_TRACKING_URI": server}
    client = MlflowClient(tracking_uri=server)
    state = out / "track" / "mlflow.json"

    def held() -> int:  # the highest step the server holds for the run
        run_id = store.read_json(state)["run_id"] if state.exists() else None
        return max((m.step for m in client.get_metric_history(run_id, "samples")), default=-1) if run_id else -1

    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    written: list[int] = []

    def caught_up() -> bool:  # every line written so far is on the server, and one is past the checkpoint at 8
        written[:] = _steps(out)
        return p.poll() is not None or (bool(written) and held() >= max(12, written[-1]))

    until(caught_up, "the server holding the run's lines past its first checkpoint", interval=0.2)
    assert p.poll() is None, p.communicate()[1][-2000:]  # still running: killed past a checkpoint
    p.kill()
    p.communicate()
    crashed, run_id = held(), store.read_json(state)["run_id"]

    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    until(lambda: p.poll() is not None or held() >= crashed + 8, "the resumed attempt's lines past the crash")
    assert p.poll() is None, p.communicate()[1][-2000:]
    p.send_signal(signal.SIGTERM)  # a stop: its last lines and the run's end state are sent before it exits
    err = p.communicate()[1]
    assert p.returncode == 128 + signal.SIGTERM, err[-3000:]
    resumed = store.read_json(out / "run.json")["resumed_from"]
    assert resumed >= 8
    assert store.read_json(state)["run_id"] == run_id  # the same MLflow run continued
    run = client.get_run(run_id)
    assert run.info.status == "KILLED" and run.data.tags["ablate.state"] == "preempted"
    assert run.info.run_name == "e2e-run" and run.data.params["train.max_steps"] == "1000000"
    recs = store.read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in recs] == list(range(0, recs[-1]["step"] + 1, 4)) and recs[-1]["step"] > crashed
    for key in ("samples", "val_pass_rate", "gpu_hours"):
        hist = _history(client, run_id, key)
        assert [s for s, _ in hist] == [r["step"] for r in recs], key  # each step once
        for (step, v), r in zip(hist, recs):  # a step redone after the kill keeps the killed attempt's gpu_hours
            if key != "gpu_hours" or not resumed < step <= crashed:
                assert v == pytest.approx(r[key], rel=1e-9), (key, step)

    env_fit = {"MLFLOW_TRACKING_URI": server}
    args = ["--x", "samples", "--n-boot", "0", "--json"]
    from_mlflow = CliRunner().invoke(app, ["fit", "mlflow:e2e-run", *args], env=env_fit)
    from_run = CliRunner().invoke(app, ["fit", str(out), *args])
    assert from_mlflow.exit_code == 0 and from_run.exit_code == 0, from_mlflow.output + from_run.output
    [a], [b] = json.loads(from_mlflow.output)["fits"], json.loads(from_run.output)["fits"]
    assert (a["n_points"], a["window"]) == (b["n_points"], b["window"])
    assert [a[k] for k in ("A", "B", "C_mid")] == pytest.approx([b[k] for k in ("A", "B", "C_mid")], rel=1e-6)


def test_train_without_a_uri_keeps_its_store_in_the_run_directory(tmp_path):
    cwd, out = tmp_path / "cwd", tmp_path / "run"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(_train(out, "train.max_steps=12"), env=env, cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(cwd.iterdir()) == []  # no ./mlruns, no ./mlflow.db
    assert {"mlflow.db", "mlflow-artifacts"} <= {p.name for p in out.iterdir()}
    warned = [ln for ln in done.stderr.splitlines() if ln.startswith("warning:")]
    assert all("tracker mlflow still sending" in ln for ln in warned), done.stderr[-3000:]  # a busy machine's only
    if (out / "track" / "unsent.json").exists():  # the tracker fell behind at the end (a busy machine): send the rest
        assert warned and CliRunner().invoke(app, ["sync", str(out)]).exit_code == 0
    assert not (out / "track" / "unsent.json").exists()
    uri = f"sqlite:///{out / 'mlflow.db'}"  # where the store is, said once, as W&B offline says its sync command
    assert f"view it with: mlflow ui --backend-store-uri {uri}" in done.stderr, done.stderr[-3000:]
    res = CliRunner().invoke(app, ["fit", str(out / "mlflow.db"), "--x", "samples", "--n-boot", "0", "--json"])
    assert res.exit_code == 0, res.output
    [fit] = json.loads(res.output)["fits"]
    assert fit["run"] == "run" and fit["n_points"] == len(_steps(out)) - 1  # every evaluation but R0's at 0


def test_train_with_the_server_down_warns_once_ends_done_and_says_how_to_send_the_rest(tmp_path):
    out = tmp_path / "run"
    uri = f"http://127.0.0.1:{_free_port()}"  # closed
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    done = subprocess.run(_train(out), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert store.read_json(out / "run.json")["status"] == "done" and _steps(out) == [0, 2, 4, 6]
    warned = [ln for ln in done.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 2 and "tracker mlflow failed to start" in warned[0], done.stderr[-3000:]
    assert warned[1].endswith(f"send it with: ablate sync {out}"), warned[1]  # at the end: the command to paste
    assert f"{uri}: [Errno 111] Connection refused; start the server" in warned[0]
    assert (out / "logs" / "train.log").read_text().count("tracker mlflow failed") == 1
