"""The `ablate` command line: one thin command per verb; the work lives in the modules it calls.

Bad input raises `ablate.errors.UserError`; `user_errors` turns it into one line on stderr and exit 2.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from dataclasses import replace
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
    """Print a UserError as `error: <message>` on stderr and exit 2, instead of a traceback. The message often
    quotes a file (a run name, a label, a value): its control characters are shown, not obeyed, and it stays one
    line (text.safe; a config's several errors are one line each). An OSError no check foresaw (a disk that
    filled up, a file system remounted read-only) is one such line too, naming the path. Ctrl-C exits 130 and a
    closed output pipe 141, as a shell reports them."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from ablate.text import safe

        try:
            return fn(*args, **kwargs)
        except UserError as e:
            each = getattr(e, "errors", None)  # config.ConfigErrors: several problems, one line each
            lines = [safe(m) for m in each] if isinstance(each, list) and each else [safe(e)]
            typer.echo("error: " + "\nerror: ".join(lines), err=True)
            raise typer.Exit(2) from None
        except BrokenPipeError:  # `ablate status | head`: the reader has gone, nothing is left to say
            with contextlib.suppress(OSError, ValueError):  # no second error at exit's flush
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(141) from None  # 128 + SIGPIPE, as a shell reports it
        except KeyboardInterrupt:  # Ctrl-C in any verb: the shell's convention, no traceback
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None
        except OSError as e:
            where = f"{e.filename}: " if e.filename else ""
            typer.echo(f"error: {safe(where)}{safe(e.strerror or e)}; check that path (free space, permissions, a "
                       "read-only file system)", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


@app.callback()
def main() -> None:
    """ablate: sweep RL recipes, fit the ScaleRL sigmoid to each run, rank design choices, extrapolate."""


# ---- commands (each: parse options, call the module, print) ----


# Options of fit, rank and extrapolate, each declared once so that its flag, default and help agree everywhere.
X_OPT = typer.Option("auto", "--x", help="Compute: a column of curve files; for sweep and run directories gpu_hours, flops, samples or step; for other tools' logs a logged metric, or step (made into compute by --samples-per-step / --gpu-hours-per-step). auto: samples for runs that ran on CPU (where gpu_hours is wall-clock: the machine's load), else gpu_hours.")
Y_OPT = typer.Option("val_pass_rate", "--y", help="Pass-rate column or metric (values in [0, 1]).")
RUN_OPT = typer.Option("run", "--run", help="Column of curve files naming the run (optional: without it a file is one run).")
GROUP_OPT = typer.Option(None, "--group", help="Column of curve files naming the arm; its runs (seeds) are fitted together and resampled for the interval.")
FIT_FROM_OPT = typer.Option(None, "--fit-from", help="Drop points below this compute (ScaleRL drops ~1.5k of 16k GPU-hours).")
FIT_UNTIL_OPT = typer.Option(None, "--fit-until", help="Fit only points up to this compute; later points check the extrapolation.")
TO_OPT = typer.Option(None, "--to", help="Compute at which to predict the pass rate, in the units of --x (rank orders arms by it; rank and extrapolate refuse more than 1000x the data). Default: the paper's 16000 when --x is gpu_hours and the data ends below it (within 1000x), else twice the largest compute fitted.", show_default=False)
TARGET_R_OPT = typer.Option(None, "--target-r", help="Also report the compute needed to reach this pass rate.")
N_BOOT_OPT = typer.Option(1000, "--n-boot", help="Bootstrap resamples for the fits' intervals (0: none; at most 10,000).")
CI_OPT = typer.Option(0.95, "--ci", help="Interval level.")
JSON_OPT = typer.Option(False, "--json", help="Print JSON instead of the table (keys: docs/json.md).")
PLOT_OPT = typer.Option(None, "--plot", help="Write a figure to this file (.png, .pdf, .svg, ...).")
SEED_OPT = typer.Option(0, "--seed", help="Bootstrap seed (>= 0).")
R0_OPT = typer.Option(None, "--r0", help="R0 to hold fixed when the data has no point at compute 0 (else R0 is fitted).")
FORMAT_OPT = typer.Option("auto", "--format", help="Input format: auto (told by content), table (CSV/JSONL), tensorboard, wandb (offline run folder), wandb-csv (W&B CSV export), trl (trainer_state.json) or verl (JSONL or console log); sweep and run directories are read as such.")
SAMPLES_PER_STEP_OPT = typer.Option(None, "--samples-per-step", help="Other tools' logs only: add the column samples = step x this (then --x samples).")
GPU_HOURS_PER_STEP_OPT = typer.Option(None, "--gpu-hours-per-step", help="Other tools' logs only: add the column gpu_hours = step x this (the default --x).")
WINDOW_OPT = typer.Option(False, "--window-sensitivity", help="Also refit with the window cut at 50% and 75% of its compute; a fit is marked unstable when an earlier cutoff's A interval does not overlap the full fit's.")


# How much work one command may be asked for. Past these a command would not finish in a working day or would
# not fit in memory, and no answer needs more (they are 10x to 20x the defaults):
MAX_N_BOOT = 10_000
"""--n-boot: the resamples are [n_boot, n] arrays with n up to 2,048 points (fit/uncertainty.py's BOOT_POINTS), so
10,000 resamples take ~160 MB an array, and a billion took hundreds of GiB; 1,000 (the default) already puts a
95% interval's ends within a fraction of its width."""
MAX_TRIALS = 1_000
"""--trials (plan, calibrate): each trial fits and ranks a whole simulated sweep (about a second); 1,000 trials give
a power or a rate to +-1.6 points, and cost hours per design already."""
MAX_FUTURES = 1_000
"""--futures (plan): each future re-ranks the whole sweep (about a second); 40 (the default) settle an arm."""
MAX_CALIBRATE_CELLS = 2_000
"""ablate calibrate: cells (shapes x noises x seeds x f x effects, with repeats); the full default grid has 360."""


def _at_most(flag: str, value: int, limit: int, why: str) -> None:
    if value > limit:
        raise UserError(f"{flag} {value}: at most {limit:,} ({why}); give a smaller number")


def _fit_options(**kw):
    from ablate.fit.analysis import FitOptions

    opts = FitOptions(**kw)
    opts.validate()
    _at_most("--n-boot", opts.n_boot, MAX_N_BOOT, "more resamples do not sharpen an interval, and need memory")
    return opts


def _figure(plot: Optional[Path]) -> Optional[Path]:
    """The file the figure will be written to, checked before any fitting (see figures.figure_path)."""
    from ablate import figures

    return None if plot is None else figures.figure_path(plot)


def _check_reach(curves, to: float, x: str, fit_until: Optional[float]) -> None:
    """rank and extrapolate refuse a --to beyond defaults.MAX_REACH x the largest compute fitted (see there)."""
    from ablate.defaults import MAX_REACH, fitted_top

    top = fitted_top(curves, fit_until)
    if top > 0 and to > MAX_REACH * top:
        raise UserError(f"--to {to:g} is {to / top:,.0f}x the largest compute fitted ({top:g} {x}): far past what a "
                        f"fit can tell; pass --to in the data's units (e.g. --to {2 * top:.3g}), or another --x "
                        f"({', '.join(a for a in ('gpu_hours', 'flops', 'samples', 'step') if a != x)})")


def _given_to(to: Optional[float]) -> float:
    """The --to the options are checked with before any data is read: the one given, else a placeholder that
    `_target` replaces with the default chosen from the data."""
    from ablate.defaults import PAPER_TARGET

    return PAPER_TARGET if to is None else to


def _target(opts, curves, x: str, to: Optional[float], fit_until: Optional[float], *, reach: bool = True):
    """`opts` with the target --to gives, or defaults.choose_target picks from the data, and the line that says
    which; checked against the reach first when `reach` (rank, extrapolate)."""
    from ablate.defaults import choose_target, fitted_top

    target, text = choose_target(curves, x, to, fit_until)
    first = min((float(c.x[c.x > 0].min()) for c in curves if (c.x > 0).any()), default=0.0)
    if to is not None and to < first:  # e.g. GPU-hours given while --x auto chose samples for a CPU sweep
        raise UserError(f"--to {to:g} is below the first evaluation ({first:g} {x}): nothing has been learned there; "
                        f"pass --to in {x} (e.g. --to {2 * fitted_top(curves, fit_until):.3g}), or choose the axis "
                        "with --x (gpu_hours, flops, samples, step)")
    if reach:
        _check_reach(curves, target, x, fit_until)
    return replace(opts, target=target), text


def _print_defaults(console, target_text: str, axis_text: Optional[str], axis_note: Optional[str]) -> None:
    """The header lines of fit and extrapolate that say which target and which compute axis the command used, and
    why (defaults.choose_target, choose_axis, wall_clock_note)."""
    from ablate.report import esc

    console.print(f"target: {esc(target_text)}")
    for line in (axis_text, axis_note):
        if line:
            console.print(f"[yellow]axis[/]: {esc(line)}")


@app.command()
@user_errors
def fit(
    file: Path = typer.Argument(..., help="CSV or JSONL with one row per (run, evaluation), a run directory, a sweep directory (each run fitted), or a TensorBoard, W&B (offline run or CSV export), TRL (trainer_state.json) or verl log (each of its runs fitted)."),
    x: str = X_OPT,
    y: str = Y_OPT,
    run: str = RUN_OPT,
    group: Optional[str] = GROUP_OPT,
    fmt: str = FORMAT_OPT,
    samples_per_step: Optional[float] = SAMPLES_PER_STEP_OPT,
    gpu_hours_per_step: Optional[float] = GPU_HOURS_PER_STEP_OPT,
    method: str = typer.Option("default", "--method", help="default (grid + least_squares + bootstrap) or paper (ScaleRL's grid + curve_fit)."),
    fit_from: Optional[float] = FIT_FROM_OPT,
    fit_until: Optional[float] = FIT_UNTIL_OPT,
    fit_r0: bool = typer.Option(False, "--fit-r0", help="Free R0 instead of fixing it at the pass rate measured at compute 0."),
    r0: Optional[float] = R0_OPT,
    loss: str = typer.Option("linear", "--loss", help="linear or huber (robust to outlying evaluations)."),
    n_boot: int = N_BOOT_OPT,
    ci: float = CI_OPT,
    to: Optional[float] = TO_OPT,
    target_r: Optional[float] = TARGET_R_OPT,
    compare: bool = typer.Option(False, "--compare-forms", help="Also fit a power law and an exponential and backtest which extrapolates best."),
    window: bool = WINDOW_OPT,
    as_json: bool = JSON_OPT,
    plot: Optional[Path] = PLOT_OPT,
    seed: int = SEED_OPT,
):
    """Fit the ScaleRL sigmoid R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) to training curves.

    The figure shows the points, the fits, the window and the extrapolation band.
    Example: ablate fit curves.csv --fit-until 8000 --to 16000 --plot fit.png
    """
    from ablate import figures, report
    from ablate.curves import load_inputs
    from ablate.defaults import choose_axis, wall_clock_note
    from ablate.fit.analysis import compare_forms, fit_table, window_sensitivity

    esc = report.esc
    opts = _fit_options(method=method, fit_from=fit_from, fit_until=fit_until, fit_r0=fit_r0, r0=r0, loss=loss,
                        n_boot=n_boot, ci=ci, target=_given_to(to), target_r=target_r, seed=seed)
    plot = _figure(plot)
    per_step = {"samples": samples_per_step, "gpu_hours": gpu_hours_per_step}
    x, axis_text = choose_axis([file], x, per_step)
    curves, _ = load_inputs([file], x=x, y=y, run=run, group=group, fmt=fmt, per_step=per_step)
    opts, target_text = _target(opts, curves, x, to, fit_until, reach=False)
    results = fit_table(curves, opts, by_group=group is not None)
    if window:
        results = [window_sensitivity(r, opts) for r in results]
    forms = {r.run: compare_forms(r, opts) for r in results} if compare else None
    if plot is not None:
        figures.plot_fits(results, plot, xlabel=f"compute ({x})")
    if as_json:
        out = {"fits": [r.to_json() for r in results]}
        if forms is not None:
            out["forms"] = forms
        typer.echo(report.dump_json(out))
        return
    console = report.console()
    console.print(f"fit window {opts.window_text()} of '{esc(x)}'; {report.r0_text(results, opts)}; method {method}; "
                  f"intervals: {esc(report.interval_text(results))}")
    _print_defaults(console, target_text, axis_text, wall_clock_note(curves, x))
    console.print(report.fit_table(results))
    if window:
        console.print(report.sensitivity_table(results))
    report.print_notes(console, results)
    if target_r is not None:
        for r in results:
            console.print(f"  {esc(r.run)}: compute to reach {target_r:g}: "
                          f"{report.fmt_pm(r.compute_to_target, r.compute_to_target_ci)}")
    if forms is not None:
        console.print(report.forms_table(forms))
    if plot is not None:
        console.print(f"figure: {esc(str(plot))}")


@app.command()
@user_errors
def rank(
    inputs: list[Path] = typer.Argument(..., help="Sweep directories (sweeps/NAME), CSV/JSONL curve files and/or TensorBoard, W&B (offline runs or CSV exports), TRL (trainer_state.json) or verl logs (each of their runs an arm)."),
    x: str = X_OPT,
    y: str = Y_OPT,
    run: str = RUN_OPT,
    group: Optional[str] = GROUP_OPT,
    fmt: str = FORMAT_OPT,
    samples_per_step: Optional[float] = SAMPLES_PER_STEP_OPT,
    gpu_hours_per_step: Optional[float] = GPU_HOURS_PER_STEP_OPT,
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Arm to compare against (default: the sweep file's baseline)."),
    margin: Optional[str] = typer.Option(None, "--margin", help="Use the paper's threshold rule instead of the calibrated tests: `paper` (±0.02 on A, ±15% compute) or a margin on A."),
    noise: Optional[Path] = typer.Option(None, "--noise", help="Seed spread measured before (a file --save-noise wrote) for arms without seeds of their own."),
    save_noise: Optional[Path] = typer.Option(None, "--save-noise", help="Write the seed spread measured on this ranking's seeded arms to this file (for --noise)."),
    shared_a: str = typer.Option("pair", "--shared-a", help="The A the efficiency comparison refits at: pair (each arm with the baseline, their own shared A), all (one A for every arm: the mean of the identified arms' A, as the paper compares), or a value."),
    fit_from: Optional[float] = FIT_FROM_OPT,
    fit_until: Optional[float] = FIT_UNTIL_OPT,
    r0: Optional[float] = R0_OPT,
    to: Optional[float] = TO_OPT,
    n_boot: int = N_BOOT_OPT,
    ci: float = CI_OPT,
    window: bool = WINDOW_OPT,
    as_json: bool = JSON_OPT,
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write the fits' figure to this file (.png, .pdf, .svg, ...) and the efficiency figure to NAME-efficiency.EXT beside it."),
    seed: int = SEED_OPT,
    min_effect: float = typer.Option(0.02, "--min-effect", help="The smallest change of A that matters (the paper's ±0.02): a change inside it is negligible, and arms within it (and within --min-effect-compute) can be shown equivalent."),
    min_effect_compute: float = typer.Option(1.15, "--min-effect-compute", help="The smallest compute ratio that matters, either way (the paper's ±15%: 1.15)."),
    explain: bool = typer.Option(False, "--explain", help="After the table, each arm's full reasoning: every test with its p-value and interval, and what would decide an inconclusive arm."),
):
    """Rank arms by predicted pass rate at --to and say which choices move the ceiling A, which only efficiency,
    which are shown not to matter, and which need more seeds.

    Each arm against the baseline: changed (ceiling or efficiency ↑/↓, marked negligible or unclear when its
    interval does not clear the smallest effect that matters, --min-effect), equivalent (shown within it by two
    one-sided tests), inconclusive (neither; with the seeds per arm that would decide it) or not identified (the
    window has not passed C_mid). Tests are against the seed-to-seed spread (measured on the arms with seeds, or
    read with --noise), at a false-discovery rate of 5%; with one seed per arm and no measured spread every arm
    is inconclusive and the note under the table gives the command that adds seeds. --explain prints each arm's
    reasoning. The figures: every arm's fit (baseline in black), and one panel per arm compared on efficiency.
    Example: ablate rank sweeps/loss --x samples --to 512000 --plot rank.png
    """
    from ablate import figures, report, store
    from ablate.curves import load_inputs
    from ablate.defaults import choose_axis, wall_clock_note
    from ablate.fit.analysis import window_sensitivity
    from ablate.fit.compare import MinEffect, NoiseFloor, measured_floor, parse_margin, parse_shared_a
    from ablate.fit.compare import rank as rank_arms

    esc = report.esc
    opts = _fit_options(fit_from=fit_from, fit_until=fit_until, n_boot=n_boot, ci=ci, target=_given_to(to), seed=seed,
                        r0=r0)
    smallest = MinEffect(a=min_effect, ratio=min_effect_compute)
    parse_margin(margin)
    mode = parse_shared_a(shared_a)
    floor = None if noise is None else NoiseFloor.load(noise)
    if save_noise is not None:
        report.check_writable_output(save_noise, "--save-noise")
    if n_boot == 0:
        raise UserError("--n-boot 0: rank needs intervals (each arm's identifiability rests on them); give --n-boot "
                        "of 200 or more")
    plot = _figure(plot)
    eff_path = None if plot is None else _figure(plot.with_name(plot.stem + "-efficiency" + plot.suffix))
    per_step = {"samples": samples_per_step, "gpu_hours": gpu_hours_per_step}
    x, axis_text = choose_axis(inputs, x, per_step)
    curves, skipped = load_inputs(inputs, x=x, y=y, run=run, group=group, fmt=fmt, per_step=per_step)
    opts, target_source = _target(opts, curves, x, to, fit_until)
    to = opts.target
    ranking = rank_arms(curves, opts, baseline=baseline, margin=margin, noise=floor, x=x, not_fitted=skipped,
                        jobs=store.cpu_count(), shared_a=mode, min_effect=smallest)
    ranking.target_source = target_source  # how --to was chosen, and why x is what it is (defaults.py)
    ranking.axis_note = "; ".join(n for n in (axis_text, wall_clock_note(curves, x)) if n) or None
    if window:
        for a in ranking.arms:
            window_sensitivity(a.fit, opts)
    if save_noise is not None:
        measured = measured_floor(ranking.arms)
        if measured is None:
            raise UserError(f"--save-noise {save_noise}: no arm has 2 identified seeds, so there is no seed spread "
                            "to save; run the sweep with seed=0,1,2")
        measured.source = f"{measured.source}, on '{x}': " + ", ".join(str(p) for p in inputs)
        store.write_json(save_noise, measured.to_json())
    if plot is not None:
        figures.plot_fits([a.fit for a in ranking.arms], plot, highlight=ranking.baseline, xlabel=f"compute ({x})",
                         title=f"arms fitted on {opts.window_text()} (baseline in black)")
        eff = figures.plot_efficiency(ranking, eff_path)
    if as_json:
        typer.echo(report.dump_json(ranking.to_json()))
        return
    console = report.console()
    base = esc(ranking.baseline) if ranking.baseline is not None else "— (give --baseline)"
    console.print(f"fit window {opts.window_text()} of '{esc(x)}'; baseline: {base}")
    for line in report.rank_header(ranking):
        console.print(line)
    console.print(report.rank_table(ranking))
    if window:
        console.print(report.sensitivity_table([a.fit for a in ranking.arms]))
    for line in report.rank_notes(ranking, inputs):
        console.print(line)
    far = [n for a in ranking.arms for n in a.fit.notes if n.startswith("--to")]
    if far:
        console.print(f"  [yellow]note[/]: {esc(far[0])}")
    for s in ranking.not_fitted:
        console.print(f"  [red]not fitted[/] {esc(s['label'])}: {esc(s['reason'])}")
    if any(a.stopped for a in ranking.arms):
        from ablate.prune import recorded_target

        settled_at = [(p, t) for p in inputs if p.is_dir() for t in [recorded_target(p, x)] if t is not None]
        if settled_at and not any(math.isclose(t, to, rel_tol=1e-6) for _, t in settled_at):
            p, t = settled_at[0]
            console.print(f"  [yellow]pruned[/]: the stopped arms of {esc(str(p))} were settled on their verdicts at "
                          f"--to {t:g} (--x {esc(x)}), not at {to:g}; to read those: `ablate rank {esc(str(p))} "
                          f"--x {esc(x)} --to {t:g}`")
    if explain:
        for line in report.explain_lines(ranking):
            console.print(line)
    if plot is not None:
        console.print(f"figures: {esc(str(plot))}" + (f", {esc(str(eff))}" if eff else " (no arm was compared on efficiency: no efficiency figure)"))


@app.command()
@user_errors
def extrapolate(
    inputs: list[Path] = typer.Argument(..., help="A sweep directory (its rank winner), a run directory, a CSV/JSONL file, or a TensorBoard, W&B (offline runs or CSV export), TRL (trainer_state.json) or verl log."),
    arm: Optional[str] = typer.Option(None, "--arm", help="Arm (or run) to project instead of the rank winner."),
    x: str = X_OPT,
    y: str = Y_OPT,
    run: str = RUN_OPT,
    group: Optional[str] = GROUP_OPT,
    fmt: str = FORMAT_OPT,
    samples_per_step: Optional[float] = SAMPLES_PER_STEP_OPT,
    gpu_hours_per_step: Optional[float] = GPU_HOURS_PER_STEP_OPT,
    fit_from: Optional[float] = FIT_FROM_OPT,
    fit_until: Optional[float] = FIT_UNTIL_OPT,
    r0: Optional[float] = R0_OPT,
    to: Optional[float] = TO_OPT,
    target_r: Optional[float] = TARGET_R_OPT,
    n_boot: int = N_BOOT_OPT,
    ci: float = CI_OPT,
    window: bool = WINDOW_OPT,
    as_json: bool = JSON_OPT,
    plot: Optional[Path] = PLOT_OPT,
    seed: int = SEED_OPT,
):
    """Project a run (default: the winner of `rank`) to --to compute, with an interval and a held-out check.

    Without --to: the paper's 16000 where the data is in GPU-hours and ends below it (within 1000x), else twice the
    largest compute fitted (the header says which). A --to inside the fitted window is an interpolation, and is
    called one.
    The figure shows the observed points, the fit, the extrapolation band and the held-out points.
    Example: ablate extrapolate sweeps/loss --x samples --fit-until 128000 --to 512000 --target-r 0.7
    """
    from ablate import figures, report
    from ablate.curves import load_inputs
    from ablate.defaults import choose_axis, choose_target, wall_clock_note
    from ablate.fit.analysis import group_arms, window_sensitivity
    from ablate.fit.extrapolate import extrapolate as project
    from ablate.fit.extrapolate import winner

    esc = report.esc
    opts = _fit_options(fit_from=fit_from, fit_until=fit_until, n_boot=n_boot, ci=ci, target=_given_to(to),
                        target_r=target_r, seed=seed, r0=r0)
    plot = _figure(plot)
    per_step = {"samples": samples_per_step, "gpu_hours": gpu_hours_per_step}
    x, axis_text = choose_axis(inputs, x, per_step)
    curves, _ = load_inputs(inputs, x=x, y=y, run=run, group=group, fmt=fmt, per_step=per_step)
    given = to
    opts, target_text = _target(opts, curves, x, to, fit_until)
    to = opts.target
    arms = group_arms(curves)
    by_rank = arm is None and len(arms) > 1
    if arm is None and len(arms) == 1:
        arm = next(iter(arms))
    elif arm is None:
        arm = winner(curves, _fit_options(fit_from=fit_from, fit_until=fit_until, n_boot=0, target=to, r0=r0))
    elif arm not in arms:
        raise UserError(f"--arm {arm!r}: no such arm; arms are: {', '.join(arms)}")
    # the target, its words and the reach are the arm projected's: its own data, not the longest arm's
    to, target_text = choose_target(arms[arm], x, given, fit_until)
    opts = replace(opts, target=to)
    _check_reach(arms[arm], to, x, fit_until)
    ex = project(arms[arm], opts, subject=arm, target_source=target_text)
    if window:
        window_sensitivity(ex.fit, opts)
    if plot is not None:
        figures.plot_fits([ex.fit], plot, heldout_from=fit_until, xlabel=f"compute ({x})",
                         title=f"{arm}: fitted to {ex.fit.window[1]:g}, {ex.reach_word} to {to:g}")
    if as_json:
        typer.echo(report.dump_json(ex.to_json()))
        return
    console = report.console()
    picked = " (highest predicted pass rate at the target; its verdict: ablate rank)" if by_rank else ""
    console.print(f"subject: {esc(arm)}{picked}; "
                  f"fit window {opts.window_text()} of '{esc(x)}'")
    _print_defaults(console, target_text, axis_text, wall_clock_note(curves, x))
    console.print(report.extrapolation_table(ex))
    if window:
        console.print(report.sensitivity_table([ex.fit]))
    report.print_notes(console, [ex.fit])
    if plot is not None:
        console.print(f"figure: {esc(str(plot))}")


@app.command()
@user_errors
def calibrate(
    shapes: str = typer.Option("scalerl-8b,embedded", "--shapes", help="Curve shapes: scalerl-8b, scalerl-scout, embedded."),
    noises: str = typer.Option("eval,ar0.5,ar0.9,jumps,seeds", "--noises", help="Noise models: eval, ar0.5, ar0.9, jumps, seeds."),
    seeds: str = typer.Option("1,2,3,5", "--seeds", help="Seeds per arm."),
    fs: str = typer.Option("0.5,0.8,0.95", "--f", help="Gain fractions the windows reach."),
    effects: str = typer.Option("null,a+0.05,cmid/2", "--effects", help="Effects: null, a+0.03, a+0.05, cmid/2, b*1.5; at the smallest effect that matters: a+0.02, a-0.02, cmid*1.15, a+0.02@end."),
    trials: int = typer.Option(50, "--trials", help="Simulated comparisons per cell (at most 1,000)."),
    n_boot: int = typer.Option(300, "--n-boot", help="Bootstrap resamples per fit (50 to 10,000)."),
    as_json: bool = JSON_OPT,
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the rows as JSON to this file."),
    seed: int = SEED_OPT,
):
    """Measure, on simulated arms with known truth, how often intervals cover and verdicts are right.

    Each cell (shape x noise x seeds x window x effect) simulates a baseline arm and an effect arm through the
    exact code `ablate rank` runs, and reports interval coverage, the false-call rate on identical arms, the
    power to find a real change, how often identical arms are shown `equivalent`, and how often `equivalent` is
    claimed falsely (a+0.02, a-0.02, cmid*1.15, a+0.02@end: a true effect exactly at the smallest that matters,
    where at most 5% is the target). The full grid takes a while; --trials 20 gives a quick look.
    Example: ablate calibrate --shapes embedded --seeds 1,3 --f 0.8 --trials 20
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ablate import report, store
    from ablate.fit.calibrate import EFFECTS, NOISES, SHAPES, calibrate as run_calibration

    def names(text: str, valid, flag: str) -> list[str]:
        got = [t.strip() for t in text.split(",") if t.strip()]
        bad = [g for g in got if g not in valid]
        if bad or not got:
            raise UserError(f"{flag} {text!r}: unknown {bad[0] if bad else 'empty'}; valid: {', '.join(valid)}")
        return got

    def numbers(text: str, flag: str, kind, lo, hi) -> list:
        try:
            got = [kind(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise UserError(f"{flag} {text!r}: give a comma-separated list of numbers") from None
        bad = [v for v in got if not lo <= v <= hi]
        if not got or bad:
            raise UserError(f"{flag} {text!r}: {bad[0] if bad else 'empty'} is out of range; each must be in "
                            f"[{lo}, {hi}]")
        return got

    grid = dict(shapes=names(shapes, SHAPES, "--shapes"), noises=names(noises, NOISES, "--noises"),
                seeds=numbers(seeds, "--seeds", int, 1, 20), fs=numbers(fs, "--f", float, 0.05, 0.99),
                effects=names(effects, EFFECTS, "--effects"))
    for flag, value, least in (("--trials", trials, 1), ("--n-boot", n_boot, 50), ("--seed", seed, 0)):
        if value < least:
            raise UserError(f"{flag} {value}: must be >= {least}")
    _at_most("--trials", trials, MAX_TRIALS, "each trial is a simulated comparison")
    _at_most("--n-boot", n_boot, MAX_N_BOOT, "more resamples do not sharpen an interval, and need memory")
    cells = math.prod(len(v) for v in grid.values())
    if cells > MAX_CALIBRATE_CELLS:
        raise UserError(f"--shapes x --noises x --seeds x --f x --effects: {cells:,} cells, at most "
                        f"{MAX_CALIBRATE_CELLS:,}; give fewer values (the default grid has 360)")
    if out is not None:
        report.check_writable_output(out, "--out")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True, disable=as_json) as bar:
        task = bar.add_task("calibrating", total=math.prod(len(v) for v in grid.values()))
        rows = run_calibration(**grid, trials=trials, seed=seed, n_boot=n_boot, jobs=store.cpu_count(),
                               progress=lambda i, n, row: bar.update(task, completed=i))
    result = {"grid": grid, "trials": trials, "rows": rows}
    if out is not None:
        store.write_json(out, result)
    if as_json:
        typer.echo(report.dump_json(result))
        return
    report.console().print(report.calibration_table(rows))


@app.command()
@user_errors
def plan(
    source: Path = typer.Argument(..., help="A sweep directory (sweeps/NAME) or curves `rank` reads: plan from what they measured. Or a sweep file (recipes/NAME.yaml) with --calibration: plan before any run."),
    overrides: Optional[list[str]] = typer.Argument(None, help="With a sweep file: Hydra overrides, as `ablate sweep` takes them (e.g. train.max_steps=2000)."),
    delta_a: float = typer.Option(0.02, "--delta-a", help="Ceiling change to detect (the paper's ±0.02 on A)."),
    ratio: float = typer.Option(1.25, "--ratio", help="Efficiency change to detect: the arm needs 1/ratio of the compute."),
    power: float = typer.Option(0.8, "--power", help="Power the plan must reach."),
    question: str = typer.Option("ceiling,efficiency", "--question", help="Which questions to plan: ceiling, efficiency or both."),
    x: str = X_OPT,
    run: str = RUN_OPT,
    group: Optional[str] = GROUP_OPT,
    fmt: str = FORMAT_OPT,
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Arm the others are compared with (default: the sweep file's baseline)."),
    to: Optional[float] = typer.Option(None, "--to", help="Compute the verdicts rank at (default: twice the budget), in the units of --x."),
    noise: Optional[Path] = typer.Option(None, "--noise", help="A seed spread measured before (--save-noise of `ablate rank`), for sweeps without seeds."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="A stored task model (--save-calibration) to plan a sweep file from, before any run."),
    save_calibration: Optional[Path] = typer.Option(None, "--save-calibration", help="Write the task model measured on SOURCE to this file (for --calibration)."),
    trials: int = typer.Option(100, "--trials", help="Most simulated sweeps per design (with --exact a design stops early once its power is clearly above or below the goal; at most 1,000)."),
    futures: int = typer.Option(40, "--futures", help="Simulated futures per running arm (0: skip the running arms; at most 1,000)."),
    min_effect: float = typer.Option(0.02, "--min-effect", help="The smallest change of A that matters, as `rank` reads it (the paper's ±0.02)."),
    min_effect_compute: float = typer.Option(1.15, "--min-effect-compute", help="The smallest compute ratio that matters, either way, as `rank` reads it (the paper's ±15%: 1.15)."),
    exact: bool = typer.Option(False, "--exact", help="Rank every simulated sweep with `ablate rank` itself (minutes; the reference the default fast engine is checked against)."),
    as_json: bool = JSON_OPT,
    seed: int = SEED_OPT,
):
    """How many seeds and how much compute per arm a question needs, and where running arms can stop.

    Every answer is simulated: sweeps drawn from the measured curve and noise (evaluation noise, drift, seed
    spread) are given verdicts by `ablate rank`'s rules (batched fits, in seconds; --exact: by `ablate rank`
    itself, in minutes), and the power is the share that find the effect. The
    table gives, per compute per run, the fewest seeds per arm that reach --power at a 5% false-discovery rate and
    the GPU-hours; arms still running are continued in simulation to their max_steps to see whether their verdict
    could still change (settled: it can stop now).
    Examples: ablate plan sweeps/loss --x samples;  ablate plan recipes/loss.yaml --calibration cal.json
    """
    from ablate import report, store
    from ablate import plan as planner
    from ablate.fit.planning import QUESTIONS

    qs = [q.strip() for q in question.split(",") if q.strip()]
    bad = [q for q in qs if q not in QUESTIONS]
    if bad or not qs:
        raise UserError(f"--question {question!r}: give ceiling, efficiency or both (comma-separated)")
    for flag, value, ok in (("--delta-a", delta_a, 0 < delta_a < 0.5), ("--ratio", ratio, 1.0 < ratio <= 10.0),
                            ("--power", power, 0.5 <= power < 1.0), ("--trials", trials, trials >= 20),
                            ("--futures", futures, futures >= 0), ("--seed", seed, seed >= 0),
                            ("--to", to, to is None or (math.isfinite(to) and to > 0))):
        if not ok:
            raise UserError(f"{flag} {value}: out of range (--delta-a in (0, 0.5), --ratio in (1, 10], --power in "
                            "[0.5, 1), --trials >= 20, --futures >= 0, --to > 0)")
    _at_most("--trials", trials, MAX_TRIALS, "each trial is a simulated sweep")
    _at_most("--futures", futures, MAX_FUTURES, "each future is a simulated sweep")
    if save_calibration is not None:
        report.check_writable_output(save_calibration, "--save-calibration")
    if not source.exists():
        raise UserError(f"{source}: no such file or directory; give a sweep directory (sweeps/NAME), a curves file, "
                        "or a sweep file with --calibration")
    console = report.console(stderr=True)
    progress = None if as_json else (lambda msg: console.print(f"[dim]  {report.esc(msg)}[/]"))
    from ablate.fit.verdicts import MinEffect

    common = dict(questions=qs, delta_a=delta_a, ratio=ratio, goal=power, trials=trials, seed=seed,
                  jobs=store.cpu_count(), progress=progress, noise=noise, engine="exact" if exact else "fast",
                  min_effect=MinEffect(a=min_effect, ratio=min_effect_compute))
    if source.is_file() and source.suffix in (".yaml", ".yml"):
        result = planner.plan_from_file(source, list(overrides or []), calibration, to=to, **common)
    else:
        if overrides:
            raise UserError(f"overrides {' '.join(overrides)}: only a sweep file takes overrides")
        if calibration is not None:
            raise UserError("--calibration plans a sweep file before any run; SOURCE has measurements of its own")
        from ablate.defaults import choose_axis

        x, axis_text = choose_axis([source], x)
        if axis_text and not as_json:
            report.console().print(f"[yellow]axis[/]: {report.esc(axis_text)}")
        result = planner.plan_measured(source, x=x, baseline=baseline, to=to, n_futures=futures, fmt=fmt, run=run,
                                       group=group, **common)
    if save_calibration is not None:
        store.write_json(save_calibration, result.model.to_json())
    if as_json:
        typer.echo(report.dump_json(result.to_json()))
        return
    planner.render(result, report.console())
    if save_calibration is not None:
        report.console().print(f"task model written to {report.esc(str(save_calibration))} (plan a sweep file with "
                               "--calibration)")


@app.command()
@user_errors
def status(
    sweep: Optional[str] = typer.Argument(None, help="Sweep name (sweeps/<name>/) or a sweep directory's path; default: every sweep under --root."),
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

    if not (math.isfinite(interval) and interval > 0):
        raise UserError(f"--interval {interval:g}: seconds between refreshes, a number > 0 (e.g. 5)")
    if sweep is not None and "/" in sweep and (Path(sweep) / "ledger.jsonl").exists():
        root, sweep = Path(sweep).resolve().parent, Path(sweep).resolve().name  # a sweep directory's path
    elif sweep is not None and "/" in sweep:
        raise UserError(f"{sweep}: not a sweep directory (no ledger.jsonl); give a sweep's name, or its directory "
                        "(sweeps/NAME)")
    from ablate.train.stopping import ctrl_c

    with ctrl_c() as interrupted:
        show_status(root, sweep, watch=watch, interval=interval, as_json=as_json)
    if interrupted.is_set():
        raise typer.Exit(130)  # Ctrl-C: the shell's status for it, not success


@app.command()
@user_errors
def sweep(
    recipe: Path = typer.Argument(..., help="Sweep file (recipes/loss.yaml) or recipe (recipes/base.yaml)."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Hydra overrides for every run: key=value; a sweep value (a,b / range(..) / choice(..)) adds or replaces a grid axis; seed=0,1,2 replaces the seeds."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (label, run id, arm id, overrides vs base) and launch nothing."),
    executor: Optional[str] = typer.Option(None, "--executor", "-e", help="local | slurm | debug | auto (default: the recipe's launcher.name)."),
    max_parallel: Optional[int] = typer.Option(None, "--max-parallel", help="Runs of this sweep at once (default: launcher.max_parallel, else as many as the cores hold).", show_default=False),
    profile: Optional[str] = typer.Option(None, "--profile", help="slurm: cluster resources: NAME is ablate's own slurm/NAME.yaml, a path (./slurm/x.yaml) exactly that file (default: ablate's slurm/local.yaml). Only the command line names a profile, never a recipe or the working directory."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Also resubmit failed runs (they resume from their checkpoints)."),
    force: bool = typer.Option(False, "--force", help="Re-run every run not queued or running, from scratch (old run dirs are archived)."),
    follow: bool = typer.Option(False, "--follow", help="Wait with a progress bar until the submitted runs end."),
    root: Path = typer.Option(Path("sweeps"), "--root", help="Folder holding the sweeps (results in <root>/<sweep>/)."),
    job: str = typer.Option("ablate.train:run", "--job", help="The run function, module:function or file.py:function."),
    tensorboard: bool = typer.Option(False, "--tensorboard", help="Runs also write their metrics to TensorBoard event files in their tb/ (train.tensorboard=true; not part of run ids). View a sweep with: tensorboard --logdir sweeps/NAME/runs"),
    prune: bool = typer.Option(False, "--prune", help="Stop runs that can no longer decide anything while the sweep runs: arms whose verdict against the baseline is settled (identified, and unchanged in simulated futures to max_steps) end `pruned`; broken runs (truncation >10% at 3 evaluations in a row, pass rate collapsed below R0) end `unstable`. Both keep their files; see `ablate status`."),
    prune_x: str = typer.Option("auto", "--prune-x", help="--prune: the compute axis verdicts are ranked on (gpu_hours, flops, samples or step; samples is load-independent on a shared CPU). auto: samples when the runs train on CPU, else gpu_hours."),
    prune_to: Optional[float] = typer.Option(None, "--prune-to", help="--prune: the compute verdicts are ranked at, in units of --prune-x (default: twice the compute a run reaches at max_steps)."),
    resume_pruned: bool = typer.Option(False, "--resume-pruned", help="Also resubmit pruned and unstable runs: they resume from their checkpoints and run to max_steps (not pruned again)."),
    group_read: bool = typer.Option(False, "--group-read", help="Let your group read (never write) the sweep: its directories are made 0750 instead of owner-only 0700, and an existing owner-only sweep is opened to the group (g+rx)."),
):
    """Expand a sweep into validated runs and launch them; safe to run again at any time.

    Re-running prints the plan (N done, M running, K failed, J new) and submits only new and preempted runs.
    With --prune, a monitor stops the runs that can no longer change a verdict (and broken ones) as the sweep goes.
    Example: ablate sweep recipes/loss.yaml seed=0,1,2 loss.eps_max=4 --dry-run
    """
    from ablate import report
    from ablate.launch import EXECUTORS, launch_sweep
    from ablate.sweep import load_sweep, plan_table

    if executor is not None and executor not in EXECUTORS:  # checked before the plan, so --dry-run says so too
        raise UserError(f"--executor {executor}: unknown; choose one of {', '.join(EXECUTORS)}")
    plan = load_sweep(recipe, [*(overrides or []), *(["train.tensorboard=true"] if tensorboard else [])])
    if dry_run:
        report.console().print(plan_table(plan))
        return

    from ablate.rundir import COMPUTE_AXES

    if prune_x not in (*COMPUTE_AXES, "auto"):
        raise UserError(f"--prune-x {prune_x}: unknown compute axis; valid: auto, {', '.join(COMPUTE_AXES)}")
    if prune_to is not None and not (math.isfinite(prune_to) and prune_to > 0):
        raise UserError(f"--prune-to {prune_to:g}: a compute > 0, in units of --prune-x")
    if (prune_to is not None or prune_x != "auto") and not prune:
        raise UserError("--prune-x / --prune-to set how --prune ranks; add --prune")
    settings = None
    if prune:
        from ablate.prune import PruneSettings

        if plan.baseline is None:
            raise UserError(f"--prune: sweep {plan.name!r} has no baseline arm to read verdicts against; name one "
                            "with `baseline:` in the sweep file")
        if prune_x == "auto":
            from ablate.defaults import launch_axis

            prune_x, why = launch_axis(plan.runs, executor)
            typer.echo(f"note: {why}")
        settings = PruneSettings(x=prune_x, to=prune_to)
    from ablate.status import check_ledger
    from ablate.text import safe

    report.check_writable_output(root / plan.name, "--root", folder=True)  # before any run is submitted
    check_ledger(root / plan.name)
    for note in plan.notes:
        typer.echo(f"note: {safe(note)}")
    launched = launch_sweep(plan, root=root, executor=executor, max_parallel=max_parallel, profile=profile,
                            retry_failed=retry_failed, force=force, job=job, echo=typer.echo, prune=settings,
                            resume_pruned=resume_pruned, group_read=group_read)
    if follow and (launched.submit or launched.running):
        from ablate.status import follow_runs

        from ablate.train.stopping import ctrl_c

        with ctrl_c() as interrupted:
            follow_runs(root, plan.name, launched.submit + launched.running)
        if interrupted.is_set():
            raise typer.Exit(130)  # Ctrl-C stopped the following, not the runs (follow_runs said so)
    elif not follow:
        typer.echo(f"follow with: ablate status {plan.name}" + (f" --root {root}" if root != Path("sweeps") else ""))


@app.command()
@user_errors
def show(
    recipe: Optional[Path] = typer.Argument(None, help="Recipe (recipes/base.yaml) or sweep file narrowed to one run (recipes/loss.yaml loss=dapo)."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Hydra overrides, one value per key: key=value."),
    trainers: bool = typer.Option(False, "--trainers", help="Print which options each trainer (trainer=ablate, trainer=trl) supports, instead of a config."),
):
    """Print the resolved, validated config of one run (YAML), headed by its run id and arm id.

    Example: ablate show recipes/base.yaml loss=dapo aggregation=token
    """
    from ablate.compose import compose_run
    from ablate.sweep import config_yaml

    if trainers:
        from rich.table import Table

        from ablate import report
        from ablate.trainers import PRESET_HINT, SUPPORT, TRL_VERSION

        table = Table("option", "trainer=ablate", f"trainer=trl (TRL {TRL_VERSION})", show_lines=False)
        for row in SUPPORT:
            table.add_row(*(report.esc(c) for c in row))
        console = report.console()
        console.print(table)
        console.print(f"The base recipe under TRL: ablate train recipes/base.yaml {report.esc(PRESET_HINT)}", soft_wrap=True)
        return
    if recipe is None:
        raise UserError("give a recipe (ablate show recipes/base.yaml), or --trainers for the support matrix")
    typer.echo(config_yaml(compose_run(recipe, overrides or [])), nl=False)


@app.command()
@user_errors
def train(
    recipe: Path = typer.Argument(..., help="Recipe (recipes/base.yaml) or sweep file narrowed to one run."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Hydra overrides, one value per key: key=value."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: sweeps/train/runs/<run_id>)."),
    threads: int = typer.Option(1, "--threads", help="torch threads for this run (several runs can share a machine)."),
    tensorboard: bool = typer.Option(False, "--tensorboard", help="Also write the metrics to TensorBoard event files in the run's tb/ (train.tensorboard=true)."),
    group_read: bool = typer.Option(False, "--group-read", help="Let your group read (never write) the run directory: it is made 0750 instead of owner-only 0700, and an existing owner-only one is opened to the group (g+rx)."),
):
    """Execute one RL run in the foreground and write its run directory (resumes it if it has a checkpoint).

    Example: ablate train recipes/base.yaml loss=dapo train.max_steps=100 --out /tmp/run1
    """
    from ablate.compose import compose_run
    from ablate.identity import run_id

    if not 1 <= threads <= 1024:
        raise UserError(f"--threads {threads}: give a number of torch threads from 1 to 1024")
    config = compose_run(recipe, [*(overrides or []), *(["train.tensorboard=true"] if tensorboard else [])])
    run_dir = out if out is not None else Path("sweeps") / "train" / "runs" / run_id(config)
    from ablate.train import preflight
    from ablate.train import run as run_train

    preflight(config, run_dir)
    from ablate import store

    # a run directory someone else could change is refused before anything is written
    store.check_owned_dir(run_dir.absolute())
    if out is None:
        store.make_dirs(run_dir.parent.parent, store.dir_mode(group_read))  # sweeps/train: the sweep of `train`
    store.make_dirs(run_dir, store.dir_mode(group_read))
    if group_read:
        for d in (run_dir.parent.parent, run_dir.parent) if out is None else ():  # made owner-only by an earlier run
            store.open_to_group(d, below=False)
        store.open_to_group(run_dir)
    typer.echo(f"run directory: {run_dir}")

    import shlex
    import signal

    from ablate.train.stopping import stop_on_signals

    again = shlex.join(["ablate", "train", str(recipe), *(overrides or []), "--out", str(run_dir),
                        *(["--threads", str(threads)] if threads != 1 else []),
                        *(["--tensorboard"] if tensorboard else [])])
    try:  # a signal stops the run at a step boundary; its number is the exit status
        with stop_on_signals() as stop, store.sweep_umask(store.group_readable(run_dir)):
            summary = run_train(config, run_dir, threads=threads, stop=stop)
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once
        typer.echo(f"interrupted; resume from the last checkpoint with: {again}", err=True)
        raise typer.Exit(130) from None
    typer.echo(f"{summary['status']}: step {summary['step']}, R0 {summary['r0']}, val_pass_rate {summary['val_pass_rate']}"
               + (f" ({summary['reason']})" if summary.get("reason") else ""))
    if summary["status"] == "diverged":
        raise typer.Exit(3)
    if summary["status"] == "preempted" and stop.exit_code():  # 130 for Ctrl-C, 143 for SIGTERM: not finished
        at = f" at step {summary['step']}" if summary.get("step") is not None else ""
        typer.echo(f"stopped by {signal.Signals(stop.signum).name}{at}; resume with: {again}", err=True)
        raise typer.Exit(stop.exit_code())

if __name__ == "__main__":
    app()
