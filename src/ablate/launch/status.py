"""`ablate status`: every run of a sweep from the files alone (ledger + each run's metrics tail), plus at most one
batched `sacct` call per refresh when SLURM runs are live. Read-only: it never writes, so it is safe from any shell
while the sweep runs. Also the progress bar of `ablate sweep --follow` and `wait_for` (tests, benchmarks)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ablate.launch.liveness import current_states
from ablate.states import STOPPED, TERMINAL, RunState
from ablate.storage import store
from ablate.storage.ledger import Ledger
from ablate.storage.metricsfile import TRUNCATION_WARN
from ablate.storage.rundir import RunDir, sweep_dir, sweep_run_dirs
from ablate.text import safe
from ablate.track.fanout import unsent

COUNTED = (
    RunState.DONE,
    RunState.DIVERGED,
    RunState.RUNNING,
    RunState.REQUEUED,
    RunState.PENDING,
    RunState.FAILED,
    RunState.PREEMPTED,
    RunState.LOST,
    RunState.PRUNED,
    RunState.UNSTABLE,
)
"""The states `ablate status` shows a run in, in the order its JSON summary counts them."""


@dataclass
class RunStatus:
    run_id: str
    label: str
    state: RunState
    """One of COUNTED: the ledger's submitting and queued show as pending, a run it holds no current submission of
    as lost."""
    cause: str | None
    job_id: str | None
    executor: str
    step: int | None
    max_steps: int | None
    val_pass_rate: float | None
    gpu_hours: float | None
    truncation_rate: float | None
    truncation_warning: bool
    attempts: int
    requeues: int
    error: str | None
    log: str | None
    reason: str | None = None
    """pruned / unstable: why the prune monitor stopped it."""
    trackers_behind: tuple[str, ...] = ()
    """The trackers this run's end left behind (ablate.track.fanout.UNSENT), until `ablate sync` sends them."""

    @property
    def progress(self) -> float | None:
        if self.step is None or not self.max_steps:
            return None
        return min(1.0, self.step / self.max_steps)

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL


def sweep_status(root: Path | str, name: str) -> list[RunStatus]:
    """The status of every run in `root/name`'s ledger, in submission order."""
    sdir = sweep_dir(root, name)
    if not (sdir / "ledger.jsonl").exists():
        raise_missing(root, name)
    check_ledger(sdir)
    sweep_run_dirs(sdir)  # a link planted among the runs is refused, as every reader of a sweep refuses it
    recs, verdicts = current_states(Ledger(sdir))
    out = []
    for rid, r in recs.items():
        v = verdicts.get(rid)
        state, cause, error = (v.state, v.cause, v.error) if v else (r.state, r.cause, r.error)
        if state == RunState.NEW:
            state = RunState.LOST  # its submitter died before handing it over; `ablate sweep` resubmits it
        elif state in (RunState.SUBMITTING, RunState.QUEUED):
            state = RunState.PENDING
        rd = RunDir.of(root, name, rid)
        m = rd.last_metrics() or {}
        behind = unsent(rd.path) if state in TERMINAL else None  # a live run's own trackers send it
        trunc = store.finite_number(m.get("truncation_rate"))
        out.append(
            RunStatus(
                run_id=rid,
                label=r.label,
                state=RunState(state),
                cause=cause,
                job_id=r.job_id,
                executor=r.executor,
                step=_step(m.get("step")),
                max_steps=_step(r.max_steps),
                val_pass_rate=store.finite_number(m.get("val_pass_rate")),
                gpu_hours=store.finite_number(m.get("gpu_hours")),
                truncation_rate=trunc,
                truncation_warning=isinstance(trunc, (int, float)) and trunc > TRUNCATION_WARN,
                attempts=r.attempts,
                requeues=r.requeues,
                error=error,
                log=r.log,
                reason=r.reason,
                trackers_behind=behind.trackers if behind else (),
            )
        )
    return out


