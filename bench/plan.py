"""Benchmark: `ablate plan` on two arms of three seeds (50 evaluations each), with the fast engine (the default) and
the exact one (`--exact`: every simulated sweep ranked by `compare.rank`, as before the fast engine), in the same
run: each engine's time, the speed-up, and both answers side by side (seeds per arm at each compute rung, with the
power). Target: the fast plan in <= 20 s on a 2-core machine, with the same answers within simulation error (a rung's
two powers within about two standard errors of each other; near the goal the two may then pick neighbouring seed
counts). The exact plan takes about 3.5 minutes on an idle 2-core machine.

    .venv/bin/python bench/plan.py [--trials 100] [--question ceiling,efficiency] [--json FILE]   (make bench-plan)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ablate.analysis import plan as planner
from ablate.curves.tables import write_csv
from ablate.fit.calibrate import SHAPES, window_end
from ablate.fit.synthetic import synthetic_curve
from ablate.storage import fs

SEEDS, POINTS = 3, 50


def task(path: Path) -> Path:
    """Two arms (the second 0.02 higher on A) of three seeds of the ScaleRL 8B curve, 50 evaluations up to 90% of
    the gain, each seed with its own C_mid (a seed spread of 0.1 in log compute), as a curves file."""
    shape = SHAPES["scalerl-8b"]
    c_max = window_end(shape, 0.9)
    rng = np.random.default_rng(0)
    curves = []
    for arm, a in (("base", shape.a), ("alt", shape.a + 0.02)):
        for s in range(SEEDS):
            c_mid = shape.c_mid * float(np.exp(0.1 * rng.standard_normal()))
            curves.append(
                synthetic_curve(
                    a=a,
                    b=shape.b,
                    c_mid=c_mid,
                    r0=shape.r0,
                    c_max=c_max,
                    n_points=POINTS,
                    drift_sd=0.005,
                    drift_phi=0.7,
                    seed=rng,
                    run=f"{arm}-{s}",
                    group=arm,
                )
            )
    write_csv(curves, path)
    return path


def timed_plan(source: Path, engine: str, questions: list[str], trials: int) -> tuple[float, planner.PlanResult]:
    t0 = time.perf_counter()
    result = planner.plan_measured(
        source,
        x="gpu_hours",
        baseline="base",
        to=None,
        noise=None,
        questions=questions,
        delta_a=0.02,
        ratio=1.25,
        goal=0.8,
        trials=trials,
        seed=0,
        jobs=fs.cpu_count(),
        n_futures=0,
        progress=None,
        group="group",
        engine=engine,
    )
    return time.perf_counter() - t0, result


def side_by_side(fast: planner.PlanResult, exact: planner.PlanResult) -> list[dict]:
    rows = []
    for df, de in zip(fast.designs, exact.designs):
        for rf, re_ in zip(df.rungs, de.rungs):
            rows.append(
                {
                    "question": df.question,
                    "multiple": rf.multiple,
                    "compute": rf.compute,
                    "fast": {"seeds": rf.seeds, "power": rf.power, "tried": [t.to_json() for t in rf.tried]},
                    "exact": {"seeds": re_.seeds, "power": re_.power, "tried": [t.to_json() for t in re_.tried]},
                }
            )
    return rows


def _cell(r: dict) -> str:
    if r["seeds"] is None:
        return "—"
    return f"{r['seeds']} ({r['power']:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100, help="simulated sweeps per design (the CLI's default: 100)")
    ap.add_argument("--question", default="ceiling,efficiency")
    ap.add_argument("--json", type=Path, default=None, help="also write the timings and both answers here")
    args = ap.parse_args()
    questions = [q for q in args.question.split(",") if q]
    with tempfile.TemporaryDirectory() as tmp:
        source = task(Path(tmp) / "pilot.csv")
        t_fast, fast = timed_plan(source, "fast", questions, args.trials)
        print(f"fast engine:  {t_fast:6.1f} s", flush=True)
        t_exact, exact = timed_plan(source, "exact", questions, args.trials)
        print(f"exact engine: {t_exact:6.1f} s")
    print(f"speed-up: {t_exact / t_fast:.1f}x ({fs.cpu_count()} cores, {args.trials} trials per design)")
    rows = side_by_side(fast, exact)
    print(f"\n{'question':<11} {'compute':>10}  {'fast: seeds (power)':>20}  {'exact: seeds (power)':>21}")
    for r in rows:
        print(f"{r['question']:<11} {r['compute']:>10.4g}  {_cell(r['fast']):>20}  {_cell(r['exact']):>21}")
    for name, res in (("fast", fast), ("exact", exact)):
        best = {d.question: d.best for d in res.designs}
        print(
            f"{name} cheapest: "
            + "; ".join(
                f"{q}: " + ("none" if b is None else f"{b.seeds} seeds x {b.compute:.4g}") for q, b in best.items()
            )
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "fast_s": t_fast,
                    "exact_s": t_exact,
                    "speedup": t_exact / t_fast,
                    "trials": args.trials,
                    "rows": rows,
                },
                indent=1,
                default=float,
            )
        )
    sys.exit(0 if t_fast <= 20.0 else 1)


if __name__ == "__main__":
    main()
