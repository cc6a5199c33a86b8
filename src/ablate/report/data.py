"""What `ablate report` shows, gathered from the sweep into plain records: what was swept (run.json and config.yaml
of each run), every run's status (ablate.status), the ranking and the extrapolation (ablate.analyses, with `ablate
rank`'s defaults) and the provenance. Nothing here decides a verdict; an analysis that cannot be done is kept as
the reason why. What the page shows: docs/report.md."""

from __future__ import annotations

import datetime
import os
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ablate
from ablate import store
from ablate.errors import UserError
from ablate.ledger import Ledger
from ablate.project import git_commit
from ablate.rundir import RunDir, sweep_run_dirs
from ablate.runinfo import RunInfo
from ablate.states import RunState
from ablate.status import RunStatus, check_ledger, sweep_status
from ablate.text import counted

if TYPE_CHECKING:
    from ablate.analyses import ExtrapolationReport, Inputs
    from ablate.fit.arms import Ranking
    from ablate.plan import PlanResult

Progress = Callable[[str], None]
Planner = Callable[[Path], "PlanResult"]
"""`ablate plan SWEEP` with its defaults (the command line's, given by ablate.cli.reporting)."""
UNDECIDED = ("inconclusive", "not_identified")

NOT_COMPARED_KEYS = ("seed", "launcher", "resources", "track")
"""config.yaml sections that never make an arm (seeds, where and how it ran): left out of the changes column."""


@dataclass
class SweptArm:
    """One arm as it was swept: what it changes against the baseline, its seeds and the compute of its runs."""

    label: str
    baseline: bool
    changes: list[str]
    seeds: list[str]
    runs: int
    trainer: str
    device: str
    max_steps: int | None
    samples: float | None
    """Samples (completions) per run, the mean of its runs' last metrics."""
    gpu_hours: float | None
    """GPU-hours per run, the mean of its runs' last metrics."""


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
    settled: tuple[Path, float] | None = None
    """A prune monitor's other target for the stopped arms (analyses.settled_elsewhere), said under the table."""
    plan: PlanResult | None = None
    """`ablate plan`'s answer, when some arm is undecided and the plan was asked for."""
    plan_missing: str | None = None


def sweep_folder(given: Path) -> Path:
    """The sweep directory SWEEP names: a path holding runs/, or a name under ./sweeps; else one UserError line."""
    for candidate in (given, Path("sweeps") / given):
        if (candidate / "runs").is_dir():
            return candidate
    if given.is_file():
        raise UserError(f"{given}: a file, not a sweep directory; give a sweep's directory, e.g. sweeps/NAME")
    if not given.exists():
        raise UserError(
            f"{given}: no such directory (nor sweeps/{given}); give the folder `ablate sweep` wrote, e.g. sweeps/NAME"
        )
    raise UserError(
        f"{given}: not a sweep directory (no runs/ folder in it); give the folder `ablate sweep` wrote, "
        "e.g. sweeps/NAME"
    )


def gather(sweep: Path, *, n_boot: int, command: str, progress: Progress, plan: Planner | None) -> ReportData:
    """Read the sweep and run the analyses behind the page, saying each step through `progress`; `plan` (when
    given) is run only when some arm is undecided."""
    from ablate import analyses
    from ablate.defaults import given_to

    progress(f"reading the runs of {sweep}")
    statuses = run_statuses(sweep)
    arms = swept_arms(sweep, statuses)
    opts = analyses.fit_options(n_boot=n_boot, ci=0.95, target=given_to(None), seed=0)
    reading = analyses.Reading("auto", "val_pass_rate", "run", None, "auto", None, None)
    ranking, extrapolation, fit_until, settled = None, None, None, None
    ranking_missing = extrapolation_missing = None
    try:
        inputs = analyses.read_inputs([sweep], reading)
    except UserError as e:
        ranking_missing = extrapolation_missing = f"no curves to fit: {e}"
    else:
        progress(f"ranking {counted(len({c.group for c in inputs.curves}), 'arm')} (n_boot {n_boot})")
        try:
            ranking = rank(inputs, opts, n_boot)
            settled = analyses.settled_elsewhere(ranking, inputs)
        except UserError as e:
            ranking_missing = str(e)
        progress("extrapolating the winner, checked on held-out points")
        try:
            extrapolation, fit_until = extrapolate(inputs, opts, ranking)
        except UserError as e:
            extrapolation_missing = str(e)
    launches = recorded_launches(sweep)
    planned, plan_missing = None, None
    if plan is not None and ranking is not None and any(a.verdict in UNDECIDED for a in ranking.arms):
        progress("planning what would decide the undecided arms (ablate plan)")
        try:
            planned = plan(sweep)
        except UserError as e:
            plan_missing = str(e)
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
        settled=settled,
        plan=planned,
        plan_missing=plan_missing,
    )


