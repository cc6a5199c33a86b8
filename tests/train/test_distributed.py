"""Data-parallel runs on the CPU: real processes over gloo, two ranks of the tiny model.

- The gradient identity: the same global batch gives the same gradient, update, metrics and prompt pool on two
  ranks as in one process, for every loss x aggregation, with each normalisation, micro-batches that split
  unevenly across ranks and a rank whose groups were all filtered out.
- A run at resources.nproc=2: the metrics file of a one-process run, a stop mid-run (SIGTERM, sent once an
  evaluation is observed) that checkpoints and resumes with no gap or duplicate, and a curve that agrees with the
  one-process run's within evaluation noise.
- A rank that fails, or is killed mid-run, fails the run with that rank's error; no rank hangs.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from ablate.storage import store
from ablate.topology import workers
from ablate.train import run
from ablate.train.step import Learner
from jobs import SMALL_TRAIN, assert_resumed_without_gap, error_kind, refused, until

ROOT = Path(__file__).resolve().parents[2]
RECIPE = RECIPES_DIR / "base.yaml"
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    torch.set_num_threads(1)


def _cfg(*extra: str):
    return compose_run(RECIPE, SMALL_TRAIN + list(extra))


def _steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in store.read_jsonl(run_dir / "metrics.jsonl")]


# ---- (a) the gradient identity ----

CASES = [
    (loss, agg)
    for loss in ("grpo", "dapo", "gspo", "cispo")
    for agg in ("sample", "prompt", "token")
    if (loss, agg) != ("gspo", "token")
]  # refused by validation: GSPO's ratio is per sequence


def _case(i: int, loss: str, agg: str):
    """Case i: a config and a global batch of 4 groups x 4 completions, made by one process. Old log-probs are
    perturbed so the clips bind; odd cases give groups 1 and 3 (rank 1's share) equal rewards, so that with
    zero-variance filtering rank 1 has no row to train; every third case splits the step into micro-batches of 3."""
    norm = ("prompt", "batch", "none")[i % 3]
    # no clipping (it would hide a scale error) and an Adam eps that keeps the first update a smooth function of
    # the gradient (with eps 1e-8 it is lr x sign(g), which float noise flips where g is ~0)
    extra = [
        f"loss={loss}",
        f"aggregation={agg}",
        f"normalization={norm}",
        "optim.grad_clip=1e9",
        "optim.eps=1e-4",
        "filtering.no_positive_resampling=true",
        "filtering.zero_variance=true",
    ]
    if i % 3 == 0:
        extra.append("optim.micro_batch=3")
    cfg = _cfg(*extra)
    learner = Learner(cfg)
    g = torch.Generator().manual_seed(100 + i)
    b = learner.make_batch(learner.sampler(), g)
    b.ro.logp = torch.where(b.ro.mask, b.ro.logp + 0.3 * torch.randn(b.ro.logp.shape, generator=g), b.ro.logp)
    r = torch.randint(0, 2, b.rewards.shape, generator=g).float()
    r[0::4], r[1::4] = 1.0, 0.0  # every group mixed ...
    if i % 2:
        r[(b.ro.group % 2) == 1] = 1.0  # ... except rank 1's, in odd cases
    b.rewards, b.correct = r, r > 0
    return cfg, b


@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_two_ranks_take_the_one_process_step_for_every_loss_and_aggregation(tmp_path, sharding):
    """With DDP (whole copies) and FSDP2 (sharded parameters, gradients and optimizer state; the model's own
    forward) alike; under FSDP the samplers' whole copy must hold the updated weights after the step."""
    cases, ref = [], []
    for i, (loss, agg) in enumerate(CASES):
        cfg, b = _case(i, loss, agg)
        cases.append({"config": cfg.to_dict(), "batch": b})
        learner = Learner(cfg)
        before = torch.cat([p.detach().reshape(-1).double() for p in learner.policy.model.parameters()])
        m = learner.step(b, 0)
        after = torch.cat([p.detach().reshape(-1).double() for p in learner.policy.model.parameters()])
        grad = torch.cat([p.grad.reshape(-1).double() for p in learner.policy.model.parameters()])
        ref.append(
            {"delta": after - before, "grad": grad, "metrics": m, "pool": learner.pool.state_dict(), "sampled": after}
        )
    torch.save(cases, tmp_path / "cases.pt")
    sp = workers.spawn(
        "dp_ranks:grad_identity",
        2,
        {"cases": str(tmp_path / "cases.pt"), "out": str(tmp_path / "out.pt"), "sharding": sharding},
        tmp_path / "spawn",
        backend="gloo",
        timeout_s=300,
        stop=threading.Event(),
    )
    assert sp.codes == {0: 0, 1: 0} and sp.result == {"cases": len(CASES)}
    got = torch.load(tmp_path / "out.pt", weights_only=False)
    other = torch.load(tmp_path / "out.pt.rank1", weights_only=False)
    for (loss, agg), one, two, two_1 in zip(CASES, ref, got, other):
        what = f"loss={loss} aggregation={agg}"
        assert one["grad"].norm() > 1e-4, what  # a step that learns something, or the comparison means nothing
        gap = (two["grad"] - one["grad"]).abs().max()
        assert torch.allclose(two["grad"], one["grad"], rtol=1e-4, atol=1e-7), (what, gap)
        # float32 weights: an update is exact to an ulp of the weight (1.2e-7 at magnitude 1)
        gap = (two["delta"] - one["delta"]).abs().max()
        assert torch.allclose(two["delta"], one["delta"], rtol=1e-4, atol=3e-7), (what, gap)
        for k, v in one["metrics"].items():
            if k == "entropy" or not math.isfinite(v):
                continue
            assert two["metrics"][k] == pytest.approx(v, rel=1e-5, abs=1e-7), (what, k)
        assert two["pool"] == one["pool"] == two_1["pool"], what  # every rank holds the same pool
        assert torch.allclose(two_1["delta"], two["delta"], rtol=0, atol=0), what  # and the same weights
        assert two_1["metrics"] == two["metrics"], what  # and takes the same decisions
        assert torch.allclose(two["sampled"], one["sampled"], rtol=1e-4, atol=3e-7), what  # the samplers' copy too


# ---- (b) a run at resources.nproc=2 ----

LONG = ["train.max_steps=1000000", "train.eval_every=2", "train.checkpoint_every=3", "resources.nproc=2"]


def _stop_after(cmd: list[str], out: Path, n_lines: int) -> subprocess.Popen:
    """Start `ablate train`, wait until metrics.jsonl has `n_lines` lines, send SIGTERM, wait for the process."""
    p = subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    until(lambda: p.poll() is not None or (out.exists() and len(_steps(out)) >= n_lines), f"{n_lines} metrics lines")
    assert p.poll() is None, p.communicate()[0].decode()[-3000:]  # still running: it did not fail first
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=300)
    return p


