"""`make demo`: the whole pipeline on the embedded default, as a user would run it.

1. `ablate sweep recipes/demo.yaml --follow`: the ScaleRL recipe and the same recipe on a smaller policy, three
   seeds each: six real RL runs of the tiny locally built policy on the synthetic math task, launched with
   submitit's local executor (as many at once as the cores allow); waits with a progress bar. Re-running skips
   finished runs.
2. `ablate rank sweeps/demo` with no options: a sigmoid per arm, a verdict against the ScaleRL arm judged against
   the seed spread the three seeds measure, table + figures. The defaults are named in the header: the compute axis
   is `samples` (the runs ran on CPU, where gpu_hours is wall-clock and measures the machine's load) and the target
   twice the largest compute fitted. The smaller policy's curve is still rising when the runs end, so its ceiling is
   not identified; the tool says so, and says whether it is behind at the compute both arms reached.
3. `ablate extrapolate sweeps/demo`: the winner fitted on the first half of its runs, projected past their end,
   and checked on the held-out second half.
4. `ablate report sweeps/demo --out demo-out/report.html`: all of it as one self-contained page (docs/report.md),
   to open in a browser or send; its path is printed last.

Compute axis: `samples` (completions generated), which `--x auto` picks for CPU runs: on a shared CPU `gpu_hours`
(wall-clock device-hours) also measures the machine's load, while samples are the same on any machine.
The loss choices of ScaleRL (recipes/loss.yaml) were measured as the demo's subject and are not it: at three seeds
and 1,000 steps no loss differs from CISPO on the embedded task (each `inconclusive`, wanting 10 to 32+ seeds).
`python -m ablate.demo --paper-curves` runs the fitting core alone on the ScaleRL paper's Table 1 curves.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ablate.render import figures, terminal
from ablate.render import fit as fit_view
from ablate.topology.process import start_module

OUT = Path("demo-out")
SWEEP = "recipes/demo.yaml"


def ablate(*args: str) -> None:
    """Run one `ablate` command as a user would type it, echoing it first; stop the demo if it fails."""
    print(f"\n$ ablate {' '.join(args)}", flush=True)
    rc = start_module("ablate", args).wait()
    if rc != 0:
        raise SystemExit(f"demo: `ablate {' '.join(args)}` exited with {rc}")


def main() -> None:
    from ablate.compose.sweep import load_sweep
    from ablate.storage.rundir import RunDir

    OUT.mkdir(exist_ok=True)
    for old in ("rank.png", "rank-efficiency.png", "extrapolate.png", "report.html"):
        (OUT / old).unlink(missing_ok=True)
    ablate("sweep", SWEEP, "--follow")
    sweep = load_sweep(SWEEP)
    # extrapolate from the first half of the runs to twice the compute they used (rank's default target)
    spent = max(
        max((r.get("samples", 0) for r in RunDir.of("sweeps", sweep.name, s.run_id).metrics()), default=0)
        for s in sweep.runs
    )
    if spent == 0:
        raise SystemExit("demo: the sweep wrote no metrics; see `ablate status demo` and the run logs")
    to, half = str(2 * spent), str(spent // 2)
    ablate("rank", f"sweeps/{sweep.name}", "--plot", str(OUT / "rank.png"))
    ablate(
        "extrapolate",
        f"sweeps/{sweep.name}",
        "--x",
        "samples",
        "--fit-until",
        half,
        "--to",
        to,
        "--plot",
        str(OUT / "extrapolate.png"),
    )
    ablate("report", f"sweeps/{sweep.name}", "--out", str(OUT / "report.html"))
    written = [f.name for f in (OUT / "rank.png", OUT / "rank-efficiency.png", OUT / "extrapolate.png") if f.exists()]
    print(f"\nfigures in {OUT}/: {', '.join(written)}")
    print(f"report: {OUT / 'report.html'} (open it in a browser; it needs no network)")


def paper_curves_demo(out: Path = OUT) -> None:
    """The fitting core on the ScaleRL paper's Table 1 curves: fit to 8k GPU-hours, check at 16k."""
    import numpy as np

    from ablate.curves.tables import load_curves, write_csv
    from ablate.fit.analysis import fit_table
    from ablate.fit.result import FitOptions
    from ablate.fit.sigmoid import sigmoid
    from ablate.fit.synthetic import PAPER_CURVES, paper_curves

    out.mkdir(exist_ok=True)
    console = terminal.console()
    csv = out / "curves.csv"
    write_csv(paper_curves(seed=0, drift_sd=0.001), csv)
    opts = FitOptions(fit_until=8000, target=16000)
    console.print(f"curves: {csv} (ScaleRL Table 1 parameters); fit window {opts.window_text()} GPU-hours")
    results = fit_table(load_curves(csv), opts)
    console.print(fit_view.fit_table(results, title="fits on the first 8k GPU-hours, predicted at 16k"))
    fit_view.print_notes(console, results)
    for r in results:
        p = PAPER_CURVES[r.run]
        truth = float(sigmoid(16000, 0.3, p["a"], p["b"], p["c_mid"]))  # synthetic_curve's default R0 is 0.3
        observed = float(np.mean(r.curves[0].y[-5:]))
        console.print(f"  {r.run:20s} predicted {r.pred_at_target:.3f}  observed {observed:.3f}  true {truth:.3f}")
    console.print(f"figure: {figures.plot_fits(results, out / 'fit.png', heldout_from=8000)}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paper-curves", action="store_true", help="only the fitting demo on the paper's curves")
    paper_curves_demo() if ap.parse_args().paper_curves else main()
