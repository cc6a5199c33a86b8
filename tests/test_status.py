"""`ablate status`: states from the ledger + liveness, metrics tails, table, JSON; read-only."""

from __future__ import annotations

import io
import json
import os
import subprocess

from rich.console import Console
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import ErrorKind
from ablate.launch.status import sweep_status
from ablate.render.status import status_table, summary_line
from ablate.storage import store
from ablate.storage.ledger import Ledger, proc_start
from ablate.storage.rundir import RunDir
from jobs import one_error


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def make_sweep(root):
    """Six runs in six states, written as the launcher and jobs would write them."""
    led = Ledger(root / "demo")
    me = {"pid": os.getpid(), "start": proc_start(os.getpid())}
    dead = {"pid": _dead_pid(), "start": 1}
    evs = []
    for i, label in enumerate(
        ["loss=a,seed=0", "loss=a,seed=1", "loss=b,seed=0", "loss=b,seed=1", "loss=c,seed=0", "loss=c,seed=1"]
    ):
        evs.append(
            {
                "event": "submitting",
                "run_id": f"r{i}",
                "batch": "b",
                "label": label,
                "executor": "local",
                "launcher": dead,
                "max_steps": 10,
            }
        )
    evs += [{"event": "submitted", "run_id": f"r{i}", "batch": "b", "runner": me} for i in (0, 1, 2, 3, 4)]
    evs += [
        {"event": "started", "run_id": "r0", "batch": "b", "job_id": "11", **me},
        {"event": "finished", "run_id": "r0", "batch": "b", "status": "done"},
        {"event": "started", "run_id": "r1", "batch": "b", "job_id": "12", **me},  # alive: this process
        {"event": "started", "run_id": "r2", "batch": "b", "job_id": "13", **dead},  # died silently
        {"event": "started", "run_id": "r3", "batch": "b", "job_id": "14", **me},
        {
            "event": "failed",
            "run_id": "r3",
            "batch": "b",
            "cause": "exception",
            "log": "/x/14_0_log.err",
            "error": "Traceback ...\nValueError: lr too high",
        },
        # r4: queued behind a live runner; r5: its launcher died before handing it over
    ]
    led.append(*evs)
    for rid, rows in {"r0": [(5, 0.0), (10, 0.02)], "r1": [(3, 0.25)]}.items():
        for step, trunc in rows:
            store.append_jsonl(
                RunDir.of(root, "demo", rid).metrics_path,
                {
                    "step": step,
                    "gpu_hours": step / 100,
                    "flops": 1,
                    "samples": 1,
                    "val_pass_rate": step / 20,
                    "truncation_rate": trunc,
                },
            )
    with open(RunDir.of(root, "demo", "r1").metrics_path, "ab") as f:
        f.write(b'{"step": 4, "gpu_ho')  # a torn last line while the run writes
    return led


def test_status_states_progress_and_warnings(tmp_path):
    led = make_sweep(tmp_path)
    before = led.path.read_bytes()
    st = {s.run_id: s for s in sweep_status(tmp_path, "demo")}
    assert {k: (v.state, v.cause) for k, v in st.items()} == {
        "r0": ("done", None),
        "r1": ("running", None),
        "r2": ("failed", "killed"),
        "r3": ("failed", "exception"),
        "r4": ("pending", None),
        "r5": ("lost", None),
    }
    assert (st["r0"].step, st["r0"].progress, st["r0"].val_pass_rate) == (10, 1.0, 0.5)
    assert (st["r1"].step, st["r1"].progress) == (3, 0.3)  # the torn line is skipped
    assert st["r1"].truncation_warning and not st["r0"].truncation_warning
    assert led.path.read_bytes() == before  # status never writes
    line = summary_line("demo", list(st.values()))
    assert line.startswith("demo: 6 runs: 1 done, 1 running, 1 pending, 2 failed, 1 lost")
    assert "1 truncation warnings" in line
    out = io.StringIO()
    Console(file=out, width=200).print(status_table("demo", list(st.values())))
    text = out.getvalue()
    assert "loss=b,seed=0" in text and "failed(killed)" in text and "3/10 (30%)" in text and "25% !" in text


def test_runs_whose_trackers_were_left_behind_are_counted_with_the_command_that_sends_them(tmp_path):
    make_sweep(tmp_path)
    for rid in ("r0", "r1"):  # r0 ended: its trackers are behind; r1 runs: its own trackers will send it
        track = RunDir.of(tmp_path, "demo", rid).path / "track"
        track.mkdir(parents=True)
        (track / "unsent.json").write_text('{"trackers": ["mlflow"], "state": "done"}')
    st = {s.run_id: s for s in sweep_status(tmp_path, "demo")}
    assert st["r0"].trackers_behind == ("mlflow",) and st["r1"].trackers_behind == ()
    res = CliRunner().invoke(app, ["status", "demo", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert f"trackers behind on 1 run(s) (mlflow): send what they lack with: ablate sync {tmp_path / 'demo'}" in (
        " ".join(res.output.split())
    )
    res = CliRunner().invoke(app, ["status", "demo", "--root", str(tmp_path), "--json"])
    got = json.loads(res.output)
    assert got["summary"]["trackers_behind"] == 1
    assert {r["run_id"]: r["trackers_behind"] for r in got["runs"]}["r0"] == ["mlflow"]


def test_status_cli_json_and_errors(tmp_path, monkeypatch):
    make_sweep(tmp_path)
    res = CliRunner().invoke(app, ["status", "demo", "--root", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["summary"]["runs"] == 6 and data["summary"]["failed"] == 2
    r3 = next(r for r in data["runs"] if r["run_id"] == "r3")
    assert r3["error"].endswith("ValueError: lr too high") and r3["log"] == "/x/14_0_log.err"
    res = CliRunner().invoke(app, ["status", "--root", str(tmp_path)])
    assert res.exit_code == 0 and "sweep demo" in res.output and "lr too high" in res.output
    res = CliRunner().invoke(app, ["status", "nope", "--root", str(tmp_path)])
    one_error(res, ErrorKind.FILE, "'nope'", str(tmp_path), "demo", "ablate sweep")  # and the sweeps there are
    by_path = CliRunner().invoke(app, ["status", str(tmp_path / "demo"), "--json"])  # a path, as rank takes
    assert by_path.exit_code == 0 and json.loads(by_path.output) == data
    monkeypatch.chdir(tmp_path)  # a bare folder name here, with no sweeps/ of that name: the folder
    here = CliRunner().invoke(app, ["status", "demo", "--json"])
    assert here.exit_code == 0 and json.loads(here.output) == data, here.output
    res = CliRunner().invoke(app, ["status", str(tmp_path / "demo" / "runs")])
    one_error(res, ErrorKind.FILE, str(tmp_path / "demo" / "runs"), "ledger.jsonl")
    res = CliRunner().invoke(app, ["status", "demo", "--root", str(tmp_path), "--watch", "--interval", "-1"])
    one_error(res, ErrorKind.SETTING, "--interval -1", "> 0")