def rank(inputs: Inputs, opts: Any, n_boot: int) -> Ranking:
    """`ablate rank SWEEP` with its defaults (--n-boot aside): the same verdicts as the command prints."""
    from ablate import analyses
    from ablate.fit.spread import MinEffect

    paper = MinEffect()  # rank's defaults: the paper's smallest effects
    settings = analyses.check_rank_settings(
        baseline=None,
        margin=None,
        shared_a="pair",
        noise=None,
        save_noise=None,
        min_effect=paper.a,
        min_effect_compute=paper.ratio,
        n_boot=n_boot,
        window=False,
    )
    return analyses.rank_inputs(inputs, opts, settings, to=None, jobs=store.cpu_count())


def extrapolate(inputs: Inputs, opts: Any, ranking: Ranking | None) -> tuple[ExtrapolationReport, float]:
    """`ablate extrapolate SWEEP --fit-until HALF --to TARGET`, as the demo runs it: the winner fitted on the first
    half of the compute its runs reached, projected to the ranking's target, and checked on the held-out half."""
    from dataclasses import replace

    from ablate import analyses

    top = max(float(c.x.max()) for c in inputs.curves)
    fit_until = float(f"{top / 2:.3g}")
    to = ranking.target if ranking is not None else None
    report = analyses.extrapolate_inputs(inputs, replace(opts, fit_until=fit_until), arm=None, to=to, window=False)
    return report, fit_until


def run_statuses(sweep: Path) -> list[RunStatus]:
    """`ablate status`'s rows; a sweep folder with no ledger (runs copied from elsewhere) is read from run.json."""
    if (sweep / "ledger.jsonl").exists():
        check_ledger(sweep)
        return sweep_status(sweep.resolve().parent, sweep.resolve().name)
    rows = [status_from_run_json(rd) for rd in sweep_run_dirs(sweep)]
    return sorted(rows, key=lambda s: s.label)


def status_from_run_json(rd: RunDir) -> RunStatus:
    """A run's status row from its own files only (run.json and the tail of metrics.jsonl)."""
    from ablate.rundir import TRUNCATION_WARN

    info = rd.info()
    m = rd.last_metrics() or {}
    try:
        state = RunState(info.status)
    except ValueError:
        state = RunState.LOST
    trunc = store.finite_number(m.get("truncation_rate"))
    step = m.get("step")
    return RunStatus(
        run_id=info.run_id,
        label=info.label or info.run_id,
        state=state,
        cause=info.cause,
        job_id=info.raw.get("job_id") if isinstance(info.raw.get("job_id"), str) else None,
        executor=str(info.raw.get("executor") or ""),
        step=step if isinstance(step, int) and not isinstance(step, bool) else info.step,
        max_steps=info.max_steps,
        val_pass_rate=store.finite_number(m.get("val_pass_rate")),
        gpu_hours=store.finite_number(m.get("gpu_hours")),
        truncation_rate=trunc,
        truncation_warning=trunc is not None and trunc > TRUNCATION_WARN,
        attempts=attempt if isinstance(attempt := info.raw.get("attempt"), int) and attempt >= 1 else 1,
        requeues=0,
        error=None if info.error is None else info.why(),
        log=None,
        reason=info.reason,
    )


def run_warnings(s: RunStatus) -> list[str]:
    """What a reader of a run's row should know: why it ended as it did, requeues, truncation."""
    out = []
    if s.state in (RunState.FAILED, RunState.PREEMPTED, RunState.LOST, RunState.DIVERGED) and (s.error or s.cause):
        out.append(str(s.error or s.cause))
    if s.reason:
        out.append(str(s.reason))
    if s.requeues:
        out.append(f"requeued {s.requeues}x")
    if s.truncation_warning and s.truncation_rate is not None:
        out.append(f"truncation {s.truncation_rate:.0%} (over 10%: the pass rate is biased)")
    return out


