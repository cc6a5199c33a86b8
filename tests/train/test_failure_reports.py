"""A failed worker's report carries a typed `kind` (user_error, out_of_memory, crash), and what the run records of
a worker's failure follows that kind, not the error's class name or message."""

from __future__ import annotations

import json
import re

import pytest
import torch

from ablate.config.schema import ConfigErrors
from ablate.errors import ErrorKind, UserError
from ablate.states import RunState
from ablate.storage import failure_reports
from ablate.storage.fs import LinkRefused
from ablate.storage.rundir import DirectoryGone, RunDir
from ablate.topology import failure
from ablate.topology.workers import Spawned
from jobs import refused


class NotAMemoryError(RuntimeError):
    """A crash whose class name says OutOfMemory: the name must not decide anything."""


NotAMemoryError.__name__ = "OutOfMemoryError"


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (UserError("bad input", kind=ErrorKind.RECIPE), "user_error"),
        (ConfigErrors(["x: bad"]), "user_error"),
        (torch.OutOfMemoryError("CUDA out of memory"), "out_of_memory"),
        (NotAMemoryError("boom"), "crash"),
        (ValueError("UserError in its message"), "crash"),
        (LinkRefused("logs/rank-1.log is a symbolic link"), "crash"),  # the directory is wrong, not the input
        (DirectoryGone("runs/x: not this run's any more"), "crash"),
    ],
)
def test_a_report_says_its_kind_and_keeps_the_error_record(tmp_path, exc, kind):
    rd = RunDir(tmp_path / "run")
    failure_reports.write(rd, 1, exc)
    raw = json.loads((rd.logs_dir / "rank-1.failed.json").read_text())
    assert raw["kind"] == kind and raw["class"] == type(exc).__name__ and raw["message"] == str(exc)
    (report,) = failure_reports.read(rd)
    assert (report.rank, report.kind, report.status, report.error_class) == (1, kind, "failed", type(exc).__name__)


def test_the_run_records_a_peer_failure_by_its_kind(tmp_path):
    rd = RunDir(tmp_path / "run")
    failure_reports.write(rd, 1, torch.OutOfMemoryError("CUDA out of memory"))
    (oom,) = failure_reports.read(rd)
    assert failure.peer_error(oom, 2).cause == "oom"
    failure_reports.clear(rd)
    failure_reports.write(rd, 1, NotAMemoryError("boom"))
    (crash,) = failure_reports.read(rd)
    err = failure.peer_error(crash, 2)
    assert err.cause == "exception" and str(err) == "rank 1 of 2 failed: OutOfMemoryError: boom"


def test_a_worker_that_failed_on_bad_input_is_a_user_error_and_nothing_else_is(tmp_path):
    rd = RunDir(tmp_path / "run")
    failure_reports.write(rd, 1, ConfigErrors(["train.lr: must be > 0"]))
    done = Spawned(result=None, codes={0: 1, 1: 1}, ended_at={0: 0.0, 1: 0.0})
    with refused(ErrorKind.RECIPE, "train.lr: must be > 0") as e:  # the worker's own kind and text, carried
        failure.spawned_outcome(rd, 2, done, stopped=False)
    assert type(e.value) is UserError
    failure_reports.clear(rd)
    failure_reports.write(rd, 1, ValueError("ConfigErrors"))
    with pytest.raises(failure.RankFailed, match=re.escape("rank 1 of 2 failed: ValueError: ConfigErrors")):
        failure.spawned_outcome(rd, 2, done, stopped=False)
    assert rd.info().status == RunState.FAILED and rd.info().cause == "exception"


def test_a_report_without_a_kind_reads_as_a_crash_and_foreign_files_are_skipped(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.logs_dir.mkdir(parents=True)
    (rd.logs_dir / "rank-1.failed.json").write_text(json.dumps({"rank": 1, "time": 1.0, "class": "UserError"}))
    (rd.logs_dir / "rank-2.failed.json").write_text(json.dumps({"rank": "two", "time": 2.0}))
    (report,) = failure_reports.read(rd)
    assert (report.rank, report.kind, report.status) == (1, "crash", "failed")
    assert failure_reports.first(rd) == report
