"""`ablate calibrate` and `plan`: how often the verdicts are right (by simulation), and how many seeds and how much
compute a question needs. The work: fit/calibrate.py, ablate.analysis.plan; the output: ablate.render
(docs/verdicts.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ablate.cli.errors import checked
from ablate.cli.options import (
    BOOT_WHY,
    FROM_OPT,
    GROUP_OPT,
    JSON_OPT,
    MAX_CALIBRATE_CELLS,
    MAX_FUTURES,
    MAX_N_BOOT,
    MAX_TRIALS,
    OUTPUT_FORMAT_OPT,
    RUN_OPT,
    X_OPT,
    at_most,
    limited,
    output_and_input,
    writable,
)
from ablate.errors import UserError


def names_of(flag: str, valid: Callable[[], Any]) -> Any:
    """The callback of a comma-separated list of names, each one of `valid()` (imported when the option is read)."""

    def check(text: str) -> list[str]:
        got = [t.strip() for t in text.split(",") if t.strip()]
        known = valid()
        bad = [g for g in got if g not in known]
        if bad or not got:
            raise UserError(f"{flag} {text!r}: unknown {bad[0] if bad else 'empty'}; valid: {', '.join(known)}")
        return got

    return checked(check)


def numbers_of(flag: str, kind: type, lo: float, hi: float) -> Any:
    """The callback of a comma-separated list of numbers, each in [lo, hi]."""

    def check(text: str) -> list[Any]:
        try:
            got = [kind(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise UserError(f"{flag} {text!r}: give a comma-separated list of numbers") from None
        bad = [v for v in got if not lo <= v <= hi]
        if not got or bad:
            raise UserError(
                f"{flag} {text!r}: {bad[0] if bad else 'empty'} is out of range; each must be in [{lo}, {hi}]"
            )
        return got

    return checked(check)


def calibration_grid(name: str) -> Callable[[], Any]:
    """The names fit/calibrate.py knows for one axis of the grid (SHAPES, NOISES or EFFECTS)."""

    def valid() -> Any:
        from ablate.fit import calibrate

        return getattr(calibrate, name)

    return valid


CALIBRATE_SHAPES = typer.Option(
    "scalerl-8b,embedded",
    "--shapes",
    help="Curve shapes: scalerl-8b, scalerl-scout, embedded.",
    callback=names_of("--shapes", calibration_grid("SHAPES")),
)
CALIBRATE_NOISES = typer.Option(
    "eval,ar0.5,ar0.9,jumps,seeds",
    "--noises",
    help="Noise models: eval, ar0.5, ar0.9, jumps, seeds.",
    callback=names_of("--noises", calibration_grid("NOISES")),
)
CALIBRATE_FS = typer.Option(
    "0.5,0.8,0.95", "--f", help="Gain fractions the windows reach.", callback=numbers_of("--f", float, 0.05, 0.99)
)
CALIBRATE_EFFECTS = typer.Option(
    "null,a+0.05,cmid/2",
    "--effects",
    help="Effects: null, a+0.03, a+0.05, cmid/2, b*1.5; at the smallest effect that matters: a+0.02, a-0.02, "
    "cmid*1.15, a+0.02@end.",
    callback=names_of("--effects", calibration_grid("EFFECTS")),
)
CALIBRATE_TRIALS = typer.Option(
    50,
    "--trials",
    help="Simulated comparisons per cell (at most 1,000).",
    callback=limited("--trials", MAX_TRIALS, "each trial is a simulated comparison", least=1),
)
CALIBRATE_N_BOOT = typer.Option(
    300,
    "--n-boot",
    help="Bootstrap resamples per fit (50 to 10,000).",
    callback=limited("--n-boot", MAX_N_BOOT, BOOT_WHY, least=50),
)


def calibrate(
    shapes: str = CALIBRATE_SHAPES,
    noises: str = CALIBRATE_NOISES,
    seeds: str = typer.Option("1,2,3,5", "--seeds", help="Seeds per arm.", callback=numbers_of("--seeds", int, 1, 20)),
    fs: str = CALIBRATE_FS,
    effects: str = CALIBRATE_EFFECTS,
    trials: int = CALIBRATE_TRIALS,
    n_boot: int = CALIBRATE_N_BOOT,
    as_json: bool = JSON_OPT,
    out: Path | None = typer.Option(None, "--out", help="Also write the rows as JSON to this file."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed (>= 0).", callback=limited("--seed", least=0)),
) -> None:
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
    from ablate.storage import store
    from ablate.storage.paths import check_writable_output

    grid: dict[str, Any] = dict(shapes=shapes, noises=noises, seeds=seeds, fs=fs, effects=effects)  # parsed lists
    cells = math.prod(len(v) for v in grid.values())
    if cells > MAX_CALIBRATE_CELLS:
        raise UserError(
            f"--shapes x --noises x --seeds x --f x --effects: {cells:,} cells, at most "
            f"{MAX_CALIBRATE_CELLS:,}; give fewer values (the default grid has 360)"
        )
    if out is not None:
        check_writable_output(out, "--out")
    with counting_bar("calibrating", cells, disable=as_json) as progress:
        rows = run_calibration(
            **grid,
            trials=trials,
            seed=seed,
            n_boot=n_boot,
            jobs=store.cpu_count(),
            progress=lambda i, n, row: progress(i),
        )
    result = {"grid": grid, "trials": trials, "rows": rows}
    if out is not None:
        store.write_json(out, result)
    if as_json:
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
            raise UserError(f"{flag} {value}: {PLAN_RANGES}")
        if most is not None:
            at_most(flag, value, most, why)
        return value

    return checked(check)


def questions(text: str) -> list[str]:
    """--question: ceiling, efficiency or both."""
    from ablate.fit.taskmodel import QUESTIONS

    qs = [q.strip() for q in text.split(",") if q.strip()]
    if not qs or any(q not in QUESTIONS for q in qs):
        raise UserError(f"--question {text!r}: give ceiling, efficiency or both (comma-separated)")
    return qs


PLAN_SOURCE = typer.Argument(
    ...,
    help="A sweep directory (sweeps/NAME) or curves `rank` reads: plan from what they measured. Or a sweep file "
    "(recipes/NAME.yaml) with --calibration: plan before any run.",
)
PLAN_OVERRIDES = typer.Argument(
    None, help="With a sweep file: Hydra overrides, as `ablate sweep` takes them (e.g. train.max_steps=2000)."
)
PLAN_DELTA_A = typer.Option(
    0.02,
    "--delta-a",
    help="Ceiling change to detect (the paper's ±0.02 on A).",
    callback=in_range("--delta-a", lambda v: 0 < v < 0.5),
)
PLAN_RATIO = typer.Option(
    1.25,
    "--ratio",
    help="Efficiency change to detect: the arm needs 1/ratio of the compute.",
    callback=in_range("--ratio", lambda v: 1.0 < v <= 10.0),
)
PLAN_POWER = typer.Option(
    0.8, "--power", help="Power the plan must reach.", callback=in_range("--power", lambda v: 0.5 <= v < 1.0)
)
PLAN_QUESTION = typer.Option(
    "ceiling,efficiency",
    "--question",
    help="Which questions to plan: ceiling, efficiency or both.",
    callback=checked(questions),
)
PLAN_BASELINE = typer.Option(
    None, "--baseline", help="Arm the others are compared with (default: the sweep file's baseline)."
)
PLAN_TO = typer.Option(
    None,
    "--to",
    help="Compute the verdicts rank at (default: twice the budget), in the units of --x.",
    callback=in_range("--to", lambda v: v is None or (math.isfinite(v) and v > 0)),
)
PLAN_NOISE = typer.Option(
    None, "--noise", help="A seed spread measured before (--save-noise of `ablate rank`), for sweeps without seeds."
)
PLAN_CALIBRATION = typer.Option(
    None, "--calibration", help="A stored task model (--save-calibration) to plan a sweep file from, before any run."
)
PLAN_SAVE_CALIBRATION = typer.Option(
    None,
    "--save-calibration",
    help="Write the task model measured on SOURCE to this file (for --calibration).",
    callback=writable("--save-calibration"),
)
PLAN_TRIALS = typer.Option(
    100,
    "--trials",
    help="Most simulated sweeps per design (with --exact a design stops early once its power is clearly above or "
    "below the goal; at most 1,000).",
    callback=in_range("--trials", lambda v: v >= 20, MAX_TRIALS, "each trial is a simulated sweep"),
)
PLAN_FUTURES = typer.Option(
    40,
    "--futures",
    help="Simulated futures per running arm (0: skip the running arms; at most 1,000).",
    callback=in_range("--futures", lambda v: v >= 0, MAX_FUTURES, "each future is a simulated sweep"),
)
PLAN_MIN_EFFECT = typer.Option(
    0.02, "--min-effect", help="The smallest change of A that matters, as `rank` reads it (the paper's ±0.02)."
)
PLAN_MIN_EFFECT_COMPUTE = typer.Option(
    1.15,
    "--min-effect-compute",
    help="The smallest compute ratio that matters, either way, as `rank` reads it (the paper's ±15%: 1.15).",
)
PLAN_EXACT = typer.Option(
    False,
    "--exact",
    help="Rank every simulated sweep with `ablate rank` itself (minutes; the reference the default fast engine is "
    "checked against).",
)


def check_saved_axis(x: str, save_calibration: Path | None) -> None:
    """--save-calibration writes a file that plans a sweep file (verbs.check_calibration_axis): refused, before any
    work, for an --x that is not a compute axis a sweep's runs log."""
    from ablate.analysis.choices import AUTO
    from ablate.storage.metricsfile import COMPUTE_AXES

    if save_calibration is not None and x not in (AUTO, *COMPUTE_AXES):
        raise UserError(
            f"--save-calibration: --x {x} is not a compute axis a sweep's runs log ({', '.join(COMPUTE_AXES)}), "
            "and a calibration plans a sweep file; choose one of them with --x, or drop --save-calibration"
        )


