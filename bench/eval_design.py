"""Which validation design pins a seed's ceiling A best for its cost: simulated runs of the embedded task, each
fitted alone, under evaluation designs of equal (and double) cost, at two places a run can stop.

The shape is the embedded default's (fit/calibrate.py SHAPES["embedded"]: R0 0.43, A 0.75, B 1.10, C_mid 37k
samples) with the drift measured on real default runs (sd 0.0096, AR(1) coefficient 0.47) and a fixed set of
validation prompts of varied difficulty (fit/synthetic.py). A design is evaluations x prompts x completions per
prompt; its cost is their product against today's 40 x 200 x 4. For each design and each gain fraction reached by
the window's end, `--runs` runs with the same truth are fitted alone (200 resamples): the sd of their A is the fit's
share of the seed spread, and `identified` the share the interval rule identifies.

    .venv/bin/python bench/eval_design.py [--runs 200]
"""

from __future__ import annotations

import argparse

import numpy as np

from ablate.fit.analysis import fit_curves
from ablate.fit.calibrate import SHAPES, window_end
from ablate.fit.result import FitOptions
from ablate.fit.synthetic import synthetic_curve

DESIGNS = [(40, 200, 4), (80, 200, 2), (80, 100, 4), (160, 200, 1), (40, 200, 8)]
"""(evaluations in the window, validation prompts, completions per prompt); the first is today's default."""
DRIFT_SD, DRIFT_PHI = 0.0096, 0.47


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    sh = SHAPES["embedded"]
    base_cost = DESIGNS[0][0] * DESIGNS[0][1] * DESIGNS[0][2]
    print(f"{'gain':>5} {'design':>14} {'cost':>5} {'sd(A)':>7} {'vs today':>8} {'identified':>10}")
    for f in (0.75, 0.95):
        c_max = window_end(sh, f)
        today = None
        for points, prompts, k in DESIGNS:
            rng = np.random.default_rng(1)
            fits = [
                fit_curves(
                    [
                        synthetic_curve(
                            a=sh.a,
                            b=sh.b,
                            c_mid=sh.c_mid,
                            r0=sh.r0,
                            c_max=c_max,
                            n_points=points,
                            n_prompts=prompts,
                            k=k,
                            drift_sd=DRIFT_SD,
                            drift_phi=DRIFT_PHI,
                            seed=rng,
                            run=f"r{i}",
                        )
                    ],
                    FitOptions(n_boot=200, seed=i),
                )
                for i in range(a.runs)
            ]
            sd = float(np.std([r.A for r in fits], ddof=1))
            today = today or sd
            ident = float(np.mean([r.identifiable for r in fits]))
            design = f"{points}x{prompts}x{k}"
            cost = points * prompts * k / base_cost
            print(f"{f:>5} {design:>14} {cost:>4.1f}x {sd:>7.4f} {sd / today:>7.2f}x {ident:>10.0%}", flush=True)


if __name__ == "__main__":
    main()
