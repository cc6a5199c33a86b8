"""`ablate calibrate` and `plan`: how often the verdicts are right (by simulation), and how many seeds and how much
compute a question needs. The work: fit/calibrate.py, ablate.analysis.plan; the output: ablate.render
(docs/verdicts.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ablate.cli.commands import argument, option, shared, verb
from ablate.cli.errors import checked
from ablate.cli.options import (
    BOOT_WHY,
    MAX_CALIBRATE_CELLS,
    MAX_FUTURES,
    MAX_N_BOOT,
    MAX_TRIALS,
    OutputOptions,
    ReadingOptions,
    at_most,
    limited,
    output_and_input,
    writable,
)
from ablate.config.validation import closest
from ablate.errors import ErrorKind, UserError


def names_of(flag: str, valid: Callable[[], Any]) -> Any:
    """The callback of a comma-separated list of names, each one of `valid()` (imported when the option is read)."""

    def check(text: str) -> list[str]:
        got = [t.strip() for t in text.split(",") if t.strip()]
        known = valid()
        bad = [g for g in got if g not in known]
        if bad or not got:
            near = closest(bad[0], list(known)) if bad else ""
            raise UserError(
                f"{flag} {text!r}: unknown {bad[0] if bad else 'empty'}; valid: {', '.join(known)}{near}",
                kind=ErrorKind.SETTING,
            )
        return got

    return checked(check)


def numbers_of(flag: str, kind: type, lo: float, hi: float) -> Any:
    """The callback of a comma-separated list of numbers, each in [lo, hi]."""

    def check(text: str) -> list[Any]:
        try:
            got = [kind(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise UserError(
                f"{flag} {text!r}: give a comma-separated list of numbers", kind=ErrorKind.SETTING
            ) from None
        bad = [v for v in got if not lo <= v <= hi]
        if not got or bad:
            raise UserError(
                f"{flag} {text!r}: {bad[0] if bad else 'empty'} is out of range; each must be in [{lo}, {hi}]",
                kind=ErrorKind.SETTING,
            )
        return got

    return checked(check)


def calibration_grid(name: str) -> Callable[[], Any]:
    """The names fit/calibrate.py knows for one axis of the grid (SHAPES, NOISES or EFFECTS)."""

    def valid() -> Any:
        from ablate.fit import calibrate

        return getattr(calibrate, name)

    return valid


@dataclass(frozen=True, kw_only=True)
class CalibrateSettings:
    """`ablate calibrate`'s options."""

    shapes: str = option(
        "scalerl-8b,embedded",
        "--shapes",
        doc="Curve shapes: scalerl-8b, scalerl-scout, embedded.",
        callback=names_of("--shapes", calibration_grid("SHAPES")),
    )
    noises: str = option(
        "eval,ar0.5,ar0.9,jumps,seeds",
        "--noises",
        doc="Noise models: eval, ar0.5, ar0.9, jumps, seeds.",
        callback=names_of("--noises", calibration_grid("NOISES")),
    )
    seeds: str = option("1,2,3,5", "--seeds", doc="Seeds per arm.", callback=numbers_of("--seeds", int, 1, 20))
    fs: str = option(
        "0.5,0.8,0.95", "--f", doc="Gain fractions the windows reach.", callback=numbers_of("--f", float, 0.05, 0.99)
    )
    effects: str = option(
        "null,a+0.05,cmid/2",
        "--effects",
        doc="Effects: null, a+0.03, a+0.05, cmid/2, b*1.5; at the smallest effect that matters: a+0.02, a-0.02, "
        "cmid*1.15, a+0.02@end.",
        callback=names_of("--effects", calibration_grid("EFFECTS")),
    )
    trials: int = option(
        50,
        "--trials",
        doc="Simulated comparisons per cell (at most 1,000).",
        callback=limited("--trials", MAX_TRIALS, "each trial is a simulated comparison", least=1),
    )
    n_boot: int = option(
        300,
        "--n-boot",
        doc="Bootstrap resamples per fit (50 to 10,000).",
        callback=limited("--n-boot", MAX_N_BOOT, BOOT_WHY, least=50),
    )
    as_json: bool = shared(OutputOptions, "as_json")
    out: Path | None = option(None, "--out", doc="Also write the rows as JSON to this file.")
    seed: int = option(0, "--seed", doc="Bootstrap seed (>= 0).", callback=limited("--seed", least=0))


