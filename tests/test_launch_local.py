"""Launching through the local and debug executors: completion, throttling, idempotent re-runs, failure triage,
--retry-failed / --force, a launcher killed mid-submission, time limits. Every wait is on a state (a file, a ledger
event, a signal), never on a clock: the tests pass on machines of any speed.

The `timeout=` of `wait_for` and subprocess calls only bounds how long a broken build hangs before it fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from ablate.launch.executors import resolve_executor
from ablate.launch.slurm import load_profile
from ablate.launch.status import sweep_status, wait_for
from ablate.launch.submit import launch_sweep
from ablate.storage import store
from ablate.storage.ledger import Ledger, proc_alive
from jobs import GUARD, TOY_JOB, assert_complete, executions, one_error, refused, run_dir, toy_sweep, until

SRC = str(Path(__file__).resolve().parents[1] / "src")
TESTS = str(Path(__file__).resolve().parent)


def ids(sweep):
    return [r.run_id for r in sweep.runs]


def wait_runners(root, name):
    """Wait until every local runner of the sweep has exited (they end when their queue is empty)."""
    runners = {(e["runner"]["pid"], e["runner"]["start"]) for e in Ledger(root / name).events() if e.get("runner")}
    until(lambda: not any(proc_alive(p, s) for p, s in runners), "the sweep's local runners to exit")


def max_concurrent(events) -> int:
    """The most runs running at once, replayed from the ledger's event order (appends are ordered by its lock)."""
    live, best = set(), 0
    for e in events:
        if e["event"] == "started":
            live.add(e["run_id"])
        elif e["event"] in ("finished", "failed", "preempted"):
            live.discard(e["run_id"])
        best = max(best, len(live))
    return best


def test_local_sweep_runs_throttled_and_rerun_submits_nothing(tmp_path):
    hold = tmp_path / "hold"
    hold.touch()  # every run waits at step 2 while this exists: a launcher that waited for its runs would never return
    sw = toy_sweep(tmp_path, toy={"steps": 3, "hold": str(hold)})
    plan = launch_sweep(sw, root=tmp_path, executor="local", max_parallel=2, job=TOY_JOB, echo=None)
    assert plan.submit == ids(sw) and plan.new == ids(sw)
    assert not any(s.ended for s in sweep_status(tmp_path, "toy"))  # returned while its runs go on
    until(lambda: sum(s.state == "running" for s in sweep_status(tmp_path, "toy")) == 2, "two runs running")
    hold.unlink()
    wait_for(tmp_path, "toy", ids(sw), timeout=GUARD)
    for rid in ids(sw):
        rdir = run_dir(tmp_path, "toy", rid)
        assert_complete(rdir, 3)
        [ex] = executions(rdir)
        assert ex["threads"] == 1 and ex["omp"] == "1"  # the run got its torch thread count
        rj = store.read_json(rdir / "run.json")
        assert rj["run_id"] == rid and rj["arm_id"] and rj["overrides"] and rj["job_id"] and rj["job_logs"]["stderr"]
    assert max_concurrent(Ledger(tmp_path / "toy").events()) == 2  # never more than max_parallel at once
    wait_runners(tmp_path, "toy")
    n_lines = len(Ledger(tmp_path / "toy").events())
    again = launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, echo=None)
    assert again.submit == [] and len(again.done) == 4
    assert again.summary() == "toy: 4 done, 0 running, 0 failed, 0 new -> nothing to submit"
    assert len(Ledger(tmp_path / "toy").events()) == n_lines


