"""The real training run under the launcher: a time-limit signal checkpoints at the step it arrives, the job is
requeued, and the run resumes from that step (not from the last periodic checkpoint) with gap-free metrics."""

from __future__ import annotations

from pathlib import Path

from ablate import store
from ablate.launch import launch_sweep
from ablate.spec import RunSpec
from ablate.status import wait_for
from ablate.sweep import Sweep, arm_id, compose_run, run_id
from ablate.train import run as train_run

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "base.yaml"


def test_time_limit_checkpoints_where_the_signal_arrives_and_resumes(tmp_path):
    # warm the tiny model up first (cached per machine), so the time limit falls inside RL steps
    train_run(compose_run(RECIPE, ["train.max_steps=1"]), tmp_path / "warm")
    cfg = compose_run(RECIPE, ["offpolicy=ppo", "offpolicy.k=1", "batch.prompts=16", "train.max_steps=300", "train.eval_every=20",
                               "train.checkpoint_every=100000"])
    cfg["launcher"]["timeout_min"] = 0.6  # a 36 s limit, USR2 4 s before it (the schema takes whole minutes)
    spec = RunSpec("live", "base,seed=0", run_id(cfg), arm_id(cfg), ("seed=0",), cfg)
    launch_sweep(Sweep("live", RECIPE, None, [0], [spec]), root=tmp_path, executor="local", echo=None)
    st = wait_for(tmp_path, "live", [spec.run_id], timeout=420)[spec.run_id]
    assert st.state == "done" and st.requeues >= 1
    rd = store.run_dir(tmp_path, "live", spec.run_id)
    log = (rd / "logs" / "train.log").read_text()
    assert "handing SIGUSR2 to submitit" in log
    resumed = [int(line.rsplit(" ", 1)[1]) for line in log.splitlines() if "resumed from step" in line]
    assert resumed and resumed[0] > 0  # no periodic checkpoint before the end: this one was saved at the signal
    steps = [r["step"] for r in store.read_jsonl(rd / "metrics.jsonl")]
    assert steps == list(range(0, 301, 20))
