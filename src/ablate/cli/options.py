"""The options several verbs share, each declared once so that its flag, default and help agree everywhere, and the
checks of single options, run as each option is read (errors.checked): a bad value is one `error[KIND]:` line."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ablate.cli.commands import option
from ablate.cli.errors import checked
from ablate.errors import ErrorKind, UserError

if TYPE_CHECKING:
    from ablate.analysis.verbs import Reading
    from ablate.fit.result import FitOptions

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
BOOT_WHY = "more resamples do not sharpen an interval, and need memory"


def at_most(flag: str, value: int, limit: int, why: str) -> None:
    """Refuse a request for more work than any answer needs (the MAX_ limits above)."""
    if value > limit:
        raise UserError(f"{flag} {value}: at most {limit:,} ({why}); give a smaller number", kind=ErrorKind.SETTING)


def limited(flag: str, limit: int | None = None, why: str = "", least: int | None = None) -> Callable[[Any], Any]:
    """The callback of an integer option with a lower limit (`least`) and an upper one (`limit`, see `at_most`)."""

    def check(value: int) -> int:
        if least is not None and value < least:
            raise UserError(f"{flag} {value}: must be >= {least}", kind=ErrorKind.SETTING)
        if limit is not None:
            at_most(flag, value, limit, why)
        return value

    return checked(check)


def writable(flag: str) -> Callable[[Any], Any]:
    """The callback of an output file option: refused as it is read, before any work, where nothing can be written
    (paths.check_writable_output)."""

    def check(value: Path | None) -> Path | None:
        from ablate.storage.paths import check_writable_output

        if value is not None:
            check_writable_output(value, flag)
        return value

    return checked(check)


def positive_seconds(value: float) -> float:
    """--interval: seconds between refreshes."""
    if not (math.isfinite(value) and value > 0):
        raise UserError(
            f"--interval {value:g}: seconds between refreshes, a number > 0 (e.g. 5)", kind=ErrorKind.SETTING
        )
    return value


def torch_threads(value: int) -> int:
    """--threads: torch threads for one run."""
    if not 1 <= value <= 1024:
        raise UserError(f"--threads {value}: give a number of torch threads from 1 to 1024", kind=ErrorKind.SETTING)
    return value


def executor_name(value: str | None) -> str | None:
    """--executor: one ablate knows (checked before the sweep is expanded, so --dry-run says so too)."""
    from ablate.launch.executors import EXECUTORS

    if value is not None and value not in EXECUTORS:
        raise UserError(f"--executor {value}: unknown; choose one of {', '.join(EXECUTORS)}", kind=ErrorKind.SETTING)
    return value


# The settings fit, rank and extrapolate share (plan, calibrate and report take some of them), one base class per
# concern: a verb's settings class inherits them (ablate.cli.commands).


@dataclass(frozen=True, kw_only=True)
class ReadingOptions:
    """How the inputs are read: the compute axis, the pass-rate column, the runs and arms, the input format."""

    x: str = option(
        "auto",
        "--x",
        doc="Compute: a column of curve files; for sweep and run directories gpu_hours, flops, samples or step; for "
        "other tools' logs a logged metric, or step (made into compute by --samples-per-step / "
        "--gpu-hours-per-step). auto: samples for runs that ran on CPU (where gpu_hours is wall-clock: the machine's "
        "load), else gpu_hours.",
    )
    y: str = option("val_pass_rate", "--y", doc="Pass-rate column or metric (values in [0, 1]).")
    run: str = option(
        "run", "--run", doc="Column of curve files naming the run (optional: without it a file is one run)."
    )
    group: str | None = option(
        None,
        "--group",
        doc="Column of curve files naming the arm; its runs (seeds) are fitted together and resampled for the "
        "interval.",
    )
    fmt: str = option(
        "auto",
        "--from",
        doc="Input format: auto (told by content), table (CSV/JSONL; csv and jsonl say the same), tensorboard, wandb "
        "(offline run folder), wandb-csv (W&B CSV export), trl (trainer_state.json), verl (JSONL or console log) or "
        "mlflow (mlflow:EXPERIMENT, or an mlflow.db file); sweep and run directories are read as such.",
    )
    samples_per_step: float | None = option(
        None,
        "--samples-per-step",
        doc="Other tools' logs only: add the column samples = step x this (then --x samples).",
    )
    gpu_hours_per_step: float | None = option(
        None,
        "--gpu-hours-per-step",
        doc="Other tools' logs only: add the column gpu_hours = step x this (the default --x).",
    )

    def reading(self, fmt: str) -> Reading:
        """How the library reads the inputs, in the input format `fmt` (--from, or --format's old meaning)."""
        from ablate.analysis.verbs import Reading

        return Reading(self.x, self.y, self.run, self.group, fmt, self.samples_per_step, self.gpu_hours_per_step)


@dataclass(frozen=True, kw_only=True)
class WindowOptions:
    """The fit: its window, R0, the compute it predicts at, its resamples, interval level and seed."""

    fit_from: float | None = option(
        None, "--fit-from", doc="Drop points below this compute (ScaleRL drops ~1.5k of 16k GPU-hours)."
    )
    fit_until: float | None = option(
        None, "--fit-until", doc="Fit only points up to this compute; later points check the extrapolation."
    )
    r0: float | None = option(
        None, "--r0", doc="R0 to hold fixed when the data has no point at compute 0 (else R0 is fitted)."
    )
    to: float | None = option(
        None,
        "--to",
        doc="Compute at which to predict the pass rate, in the units of --x (rank orders arms by it; rank and "
        "extrapolate refuse more than 1000x the data). Default: the paper's 16000 when --x is gpu_hours and the data "
        "ends below it (within 1000x), else twice the largest compute fitted.",
        show_default=False,
    )
    n_boot: int = option(
        1000,
        "--n-boot",
        doc="Bootstrap resamples for the fits' intervals (at most 10,000; 0: none, which rank and report refuse, "
        "their verdicts resting on intervals).",
        callback=limited("--n-boot", MAX_N_BOOT, BOOT_WHY),
    )
    ci: float = option(0.95, "--ci", doc="Interval level.")
    window: bool = option(
        False,
        "--window-sensitivity",
        doc="Also refit with the window cut at 50% and 75% of its compute; a fit is marked unstable when an earlier "
        "cutoff's A interval does not overlap the full fit's.",
    )
    seed: int = option(0, "--seed", doc="Bootstrap seed (>= 0).")

    def fit_options(self, **extra: Any) -> FitOptions:
        """The fit's options from these settings (and the verb's own, `extra`), checked before any data is read."""
        from ablate.analysis import verbs
        from ablate.analysis.choices import given_to

        window = {"fit_from": self.fit_from, "fit_until": self.fit_until, "r0": self.r0, "n_boot": self.n_boot}
        return verbs.fit_options(**window, ci=self.ci, target=given_to(self.to), seed=self.seed, **extra)


@dataclass(frozen=True, kw_only=True)
class OutputOptions:
    """What the verb prints or writes: a table or JSON, and a figure."""

    output: str | None = option(
        None,
        "--format",
        doc="Output: table (the default) or json (= --json). The input format is --from.",
        show_default=False,
    )
    as_json: bool = option(False, "--json", doc="Print JSON instead of the table (keys: docs/json.md).")
    plot: Path | None = option(None, "--plot", doc="Write a figure to this file (.png, .pdf, .svg, ...).")


def output_and_input(output: str | None, source: str, as_json: bool, outputs: tuple[str, ...]) -> tuple[str, str]:
    """(output format, input format) from --format, --from and --json. --format named the input format before it
    named the output: an input format's name there (other than `table`, now the output) is still read as --from,
    with a note on stderr."""
    from ablate.curves.logs import FORMATS

    choices = ", ".join(outputs)
    if output is not None and output not in outputs:
        if output not in ("auto", *FORMATS):
            raise UserError(
                f"--format {output}: unknown; choose {choices} (the input format is --from)", kind=ErrorKind.SETTING
            )
        if source != "auto" and source != output:
            raise UserError(
                f"--format {output} and --from {source}: give the input format once, with --from",
                kind=ErrorKind.SETTING,
            )
        typer.echo(
            f"note: --format {output} names the input format, now --from {output} (--format: {choices})", err=True
        )
        source = output
        output = None
    if as_json and output not in (None, "json"):
        raise UserError(f"--json and --format {output}: give one output format", kind=ErrorKind.SETTING)
    return ("json" if as_json else output or "table"), source


def plain_placeholders(verb: Any) -> None:
    """Help that reads as a command line: a flag shows no value placeholder (Typer prints `<bool>`, as if it took
    one), and an argument is named in capitals (RECIPE, not `{recipe}`). Set on the verb's own option objects."""
    import inspect

    from typer.models import ArgumentInfo, OptionInfo

    for name, p in inspect.signature(verb).parameters.items():
        info = p.default
        if isinstance(info, OptionInfo) and info.metavar is None and p.annotation in (bool, "bool"):
            info.metavar = " "
        elif isinstance(info, ArgumentInfo) and info.metavar is None:
            info.metavar = name.upper()
