"""A data-parallel run's worker failure reports, `<run>/logs/rank-<r>.failed.json`: what a worker that failed (or
diverged alone) ended on, written before it exits so that whoever attributes the run's end finds it (see
docs/distributed.md). Plain JSON: `ablate status` reads them without torch."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal

from ablate.errors import ErrorKind, UserError
from ablate.states import RunState
from ablate.storage import fs, store
from ablate.storage.rundir import DirectoryGone, RunDir
from ablate.storage.runinfo import error_record

Kind = Literal["user_error", "out_of_memory", "crash"]
KINDS: tuple[Kind, ...] = ("user_error", "out_of_memory", "crash")


@dataclass(frozen=True)
class FailureReport:
    """One worker's report. `kind` is what a reader acts on (bad input, out of device memory, any other crash);
    `error_class` and `message` are for people; `error_kind` is a user error's own kind (None for the others)."""

    rank: int
    status: str
    kind: Kind
    error_class: str | None
    message: str | None
    time: float
    error_kind: ErrorKind | None = None


def kind_of(exc: BaseException) -> Kind:
    """What kind of failure `exc` is, for the reader of the report. A link refused or a directory gone is not bad
    input to the run (the recipe is fine; its directory is not), so those report as a crash, as before kinds."""
    if isinstance(exc, UserError) and not isinstance(exc, (fs.LinkRefused, DirectoryGone)):
        return "user_error"
    torch = sys.modules.get("torch")  # a process that never imported torch cannot have run out of device memory
    if torch is not None and isinstance(exc, torch.OutOfMemoryError):
        return "out_of_memory"
    return "crash"


def write(rd: RunDir, rank: int, exc: BaseException, status: RunState = RunState.FAILED) -> None:
    """Before a worker exits on an error (or a divergence it found alone), say so: rank, status, kind, the error's
    class, message and traceback, when, where. Written before the process closes its sockets, so a peer that sees
    the broken collective finds it. A failed write is dropped: the worker's log still has the error."""
    rec = {
        "rank": rank,
        "status": status,
        "kind": kind_of(exc),
        "error_kind": exc.kind if isinstance(exc, UserError) else None,
        **error_record(exc),
        "time": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    with contextlib.suppress(OSError):
        store.write_json(rd.make(rd.logs_dir) / f"rank-{rank}.failed.json", rec)


def _parse(d: Any) -> FailureReport | None:
    """A report read back, or None for a file that is not one (torn, foreign)."""
    if not isinstance(d, dict) or not isinstance(d.get("time"), (int, float)) or not isinstance(d.get("rank"), int):
        return None
    kind, error_kind = d.get("kind"), d.get("error_kind")
    return FailureReport(
        rank=d["rank"],
        status=str(d.get("status", RunState.FAILED)),
        kind=kind if kind in KINDS else "crash",
        error_class=d.get("class"),
        message=d.get("message"),
        time=float(d["time"]),
        error_kind=ErrorKind(error_kind) if isinstance(error_kind, str) and error_kind in set(ErrorKind) else None,
    )


def read(rd: RunDir) -> list[FailureReport]:
    """The workers' failure reports, earliest first."""
    reports = []
    for path in rd.at(rd.logs_dir).glob("rank-*.failed.json"):
        with contextlib.suppress(OSError, ValueError, RecursionError):
            report = _parse(store.read_json(path))
            if report is not None:
                reports.append(report)
    return sorted(reports, key=lambda r: r.time)


def first(rd: RunDir) -> FailureReport | None:
    """The earliest failure report, or None."""
    reports = read(rd)
    return reports[0] if reports else None


def clear(rd: RunDir) -> None:
    """Remove a previous attempt's reports (before the run's workers start again)."""
    for path in rd.at(rd.logs_dir).glob("rank-*.failed.json"):
        path.unlink(missing_ok=True)