@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_a_two_rank_run_stops_on_sigterm_and_resumes_without_gap_or_duplicate(tmp_path, sharding):
    one = tmp_path / "one"
    run(_cfg(), one)  # the one-process run whose metrics file the two-rank run must match in form
    out = tmp_path / "r"
    cmd = [
        sys.executable,
        "-m",
        "ablate",
        "train",
        str(RECIPE),
        *SMALL_TRAIN,
        *LONG,
        f"train.sharding={sharding}",
        "--run-dir",
        str(out),
    ]
    p = _stop_after(cmd, out, 4)  # 4 eval lines: past the first periodic checkpoint (step 3)
    assert p.returncode == 128 + signal.SIGTERM, p.stdout  # stopped by the signal, resumable
    meta = store.read_json(out / "run.json")
    assert meta["status"] == "preempted" and meta["ranks"] == 2, meta
    stopped = meta["step"]
    ckpt = torch.load(out / "ckpt" / "last.pt", weights_only=True)
    assert ckpt["step"] == stopped and ckpt["world"] == 2 and len(ckpt["rollout_rngs"]) == 2
    assert not torch.equal(ckpt["rollout_rngs"][0], ckpt["rollout_rngs"][1])  # each rank its own stream
    first = _steps(out)
    _stop_after(cmd, out, len(first) + 3)
    recs = assert_resumed_without_gap(out, first, stopped)
    steps = [r["step"] for r in recs]
    assert recs[1]["samples"] == 2 * 4 * 4  # two steps of the whole batch (4 prompts x 4), not a rank's share
    ref = store.read_jsonl(one / "metrics.jsonl")
    assert [sorted(r) for r in recs[1:3]] == [sorted(r) for r in ref[1:3]]  # the same fields as one process writes
    assert (out / "logs" / "rank-1.log").read_text().count("eval step") >= len(steps)
    assert not list((out / "logs").glob("rank-*.failed.json"))
    if sharding == "fsdp":  # its optimizer state is laid out for FSDP: resuming it under DDP is refused, in one line
        other = [c if c != "train.sharding=fsdp" else "train.sharding=ddp" for c in cmd]
        p = subprocess.run(other, cwd=ROOT, capture_output=True, text=True)
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error[")]
        assert p.returncode == 2 and lines and error_kind(lines[-1]) is ErrorKind.STATE, p.stderr[-2000:]
        assert "train.sharding=fsdp" in lines[-1], lines[-1]  # what the checkpoint was saved with


def test_the_two_rank_curve_agrees_with_the_one_process_curve_within_noise(tmp_path):
    """Same seed, same recipe, 1 and 2 processes: the rollouts differ (each rank samples its own stream), so the
    curves are two draws of the same process. Every evaluation must agree within 4 standard errors of the
    difference of two binomial estimates, and the means over the run within 4 standard errors too."""
    extra = [
        "train.max_steps=40",
        "train.eval_every=5",
        "task.train_size=60",
        "train.val_size=40",
        "train.eval_k=8",
        "filtering.no_positive_resampling=false",
    ]  # both runs surely reach step 40
    run(_cfg(*extra), tmp_path / "one")
    run(_cfg(*extra, "resources.nproc=2"), tmp_path / "two")
    a, b = (store.read_jsonl(tmp_path / d / "metrics.jsonl") for d in ("one", "two"))
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(0, 41, 5))
    n = a[0]["val_n"]
    assert n == b[0]["val_n"] == 320
    for ra, rb in zip(a, b):
        p = (ra["val_pass_rate"] + rb["val_pass_rate"]) / 2
        se = math.sqrt(2 * max(p * (1 - p), 0.05) / n)
        assert abs(ra["val_pass_rate"] - rb["val_pass_rate"]) <= 4 * se, (ra["step"], ra, rb)
    ma = sum(r["val_pass_rate"] for r in a) / len(a)
    mb = sum(r["val_pass_rate"] for r in b) / len(b)
    assert abs(ma - mb) <= 4 * math.sqrt(2 * max(ma * (1 - ma), 0.05) / (n * len(a))) + 0.03, (ma, mb)
    assert b[-1]["samples"] == a[-1]["samples"]  # the same global batch: the same samples per step


