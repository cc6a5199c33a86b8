"""Benchmark the launch stage. Targets: submit a 100-run sweep (local) <= 5 s; a no-op
re-run of a finished 100-run sweep <= 2 s; `ablate status` on a 1,000-run ledger <= 1 s.

Times are of the library calls (`launch_sweep`, `sweep_status` + rendering the table); the `ablate status`
command line is also timed end to end (it adds the interpreter start-up and imports).

    .venv/bin/python bench/launch.py [--out bench/out/launch.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.compose.spec import RunSpec
from ablate.compose.sweep import Sweep
from ablate.launch.status import sweep_status
from ablate.launch.submit import launch_sweep
from ablate.render.status import status_table
from ablate.storage import store
from ablate.storage.ledger import Ledger
from ablate.storage.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
TOY_JOB = f"{REPO / 'tests' / 'jobs.py'}:toy_run"


def sweep_of(root: Path, name: str, n: int, steps: int = 1) -> Sweep:
    """n runs of the toy job (tests/jobs.py), `steps` steps each, no sleep; its knobs in <root>/<name>/toy.json."""
    base = compose_run(RECIPES_DIR / "base.yaml", [f"train.max_steps={steps}"])
    runs = [
        RunSpec(
            name,
            f"arm={i // 2},seed={i % 2}",
            f"{name}{i:04d}",
            f"{name}-arm{i // 2}",
            (f"arm={i // 2}", f"seed={i % 2}"),
            base.replace(seed=i % 2),
        )
        for i in range(n)
    ]
    store.write_json(root / name / "toy.json", {r.run_id: {"steps": steps, "sleep": 0} for r in runs})
    return Sweep(name=name, path=Path(f"{name}.yaml"), baseline="arm=0", seeds=[0, 1], runs=runs)


def bench_submit(root: Path) -> float:
    sw = sweep_of(root, "submit100", 100)
    t0 = time.perf_counter()
    plan = launch_sweep(sw, root=root, executor="local", max_parallel=2, job=TOY_JOB, echo=None)
    took = time.perf_counter() - t0
    assert len(plan.submit) == 100
    runner = next(e["runner"]["pid"] for e in Ledger(root / "submit100").events() if e.get("runner"))
    os.killpg(runner, signal.SIGKILL)  # stop the background runs: we time the submission only
    return took


def bench_noop_rerun(root: Path) -> float:
    sw = sweep_of(root, "done100", 100)
    launch_sweep(sw, root=root, executor="debug", job=TOY_JOB, echo=None)  # 100 finished runs, in-process
    t0 = time.perf_counter()
    plan = launch_sweep(sw, root=root, executor="local", job=TOY_JOB, echo=None)
    took = time.perf_counter() - t0
    assert plan.submit == [] and len(plan.done) == 100, plan.summary()
    return took


def make_ledger(root: Path, n: int = 1000, evals: int = 30) -> None:
    """A finished 1,000-run sweep as the launcher and the jobs would have written it."""
    led = Ledger(root / "status1000")
    evs = []
    for i in range(n):
        rid = f"r{i:04d}"
        evs += [
            {
                "event": "submitting",
                "run_id": rid,
                "batch": "b",
                "label": f"arm={i // 3},seed={i % 3}",
                "executor": "local",
                "launcher": {"pid": 1, "start": 1},
                "max_steps": evals * 10,
            },
            {"event": "submitted", "run_id": rid, "batch": "b", "runner": {"pid": 1, "start": 1}},
            {"event": "started", "run_id": rid, "batch": "b", "job_id": str(10000 + i), "pid": 1, "start": 1},
            {"event": "finished", "run_id": rid, "batch": "b", "status": "done"},
        ]
        rows = "".join(
            json.dumps(
                {
                    "step": 10 * k,
                    "gpu_hours": k / 10,
                    "flops": 1e12 * k,
                    "samples": 64 * k,
                    "val_pass_rate": 0.2 + k / 100,
                    "truncation_rate": 0.01 * (i % 20),
                }
            )
            + "\n"
            for k in range(1, evals + 1)
        )
        store.atomic_write_text(RunDir.of(root, "status1000", rid).metrics_path, rows)
    led.append(*evs)


def bench_status(root: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    sts = sweep_status(root, "status1000")
    Console(file=io.StringIO(), width=160).print(status_table("status1000", sts))
    lib = time.perf_counter() - t0
    assert len(sts) == 1000 and all(s.state == "done" for s in sts)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "ablate", "status", "status1000", "--root", str(root)], capture_output=True, text=True
    )
    cli = time.perf_counter() - t0
    assert out.returncode == 0 and "1000 runs" in out.stdout, out.stderr
    return lib, cli


def bench_expand_cli() -> float:
    """`ablate sweep recipes/loss.yaml seed=range(25) --dry-run` end to end: the recipe composition and id
    hashing that every `ablate sweep` (a no-op re-run too) does before the launcher, for 100 runs. The second
    call is timed: composed recipes are cached on disk (keyed by the recipe files) after the first."""
    cmd = [sys.executable, "-m", "ablate", "sweep", str(RECIPES_DIR / "loss.yaml"), "seed=range(25)", "--dry-run"]
    subprocess.run(cmd, capture_output=True, check=True)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    assert out.returncode == 0 and "100 runs" in out.stdout, out.stdout + out.stderr
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "launch.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ablate-bench-") as tmp:
        root = Path(tmp)
        res = {"submit_100_local_s": bench_submit(root), "noop_rerun_100_s": bench_noop_rerun(root)}
        make_ledger(root)
        res["status_1000_s"], res["status_1000_cli_s"] = bench_status(root)
        res["expand_100_cli_s"] = bench_expand_cli()
    targets = {"submit_100_local_s": 5.0, "noop_rerun_100_s": 2.0, "status_1000_s": 1.0}
    for k, v in res.items():
        t = targets.get(k)
        print(
            f"{k:22s} {v:7.3f} s"
            + (
                f"   target <= {t:g} s: {'ok' if v <= t else 'MISSED'}"
                if t
                else "   (command line, incl. interpreter start-up)"
            )
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**res, "targets": targets}, indent=2) + "\n")
    if any(res[k] > t for k, t in targets.items()):
        sys.exit(1)


if __name__ == "__main__":
    main()
