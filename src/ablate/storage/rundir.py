"""A run directory: where one run's files live, and the one module that reads and writes them.

Two sides write run.json: the launcher (a run is pending, a job died) and the run itself (running, progress, its
end). Both go through the named transitions of `RunDir`, each one atomic read-modify-write, and every reader goes
through `RunDir.info()` (`ablate.storage.runinfo.RunInfo`). `RunDir.writer()` holds an exclusive lock on the directory
for a run's lifetime, so two writers cannot interleave their steps. Every path is checked by `at` and opened with
O_NOFOLLOW (ablate.storage.fs), so a link planted inside a sweep is refused instead of followed.

The files, their fields, the run states and the stop request (`stop.json`): docs/run-directory.md; why the links
and permissions are refused: docs/security.md.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.config.identity import check_name
from ablate.errors import ErrorKind, UserError
from ablate.states import FINISHED, RUN_JSON, STOPPED, RunState
from ablate.storage import fs, locks, store
from ablate.storage.metricsfile import MetricsFile, MetricsMirror
from ablate.storage.runinfo import RunInfo, error_record


@dataclass(frozen=True)
class StopRequest:
    """What `<run>/stop.json` asks: end the run in `state` (pruned or unstable), for `reason`."""

    state: RunState
    reason: str


class DirectoryGone(UserError):
    """The run directory a writer locked is no longer at its path: the writer must stop and write nothing more."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind=ErrorKind.STATE)


def holds_sweep(path: Path) -> bool:
    """Whether a folder given where a recipe or a run goes is a sweep's instead: it has a ledger or a runs/ folder."""
    return (path / "ledger.jsonl").exists() or (path / "runs").is_dir()


def sweep_dir(root: Path | str, sweep: str) -> Path:
    """`<root>/<sweep>`; the name must be a plain path component (see identity.check_name)."""
    return Path(root) / check_name(sweep, "sweep name", "rename the sweep file")


def run_path(root: Path | str, sweep: str, run_id: str) -> Path:
    """`<root>/<sweep>/runs/<run_id>`; both names are checked, so a run id read from a ledger cannot escape."""
    return sweep_dir(root, sweep) / "runs" / check_name(run_id, "run id")


def sweep_run_dirs(sweep: Path | str) -> list[RunDir]:
    """The run directories of a sweep (`<sweep>/runs/<id>/`, by name), walked without following a link, for every
    reader: a linked `runs`, run directory or run file (`RunDir.check_links`) is refused (LinkRefused, one line
    naming it) before any run is read. Entries of runs/ that are files are left out; [] without runs/. Each RunDir's
    `top` is the sweep, so what is read through `at` later is checked below it."""
    runs = Path(sweep) / "runs"
    if not os.path.isdir(runs) and not os.path.islink(runs):
        return []
    with os.scandir(fs.check_no_links(runs, sweep)) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.is_symlink():
            fs.check_no_links(runs / e.name, sweep)
    return [RunDir(runs / e.name, top=sweep).check_links() for e in entries if e.is_dir(follow_symlinks=False)]