def test_max_parallel_holds_per_sweep_not_per_runner(tmp_path):
    """A job orphaned by a dead runner still takes a slot: a new runner under --max-parallel 1 waits for it."""
    hold = tmp_path / "hold"
    hold.touch()
    first = toy_sweep(tmp_path, arms=("a",), seeds=(0,), toy={"steps": 3, "hold": str(hold)})
    launch_sweep(first, root=tmp_path, executor="local", max_parallel=1, job=TOY_JOB, echo=None)
    wait_for(tmp_path, "toy", ["toy-a0"], states=("running",), timeout=GUARD)
    runner = next(e["runner"] for e in Ledger(tmp_path / "toy").events() if e.get("runner"))
    os.kill(runner["pid"], signal.SIGKILL)  # the runner dies; its job goes on (orphaned)
    second = toy_sweep(tmp_path, arms=("a", "b"), seeds=(0,), toy={"steps": 3, "hold": str(hold)})
    plan = launch_sweep(second, root=tmp_path, executor="local", max_parallel=1, job=TOY_JOB, echo=None)
    assert plan.submit == ["toy-b0"] and plan.running == ["toy-a0"]
    log = tmp_path / "toy" / "launch" / f"{plan.batch}.log"
    until(lambda: log.exists() and "waiting: 1 of 1 slots" in log.read_text(), "the new runner to wait for a slot")
    hold.unlink()
    wait_for(tmp_path, "toy", ["toy-a0", "toy-b0"], timeout=GUARD)
    assert max_concurrent(Ledger(tmp_path / "toy").events()) == 1
    wait_runners(tmp_path, "toy")


def test_piped_launch_returns_while_runs_go_on(tmp_path):
    """`ablate sweep ... | cat` must not wait for the jobs (submitit's controllers keep stdio open)."""
    hold = tmp_path / "hold"
    hold.touch()  # the runs block at step 2 until it is removed: a launcher that waited would never return
    code = (
        "import sys; sys.path[:0] = [sys.argv[2]]; from pathlib import Path; from jobs import toy_sweep, TOY_JOB;"
        "from ablate.launch.submit import launch_sweep;"
        "launch_sweep(toy_sweep(Path(sys.argv[1]), seeds=(0,), toy={'steps': 3, 'hold': sys.argv[3]}),"
        " root=Path(sys.argv[1]), executor='local', job=TOY_JOB)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), TESTS, str(hold)],
        capture_output=True,
        text=True,
        timeout=GUARD,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert out.returncode == 0, out.stderr
    assert "2 new -> submitting 2 via local" in out.stdout
    assert not any(s.ended for s in sweep_status(tmp_path, "toy"))
    hold.unlink()
    sts = wait_for(tmp_path, "toy", ["toy-a0", "toy-b0"], timeout=GUARD)
    assert all(s.state == "done" for s in sts.values())
    wait_runners(tmp_path, "toy")


def test_failure_triage_retry_failed_and_force(tmp_path):
    sw = toy_sweep(tmp_path, toy={"steps": 3}, per_run={"arm=b,seed=1": {"fail_at": 2}})
    launch_sweep(sw, root=tmp_path, executor="local", max_parallel=2, job=TOY_JOB, echo=None)
    sts = wait_for(tmp_path, "toy", ids(sw), timeout=GUARD)
    bad = sts["toy-b1"]
    assert (bad.state, bad.cause) == ("failed", "exception")
    assert "ValueError: toy failure at step 2" in bad.error and "Traceback" in bad.error
    # the job wrote the traceback to its log before the ledger said `failed`: the log path leads to it
    assert "toy failure at step 2" in Path(bad.log).read_text()
    rj = store.read_json(run_dir(tmp_path, "toy", "toy-b1") / "run.json")
    assert rj["status"] == "failed" and rj["cause"] == "exception" and rj["error"]["class"] == "ValueError"
    assert rj["error"]["traceback"][-1] == "ValueError: toy failure at step 2" and rj["log"] == bad.log
    wait_runners(tmp_path, "toy")
    plan = launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, echo=None)
    assert plan.submit == [] and plan.failed == ["toy-b1"] and len(plan.done) == 3
    plan = launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, retry_failed=True, echo=None)
    assert plan.submit == ["toy-b1"]
    wait_for(tmp_path, "toy", ["toy-b1"], timeout=GUARD)
    assert len(executions(run_dir(tmp_path, "toy", "toy-b1"))) == 2
    assert len(executions(run_dir(tmp_path, "toy", "toy-a0"))) == 1
    wait_runners(tmp_path, "toy")
    # --force re-runs everything from scratch; the old directories are archived, not overwritten.
    plan = launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, force=True, echo=None)
    assert plan.submit == ids(sw)
    wait_for(tmp_path, "toy", ids(sw), timeout=GUARD)
    assert_complete(run_dir(tmp_path, "toy", "toy-a0"), 3)
    assert len(executions(run_dir(tmp_path, "toy", "toy-a0"))) == 1
    archived = sorted(p.name.split(".")[0] for p in (tmp_path / "toy" / "archive").iterdir())
    assert archived == ids(sw)
    wait_runners(tmp_path, "toy")


