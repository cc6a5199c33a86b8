"""`ablate fit`, `rank` and `extrapolate`: read curves, fit the ScaleRL sigmoid, rank the arms, project one. The
work: ablate.analysis.verbs; the output: ablate.render (the table's columns and the JSON keys: docs/json.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from ablate.cli.commands import argument, option, verb
from ablate.cli.options import OutputOptions, ReadingOptions, WindowOptions, output_and_input

TARGET_R = "Also report the compute needed to reach this pass rate."


@dataclass(frozen=True, kw_only=True)
class FitSettings(OutputOptions, WindowOptions, ReadingOptions):
    """`ablate fit`'s options."""

    file: Path = argument(
        "CSV or JSONL with one row per (run, evaluation), a run directory, a sweep directory (each run fitted), "
        "or a TensorBoard, W&B (offline run or CSV export), TRL (trainer_state.json) or verl log (each of its "
        "runs fitted)."
    )
    method: str = option(
        "default", "--method", doc="default (grid + least_squares + bootstrap) or paper (ScaleRL's grid + curve_fit)."
    )
    fit_r0: bool = option(False, "--fit-r0", doc="Free R0 instead of fixing it at the pass rate measured at compute 0.")
    loss: str = option("linear", "--loss", doc="linear or huber (robust to outlying evaluations).")
    target_r: float | None = option(None, "--target-r", doc=TARGET_R)
    compare: bool = option(
        False, "--compare-forms", doc="Also fit a power law and an exponential and backtest which extrapolates best."
    )


@verb(FitSettings)
def fit(s: FitSettings) -> None:
    """Fit the ScaleRL sigmoid R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) to training curves.

    The figure shows the points, the fits, the window and the extrapolation band.
    Example: ablate fit curves.csv --fit-until 8000 --to 16000 --plot fit.png
    """
    from ablate.analysis import verbs
    from ablate.render import figures, terminal
    from ablate.render.fit import print_fit

    output, fmt = output_and_input(s.output, s.fmt, s.as_json, ("table", "json"))
    opts = s.fit_options(method=s.method, fit_r0=s.fit_r0, loss=s.loss, target_r=s.target_r)
    plot = None if s.plot is None else figures.figure_path(s.plot)
    inputs = verbs.read_inputs([s.file], s.reading(fmt))
    report = verbs.fit_inputs(inputs, opts, to=s.to, by_group=s.group is not None, window=s.window, compare=s.compare)
    if plot is not None:
        figures.plot_fits(report.results, plot, xlabel=f"compute ({inputs.x})")
    if output == "json":
        typer.echo(terminal.dump_json(report.to_json()))
        return
    print_fit(terminal.console(), report, inputs, window=s.window, plot=plot)


@dataclass(frozen=True, kw_only=True)
class RankSettings(OutputOptions, WindowOptions, ReadingOptions):
    """`ablate rank`'s options."""

    inputs: list[Path] = argument(
        "Sweep directories (sweeps/NAME), CSV/JSONL curve files and/or TensorBoard, W&B (offline runs or CSV "
        "exports), TRL (trainer_state.json) or verl logs (each of their runs an arm)."
    )
    output: str | None = option(
        None,
        "--format",
        doc="Output: table (the default), json (= --json) or md (the table as Markdown, for a pull request). The "
        "input format is --from.",
        show_default=False,
    )
    plot: Path | None = option(
        None,
        "--plot",
        doc="Write the fits' figure to this file (.png, .pdf, .svg, ...) and the efficiency figure to "
        "NAME-efficiency.EXT beside it.",
    )
    baseline: str | None = option(
        None,
        "--baseline",
        doc="Arm to compare against (default: the sweep file's baseline); its key=value parts may come in "
        "another order, a value in another spelling (optim.lr=3e-4 for optim.lr=0.0003).",
    )
    margin: str | None = option(
        None,
        "--margin",
        doc="Use the paper's threshold rule instead of the calibrated tests: `paper` (±0.02 on A, ±15% compute) or a "
        "margin on A.",
    )
    noise: Path | None = option(
        None,
        "--noise",
        doc="Seed spread measured before (a file --save-noise wrote) for arms without seeds of their own.",
    )
    save_noise: Path | None = option(
        None,
        "--save-noise",
        doc="Write the seed spread measured on this ranking's seeded arms to this file (for --noise).",
    )
    shared_a: str = option(
        "pair",
        "--shared-a",
        doc="The A the efficiency comparison refits at: pair (each arm with the baseline, their own shared A), all "
        "(one A for every arm: the mean of the identified arms' A, as the paper compares), or a value.",
    )
    min_effect: float = option(
        0.02,
        "--min-effect",
        doc="The smallest change of A that matters (the paper's ±0.02): a change inside it is negligible, and arms "
        "within it (and within --min-effect-compute) can be shown equivalent.",
    )
    min_effect_compute: float = option(
        1.15,
        "--min-effect-compute",
        doc="The smallest compute ratio that matters, either way (the paper's ±15%: 1.15).",
    )
    explain: bool = option(
        False,
        "--explain",
        doc="After the table, each arm's full reasoning: every test with its p-value and interval, and what would "
        "decide an inconclusive arm.",
    )