def swept_arms(sweep: Path, statuses: list[RunStatus]) -> list[SweptArm]:
    """Each arm, in the order its runs were submitted, with its changes against the baseline's config.yaml."""
    by_id = {s.run_id: s for s in statuses}
    runs: dict[str, list[tuple[RunInfo, dict[str, Any], dict[str, Any]]]] = {}
    for rd in sweep_run_dirs(sweep):  # no link followed: a linked run, or file of one, is refused in one line
        info = rd.info()
        runs.setdefault(info.arm, []).append((info, flat_config(rd), rd.last_metrics() or {}))
    order = list(dict.fromkeys(RunInfo(s.run_id, label=s.label).arm for s in statuses))
    labels = [a for a in order if a in runs] + [a for a in runs if a not in order]
    base = next((a for a in labels if any(i.baseline for i, _, _ in runs[a])), None)
    labels.sort(key=lambda a: a != base)  # the baseline first, the others as they were submitted
    base_cfg = runs[base][0][1] if base else {}
    out = []
    for label in labels:
        members = runs[label]
        info, cfg, _ = members[0]
        st = [by_id[i.run_id] for i, _, _ in members if i.run_id in by_id]
        out.append(
            SweptArm(
                label=label,
                baseline=label == base,
                changes=changes(cfg, base_cfg, info.overrides) if label != base else [],
                seeds=sorted((seed_of(i, c) for i, c, _ in members), key=seed_order),
                runs=len(members),
                trainer=str(cfg.get("trainer.name") or info.raw.get("trainer") or "—"),
                device=", ".join(sorted({str(i.raw.get("device") or "—") for i, _, _ in members})),
                max_steps=info.max_steps,
                samples=mean([store.finite_number(m.get("samples")) for _, _, m in members]),
                gpu_hours=mean([s.gpu_hours for s in st]),
            )
        )
    return out


def flat_config(rd: RunDir) -> dict[str, Any]:
    """A run's config.yaml as dotted keys (empty when it has none: runs written by other tools)."""
    import yaml

    try:
        with store.safe_open(rd.at(rd.config_path), "r") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return {}
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        else:
            out[prefix[:-1]] = node

    walk(data if isinstance(data, dict) else {}, "")
    return out


def changes(cfg: dict[str, Any], base: dict[str, Any], overrides: list[str]) -> list[str]:
    """`key: baseline's → this arm's` for each recipe value that differs (both config.yaml read), else the overrides
    the run recorded; seeds and where it ran are not changes."""
    if not cfg or not base:
        return [o for o in overrides if not o.startswith("seed=")]
    keys = [k for k in dict.fromkeys([*base, *cfg]) if k.split(".")[0] not in NOT_COMPARED_KEYS]
    return [f"{k}: {base.get(k, '—')} → {cfg.get(k, '—')}" for k in keys if base.get(k) != cfg.get(k)]


def seed_of(info: RunInfo, cfg: dict[str, Any]) -> str:
    """The run's seed: config.yaml's, else the `seed=` part of its label."""
    if "seed" in cfg:
        return str(cfg["seed"])
    return next((p.split("=", 1)[1] for p in info.label.split(",") if p.startswith("seed=")), "—")


def seed_order(seed: str) -> tuple[bool, int, str]:
    """Seeds in numeric order (2 before 10), any that is not a number after them."""
    return (not seed.isdigit(), int(seed) if seed.isdigit() else 0, seed)


def mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def provenance(sweep: Path, launches: list[Launch]) -> dict[str, str]:
    """Where the page comes from: ablate's version, the recipes' commit, the date and the machine. The commit is the
    newest launch's; when no launch recorded one, the sweep folder's checkout today, said as such; never the
    working directory's (an unrelated checkout, as often as not)."""
    commit = next((x.commit for x in reversed(launches) if x.commit), None)
    if commit is None:
        now = git_commit(sweep.resolve())
        commit = "not recorded" if now is None else f"{now} (the sweep folder's checkout today: no launch recorded one)"
    return {
        "ablate": ablate.__version__,
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
