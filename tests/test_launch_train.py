"""The real training run under the launcher: a preemption signal checkpoints at the step it arrives, the job is
requeued, and the run resumes from that step (not from the last periodic checkpoint) with gap-free metrics.

Driven by state: the run is far too long to finish by itself; each signal is sent once a given evaluation has been
observed, and the second one ends it (out of requeues: the run stays `preempted`, resumable)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.compose.spec import RunSpec
from ablate.compose.sweep import Sweep
from ablate.config.identity import arm_id, run_id
from ablate.launch.status import wait_for
from ablate.launch.submit import launch_sweep
from ablate.storage import store
from ablate.storage.ledger import Ledger
from ablate.storage.rundir import RunDir
from ablate.train import run as train_run
from jobs import GUARD, until

RECIPE = RECIPES_DIR / "base.yaml"
SMALL = [
    "task.digits=1",
    "task.train_size=80",
    "task.unseen_frac=0",
    "model.hidden=32",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.mlp=64",
    "batch.prompts=4",
    "batch.generations=4",
    "length.max_new_tokens=4",
    "length.think_budget_min=1",
    "length.think_budget_max=2",
    "train.eval_k=2",
    "train.val_size=16",
    "train.warmup.max_steps=300",
    "train.warmup.lr=3e-3",
    "train.warmup.batch=32",
    "train.warmup.target_pass_rate=0.2",
    "train.warmup.check_every=10",
    "offpolicy=ppo",
    "offpolicy.k=1",
    "optim.lr_warmup_steps=0",
]


def _started(root) -> list[dict]:
    return [e for e in Ledger(root / "live").events() if e["event"] == "started"]


def test_preemption_checkpoints_where_the_signal_arrives_and_resumes(tmp_path):
    train_run(compose_run(RECIPE, SMALL + ["train.max_steps=1"]), tmp_path / "warm")  # the warm-up, cached once
    cfg = compose_run(
        RECIPE,
        SMALL
        + [
            "train.max_steps=1000000",
            "train.eval_every=5",
            "train.checkpoint_every=1000000",
            "launcher.max_requeues=1",
        ],
    )
    spec = RunSpec("live", "base,seed=0", run_id(cfg), arm_id(cfg), ("seed=0",), cfg)
    launch_sweep(Sweep("live", RECIPE, None, [0], [spec]), root=tmp_path, executor="local", echo=None)
    rd = RunDir.of(tmp_path, "live", spec.run_id)

    def steps() -> list[int]:
        return [r["step"] for r in store.read_jsonl(rd.metrics_path)]

    until(lambda: len(steps()) >= 3, "the run to write its evaluation at step 10")
    os.kill(_started(tmp_path)[0]["pid"], signal.SIGUSR2)  # what the scheduler sends on preemption
    until(lambda: len(_started(tmp_path)) == 2, "the requeued job to start")
    until(lambda: "resumed from step" in rd.train_log.read_text(), "the requeued run to resume")
    resumed = [
        int(line.rsplit(" ", 1)[1]) for line in rd.train_log.read_text().splitlines() if "resumed from step" in line
    ]
    until(lambda: steps()[-1] >= resumed[0] + 10, "the resumed run to write two more evaluations")
    os.kill(_started(tmp_path)[1]["pid"], signal.SIGUSR2)  # out of requeues: the run stops, preempted
    st = wait_for(tmp_path, "live", [spec.run_id], timeout=GUARD)[spec.run_id]
    assert (st.state, st.requeues, st.attempts) == ("preempted", 1, 2)
    log = rd.train_log.read_text()
    first = int(log.split(": preempted at step ", 1)[1].split()[0])
    assert resumed[0] == first >= 10  # no periodic checkpoint below 10^6: the one saved where the signal arrived
    events = [
        (e["event"], e.get("requeue"))
        for e in Ledger(tmp_path / "live").events()
        if e["event"] in ("started", "preempted", "requeued")
    ]
    assert events == [
        ("started", None),
        ("preempted", True),
        ("requeued", None),
        ("started", None),
        ("preempted", False),
    ]
    assert "handing SIGUSR2 to submitit" in Path(st.log).read_text()
    got = steps()
    assert got == list(range(0, got[-1] + 1, 5))  # every evaluation once, none missing, across the requeue
    info = store.read_json(rd.info_path)
    assert info["status"] == "preempted" and info["step"] >= got[-1]
