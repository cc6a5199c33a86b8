"""Nothing finished is ever unfinished. A job writes its run's end to run.json, then the ledger's `finished` event;
a job killed between the two, or after both, or whose `finished` line is torn, still leaves a run that is `done`
in run.json, in the ledger's fold, in `ablate status`, and to `rank` (its curve is read, not dropped), and that a
re-run of the sweep neither resubmits nor calls failed. No path that records a death (the local runner's cleanup,
the next `ablate sweep`, the job's own failure path, a late signal) turns a finished run.json into anything else.

The kills are real: ABLATE_CRASHPOINT makes the job SIGKILL itself at a named point (ablate.launch.job), under the
real local executor and the toy job. Every wait is on a state, never on a clock."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config.identity import arm_id, run_id
from ablate.curves.inputs import curves_from_sweep
from ablate.launch.job import RunJob
from ablate.launch.status import wait_for
from ablate.launch.submit import launch_sweep
from ablate.storage import store
from ablate.storage.ledger import Ledger, proc_alive
from ablate.storage.rundir import RunDir
from jobs import GUARD, TOY_JOB, assert_complete, executions, run_dir, toy_run, toy_sweep, until

runner = CliRunner()
STEPS = 8
POINTS = ("job_after_ended", "job_after_finished")
CRASH_ON_EXIT_JOB = f"{Path(__file__).resolve()}:done_then_crash"


def done_then_crash(config, run_dir, **kw):
    """A job function that finishes its run (run.json done, as the trainer writes it), then crashes on its way out."""
    out = toy_run(config, run_dir, **kw)
    RunDir(run_dir).ended("done", step=out["steps"])
    raise RuntimeError("crashed on the way out, after the run ended")


def ids(sweep):
    return [r.run_id for r in sweep.runs]


def sweep(root, arms=("a", "b"), **toy):
    """The toy job's sweep of `arms` (one seed each) with the ids `ablate sweep` gives: each arm's config differs
    (its learning rate; the toy job ignores it) and each run's ids are its config's hash, as `rank` checks."""
    sw = toy_sweep(root, arms=arms, seeds=(0,), toy={"steps": STEPS, **toy})
    knobs, runs = store.read_json(Path(root) / sw.name / "toy.json"), []
    for i, r in enumerate(sw.runs):
        cfg = r.config.replace(**{"optim.lr": r.config.optim.lr * (i + 1)})
        runs.append(dataclasses.replace(r, run_id=run_id(cfg), arm_id=arm_id(cfg), config=cfg))
    store.write_json(
        Path(root) / sw.name / "toy.json", {new.run_id: knobs[old.run_id] for old, new in zip(sw.runs, runs)}
    )
    return dataclasses.replace(sw, runs=runs)


def runners(root, name):
    return {(e["runner"]["pid"], e["runner"]["start"]) for e in Ledger(root / name).events() if e.get("runner")}


def wait_runners(root, name):
    """Every local runner of the sweep has exited (a runner records what its jobs could not before it exits)."""
    until(lambda: not any(proc_alive(p, s) for p, s in runners(root, name)), "the sweep's local runners to exit")


def killed_jobs(root, name) -> int:
    """Jobs that did not return: submitit writes a job's result pickle when it returns, so a job SIGKILLed at a
    crash point leaves none."""
    jobs = [p for p in (Path(root) / name / "jobs").iterdir() if p.is_dir() and any(p.glob("*_submitted.pkl"))]
    return sum(not any(p.glob("*_result.pkl")) for p in jobs)


def assert_finished(root, sw, *, recovered) -> None:
    """Every run of the sweep is done everywhere it is read, and a re-run submits nothing and fails nothing; then
    the ledger says each run finished once (for the run ids in `recovered`, written by whoever found its job gone,
    not by the job)."""
    name, rids = sw.name, ids(sw)
    led = Ledger(Path(root) / name)
    for rid in rids:
        assert_complete(run_dir(root, name, rid), STEPS)  # run.json done, metrics 1..STEPS
    res = runner.invoke(app, ["status", name, "--root", str(root)])
    assert res.exit_code == 0, res.output
    assert f"{name}: {len(rids)} runs: {len(rids)} done, 0 running, 0 failed" in res.output, res.output
    curves, skipped = curves_from_sweep(Path(root) / name)  # what fit and rank read
    assert skipped == [] and sorted(c.run for c in curves) == sorted(r.label for r in sw.runs)
    res = runner.invoke(app, ["rank", str(Path(root) / name), "--json", "--n-boot", "50", "--to", "0.0016"])
    assert res.exit_code == 0, res.output
    ranked = json.loads(res.stdout)
    assert ranked["baseline"] == "arm=a" and sorted(a["arm"] for a in ranked["arms"]) == ["arm=a", "arm=b"], ranked
    assert all(a["seeds"] == 1 for a in ranked["arms"]), ranked  # each arm's one run counted
    plan = launch_sweep(sw, root=root, executor="local", job=TOY_JOB, echo=None)
    assert plan.submit == [] and sorted(plan.done) == sorted(rids) and plan.failed == []
    assert {rid: r.state for rid, r in led.fold().items()} == dict.fromkeys(rids, "done")
    assert not [e for e in led.events() if e.get("event") == "failed"]
    finished = [e for e in led.events() if e.get("event") == "finished"]
    assert sorted(e["run_id"] for e in finished) == sorted(rids)  # one `finished` event each
    assert sorted(e["run_id"] for e in finished if "recovered" in e) == sorted(recovered), finished
    for rid in rids:
        assert store.read_json(run_dir(root, name, rid) / "run.json")["status"] == "done"
        assert len(executions(run_dir(root, name, rid))) == 1


# ---- the real thing: a job SIGKILLed at each point of recording its end ----


@pytest.mark.parametrize("point", POINTS)
def test_a_job_killed_while_recording_its_end_is_done_and_its_runner_says_so(tmp_path, monkeypatch, point):
    """The local runner's cleanup finds the job gone: it records the `finished` event the job did not write (after
    run.json said done), or nothing (after the ledger did), never `failed`."""
    monkeypatch.setenv("ABLATE_CRASHPOINT", point)  # the runner and its jobs inherit it
    sw = sweep(tmp_path)
    launch_sweep(sw, root=tmp_path, executor="local", max_parallel=2, job=TOY_JOB, echo=None)
    wait_runners(tmp_path, "toy")
    monkeypatch.delenv("ABLATE_CRASHPOINT")  # a resubmitted run would now run again: the checks would see it
    assert killed_jobs(tmp_path, "toy") == 2  # both jobs did die at the crash point
    assert all(r.state == "done" for r in Ledger(tmp_path / "toy").fold().values())  # the runner said so
    assert_finished(tmp_path, sw, recovered=ids(sw) if point == "job_after_ended" else [])


@pytest.mark.parametrize("point, torn", [("job_after_ended", False), ("job_after_finished", True)])
def test_a_job_killed_while_recording_its_end_with_no_runner_left_is_done_on_the_next_sweep(
    tmp_path, monkeypatch, point, torn
):
    """Its runner died first (nothing cleans up after the job): `ablate status` reads the run done from run.json,
    writing nothing, and the next `ablate sweep` appends the missing `finished` event, also after a torn one."""
    hold = tmp_path / "hold"
    hold.touch()
    monkeypatch.setenv("ABLATE_CRASHPOINT", point)
    sw = sweep(tmp_path, hold=str(hold))
    launch_sweep(sw, root=tmp_path, executor="local", max_parallel=2, job=TOY_JOB, echo=None)
    wait_for(tmp_path, "toy", ids(sw), states=("running",), timeout=GUARD)
    led = Ledger(tmp_path / "toy")
    jobs = [(r.pid, r.pid_start) for r in led.fold().values()]
    for pid, _ in runners(tmp_path, "toy"):
        os.kill(pid, signal.SIGKILL)
    wait_runners(tmp_path, "toy")
    hold.unlink()  # the jobs go on to their end, and die at the crash point
    until(lambda: not any(proc_alive(p, s) for p, s in jobs), "the jobs to die at the crash point")
    monkeypatch.delenv("ABLATE_CRASHPOINT")
    assert killed_jobs(tmp_path, "toy") == 2
    lost = ids(sw)  # the runs whose end the ledger lacks
    if torn:  # the last job died mid-append: its `finished` line lost its tail
        data = led.path.read_bytes()
        last = json.loads(data.rstrip(b"\n").rsplit(b"\n", 1)[-1])
        assert last["event"] == "finished"
        led.path.write_bytes(data.rstrip(b"\n")[:-10])
        lost = [last["run_id"]]
    assert sorted(rid for rid, r in led.fold().items() if r.state == "running") == sorted(lost)
    before = led.path.read_bytes()
    res = runner.invoke(app, ["status", "toy", "--root", str(tmp_path)])
    assert res.exit_code == 0 and "toy: 2 runs: 2 done, 0 running, 0 failed" in res.output, res.output
    assert led.path.read_bytes() == before  # status only reads
    for rid in ids(sw):
        assert store.read_json(run_dir(tmp_path, "toy", rid) / "run.json")["status"] == "done"
    assert_finished(tmp_path, sw, recovered=lost)
    if torn:  # the recovered event starts on a line of its own, after the torn one
        lines = led.path.read_bytes().split(b"\n")
        assert len(lines) >= 3 and not lines[-1] and json.loads(lines[-2])["event"] == "finished"


def test_a_job_function_that_crashes_after_its_run_ended_leaves_it_done(tmp_path):
    """The job's own failure path: run.json keeps `done`, and the ledger says `finished`, not `failed`."""
    sw = sweep(tmp_path)
    launch_sweep(sw, root=tmp_path, executor="debug", job=CRASH_ON_EXIT_JOB, echo=None)
    for rid in ids(sw):
        info = RunDir(run_dir(tmp_path, "toy", rid)).info()
        assert (info.status, info.cause, info.error) == ("done", None, None)
    assert_finished(tmp_path, sw, recovered=ids(sw))


