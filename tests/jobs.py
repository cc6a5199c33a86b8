"""A small real job function for the launcher tests (stands in for `ablate.train:run`).

It follows the run contract: writes config.yaml and one metrics line per step, checkpoints its step
after every line, resumes from the checkpoint when restarted (dropping metrics lines past it, so the
file stays gap-free and duplicate-free across preemptions), and returns a summary dict.
Knobs under config["toy"]: steps, sleep (s per step), hold (a path: wait at step `hold_at` while it
exists), fail_at (raise at that step).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml

from ablate import store


def toy_run(config: dict, run_dir: Path, *, threads: int = 1) -> dict:
    toy = config.get("toy", {})
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    store.atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=True))
    # One line per real execution: the tests count these to prove no run executes twice.
    with open(run_dir / "executions.log", "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "threads": threads,
                            "omp": os.environ.get("OMP_NUM_THREADS"), "t": time.time()}) + "\n")
    ckpt = run_dir / "ckpt" / "state.json"
    start = store.read_json(ckpt)["step"] if ckpt.exists() else 0
    metrics = run_dir / "metrics.jsonl"
    kept = [m for m in store.read_jsonl(metrics) if m["step"] <= start]
    store.write_jsonl(metrics, kept)  # drop lines written after the checkpoint we resume from
    steps = int(toy.get("steps", 3))
    for step in range(start + 1, steps + 1):
        hold = toy.get("hold")
        while hold and step == toy.get("hold_at", 2) and Path(hold).exists():
            time.sleep(0.05)
        time.sleep(float(toy.get("sleep", 0.02)))
        if toy.get("fail_at") == step:
            raise ValueError(f"toy failure at step {step}")
        store.append_jsonl(metrics, {"step": step, "gpu_hours": step * 1e-4, "flops": step * 1e9,
                                     "samples": step * 8, "val_pass_rate": 0.1 + 0.8 * step / steps,
                                     "truncation_rate": toy.get("trunc", 0.0)})
        store.write_json(ckpt, {"step": step})
    return {"status": "done", "steps": steps}


TOY_JOB = f"{Path(__file__).resolve()}:toy_run"


def toy_sweep(name: str = "toy", *, arms=("a", "b"), seeds=(0, 1), toy: dict | None = None,
              per_run: dict | None = None, launcher: dict | None = None):
    """A sweep of arms x seeds over the toy job, built directly as RunSpecs (ablate.sweep.Sweep)."""
    from ablate.spec import RunSpec
    from ablate.sweep import Sweep

    runs = []
    for a in arms:
        for s in seeds:
            label = f"arm={a},seed={s}"
            cfg = {"seed": s, "arm": a, "toy": {**(toy or {}), **((per_run or {}).get(label, {}))},
                   "train": {"max_steps": (toy or {}).get("steps", 3)},
                   "launcher": {"threads": 1, "max_requeues": 3, **(launcher or {})}}
            runs.append(RunSpec(name, label, f"{name}-{a}{s}", f"{name}-{a}", (f"arm={a}", f"seed={s}"), cfg,
                                baseline=a == arms[0]))
    return Sweep(name=name, path=Path(f"{name}.yaml"), baseline=f"arm={arms[0]}", seeds=list(seeds), runs=runs)


def executions(run_dir: Path) -> list[dict]:
    return store.read_jsonl(Path(run_dir) / "executions.log")


def assert_complete(run_dir: Path, steps: int) -> None:
    """A finished run directory: config, done run.json, gap-free metrics 1..steps, one line each."""
    run_dir = Path(run_dir)
    assert (run_dir / "config.yaml").is_file()
    assert store.read_json(run_dir / "run.json")["status"] == "done"
    assert [m["step"] for m in store.read_jsonl(run_dir / "metrics.jsonl")] == list(range(1, steps + 1))
