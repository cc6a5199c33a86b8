"""Benchmark: `ablate rank` on a synthetic 200-run sweep (50 arms x 4 seeds, 100 evaluations per run), with
1,000-resample intervals, on every core, as `ablate rank` runs. Target: <= 10 s on a 2-core machine.

    .venv/bin/python bench/rank.py [--arms 50 --seeds 4 --points 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ablate.curves.inputs import curves_from_sweep
from ablate.fit.compare import rank
from ablate.fit.result import FitOptions
from ablate.fit.synthetic import synthetic_curve
from ablate.storage import fs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fit"))
from sweep_writer import write_sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--points", type=int, default=100)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    arms = {}
    for i in range(args.arms):
        # a spread of ceilings and efficiencies around the ScaleRL 8B curve, so every verdict occurs
        p = dict(
            a=0.61 + (0 if i == 0 else rng.choice([-0.04, 0.0, 0.0, 0.04])),
            b=1.92 * (1 if i == 0 else rng.choice([0.7, 1.0, 1.4])),
            c_mid=2542.0 * (1 if i == 0 else rng.choice([0.6, 1.0, 1.6, 20.0])),
        )
        arms[f"arm={i:03d}"] = [
            synthetic_curve(**p, seed=1000 * i + s, n_points=args.points) for s in range(args.seeds)
        ]
    with tempfile.TemporaryDirectory() as tmp:
        sweep = write_sweep(tmp, "bench", arms, baseline="arm=000")
        t0 = time.perf_counter()
        curves, _ = curves_from_sweep(sweep)
        t1 = time.perf_counter()
        ranking = rank(curves, FitOptions(n_boot=1000), jobs=fs.cpu_count())  # as `ablate rank` does
        t2 = time.perf_counter()
    counts: dict[str, int] = {}
    for a in ranking.arms:
        counts[a.verdict] = counts.get(a.verdict, 0) + 1
    n_runs = args.arms * args.seeds
    print(f"{n_runs} runs ({args.arms} arms x {args.seeds} seeds, {args.points} points each), 1000-resample intervals")
    print(f"read {t1 - t0:.2f} s, fit + verdicts {t2 - t1:.2f} s, total {t2 - t0:.2f} s (target <= 10 s)")
    print("verdicts:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
