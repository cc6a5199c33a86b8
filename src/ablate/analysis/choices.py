"""Defaults that never mislead: the target compute (`--to`) and the compute axis (`--x auto`) a command uses when
none is given, each with the line that says what was chosen and why.

    choose_target(curves, x, to, fit_until)  -> (target, text)   --to: the paper's 16000 GPU-hours only where the
                                                                  data is in GPU-hours within MAX_REACH; else twice
                                                                  the largest compute fitted
    choose_axis(paths, x, per_step)          -> (axis, text)     --x auto: samples for runs that ran on CPU (where
                                                                  gpu_hours is wall-clock and measures the load)
    launch_axis(runs, executor)              -> (axis, text)     the same choice for `sweep --prune-x auto`, made
                                                                  from the recipe before any run started
    wall_clock_note(curves, x)               -> text or None     gpu_hours whose seeds of one arm differ per sample
                                                                  far beyond what one recipe explains
    with_target(opts, curves, x, to, ...)    -> (opts, text)     choose_target, with rank's and extrapolate's checks
                                                                  (below the first evaluation, past MAX_REACH)
    prune_settings(sweep, prune, x, to, ...) -> settings or None  `sweep --prune`'s options checked, its axis chosen
    named_arm_label(text, curves, option)    -> label or None     the arm `--baseline` or `--arm` names, spelled
                                                                  as the sweep's labels are (3e-4 names
                                                                  optim.lr=0.0003)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.errors import ErrorKind, SettingError, UserError
from ablate.fit.curve import Curve

if TYPE_CHECKING:
    from ablate.fit.result import FitOptions

AUTO = "auto"
PAPER_TARGET = 16000.0
"""ScaleRL's compute scale, in GPU-hours: the paper fits to 8k and compares at 16k."""
MAX_REACH = 1000.0
"""rank and extrapolate refuse a --to beyond this multiple of the largest compute fitted: so far out, the
prediction is a guess, and it is almost always --to in other units than the data (a CPU run logs a few hundredths
of a GPU-hour). The paper's 16000 is the default only within it."""
WALL_CLOCK_SPREAD = 1.5
"""Seeds of one arm run one recipe, so their GPU-hours per sample differ only by what a seed changes (completion
lengths, a few percent to tens of percent). Past this max/min ratio the clock measured the machine, not the work."""
CPU_AXIS_TEXT = (
    "x = samples: the runs ran on CPU, where gpu_hours is wall-clock and measures the machine's load; "
    "--x gpu_hours to use it"
)


def fitted_top(curves: list[Curve], fit_until: float | None) -> float:
    """The largest compute the fits see: the data's last point, or the last at or before --fit-until when it cuts
    earlier (the point fitted, not the option's value)."""
    tops = [float(c.x[c.x <= fit_until].max()) for c in curves if fit_until is not None and (c.x <= fit_until).any()]
    return max(tops) if tops else max(float(c.x.max()) for c in curves)


def readable(value: float) -> float:
    """`value` to three significant digits (0.11336 -> 0.113, 512000 -> 512000): a target one can type back."""
    return float(f"{value:.3g}")


def choose_target(curves: list[Curve], x: str, to: float | None, fit_until: float | None) -> tuple[float, str]:
    """The compute to predict at, and the line that says where it came from.

    A --to given is kept (and named an interpolation when the window reaches it). Without one: the paper's 16000
    when x is gpu_hours and 16000 lies past the largest compute fitted, within MAX_REACH of it (the scale ScaleRL
    compares at); otherwise twice the largest compute fitted, in the data's own units, rather than a number in other
    units that the reach check would refuse (a CPU sweep in samples or hundredths of a GPU-hour)."""
    from ablate.fit.extrapolate import is_interpolation  # the fit stack imports scipy: keep `ablate sweep` light

    top = fitted_top(curves, fit_until)
    if to is not None:
        if is_interpolation(to, top):
            return to, f"--to {to:g} (inside the fitted window, up to {top:g} {x}: an interpolation)"
        return to, f"--to {to:g}"
    if x == "gpu_hours" and top < PAPER_TARGET <= MAX_REACH * top:  # past the data, within reach
        return PAPER_TARGET, f"{PAPER_TARGET:g} gpu_hours (the paper's scale; no --to)"
    target = readable(2.0 * top) if top > 0 else PAPER_TARGET
    about = "" if math.isclose(target, 2.0 * top, rel_tol=1e-9) else "about "
    return target, f"{target:g} {x}: {about}twice the largest compute fitted ({top:g}; no --to)"


