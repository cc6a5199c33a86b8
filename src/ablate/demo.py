"""`make demo` (for now): the fitting core on realistic curves from the ScaleRL paper's Table 1.

Generates three 16k-GPU-hour curves with evaluation noise (mean@16 on 1,000 prompts) and a little policy
drift, fits each on its first 8k GPU-hours, extrapolates to 16k, and checks the prediction against the
held-out second half — the paper's "fit to 8k, check at 16k". Writes demo-out/curves.csv and
demo-out/fit.png. (When the training pipeline lands, the demo becomes a real sweep.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ablate import report
from ablate.fit.analysis import FitOptions, fit_table
from ablate.fit.curves import load_curves
from ablate.fit.synthetic import PAPER_CURVES, paper_curves, write_csv


def main(out: Path = Path("demo-out")) -> None:
    out.mkdir(exist_ok=True)
    console = report.console()
    csv = out / "curves.csv"
    write_csv(paper_curves(seed=0, drift_sd=0.001), csv)
    console.print(f"[bold]1. curves[/]: {csv} — ScaleRL Table 1 parameters, 100 evaluations each to 16k GPU-hours")
    opts = FitOptions(fit_until=8000, target=16000)
    console.print(f"[bold]2. fit[/] on window {opts.window_text()} GPU-hours (same as `ablate fit {csv} --fit-until 8000`)")
    results = fit_table(load_curves(csv), opts)
    console.print(report.fit_table(results, title="fits on the first 8k GPU-hours, predicted at 16k"))
    report.print_notes(console, results)
    console.print("[bold]3. check[/]: prediction at 16k vs the held-out points (mean of the last 5) and the truth")
    for r in results:
        c = r.curves[0]
        observed = float(np.mean(c.y[-5:]))
        p = PAPER_CURVES[r.run]
        truth = 0.3 + (p["a"] - 0.3) / (1 + (p["c_mid"] / 16000) ** p["b"])
        lo, hi = r.pred_ci
        console.print(f"  {r.run:20s} predicted {r.pred_at_target:.3f} [{lo:.3f}, {hi:.3f}]  observed {observed:.3f}  "
                      f"true {truth:.3f}  error {r.pred_at_target - observed:+.3f}  ({r.status}, f={r.gain_fraction:.2f})")
    fig = report.plot_fits(results, out / "fit.png", heldout_from=8000,
                           title="fit to 8k GPU-hours, extrapolated to 16k (diamonds: held out)")
    console.print(f"[bold]4. figure[/]: {fig}")


if __name__ == "__main__":
    main()
