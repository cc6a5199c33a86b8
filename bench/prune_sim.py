"""The settled rule of `ablate sweep --prune`, proven on simulated sweeps with known truth: each sweep is run in
full and pruned by the monitor's own rule (ablate.prune.rules.replay: a settled check at every 10% of the budget), and
the two rankings are compared.

    .venv/bin/python bench/prune_sim.py [--sweeps 20] [--jobs 2]

Two sweeps of 4 arms x 3 seeds, with evaluation noise, autocorrelated drift and seed-to-seed spread of A and C_mid
(fit/calibrate's `seeds` noise):
- null: the embedded task's shape, every arm the baseline's equal (the loss sweep's situation on the CPU default);
- mixed: the paper's 8B shape with a null arm, a ceiling +0.05 arm and a 2x efficiency arm.
Printed per sweep kind: how often the pruned sweep gives an arm the full sweep's verdict (with a 95% interval),
false calls on the null arms and real effects found in each, and the compute the pruned sweeps did not spend.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

from scipy.stats import beta

os.environ.setdefault("OMP_NUM_THREADS", "1")

KINDS = {
    "null": ("embedded", {"base": {}, "b": {}, "c": {}, "d": {}}),
    "mixed": ("scalerl-8b", {"base": {}, "null": {}, "a+0.05": {"a": 0.05}, "cmid/2": {"c_mid": 0.5}}),
}
TRUTH = {
    "base": "baseline",
    "b": "null",
    "c": "null",
    "d": "null",
    "null": "null",
    "a+0.05": "ceiling_up",
    "cmid/2": "efficiency_up",
}
CALLS = ("ceiling_up", "ceiling_down", "efficiency_up", "efficiency_down")


def one(args: tuple[str, int]) -> tuple[str, dict]:
    from ablate.prune.rules import simulate

    kind, seed = args
    shape, arms = KINDS[kind]
    return kind, simulate(arms, shape=shape, seed=seed)


def interval(k: int, n: int) -> str:
    lo = beta.ppf(0.025, k, n - k + 1) if k > 0 else 0.0
    hi = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return f"{k}/{n} = {k / n:.1%} [{lo:.1%}, {hi:.1%}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", type=int, default=20, help="simulated sweeps of each kind")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--kinds", default="null,mixed")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    jobs = [(k, s) for s in range(args.sweeps) for k in kinds]
    t0 = time.time()
    done: dict[str, list[dict]] = {k: [] for k in kinds}
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        for i, (kind, r) in enumerate(pool.map(one, jobs), 1):
            done[kind].append(r)
            print(
                f"[{i}/{len(jobs)} {time.time() - t0:.0f}s] {kind}: spent {r['spent']:.0%}, stopped "
                f"{r['stopped'] or 'none'}; "
                + ", ".join(f"{a} {r['full'][a]}->{r['pruned'].get(a)}" for a in r["full"] if a != "base"),
                flush=True,
            )
    for kind in kinds:
        rs = done[kind]
        pairs = [(r["full"][a], r["pruned"].get(a), TRUTH[a]) for r in rs for a in r["full"] if a != "base"]
        same = sum(f == p for f, p, _ in pairs)
        null = [(f, p) for f, p, t in pairs if t == "null"]
        real = [(f, p, t) for f, p, t in pairs if t != "null"]
        spent = sum(r["spent"] for r in rs) / len(rs)
        stopped = sum(len(r["stopped"]) for r in rs)
        print(f"\n{kind} ({KINDS[kind][0]} shape, {len(rs)} sweeps, {len(pairs)} arm verdicts):")
        print(f"  pruned verdict = full verdict: {interval(same, len(pairs))}")
        if null:  # a false call: a null arm given an effect (not_identified / not_fitted say nothing)
            print(
                f"  false calls on null arms:      full {interval(sum(f in CALLS for f, _ in null), len(null))}; "
                f"pruned {interval(sum(p in CALLS for _, p in null), len(null))}"
            )
        if real:
            print(
                f"  real effects found:            full {interval(sum(f == t for f, _, t in real), len(real))}; "
                f"pruned {interval(sum(p == t for _, p, t in real), len(real))}"
            )
        print(
            f"  arms stopped: {stopped} of {len(pairs)}; compute spent by the pruned sweeps: {spent:.1%} of the "
            f"full ones (saved {1 - spent:.1%})"
        )


if __name__ == "__main__":
    main()
