"""`--track`: the fan-out to trackers (ablate.track) and the W&B tracker, with the real wandb library offline (no
network). A real `ablate train` stopped, crashed and resumed mirrors each step once to one W&B run named after the
run; a tracker that fails warns once and the run ends as it would have; trackers never change run ids."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.resources import RECIPES_DIR
from ablate.config.identity import run_id
from ablate.config.schema import validate
from ablate.curves.readers import wandb_files
from ablate.curves.tracked import read_wandb
from ablate.errors import ErrorKind
from ablate.storage import store
from ablate.storage.rundir import RunDir
from ablate.track import fanout
from ablate.track.base import TrackContext
from ablate.track.fanout import CLOSE_WAIT_S, WAIT_ENV, FanOut
from ablate.train.session import check_config, writing
from jobs import SMALL_TRAIN, one_error, small_config, until

RECIPE = str(RECIPES_DIR / "base.yaml")


def _env(tmp_path: Path, mode: str) -> dict[str, str]:
    """The environment of a run under test: W&B's per-user files under tmp_path, no W&B credentials, `mode`. The run's
    end waits for its trackers until they are done (WAIT_ENV; it returns as soon as they are), so what a tracker
    wrote is the same on a busy machine as on an idle one: the bounded wait itself is tested on the fan-out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    home = tmp_path / "home"
    return {**env, "HOME": str(home), "WANDB_MODE": mode, "NETRC": str(home / ".netrc"), WAIT_ENV: "3600"}