def given_to(to: float | None) -> float:
    """The --to the options are checked with before any data is read: the one given, else a placeholder that
    with_target replaces with the default chosen from the data."""
    return PAPER_TARGET if to is None else to


def check_reach(curves: list[Curve], to: float, x: str, fit_until: float | None) -> None:
    """rank and extrapolate refuse a --to beyond MAX_REACH x the largest compute fitted (see there)."""
    from ablate.storage.metricsfile import COMPUTE_AXES

    top = fitted_top(curves, fit_until)
    if top > 0 and to > MAX_REACH * top:
        others = [a for a in COMPUTE_AXES if a != x]  # a run's axes; a curves file has its own columns
        raise SettingError(
            f"{{to}} {to:g} is {to / top:,.0f}x the largest compute fitted ({top:g} {x}): far past what a "
            f"fit can tell; pass {{to}} in the data's units (e.g. {{to}} {2 * top:.3g}), or another {{x}} "
            + (f"({', '.join(others)})" if x in COMPUTE_AXES else "(a compute column of the file)"),
            "to",
            "x",
        )


def with_target(
    opts: FitOptions, curves: list[Curve], x: str, to: float | None, fit_until: float | None, *, reach: bool = True
) -> tuple[FitOptions, str]:
    """`opts` with the target --to gives, or choose_target picks from the data, and the line that says which. A
    --to below the first evaluation is refused (nothing has been learned there: usually --to in other units);
    with `reach` (rank, extrapolate), so is one past MAX_REACH."""
    target, text = choose_target(curves, x, to, fit_until)
    first = min((float(c.x[c.x > 0].min()) for c in curves if (c.x > 0).any()), default=0.0)
    if to is not None and to < first:  # e.g. GPU-hours given while --x auto chose samples for a CPU sweep
        raise SettingError(
            f"{{to}} {to:g} is below the first evaluation ({first:g} {x}): nothing has been learned there; "
            f"pass {{to}} in {x} (e.g. {{to}} {2 * fitted_top(curves, fit_until):.3g}), or choose the axis "
            "with {x} (gpu_hours, flops, samples, step)",
            "to",
            "x",
        )
    if reach:
        check_reach(curves, target, x, fit_until)
    return replace(opts, target=target), text


def device_kind(device: str | None) -> str | None:
    """ "cpu", "gpu" (a CUDA device) or None (not recorded, or another accelerator) for run.json's `device`."""
    if device is None:
        return None
    if device == "cpu":
        return "cpu"
    return "gpu" if device.startswith("cuda") else None


def choose_axis(paths: list[Path], x: str, per_step: dict[str, float | None] | None = None) -> tuple[str, str | None]:
    """The compute axis for `--x` (unchanged unless it is `auto`), and the line that says why when the choice is
    not the paper's gpu_hours.

    Sweep and run directories, and a sweep's tracker copies (by the device ablate tagged its runs with): samples
    when any run ran on CPU (its gpu_hours is wall-clock x 1 device: the machine's load, as much as the recipe's
    work), gpu_hours when they ran on GPUs or did not record where. Other inputs: gpu_hours (samples when only
    --samples-per-step makes compute from steps)."""
    if x != AUTO:
        return x, None
    from ablate.curves.inputs import recorded_devices

    devices = recorded_devices(paths)
    if devices is None:
        given = {k for k, v in (per_step or {}).items() if v is not None}
        if given == {"samples"}:
            return "samples", "x = samples: --samples-per-step gives the only compute (no --gpu-hours-per-step)"
        return "gpu_hours", None
    if "cpu" in {device_kind(d) for d in devices}:
        return "samples", CPU_AXIS_TEXT
    return "gpu_hours", None


def launch_axis(runs: list[Any], executor: str | None, flag: str = "--prune") -> tuple[str, str]:
    """`sweep --prune-x auto` (or `--decide`'s axis: `flag`) before any run has started: samples when the runs will
    train on CPU (train.device=cpu, or auto on a local executor on a machine without CUDA), gpu_hours otherwise (a
    CUDA device, or SLURM nodes)."""
    from ablate.launch.executors import resolve_executor

    devices = {s.config.train.device for s in runs}
    kind = resolve_executor(executor or runs[0].config.launcher.name)
    if devices == {"cpu"}:
        on_cpu = True
    elif "cuda" in devices or kind not in ("local", "debug"):
        on_cpu = False
    else:
        import torch

        on_cpu = not torch.cuda.is_available()
    if on_cpu:
        choose = " (--prune-x gpu_hours to rank on it)" if flag == "--prune" else ""
        return "samples", (
            f"{flag} ranks on samples: the runs train on CPU, where gpu_hours is wall-clock and "
            f"measures the machine's load{choose}"
        )
    return "gpu_hours", f"{flag} ranks on gpu_hours: the runs train on GPUs (the paper's axis)"