# ---- a requeued job, a late signal ----


def _killed_after_ended(tmp_path, monkeypatch):
    """A one-run sweep whose job was SIGKILLed after run.json said done, with its runner gone: the ledger says
    running. Returns (its spec, the batch)."""
    hold = tmp_path / "hold"
    hold.touch()
    monkeypatch.setenv("ABLATE_CRASHPOINT", "job_after_ended")
    sw = sweep(tmp_path, arms=("a",), hold=str(hold))
    spec = sw.runs[0]
    launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, echo=None)
    wait_for(tmp_path, "toy", ids(sw), states=("running",), timeout=GUARD)
    rec = Ledger(tmp_path / "toy").fold()[spec.run_id]
    for pid, _ in runners(tmp_path, "toy"):
        os.kill(pid, signal.SIGKILL)
    wait_runners(tmp_path, "toy")
    hold.unlink()
    until(lambda: not proc_alive(rec.pid, rec.pid_start), "the job to die at the crash point")
    monkeypatch.delenv("ABLATE_CRASHPOINT")
    assert Ledger(tmp_path / "toy").fold()[spec.run_id].state == "running"
    assert store.read_json(run_dir(tmp_path, "toy", spec.run_id) / "run.json")["status"] == "done"
    return spec, rec.batch


def test_a_requeued_job_of_a_finished_run_records_it_finished_and_does_not_run(tmp_path, monkeypatch):
    """SLURM requeues a job whose node died after the run ended: the new job's claim finds run.json done."""
    spec, batch = _killed_after_ended(tmp_path, monkeypatch)
    out = RunJob(spec, str(tmp_path / "toy"), batch, TOY_JOB)()
    assert out == {"run_id": spec.run_id, "skipped": "finished"}
    assert len(executions(run_dir(tmp_path, "toy", spec.run_id))) == 1
    rec = Ledger(tmp_path / "toy").fold()[spec.run_id]
    assert rec.state == "done" and rec.attempts == 1  # no second `started`


