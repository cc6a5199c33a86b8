"""What `ablate report` shows, gathered from the sweep into plain records: what was swept and every run's status
(ablate.report.runs), the ranking and the extrapolation (ablate.analysis.verbs, with `ablate rank`'s defaults, or the
settings the sweep recorded deciding with) and the provenance. Nothing here decides a verdict; an analysis that
cannot be done is kept as the reason why. What the page shows: docs/report.md."""

from __future__ import annotations

import datetime
import os
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.compose.project import git_commit
from ablate.errors import ErrorKind, UserError
from ablate.launch.status import RunStatus
from ablate.report.runs import SweptArm, run_statuses, swept_arms
from ablate.storage import fs
from ablate.storage.ledger import Ledger
from ablate.text import as_cli, counted
from ablate.version import installed

if TYPE_CHECKING:
    from ablate.analysis.plan import PlanResult
    from ablate.analysis.verbs import ExtrapolationReport, Inputs
    from ablate.fit.arms import Ranking
    from ablate.fit.settings import Analysis, Elsewhere

Progress = Callable[[str], None]
Planner = Callable[[Path], "PlanResult"]
"""`ablate plan SWEEP` with its defaults (the command line's, given by ablate.cli.reporting)."""
UNDECIDED = ("inconclusive", "not_identified")


@dataclass
class Launch:
    """One `ablate sweep` that submitted a batch, from the ledger's `launch` event; None: not recorded there."""

    date: str
    command: str | None
    cwd: str | None
    commit: str | None
    host: str | None
    ablate: str | None


@dataclass
class ReportData:
    """Everything the page shows; `*_missing` is the reason an analysis could not be done (then its field is None)."""

    sweep: Path
    name: str
    arms: list[SweptArm]
    statuses: list[RunStatus]
    ranking: Ranking | None
    ranking_missing: str | None
    extrapolation: ExtrapolationReport | None
    extrapolation_missing: str | None
    provenance: dict[str, str]
    command: str
    launches: list[Launch]
    """Every launch of the sweep the ledger recorded, oldest first."""
    fit_until: float | None = None
    """Where the extrapolation's fit window ends (the points after it are its held-out check)."""
    elsewhere: Elsewhere | None = None
    """A sweep's recorded decisions made with another analysis (verbs.decided_elsewhere), said under the table."""
    analysis_source: str | None = None
    """Where the ranking's settings came from, when the sweep recorded the ones it decided with."""
    plan: PlanResult | None = None
    """`ablate plan`'s answer, when some arm is undecided and the plan was asked for."""
    plan_missing: str | None = None


def sweep_folder(given: Path) -> Path:
    """The sweep directory SWEEP names: a path holding runs/, or a name under ./sweeps; else one UserError line."""
    for candidate in (given, Path("sweeps") / given):
        if (candidate / "runs").is_dir():
            return candidate
    if given.is_file():
        raise UserError(
            f"{given}: a file, not a sweep directory; give a sweep's directory, e.g. sweeps/NAME", kind=ErrorKind.FILE
        )
    if not given.exists():
        raise UserError(
            f"{given}: no such directory (nor sweeps/{given}); give the folder `ablate sweep` wrote, e.g. sweeps/NAME",
            kind=ErrorKind.FILE,
        )
    raise UserError(
        f"{given}: not a sweep directory (no runs/ folder in it); give the folder `ablate sweep` wrote, "
        "e.g. sweeps/NAME",
        kind=ErrorKind.FILE,
    )


def gather(sweep: Path, *, n_boot: int, command: str, progress: Progress, plan: Planner | None) -> ReportData:
    """Read the sweep and run the analyses behind the page, saying each step through `progress`; `plan` (when
    given) is run only when some arm is undecided."""
    from ablate.analysis import verbs
    from ablate.analysis.choices import given_to

    progress(f"reading the runs of {sweep}")
    statuses = run_statuses(sweep)
    arms = swept_arms(sweep, statuses)
    reading = verbs.Reading("auto", "val_pass_rate", "run", None, "auto", None, None)
    ranking, extrapolation, fit_until, elsewhere, source = None, None, None, None, None
    ranking_missing = extrapolation_missing = None
    try:
        inputs = verbs.read_inputs([sweep], reading)
    except UserError as e:
        ranking_missing = extrapolation_missing = f"no curves to fit: {as_cli(e)}"
    else:
        analysis, source = page_analysis(inputs, n_boot)
        opts = analysis.options(given_to(analysis.to))
        opts.validate()
        progress(f"ranking {counted(len({c.group for c in inputs.curves}), 'arm')} (n_boot {analysis.n_boot})")
        try:
            ranking = rank(inputs, opts, analysis)
            elsewhere = verbs.decided_elsewhere(ranking, inputs)
        except UserError as e:
            ranking_missing = as_cli(e)
        progress("extrapolating the winner, checked on held-out points")
        try:
            extrapolation, fit_until = extrapolate(inputs, opts, ranking)
        except UserError as e:
            extrapolation_missing = as_cli(e)
    launches = recorded_launches(sweep)
    planned, plan_missing = None, None
    if plan is not None and ranking is not None and any(a.verdict in UNDECIDED for a in ranking.arms):
        progress("planning what would decide the undecided arms (ablate plan)")
        try:
            planned = plan(sweep)
        except UserError as e:
            plan_missing = as_cli(e)
    return ReportData(
        sweep=sweep,
        name=sweep.resolve().name,
        arms=arms,
        statuses=statuses,
        ranking=ranking,
        ranking_missing=ranking_missing,
        extrapolation=extrapolation,
        extrapolation_missing=extrapolation_missing,
        provenance=provenance(sweep, launches),
        command=command,
        launches=launches,
        fit_until=fit_until,
        elsewhere=elsewhere,
        analysis_source=source,
        plan=planned,
        plan_missing=plan_missing,
    )