def _per_work(curves: list[Curve]) -> tuple[float, str] | None:
    """max/min over one arm's seeds of gpu_hours per sample at their last point (per step where samples are not
    logged), with the unit; None when fewer than two seeds say both."""
    ends = [{} if c.facts is None else c.facts.end for c in curves]
    for axis, unit in (("samples", "sample"), ("step", "step")):
        rates = [e["gpu_hours"] / e[axis] for e in ends if e.get("gpu_hours", 0) > 0 and e.get(axis, 0) > 0]
        if len(rates) >= 2 and len(rates) == len(ends):
            return max(rates) / min(rates), unit
    return None


def wall_clock_note(curves: list[Curve], x: str) -> str | None:
    """A warning when x is gpu_hours and, within one arm, the seeds' gpu_hours per sample differ by more than
    WALL_CLOCK_SPREAD: the clock then measured the machine's load, and that spread enters the seed spread the
    verdicts test against (and each arm's compute). None when no arm shows it (or the runs do not log samples)."""
    if x != "gpu_hours":
        return None
    arms: dict[str, list[Curve]] = {}
    for c in curves:
        arms.setdefault(c.group or c.run, []).append(c)
    spread = {arm: got for arm, cs in arms.items() if (got := _per_work(cs)) and got[0] > WALL_CLOCK_SPREAD}
    if not spread:
        return None
    arm, (ratio, unit) = max(spread.items(), key=lambda kv: kv[1][0])
    where = arm if len(spread) == 1 else f"{len(spread)} arms (most: {arm})"
    return (
        f"gpu_hours is wall-clock, and seeds of one recipe differ up to {ratio:.1f}x in gpu_hours per {unit} in "
        f"{where}: the machine's load, not the recipe; rank on a load-independent axis: --x samples or --x flops"
    )


def prune_settings(
    sweep: Any, *, prune: bool, x: str, to: float | None, executor: str | None, echo: Callable[[str], None]
) -> Any:
    """`sweep --prune`'s settings (ablate.prune.rules.PruneSettings), or None without --prune: --prune-x and --prune-to
    checked, and --prune-x auto made the axis launch_axis picks for the sweep's runs (said through `echo`)."""
    from ablate.storage.metricsfile import COMPUTE_AXES

    if x not in (*COMPUTE_AXES, AUTO):
        raise UserError(
            f"--prune-x {x}: unknown compute axis; valid: auto, {', '.join(COMPUTE_AXES)}", kind=ErrorKind.SETTING
        )
    if to is not None and not (math.isfinite(to) and to > 0):
        raise UserError(f"--prune-to {to:g}: a compute > 0, in units of --prune-x", kind=ErrorKind.SETTING)
    if (to is not None or x != AUTO) and not prune:
        raise UserError("--prune-x / --prune-to set how --prune ranks; add --prune", kind=ErrorKind.SETTING)
    if not prune:
        return None
    from ablate.prune.rules import PruneSettings

    if sweep.baseline is None:
        raise UserError(
            f"--prune: sweep {sweep.name!r} has no baseline arm to read verdicts against; name one "
            "with `baseline:` in the sweep file",
            kind=ErrorKind.RECIPE,
        )
    if x == AUTO:
        x, why = launch_axis(sweep.runs, executor)
        echo(f"note: {why}")
    return PruneSettings(x=x, to=to)


def named_arm_label(text: str | None, curves: list[Curve], option: str = "--baseline") -> str | None:
    """The arm label `--baseline` (or `extrapolate --arm`: `option`) names: itself when it is one, else the arm whose
    `key=value` parts it names in another order or spelling (`optim.lr=3e-4` for the arm `optim.lr=0.0003`, as a
    sweep file's baseline is matched), else itself (no arm, or several), for the caller to refuse with the arms
    listed."""
    from ablate.fit.analysis import group_arms

    labels = list(group_arms(curves))  # the arm names rank checks the baseline against
    if text is None or text in labels:
        return text
    from ablate.compose.sweep import named_arm

    return named_arm(text, labels, option) or text
