"""`ablate fit`, `rank` and `extrapolate`: read curves, fit the ScaleRL sigmoid, rank the arms, project one. The
work: ablate.analysis.verbs; the output: ablate.render (the table's columns and the JSON keys: docs/json.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from ablate.cli.options import (
    CI_OPT,
    FIT_FROM_OPT,
    FIT_UNTIL_OPT,
    FROM_OPT,
    GPU_HOURS_PER_STEP_OPT,
    GROUP_OPT,
    JSON_OPT,
    N_BOOT_OPT,
    OUTPUT_FORMAT_OPT,
    PLOT_OPT,
    R0_OPT,
    RANK_FORMAT_OPT,
    RUN_OPT,
    SAMPLES_PER_STEP_OPT,
    SEED_OPT,
    TARGET_R_OPT,
    TO_OPT,
    WINDOW_OPT,
    X_OPT,
    Y_OPT,
    output_and_input,
)

FIT_FILE = typer.Argument(
    ...,
    help="CSV or JSONL with one row per (run, evaluation), a run directory, a sweep directory (each run fitted), "
    "or a TensorBoard, W&B (offline run or CSV export), TRL (trainer_state.json) or verl log (each of its "
    "runs fitted).",
)
FIT_METHOD = typer.Option(
    "default", "--method", help="default (grid + least_squares + bootstrap) or paper (ScaleRL's grid + curve_fit)."
)
FIT_FIT_R0 = typer.Option(
    False, "--fit-r0", help="Free R0 instead of fixing it at the pass rate measured at compute 0."
)
FIT_COMPARE = typer.Option(
    False, "--compare-forms", help="Also fit a power law and an exponential and backtest which extrapolates best."
)


def fit(
    file: Path = FIT_FILE,
    x: str = X_OPT,
    y: str = Y_OPT,
    run: str = RUN_OPT,
    group: str | None = GROUP_OPT,
    fmt: str = FROM_OPT,
    samples_per_step: float | None = SAMPLES_PER_STEP_OPT,
    gpu_hours_per_step: float | None = GPU_HOURS_PER_STEP_OPT,
    method: str = FIT_METHOD,
    fit_from: float | None = FIT_FROM_OPT,
    fit_until: float | None = FIT_UNTIL_OPT,
    fit_r0: bool = FIT_FIT_R0,
    r0: float | None = R0_OPT,
    loss: str = typer.Option("linear", "--loss", help="linear or huber (robust to outlying evaluations)."),
    n_boot: int = N_BOOT_OPT,
    ci: float = CI_OPT,
    to: float | None = TO_OPT,
    target_r: float | None = TARGET_R_OPT,
    compare: bool = FIT_COMPARE,
    window: bool = WINDOW_OPT,
    output: str | None = OUTPUT_FORMAT_OPT,
    as_json: bool = JSON_OPT,
    plot: Path | None = PLOT_OPT,
    seed: int = SEED_OPT,
) -> None:
    """Fit the ScaleRL sigmoid R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) to training curves.

    The figure shows the points, the fits, the window and the extrapolation band.
    Example: ablate fit curves.csv --fit-until 8000 --to 16000 --plot fit.png
    """
    from ablate.analysis import verbs
    from ablate.analysis.choices import given_to
    from ablate.render import figures, terminal
    from ablate.render.fit import print_fit

    output, fmt = output_and_input(output, fmt, as_json, ("table", "json"))
    opts = verbs.fit_options(
        method=method,
        fit_from=fit_from,
        fit_until=fit_until,
        fit_r0=fit_r0,
        r0=r0,
        loss=loss,
        n_boot=n_boot,
        ci=ci,
        target=given_to(to),
        target_r=target_r,
        seed=seed,
    )
    plot = None if plot is None else figures.figure_path(plot)
    reading = verbs.Reading(x, y, run, group, fmt, samples_per_step, gpu_hours_per_step)
    inputs = verbs.read_inputs([file], reading)
    report = verbs.fit_inputs(inputs, opts, to=to, by_group=group is not None, window=window, compare=compare)
    if plot is not None:
        figures.plot_fits(report.results, plot, xlabel=f"compute ({inputs.x})")
    if output == "json":
        typer.echo(terminal.dump_json(report.to_json()))
        return
    print_fit(terminal.console(), report, inputs, window=window, plot=plot)


RANK_INPUTS = typer.Argument(
    ...,
    help="Sweep directories (sweeps/NAME), CSV/JSONL curve files and/or TensorBoard, W&B (offline runs or CSV "
    "exports), TRL (trainer_state.json) or verl logs (each of their runs an arm).",
)
RANK_BASELINE = typer.Option(None, "--baseline", help="Arm to compare against (default: the sweep file's baseline).")
RANK_MARGIN = typer.Option(
    None,
    "--margin",
    help="Use the paper's threshold rule instead of the calibrated tests: `paper` (±0.02 on A, ±15% compute) or a "
    "margin on A.",
)
RANK_NOISE = typer.Option(
    None, "--noise", help="Seed spread measured before (a file --save-noise wrote) for arms without seeds of their own."
)
RANK_SAVE_NOISE = typer.Option(
    None,
    "--save-noise",
    help="Write the seed spread measured on this ranking's seeded arms to this file (for --noise).",
)
RANK_SHARED_A = typer.Option(
    "pair",
    "--shared-a",
    help="The A the efficiency comparison refits at: pair (each arm with the baseline, their own shared A), all "
    "(one A for every arm: the mean of the identified arms' A, as the paper compares), or a value.",
)
RANK_PLOT = typer.Option(
    None,
    "--plot",
    help="Write the fits' figure to this file (.png, .pdf, .svg, ...) and the efficiency figure to "
    "NAME-efficiency.EXT beside it.",
)
RANK_MIN_EFFECT = typer.Option(
    0.02,
    "--min-effect",
    help="The smallest change of A that matters (the paper's ±0.02): a change inside it is negligible, and arms "
    "within it (and within --min-effect-compute) can be shown equivalent.",
)
RANK_MIN_EFFECT_COMPUTE = typer.Option(
    1.15, "--min-effect-compute", help="The smallest compute ratio that matters, either way (the paper's ±15%: 1.15)."
)
RANK_EXPLAIN = typer.Option(
    False,
    "--explain",
    help="After the table, each arm's full reasoning: every test with its p-value and interval, and what would "
    "decide an inconclusive arm.",
)


def rank(
    inputs: list[Path] = RANK_INPUTS,
    x: str = X_OPT,
    y: str = Y_OPT,
    run: str = RUN_OPT,
    group: str | None = GROUP_OPT,
    fmt: str = FROM_OPT,
    samples_per_step: float | None = SAMPLES_PER_STEP_OPT,
    gpu_hours_per_step: float | None = GPU_HOURS_PER_STEP_OPT,
    baseline: str | None = RANK_BASELINE,
    margin: str | None = RANK_MARGIN,
    noise: Path | None = RANK_NOISE,
    save_noise: Path | None = RANK_SAVE_NOISE,
    shared_a: str = RANK_SHARED_A,
    fit_from: float | None = FIT_FROM_OPT,
    fit_until: float | None = FIT_UNTIL_OPT,
    r0: float | None = R0_OPT,
    to: float | None = TO_OPT,
    n_boot: int = N_BOOT_OPT,
    ci: float = CI_OPT,
    window: bool = WINDOW_OPT,
    output: str | None = RANK_FORMAT_OPT,
    as_json: bool = JSON_OPT,
    plot: Path | None = RANK_PLOT,
    seed: int = SEED_OPT,
    min_effect: float = RANK_MIN_EFFECT,
    min_effect_compute: float = RANK_MIN_EFFECT_COMPUTE,
    explain: bool = RANK_EXPLAIN,
) -> None:
    """Rank arms by predicted pass rate at --to and say which choices move the ceiling A, which only efficiency,
    which are shown not to matter, and which need more seeds.

    Each arm against the baseline: changed (ceiling or efficiency ↑/↓, marked negligible or unclear when its
    interval does not clear the smallest effect that matters, --min-effect), equivalent (shown within it by two
    one-sided tests), inconclusive (neither; with the seeds that would decide it) or not identified (its window
    cannot tell A). Tests are against the seed-to-seed spread (measured, or read with --noise), at a false-discovery
    rate of 5%; with one seed an arm and no spread every arm is inconclusive (the note under the table gives the
    command that adds seeds). --explain: each arm's reasoning. --plot: the fits, and each arm's efficiency panel.
    Example: ablate rank sweeps/loss --x samples --to 512000 --plot rank.png
    """
    from ablate.analysis import verbs
    from ablate.analysis.choices import given_to
    from ablate.render import figures, terminal
    from ablate.render.markdown import rank_markdown
    from ablate.render.rank import print_rank
    from ablate.storage import store

    output, fmt = output_and_input(output, fmt, as_json, ("table", "json", "md"))
    opts = verbs.fit_options(
        fit_from=fit_from, fit_until=fit_until, n_boot=n_boot, ci=ci, target=given_to(to), seed=seed, r0=r0
    )
    settings = verbs.check_rank_settings(
        baseline=baseline,
        margin=margin,
        shared_a=shared_a,
        noise=noise,
        save_noise=save_noise,
        min_effect=min_effect,
        min_effect_compute=min_effect_compute,
        n_boot=n_boot,
        window=window,
    )
    figure_paths = figures.rank_figure_paths(plot)
    reading = verbs.Reading(x, y, run, group, fmt, samples_per_step, gpu_hours_per_step)
    read = verbs.read_inputs(inputs, reading)
    ranking = verbs.rank_inputs(read, opts, settings, to=to, jobs=store.cpu_count())
    if save_noise is not None:
        verbs.save_noise(ranking, save_noise, read)
    eff = None if figure_paths is None else figures.plot_rank(ranking, *figure_paths)
    elsewhere = verbs.decided_elsewhere(ranking, read)
    if output == "json":
        typer.echo(terminal.dump_json(ranking.to_json()))
        return
    if output == "md":
        typer.echo(rank_markdown(ranking, inputs, elsewhere, window=window, explain=explain))
        return
    console = terminal.console()
    print_rank(console, ranking, inputs, window=window, explain=explain, elsewhere=elsewhere)
    if figure_paths is not None:
        console.print(figures.figures_line(figure_paths[0], eff))


EXTRAPOLATE_INPUTS = typer.Argument(
    ...,
    help="A sweep directory (its rank winner), a run directory, a CSV/JSONL file, or a TensorBoard, W&B (offline "
    "runs or CSV export), TRL (trainer_state.json) or verl log.",
)


def extrapolate(
    inputs: list[Path] = EXTRAPOLATE_INPUTS,
    arm: str | None = typer.Option(None, "--arm", help="Arm (or run) to project instead of the rank winner."),
    x: str = X_OPT,
    y: str = Y_OPT,
    run: str = RUN_OPT,
    group: str | None = GROUP_OPT,
    fmt: str = FROM_OPT,
    samples_per_step: float | None = SAMPLES_PER_STEP_OPT,
    gpu_hours_per_step: float | None = GPU_HOURS_PER_STEP_OPT,
    fit_from: float | None = FIT_FROM_OPT,
    fit_until: float | None = FIT_UNTIL_OPT,
    r0: float | None = R0_OPT,
    to: float | None = TO_OPT,
    target_r: float | None = TARGET_R_OPT,
    n_boot: int = N_BOOT_OPT,
    ci: float = CI_OPT,
    window: bool = WINDOW_OPT,
    output: str | None = OUTPUT_FORMAT_OPT,
    as_json: bool = JSON_OPT,
    plot: Path | None = PLOT_OPT,
    seed: int = SEED_OPT,
) -> None:
    """Project a run (default: the winner of `rank`) to --to compute, with an interval and a held-out check.

    Without --to: the paper's 16000 where the data is in GPU-hours and ends below it (within 1000x), else twice the
    largest compute fitted (the header says which). A --to inside the fitted window is an interpolation, and is
    called one.
    The figure shows the observed points, the fit, the extrapolation band and the held-out points.
    Example: ablate extrapolate sweeps/loss --x samples --fit-until 128000 --to 512000 --target-r 0.7
    """
    from ablate.analysis import verbs
    from ablate.analysis.choices import given_to
    from ablate.render import figures, terminal
    from ablate.render.fit import print_extrapolation

    output, fmt = output_and_input(output, fmt, as_json, ("table", "json"))
    opts = verbs.fit_options(
        fit_from=fit_from,
        fit_until=fit_until,
        n_boot=n_boot,
        ci=ci,
        target=given_to(to),
        target_r=target_r,
        seed=seed,
        r0=r0,
    )
    plot = None if plot is None else figures.figure_path(plot)
    reading = verbs.Reading(x, y, run, group, fmt, samples_per_step, gpu_hours_per_step)
    read = verbs.read_inputs(inputs, reading)
    report = verbs.extrapolate_inputs(read, opts, arm=arm, to=to, window=window)
    if plot is not None:
        ex = report.projection
        figures.plot_fits(
            [ex.fit],
            plot,
            heldout_from=fit_until,
            xlabel=f"compute ({read.x})",
            title=f"{ex.subject}: fitted to {ex.fit.window[1]:g}, {ex.reach_word} to {ex.fit.target:g}",
        )
    if output == "json":
        typer.echo(terminal.dump_json(report.projection.to_json()))
        return
    print_extrapolation(terminal.console(), report, read, window=window, plot=plot)
