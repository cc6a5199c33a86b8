"""The sweep ledger: `<root>/<sweep>/ledger.jsonl`, an append-only log of launch events, and the run states folded
from it (`Ledger.fold` -> `RunRecord`s).

Only the events of a run's latest `submitting` batch count, and a job must claim its run under the sweep's lock
(its batch still current, the run not ended) before it starts: that is what makes `ablate sweep` safe to re-run
and keeps a run from being executed twice. Appends are whole lines (ablate.storage.store), so a reader sees at worst a
torn last line; a line that is not an event of this format is ignored field by field, and a run id that is not a plain
name is skipped, so no ledger line can steer a path.

The events, their fields and the failure causes: docs/run-directory.md, "ledger.jsonl". Whether the runs the ledger
calls live still are is ablate.launch.liveness's business.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.config.identity import is_name
from ablate.states import FINISHED, STOPPED, RunState
from ablate.storage import locks, store


@dataclass
class RunRecord:
    """The state of one run, folded from its ledger events (current batch only)."""

    run_id: str
    label: str = ""
    batch: str = ""
    executor: str = ""
    state: RunState = RunState.NEW
    """new (no current submission: never submitted, or its submitter died before the executor took it), submitting,
    queued, running, requeued, or a TERMINAL state."""
    job_id: str | None = None
    pid: int | None = None
    """pid of the job process (local, debug) from its last `started` event, for liveness checks."""
    pid_start: int | None = None
    runner: dict[str, int] | None = None
    dispatched: dict[str, int] | None = None
    """local: the job controller a runner started for it (it holds one of the sweep's slots until the run ends)."""
    launcher: dict[str, int] | None = None
    attempts: int = 0
    requeues: int = 0
    cause: str | None = None
    error: str | None = None
    log: str | None = None
    max_steps: int | None = None
    prune: bool = False
    """The current submission let the prune monitor stop it (`ablate sweep --prune`)."""
    reason: str | None = None
    """pruned / unstable: why the monitor stopped it."""

    def apply(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "submitting":
            # A new submission starts a fresh record: older batches no longer count.
            fresh = RunRecord(self.run_id, label=_str(ev, "label") or self.label)
            self.__dict__.update(fresh.__dict__)
            self.batch = _str(ev, "batch") or ""
            self.executor = _str(ev, "executor") or ""
            self.launcher = _proc(ev, "launcher")
            self.max_steps = _int(ev, "max_steps")
            self.prune = ev.get("prune") is True
            self.state = RunState.SUBMITTING
            return
        if _str(ev, "batch") != self.batch or not self.batch:
            return  # an orphan of a superseded submission
        if self.state in FINISHED:
            return  # nothing unfinishes a run: not a signal that came after its end, nor a launcher's late verdict
        job_id = ev.get("job_id")
        if isinstance(job_id, (str, int)) and not isinstance(job_id, bool) and job_id != "":
            self.job_id = str(job_id)
        if kind == "submitted":
            self.runner = _proc(ev, "runner") or self.runner
            if self.state == RunState.SUBMITTING:
                self.state = RunState.QUEUED
        elif kind == "dispatched":
            self.dispatched = _proc(ev, "controller")
        elif kind == "started":
            self.state = RunState.RUNNING
            self.pid, self.pid_start = _int(ev, "pid"), _int(ev, "start")
            self.attempts = _int(ev, "attempt") or self.attempts + 1
            self.log = _str(ev, "log") or self.log
        elif kind == "preempted":
            requeue = ev.get("requeue") is True
            self.state = RunState.REQUEUED if requeue else RunState.PREEMPTED
            self.requeues = _int(ev, "requeues") or self.requeues
            self.cause = None if requeue else "preempted"
        elif kind == "requeued":
            self.state = RunState.REQUEUED
            self.requeues = _int(ev, "requeues") or self.requeues
        elif kind == "finished":
            status = _str(ev, "status")
            self.state = RunState(status) if status in FINISHED | STOPPED else RunState.DONE
            self.reason = _str(ev, "reason") if status in STOPPED else None
        elif kind == "failed":
            self.state = RunState.FAILED
            self.cause = _str(ev, "cause")
            self.error = _str(ev, "error")
            self.log = _str(ev, "log") or self.log


def _str(ev: dict[str, Any], key: str) -> str | None:
    v = ev.get(key)
    return v if isinstance(v, str) else None


def _int(ev: dict[str, Any], key: str) -> int | None:
    v = ev.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _proc(ev: dict[str, Any], key: str) -> dict[str, int] | None:
    """A {pid, start} process reference, or None when the field is missing or malformed."""
    v = ev.get(key)
    if isinstance(v, dict) and _int(v, "pid") is not None:
        return {"pid": v["pid"], "start": _int(v, "start") or 0}
    return None


def proc_start(pid: int) -> int | None:
    """Start time of process `pid` (clock ticks since boot), or None if it is gone or a zombie.

    Stored next to every pid so that a recycled pid is never taken for the original process.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = raw[raw.rfind(")") + 2 :].split()  # the command name may contain spaces and parens
    if rest[0] in ("Z", "X"):  # a zombie is dead even though kill -0 succeeds
        return None
    return int(rest[19])


def proc_alive(pid: int | None, start: int | None) -> bool:
    if not pid:
        return False
    now = proc_start(int(pid))
    return now is not None and (start is None or now == start)


def me() -> dict[str, int]:
    """This process, as stored in the ledger: pid plus start time."""
    return {"pid": os.getpid(), "start": proc_start(os.getpid()) or 0}


class Ledger:
    """`sweeps/<name>/ledger.jsonl` plus its lock file."""

    def __init__(self, sweep_dir: Path | str):
        self.dir = Path(sweep_dir)
        self.path = self.dir / "ledger.jsonl"

    @contextlib.contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[locks.Lock]:
        """Exclusive lock for read-decide-write sequences on the sweep (an flock on the sweep directory itself, so
        no lock file can be deleted from under its holder); released by the kernel if the holder dies.

        With `timeout`, gives up after that many seconds and runs unlocked (`.locked` is False): used from signal
        handlers, where the interrupted code may itself hold the lock (a second flock would deadlock). Unlocked
        appends are still whole lines, so the only loss is the decision atomicity.
        """
        with locks.dir_lock(self.dir, timeout=timeout) as held:
            yield held

    def events(self) -> list[dict[str, Any]]:
        return store.read_jsonl(self.path)

    def fold(self, events: Iterable[dict[str, Any]] | None = None) -> dict[str, RunRecord]:
        """Run id -> its record, in first-submission order."""
        recs: dict[str, RunRecord] = {}
        for ev in self.events() if events is None else events:
            rid = ev.get("run_id")
            if not is_name(rid):
                continue
            rec = recs.get(rid)
            if rec is None:
                rec = recs[rid] = RunRecord(rid)
            rec.apply(ev)
        return recs

    def first_batches(self) -> dict[str, str]:
        """Run id -> the batch that first submitted it (the wave of `ablate sweep` that added the run)."""
        out: dict[str, str] = {}
        for ev in self.events():
            rid, batch = ev.get("run_id"), _str(ev, "batch")
            if ev.get("event") == "submitting" and is_name(rid) and batch is not None:
                out.setdefault(rid, batch)
        return out

    def launch_overrides(self) -> list[str]:
        """The recipe overrides of the sweep's first recorded `ablate sweep` (its seeds left out), so that a command
        adding runs to the sweep makes the same configs; [] when none is recorded. The ledger may be another user's:
        only overrides of a run's id set to plain values are carried (ablate.config.keys.carried), never one that
        chooses where data goes or a sweep of values."""
        import shlex

        from ablate.config.keys import carried

        for ev in self.events():
            command = ev.get("command")
            if ev.get("event") != "launch" or not isinstance(command, str):
                continue
            try:
                words = shlex.split(command)
            except ValueError:
                return []
            if words[:2] != ["ablate", "sweep"]:
                return []
            return [w for w in words[3:] if not w.startswith("seed=") and carried(w)]
        return []

    def append(self, *records: dict[str, Any]) -> None:
        """Append events in one write() + one fsync (a batch of 100 costs one disk flush, not 100)."""
        if not records:
            return
        now = round(time.time(), 3)
        store.append_jsonl(self.path, *({"t": now, **r} for r in records))


def hostname() -> str:
    return socket.gethostname()