def test_killed_run_is_failed_killed_and_running_run_is_never_resubmitted(tmp_path):
    hold = tmp_path / "hold"
    hold.touch()
    sw = toy_sweep(tmp_path, seeds=(0,), arms=("a",), toy={"steps": 3, "hold": str(hold)})
    launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, echo=None)
    wait_for(tmp_path, "toy", ["toy-a0"], states=("running",), timeout=GUARD)
    plan = launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, force=True, echo=None)
    assert plan.submit == [] and plan.running == ["toy-a0"]  # not even --force submits a live run twice
    rec = Ledger(tmp_path / "toy").fold()["toy-a0"]
    os.kill(rec.pid, signal.SIGKILL)  # the OOM killer, say
    st = wait_for(tmp_path, "toy", ["toy-a0"], timeout=GUARD)["toy-a0"]
    assert (st.state, st.cause) == ("failed", "killed") and "without recording a result (killed" in st.error
    wait_runners(tmp_path, "toy")  # the runner records the death in run.json before it exits
    assert store.read_json(run_dir(tmp_path, "toy", "toy-a0") / "run.json")["status"] == "failed"  # not "running"
    st = sweep_status(tmp_path, "toy")[0]
    assert "without recording a result (killed" in st.error and "FINISHED" not in st.error  # submitit's word
    again = launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, echo=None)
    assert again.submit == [] and "1 failed left as they are: --retry-failed resubmits them" in again.summary()


def test_debug_executor_runs_in_process(tmp_path):
    sw = toy_sweep(tmp_path, toy={"steps": 2})
    plan = launch_sweep(sw, root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    assert plan.submit == ids(sw)
    for rid in ids(sw):  # done by the time launch_sweep returns, in this very process
        assert_complete(run_dir(tmp_path, "toy", rid), 2)
        assert [e["pid"] for e in executions(run_dir(tmp_path, "toy", rid))] == [os.getpid()]
    assert all(s.state == "done" and s.job_id.startswith("DEBUG_") for s in sweep_status(tmp_path, "toy"))
    with open(tmp_path / "toy" / "ledger.jsonl", "ab") as f:
        f.write(b'{"event": "submitting", "run_id": "toy-a0", "bat')  # a launcher died mid-append
    assert launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, echo=None).submit == []
    from typer.testing import CliRunner

    from ablate.cli import app

    res = CliRunner().invoke(app, ["status", "toy", "--root", str(tmp_path), "--watch", "--interval", "0.1"])
    assert res.exit_code == 0 and "toy: 4 runs: 4 done" in res.output  # --watch ends once every run has


@pytest.mark.parametrize("point", ["after_submitting", "after_spawn"])
def test_launcher_killed_mid_submission_loses_and_duplicates_nothing(tmp_path, point):
    """Whatever the killed launcher's orphaned runner managed to start before the re-run, every run executes
    exactly once and none is lost."""
    code = (
        "import sys; sys.path[:0] = [sys.argv[2]]; from pathlib import Path; from jobs import toy_sweep, TOY_JOB;"
        "from ablate.launch.submit import launch_sweep;"
        "launch_sweep(toy_sweep(Path(sys.argv[1]), toy={'steps': 2}), root=Path(sys.argv[1]), executor='local',"
        " max_parallel=2, job=TOY_JOB)"
    )
    env = {**os.environ, "PYTHONPATH": SRC, "ABLATE_CRASHPOINT": point}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), TESTS], capture_output=True, text=True, env=env, timeout=GUARD
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    sw = toy_sweep(tmp_path, toy={"steps": 2})
    plan = launch_sweep(sw, root=tmp_path, executor="local", max_parallel=2, job=TOY_JOB, echo=None)
    assert sorted(plan.submit + plan.running + plan.done) == sorted(ids(sw))  # each run accounted for
    if point == "after_submitting":  # no runner was spawned: every run is submitted again
        assert plan.submit == ids(sw)
    wait_for(tmp_path, "toy", ids(sw), timeout=GUARD)
    wait_runners(tmp_path, "toy")
    for rid in ids(sw):
        rdir = run_dir(tmp_path, "toy", rid)
        assert_complete(rdir, 2)
        assert len(executions(rdir)) == 1, f"{rid} ran {len(executions(rdir))} times"
    assert launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, echo=None).submit == []