def page_analysis(inputs: Inputs, n_boot: int) -> tuple[Analysis, str | None]:
    """The analysis the page ranks with: the one the sweep's --prune monitor recorded settling arms with, so that
    the page shows the verdicts the sweep acted on, and where it came from; else rank's defaults."""
    from ablate.analysis import verbs
    from ablate.fit.settings import Analysis
    from ablate.render.rank import rank_command

    found = verbs.recorded_analysis(inputs)
    if found is None:
        return Analysis(inputs.x, n_boot=n_boot), None
    sweep, by, recorded = found
    return recorded, f"ranked with the settings this sweep's {by} settled arms with: `{rank_command(sweep, recorded)}`"


def rank(inputs: Inputs, opts: Any, analysis: Analysis) -> Ranking:
    """`ablate rank SWEEP` with `analysis`'s flags: the same verdicts as the command prints."""
    from ablate.analysis import verbs

    settings = verbs.check_rank_settings(
        baseline=None,
        margin=None,
        shared_a="pair",
        noise=None,
        save_noise=None,
        min_effect=analysis.min_effect.a,
        min_effect_compute=analysis.min_effect.ratio,
        n_boot=analysis.n_boot,
        window=False,
    )
    return verbs.rank_inputs(inputs, opts, settings, to=analysis.to, jobs=fs.cpu_count())


def extrapolate(inputs: Inputs, opts: Any, ranking: Ranking | None) -> tuple[ExtrapolationReport, float]:
    """`ablate extrapolate SWEEP --fit-until HALF --to TARGET`, as the demo runs it: the winner fitted on the first
    half of the compute its runs reached, projected to the ranking's target, and checked on the held-out half."""
    from dataclasses import replace

    from ablate.analysis import verbs

    top = max(float(c.x.max()) for c in inputs.curves)
    fit_until = float(f"{top / 2:.3g}")
    to = ranking.target if ranking is not None else None
    report = verbs.extrapolate_inputs(inputs, replace(opts, fit_until=fit_until), arm=None, to=to, window=False)
    return report, fit_until


def provenance(sweep: Path, launches: list[Launch]) -> dict[str, str]:
    """Where the page comes from: ablate's version, the recipes' commit, the date and the machine. The commit is the
    newest launch's; when no launch recorded one, the sweep folder's checkout today, said as such; never the
    working directory's (an unrelated checkout, as often as not)."""
    commit = next((x.commit for x in reversed(launches) if x.commit), None)
    if commit is None:
        now = git_commit(sweep.resolve())
        commit = "not recorded" if now is None else f"{now} (the sweep folder's checkout today: no launch recorded one)"
    return {
        "ablate": installed(),
        "commit": commit,
        "date": utc(datetime.datetime.now(datetime.UTC).timestamp()),
        "machine": f"{socket.gethostname()} · {platform.platform()} · {cpu_name()} ({os.cpu_count()} cores)",
    }


def recorded_launches(sweep: Path) -> list[Launch]:
    """The ledger's `launch` events (docs/run-directory.md), oldest first; a field of the wrong type reads as not
    recorded. A sweep with no ledger, or launched before ablate recorded launches, has none."""
    if not (sweep / "ledger.jsonl").is_file():
        return []

    def text(ev: dict[str, Any], key: str) -> str | None:
        v = ev.get(key)
        return v if isinstance(v, str) and v else None

    out = []
    for ev in Ledger(sweep).events():
        if ev.get("event") != "launch":
            continue
        out.append(Launch(utc(ev.get("t")), *(text(ev, k) for k in ("command", "cwd", "commit", "host", "ablate"))))
    return out


def utc(t: Any) -> str:
    """A ledger time (Unix seconds) as the page writes dates; "—" for one that is not a time."""
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return "—"
    try:
        return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "—"


def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