@verb(CalibrateSettings)
def calibrate(s: CalibrateSettings) -> None:
    """Measure, on simulated arms with known truth, how often intervals cover and verdicts are right.

    Each cell (shape x noise x seeds x window x effect) simulates a baseline arm and an effect arm through the
    exact code `ablate rank` runs, and reports interval coverage, the false-call rate on identical arms, the
    power to find a real change, how often identical arms are shown `equivalent`, and how often `equivalent` is
    claimed falsely (a+0.02, a-0.02, cmid*1.15, a+0.02@end: a true effect exactly at the smallest that matters,
    where at most 5% is the target). The full grid takes a while; --trials 20 gives a quick look.
    Example: ablate calibrate --shapes embedded --seeds 1,3 --f 0.8 --trials 20
    """
    from ablate.fit.calibrate import calibrate as run_calibration
    from ablate.render import terminal
    from ablate.render.fit import calibration_table
    from ablate.render.progress import counting_bar
    from ablate.storage import fs, store
    from ablate.storage.paths import check_writable_output

    grid: dict[str, Any] = dict(
        shapes=s.shapes, noises=s.noises, seeds=s.seeds, fs=s.fs, effects=s.effects
    )  # parsed lists
    cells = math.prod(len(v) for v in grid.values())
    if cells > MAX_CALIBRATE_CELLS:
        raise UserError(
            f"--shapes x --noises x --seeds x --f x --effects: {cells:,} cells, at most "
            f"{MAX_CALIBRATE_CELLS:,}; give fewer values (the default grid has 360)",
            kind=ErrorKind.SETTING,
        )
    if s.out is not None:
        check_writable_output(s.out, "--out")
    with counting_bar("calibrating", cells, disable=s.as_json) as progress:
        rows = run_calibration(
            **grid,
            trials=s.trials,
            seed=s.seed,
            n_boot=s.n_boot,
            jobs=fs.cpu_count(),
            progress=lambda i, n, row: progress(i),
        )
    result = {"grid": grid, "trials": s.trials, "rows": rows}
    if s.out is not None:
        store.write_json(s.out, result)
    if s.as_json:
        typer.echo(terminal.dump_json(result))
        return
    terminal.console().print(calibration_table(rows))


PLAN_RANGES = (
    "out of range (--delta-a in (0, 0.5), --ratio in (1, 10], --power in [0.5, 1), --trials >= 20, "
    "--futures >= 0, --to > 0)"
)


def in_range(flag: str, ok: Callable[[Any], bool], most: int | None = None, why: str = "") -> Any:
    """The callback of one of plan's numbers: refused, with every range named, when `ok(value)` is false, and past
    `most` (options.at_most: more work than any answer needs)."""

    def check(value: Any) -> Any:
        if not ok(value):
            raise UserError(f"{flag} {value}: {PLAN_RANGES}", kind=ErrorKind.SETTING)
        if most is not None:
            at_most(flag, value, most, why)
        return value

    return checked(check)


def questions(text: str) -> list[str]:
    """--question: ceiling, efficiency or both."""
    from ablate.fit.taskmodel import QUESTIONS

    qs = [q.strip() for q in text.split(",") if q.strip()]
    if qs == ["both"]:  # the word the help offers
        return list(QUESTIONS)
    if not qs or any(q not in QUESTIONS for q in qs):
        raise UserError(
            f"--question {text!r}: give ceiling, efficiency, or both (`both`, or `ceiling,efficiency`)",
            kind=ErrorKind.SETTING,
        )
    return qs


def check_saved_axis(x: str, save_calibration: Path | None) -> None:
    """--save-calibration writes a file that plans a sweep file (verbs.check_calibration_axis): refused, before any
    work, for an --x that is not a compute axis a sweep's runs log."""
    from ablate.analysis.choices import AUTO
    from ablate.storage.metricsfile import COMPUTE_AXES

    if save_calibration is not None and x not in (AUTO, *COMPUTE_AXES):
        raise UserError(
            f"--save-calibration: --x {x} is not a compute axis a sweep's runs log ({', '.join(COMPUTE_AXES)}), "
            "and a calibration plans a sweep file; choose one of them with --x, or drop --save-calibration",
            kind=ErrorKind.SETTING,
        )