def test_a_signal_after_the_run_ended_neither_preempts_nor_requeues_it(tmp_path, monkeypatch):
    """USR2 (preemption, the time limit) reaching a job after run.json said done: no `preempted`, no requeue."""
    spec, batch = _killed_after_ended(tmp_path, monkeypatch)
    job = RunJob(spec, str(tmp_path / "toy"), batch, TOY_JOB)
    assert job.checkpoint() is None
    assert store.read_json(run_dir(tmp_path, "toy", spec.run_id) / "run.json")["status"] == "done"
    led = Ledger(tmp_path / "toy")
    assert led.fold()[spec.run_id].state == "done"
    assert job.checkpoint() is None  # again, now that the ledger says finished: nothing more is written
    assert [e["event"] for e in led.events()][-1:] == ["finished"]
    assert sum(e["event"] == "finished" for e in led.events()) == 1
    assert not any(e["event"] == "preempted" for e in led.events())


# ---- the two mechanisms, one at a time ----


@pytest.mark.parametrize("finished", ["done", "diverged"])
def test_no_transition_turns_a_finished_run_json_into_another_state(tmp_path, finished):
    rd = RunDir(tmp_path / "r")
    rd.path.mkdir()
    rd.started(pid=1)
    assert rd.ended(finished, reason="why" if finished == "diverged" else None, step=4) is True
    kept = store.read_json(rd.info_path)
    attempts = {
        "failed": lambda: rd.failed("killed", "local job 1 ended without recording a result"),
        "try_failed": lambda: rd.try_failed("killed", RuntimeError("boom")),
        "preempted": lambda: rd.ended("preempted", reason="timeout"),
        "pruned": lambda: rd.ended("pruned", reason="settled"),
        "started": lambda: rd.started(pid=2),
        "submitted": lambda: rd.submitted(
            run_id="r", arm_id="a", label="x", sweep="s", overrides=[], baseline=False, executor="local", batch="b2"
        ),
    }
    for what, attempt in attempts.items():
        assert attempt() is False, what
        assert store.read_json(rd.info_path) == kept, what  # nothing written, not even a field
    other = "diverged" if finished == "done" else "done"
    assert rd.ended(other) is False and store.read_json(rd.info_path) == kept  # not even the other verdict
    rd.progress(val_pass_rate=0.5)  # facts without a state change still land
    assert rd.info().status == finished and rd.info().val_pass_rate == 0.5
    with rd.writer():  # the run itself, trained again (`ablate train` on its directory): its own state moves
        assert rd.started(pid=3) is True and rd.info().status == "running"
        assert rd.ended(other) is True and rd.info().status == other