@pytest.mark.parametrize("generator", ["thread", "inline"])
def test_pipeline_rl_across_two_ranks_keeps_its_lag_bound(tmp_path, generator):
    """PipelineRL-2 with each rank's own generator (a thread, or in turn): every rank's batches stay within k.
    (A thread per rank needs a pool that does not change under it: see the next test.)"""
    out = tmp_path / "r"
    summary = run(
        _cfg(
            "offpolicy=pipeline",
            "offpolicy.k=2",
            f"offpolicy.generator={generator}",
            "train.max_steps=8",
            "resources.nproc=2",
            "filtering.no_positive_resampling=false",
        ),
        out,
    )
    assert summary["status"] == "done" and summary["step"] == 8 and summary["max_lag"] <= 2
    if generator == "inline":
        assert summary["max_lag"] == 2
    assert all(0 <= r["lag"] <= 2 for r in store.read_jsonl(out / "metrics.jsonl") if "lag" in r)
    assert "done at step 8" in (out / "logs" / "rank-1.log").read_text()


def test_a_generator_thread_per_rank_with_a_shared_pool_is_refused_and_auto_takes_turns(tmp_path):
    """With no-positive-resampling, each rank's generator thread would draw from the shared pool at its own
    moment and the ranks would train on different prompts: refused in one line; `auto` picks `inline` there."""
    with refused(
        ErrorKind.RECIPE,
        "offpolicy.generator=thread",
        "2 ranks",
        "filtering.no_positive_resampling",
        "offpolicy.generator=inline",
    ):
        _cfg("offpolicy=pipeline", "offpolicy.generator=thread", "resources.nproc=2")
    _cfg(
        "offpolicy=pipeline",
        "offpolicy.generator=thread",
        "resources.nproc=2",
        "filtering.no_positive_resampling=false",
    )  # a pool that never changes: every thread draws the same prompts
    out = tmp_path / "r"
    summary = run(_cfg("offpolicy=pipeline", "offpolicy.k=2", "train.max_steps=4", "resources.nproc=2"), out)
    assert summary["max_lag"] == 2  # in turn: exactly k steps stale
    assert "generator inline" in (out / "logs" / "rank-1.log").read_text()