@dataclass(frozen=True, kw_only=True)
class PlanSettings:
    """`ablate plan`'s options."""

    source: Path = argument(
        "A sweep directory (sweeps/NAME) or curves `rank` reads: plan from what they measured. Or a sweep file "
        "(recipes/NAME.yaml) with --calibration: plan before any run."
    )
    overrides: list[str] | None = argument(
        "With a sweep file: Hydra overrides, as `ablate sweep` takes them (e.g. train.max_steps=2000).", default=None
    )
    delta_a: float = option(
        0.02,
        "--delta-a",
        doc="Ceiling change to detect (the paper's ±0.02 on A).",
        callback=in_range("--delta-a", lambda v: 0 < v < 0.5),
    )
    ratio: float = option(
        1.25,
        "--ratio",
        doc="Efficiency change to detect: the arm needs 1/ratio of the compute.",
        callback=in_range("--ratio", lambda v: 1.0 < v <= 10.0),
    )
    power: float = option(
        0.8, "--power", doc="Power the plan must reach.", callback=in_range("--power", lambda v: 0.5 <= v < 1.0)
    )
    question: str = option(
        "ceiling,efficiency",
        "--question",
        doc="Which questions to plan: ceiling, efficiency or both.",
        callback=checked(questions),
    )
    x: str = shared(ReadingOptions, "x")
    y: str = shared(ReadingOptions, "y")
    run: str = shared(ReadingOptions, "run")
    group: str | None = shared(ReadingOptions, "group")
    fmt: str = shared(ReadingOptions, "fmt")
    baseline: str | None = option(
        None,
        "--baseline",
        doc="Arm the others are compared with, in a sweep directory or curves (default: the baseline its sweep file "
        "named); its key=value parts may come in another order, a value in another spelling (optim.lr=3e-4 for "
        "optim.lr=0.0003).",
    )
    to: float | None = option(
        None,
        "--to",
        doc="Compute the verdicts rank at (default: twice the budget), in the units of --x.",
        callback=in_range("--to", lambda v: v is None or (math.isfinite(v) and v > 0)),
    )
    noise: Path | None = option(
        None, "--noise", doc="A seed spread measured before (--save-noise of `ablate rank`), for sweeps without seeds."
    )
    calibration: Path | None = option(
        None, "--calibration", doc="A stored task model (--save-calibration) to plan a sweep file from, before any run."
    )
    save_calibration: Path | None = option(
        None,
        "--save-calibration",
        doc="Write the task model measured on SOURCE to this file (for --calibration).",
        callback=writable("--save-calibration"),
    )
    trials: int = option(
        100,
        "--trials",
        doc="Most simulated sweeps per design (with --exact a design stops early once its power is clearly above or "
        "below the goal; at most 1,000).",
        callback=in_range("--trials", lambda v: v >= 20, MAX_TRIALS, "each trial is a simulated sweep"),
    )
    futures: int = option(
        40,
        "--futures",
        doc="Simulated futures per running arm (0: skip the running arms; at most 1,000).",
        callback=in_range("--futures", lambda v: v >= 0, MAX_FUTURES, "each future is a simulated sweep"),
    )
    min_effect: float = option(
        0.02, "--min-effect", doc="The smallest change of A that matters, as `rank` reads it (the paper's ±0.02)."
    )
    min_effect_compute: float = option(
        1.15,
        "--min-effect-compute",
        doc="The smallest compute ratio that matters, either way, as `rank` reads it (the paper's ±15%: 1.15).",
    )
    exact: bool = option(
        False,
        "--exact",
        doc="Rank every simulated sweep with `ablate rank` itself (minutes; the reference the default fast engine is "
        "checked against).",
    )
    output: str | None = shared(OutputOptions, "output")
    as_json: bool = shared(OutputOptions, "as_json")
    seed: int = option(0, "--seed", doc="Bootstrap seed (>= 0).", callback=in_range("--seed", lambda v: v >= 0))


@verb(PlanSettings)
def plan(s: PlanSettings) -> None:
    """How many seeds and how much compute per arm a question needs, and where running arms can stop.

    Every answer is simulated: sweeps drawn from the measured curve and noise (evaluation noise, drift, seed
    spread) are given verdicts by `ablate rank`'s rules (batched fits, in seconds; --exact: by `ablate rank`
    itself, in minutes), and the power is the share that find the effect. The
    table gives, per compute per run, the fewest seeds per arm that reach --power at a 5% false-discovery rate and
    the GPU-hours; arms still running are continued in simulation to their max_steps to see whether their verdict
    could still change (settled: it can stop now).
    Examples: ablate plan sweeps/loss --x samples;  ablate plan recipes/loss.yaml --calibration cal.json
    """
    from ablate.analysis import verbs
    from ablate.fit.spread import MinEffect
    from ablate.render import terminal
    from ablate.render.plan import plan_notices, print_plan
    from ablate.storage import fs, store

    output, fmt = output_and_input(s.output, s.fmt, s.as_json, ("table", "json"))
    check_saved_axis(s.x, s.save_calibration)
    progress, axis_line = plan_notices(quiet=output == "json")
    common = dict(
        questions=s.question,
        delta_a=s.delta_a,
        ratio=s.ratio,
        goal=s.power,
        trials=s.trials,
        seed=s.seed,
        jobs=fs.cpu_count(),
        noise=s.noise,
        engine="exact" if s.exact else "fast",
        progress=progress,
        min_effect=MinEffect(a=s.min_effect, ratio=s.min_effect_compute),
    )
    result = verbs.plan_any(
        s.source,
        list(s.overrides or []),
        s.calibration,
        x=s.x,
        baseline=s.baseline,
        to=s.to,
        futures=s.futures,
        reading=dict(fmt=fmt, run=s.run, group=s.group, y=s.y),
        common=common,
        axis_line=axis_line,
    )
    if s.save_calibration is not None:
        store.write_json(s.save_calibration, result.model.to_json())
    if output == "json":
        typer.echo(terminal.dump_json(result.to_json()))
        return
    print_plan(result, terminal.console(), saved=s.save_calibration)
