"""The work behind `ablate fit`, `rank`, `extrapolate` and `plan`: read the inputs on the compute axis chosen,
choose the target, then fit, rank, project or plan. The commands print what these return (ablate.render). The
defaults they name: ablate.analysis.choices; the verdicts: docs/verdicts.md; the JSON: docs/json.md."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.analysis.choices import (
    check_reach,
    choose_axis,
    choose_target,
    named_arm_label,
    wall_clock_note,
    with_target,
)
from ablate.errors import ErrorKind, SettingError, UserError

if TYPE_CHECKING:  # the fit stack imports scipy: imported when a command needs it
    from ablate.analysis.plan import PlanResult
    from ablate.fit.arms import Ranking
    from ablate.fit.curve import Curve, NotFitted
    from ablate.fit.extrapolate import Extrapolation
    from ablate.fit.result import FitOptions, FitResult
    from ablate.fit.settings import Analysis, Elsewhere
    from ablate.fit.spread import MinEffect, NoiseFloor


@dataclass
class Inputs:
    """The curves a command read, on the compute axis it chose (`axis_text`: why, when not the paper's)."""

    paths: list[Path]
    curves: list[Curve]
    skipped: list[NotFitted]
    x: str
    axis_text: str | None

    @property
    def axis_note(self) -> str | None:
        """A warning when the axis is wall-clock that varies between seeds (choices.wall_clock_note)."""
        return wall_clock_note(self.curves, self.x)


@dataclass(frozen=True)
class Reading:
    """How a command reads its inputs: the flags --x, --y, --run, --group, --from, --samples-per-step and
    --gpu-hours-per-step (ablate.cli.options; what each means: ablate.curves.inputs)."""

    x: str
    y: str
    run: str
    group: str | None
    fmt: str
    samples_per_step: float | None
    gpu_hours_per_step: float | None


def read_inputs(paths: list[Path], how: Reading) -> Inputs:
    """The curves of `paths` (ablate.curves.inputs.load_inputs) on `how.x`, or on the axis `--x auto` picks for them."""
    from ablate.curves.inputs import load_inputs
    from ablate.curves.tracked import read_once

    per_step: dict[str, Any] = {"samples": how.samples_per_step, "gpu_hours": how.gpu_hours_per_step}
    with read_once():  # a tracker copy is read for its devices, then its curves: one read
        x, axis_text = choose_axis(paths, how.x, per_step)
        curves, skipped = load_inputs(paths, x=x, y=how.y, run=how.run, group=how.group, fmt=how.fmt, per_step=per_step)
    return Inputs(list(paths), curves, skipped, x, axis_text)


def fit_options(**kw: Any) -> FitOptions:
    """FitOptions from the command's flags, checked (a bad flag is one UserError line before any data is read)."""
    from ablate.fit.result import FitOptions

    opts = FitOptions(**kw)
    opts.validate()
    return opts


@dataclass
class FitReport:
    """`ablate fit`: a fit per run (or arm), the options they used, and how the target was chosen."""

    results: list[FitResult]
    opts: FitOptions
    target_text: str
    forms: dict[str, dict[str, float]] | None = None
    """--compare-forms: each form's backtest error per run."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"fits": [r.to_json() for r in self.results]}
        if self.forms is not None:
            out["forms"] = self.forms
        return out


def fit_inputs(
    inputs: Inputs, opts: FitOptions, *, to: float | None, by_group: bool, window: bool, compare: bool
) -> FitReport:
    """Fit every run of `inputs` (each arm when `by_group`), with the window-sensitivity refits and the forms'
    backtest when asked."""
    from ablate.fit.analysis import compare_forms, fit_table
    from ablate.fit.sensitivity import window_sensitivity

    opts, target_text = with_target(opts, inputs.curves, inputs.x, to, opts.fit_until, reach=False)
    results = fit_table(inputs.curves, opts, by_group=by_group)
    if window:
        results = [window_sensitivity(r, opts) for r in results]
    forms = {r.run: compare_forms(r, opts) for r in results} if compare else None
    return FitReport(results, opts, target_text, forms)


@dataclass
class RankSettings:
    """rank's options beyond the fit's, parsed and checked before any data is read (check_rank_settings)."""

    baseline: str | None
    margin: str | None
    shared_a: Any
    noise: NoiseFloor | None
    min_effect: MinEffect
    window: bool = False


def check_rank_settings(
    *,
    baseline: str | None,
    margin: str | None,
    shared_a: str,
    noise: Path | None,
    save_noise: Path | None,
    min_effect: float,
    min_effect_compute: float,
    n_boot: int,
    window: bool,
) -> RankSettings:
    """Parse rank's --margin, --shared-a and --noise, check that --save-noise can be written, and refuse --n-boot 0
    (rank's verdicts rest on intervals)."""
    from ablate.fit.compare import parse_shared_a
    from ablate.fit.spread import MinEffect
    from ablate.fit.verdicts import parse_margin
    from ablate.storage.measurements import load_noise
    from ablate.storage.paths import check_writable_output

    smallest = MinEffect(a=min_effect, ratio=min_effect_compute)
    parse_margin(margin)
    mode = parse_shared_a(shared_a)
    floor = None if noise is None else load_noise(noise)
    if save_noise is not None:
        check_writable_output(save_noise, "--save-noise")
    if n_boot == 0:
        raise SettingError(
            "{n_boot} 0: rank needs intervals (each arm's identifiability rests on them); give {n_boot} of 200 or more",
            "n_boot",
        )
    return RankSettings(baseline, margin, mode, floor, smallest, window)


def rank_inputs(inputs: Inputs, opts: FitOptions, settings: RankSettings, *, to: float | None, jobs: int) -> Ranking:
    """Rank the arms of `inputs` at the target (--to, or the default), with the lines that say how the target and
    the axis were chosen, and the window-sensitivity refits when asked."""
    from ablate.fit.compare import rank
    from ablate.fit.sensitivity import window_sensitivity

    opts, target_source = with_target(opts, inputs.curves, inputs.x, to, opts.fit_until)
    ranking = rank(
        inputs.curves,
        opts,
        baseline=named_arm_label(settings.baseline, inputs.curves),
        margin=settings.margin,
        noise=settings.noise,
        x=inputs.x,
        not_fitted=inputs.skipped,
        jobs=jobs,
        shared_a=settings.shared_a,
        min_effect=settings.min_effect,
    )
    waves = grown_in_waves(inputs)
    if waves > 1:
        from ablate.curves.inputs import bare_sweep
        from ablate.fit.notes import Note
        from ablate.prune.waves import record_path

        decided = any(record_path(bare_sweep(p)).is_file() for p in inputs.paths)
        notes = [*ranking.notes, Note("decided", DECIDED_TEXT) if decided else Note("other", waves_text(waves))]
        ranking = replace(ranking, notes=notes)
    ranking = replace(
        ranking,
        target_source=target_source,  # how --to was chosen, and why x is what it is (choices.py)
        axis_note="; ".join(n for n in (inputs.axis_text, inputs.axis_note) if n) or None,
    )
    if settings.window:
        ranking = replace(ranking, arms=[a.refitted(window_sensitivity(a.fit, opts)) for a in ranking.arms])
    return ranking


def grown_in_waves(inputs: Inputs) -> int:
    """The most launches (`ablate sweep` batches) that added runs to one arm, over the sweeps among the inputs, from
    their ledgers (1 for a sweep launched at once, or for inputs that are not sweeps)."""
    from ablate.curves.inputs import bare_sweep
    from ablate.storage.ledger import Ledger

    arm_of = {c.run_id: c.group for c in inputs.curves if isinstance(c.run_id, str)}
    waves = 1
    for path in map(bare_sweep, inputs.paths):  # `ablate rank loss` reads sweeps/loss
        if not (path / "ledger.jsonl").is_file():
            continue
        try:
            first = Ledger(path).first_batches()
        except OSError:  # a linked or unreadable ledger: the runs were ranked; only this note is given up
            continue
        batches: dict[str | None, set[str]] = {}
        for rid, batch in first.items():
            if rid in arm_of:
                batches.setdefault(arm_of[rid], set()).add(batch)
        waves = max([waves, *(len(b) for b in batches.values())])
    return waves


DECIDED_TEXT = (
    "this sweep was grown by `ablate sweep --decide`: its decisions are the looks in decide/looks.jsonl, each held to "
    "5% / looks so that the whole procedure errs at most 5%; this ranking, at 5% on every seed run, is one more look "
    "outside that guarantee (docs/verdicts.md, Deciding by waves)"
)


def waves_text(waves: int) -> str:
    """What ranking after each wave does to the 5% one ranking controls (measured by bench/looks.py)."""
    return (
        f"this sweep's arms grew in {waves} launches: the 5% false-discovery rate holds for this ranking, not for "
        "ranking after each launch and adding seeds until something is called (on identical arms, waves of 3 seeds "
        "ranked after each call a change in 12-16% of sweeps by 12 seeds and 19-22% by 30); fix the seeds before "
        "looking (`ablate plan`), or read a verdict reached this way as a lead to confirm on fresh seeds"
    )


def save_noise(ranking: Ranking, path: Path, inputs: Inputs) -> None:
    """`rank --save-noise`: write the seed spread measured on the ranking's seeded arms, for a later --noise."""
    from ablate.fit.verdicts import measured_floor
    from ablate.storage import store

    measured = measured_floor(ranking.arms)
    if measured is None:
        fix = "run the sweep with seeds (seed=0,1,2)"
        if any(a.seeds >= 2 for a in ranking.arms):  # seeds there are: what they lack is a measured A
            fix = "run longer (a new sweep with a larger train.max_steps, under another --root)"
        what = f"--save-noise {path}: no arm has 2 seeds whose A is identified alone, so there is no seed spread"
        raise UserError(f"{what} to save; {fix}", kind=ErrorKind.DATA)
    measured.source = f"{measured.source}, on '{inputs.x}': " + ", ".join(str(p) for p in inputs.paths)
    store.write_json(path, measured.to_json())


def recorded_analysis(inputs: Inputs) -> tuple[Path, str, Analysis] | None:
    """The analysis a sweep among the inputs recorded for its decisions on this axis: its prune monitor's (the
    last it recorded); None for inputs that are not such sweeps. A `--decide` sweep's looks are not one ranking
    (each at its own level, on its own seeds): rank says so with a note of its own (DECIDED_TEXT)."""
    from ablate.curves.inputs import bare_sweep
    from ablate.prune.rules import recorded_analysis as monitor_analysis

    for p in inputs.paths:
        sweep = bare_sweep(p)
        got = monitor_analysis(sweep, inputs.x) if sweep.is_dir() else None
        if got is not None:
            return sweep, "--prune monitor", got
    return None


def decided_elsewhere(ranking: Ranking, inputs: Inputs) -> Elsewhere | None:
    """The sweep whose recorded decisions (ablate.fit.settings) used another analysis than this ranking, with what
    differs; None when none did, or when the monitor's differ but it stopped no arm (it decided nothing)."""
    from ablate.fit.settings import Analysis, Elsewhere

    found = recorded_analysis(inputs)
    if found is None:
        return None
    sweep, by, recorded = found
    if not any(a.stopped for a in ranking.arms):
        return None
    mine = Analysis.of(ranking.x, ranking.opts, ranking.min_effect, to=ranking.target)
    diff = mine.differences(recorded)
    return Elsewhere(sweep, by, recorded, diff) if diff else None


@dataclass
class ExtrapolationReport:
    """`ablate extrapolate`: the projection, and how its subject and target were chosen."""

    projection: Extrapolation
    opts: FitOptions
    target_text: str
    by_rank: bool
    """True when the subject is the rank winner (no --arm, several arms)."""


def extrapolate_inputs(
    inputs: Inputs, opts: FitOptions, *, arm: str | None, to: float | None, window: bool
) -> ExtrapolationReport:
    """Project one arm (--arm, the only one, or the rank winner) to the target, checked on held-out points. The
    winner is the arm `rank` puts first (on every point, at rank's target), also when --fit-until fits the
    projection on less; the target, its words and the reach are the arm's: its own data, not the longest arm's."""
    from ablate.fit.analysis import group_arms
    from ablate.fit.extrapolate import extrapolate, winner
    from ablate.fit.result import FitOptions
    from ablate.fit.sensitivity import window_sensitivity

    x, fit_until = inputs.x, opts.fit_until
    opts, _ = with_target(opts, inputs.curves, x, to, fit_until)
    arms = group_arms(inputs.curves)
    by_rank = arm is None and len(arms) > 1
    if arm is None and len(arms) == 1:
        arm = next(iter(arms))
    elif arm is None:  # rank's winner: every point, at rank's target, whatever part of it the projection fits
        at, _ = choose_target(inputs.curves, x, to, None)
        arm = winner(inputs.curves, FitOptions(fit_from=opts.fit_from, n_boot=0, target=at, r0=opts.r0))
    else:
        named = named_arm_label(arm, inputs.curves, "--arm")  # (3e-4 names the arm optim.lr=0.0003)
        if named is None or named not in arms:
            raise SettingError(
                f"{{arm}} {arm!r}: no such arm (or it names several); arms are: {', '.join(arms)}", "arm"
            )
        arm = named
    target, target_text = choose_target(arms[arm], x, to, fit_until)
    opts = replace(opts, target=target)
    check_reach(arms[arm], target, x, fit_until)
    ex = extrapolate(arms[arm], opts, subject=arm, target_source=target_text)
    if window:
        ex = replace(ex, fit=window_sensitivity(ex.fit, opts))
    return ExtrapolationReport(ex, opts, target_text, by_rank)


def check_calibration_axis(calibration: Path) -> None:
    """A calibration plans a sweep file, whose runs log the compute axes of a run directory (COMPUTE_AXES): its
    axis must be one of them (any other name, read from the file, is refused in one line)."""
    from ablate.storage.measurements import load_calibration
    from ablate.storage.metricsfile import COMPUTE_AXES
    from ablate.text import safe

    x = load_calibration(calibration).x
    if x not in COMPUTE_AXES:
        raise UserError(
            f"--calibration {calibration}: x is {safe(repr(x)[:60])}, not a compute axis a sweep's runs log "
            f"({', '.join(COMPUTE_AXES)}); write it again with `ablate plan SWEEP_DIR --save-calibration FILE`",
            kind=ErrorKind.SETTING,
        )


def plan_any(
    source: Path,
    overrides: list[str],
    calibration: Path | None,
    *,
    x: str,
    baseline: str | None,
    to: float | None,
    futures: int,
    reading: dict[str, Any],
    common: dict[str, Any],
    axis_line: Callable[[str], None] | None,
) -> PlanResult:
    """`ablate plan` on what SOURCE is: a sweep file (with overrides and --calibration) is planned before any run
    (ablate.analysis.plan.plan_from_file); a sweep directory or curves from what they measured (plan_measured), on the
    axis `--x auto` picks (said through `axis_line` first, when it is not the paper's). `reading`: how curves are
    read (fmt, run, group, y: plan_measured's)."""
    from ablate.analysis import plan
    from ablate.compose.resources import find_recipe

    if not source.exists() and source.suffix in (".yaml", ".yml"):
        source, _ = find_recipe(source)  # a packaged sweep file, found as `ablate show` and `ablate sweep` find it
    if not source.exists():
        raise UserError(
            f"{source}: no such file or directory; give a sweep directory (sweeps/NAME), a curves file, "
            "or a sweep file with --calibration",
            kind=ErrorKind.FILE,
        )
    if source.is_file() and source.suffix in (".yaml", ".yml"):
        if baseline is not None:  # (its plan depends on how many arms there are, not on which is the baseline)
            why = "a sweep file's plan is the same whichever arm is the baseline; drop it (it names a sweep's arm)"
            raise UserError(f"--baseline {baseline!r}: {why}", kind=ErrorKind.SETTING)
        if calibration is not None:
            check_calibration_axis(calibration)
        return plan.plan_from_file(source, overrides, calibration, to=to, **common)
    if overrides:
        raise UserError(f"overrides {' '.join(overrides)}: only a sweep file takes overrides", kind=ErrorKind.SETTING)
    if calibration is not None:
        raise UserError(
            "--calibration plans a sweep file before any run; SOURCE has measurements of its own",
            kind=ErrorKind.SETTING,
        )
    x, axis_text = choose_axis([source], x)
    if axis_text and axis_line is not None:
        axis_line(axis_text)
    return plan.plan_measured(source, x=x, baseline=baseline, to=to, n_futures=futures, **reading, **common)