def test_two_launchers_at_once_submit_each_run_once(tmp_path):
    hold = tmp_path / "hold"
    hold.touch()  # the runs cannot end while both launchers plan: the second sees all four live
    code = (
        "import sys; sys.path[:0] = [sys.argv[2]]; from pathlib import Path; from jobs import toy_sweep, TOY_JOB;"
        "from ablate.launch.submit import launch_sweep;"
        "launch_sweep(toy_sweep(Path(sys.argv[1]), toy={'steps': 2, 'hold': sys.argv[3], 'hold_at': 1}),"
        " root=Path(sys.argv[1]), executor='local', job=TOY_JOB)"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path), TESTS, str(hold)], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    outs = sorted(p.communicate(timeout=GUARD)[0].strip() for p in procs)
    assert outs == sorted(
        [
            "toy: 0 done, 4 running, 0 failed, 0 new -> nothing to submit",
            "toy: 0 done, 0 running, 0 failed, 4 new -> submitting 4 via local",
        ]
    )
    hold.unlink()
    sw = toy_sweep(tmp_path, toy={"steps": 2})
    wait_for(tmp_path, "toy", ids(sw), timeout=GUARD)
    wait_runners(tmp_path, "toy")
    subs = [e["run_id"] for e in Ledger(tmp_path / "toy").events() if e["event"] == "submitting"]
    assert sorted(subs) == sorted(ids(sw))
    assert all(len(executions(run_dir(tmp_path, "toy", r))) == 1 for r in ids(sw))


def test_executor_and_profile_errors(tmp_path):
    with refused(ErrorKind.SETTING, "'sge'", "local, slurm, debug, auto"):
        resolve_executor("sge")
    assert resolve_executor("local") == "local"
    bad = tmp_path / "p.yaml"
    bad.write_text("partition: gpu\ncpus_per_tsk: 4\n")
    with refused(ErrorKind.RECIPE, str(bad), "'cpus_per_tsk'", "'cpus_per_task'"):
        load_profile(str(bad))
    assert load_profile("local")["partition"] == "debug"
    assert load_profile("example-cluster")["mem"] == "120G"
    with refused(ErrorKind.RECIPE, "'nope'", "example-cluster, local", "--profile ./slurm/nope.yaml"):
        load_profile("nope")


def test_local_time_limit_checkpoints_and_requeues(tmp_path):
    """At the time limit the local controller sends USR2: the run stops at a step boundary, the job is requeued and
    the run resumes, with gap-free metrics. The first attempt waits at step 3 for that signal, so the limit is
    reached on any machine, however fast; 10 s of the 15 s limit are left to checkpoint, however slow."""
    sw = toy_sweep(
        tmp_path,
        arms=("t",),
        seeds=(0,),
        toy={"steps": 10, "hold_at": 3, "wait_for_stop": True},
        launcher={"timeout_min": 0.25, "signal_delay_s": 10},
    )
    launch_sweep(sw, root=tmp_path, executor="local", job=TOY_JOB, echo=None)
    st = wait_for(tmp_path, "toy", ["toy-t0"], timeout=GUARD)["toy-t0"]
    assert st.state == "done" and st.requeues >= 1 and st.attempts == st.requeues + 1
    rdir = run_dir(tmp_path, "toy", "toy-t0")
    assert_complete(rdir, 10)
    assert len(executions(rdir)) == st.attempts
    pre = [e for e in Ledger(tmp_path / "toy").events() if e["event"] == "preempted"]
    assert [(e["reason"], e["requeue"]) for e in pre] == [("timeout", True)] * st.requeues
    wait_runners(tmp_path, "toy")