def test_other_states_still_move(tmp_path):
    """The guard is about finished runs only: a failed, preempted or pruned run is submitted and run again."""
    for state in ("failed", "preempted", "pruned", "unstable"):
        rd = RunDir(tmp_path / state)
        rd.path.mkdir()
        assert (rd.failed("killed", "x") if state == "failed" else rd.ended(state, reason="x")) is True
        assert (
            rd.submitted(
                run_id=state,
                arm_id="a",
                label="x",
                sweep="s",
                overrides=[],
                baseline=False,
                executor="local",
                batch="b",
            )
            is True
        )
        assert rd.info().status == "pending"
        assert rd.started(pid=1) is True and rd.info().status == "running"


def test_the_ledger_fold_keeps_a_finished_run_finished(tmp_path):
    """Events of the same submission after `finished` (a late death verdict, a signal, a requeue) are ignored; a new
    submission (--force) starts afresh."""
    led = Ledger(tmp_path / "s")
    base = {"run_id": "r1", "batch": "b1"}
    led.append(
        {"event": "submitting", **base, "label": "x", "executor": "local", "launcher": {"pid": 1, "start": 1}},
        {"event": "submitted", **base, "runner": {"pid": 1, "start": 1}},
        {"event": "started", **base, "pid": 1, "start": 1, "attempt": 1},
        {"event": "finished", **base, "status": "done"},
        {"event": "failed", **base, "cause": "killed", "error": "died"},
        {"event": "preempted", **base, "requeue": True, "requeues": 1},
        {"event": "requeued", **base, "requeues": 1},
        {"event": "started", **base, "pid": 2, "start": 2, "attempt": 2},
    )
    rec = led.fold()["r1"]
    assert (rec.state, rec.cause, rec.error, rec.attempts, rec.pid) == ("done", None, None, 1, 1)
    led.append(
        {"event": "submitting", "run_id": "r1", "batch": "b2", "label": "x", "executor": "local"},
        {"event": "failed", "run_id": "r1", "batch": "b2", "cause": "submit", "error": "sbatch said no"},
    )
    assert led.fold()["r1"].state == "failed"


def test_force_archives_a_finished_run_the_ledger_lost_and_runs_it_again(tmp_path):
    """A done run.json whose ledger events are gone plans as new; without --force it is not run over (its job finds
    it finished), and --force moves the directory to archive/ first and runs it afresh."""
    sw = sweep(tmp_path, arms=("a",))
    rid = ids(sw)[0]
    launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    assert RunDir(run_dir(tmp_path, "toy", rid)).info().status == "done"
    (tmp_path / "toy" / "ledger.jsonl").unlink()  # the ledger is lost; run.json still says done
    launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    assert len(executions(run_dir(tmp_path, "toy", rid))) == 1 and not (tmp_path / "toy" / "archive").exists()
    assert Ledger(tmp_path / "toy").fold()[rid].state == "done"
    (tmp_path / "toy" / "ledger.jsonl").unlink()
    launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None, force=True)
    archived = list((tmp_path / "toy" / "archive").iterdir())
    assert [p.name.split(".")[0] for p in archived] == [rid]
    assert store.read_json(archived[0] / "run.json")["status"] == "done"
    assert len(executions(run_dir(tmp_path, "toy", rid))) == 1  # the new directory's first execution
    assert RunDir(run_dir(tmp_path, "toy", rid)).info().status == "done"
