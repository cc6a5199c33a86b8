"""`ablate report`: a sweep as one self-contained HTML page (ablate.report; what it shows: docs/report.md)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ablate.cli.commands import argument, option, shared, verb
from ablate.cli.options import WindowOptions
from ablate.errors import ErrorKind, UserError
from ablate.text import safe

if TYPE_CHECKING:
    from ablate.analysis.plan import PlanResult


@dataclass(frozen=True, kw_only=True)
class ReportSettings:
    """`ablate report`'s options."""

    sweep: Path = argument("The sweep's directory (sweeps/NAME), or its name under ./sweeps.")
    out: Path | None = option(
        None,
        "--out",
        doc="The HTML file to write (default: report-NAME.html in the current folder, NAME the sweep directory's "
        "name; never inside the sweep, which may be another user's). Written owner-only (mode 0600): send it on.",
        show_default=False,
    )
    n_boot: int = shared(WindowOptions, "n_boot")
    plan: bool = option(
        True,
        "--plan/--no-plan",
        doc="When an arm is undecided, run `ablate plan SWEEP` (its defaults; tens of seconds) to say what would "
        "decide it; --no-plan: the ranking's own seed estimate only.",
    )


@verb(ReportSettings)
def report(s: ReportSettings) -> None:
    """Write one self-contained HTML page of a sweep: what was swept, every run's status, the ranking with what each
    verdict means, the interactive fits, the efficiency view, the extrapolation with its held-out check, what would
    decide the undecided arms, and where it all came from. It needs no network to view: send the file.

    The analyses are `ablate rank SWEEP`'s, `ablate extrapolate`'s and `ablate plan SWEEP`'s with their defaults;
    a sweep whose --prune monitor recorded the settings it settled arms with is ranked with those.
    Steps go to stderr, the page's path to stdout.
    Example: ablate report sweeps/loss --out loss.html
    """
    from ablate.report import build_report, sweep_folder

    if s.n_boot == 0:
        raise UserError(
            "--n-boot 0: the ranking's verdicts rest on intervals; give --n-boot of 200 or more", kind=ErrorKind.SETTING
        )
    folder = sweep_folder(s.sweep)
    target = default_out(folder) if s.out is None else s.out
    check_out(target)
    command = shlex.join(
        [
            "ablate",
            "report",
            str(s.sweep),
            *(["--out", str(s.out)] if s.out is not None else []),
            *([] if s.plan else ["--no-plan"]),
        ]
    )

    def progress(step: str) -> None:
        typer.echo(f"report: {step}", err=True)

    planner = default_plan(progress) if s.plan else None
    written = build_report(folder, target, n_boot=s.n_boot, command=command, progress=progress, plan=planner)
    typer.echo(str(written))


def default_out(folder: Path) -> Path:
    """`./report-NAME.html`: the current folder, the reader's own, not the sweep, which may be another user's (its
    folder open to writers other than the reader, or its page readable by all)."""
    return Path(f"report-{Path(os.path.abspath(folder)).name or 'sweep'}.html")


def check_out(target: Path) -> None:
    """Where the page goes, refused before any work: a directory, a link, or a place that can't be written."""
    from ablate.storage.paths import check_writable_output

    if target.is_dir():
        raise UserError(
            f"--out {safe(target)}: is a directory; give a file name, e.g. --out {safe(target / 'report.html')}",
            kind=ErrorKind.FILE,
        )
    if target.is_symlink():
        raise UserError(
            f"--out {safe(target)}: is a symbolic link; the page is never written through one: remove it or "
            "choose another path",
            kind=ErrorKind.FILE,
        )
    check_writable_output(target, "--out")


def default_plan(progress: Callable[[str], None]) -> Callable[[Path], PlanResult]:
    """`ablate plan SWEEP` with the defaults of its options (ablate.cli.planning), its steps said by `progress`."""
    from ablate.analysis import verbs
    from ablate.cli import planning
    from ablate.fit.spread import MinEffect
    from ablate.storage import fs

    def run(sweep: Path) -> PlanResult:
        d = planning.PlanSettings(source=sweep)  # every other setting at its default
        common = dict(
            questions=planning.questions(d.question),
            delta_a=d.delta_a,
            ratio=d.ratio,
            goal=d.power,
            trials=d.trials,
            seed=0,
            jobs=fs.cpu_count(),
            noise=None,
            engine="fast",
            progress=None,
            min_effect=MinEffect(a=d.min_effect, ratio=d.min_effect_compute),
        )
        return verbs.plan_any(
            sweep,
            [],
            None,
            x="auto",
            baseline=None,
            to=None,
            futures=d.futures,
            reading=dict(fmt="auto", run="run", group=None),
            common=common,
            axis_line=None,
        )

    return run
