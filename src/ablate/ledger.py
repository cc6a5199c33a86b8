"""The sweep ledger: `sweeps/<name>/ledger.jsonl`, an append-only log of launch events, the run
states folded from it, and the liveness checks of runs it says are live (design.md §6).

Events (one JSON object per line; every event carries `event`, `t` (unix time), `run_id`, `batch`):

    submitting  label, executor, launcher {pid, start}, max_steps    written *before* the executor sees the run
    submitted   job_id (slurm), runner {pid, start} (local)          the executor accepted it
    started     job_id, pid, start, host, attempt, log               the job process claimed the run
    preempted   job_id, requeue (bool), requeues                     signal caught; checkpoint taken
    requeued    job_id, requeues                                     submitit requeued it (same job id)
    finished    job_id, status (done | diverged)
    failed      job_id, cause, error, log                            cause: exception | oom | timeout |
                                                                     node_failure | cancelled | killed | submit

`batch` is a random token per submission. The *current* batch of a run is the one of its latest
`submitting` event; events of any older batch are ignored. That is what makes re-runs safe: a job
process must *claim* its run before it starts (under the lock, its batch must still be current and
the run not ended), so a job orphaned by a launcher that died between `sbatch` and writing
`submitted` either ran (and its `started` event is in the ledger before the next plan is made) or
finds itself superseded and exits without touching the run directory.

Crash safety: appends are single `write()` calls of whole lines (O_APPEND) followed by fsync, so a
reader sees at worst a torn *last* line, which `store.iter_jsonl` skips and the next append
terminates. Decisions (plan + submit, claim) are made under an exclusive `fcntl.flock` on
`ledger.lock`, which the kernel releases when its holder dies, so a killed launcher never leaves the
sweep locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from ablate import store

# Folded states. `submitting` means the launcher wrote its intent but not the executor's answer;
# under the lock that can only mean the launcher died, so the plan treats such runs as new.
LIVE = ("submitting", "queued", "running", "requeued")
TERMINAL = ("done", "diverged", "failed", "preempted")


@dataclass
class RunRecord:
    """The state of one run, folded from its ledger events (current batch only)."""

    run_id: str
    label: str = ""
    batch: str = ""
    executor: str = ""
    state: str = "new"
    job_id: str | None = None
    pid: int | None = None
    """pid of the job process (local, debug) from its last `started` event, for liveness checks."""
    pid_start: int | None = None
    runner: dict[str, int] | None = None
    launcher: dict[str, int] | None = None
    attempts: int = 0
    requeues: int = 0
    cause: str | None = None
    error: str | None = None
    log: str | None = None
    max_steps: int | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    events: int = 0

    def apply(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "submitting":
            # A new submission starts a fresh record: older batches no longer count.
            fresh = RunRecord(self.run_id, label=ev.get("label", self.label))
            self.__dict__.update(fresh.__dict__)
            self.batch = ev.get("batch", "")
            self.executor = ev.get("executor", "")
            self.launcher = ev.get("launcher")
            self.max_steps = ev.get("max_steps")
            self.submitted_at = ev.get("t")
            self.state = "submitting"
            self.events = 1
            return
        if ev.get("batch") != self.batch or not self.batch:
            return  # an orphan of a superseded submission
        self.events += 1
        if ev.get("job_id"):
            self.job_id = str(ev["job_id"])
        if kind == "submitted":
            self.runner = ev.get("runner") or self.runner
            if self.state == "submitting":
                self.state = "queued"
        elif kind == "started":
            self.state = "running"
            self.pid, self.pid_start = ev.get("pid"), ev.get("start")
            self.attempts = ev.get("attempt", self.attempts + 1)
            self.started_at = self.started_at or ev.get("t")
            self.log = ev.get("log") or self.log
        elif kind == "preempted":
            self.state = "requeued" if ev.get("requeue") else "preempted"
            self.requeues = ev.get("requeues", self.requeues)
            self.cause = None if ev.get("requeue") else "preempted"
            if not ev.get("requeue"):
                self.ended_at = ev.get("t")
        elif kind == "requeued":
            self.state = "requeued"
            self.requeues = ev.get("requeues", self.requeues)
        elif kind == "finished":
            self.state = ev.get("status", "done")
            self.ended_at = ev.get("t")
        elif kind == "failed":
            self.state = "failed"
            self.cause = ev.get("cause")
            self.error = ev.get("error")
            self.log = ev.get("log") or self.log
            self.ended_at = ev.get("t")


def proc_start(pid: int) -> int | None:
    """Start time of process `pid` (clock ticks since boot), or None if it is gone or a zombie.

    Stored next to every pid so that a recycled pid is never taken for the original process.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = raw[raw.rfind(")") + 2 :].split()  # the command name may contain spaces and parens
    if rest[0] in ("Z", "X"):  # a zombie is dead even though kill -0 succeeds (slurm-notes G12)
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
        self.lock_path = self.dir / "ledger.lock"

    @contextlib.contextmanager
    def lock(self, timeout: float | None = None) -> Iterator["Ledger"]:
        """Exclusive lock for read-decide-write sequences; released by the kernel if we die.

        With `timeout`, gives up after that many seconds and runs unlocked: used from signal handlers,
        where the interrupted code may itself hold the lock (flock on a second descriptor would
        deadlock). Unlocked appends are still whole lines, so the only loss is the decision atomicity.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        locked = False
        try:
            if timeout is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
                locked = True
            else:
                deadline = time.monotonic() + timeout
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        locked = True
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.02)
            yield self
        finally:
            if locked:
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def events(self) -> list[dict[str, Any]]:
        return store.read_jsonl(self.path)

    def fold(self, events: Iterable[dict[str, Any]] | None = None) -> dict[str, RunRecord]:
        """Run id -> its record, in first-submission order."""
        recs: dict[str, RunRecord] = {}
        for ev in self.events() if events is None else events:
            rid = ev.get("run_id")
            if not rid:
                continue
            rec = recs.get(rid)
            if rec is None:
                rec = recs[rid] = RunRecord(rid)
            rec.apply(ev)
        return recs

    def append(self, *records: dict[str, Any]) -> None:
        """Append events in one write() + one fsync (a batch of 100 costs one disk flush, not 100)."""
        if not records:
            return
        now = round(time.time(), 3)
        store.append_jsonl(self.path, *({"t": now, **r} for r in records))


@dataclass
class RunFiles:
    """Helpers for `runs/<run_id>/run.json`, the per-run mirror of the ledger (design.md §4)."""

    run_dir: Path

    @property
    def path(self) -> Path:
        return self.run_dir / "run.json"

    def read(self) -> dict[str, Any]:
        try:
            return store.read_json(self.path)
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def update(self, **fields: Any) -> dict[str, Any]:
        """Read-modify-write with an atomic replace; the file is never seen half-written."""
        return store.update_json(self.path, **fields)


def hostname() -> str:
    return socket.gethostname()


# ---------------------------------------------------------------------------------------------
# Liveness: which "live" ledger states are still alive


SACCT_LIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED",
              "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
SACCT_CAUSE = {"CANCELLED": "cancelled", "TIMEOUT": "timeout", "OUT_OF_MEMORY": "oom", "NODE_FAIL": "node_failure",
               "BOOT_FAIL": "node_failure", "DEADLINE": "timeout", "FAILED": "exception",
               "COMPLETED": "no_result", "REVOKED": "cancelled", "GONE": "lost"}


def _expand_sacct_id(jid: str) -> list[str]:
    """`12_[1-3,5%2]` -> 12_1, 12_2, 12_3, 12_5; plain ids unchanged."""
    if "_[" not in jid:
        return [jid]
    base, rng = jid.split("_[", 1)
    out = []
    for part in rng.rstrip("]").split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        out += [f"{base}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def sacct_states(job_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """One batched `sacct` call: job id -> (STATE word, exit code). Missing ids are unknown (sacct
    lags a few seconds for array tasks, slurm-notes G9), which callers must treat as still alive."""
    bases = sorted({j.split("_")[0] for j in job_ids if j})
    if not bases or shutil.which("sacct") is None:
        return {}
    try:
        out = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(bases)],
                             capture_output=True, text=True, timeout=30)
    except (subprocess.TimeoutExpired, OSError):
        return {}
    if out.returncode != 0:  # accounting disabled on this cluster: fall back to one squeue call
        return squeue_states(job_ids)
    states: dict[str, tuple[str, str]] = {}
    for line in out.stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 3:
            continue
        for jid in _expand_sacct_id(parts[0]):
            states[jid] = (parts[1].split()[0] if parts[1] else "", parts[2])
    return states


def squeue_states(job_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Without accounting: one `squeue` call. A job it no longer lists has left the queue (state GONE):
    if it did not record its own end, it died (cancelled, killed, out of time) and we cannot say which."""
    bases = sorted({j.split("_")[0] for j in job_ids if j})
    if not bases or shutil.which("squeue") is None:
        return {}
    try:
        out = subprocess.run(["squeue", "-h", "-o", "%i|%T", "-j", ",".join(bases)], capture_output=True,
                             text=True, timeout=30)
    except (subprocess.TimeoutExpired, OSError):
        return {}
    if out.returncode != 0 and "Invalid job id" not in out.stderr:
        return {}  # the controller did not answer: know nothing rather than call everything dead
    listed: dict[str, tuple[str, str]] = {}
    for line in out.stdout.splitlines():
        jid, _, state = line.partition("|")
        for j in _expand_sacct_id(jid.strip()):
            listed[j] = (state.strip(), "")
    return {j: listed.get(j, ("GONE", "?")) for j in job_ids if j}