def test_the_ranks_share_one_prompt_pool_and_end_together_when_it_runs_dry(tmp_path):
    """No-positive-resampling with a low bar and few prompts: the pool runs dry; both ranks see it at the same
    step (they hold the same pool) and end there, rank 0 recording why."""
    out = tmp_path / "r"
    summary = run(
        _cfg("task.train_size=12", "filtering.pass_threshold=0.05", "train.max_steps=200", "resources.nproc=2"), out
    )
    assert summary["status"] == "done" and summary["step"] < 200
    assert "prompt pool exhausted" in summary["reason"]
    assert store.read_json(out / "run.json")["reason"] == summary["reason"]
    assert f"done at step {summary['step']}" in (out / "logs" / "rank-1.log").read_text()


# ---- (d) a rank that fails ----


def test_a_rank_that_fails_fails_the_run_with_its_own_error(tmp_path):
    """Rank 1 cannot open its log (a directory is in the way) and fails; rank 0, waiting for it in a collective,
    sees a broken peer at once (no timeout), and the run records rank 1's error, not rank 0's symptom."""
    out = tmp_path / "r"
    (out / "logs" / "rank-1.log").mkdir(parents=True)
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 failed: IsADirectoryError"):
        run(_cfg("resources.nproc=2"), out)
    meta = store.read_json(out / "run.json")
    assert meta["status"] == "failed" and "rank 1 of 2 failed: IsADirectoryError" in meta["error"]["message"], meta


def test_a_rank_killed_mid_run_fails_the_run_and_status_names_it(tmp_path, monkeypatch):
    """SIGKILL (the OOM killer's way) to rank 1 once an evaluation is written, in a sweep on the local executor:
    the run fails, nothing hangs, and `ablate status` shows which rank died and how."""
    from ablate.compose.spec import RunSpec
    from ablate.compose.sweep import Sweep
    from ablate.config.identity import arm_id, run_id
    from ablate.launch.status import wait_for
    from ablate.launch.submit import launch_sweep
    from ablate.storage.rundir import RunDir

    run(_cfg(), tmp_path / "warm")  # the warm-up, cached once
    cfg = _cfg("train.max_steps=1000000", "train.checkpoint_every=1000000", "resources.nproc=2")
    spec = RunSpec("dp", "base,seed=0", run_id(cfg), arm_id(cfg), ("seed=0",), cfg)
    launch_sweep(Sweep("dp", RECIPE, None, [0], [spec]), root=tmp_path, executor="local", echo=None)
    rd = RunDir.of(tmp_path, "dp", spec.run_id)
    until(lambda: len(_steps(rd.path)) >= 2 if rd.metrics_path.exists() else False, "an evaluation after step 0")
    rank1 = rd.logs_dir / "rank-1.log"
    pid = int(
        until(lambda: rank1.exists() and "pid " in rank1.read_text() and rank1.read_text(), "rank 1's pid")
        .split("pid ", 1)[1]
        .split()[0]
    )
    os.kill(pid, signal.SIGKILL)
    st = wait_for(tmp_path, "dp", [spec.run_id], timeout=300)[spec.run_id]
    assert st.state == "failed" and "rank 1 of 2 was killed by SIGKILL" in st.error, st
    shown = subprocess.run(
        [sys.executable, "-m", "ablate", "status", "dp", "--root", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert "rank 1 of 2 was killed by SIGKILL" in shown.stdout, shown.stdout
    assert store.read_json(rd.info_path)["status"] == "failed"


def test_a_stop_that_arrives_while_the_ranks_start_is_a_clean_preemption(tmp_path):
    """SIGTERM as soon as the ranks are spawned (their spec file is written), before they have imported torch:
    they keep the request and stop at the first step boundary; the run is preempted (resumable), never failed."""
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "ablate", "train", str(RECIPE), *SMALL_TRAIN, *LONG, "--run-dir", str(out)]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    until(lambda: (out / "logs" / "ranks.json").exists() or p.poll() is not None, "the ranks to be spawned")
    p.send_signal(signal.SIGTERM)
    text = p.communicate(timeout=300)[0].decode()
    assert p.returncode == 128 + signal.SIGTERM, text[-3000:]  # stopped by the signal, resumable
    meta = store.read_json(out / "run.json")
    assert meta["status"] == "preempted" and meta["step"] == 0, meta
    _stop_after(cmd, out, 3)  # and it resumes from there like any preempted run
    assert store.read_json(out / "run.json")["resumed_from"] == 0


def test_a_second_launch_on_a_running_two_rank_run_is_refused_and_leaves_it_alone(tmp_path):
    """`ablate train` again on the directory of a live two-rank run: one line naming the writer, exit 2, and the
    live run goes on untouched (no report planted, its ranks still writing)."""
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "ablate", "train", str(RECIPE), *SMALL_TRAIN, *LONG, "--run-dir", str(out)]
    live = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    until(lambda: live.poll() is not None or (out.exists() and len(_steps(out)) >= 2), "two evaluations")
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    lines = [ln for ln in second.stderr.splitlines() if ln.startswith("error[")]
    assert second.returncode == 2 and lines and error_kind(lines[-1]) is ErrorKind.STATE, second.stderr[-2000:]
    assert str(out) in lines[-1] and "pid" in lines[-1], lines[-1]  # the writer
    n = len(_steps(out))
    until(lambda: live.poll() is not None or len(_steps(out)) > n + 1, "the live run to go on")
    assert live.poll() is None
    live.send_signal(signal.SIGTERM)
    live.communicate(timeout=300)
    assert store.read_json(out / "run.json")["status"] == "preempted"
    assert not list((out / "logs").glob("rank-*.failed.json"))