def test_a_job_out_of_time_is_told_apart_from_one_out_of_requeues(tmp_path):
    """Each USR2 at the time limit counts (the count travels with the requeued job): past max_requeues the job is
    out of time, which submitit ends and the job records as failed(timeout), not by reading submitit's message."""
    from ablate.launch.job import RunJob

    spec = toy_sweep(tmp_path, arms=("a",), seeds=(0,)).runs[0]
    sdir = tmp_path / "toy"
    Ledger(sdir).append(
        {"event": "submitting", "run_id": spec.run_id, "batch": "b1", "label": spec.label, "executor": "local"}
    )
    job = RunJob(spec, str(sdir), "b1", TOY_JOB, max_requeues=1, timeout_min=0.01)  # any age is past its limit
    assert job.checkpoint() is not None and job.timeouts == 1 and not job.out_of_time
    assert job.checkpoint() is None and job.out_of_time  # no requeue left: the run stays preempted
    pre = [e for e in Ledger(sdir).events() if e["event"] == "preempted"]
    assert [(e["reason"], e["requeue"]) for e in pre] == [("timeout", True), ("timeout", False)]
    assert store.read_json(run_dir(tmp_path, "toy", spec.run_id) / "run.json")["status"] == "preempted"


@pytest.mark.parametrize(
    ("signals", "submitit_says"),
    [
        # every requeue after a timeout: the third timeout is one more than max_num_timeout allows
        (["timeout", "timeout", "timeout"], "timed-out too many times"),
        # a preemption used one requeue: the job is out of requeues, not out of time
        (["preemption", "timeout", "timeout"], "checkpoint function returned None"),
        (["timeout", "preemption", "preemption"], "checkpoint function returned None"),
    ],
)
def test_out_of_time_agrees_with_submitits_own_signal_handler(tmp_path, monkeypatch, signals, submitit_says):
    """submitit's SignalHandler, driven as a SLURM job's USR2 drives it, across requeues (each attempt unpickles the
    job it dumped): whenever it ends the job as timed out too often, the job says out_of_time, and only then."""
    import time

    from submitit.core import utils
    from submitit.core.job_environment import SignalHandler
    from submitit.core.utils import DelayedSubmission

    from ablate.launch.job import RunJob

    spec = toy_sweep(tmp_path, arms=("a",), seeds=(0,)).runs[0]
    sdir = tmp_path / "toy"
    Ledger(sdir).append(
        {"event": "submitting", "run_id": spec.run_id, "batch": "b1", "label": spec.label, "executor": "slurm"}
    )
    requeues = 2
    delayed = DelayedSubmission(RunJob(spec, str(sdir), "b1", TOY_JOB, max_requeues=requeues, timeout_min=60))
    delayed.set_timeout(60, requeues)  # what the executor does with max_num_timeout=max_requeues
    pickled = tmp_path / "submitted.pkl"
    delayed.dump(pickled)

    requeued: list[int] = []

    class Env:  # the job environment of rank 0 on SLURM, with the requeue recorded instead of run
        global_rank = 0

        def _requeue(self, countdown: int) -> None:
            requeued.append(countdown)

    paths = type("Paths", (), {"submitted_pickle": pickled})()
    monkeypatch.setattr(SignalHandler, "_exit", lambda self: None)
    ended = None
    for n, kind in enumerate(signals):
        attempt = DelayedSubmission.load(pickled)  # a new attempt unpickles the job its predecessor dumped
        handler = SignalHandler(Env(), paths, attempt)
        age = 49 * 60 if kind == "timeout" else 60  # past 80% of the 60-minute limit, or early
        handler._start_time = attempt.function._loaded_at = time.time() - age
        try:
            handler.checkpoint_and_try_requeue(signal.SIGUSR2)
        except utils.UncompletedJobError as e:
            ended = (n, str(e), attempt.function.out_of_time)
            break
        assert not attempt.function.out_of_time
    assert ended is not None and ended[0] == len(signals) - 1 and submitit_says in ended[1]
    assert ended[2] == (submitit_says == "timed-out too many times")
    assert len(requeued) == len(signals) - 1  # requeued after every signal but the last