def plan(
    source: Path = PLAN_SOURCE,
    overrides: list[str] | None = PLAN_OVERRIDES,
    delta_a: float = PLAN_DELTA_A,
    ratio: float = PLAN_RATIO,
    power: float = PLAN_POWER,
    question: str = PLAN_QUESTION,
    x: str = X_OPT,
    run: str = RUN_OPT,
    group: str | None = GROUP_OPT,
    fmt: str = FROM_OPT,
    baseline: str | None = PLAN_BASELINE,
    to: float | None = PLAN_TO,
    noise: Path | None = PLAN_NOISE,
    calibration: Path | None = PLAN_CALIBRATION,
    save_calibration: Path | None = PLAN_SAVE_CALIBRATION,
    trials: int = PLAN_TRIALS,
    futures: int = PLAN_FUTURES,
    min_effect: float = PLAN_MIN_EFFECT,
    min_effect_compute: float = PLAN_MIN_EFFECT_COMPUTE,
    exact: bool = PLAN_EXACT,
    output: str | None = OUTPUT_FORMAT_OPT,
    as_json: bool = JSON_OPT,
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed (>= 0).", callback=in_range("--seed", lambda v: v >= 0)),
) -> None:
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
    from ablate.storage import store

    output, fmt = output_and_input(output, fmt, as_json, ("table", "json"))
    check_saved_axis(x, save_calibration)
    progress, axis_line = plan_notices(quiet=output == "json")
    common = dict(
        questions=question,
        delta_a=delta_a,
        ratio=ratio,
        goal=power,
        trials=trials,
        seed=seed,
        jobs=store.cpu_count(),
        noise=noise,
        engine="exact" if exact else "fast",
        progress=progress,
        min_effect=MinEffect(a=min_effect, ratio=min_effect_compute),
    )
    result = verbs.plan_any(
        source,
        list(overrides or []),
        calibration,
        x=x,
        baseline=baseline,
        to=to,
        futures=futures,
        fmt=fmt,
        run=run,
        group=group,
        common=common,
        axis_line=axis_line,
    )
    if save_calibration is not None:
        store.write_json(save_calibration, result.model.to_json())
    if output == "json":
        typer.echo(terminal.dump_json(result.to_json()))
        return
    print_plan(result, terminal.console(), saved=save_calibration)
