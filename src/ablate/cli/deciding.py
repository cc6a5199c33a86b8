"""`ablate sweep --decide`: the options, and the glue that hands `waves.decide` its launcher, its wait and its look
(`rank`'s own analysis on the runs of each look)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ablate.cli.commands import option
from ablate.errors import ErrorKind, UserError


@dataclass(frozen=True, kw_only=True)
class DecideOptions:
    """`ablate sweep`'s options for growing a sweep by waves (--decide), listed last in its help."""

    decide: bool = option(
        False,
        "--decide",
        doc="Grow the sweep by waves of seeds until each arm is decided: after every wave, rank the open arms and stop "
        "those settled (equivalent, or changed by a clear amount); the tests of each look are held to 5% / looks so "
        "the whole procedure errs at most 5% (docs/verdicts.md, Deciding by waves). Chooses the seeds itself and "
        "waits in the foreground; run the same command again to carry on.",
    )
    wave: int = option(3, "--wave", doc="--decide: seeds an open arm gets per wave.", min=2)
    max_seeds: int = option(
        12, "--max-seeds", doc="--decide: the most seeds an arm may get (fixes the looks: one per wave).", min=2
    )
    budget: float | None = option(
        None,
        "--budget",
        doc="--decide: the compute the sweep may spend, summed over its runs, in units of its compute axis (samples "
        "on CPU, gpu_hours on GPUs); after the first wave (which always runs: it measures a run's cost), no wave "
        "starts that would pass it. Default: none, only --max-seeds limits the sweep.",
        show_default=False,
    )


def check_decide_flags(
    decide: bool, overrides: list[str], looks: tuple[int, int, float | None], refused: dict[str, bool]
) -> bool:
    """Whether the sweep is to be decided by waves; one line for flags that mean nothing without --decide, and for
    what --decide cannot honour (seeds chosen by hand, `refused` flags given). `looks`: --wave, --max-seeds,
    --budget."""
    wave, max_seeds, budget = looks
    if not decide:
        if budget is not None or wave != 3 or max_seeds != 12:
            raise UserError(
                "--wave / --max-seeds / --budget set how --decide grows the sweep; add --decide", kind=ErrorKind.SETTING
            )
        return False
    given = [flag for flag, on in refused.items() if on]
    if given:
        raise UserError(
            f"--decide stops settled arms itself, chooses the seeds and keeps the runs its looks read: leave out "
            f"{' / '.join(given)}",
            kind=ErrorKind.SETTING,
        )
    if any(o.split("=", 1)[0].strip().lstrip("+~") == "seed" for o in overrides):
        raise UserError(
            f"--decide chooses the seeds itself (0 to {max_seeds - 1}); drop seed=... from the command",
            kind=ErrorKind.SETTING,
        )
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise UserError(
            f"--budget {budget:g}: a finite compute > 0, in units of the sweep's compute axis", kind=ErrorKind.SETTING
        )
    return True


def _comparable(expanded: Any) -> Any:
    """The expanded sweep, once it has a baseline and an arm to compare with it."""
    if expanded.baseline is None:
        raise UserError(
            f"--decide: sweep {expanded.name!r} has no baseline arm to decide against; name one with `baseline:`",
            kind=ErrorKind.RECIPE,
        )
    if len(expanded.arms) < 2:
        raise UserError(
            f"--decide: sweep {expanded.name!r} has one arm; it needs a baseline and an arm to compare",
            kind=ErrorKind.RECIPE,
        )
    return expanded


def run_decide(
    recipe: Path,
    overrides: list[str],
    *,
    root: Path,
    executor: str | None,
    looks: tuple[int, int, float | None],
    launch: dict[str, Any],
) -> None:
    """Expand the sweep with seeds 0..max-1, then run `waves.decide` on it and print where it ends. `looks`: --wave,
    --max-seeds and --budget."""
    from ablate.analysis import verbs
    from ablate.analysis.choices import launch_axis
    from ablate.compose.sweep import load_sweep
    from ablate.curves.inputs import curves_from_sweep
    from ablate.fit.sequential import Looks
    from ablate.fit.spread import MinEffect
    from ablate.launch.mixing import recorded_states
    from ablate.launch.status import check_ledger
    from ablate.launch.submit import launch_sweep
    from ablate.prune import waves
    from ablate.render.status import follow_runs
    from ablate.storage import fs, ownership
    from ablate.storage.paths import check_writable_output

    wave, max_seeds, budget = looks
    planned = Looks(wave, max_seeds)
    seeds = ",".join(map(str, range(max_seeds)))
    expanded = _comparable(load_sweep(recipe, [*overrides, f"seed={seeds}"]))
    x, why = launch_axis(expanded.runs, executor, flag="--decide")
    sdir = root / expanded.name
    check_writable_output(sdir, "--root", folder=True)
    check_ledger(sdir)
    ownership.check_owned_dir(sdir)  # a sweep folder others could change is refused, as `ablate sweep` refuses it
    recorded_states(sdir, expanded.runs)  # runs of another config (train.max_steps changed) refused, not replayed
    typer.echo(f"note: {why}")
    fs.make_dirs(sdir, fs.dir_mode(launch["group_read"]))  # as `ablate sweep` makes it, before its lock
    settings = waves.DecideSettings(
        planned, x, budget, min_effect=MinEffect(), baseline=expanded.baseline, arms=tuple(expanded.arms)
    )
    typer.echo(f"--decide: {planned.describe()}")
    rank_settings = verbs.check_rank_settings(
        baseline=expanded.baseline,
        margin=None,
        shared_a="pair",
        noise=None,
        save_noise=None,
        min_effect=settings.min_effect.a,
        min_effect_compute=settings.min_effect.ratio,
        n_boot=settings.n_boot,
        window=False,
    )

    def submit(runs: list[Any]) -> None:
        launch_sweep(waves.restricted(expanded, runs), root=root, executor=executor, echo=typer.echo, **launch)

    def wait(ids: list[str]) -> list[Any]:
        shown = f"ablate status {expanded.name}" + (f" --root {root}" if root != Path("sweeps") else "")
        statuses = follow_runs(root, expanded.name, ids, status_cmd=shown)
        if len(statuses) < len(ids) or not all(s.ended for s in statuses):
            raise typer.Exit(130)  # Ctrl-C: the runs go on; the same command carries on from the record
        return statuses

    def look(ids: list[str], level: float) -> tuple[Any, dict[str, float]]:
        curves, skipped = curves_from_sweep(sdir, x=x)
        keep = set(ids)
        curves = [c for c in curves if c.run_id in keep]
        skipped = [s for s in skipped if s.facts is not None and s.facts.run_id in keep]
        inputs = verbs.Inputs([], curves, skipped, x, None)
        opts = verbs.fit_options(n_boot=settings.n_boot, level=level, ci=1.0 - level)  # sizes held to the level
        ranking = verbs.rank_inputs(inputs, opts, rank_settings, to=None, jobs=fs.cpu_count())
        return ranking, {str(c.run_id): float(c.x[-1]) for c in curves if len(c.x)}

    outcome = waves.decide(expanded, sdir, settings, launch=submit, wait=wait, look=look, echo=typer.echo)
    for line in waves.summary(outcome, settings):
        typer.echo(line)