def test_cli_sweep_and_status_on_a_real_recipe(tmp_path):
    from typer.testing import CliRunner

    from ablate.cli import app

    recipe = str(RECIPES_DIR / "loss.yaml")
    args = ["sweep", recipe, "--root", str(tmp_path), "-e", "debug", "--job", TOY_JOB]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "loss: 0 done, 0 running, 0 failed, 4 new -> submitting 4 via debug" in res.output
    res = CliRunner().invoke(app, args[:-4] + ["--job", TOY_JOB])  # default executor: the recipe's launcher
    assert res.exit_code == 0 and "loss: 4 done, 0 running, 0 failed, 0 new -> nothing to submit" in res.output
    res = CliRunner().invoke(app, ["status", "loss", "--root", str(tmp_path), "--json"])
    data = __import__("json").loads(res.output)
    assert data["summary"]["done"] == 4
    want = sorted(f"loss={x},seed=0" for x in ("cispo", "dapo", "grpo", "gspo"))
    assert sorted(r["label"] for r in data["runs"]) == want
    # --force re-runs all four through the local executor; --follow waits for them with a progress bar.
    res = CliRunner().invoke(
        app, args[:-4] + ["-e", "local", "--max-parallel", "2", "--force", "--follow", "--job", TOY_JOB]
    )
    assert res.exit_code == 0 and "4 done, 0 running, 0 failed, 0 new -> submitting 4 via local" in res.output
    assert "4/4" in res.output
    assert all(s.state == "done" and s.executor == "local" for s in sweep_status(tmp_path, "loss"))
    res = CliRunner().invoke(app, ["sweep", recipe, "--root", str(tmp_path), "-e", "pbs"])
    one_error(res, ErrorKind.SETTING, "--executor pbs", "local, slurm, debug, auto")


def test_follow_exits_1_and_says_where_to_look_when_runs_fail(tmp_path):
    from typer.testing import CliRunner

    from ablate.cli import app
    from jobs import FAILING_JOB

    recipe = str(RECIPES_DIR / "loss.yaml")
    args = ["sweep", recipe, "--root", str(tmp_path), "-e", "debug", "--follow", "--job", FAILING_JOB]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output
    assert f"4 of 4 followed run(s) did not finish (4 failed): ablate status loss --root {tmp_path}" in res.output


