"""Integration tests on the real single-node SLURM cluster (slurm/up; `make test` starts it).

Deselected unless ABLATE_SLURM=1 (tests/conftest.py); with it, a cluster that is not UP fails loudly. Every wait is on
a state (a file, a job state, a signal); the `timeout=` values only bound how long a broken build hangs.
"""

from __future__ import annotations

import subprocess

import pytest

from ablate.errors import ErrorKind
from ablate.launch.executors import resolve_executor
from ablate.launch.slurm import squeue_states
from ablate.launch.status import wait_for
from ablate.launch.submit import launch_sweep
from ablate.storage import store
from ablate.storage.ledger import Ledger, proc_alive
from jobs import GUARD, TOY_JOB, assert_complete, executions, refused, run_dir, toy_sweep, until

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]


def launch(sw, root, **kw):
    return launch_sweep(sw, root=root, executor="slurm", profile="local", job=TOY_JOB, echo=None, **kw)


def test_array_sweep_rerun_scancel_and_retry_failed(tmp_path):
    hold = tmp_path / "hold"
    hold.touch()  # run arm=b,seed=1 waits at step 2 while this file exists, so it can be cancelled running
    sw = toy_sweep(tmp_path, toy={"steps": 3, "sleep": 0.1}, per_run={"arm=b,seed=1": {"hold": str(hold)}})
    ids = [r.run_id for r in sw.runs]
    assert resolve_executor("auto") == "slurm"  # the controller answers `scontrol ping`
    plan = launch(sw, tmp_path)
    assert plan.submit == ids
    arrays = {j.split("_")[0] for j in plan.job_ids.values()}
    assert len(arrays) == 1 and sorted(j.split("_")[1] for j in plan.job_ids.values()) == ["0", "1", "2", "3"]
    wait_for(tmp_path, "toy", ids[:3], timeout=GUARD)
    for rid in ids[:3]:
        assert_complete(run_dir(tmp_path, "toy", rid), 3)
    wait_for(tmp_path, "toy", ["toy-b1"], states=("running",), timeout=GUARD)
    # Without accounting, one squeue call tells queued/running jobs from jobs that left the queue.
    b1, a0 = plan.job_ids["toy-b1"], plan.job_ids["toy-a0"]
    q = until(
        lambda: (q := squeue_states([b1, a0]))[a0][0] == "GONE" and q,  # a finished job may still be COMPLETING
        "the finished job to leave the queue",
    )
    assert q[b1] == ("RUNNING", "")
    again = launch(sw, tmp_path)  # re-running submits nothing: 3 done, 1 running
    assert again.submit == [] and again.running == ["toy-b1"] and len(again.done) == 3

    subprocess.run(["scancel", plan.job_ids["toy-b1"]], check=True)
    st = wait_for(tmp_path, "toy", ["toy-b1"], timeout=GUARD)["toy-b1"]  # from one batched sacct call
    assert (st.state, st.cause) == ("failed", "cancelled")
    # sacct says CANCELLED at scancel's SIGTERM, which submitit's job ignores; SLURM kills it KillWait seconds later.
    # Until then it could still finish the run itself once the hold is gone (and the retry would find it done).
    rec = Ledger(tmp_path / "toy").fold()["toy-b1"]
    until(lambda: not proc_alive(rec.pid, rec.pid_start), "the cancelled job's process to be killed")
    plan = launch(sw, tmp_path)
    assert plan.submit == [] and plan.failed == ["toy-b1"]
    hold.unlink()
    plan = launch(sw, tmp_path, retry_failed=True)
    assert plan.submit == ["toy-b1"]
    wait_for(tmp_path, "toy", ["toy-b1"], timeout=GUARD)
    b1 = run_dir(tmp_path, "toy", "toy-b1")
    assert_complete(b1, 3)  # resumed from its step-1 checkpoint: no gap, no duplicate
    assert len(executions(b1)) == 2
    assert launch(sw, tmp_path).submit == []


def test_preempted_run_checkpoints_requeues_and_finishes_gap_free(tmp_path):
    # The first attempt waits at step 4 until the preemption signal arrives, so the signal finds it running on a
    # machine of any speed; the requeued attempt goes on to the end.
    sw = toy_sweep(tmp_path, arms=("p",), seeds=(0,), toy={"steps": 8, "hold_at": 4, "wait_for_stop": True})
    plan = launch(sw, tmp_path)
    job_id = plan.job_ids["toy-p0"]
    metrics = run_dir(tmp_path, "toy", "toy-p0") / "metrics.jsonl"
    until(lambda: len(store.read_jsonl(metrics)) >= 3, "the job to reach step 3")
    # What SLURM does on preemption, as submitit's own tests do it: SIGTERM, then the USR2 it asked for.
    subprocess.run(["scancel", job_id, "--signal", "SIGTERM"], check=True)
    subprocess.run(["scancel", job_id, "--signal", "USR2"], check=True)
    st = wait_for(tmp_path, "toy", ["toy-p0"], timeout=GUARD)["toy-p0"]
    assert st.state == "done" and st.requeues == 1 and st.attempts == 2
    rdir = run_dir(tmp_path, "toy", "toy-p0")
    assert_complete(rdir, 8)  # complete and gap-free across the requeue
    assert len(executions(rdir)) == 2
    kinds = [e["event"] for e in Ledger(tmp_path / "toy").events()]
    assert kinds == ["launch", "submitting", "submitted", "started", "preempted", "requeued", "started", "finished"]
    pre = next(e for e in Ledger(tmp_path / "toy").events() if e["event"] == "preempted")
    assert pre["requeue"] is True and pre["reason"] == "preemption" and pre["job_id"] == job_id


def test_sbatch_refusal_is_one_error_and_the_runs_stay_new(tmp_path):
    profile = tmp_path / "bad.yaml"
    profile.write_text("partition: nope\n")
    sw = toy_sweep(tmp_path, seeds=(0,))
    with refused(ErrorKind.ENVIRONMENT, "2 runs", "slurm", "partition"):
        launch_sweep(sw, root=tmp_path, executor="slurm", profile=str(profile), job=TOY_JOB, echo=None)
    assert {e["cause"] for e in Ledger(tmp_path / "toy").events() if e["event"] == "failed"} == {"submit"}
    plan = launch(sw, tmp_path)  # fixed profile: the refused runs are new, not failed
    assert plan.new == plan.submit == ["toy-a0", "toy-b0"]
    wait_for(tmp_path, "toy", plan.submit, timeout=GUARD)