def _train(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ablate", "train", RECIPE, *SMALL_TRAIN, *extra, "--run-dir", str(out)]


def _steps(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    return [r["step"] for r in store.read_jsonl(path)] if path.exists() else []


def _records(folder: Path, kind: str) -> list[Any]:
    """Every W&B record of `kind` in a W&B folder, attempt by attempt (W&B's own record schema)."""
    from wandb.proto import wandb_internal_pb2 as pb

    from ablate.curves import tracked

    # the raw records (read_wandb merges what attempts logged at one step: here each step must be there once)
    records = (r for f in wandb_files(folder) for r in tracked._wandb_records(f, pb))
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


def _attempt(cmd: list[str], env: dict[str, str], out: Path, past: int) -> str:
    """One attempt of the run: started, stopped (SIGTERM) once metrics.jsonl is past step `past`; its stderr."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    until(lambda: p.poll() is not None or (_steps(out) and _steps(out)[-1] >= past), f"an evaluation past {past}")
    assert p.poll() is None, p.communicate()[1][-2000:]  # still running: it did not fail on the way
    p.send_signal(signal.SIGTERM)
    err = p.communicate()[1]
    assert p.returncode == 128 + signal.SIGTERM, err[-2000:]
    return err


def _synced(err: str) -> Path:
    """The offline folder an attempt's `wandb sync` line names (exactly one such line)."""
    [line] = [ln for ln in err.splitlines() if "upload it with: wandb sync " in ln]
    return Path(line.split("upload it with: wandb sync ", 1)[1])


def _equals_metrics(folder: Path, out: Path) -> None:
    """The newest offline folder alone holds metrics.jsonl: each step once, with its pass rate."""
    recs = store.read_jsonl(out / "metrics.jsonl")
    assert [int(h.step.num) for h in _records(folder, "history")] == [r["step"] for r in recs]
    (name, curve), *others = read_wandb(folder).items()
    assert not others and name == out.name
    assert [(s, curve[s]["val_pass_rate"]) for s in sorted(curve)] == [(r["step"], r["val_pass_rate"]) for r in recs]


def test_wandb_offline_mirrors_each_step_once_across_a_stop_a_crash_and_a_resume(tmp_path):
    out = tmp_path / "run"
    env = _env(tmp_path, "offline")
    cmd = _train(out, "train.max_steps=1000000", "train.eval_every=2", "train.checkpoint_every=1000000", "--track")
    cmd.insert(cmd.index("--track") + 1, "wandb")
    errors: list[str] = []

    def attempt(past: int, sig: signal.Signals) -> None:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        until(lambda: p.poll() is not None or (_steps(out) and _steps(out)[-1] >= past), f"an evaluation past {past}")
        assert p.poll() is None, p.communicate()[1][-2000:]  # still running: it did not fail on the way
        p.send_signal(sig)
        errors.append(p.communicate()[1])
        assert p.returncode == (128 + sig if sig == signal.SIGTERM else -sig), errors[-1][-2000:]

    attempt(4, signal.SIGTERM)  # a stop: the one checkpoint, at the step it came
    stopped = store.read_json(out / "run.json")["step"]
    attempt(stopped + 6, signal.SIGKILL)  # a crash: its steps past the checkpoint are redone by the next attempt
    crashed = _steps(out)[-1]
    attempt(crashed + 4, signal.SIGTERM)
    info = store.read_json(out / "run.json")
    assert info["resumed_from"] == stopped and info["status"] == "preempted"
    assert f"resume with: ablate train {RECIPE}" in errors[0] and f"--run-dir {out} --track wandb\n" in errors[0]
    # one offline folder per attempt; the newest (the last attempt's, the one its sync line names) alone holds
    # every step of metrics.jsonl once, although the crashed attempt's folder may have lost its lines
    folders = [f.resolve() for f in sorted((out / "wandb").glob("offline-run-*"))]
    newest = _synced(errors[2])
    assert len(folders) in (2, 3)  # the crashed attempt's, if it opened W&B before the kill
    assert newest.resolve() == folders[-1] and _synced(errors[0]).resolve() == folders[0], (folders, errors)
    _equals_metrics(newest, out)
    # named after the ablate run (outside a sweep: its directory; its arm: the arm id), told how attempts ended
    runs = {(r.run_id, r.run_group, r.job_type, r.display_name) for r in _records(out / "wandb", "run")}
    assert runs == {(info["run_id"], "run", info["arm_id"], "run")}
    summaries = _records(out / "wandb", "summary")
    states = [json.loads(i.value_json) for s in summaries for i in s.update if i.key == "state"]
    assert states == ["preempted", "preempted"]  # the crashed attempt could not say
    assert store.read_json(out / "track" / "wandb.json") == {"id": info["run_id"]}
    # the sync command of its own folder, once per attempt that lived to open W&B, on stderr and in train.log
    assert (out / "logs" / "train.log").read_text().count(f"upload it with: wandb sync {newest}") == 1
    # and `ablate fit` fits the W&B folder (every attempt's) as it fits the run directory
    fits = [
        json.loads(CliRunner().invoke(app, ["fit", str(p), "--x", "step", "--n-boot", "0", "--json"]).output)
        for p in (out / "wandb", out)
    ]
    for key in ("A", "B", "C_mid", "R0", "n_points"):
        assert fits[0]["fits"][0][key] == fits[1]["fits"][0][key], key


def test_wandb_added_only_on_the_resume_still_gets_every_step(tmp_path):
    out = tmp_path / "run"
    env = _env(tmp_path, "offline")
    cmd = _train(out, "train.max_steps=1000000", "train.eval_every=2", "train.checkpoint_every=1000000")
    _attempt(cmd, env, out, 4)  # no tracker: a stop, its checkpoint at the step it came
    assert not (out / "wandb").exists()
    stopped = store.read_json(out / "run.json")["step"]
    err = _attempt([*cmd, "--track", "wandb"], env, out, stopped + 4)
    assert store.read_json(out / "run.json")["resumed_from"] == stopped
    _equals_metrics(_synced(err), out)  # the steps before the resume too, sent from metrics.jsonl


def test_a_failing_tracker_warns_once_and_the_run_ends_done_with_the_others_mirrored(tmp_path):
    out = tmp_path / "run"
    # W&B online with no credentials (and no terminal to ask on): refused at its start
    cmd = _train(out, "--track", "wandb", "--track", "tensorboard")
    res = subprocess.run(cmd, capture_output=True, text=True, env=_env(tmp_path, "online"), stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-2000:]
    warnings = [ln for ln in res.stderr.splitlines() if "tracker wandb" in ln]
    assert len(warnings) == 2 and "no W&B API key" in warnings[0] and "track.wandb_mode=offline" in warnings[0]
    assert warnings[1].endswith(f"send it with: ablate sync {out}")  # once there is a key
    assert "tracker wandb failed to start" in (out / "logs" / "train.log").read_text()
    assert store.read_json(out / "run.json")["status"] == "done"
    recs = store.read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in recs] == [0, 2, 4, 6]
    ea = EventAccumulator(str(out / "tb"), size_guidance={"scalars": 0})  # --track tensorboard mirrored all of it
    ea.Reload()
    assert [(e.step, e.value) for e in ea.Scalars("samples")] == [(r["step"], r["samples"]) for r in recs]
    assert not (out / "wandb").exists() or not wandb_files(out / "wandb")


class _Fake:
    """A tracker that records its calls; `fail_on` names the call that raises, `hold` an event its log waits on."""

    def __init__(self, name: str, fail_on: str | None = None, hold: threading.Event | None = None) -> None:
        self.name, self.fail_on, self.hold = name, fail_on, hold
        self.calls: list[tuple[str, Any]] = []

    def _call(self, op: str, arg: Any) -> None:
        if op == self.fail_on:
            raise RuntimeError(f"{op} refused: the server is down; start it")
        self.calls.append((op, arg))

    def start(self, ctx: TrackContext, resumed_from: int | None) -> None:
        self._call("start", resumed_from)

    def log(self, record: dict[str, Any]) -> None:
        if self.hold is not None:
            self.hold.wait()
        self._call("log", record["step"])

    def finish(self, state: str) -> None:
        self._call("finish", state)


def _ctx(tmp_path: Path) -> TrackContext:
    cfg = small_config()
    return TrackContext(tmp_path, None, "s", "a", "base", run_id(cfg), "seed=0", cfg.to_dict(), cfg.track)


def test_fanout_drops_a_failing_tracker_after_one_warning_and_feeds_the_others(tmp_path, capsys):
    good, bad = _Fake("good"), _Fake("bad", fail_on="log")
    fan = FanOut(_ctx(tmp_path), [bad, good])
    fan.rewind(4)  # a resume at step 4
    for step in (6, 8, 10):
        fan.append({"step": step, "val_pass_rate": 0.5})
    fan.close("done")
    assert good.calls == [("start", 4), ("log", 6), ("log", 8), ("log", 10), ("finish", "done")]
    assert bad.calls == [("start", 4)]  # dropped at its first failure: no more calls
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert lines == [
        "warning: tracker bad failed to log a metrics line (log refused: the server is down; start it); the run "
        "goes on without it and metrics.jsonl keeps every line (docs/trackers.md)",
        "warning: tracker bad stopped early (warned above); what it lacks is kept in metrics.jsonl and recorded in "
        f"track/unsent.json: send it with: ablate sync {tmp_path}",
    ]


def test_fanout_never_waits_on_a_tracker_and_closing_waits_a_bounded_time(tmp_path, capsys):
    hold = threading.Event()
    slow = _Fake("slow", hold=hold)
    fan = FanOut(_ctx(tmp_path), [slow], wait_s=0.01)
    fan.rewind(-1)  # a fresh start
    for step in range(100):  # the tracker is stuck on its first line; the loop is not
        fan.append({"step": step})
    fan.close("done")
    assert "tracker slow still sending after" in capsys.readouterr().err
    hold.set()  # let it go: it sends what it was given, then finishes
    until(lambda: slow.calls and slow.calls[-1] == ("finish", "done"), "the slow tracker to finish")
    assert slow.calls == [("start", None), *[("log", s) for s in range(100)], ("finish", "done")]


def test_trackers_never_change_run_ids_and_old_tensorboard_configs_still_load(tmp_path):
    plain = small_config()
    tracked = small_config("track.to=[wandb,mlflow,tensorboard]", "track.project=p", "track.wandb_mode=offline")
    assert tracked.track.to == ("wandb", "mlflow", "tensorboard") and run_id(tracked) == run_id(plain)
    res = CliRunner().invoke(app, ["train", RECIPE, "--track", "nope"])
    one_error(res, ErrorKind.SETTING, "--track nope", "wandb, mlflow, tensorboard")
    # a run directory made before trackers: config.yaml with train.tensorboard (and no track) keeps its id, loads
    # as track.to=[tensorboard], and the run resumes into it
    old = plain.to_dict()
    del old["track"]
    old["train"]["tensorboard"] = True
    assert run_id(old) == run_id(plain)
    assert validate(old).track.to == ("tensorboard",)
    assert validate({**old, "train": {**old["train"], "tensorboard": False}}).track.to == ()
    rd = RunDir(tmp_path / "old")
    rd.make()
    store.atomic_write_text(rd.config_path, OmegaConf.to_yaml(OmegaConf.create(old)))
    check_config(small_config("track.to=[tensorboard]"), rd)  # the same run: no "holds a run of another config"


class _FakeWandb:
    """A stand-in for the `wandb` module (no W&B server here): records init/log/finish, and answers `init` as a
    server holding `held[id]` steps of the W&B run `id` would (resumed, starting_step)."""

    def __init__(self, held: dict[str, int]) -> None:
        self.held = held
        self.calls: list[tuple[Any, ...]] = []

    @staticmethod
    def Settings(**settings: Any) -> dict[str, Any]:
        return settings

    def login(self, **_: Any) -> bool:
        return True

    def init(self, **kw: Any) -> Any:
        self.calls.append(("init", kw["id"], kw["resume"], kw["settings"]["finish_timeout"]))
        n, calls = self.held.get(kw["id"], 0), self.calls
        if n and kw["resume"] == "never":  # as W&B does: that id exists, and resume="never" may not continue it
            raise RuntimeError(f"run {kw['id']} already exists")
        sync_dir = f"{kw['dir']}/wandb/offline-run-{kw['id']}"

        class Run:
            id, resumed, starting_step, summary = kw["id"], n > 0, n, {}
            settings = type("S", (), {"sync_dir": sync_dir})

            def log(self, row: dict[str, Any], step: int) -> None:
                calls.append(("log", kw["id"], step))

            def finish(self, exit_code: int | None = None) -> None:
                calls.append(("finish", kw["id"], exit_code))

        return Run()


def _wandb_ctx(run_dir: Path, how: str) -> TrackContext:
    options = type("Track", (), {"wandb_mode": how, "project": "p", "entity": None})
    return TrackContext(run_dir, None, "s", "a", "base", "rid", "seed=0", {"seed": 0}, options)


def test_wandb_never_continues_another_directorys_run_and_resends_what_the_server_lacks(tmp_path, monkeypatch, capsys):
    from ablate.track.wandb import FINISH_TIMEOUT_S, WandbTracker

    assert FINISH_TIMEOUT_S < CLOSE_WAIT_S  # a slow upload never holds the process past the fan-out's wait
    fake = _FakeWandb({"rid": 7})  # the server holds 7 steps of W&B run `rid`: a --force re-run's old directory
    monkeypatch.setitem(sys.modules, "wandb", fake)
    run_dir = tmp_path / "run"
    ctx = _wandb_ctx(run_dir, "online")
    t = WandbTracker()
    t.start(ctx, None)  # a fresh directory
    new_id = store.read_json(run_dir / "track" / "wandb.json")["id"]
    assert re.fullmatch(r"rid-[0-9a-f]{4}", new_id)
    t.log({"step": 0, "x": 1.0})
    assert fake.calls == [
        ("init", "rid", "never", FINISH_TIMEOUT_S),  # refused: that run is left as it was, never opened
        ("init", new_id, "never", FINISH_TIMEOUT_S),
        ("log", new_id, 0),
    ]
    [warned] = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert "W&B refused run id rid in project p (a W&B run of that id exists" in warned and new_id in warned
    # a fresh directory whose id W&B does not hold opens it as it is (resume="never")
    fake.held, fake.calls = {}, []
    WandbTracker().start(_wandb_ctx(tmp_path / "fresh", "online"), None)
    assert fake.calls == [("init", "rid", "never", FINISH_TIMEOUT_S)]
    assert store.read_json(tmp_path / "fresh" / "track" / "wandb.json") == {"id": "rid"}
    # a later attempt resumed at step 4 reopens the id recorded; the server lost steps after 0 (held: 1 step):
    # the kept lines it lacks are sent, then this attempt's (the checkpoint's line appended again: not twice)
    store.append_jsonl(run_dir / "metrics.jsonl", *({"step": s, "x": 1.0} for s in (0, 2, 4)))
    fake.held, fake.calls = {new_id: 1}, []
    t = WandbTracker()
    t.start(ctx, 4)
    for step in (4, 6):
        t.log({"step": step, "x": 2.0})
    assert fake.calls == [("init", new_id, "allow", FINISH_TIMEOUT_S), *[("log", new_id, s) for s in (2, 4, 6)]]
    # offline, every attempt's folder holds the whole history: every kept line again, whatever W&B says it holds
    offline_dir = tmp_path / "offline"
    store.append_jsonl(offline_dir / "metrics.jsonl", *({"step": s, "x": 1.0} for s in (0, 2)))
    fake.held, fake.calls = {"rid": 3}, []
    t = WandbTracker()
    t.start(_wandb_ctx(offline_dir, "offline"), 2)
    assert fake.calls == [("init", "rid", "allow", FINISH_TIMEOUT_S), ("log", "rid", 0), ("log", "rid", 2)]
    assert store.read_json(offline_dir / "track" / "wandb.json") == {"id": "rid"}
    assert f"wandb sync {offline_dir}/wandb/offline-run-rid" in capsys.readouterr().err


def test_an_interrupt_while_the_trackers_close_still_lets_go_of_train_log(tmp_path, monkeypatch):
    class Interrupted:  # a third Ctrl-C comes while the fan-out waits for its trackers
        def close(self, state: str) -> None:
            raise KeyboardInterrupt

    monkeypatch.setattr(fanout, "open_fanout", lambda config, rd, device: Interrupted())
    rd = RunDir(tmp_path / "run")
    rd.make()
    log = logging.getLogger("ablate.train")
    before = list(log.handlers)
    with pytest.raises(KeyboardInterrupt), writing(small_config(), rd):
        assert len(log.handlers) == len(before) + 1  # train.log attached
    assert log.handlers == before
