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
        report.plot_fits(results, plot, xlabel=f"compute ({x})")
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


def _fit_options(**kw):
    from ablate.fit.analysis import FitOptions

    opts = FitOptions(**kw)
    opts.validate()
    return opts


@app.command()
@user_errors
def rank(
    inputs: list[Path] = typer.Argument(..., help="Sweep directories (sweeps/NAME) and/or CSV/JSONL curve files."),
    x: str = typer.Option("gpu_hours", "--x", help="Compute axis: gpu_hours, flops, samples or step (any column for files)."),
    y: str = typer.Option("val_pass_rate", "--y", help="Pass-rate column."),
    run: str = typer.Option("run", "--run", help="Run column of curve files."),
    group: Optional[str] = typer.Option(None, "--group", help="Arm column of curve files (runs of an arm are its seeds)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Arm to compare against (default: the sweep file's baseline)."),
    margin: Optional[float] = typer.Option(None, "--margin", help="|ΔA| beyond which an arm moves the ceiling (default: from seed spread, else 0.02)."),
    fit_from: Optional[float] = typer.Option(None, "--fit-from", help="Drop points below this compute."),
    fit_until: Optional[float] = typer.Option(None, "--fit-until", help="Fit only points up to this compute."),
    to: float = typer.Option(16000.0, "--to", help="Compute at which arms are ranked by predicted pass rate."),
    n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap resamples for the intervals."),
    ci: float = typer.Option(0.95, "--ci", help="Interval level."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (design.md §5) instead of the table."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write the fits figure here and the efficiency figure beside it (*-efficiency.png)."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
):
    """Rank arms by predicted pass rate at --to and say which choices move the ceiling A, which only efficiency.

    Example: ablate rank sweeps/loss --plot rank.png
    """
    from ablate import report
    from ablate.fit.compare import rank as rank_arms
    from ablate.fit.curves import load_inputs

    opts = _fit_options(fit_from=fit_from, fit_until=fit_until, n_boot=n_boot, ci=ci, target=to, seed=seed)
    curves, skipped = load_inputs(inputs, x=x, y=y, run=run, group=group)
    ranking = rank_arms(curves, opts, baseline=baseline, margin=margin, x=x, not_fitted=skipped)
    if plot is not None:
        report.plot_fits([a.fit for a in ranking.arms], plot, highlight=ranking.baseline, xlabel=f"compute ({x})",
                         title=f"arms fitted on {opts.window_text()} (baseline in black)")
        eff = report.plot_efficiency(ranking, plot.with_name(plot.stem + "-efficiency" + plot.suffix))
    if as_json:
        typer.echo(report.dump_json(ranking.to_json()))
        return
    console = report.console()
    console.print(f"fit window {opts.window_text()} of '{x}'; baseline: {ranking.baseline or '— (give --baseline)'}; "
                  f"margin on A: {ranking.margin_source}")
    console.print(report.rank_table(ranking))
    if any(a.verdict == "not_identified" for a in ranking.arms):
        console.print("  [yellow]not identified[/]: the window has not passed C_mid, so A is not measured; "
                      f"those arms are ranked on their predicted pass rate at {to:g} only.")
    far = [n for a in ranking.arms for n in a.fit.notes if n.startswith("--to")]
    if far:
        console.print(f"  [yellow]note[/]: {far[0]}")
    for s in ranking.not_fitted:
        console.print(f"  [red]not fitted[/] {s['label']}: {s['reason']}")
    if plot is not None:
        console.print(f"figures: {plot}" + (f", {eff}" if eff else " (no identified arm for the efficiency figure)"))


@app.command()
@user_errors
def extrapolate(
    inputs: list[Path] = typer.Argument(..., help="A sweep directory (its rank winner), a run directory, or a CSV/JSONL file."),
    arm: Optional[str] = typer.Option(None, "--arm", help="Arm (or run) to project instead of the rank winner."),
    x: str = typer.Option("gpu_hours", "--x", help="Compute axis."),
    y: str = typer.Option("val_pass_rate", "--y", help="Pass-rate column."),
    run: str = typer.Option("run", "--run", help="Run column of curve files."),
    group: Optional[str] = typer.Option(None, "--group", help="Arm column of curve files."),
    fit_from: Optional[float] = typer.Option(None, "--fit-from", help="Drop points below this compute."),
    fit_until: Optional[float] = typer.Option(None, "--fit-until", help="Fit only up to this compute; later points check the prediction."),
    to: float = typer.Option(16000.0, "--to", help="Compute to project to."),
    target_r: Optional[float] = typer.Option(None, "--target-r", help="Report the compute needed to reach this pass rate."),
    n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap resamples for the interval."),
    ci: float = typer.Option(0.95, "--ci", help="Interval level."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (design.md §5)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write observed points, fit, extrapolation band, held-out points."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
):
    """Project a run (default: the winner of `rank`) to --to compute, with an interval and a held-out check.

    Example: ablate extrapolate sweeps/loss --fit-until 8000 --to 16000 --target-r 0.6
    """
    from ablate import report
    from ablate.fit.analysis import group_arms
    from ablate.fit.curves import load_inputs
    from ablate.fit.extrapolate import extrapolate as project
    from ablate.fit.extrapolate import winner

    opts = _fit_options(fit_from=fit_from, fit_until=fit_until, n_boot=n_boot, ci=ci, target=to,
                        target_r=target_r, seed=seed)
    curves, _ = load_inputs(inputs, x=x, y=y, run=run, group=group)
    arms = group_arms(curves)
    if arm is None and len(arms) == 1:
        arm = next(iter(arms))
    elif arm is None:
        arm = winner(curves, _fit_options(fit_from=fit_from, fit_until=fit_until, n_boot=0, target=to))
    elif arm not in arms:
        raise UserError(f"--arm {arm!r}: no such arm; arms are: {', '.join(arms)}")
    ex = project(arms[arm], opts, subject=arm)
    if plot is not None:
        report.plot_fits([ex.fit], plot, heldout_from=fit_until, xlabel=f"compute ({x})",
                         title=f"{arm}: fitted to {ex.fit.window[1]:g}, projected to {to:g}")
    if as_json:
        typer.echo(report.dump_json(ex.to_json()))
        return
    console = report.console()
    console.print(f"subject: {arm}{' (rank winner)' if len(arms) > 1 else ''}; fit window {opts.window_text()} of '{x}'")
    console.print(report.extrapolation_table(ex))
    report.print_notes(console, [ex.fit])
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


@app.command()
@user_errors
def sweep(
    recipe: Path = typer.Argument(..., help="Sweep file (recipes/loss.yaml) or recipe (recipes/base.yaml)."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Hydra overrides for every run: key=value; a sweep value (a,b / range(..) / choice(..)) adds or replaces a grid axis; seed=0,1,2 replaces the seeds."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (label, run id, arm id, overrides vs base) and launch nothing."),
    executor: Optional[str] = typer.Option(None, "--executor", "-e", help="local | slurm | debug | auto (default: the recipe's launcher.name)."),
    max_parallel: Optional[int] = typer.Option(None, "--max-parallel", help="local: runs at once (default: launcher.max_parallel, else the cores)."),
    profile: Optional[str] = typer.Option(None, "--profile", help="slurm: resources from slurm/<profile>.yaml (default: launcher.profile)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Also resubmit failed runs (they resume from their checkpoints)."),
    force: bool = typer.Option(False, "--force", help="Re-run every run not queued or running, from scratch (old run dirs are archived)."),
    follow: bool = typer.Option(False, "--follow", help="Wait with a progress bar until the submitted runs end."),
    root: Path = typer.Option(Path("sweeps"), "--root", help="Folder holding the sweeps (results in <root>/<sweep>/)."),
    job: str = typer.Option("ablate.train:run", "--job", help="The run function, module:function or file.py:function."),
):
    """Expand a sweep into validated runs and launch them; safe to run again at any time.

    Re-running prints the plan (N done, M running, K failed, J new) and submits only new and preempted runs.
    Example: ablate sweep recipes/loss.yaml seed=0,1,2 loss.eps_max=4 --dry-run
    """
    from ablate import report
    from ablate.sweep import load_sweep, plan_table

    plan = load_sweep(recipe, overrides or [])
    if dry_run:
        report.console().print(plan_table(plan))
        return
    from ablate.launch import launch_sweep

    for note in plan.notes:
        typer.echo(f"note: {note}")
    launch_sweep(plan, root=root, executor=executor, max_parallel=max_parallel, profile=profile,
                 retry_failed=retry_failed, force=force, follow=follow, job=job, echo=typer.echo)
    if not follow:
        typer.echo(f"follow with: ablate status {plan.name}" + (f" --root {root}" if root != Path("sweeps") else ""))


@app.command()
@user_errors
def show(
    recipe: Path = typer.Argument(..., help="Recipe (recipes/base.yaml) or sweep file narrowed to one run (recipes/loss.yaml loss=dapo)."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Hydra overrides, one value per key: key=value."),
):
    """Print the resolved, validated config of one run (YAML), headed by its run id and arm id.

    Example: ablate show recipes/base.yaml loss=dapo aggregation=token
    """
    from ablate.sweep import compose_run, config_yaml

    typer.echo(config_yaml(compose_run(recipe, overrides or [])), nl=False)


@app.command()
@user_errors
def train(
    recipe: Path = typer.Argument(..., help="Recipe (recipes/base.yaml) or sweep file narrowed to one run."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Hydra overrides, one value per key: key=value."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: sweeps/train/runs/<run_id>)."),
    threads: int = typer.Option(1, "--threads", help="torch threads for this run (several runs can share a machine)."),
):
    """Execute one RL run in the foreground and write its run directory (resumes it if it has a checkpoint).

    Example: ablate train recipes/base.yaml loss=dapo train.max_steps=100 --out /tmp/run1
    """
    from ablate.sweep import compose_run, run_id

    config = compose_run(recipe, overrides or [])
    run_dir = out if out is not None else Path("sweeps") / "train" / "runs" / run_id(config)
    typer.echo(f"run directory: {run_dir}")
    from ablate.train import run as run_train

    summary = run_train(config, run_dir, threads=threads)
    typer.echo(f"{summary['status']}: step {summary['step']}, R0 {summary['r0']}, val_pass_rate {summary['val_pass_rate']}"
               + (f" ({summary['reason']})" if summary.get("reason") else ""))
    if summary["status"] == "diverged":
        raise typer.Exit(3)

if __name__ == "__main__":
    app()