class RunDir(MetricsFile):
    """One run directory. Paths, the run.json transitions, metrics.jsonl, and the writer lock."""

    def __init__(self, path: Path | str, top: Path | str | None = None) -> None:
        self._lock: locks.Lock | None = None  # held by writer()
        self.path = Path(path)
        self.top = Path(top) if top is not None else self.path
        """No component of a file's path below `top` may be a link: the sweep directory (`of`), else the run's."""
        self.mirror: MetricsMirror | None = None
        """Told of every change to metrics.jsonl this object makes (set by the run's writer: train.session)."""

    @classmethod
    def of(cls, root: Path | str, sweep: str, run_id: str) -> RunDir:
        return cls(run_path(root, sweep, run_id), top=sweep_dir(root, sweep))

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    config_path = property(lambda self: self.path / "config.yaml")
    info_path = property(lambda self: self.path / "run.json")
    metrics_path = property(lambda self: self.path / "metrics.jsonl")
    ckpt_dir = property(lambda self: self.path / "ckpt")
    logs_dir = property(lambda self: self.path / "logs")
    train_log = property(lambda self: self.path / "logs" / "train.log")
    stop_path = property(lambda self: self.path / "stop.json")

    def at(self, path: Path) -> Path:
        """`path` (a file or folder of this run), once no component of it below `top` is a link (LinkRefused)."""
        return fs.check_no_links(path, self.top)

    def check_links(self) -> RunDir:
        """This run directory, once none of its entries (run.json, config.yaml, metrics.jsonl, logs/, ...) is a link:
        LinkRefused names it. What its folders hold is checked as it is read (wandb/ keeps W&B's own link)."""
        with os.scandir(self.at(self.path)) as entries:
            for e in entries:
                if e.is_symlink():
                    fs.check_no_links(self.path / e.name, self.top)
        return self

    def make(self, folder: Path | None = None) -> Path:
        """Make the run directory (owner-only when it is the top: `ablate train --run-dir`; in a sweep, as the sweep
        is) and `folder` in it, which takes the run directory's permissions; links refused. Returns the folder."""
        self.at(self.path)
        fs.make_dirs(self.path, fs.DIR_MODE if self.top == self.path else None)
        if folder is not None:
            fs.make_dirs(self.at(folder))
        return folder or self.path

    # ---- stop requests (the prune monitor asks, the run's job obeys) ----

    def request_stop(self, state: RunState, reason: str, **facts: Any) -> None:
        """Ask the run to stop at its next step boundary and end in `state` (pruned | unstable)."""
        if state not in STOPPED:
            raise ValueError(f"a stop request ends a run pruned or unstable, not {state!r}")
        self.make()
        record = {"state": state, "reason": reason, "t": round(time.time(), 3), **facts}
        store.write_json(self.at(self.stop_path), record)

    def stop_request(self) -> StopRequest | None:
        """The pending stop request, or None (a damaged file reads as none)."""
        try:
            d = store.read_json(self.at(self.stop_path))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(d, dict) or not isinstance(d.get("state"), str) or d["state"] not in STOPPED:
            return None
        return StopRequest(RunState(d["state"]), str(d.get("reason") or "stopped by the prune monitor"))

    def clear_stop_request(self) -> None:
        self.at(self.stop_path).unlink(missing_ok=True)

    # ---- run.json: the reader ----

    def info(self) -> RunInfo:
        try:
            data = store.read_json(self.at(self.info_path))
        except (OSError, ValueError, RecursionError):
            data = {}
        return RunInfo.from_json(data, self.path.name)

    # ---- run.json: the writers (named transitions) ----

    def guard(self) -> None:
        """While this process holds the writer lock: raise DirectoryGone when the directory it locked is no longer
        at its path (removed, or removed and created again by another sweep), so nothing lands in another's files."""
        if self._lock is not None and not self._lock.still_at(self.path):
            raise DirectoryGone(
                f"{self.path} was removed or replaced while this run was writing into it; the run "
                "stopped without writing more (start it again to train into the new directory)"
            )

    def _update(self, **fields: Any) -> bool:
        """Write `fields` into run.json; False (nothing written) for a state change out of a FINISHED run by
        anyone but the directory's writer.

        A FINISHED state is the run's own verdict on its end: only a process training the directory again (its
        writer: `ablate train` on it resumes it from its last checkpoint) moves run.json out of it; not a job killed
        after writing it, a launcher or runner that then finds the job gone, a job that crashes on its way out, nor a
        late signal. `ablate sweep --force` re-runs it in a fresh directory, archiving this one first. Every
        transition comes through here, so no caller can unfinish a run. The writers that could race here cannot: a
        launcher records a death only once the job is gone, and one process trains into a directory (`writer`)."""
        self.guard()
        status = fields.get("status")
        if status is not None and status not in RUN_JSON:
            raise ValueError(f"run.json status {status!r} is not one of {[str(s) for s in RunState if s in RUN_JSON]}")
        if status is not None and self._lock is None:
            now = self.info().status
            if now in FINISHED and status != now:
                return False
        if self._lock is not None and self._lock.fd is not None:  # through the locked directory, not its path
            store.update_json_in(self._lock.fd, self.info_path.name, **fields)
            return True
        store.update_json(self.at(self.make() / "run.json"), **fields)
        return True

    def submitted(
        self,
        *,
        run_id: str,
        arm_id: str,
        label: str,
        sweep: str,
        overrides: list[str],
        baseline: bool,
        executor: str,
        batch: str,
    ) -> bool:
        """The launcher handed the run to an executor: pending, with who it is (error and cause cleared). False
        for a FINISHED run (nothing written): its job then finds it finished and records that instead of running."""
        return self._update(
            run_id=run_id,
            arm_id=arm_id,
            label=label,
            sweep=sweep,
            overrides=overrides,
            baseline=baseline,
            status=RunState.PENDING,
            executor=executor,
            batch=batch,
            job_id=None,
            submitted_at=time.time(),
            error=None,
            cause=None,
            reason=None,
        )

    def job(self, **facts: Any) -> None:
        """Facts about the job that runs (or will run) it: job_id, job_logs, host, attempt. No state change."""
        self._update(**facts)

    def started(self, **facts: Any) -> bool:
        """A process started training it (facts: pid, device, params, resumed_from, ...). False for a FINISHED run
        unless this process holds the writer lock (a job's launcher side claims no finished run)."""
        return self._update(
            status=RunState.RUNNING,
            started_at=time.time(),
            host=socket.gethostname(),
            error=None,
            cause=None,
            reason=None,
            **facts,
        )

    def progress(self, **facts: Any) -> None:
        """An evaluation was written (step, val_pass_rate, r0, samples, gpu_hours) or a warning raised."""
        self._update(**facts)

    def ended(self, status: RunState, *, reason: str | None = None, **facts: Any) -> bool:
        """The run stopped: done, diverged, preempted (a signal; resumable), or pruned / unstable (stopped by the
        prune monitor; resumable). False (nothing written) for another state than a FINISHED run's own, unless this
        process holds the writer lock."""
        if status not in FINISHED | STOPPED | {RunState.PREEMPTED}:
            raise ValueError(f"ended() takes done, diverged, preempted, pruned or unstable, not {status!r}")
        return self._update(status=status, reason=reason, ended_at=time.time(), **facts)

    def failed(self, cause: str, error: BaseException | str | None, **facts: Any) -> bool:
        """The run crashed or was killed. `error` is the exception, or a message when none was caught. False
        (nothing written) for a FINISHED run, unless this process holds the writer lock: whatever died after the
        run's end, its results are complete."""
        err: dict[str, Any] | None = None
        if isinstance(error, BaseException):
            err = error_record(error)
        elif error:
            err = {"class": None, "message": error, "traceback": []}
        return self._update(status=RunState.FAILED, cause=cause, error=err, ended_at=time.time(), **facts)

    def try_failed(self, cause: str, error: BaseException | str | None, **facts: Any) -> bool:
        """`failed`, but never raising for an I/O error (the disk may be full): True when run.json was written
        (False too for a FINISHED run). DirectoryGone still raises: the directory is another run's now."""
        try:
            return self.failed(cause, error, **facts)
        except OSError:
            return False

    # ---- the writer lock ----

    @contextlib.contextmanager
    def writer(self) -> Iterator[None]:
        """Hold the directory's writer lock for a run's lifetime; a UserError if another process holds it.

        The holder's pid is kept in `.writer` beside the lock so the error can name it.
        """
        self.make()  # a linked run directory (or one under a link) is refused here, before the lock
        with locks.dir_lock(self.path, blocking=False) as lock:
            if not lock.locked:
                try:
                    with fs.safe_open(self.path / ".writer", "r") as f:
                        holder = f.read().strip()
                except OSError:
                    holder = "another process"
                raise UserError(
                    f"{self.path} is being written by {holder}; wait for that run to end, or give another directory",
                    kind=ErrorKind.STATE,
                )
            for folder in (self.ckpt_dir, self.logs_dir):  # the trainer's folders: no link either
                self.at(folder)
            with contextlib.suppress(OSError):
                store.atomic_write_text(self.path / ".writer", f"pid {os.getpid()} on {socket.gethostname()}\n")
            self._lock = lock
            try:
                yield
            finally:
                self._lock = None
