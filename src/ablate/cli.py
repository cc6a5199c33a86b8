"""The `ablate` command line: one thin command per verb; the work lives in the modules it calls.

Bad input raises `ablate.errors.UserError`; `user_errors` turns it into one line on stderr and exit 2.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable, Optional, TypeVar

import typer

from ablate.errors import UserError

app = typer.Typer(
    help="ScaleRL-style ablations for RL post-training of LLMs: sweep recipes, fit compute-scaling sigmoids, rank and extrapolate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable)


def user_errors(fn: F) -> F:
    """Print a UserError as `error: <message>` on stderr and exit 2, instead of a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


@app.callback()
def main() -> None:
    """ablate: sweep RL recipes, fit the ScaleRL sigmoid to each run, rank design choices, extrapolate."""


# ---- commands (each: parse options, call the module, print) ----


@app.command()
@user_errors
def fit(
    file: Path = typer.Argument(..., help="CSV or JSONL with one row per (run, evaluation)."),
    x: str = typer.Option("gpu_hours", "--x", help="Compute column."),
    y: str = typer.Option("val_pass_rate", "--y", help="Pass-rate column (values in [0, 1])."),
    run: str = typer.Option("run", "--run", help="Column naming the run (optional: without it the file is one run)."),
    group: Optional[str] = typer.Option(None, "--group", help="Column naming the arm; runs of a group are fitted together and resampled for the interval."),
    method: str = typer.Option("default", "--method", help="default (grid + least_squares + bootstrap) or paper (ScaleRL's grid + curve_fit)."),
    fit_from: Optional[float] = typer.Option(None, "--fit-from", help="Drop points below this compute (ScaleRL drops ~1.5k of 16k GPU-hours)."),
    fit_until: Optional[float] = typer.Option(None, "--fit-until", help="Fit only points up to this compute (to check extrapolation)."),
    fit_r0: bool = typer.Option(False, "--fit-r0", help="Free R0 instead of fixing it at the pass rate measured at compute 0."),
    r0: Optional[float] = typer.Option(None, "--r0", help="R0 to hold fixed when the data has no point at compute 0."),
    loss: str = typer.Option("linear", "--loss", help="linear or huber (robust to outlying evaluations)."),
    n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap resamples for the intervals (0: none)."),
    ci: float = typer.Option(0.95, "--ci", help="Interval level."),
    to: float = typer.Option(16000.0, "--to", help="Compute at which to predict the pass rate."),
    target_r: Optional[float] = typer.Option(None, "--target-r", help="Also report the compute needed to reach this pass rate."),
    compare: bool = typer.Option(False, "--compare-forms", help="Also fit a power law and an exponential and backtest which extrapolates best."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (design.md §5) instead of the table."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a figure: points, fits, window, extrapolation band."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
):
    """Fit the ScaleRL sigmoid R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) to training curves.

    Example: ablate fit curves.csv --fit-until 8000 --to 16000 --plot fit.png
    """
    from ablate import report
    from ablate.fit.analysis import FitOptions, compare_forms, fit_table
    from ablate.fit.curves import load_curves

    opts = FitOptions(method=method, fit_from=fit_from, fit_until=fit_until, fit_r0=fit_r0, r0=r0, loss=loss,
                      n_boot=n_boot, ci=ci, target=to, target_r=target_r, seed=seed)
    opts.validate()
    curves = load_curves(file, x=x, y=y, run=run, group=group)
    results = fit_table(curves, opts, by_group=group is not None)
    forms = {r.run: compare_forms(r, opts) for r in results} if compare else None
    if plot is not None:
        report.plot_fits(results, plot)
    if as_json:
        out = {"fits": [r.to_json() for r in results]}
        if forms is not None:
            out["forms"] = forms
        typer.echo(report.dump_json(out))
        return
    console = report.console()
    console.print(f"fit window {opts.window_text()} of '{x}' (points at compute 0 give R0); "
                  f"method {method}; interval: {results[0].interval_method}")
    console.print(report.fit_table(results))
    report.print_notes(console, results)
    if target_r is not None:
        for r in results:
            console.print(f"  {r.run}: compute to reach {target_r:g}: "
                          f"{report.fmt_pm(r.compute_to_target, r.compute_to_target_ci)}")
    if forms is not None:
        console.print(report.forms_table(forms))
    if plot is not None:
        console.print(f"figure: {plot}")


@app.command()
@user_errors
def status(
    sweep: Optional[str] = typer.Argument(None, help="Sweep name (sweeps/<name>/); default: every sweep under --root."),
    root: Path = typer.Option(Path("sweeps"), "--root", help="Folder holding the sweeps."),
    watch: bool = typer.Option(False, "--watch", help="Refresh until every run has ended (Ctrl-C to stop)."),
    interval: float = typer.Option(5.0, "--interval", help="Seconds between refreshes with --watch."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of the table."),
):
    """Show every run of a sweep: state, job id, progress, latest pass rate, GPU-hours, truncation warnings.

    Reads the files only (plus one batched sacct call per refresh on SLURM); works from any shell.
    Example: ablate status loss --watch
    """
    from ablate.status import show_status

    show_status(root, sweep, watch=watch, interval=interval, as_json=as_json)


if __name__ == "__main__":
    app()
