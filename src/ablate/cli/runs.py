"""`ablate status`, `sweep` and `train`: expand and launch sweeps, follow them, run one recipe in the foreground
(`show` and `init`: cli/recipes.py). Recipes and sweep files: docs/ and recipes/README.md; run directories:
docs/run-directory.md."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ablate.cli.commands import argument, option, shared, verb
from ablate.cli.deciding import DecideOptions, check_decide_flags, run_decide
from ablate.cli.errors import checked, prefix
from ablate.cli.options import OutputOptions, executor_name, positive_seconds, torch_threads
from ablate.errors import ErrorKind, UserError
from ablate.states import RunState


@dataclass(frozen=True, kw_only=True)
class StatusSettings:
    """`ablate status`'s options."""

    sweep: str | None = argument(
        "Sweep name (sweeps/<name>/) or a sweep directory's path; default: every sweep under --root.", default=None
    )
    root: Path = option(Path("sweeps"), "--root", doc="Folder holding the sweeps.")
    watch: bool = option(False, "--watch", doc="Refresh until every run has ended (Ctrl-C to stop).")
    interval: float = option(
        5.0, "--interval", doc="Seconds between refreshes with --watch.", callback=checked(positive_seconds)
    )
    as_json: bool = shared(OutputOptions, "as_json")


@verb(StatusSettings)
def status(s: StatusSettings) -> None:
    """Show every run of a sweep: state, job id, progress, latest pass rate, GPU-hours, truncation warnings.

    Reads the files only (plus one batched sacct call per refresh on SLURM); works from any shell.
    Example: ablate status loss --watch
    """
    from ablate.render.status import show_status
    from ablate.train.stopping import ctrl_c

    root, sweep = s.root, s.sweep
    here = sweep is not None and not (Path(root) / sweep).exists()  # a bare name that is only a folder here
    if sweep is not None and ("/" in sweep or here) and (Path(sweep) / "ledger.jsonl").exists():
        root, sweep = Path(sweep).resolve().parent, Path(sweep).resolve().name  # a sweep directory's path
    elif sweep is not None and (Path(sweep) / "run.json").exists():
        raise UserError(
            f"{sweep}: a run directory, not a sweep; its run.json holds its state, `ablate show {sweep}` its config "
            f"and `ablate fit {sweep}` fits its curve",
            kind=ErrorKind.FILE,
        )
    elif sweep is not None and "/" in sweep:
        raise UserError(
            f"{sweep}: not a sweep directory (no ledger.jsonl); give a sweep's name, or its directory (sweeps/NAME)",
            kind=ErrorKind.FILE,
        )
    with ctrl_c() as interrupted:
        show_status(root, sweep, watch=s.watch, interval=s.interval, as_json=s.as_json)
    if interrupted.is_set():
        raise typer.Exit(130)  # Ctrl-C: the shell's status for it, not success


def tracker_names(values: list[str] | None) -> list[str] | None:
    """--track: trackers ablate knows (ablate.track.base.TRACKERS)."""
    from ablate.track.base import TRACKERS

    for value in values or []:
        if value not in TRACKERS:
            raise UserError(
                f"--track {value}: not a tracker; choose from {', '.join(TRACKERS)}", kind=ErrorKind.SETTING
            )
    return values


def track_overrides(track: list[str] | None, tensorboard: bool) -> list[str]:
    """The override that `--track NAME ... [--tensorboard]` stands for: `track.to=[NAME,...]` (none without them)."""
    names = list(dict.fromkeys([*(track or []), *(["tensorboard"] if tensorboard else [])]))
    return [f"track.to=[{','.join(names)}]"] if names else []


TRACK_HELP = (
    "Also mirror every metrics line to this tracker: wandb, mlflow or tensorboard (repeat for several; sets "
    "track.to; not part of run ids). Trackers and where they send data are chosen here, by track.* overrides on the "
    "command line and by the WANDB_*/MLFLOW_* variables, never by a recipe (docs/trackers.md)."
)


