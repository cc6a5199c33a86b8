"""A small real job function for the launcher tests (stands in for `ablate.train:run`).

It follows the run contract: writes config.yaml and one metrics line per step, checkpoints its step after every
line, resumes from the checkpoint when restarted (dropping metrics lines past it, so the file stays gap-free and
duplicate-free across preemptions), stops at a step boundary when its `stop` event is set (status preempted), and
returns a summary dict. Its knobs live in `<root>/<sweep>/toy.json` (written by `toy_sweep`), per run id:
steps, sleep (s per step), hold (a path: wait at step `hold_at` while it exists), wait_for_stop (at step `hold_at`
of the first attempt, wait until the stop event is set: a signal, not a clock, ends the wait), fail_at (raise at
that step), trunc (truncation rate to report).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import time
from pathlib import Path

import yaml

from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from ablate.storage import store
from ablate.storage.rundir import RunDir

RECIPE = RECIPES_DIR / "base.yaml"


def _knobs(run_dir: Path) -> dict:
    path = run_dir.parent.parent / "toy.json"
    return store.read_json(path).get(run_dir.name, {}) if path.exists() else {}


def toy_run(config, run_dir: Path, *, threads: int = 1, stop=None) -> dict:
    run_dir = Path(run_dir)
    toy = _knobs(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    store.atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(config.to_dict(), sort_keys=True))
    # One line per real execution: the tests count these to prove no run executes twice.
    with open(run_dir / "executions.log", "a") as f:
        f.write(
            json.dumps(
                {"pid": os.getpid(), "threads": threads, "omp": os.environ.get("OMP_NUM_THREADS"), "t": time.time()}
            )
            + "\n"
        )
    attempt = len(store.read_jsonl(run_dir / "executions.log"))
    ckpt = run_dir / "ckpt" / "state.json"
    start = store.read_json(ckpt)["step"] if ckpt.exists() else 0
    RunDir(run_dir).keep_metrics_until(start)  # drop lines written after the checkpoint we resume from
    steps = int(toy.get("steps", 3))
    for step in range(start + 1, steps + 1):
        at_hold = step == toy.get("hold_at", 2)
        while at_hold and toy.get("hold") and Path(toy["hold"]).exists() and not (stop and stop.is_set()):
            time.sleep(0.05)
        while at_hold and toy.get("wait_for_stop") and attempt == 1 and stop is not None and not stop.is_set():
            time.sleep(0.05)
        if stop is not None and stop.is_set():
            return {"status": "preempted", "step": step - 1}
        time.sleep(float(toy.get("sleep", 0.02)))
        if toy.get("fail_at") == step:
            raise ValueError(f"toy failure at step {step}")
        store.append_jsonl(
            run_dir / "metrics.jsonl",
            {
                "step": step,
                "gpu_hours": step * 1e-4,
                "flops": step * 1e9,
                "samples": step * 8,
                "val_pass_rate": 0.1 + 0.8 * step / steps,
                "truncation_rate": toy.get("trunc", 0.0),
            },
        )
        store.write_json(ckpt, {"step": step})
    return {"status": "done", "steps": steps}


TOY_JOB = f"{Path(__file__).resolve()}:toy_run"


def curve_run(config, run_dir: Path, *, threads: int = 1, stop=None) -> dict:
    """A run whose pass rate is a known sigmoid with evaluation noise: its truth per loss in `<sweep>/curves.json`
    ({loss: {"a", "b", "c_mid"}}, or in the file $ABLATE_TEST_CURVES names; R0 0.1, 64 evaluation prompts, a seed
    spread of A of 0.003), one evaluation per step, 100 samples a step. Written at once (no checkpoint needed: a
    rerun writes the same lines)."""
    import numpy as np

    from ablate.fit.sigmoid import sigmoid

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = config.to_dict()
    store.atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg, sort_keys=True))
    with open(run_dir / "executions.log", "a") as f:
        f.write(json.dumps({"pid": os.getpid()}) + "\n")
    where = os.environ.get("ABLATE_TEST_CURVES") or run_dir.parent.parent / "curves.json"
    truth = store.read_json(where)[cfg["loss"]["name"]]
    rng = np.random.default_rng([config.seed, sum(map(ord, cfg["loss"]["name"]))])
    a = truth["a"] + 0.003 * rng.standard_normal()
    steps = config.train.max_steps
    lines = []
    for step in range(steps + 1):
        p = float(sigmoid(np.array([max(step, 1e-9) * 100.0]), 0.1, a, truth["b"], truth["c_mid"])[0])
        y = rng.binomial(64, min(max(p, 0.0), 1.0)) / 64
        lines.append(
            {
                "step": step,
                "samples": step * 100,
                "gpu_hours": step * 1e-4,
                "flops": step * 1e9,
                "val_pass_rate": y,
                "truncation_rate": 0.0,
            }
        )
    RunDir(run_dir).keep_metrics_until(-1)  # a rerun writes every line again
    for line in lines:
        store.append_jsonl(run_dir / "metrics.jsonl", line)
    return {"status": "done", "steps": steps}


CURVE_JOB = f"{Path(__file__).resolve()}:curve_run"


def failing_run(config, run_dir: Path, *, threads: int = 1, stop=None) -> dict:
    """A run that fails at once (what --follow must not report as success)."""
    raise ValueError("this run always fails")


FAILING_JOB = f"{Path(__file__).resolve()}:failing_run"


def toy_sweep(
    root,
    name: str = "toy",
    *,
    arms=("a", "b"),
    seeds=(0, 1),
    toy: dict | None = None,
    per_run: dict | None = None,
    launcher: dict | None = None,
):
    """A sweep of arms x seeds over the toy job, built directly as RunSpecs (ablate.compose.sweep.Sweep), with run ids
    `<name>-<arm><seed>`; the toy knobs go to `<root>/<name>/toy.json`."""
    from ablate.compose.recipe import compose_run
    from ablate.compose.spec import RunSpec
    from ablate.compose.sweep import Sweep

    base = compose_run(RECIPE, [])
    runs, knobs = [], {}
    for a in arms:
        for s in seeds:
            label = f"arm={a},seed={s}"
            rid = f"{name}-{a}{s}"
            knobs[rid] = {**(toy or {}), **((per_run or {}).get(label, {}))}
            lau = {"threads": 1, "max_requeues": 3, **(launcher or {})}
            cfg = base.replace(
                seed=s,
                **{"train.max_steps": int((toy or {}).get("steps", 3))},
                **{f"launcher.{k}": v for k, v in lau.items()},
            )
            runs.append(RunSpec(name, label, rid, f"{name}-{a}", (f"arm={a}", f"seed={s}"), cfg, baseline=a == arms[0]))
    store.write_json(Path(root) / name / "toy.json", knobs)
    return Sweep(name=name, path=Path(f"{name}.yaml"), baseline=f"arm={arms[0]}", seeds=list(seeds), runs=runs)


def executions(run_dir: Path) -> list[dict]:
    return store.read_jsonl(Path(run_dir) / "executions.log")


def run_dir(root, sweep: str, run_id: str) -> Path:
    return RunDir.of(root, sweep, run_id).path


def assert_complete(run_dir: Path, steps: int) -> None:
    """A finished run directory: config, done run.json, gap-free metrics 1..steps, one line each."""
    run_dir = Path(run_dir)
    assert (run_dir / "config.yaml").is_file()
    assert store.read_json(run_dir / "run.json")["status"] == "done"
    assert [m["step"] for m in store.read_jsonl(run_dir / "metrics.jsonl")] == list(range(1, steps + 1))


def assert_resumed_without_gap(run_dir: Path, first: list[int], stopped: int) -> list[dict]:
    """A run stopped at step `stopped` (its metrics then at steps `first`), run again and stopped again: run.json
    says it resumed there, metrics.jsonl holds every evaluation (every 2 steps) once with the first attempt's lines
    kept, and samples and wall time only grow. Returns the metrics records."""
    run_dir = Path(run_dir)
    meta = store.read_json(run_dir / "run.json")
    assert meta["status"] == "preempted" and meta["resumed_from"] == stopped, meta
    recs = store.read_jsonl(run_dir / "metrics.jsonl")
    steps = [r["step"] for r in recs]
    assert steps == list(range(0, steps[-1] + 1, 2)), steps  # every line once, none missing
    assert steps[: len(first)] == first
    assert all(a["samples"] < b["samples"] and a["wall_s"] < b["wall_s"] for a, b in itertools.pairwise(recs))
    return recs


GUARD = 300.0
"""Seconds before a wait on a state counts as a failure: a guard against a hung build, not a speed requirement."""


def until(pred, what: str, timeout: float = GUARD, interval: float = 0.05):
    """Poll `pred()` until it returns something truthy (returned); AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(interval)