# ---- (c) on SLURM: one job of two tasks ----


@pytest.mark.slurm
def test_a_two_task_slurm_job_trains_one_run_on_both_ranks(tmp_path, slurm_cluster):
    """resources.nproc=2 under -e slurm: one job of two tasks, each a rank that joined the process group from
    submitit's view of the job; task 0 claims and records the run, rank 1 trains beside it and logs."""
    from ablate.compose.spec import RunSpec
    from ablate.compose.sweep import Sweep
    from ablate.config.identity import arm_id, run_id
    from ablate.launch.status import wait_for
    from ablate.launch.submit import launch_sweep
    from ablate.storage.ledger import Ledger
    from ablate.storage.rundir import RunDir

    run(_cfg(), tmp_path / "warm")  # the warm-up, cached once (the jobs share ABLATE_CACHE)
    cfg = _cfg("resources.nproc=2")
    spec = RunSpec("dps", "base,seed=0", run_id(cfg), arm_id(cfg), ("seed=0",), cfg)
    plan = launch_sweep(
        Sweep("dps", RECIPE, None, [0], [spec]), root=tmp_path, executor="slurm", profile="local", echo=None
    )
    st = wait_for(tmp_path, "dps", [spec.run_id], timeout=300)[spec.run_id]
    assert st.state == "done", st
    rd = RunDir.of(tmp_path, "dps", spec.run_id)
    meta = store.read_json(rd.info_path)
    assert meta["ranks"] == 2 and meta["step"] == 6 and meta["job_id"] == plan.job_ids[spec.run_id]
    assert _steps(rd.path) == [0, 2, 4, 6]
    assert "rank 1 of 2" in (rd.logs_dir / "rank-1.log").read_text()
    assert (rd.logs_dir / "rank-1.log").read_text().count("eval step") == 4
    started = [e for e in Ledger(tmp_path / "dps").events() if e["event"] == "started"]
    assert len(started) == 1  # task 0 alone claims the run
    sacct = subprocess.run(
        ["sacct", "-j", plan.job_ids[spec.run_id], "-n", "-P", "-o", "JobID,NTasks"], capture_output=True, text=True
    ).stdout
    assert any(line.split("|")[1] == "2" for line in sacct.splitlines() if "|" in line), sacct