@dataclass(frozen=True, kw_only=True)
class SweepSettings:
    """`ablate sweep`'s options."""

    recipe: Path = argument("Sweep file (recipes/loss.yaml) or recipe (recipes/base.yaml).")
    overrides: list[str] | None = argument(
        "Hydra overrides for every run: key=value; a sweep value (a,b / range(..) / choice(..)) adds or replaces "
        "a grid axis; seed=0,1,2 replaces the seeds.",
        default=None,
    )
    dry_run: bool = option(
        False, "--dry-run", doc="Print the runs (label, run id, arm id, overrides vs base) and launch nothing."
    )
    executor: str | None = option(
        None,
        "--executor",
        "-e",
        doc="local | slurm | debug | auto (default: the recipe's launcher.name).",
        callback=checked(executor_name),
    )
    max_parallel: int | None = option(
        None,
        "--max-parallel",
        doc="Runs of this sweep at once (default: launcher.max_parallel, else as many as the cores hold).",
        show_default=False,
    )
    profile: str | None = option(
        None,
        "--profile",
        doc="slurm: cluster resources: NAME is ablate's own slurm/NAME.yaml, a path (./slurm/x.yaml) exactly that "
        "file (default: ablate's slurm/local.yaml). Only the command line names a profile, never a recipe or the "
        "working directory.",
    )
    retry_failed: bool = option(
        False, "--retry-failed", doc="Also resubmit failed runs (they resume from their checkpoints)."
    )
    force: bool = option(
        False, "--force", doc="Re-run every run not queued or running, from scratch (old run dirs are archived)."
    )
    follow: bool = option(False, "--follow", doc="Wait with a progress bar until the submitted runs end.")
    root: Path = option(Path("sweeps"), "--root", doc="Folder holding the sweeps (results in <root>/<sweep>/).")
    job: str = option("ablate.train:run", "--job", doc="The run function, module:function or file.py:function.")
    track: list[str] | None = option(
        None, "--track", doc=TRACK_HELP, callback=checked(tracker_names), show_default=False, metavar="NAME"
    )
    tensorboard: bool = option(
        False,
        "--tensorboard",
        doc="Same as --track tensorboard: event files in each run's tb/. View a sweep with: tensorboard --logdir "
        "sweeps/NAME/runs",
    )
    prune: bool = option(
        False,
        "--prune",
        doc="Stop runs that can no longer decide anything while the sweep runs: arms whose verdict against the "
        "baseline is settled (identified, and unchanged in simulated futures to max_steps) end `pruned`; broken "
        "runs (truncation >10% at 3 evaluations in a row, pass rate collapsed below R0) end `unstable`. Both "
        "keep their files; see `ablate status`.",
    )
    prune_x: str = option(
        "auto",
        "--prune-x",
        doc="--prune: the compute axis verdicts are ranked on (gpu_hours, flops, samples or step; samples is "
        "load-independent on a shared CPU). auto: samples when the runs train on CPU, else gpu_hours.",
    )
    prune_to: float | None = option(
        None,
        "--prune-to",
        doc="--prune: the compute verdicts are ranked at, in units of --prune-x (default: twice the compute a run "
        "reaches at max_steps).",
    )
    resume_pruned: bool = option(
        False,
        "--resume-pruned",
        doc="Also resubmit pruned and unstable runs: they resume from their checkpoints and run to max_steps (not "
        "pruned again).",
    )
    group_read: bool = option(
        False,
        "--group-read",
        doc="Let your group read (never write) the sweep: its directories are made 0750 instead of owner-only 0700, "
        "and an existing owner-only sweep is opened to the group (g+rx).",
    )
    decide: bool = shared(DecideOptions, "decide")
    wave: int = shared(DecideOptions, "wave")
    max_seeds: int = shared(DecideOptions, "max_seeds")
    budget: float | None = shared(DecideOptions, "budget")