def test_a_changed_relaunch_is_refused_not_mixed_into_the_sweep(tmp_path):
    """Runs of another config under the same labels (here another train.max_steps) are refused in one line that
    names what changed, before anything is submitted; the same config launches as before."""
    from typer.testing import CliRunner

    from ablate.cli import app

    recipe = str(RECIPES_DIR / "loss.yaml")
    args = ["sweep", recipe, "--root", str(tmp_path), "-e", "debug", "--job", TOY_JOB]
    assert CliRunner().invoke(app, [*args, "train.max_steps=3"]).exit_code == 0
    before = (tmp_path / "loss" / "ledger.jsonl").read_text()
    res = CliRunner().invoke(app, [*args, "train.max_steps=4"])
    one_error(res, ErrorKind.STATE, str(tmp_path / "loss"), "loss=grpo,seed=0", "train.max_steps 3 -> 4", "--root")
    assert (tmp_path / "loss" / "ledger.jsonl").read_text() == before  # nothing submitted
    assert len(list((tmp_path / "loss" / "runs").iterdir())) == 4
    again = CliRunner().invoke(app, [*args, "train.max_steps=3"])
    assert again.exit_code == 0 and "4 done, 0 running, 0 failed, 0 new -> nothing to submit" in again.output
    # --dry-run says the same before anything: the change refused, else each run's state and the destination
    ledger = (tmp_path / "loss" / "ledger.jsonl").read_text()
    dry = [*args, "--dry-run"]
    changed = CliRunner().invoke(app, [*dry, "train.max_steps=4"], env={"COLUMNS": "200"})
    one_error(changed, ErrorKind.STATE, "train.max_steps 3 -> 4")
    more = CliRunner().invoke(app, [*dry, "train.max_steps=3", "seed=0,1"], env={"COLUMNS": "200"})
    assert more.exit_code == 0, more.output
    said = " ".join(more.output.split())
    assert f"destination: {tmp_path / 'loss'} (4 done, 4 new); `ablate sweep` would submit 4 runs" in said, said
    rows = [ln for ln in more.output.splitlines() if "seed=" in ln]
    states = [ln.rstrip(" │").rsplit(" ", 1)[-1] for ln in rows]
    assert sorted(states) == ["done"] * 4 + ["new"] * 4, states
    forced = CliRunner().invoke(app, [*dry, "train.max_steps=3", "--force"], env={"COLUMNS": "200"})
    assert "(4 done); `ablate sweep` would submit 4 runs" in " ".join(forced.output.split()), forced.output
    assert (tmp_path / "loss" / "ledger.jsonl").read_text() == ledger  # a dry run writes nothing


def test_auto_picks_local_without_a_slurm_controller(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol at all
    assert resolve_executor("auto") == "local"
    fake = tmp_path / "scontrol"  # installed client, controller down: `scontrol ping` says DOWN
    fake.write_text("#!/bin/sh\necho 'Slurmctld(primary) at localhost is DOWN'\nexit 1\n")
    fake.chmod(0o755)
    assert resolve_executor("auto") == "local"


def test_profile_becomes_sbatch_flags(tmp_path):
    """The example real-cluster profile, rendered into the sbatch script submitit would submit."""
    from submitit.slurm.slurm import _make_sbatch_string

    params = load_profile("example-cluster")
    text = _make_sbatch_string(
        command="python -m submitit.core._submit X", folder=tmp_path / "%j", map_count=40, **params
    )
    for flag in (
        "--partition=gpu",
        "--account=my-project",
        "--qos=normal",
        "--constraint=h100",
        "--gpus-per-node=1",
        "--cpus-per-task=16",
        "--mem=120G",
        "--time=1440",
        "--array=0-39%32",
        "--signal=USR2@120",
    ):
        assert f"#SBATCH {flag}\n" in text, flag
    assert "module load cuda/12.4\nsource ~/venvs/ablate/bin/activate\n" in text


def test_a_job_whose_sweep_directory_is_replaced_records_nothing_in_the_new_one(tmp_path):
    """`make clean` (or rm -rf) while a run trains, then a new launch at the same path: the old job must not write
    its end into the new sweep's ledger or run.json. Driven by state: the run holds at step 2 until the test has
    moved the sweep away and made a new one."""
    import threading

    hold = tmp_path / "hold"
    hold.touch()
    sw = toy_sweep(tmp_path, arms=("a",), seeds=(0,), toy={"steps": 3, "hold": str(hold), "hold_at": 2})
    t = threading.Thread(
        target=launch_sweep, args=(sw,), kwargs=dict(root=tmp_path, executor="debug", job=TOY_JOB, echo=None)
    )
    t.start()
    rd = run_dir(tmp_path, "toy", "toy-a0")
    until(lambda: (rd / "metrics.jsonl").exists() and store.read_jsonl(rd / "metrics.jsonl"), "step 1")
    (tmp_path / "toy").rename(tmp_path / "moved")
    (tmp_path / "toy").mkdir()
    hold.unlink()
    t.join(GUARD)
    assert not t.is_alive()
    assert Ledger(tmp_path / "toy").fold() == {}  # no "finished" for a run this sweep never launched
    assert not (rd / "run.json").exists()
    assert Ledger(tmp_path / "moved").fold()["toy-a0"].state == "running"  # the old ledger keeps what it saw