@pytest.mark.slurm
def test_a_preempted_two_task_job_checkpoints_once_and_the_whole_job_requeues(tmp_path, slurm_cluster):
    """USR2 (SLURM's preemption notice) reaches both tasks: the ranks agree on a step, rank 0 checkpoints and
    submitit requeues the job; both tasks come back and the run resumes from that step, gap-free. The run is far
    too long to end by itself; each signal follows an observed evaluation; the second one ends it (no requeues
    left: preempted)."""
    from ablate.compose.spec import RunSpec
    from ablate.compose.sweep import Sweep
    from ablate.config.identity import arm_id, run_id
    from ablate.launch.status import wait_for
    from ablate.launch.submit import launch_sweep
    from ablate.storage.ledger import Ledger
    from ablate.storage.rundir import RunDir

    run(_cfg(), tmp_path / "warm")
    cfg = _cfg(
        "resources.nproc=2", "train.max_steps=1000000", "train.checkpoint_every=1000000", "launcher.max_requeues=1"
    )
    spec = RunSpec("dpp", "base,seed=0", run_id(cfg), arm_id(cfg), ("seed=0",), cfg)
    plan = launch_sweep(
        Sweep("dpp", RECIPE, None, [0], [spec]), root=tmp_path, executor="slurm", profile="local", echo=None
    )
    job_id = plan.job_ids[spec.run_id]
    rd = RunDir.of(tmp_path, "dpp", spec.run_id)

    def started() -> list[dict]:
        return [e for e in Ledger(tmp_path / "dpp").events() if e["event"] == "started"]

    until(lambda: len(_steps(rd.path)) >= 3 if rd.metrics_path.exists() else False, "three evaluations")
    subprocess.run(["scancel", job_id, "--signal", "USR2"], check=True)
    until(lambda: len(started()) == 2, "the requeued job to start")
    until(lambda: "resumed from step" in rd.train_log.read_text(), "the requeued run to resume")
    resumed = int(rd.train_log.read_text().split("resumed from step ", 1)[1].split()[0])
    until(lambda: _steps(rd.path)[-1] >= resumed + 4, "two evaluations after the resume")
    subprocess.run(["scancel", job_id, "--signal", "USR2"], check=True)
    st = wait_for(tmp_path, "dpp", [spec.run_id], timeout=300)[spec.run_id]
    assert (st.state, st.requeues, st.attempts) == ("preempted", 1, 2), st
    steps = _steps(rd.path)
    assert steps == list(range(0, steps[-1] + 1, 2)), steps  # gap-free across the requeue
    log1 = (rd.logs_dir / "rank-1.log").read_text()
    assert log1.count("resumed from step") == 1 and f"resumed from step {resumed}" in log1  # rank 1 came back too
    assert torch.load(rd.ckpt_dir / "last.pt", weights_only=True)["step"] == store.read_json(rd.info_path)["step"]


@pytest.mark.slurm
def test_a_failing_task_fails_the_slurm_job_with_that_ranks_error(tmp_path, slurm_cluster):
    """Rank 1 of a 2-task job cannot open its log (a directory is in the way): the job ends (its other task sees
    a broken peer, and srun ends the step on a failed task), and `ablate status` names rank 1 and its error."""
    from ablate.compose.spec import RunSpec
    from ablate.compose.sweep import Sweep
    from ablate.config.identity import arm_id, run_id
    from ablate.launch.status import wait_for
    from ablate.launch.submit import launch_sweep
    from ablate.storage.rundir import RunDir

    cfg = _cfg("resources.nproc=2")
    spec = RunSpec("dpf", "base,seed=0", run_id(cfg), arm_id(cfg), ("seed=0",), cfg)
    (RunDir.of(tmp_path, "dpf", spec.run_id).logs_dir / "rank-1.log").mkdir(parents=True)
    launch_sweep(Sweep("dpf", RECIPE, None, [0], [spec]), root=tmp_path, executor="slurm", profile="local", echo=None)
    st = wait_for(tmp_path, "dpf", [spec.run_id], timeout=300)[spec.run_id]
    assert st.state == "failed" and "rank 1" in st.error and "IsADirectoryError" in st.error, st
    shown = subprocess.run(
        [sys.executable, "-m", "ablate", "status", "dpf", "--root", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert "IsADirectoryError" in shown.stdout, shown.stdout