@verb(SweepSettings)
def sweep(s: SweepSettings) -> None:
    """Expand a sweep into validated runs and launch them; safe to run again at any time.

    Re-running says how many runs are done, running, failed and new, and submits only new and preempted runs.
    With --prune, a monitor stops the runs that can no longer change a verdict (and broken ones) as the sweep goes.
    With --decide, the sweep grows by waves of seeds until each arm is decided, with error control over the looks.
    Example: ablate sweep recipes/loss.yaml seed=0,1,2 loss.eps_max=4 --dry-run
    """
    from ablate.analysis.choices import prune_settings
    from ablate.compose.sweep import load_sweep
    from ablate.launch.status import check_ledger
    from ablate.launch.submit import launch_sweep
    from ablate.render.status import follow_runs
    from ablate.storage.paths import check_writable_output
    from ablate.text import safe
    from ablate.train.stopping import ctrl_c

    launch: dict[str, Any] = {"max_parallel": s.max_parallel, "profile": s.profile, "retry_failed": s.retry_failed}
    launch |= {
        "force": s.force,
        "job": s.job,
        "group_read": s.group_read,
        "command": typed_command(s.recipe, s.overrides),
    }
    every = [*(s.overrides or []), *track_overrides(s.track, s.tensorboard)]
    refused = {"--prune": s.prune, "--dry-run": s.dry_run, "--force": s.force}
    if check_decide_flags(s.decide, every, (s.wave, s.max_seeds, s.budget), refused=refused):
        return run_decide(
            s.recipe, every, root=s.root, executor=s.executor, looks=(s.wave, s.max_seeds, s.budget), launch=launch
        )
    expanded = load_sweep(s.recipe, [*(s.overrides or []), *track_overrides(s.track, s.tensorboard)])
    if s.dry_run:
        flags = {"retry_failed": s.retry_failed, "force": s.force, "resume_pruned": s.resume_pruned}
        return show_dry_run(expanded, s.root / expanded.name, s.executor or "auto", flags)
    settings = prune_settings(expanded, prune=s.prune, x=s.prune_x, to=s.prune_to, executor=s.executor, echo=typer.echo)
    check_writable_output(s.root / expanded.name, "--root", folder=True)  # before any run is submitted
    check_ledger(s.root / expanded.name)
    for note in expanded.notes:
        typer.echo(f"note: {safe(note)}")
    submitted = launch_sweep(
        expanded,
        root=s.root,
        executor=s.executor,
        echo=typer.echo,
        monitored=settings is not None,
        after_submit=monitor_hook(settings),
        resume_pruned=s.resume_pruned,
        **launch,
    )
    _send_unsent(s.root / expanded.name, [*submitted.submit, *submitted.running])
    live = {*submitted.submit, *submitted.running}
    _copy_hints([r for r in expanded.runs if r.run_id in live], s.root / expanded.name)
    shown = f"ablate status {expanded.name}" + (f" --root {s.root}" if s.root != Path("sweeps") else "")
    if s.follow and (submitted.submit or submitted.running):
        with ctrl_c() as interrupted:
            ended = follow_runs(s.root, expanded.name, submitted.submit + submitted.running, status_cmd=shown)
        if interrupted.is_set():
            raise typer.Exit(130)  # Ctrl-C stopped the following, not the runs (follow_runs said so)
        followed_end(ended, shown)
    elif not s.follow:
        typer.echo(f"follow with: {shown}")


def show_dry_run(expanded: Any, sdir: Path, executor: str, flags: dict[str, bool]) -> None:
    """`sweep --dry-run`: the runs, each one's state in the sweep folder, and what a launch would submit."""
    from ablate.launch.status import check_ledger
    from ablate.launch.submission import preview
    from ablate.render.runs import runs_table
    from ablate.render.terminal import console

    check_ledger(sdir)
    states, due = preview(sdir, expanded.runs, executor, **flags)
    console().print(runs_table(expanded, states, sdir, len(due)))


def followed_end(ended: list[Any], shown: str) -> None:
    """After --follow: exit status 1, and where to look, when a run followed did not finish (done or pruned); a
    warning when runs' trackers were left behind."""
    if behind := [s for s in ended if s.trackers_behind]:
        typer.echo(f"warning: trackers behind on {len(behind)} run(s); {shown} says which, and how to send them")
    bad = [s for s in ended if str(s.state) not in ("done", "pruned")]
    if bad:
        states = ", ".join(f"{n} {st}" for st, n in Counter(str(s.state) for s in bad).items())
        typer.echo(
            f"{prefix(ErrorKind.STATE)} {len(bad)} of {len(ended)} followed run(s) did not finish ({states}): {shown}",
            err=True,
        )
        raise typer.Exit(1)


def _copy_hints(runs: list[Any], sdir: Path) -> None:
    """Where the tracker copies of the runs submitted or running are, and how to browse, upload and rank them
    (track.hints); none for a sweep whose runs had all ended (they may have run untracked)."""
    from ablate.text import safe
    from ablate.track.hints import copy_hints

    for line in copy_hints([r.config.track for r in runs], sdir, sdir.name) if runs else []:
        typer.echo(safe(line))


def _send_unsent(sdir: Path, busy: list[str]) -> None:
    """The ended runs of the sweep whose trackers fell behind at their end are sent what they lack now (runs just
    submitted or still running are left to their own job, whose trackers start by sending it)."""
    from ablate.text import safe
    from ablate.track.sync import sync

    try:
        for s in sync(sdir, skip=set(busy), echo=typer.echo):
            if s.left:
                typer.echo(f"warning: {', '.join(s.left)} still behind; send it later with: ablate sync {sdir}")
    except UserError as e:  # the runs are submitted: what keeps their trackers waiting is a warning, not a failure
        typer.echo(f"warning: trackers left behind not sent ({safe(str(e))})", err=True)