@verb(RankSettings)
def rank(s: RankSettings) -> None:
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
    from ablate.render import figures, terminal
    from ablate.render.markdown import rank_markdown
    from ablate.render.rank import print_rank
    from ablate.storage import fs

    output, fmt = output_and_input(s.output, s.fmt, s.as_json, ("table", "json", "md"))
    opts = s.fit_options()
    settings = verbs.check_rank_settings(
        baseline=s.baseline,
        margin=s.margin,
        shared_a=s.shared_a,
        noise=s.noise,
        save_noise=s.save_noise,
        min_effect=s.min_effect,
        min_effect_compute=s.min_effect_compute,
        n_boot=s.n_boot,
        window=s.window,
    )
    figure_paths = figures.rank_figure_paths(s.plot)
    read = verbs.read_inputs(s.inputs, s.reading(fmt))
    ranking = verbs.rank_inputs(read, opts, settings, to=s.to, jobs=fs.cpu_count())
    if s.save_noise is not None:
        verbs.save_noise(ranking, s.save_noise, read)
    eff = None if figure_paths is None else figures.plot_rank(ranking, *figure_paths)
    elsewhere = verbs.decided_elsewhere(ranking, read)
    if output == "json":
        typer.echo(terminal.dump_json(ranking.to_json()))
        return
    if output == "md":
        typer.echo(rank_markdown(ranking, s.inputs, elsewhere, window=s.window, explain=s.explain))
        return
    console = terminal.console()
    print_rank(console, ranking, s.inputs, window=s.window, explain=s.explain, elsewhere=elsewhere)
    if figure_paths is not None:
        console.print(figures.figures_line(figure_paths[0], eff))


@dataclass(frozen=True, kw_only=True)
class ExtrapolateSettings(OutputOptions, WindowOptions, ReadingOptions):
    """`ablate extrapolate`'s options."""

    inputs: list[Path] = argument(
        "A sweep directory (its rank winner), a run directory, a CSV/JSONL file, or a TensorBoard, W&B (offline "
        "runs or CSV export), TRL (trainer_state.json) or verl log."
    )
    arm: str | None = option(
        None,
        "--arm",
        doc="Arm (or run) to project instead of the rank winner; its key=value parts may come in another order, a "
        "value in another spelling (optim.lr=3e-4 for optim.lr=0.0003).",
    )
    target_r: float | None = option(None, "--target-r", doc=TARGET_R)


@verb(ExtrapolateSettings)
def extrapolate(s: ExtrapolateSettings) -> None:
    """Project a run (default: the winner of `rank`) to --to compute, with an interval and a held-out check.

    Without --to: the paper's 16000 where the data is in GPU-hours and ends below it (within 1000x), else twice the
    largest compute fitted (the header says which). A --to inside the fitted window is an interpolation, and is
    called one.
    The figure shows the observed points, the fit, the extrapolation band and the held-out points.
    Example: ablate extrapolate sweeps/loss --x samples --fit-until 128000 --to 512000 --target-r 0.7
    """
    from ablate.analysis import verbs
    from ablate.render import figures, terminal
    from ablate.render.fit import print_extrapolation

    output, fmt = output_and_input(s.output, s.fmt, s.as_json, ("table", "json"))
    opts = s.fit_options(target_r=s.target_r)
    plot = None if s.plot is None else figures.figure_path(s.plot)
    read = verbs.read_inputs(s.inputs, s.reading(fmt))
    report = verbs.extrapolate_inputs(read, opts, arm=s.arm, to=s.to, window=s.window)
    if plot is not None:
        ex = report.projection
        figures.plot_fits(
            [ex.fit],
            plot,
            heldout_from=s.fit_until,
            xlabel=f"compute ({read.x})",
            title=f"{ex.subject}: fitted to {ex.fit.window[1]:g}, {ex.reach_word} to {ex.fit.target:g}",
        )
    if output == "json":
        typer.echo(terminal.dump_json(report.projection.to_json()))
        return
    print_extrapolation(terminal.console(), report, read, window=s.window, plot=plot)