def _step(v: Any) -> int | None:
    """A step count: an integer in [0, 2^53] (past that, no run's: progress would overflow), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 2**53 else None


def check_ledger(sdir: Path | str) -> None:
    """A ledger that is there but no file (a directory, a device): one UserError line, before anything reads or
    appends to it."""
    path = Path(sdir) / "ledger.jsonl"
    if path.exists() and not path.is_file():
        from ablate.errors import ErrorKind, UserError

        what = "a directory" if path.is_dir() else "not a regular file"
        raise UserError(
            f"{safe(path)}: {what}, not the sweep's ledger file; move it aside (the run directories keep "
            "their results) and run `ablate sweep` again to write a new one",
            kind=ErrorKind.FILE,
        )


def raise_missing(root: Path | str, name: str) -> None:
    from ablate.errors import ErrorKind, UserError

    have = ", ".join(list_sweeps(root)) or "none"
    raise UserError(
        f"no sweep {name!r} under {root}/ (sweeps there: {have}); run `ablate sweep RECIPE` first", kind=ErrorKind.FILE
    )


def list_sweeps(root: Path | str) -> list[str]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/ledger.jsonl"))


def summary(statuses: Sequence[RunStatus]) -> dict[str, Any]:
    counts = Counter(s.state for s in statuses)
    return {
        "runs": len(statuses),
        **{str(k): counts.get(k, 0) for k in COUNTED},
        "gpu_hours": round(sum(s.gpu_hours or 0.0 for s in statuses), 4),
        "truncation_warnings": sum(s.truncation_warning for s in statuses),
        "trackers_behind": sum(bool(s.trackers_behind) for s in statuses),
        "pruning": pruning_saved(statuses),
    }


def pruning_saved(statuses: Sequence[RunStatus]) -> dict[str, float] | None:
    """Compute the pruned and unstable runs did not spend, against running every run to its max_steps (GPU-hours,
    each stopped run's spend per step times the steps it had left), or None when nothing was stopped. In that
    total, running runs count at their max_steps too, runs that failed or diverged at what they spent, and runs not
    started yet at the median run's cost."""
    stopped = [s for s in statuses if s.state in STOPPED]
    if not stopped:
        return None

    def at_end(s: RunStatus) -> float:
        g = s.gpu_hours or 0.0
        if s.state in (RunState.FAILED, RunState.DIVERGED):
            return g
        return g * s.max_steps / s.step if s.step and s.max_steps and s.step < s.max_steps else g

    started = [at_end(s) for s in statuses if s.step]
    typical = float(sorted(started)[len(started) // 2]) if started else 0.0
    full = sum(at_end(s) if s.step else typical for s in statuses)
    kept = sum(at_end(s) - (s.gpu_hours or 0.0) for s in stopped)
    return {
        "runs": len(stopped),
        "gpu_hours_saved": kept,
        "gpu_hours_full": full,
        "share": kept / full if full > 0 else 0.0,
    }


def status_json(name: str, statuses: Sequence[RunStatus]) -> dict[str, Any]:
    return {
        "sweep": name,
        "summary": summary(statuses),
        "runs": [{**asdict(s), "progress": s.progress} for s in statuses],
    }


def wait_for(
    root: Path | str,
    name: str,
    run_ids: Sequence[str],
    *,
    states: Collection[str] = TERMINAL,
    timeout: float = 60.0,
    interval: float = 0.3,
) -> dict[str, RunStatus]:
    """Poll until each run in `run_ids` is in one of `states` (tests, bench); raises TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        sts = {s.run_id: s for s in sweep_status(root, name) if s.run_id in run_ids}
        if len(sts) == len(set(run_ids)) and all(s.state in states for s in sts.values()):
            return sts
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"runs not in {states} after {timeout}s: " + ", ".join(f"{k}={v.state}" for k, v in sts.items())
            )
        time.sleep(interval)


__all__ = ["RunStatus", "list_sweeps", "status_json", "sweep_status", "wait_for"]