def typed_command(recipe: Path, overrides: list[str] | None) -> str:
    """`ablate sweep ...` as the user typed it, for the ledger's launch event: this process's arguments when it is
    `ablate` (or `python -m ablate`); called from Python (typer's CliRunner), the sweep file and its overrides."""
    import shlex
    import sys

    entry = Path(sys.argv[0])
    if entry.name == "ablate" or (entry.name == "__main__.py" and entry.parent.name == "ablate"):
        return shlex.join(["ablate", *sys.argv[1:]])
    return shlex.join(["ablate", "sweep", str(recipe), *(overrides or [])])


def monitor_hook(settings: Any) -> Callable[[Path], None] | None:
    """What `sweep --prune` runs once the runs are submitted: the prune monitor started (None without --prune)."""
    if settings is None:
        return None
    from ablate.prune.monitor import start_hook

    return start_hook(settings, echo=typer.echo)


@dataclass(frozen=True, kw_only=True)
class TrainSettings:
    """`ablate train`'s options."""

    recipe: Path = argument("Recipe (recipes/base.yaml) or sweep file narrowed to one run.")
    overrides: list[str] | None = argument(
        "Hydra overrides, key=value, one value a key (a key given twice: the last wins).", default=None
    )
    run_dir: Path | None = option(
        None, "--run-dir", doc="Run directory to write (default: sweeps/train/runs/<run_id>)."
    )
    old_out: Path | None = option(None, "--out", doc="", hidden=True)
    threads: int = option(
        1,
        "--threads",
        doc="torch threads for this run (several runs can share a machine).",
        callback=checked(torch_threads),
    )
    track: list[str] | None = option(
        None, "--track", doc=TRACK_HELP, callback=checked(tracker_names), show_default=False, metavar="NAME"
    )
    tensorboard: bool = option(
        False, "--tensorboard", doc="Same as --track tensorboard: TensorBoard event files in the run's tb/."
    )
    group_read: bool = option(
        False,
        "--group-read",
        doc="Let your group read (never write) the run directory: it is made 0750 instead of owner-only 0700, and an "
        "existing owner-only one is opened to the group (g+rx).",
    )


@verb(TrainSettings)
def train(s: TrainSettings) -> None:
    """Execute one RL run in the foreground and write its run directory (resumes it if it has a checkpoint).

    Example: ablate train recipes/base.yaml loss=dapo train.max_steps=100 --run-dir /tmp/run1
    """
    import signal

    from ablate.compose.recipe import compose_run
    from ablate.render.runs import run_end
    from ablate.storage import fs
    from ablate.train.foreground import prepare_run_dir, resume_command
    from ablate.train.loop import run as run_train
    from ablate.train.stopping import Stop, stop_on_signals

    if s.old_out is not None:  # --out is the file report and calibrate write; a run's directory has its own name
        raise UserError(
            f"--out {s.old_out}: train writes a run directory; give it as --run-dir {s.old_out}", kind=ErrorKind.SETTING
        )
    config = compose_run(s.recipe, [*(s.overrides or []), *track_overrides(s.track, s.tensorboard)])
    run_dir = prepare_run_dir(config, s.run_dir, group_read=s.group_read)
    typer.echo(f"run directory: {run_dir}")
    trackers = [*(s.track or []), *(["tensorboard"] if s.tensorboard else [])]
    again = resume_command(s.recipe, list(s.overrides or []), run_dir, threads=s.threads, trackers=trackers)
    try:  # a signal stops the run at a step boundary; its number is the exit status
        with stop_on_signals() as stop, fs.sweep_umask(fs.group_readable(run_dir)):
            summary = run_train(config, run_dir, threads=s.threads, stop=stop)
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once
        typer.echo(f"interrupted; resume from the last checkpoint with: {again}", err=True)
        raise typer.Exit(130) from None
    typer.echo(run_end(summary))
    if summary.status == RunState.DIVERGED:
        raise typer.Exit(3)
    if summary.status == RunState.PREEMPTED and isinstance(stop, Stop) and stop.signum is not None:  # not finished
        at = f" at step {summary.step}" if summary.step is not None else ""
        typer.echo(f"stopped by {signal.Signals(stop.signum).name}{at}; resume with: {again}", err=True)
        raise typer.Exit(stop.exit_code())  # the shell's convention (Stop.exit_code)
