"""Where a run's data goes is the user's choice, and a tracker that cannot keep up loses nothing.

- A recipe, a recipe's option file or a sweep file that names a tracker or its destination (`track.*`, or the old
  `train.tensorboard`) is refused in one line before anything runs; the command line (`--track`, `track.KEY=VALUE`)
  chooses them.
- A tracker still sending when the run ends is left behind, recorded in the run's track/unsent.json, and
  `ablate sync` (or the next `ablate sweep`) sends what it lacks: tested with trackers made slow on purpose, one of
  them the real MLflow tracker, by state (events), never by timing."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import ErrorKind
from ablate.storage import store
from ablate.storage.rundir import RunDir
from ablate.track import fanout
from ablate.track.base import ENVIRONMENT, set_environment
from ablate.track.fanout import UNSENT, FanOut, context, send_unsent, unsent
from jobs import RECIPE, TOY_JOB, one_error, small_config, until

runner = CliRunner()
EVIL = "http://collector.invalid:5000"


def _recipes(tmp_path: Path) -> Path:
    d = tmp_path / "recipes"
    shutil.copytree(RECIPE.parent, d)
    return d


@pytest.mark.parametrize(
    "where, text, key",
    [
        ("base.yaml", f"track:\n  to: [mlflow]\n  mlflow_uri: {EVIL}\n", "track.mlflow_uri"),
        ("base.yaml", "track:\n  entity: someone-else\n", "track.entity"),
        ("base.yaml", "train:\n  tensorboard: true\n", "train.tensorboard"),
        ("loss/cispo.yaml", f"# @package _global_\ntrack:\n  mlflow_uri: {EVIL}\n", "track.mlflow_uri"),
    ],
)
def test_a_recipe_that_chooses_a_tracker_or_its_destination_is_refused(tmp_path, where, text, key):
    recipes = _recipes(tmp_path)
    path = recipes / where
    if where == "loss/cispo.yaml":  # an option file that reaches the whole config (Hydra's _global_ package)
        path.write_text(text + "loss:\n" + "".join(f"  {ln}\n" for ln in path.read_text().splitlines() if ":" in ln))
    else:
        path.write_text(path.read_text() + text)
    base = str(recipes / "base.yaml")
    one_error(runner.invoke(app, ["show", base]), ErrorKind.RECIPE, key, "--track")  # the key, and where to choose
    root = tmp_path / "sweeps"
    res = runner.invoke(app, ["sweep", base, "--root", str(root), "-e", "debug", "--job", TOY_JOB])
    one_error(res, ErrorKind.RECIPE, key, "--track")
    assert not root.exists()  # nothing launched, nothing written
    out = tmp_path / "run"
    res = runner.invoke(app, ["train", base, "--run-dir", str(out)])
    one_error(res, ErrorKind.RECIPE, key, "--track")
    assert not out.exists()


@pytest.mark.parametrize(
    "body, key",
    [
        ("overrides: ['track.mlflow_uri=http://collector.invalid:5000']", "track.mlflow_uri"),
        ("grid:\n  track.to: [[wandb], [mlflow]]", "track.to"),
        ("runs:\n  - ['loss=dapo', 'track.to=[mlflow]']", "track.to"),
    ],
)
def test_a_sweep_file_that_chooses_a_tracker_is_refused(tmp_path, body, key):
    recipes = _recipes(tmp_path)
    (recipes / "mine.yaml").write_text(f"base: base\nseeds: [0]\n{body}\n")
    res = runner.invoke(app, ["sweep", str(recipes / "mine.yaml"), "--dry-run"])
    one_error(res, ErrorKind.RECIPE, str(recipes / "mine.yaml"), key, "--track")


def test_the_command_line_chooses_trackers_and_their_destination(tmp_path):
    recipes = _recipes(tmp_path)
    res = runner.invoke(
        app, ["show", str(recipes / "base.yaml"), "track.to=[mlflow]", "track.mlflow_uri=sqlite:///x.db"]
    )
    assert res.exit_code == 0, res.output
    shown = OmegaConf.to_container(OmegaConf.create(res.output.split("\n", 1)[1]))
    assert shown["track"]["to"] == ["mlflow"] and shown["track"]["mlflow_uri"] == "sqlite:///x.db"
    cfg = small_config("track.to=[wandb]", "track.project=mine")
    assert cfg.track.to == ("wandb",) and cfg.track.project == "mine"


# ---- a tracker that cannot keep up -------------------------------------------------------------------------------


class _Recorder:
    """A tracker that records its calls; with `gate`, it blocks in `log` until the gate opens (a slow server), and
    drops what it holds once `drop` is set (the process ended before it could send)."""

    def __init__(self, name: str, gate: threading.Event | None = None, inner: Any = None) -> None:
        self.name, self.gate, self.inner = name, gate, inner
        self.drop = threading.Event()
        self.calls: list[tuple[str, Any]] = []
        self.blocked = threading.Event()

    def start(self, ctx, resumed_from):
        self.calls.append(("start", resumed_from))
        if self.inner is not None:
            self.inner.start(ctx, resumed_from)

    def log(self, record):
        if self.gate is not None and len(self.calls) > 3:  # the first lines go out, then the server slows down
            self.blocked.set()
            self.gate.wait()
        if self.drop.is_set():
            return
        self.calls.append(("log", record["step"]))
        if self.inner is not None:
            self.inner.log(record)

    def finish(self, state):
        if self.drop.is_set():
            return
        self.calls.append(("finish", state))
        if self.inner is not None:
            self.inner.finish(state)


def _run_dir(tmp_path: Path, *extra: str, steps: int = 10) -> tuple[Any, RunDir]:
    config = small_config("track.to=[mlflow]", *extra)
    rd = RunDir(tmp_path / "run")
    rd.make()
    store.atomic_write_text(rd.config_path, OmegaConf.to_yaml(OmegaConf.create(config.to_dict())))
    for step in range(steps):
        rd.append_metrics({"step": step, "samples": 8 * step, "gpu_hours": 1e-4 * step, "flops": 1e9 * step,
                           "val_pass_rate": 0.2 + 0.03 * step})  # fmt: skip
    return config, rd


def _slow_end(config: Any, rd: RunDir, tracker: _Recorder, state: str = "done") -> FanOut:
    """The run's end with `tracker` stuck behind: every line given, the close not waiting, then the tracker's
    process gone (what it held is dropped)."""
    fan = FanOut(context(config, rd), [tracker], wait_s=0.0)
    fan.rewind(-1)
    for _, line in rd.metric_lines():
        fan.append(line)
    until(tracker.blocked.is_set, "the tracker to block on its slow server")
    fan.close(state)
    tracker.drop.set()
    assert tracker.gate is not None
    tracker.gate.set()
    return fan


def test_a_tracker_left_behind_is_recorded_and_sync_sends_it_the_rest(tmp_path, capsys, monkeypatch):
    config, rd = _run_dir(tmp_path)
    slow = _Recorder("mlflow", gate=threading.Event())
    fan = _slow_end(config, rd, slow)
    assert fan.late == ["mlflow"]
    assert unsent(rd.path) == fanout.Unsent(("mlflow",), "done")
    err = capsys.readouterr().err
    assert "tracker mlflow still sending" in err and f"send it with: ablate sync {rd.path}" in err
    # `ablate sync`: the tracker starts at the last kept step (so it sends the lines it lacks) and finishes done
    again = _Recorder("mlflow")
    monkeypatch.setattr(fanout, "build", lambda names: [again] if list(names) == ["mlflow"] else [])
    res = runner.invoke(app, ["sync", str(rd.path)])
    assert res.exit_code == 0, res.output
    assert again.calls == [("start", 9), ("finish", "done")]
    assert unsent(rd.path) is None and not (rd.path / UNSENT).exists()
    assert runner.invoke(app, ["sync", str(rd.path)]).output.strip() == "nothing left unsent"


def test_a_tracker_that_failed_is_recorded_and_a_tracker_still_behind_keeps_its_record(tmp_path, monkeypatch, capsys):
    config, rd = _run_dir(tmp_path)

    class Failing(_Recorder):
        def start(self, ctx, resumed_from):
            raise RuntimeError("the server is down; start it")

    fan = FanOut(context(config, rd), [Failing("mlflow"), _Recorder("tensorboard")], wait_s=30.0)
    fan.rewind(-1)
    fan.append({"step": 0})
    fan.close("preempted")
    assert fan.behind == ["mlflow"] and unsent(rd.path) == fanout.Unsent(("mlflow",), "preempted")
    err = capsys.readouterr().err  # the failure's own warning, then at the end the command that sends the rest
    assert "the server is down" in err and f"send it with: ablate sync {rd.path}" in err
    monkeypatch.setattr(fanout, "build", lambda names: [Failing("mlflow")])
    assert send_unsent(config, rd) == ["mlflow"]  # still failing: the record stays for a later try
    assert unsent(rd.path) == fanout.Unsent(("mlflow",), "preempted")
    res = runner.invoke(app, ["sync", str(rd.path)])
    assert res.exit_code == 1 and "mlflow still behind" in res.output, res.output


def test_a_damaged_or_linked_record_is_no_record(tmp_path):
    _, rd = _run_dir(tmp_path, steps=2)
    (rd.path / "track").mkdir()
    for text in ('{"trackers": ["mlflow"]}', '{"trackers": ["evil"], "state": "done"}', "[", '{"trackers": "x"}'):
        (rd.path / UNSENT).write_text(text)
        assert unsent(rd.path) is None, text
    (rd.path / UNSENT).unlink()
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text('{"trackers": ["mlflow"], "state": "done"}')
    (rd.path / UNSENT).symlink_to(elsewhere)
    assert unsent(rd.path) is None


@pytest.fixture()
def _mlflow_here(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for var in ENVIRONMENT["mlflow"]:
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    set_environment(["mlflow"])


def test_the_real_mlflow_tracker_made_slow_gets_every_step_once_after_sync(tmp_path, _mlflow_here):
    from mlflow.tracking import MlflowClient

    from ablate.track.mlflow import MlflowTracker

    config, rd = _run_dir(tmp_path)
    slow = _Recorder("mlflow", gate=threading.Event(), inner=MlflowTracker())
    _slow_end(config, rd, slow)
    assert unsent(rd.path) == fanout.Unsent(("mlflow",), "done")
    client = MlflowClient(f"sqlite:///{rd.path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name(rd.path.name).experiment_id])
    sent = [m.step for m in client.get_metric_history(run.info.run_id, "val_pass_rate")]
    assert sent == [0, 1, 2] and run.info.status == "RUNNING"  # the slow server's share before the run ended
    res = runner.invoke(app, ["sync", str(rd.path)])
    assert res.exit_code == 0 and "1 run(s) sent in full" in res.output, res.output
    run = client.get_run(run.info.run_id)
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "val_pass_rate"))
    assert steps == list(range(10)) and run.info.status == "FINISHED"  # every step once, then finished
    assert unsent(rd.path) is None


def test_sync_sends_nothing_for_a_folder_others_could_have_changed(tmp_path, monkeypatch):
    """A run's config names where its trackers send, with your credentials: `ablate sync` refuses a sweep that others
    can write (they could have planted that config), before any tracker is built."""
    sweep = tmp_path / "sweep"
    _, rd = _run_dir(sweep / "runs")
    (rd.path / "track").mkdir()
    (rd.path / UNSENT).write_text('{"trackers": ["mlflow"], "state": "done"}')
    built: list[Any] = []
    monkeypatch.setattr(fanout, "build", lambda names: built.append(names) or [])
    sweep.chmod(0o777)
    one_error(runner.invoke(app, ["sync", str(sweep)]), ErrorKind.FILE, str(sweep), "0777", f"chmod go-w {sweep}")
    assert built == [] and unsent(rd.path) is not None


def test_the_hint_for_a_tracker_name_is_a_flag_that_works(tmp_path):
    recipes = _recipes(tmp_path)
    (recipes / "mine.yaml").write_text("base: base\nseeds: [0]\noverrides: ['track.to=[mlflow]']\n")
    line = one_error(runner.invoke(app, ["sweep", str(recipes / "mine.yaml"), "--dry-run"]), ErrorKind.RECIPE)
    assert "(--track NAME)" in line and "track.to=VALUE" not in line, line
    (recipes / "mine.yaml").write_text("base: base\nseeds: [0]\noverrides: ['track.project=p']\n")
    line = one_error(runner.invoke(app, ["sweep", str(recipes / "mine.yaml"), "--dry-run"]), ErrorKind.RECIPE)
    assert "--track NAME track.project=VALUE" in line, line


def test_a_new_sqlite_store_is_built_whole_and_a_half_built_one_is_one_line(tmp_path, _mlflow_here):
    """MLflow's migrations run on a temporary file moved into place (a process killed mid-way leaves no half-built
    store, only a temporary file the next build removes); a store MLflow cannot open is one line with the fix."""
    import sqlite3

    from ablate.track.mlflow import MlflowTracker

    config, rd = _run_dir(tmp_path, steps=3)
    stale = rd.path / ".mlflow.db.999999.tmp"  # a build that was killed
    stale.write_bytes(b"half")
    tracker = MlflowTracker()
    tracker.start(context(config, rd), None)
    tracker.finish("done")
    assert (rd.path / "mlflow.db").is_file() and not stale.exists()
    assert not list(rd.path.glob(".mlflow.db.*.tmp"))
    # a store left half-built in place (by an older build, or damaged): the tracker's start says how to recover
    other = tmp_path / "other"
    other.mkdir()
    config2, rd2 = _run_dir(other, steps=3)
    with sqlite3.connect(rd2.path / "mlflow.db") as con:
        con.execute("CREATE TABLE experiments (x INTEGER)")  # a table MLflow's migrations then fail to create
    with pytest.raises(RuntimeError, match=r"mlflow\.db: not an MLflow store MLflow can open .*move it aside"):
        MlflowTracker().start(context(config2, rd2), None)


def test_the_wait_at_a_runs_end_is_ten_seconds_unless_the_environment_sets_another(monkeypatch):
    monkeypatch.delenv(fanout.WAIT_ENV, raising=False)
    assert fanout.close_wait() == fanout.CLOSE_WAIT_S == 10.0
    for value, want in (("120", 120.0), ("0", 0.0), ("-1", 10.0), ("nan", 10.0), ("1e9", 10.0), ("soon", 10.0)):
        monkeypatch.setenv(fanout.WAIT_ENV, value)
        assert fanout.close_wait() == want, value