SMALL_TRAIN = [
    # one-digit sums only (a 1-digit difference is too easy to guess to be "unseen"): the small model warms up to
    # R0 ~ 0.2 in about 100 steps
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
    "train.max_steps=6",
    "train.eval_every=2",
    "train.eval_k=2",
    "train.val_size=16",
    "train.checkpoint_every=3",
    "train.warmup.max_steps=300",
    "train.warmup.lr=3e-3",
    "train.warmup.batch=32",
    "train.warmup.target_pass_rate=0.2",
    "train.warmup.check_every=10",
    "offpolicy=ppo",
    "offpolicy.k=1",
    "optim.lr_warmup_steps=0",
]
"""A real run small enough for tests: 1-digit sums, a 1-layer model, a few steps (warm-up cached per test session)."""


def small_config(*extra: str):
    from ablate.compose.recipe import compose_run

    return compose_run(RECIPE, SMALL_TRAIN + list(extra))


def error_kind(line: str) -> ErrorKind:
    """The kind a refusal's line names: `error[recipe]: ...` -> ErrorKind.RECIPE."""
    assert line.startswith("error[") and "]: " in line, line
    return ErrorKind(line[len("error[") : line.index("]: ")])


def one_error(res, kind: ErrorKind, *culprits: str, stream: str = "output") -> str:
    """A CLI result (typer's CliRunner) of bad input: exit 2, exactly one `error[KIND]:` line of this `kind`, naming
    every culprit (the path, key, flag or value at fault), and no traceback. `stream="stderr"` reads stderr alone (for
    verbs that print to stdout before they fail). Tests tell refusals apart by their kind, never by their wording."""
    assert res.exit_code == 2, (res.output, res.exception)
    lines = [ln for ln in getattr(res, stream).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error["), res.output
    assert "Traceback" not in res.output
    assert error_kind(lines[0]) is kind, (kind, lines[0])
    for p in culprits:
        assert p in lines[0], (p, lines[0])
    return lines[0]


@contextlib.contextmanager
def refused(kind: ErrorKind, *culprits: str):
    """`pytest.raises(UserError)` that checks the error's `kind` and that its text names every culprit (the path, key,
    value, choices or fix at fault) as a plain substring. Tests tell refusals apart by their kind, never by their
    wording: there is no regex `match=`, so rewording a message breaks no test."""
    import pytest

    from ablate.errors import UserError

    with pytest.raises(UserError) as info:
        yield info
    text = str(info.value)
    assert info.value.kind is kind, (kind, info.value.kind, text)
    for p in culprits:
        assert p in text, (p, text)


def calibration(**change) -> dict:
    """A valid calibration whose compute rungs all stop short of C_mid: `ablate plan` simulates nothing."""
    return {
        "x": "gpu_hours",
        "r0": 0.3,
        "a": 0.6,
        "b": 1.9,
        "c_mid": 1e6,
        "val_n": 1000.0,
        "eval_every": 25.0,
        "drift_sd": 0.005,
        "drift_rho": 0.7,
        "seed_sd_a": 0.01,
        "seed_sd_logc": 0.1,
        "seed_dof": 6,
        "fit_sd_a": 0.0,
        "fit_sd_logc": 0.0,
        "budget": 1000.0,
        "arms": 4,
        "gpu_hours_per_x": 1.0,
        "steps_per_x": None,
        "source": "pilot",
        "notes": [],
        **change,
    }


def git(folder: Path, *args: str) -> str:
    """`git ARGS` in `folder` as a test author, its stdout."""
    done = subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()