@dataclass
class Verdict:
    """What liveness checks concluded about one run."""

    state: str
    cause: str | None = None
    error: str | None = None


def check_live(recs: dict[str, RunRecord], *, locked: bool) -> dict[str, Verdict]:
    """For each run in a live state, whether it still is. Returns only the runs whose state changes.

    `locked`: the caller holds the ledger lock, so a `submitting` run can only belong to a launcher
    that died mid-submission (it is new again); without the lock it may be a launcher at work.
    """
    out: dict[str, Verdict] = {}
    slurm = [r for r in recs.values() if r.state in LIVE and r.state != "submitting" and r.executor == "slurm"]
    sacct = sacct_states([r.job_id for r in slurm if r.job_id]) if slurm else {}
    for r in recs.values():
        if r.state not in LIVE:
            continue
        if r.state == "submitting":
            if locked or not (r.launcher and proc_alive(r.launcher.get("pid"), r.launcher.get("start"))):
                out[r.run_id] = Verdict("new")
            continue
        if r.executor == "slurm":
            s = sacct.get(r.job_id or "")
            if s is None or s[0] in SACCT_LIVE:
                continue
            if s[0] == "PREEMPTED":
                out[r.run_id] = Verdict("preempted", "preempted")
            else:
                why = ("left the queue without recording a result (no accounting to say why)" if s[0] == "GONE"
                       else f"ended {s[0]} (exit {s[1]}) without recording a result")
                out[r.run_id] = Verdict("failed", SACCT_CAUSE.get(s[0], s[0].lower()), f"slurm job {r.job_id} {why}")
            continue
        # local and debug: the job process (running) or the runner/launcher that will start it (queued)
        owner = r.runner if r.executor == "local" else r.launcher
        alive = proc_alive(r.pid, r.pid_start) if r.state == "running" else (
            proc_alive((owner or {}).get("pid"), (owner or {}).get("start")) or proc_alive(r.pid, r.pid_start))
        if alive:
            continue
        if r.state == "queued":
            out[r.run_id] = Verdict("new")  # its runner died before starting it: it never ran
        else:
            out[r.run_id] = Verdict("failed", "killed", f"{r.executor} job process {r.pid} died without "
                                    "recording a result (killed: OOM killer, kill -9, or its launcher died)")
    return out


def current_states(ledger: Ledger, *, locked: bool = False) -> tuple[dict[str, RunRecord], dict[str, Verdict]]:
    """Fold the ledger and check liveness; re-read once if anything looked dead, so that a job that
    recorded its own end between our two reads is not called dead (relevant without the lock)."""
    recs = ledger.fold()
    verdicts = check_live(recs, locked=locked)
    if verdicts and not locked:
        recs = ledger.fold()
        verdicts = {k: v for k, v in verdicts.items() if recs[k].state in LIVE}
    return recs, verdicts
