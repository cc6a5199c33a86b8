"""Benchmark: the default fit (grid + least_squares + a 1,000-resample block-bootstrap interval) against the
ScaleRL paper's procedure (`--method paper`: A x C_mid grid with curve_fit for B), on the same curves, in
the same run. Prints per-curve times and SSEs, and the speed ratio. Target: >= 100x faster at an SSE no
worse than the paper's.

    .venv/bin/python bench/fit.py [--seeds 2]
"""

from __future__ import annotations

import argparse
import time

from ablate.fit.analysis import fit_curves
from ablate.fit.result import FitOptions
from ablate.fit.synthetic import paper_curves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2, help="curve sets to time (3 curves each)")
    args = ap.parse_args()
    curves = [c for s in range(args.seeds) for c in paper_curves(seed=100 * s)]
    default_opts = FitOptions(n_boot=1000)
    paper_opts = FitOptions(method="paper")
    fit_curves(curves[:1], default_opts)  # warm caches/imports outside the timing
    print(
        f"{'curve':22s} {'default s':>10s} {'paper s':>9s} {'ratio':>7s} {'SSE default':>12s} {'SSE paper':>11s} "
        f"{'A default':>9s} {'A paper':>8s}"
    )
    tot_d = tot_p = 0.0
    worse = 0
    for i, c in enumerate(curves):
        t0 = time.perf_counter()
        d = fit_curves([c], default_opts)
        t1 = time.perf_counter()
        p = fit_curves([c], paper_opts)
        t2 = time.perf_counter()
        tot_d += t1 - t0
        tot_p += t2 - t1
        worse += d.fit.sse > p.fit.sse * (1 + 1e-9)
        print(
            f"{c.run + '#' + str(i // 3):22s} {t1 - t0:10.3f} {t2 - t1:9.3f} {(t2 - t1) / (t1 - t0):6.1f}x "
            f"{d.fit.sse:12.6f} {p.fit.sse:11.6f} {d.A:9.4f} {p.A:8.3f}"
        )
    print(
        f"\ntotal: default {tot_d:.2f} s (with {default_opts.n_boot}-resample intervals), paper {tot_p:.2f} s "
        f"(point estimates only) -> default is {tot_p / tot_d:.1f}x faster; "
        f"default SSE worse than paper's on {worse} of {len(curves)} curves"
    )


if __name__ == "__main__":
    main()
