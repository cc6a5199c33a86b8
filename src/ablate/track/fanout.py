"""The fan-out: a run's metrics lines handed to every tracker it mirrors to, each on its own thread fed by a queue,
so that the training loop never waits on a tracker. A tracker that raises is dropped after one warning; closing
waits a bounded time. What each tracker receives and how failures read: docs/trackers.md."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.config.identity import arm_id, run_id
from ablate.errors import UserError
from ablate.registry import Registry
from ablate.states import RunState
from ablate.storage import fs, store
from ablate.storage.rundir import RunDir
from ablate.track.base import TrackContext, Tracker, set_environment, warn

CLASSES: Registry[Callable[[], Tracker]] = Registry("tracker")
"""`--track NAME` -> the tracker's class. Lazy: a tracker's library (wandb, mlflow, tensorboard) loads only when a
run mirrors to it."""
CLASSES.add_lazy("wandb", "ablate.track.wandb:WandbTracker")
CLASSES.add_lazy("mlflow", "ablate.track.mlflow:MlflowTracker")
CLASSES.add_lazy("tensorboard", "ablate.track.tensorboard:TensorBoardTracker")

DOING = {"start": "start", "log": "log a metrics line", "finish": "finish"}
"""What a tracker was doing when it failed, by the call that raised (for the warning)."""

CLOSE_WAIT_S = 10.0
"""How long the end of a run waits for its trackers to send what they were given, all of them together. Short,
because the process may have little time left: a data-parallel run's worker 0 is killed EXIT_GRACE_S (60 s) after
its peers exit (ablate.topology.workers), and a preempted sweep job gets launcher.signal_delay_s (at most 30 s
locally) before its time limit. What a tracker did not send is in metrics.jsonl and recorded (UNSENT) for
`ablate sync`. WAIT_ENV sets another wait where runs have time at their end."""

WAIT_ENV = "ABLATE_TRACK_WAIT_S"
"""The environment variable that sets the wait at a run's end, in seconds (0 to 3600)."""


def close_wait() -> float:
    """The wait at a run's end: WAIT_ENV when it holds a number of seconds in [0, 3600], else CLOSE_WAIT_S."""
    try:
        wait = float(os.environ.get(WAIT_ENV, CLOSE_WAIT_S))
    except ValueError:
        return CLOSE_WAIT_S
    return wait if 0.0 <= wait <= 3600.0 else CLOSE_WAIT_S


UNSENT = Path("track") / "unsent.json"
"""In a run directory: the trackers still sending when the run's end stopped waiting for them, and the state the run
ended in; removed once they have been sent what they lack (`send_unsent`: `ablate sync`, a later `ablate sweep`, or
the run's next attempt, whose trackers start by sending the lines they lack)."""

SYNC_WAIT_S = 120.0
"""How long `send_unsent` waits for its trackers: nothing is in a hurry then (no run is ending), but a tracker whose
server hangs must not hang the command (MLflow gives up on a call after about 30 s: ablate.track.base)."""


def _failure(name: str, doing: str, e: BaseException) -> str:
    """The one line a failing tracker gets: which tracker, what it was doing, the cause (with the tracker's own fix
    when its message gives one), and what happens now."""
    cause = " ".join(str(e).split())
    if type(e) is not RuntimeError or not cause:  # a tracker's own RuntimeError is its one-line cause and fix
        cause = f"{type(e).__name__}: {cause}" if cause else type(e).__name__
    if isinstance(e, ImportError):
        cause += "; install the trackers' libraries: pip install 'ablate[track]'"
    return (
        f"tracker {name} failed to {doing} ({cause[:600]}); the run goes on without it and metrics.jsonl keeps "
        "every line (docs/trackers.md)"
    )


class _Worker:
    """One tracker, its queue and its thread. The thread calls the tracker in the order the calls came, until
    `finish`; after a failure it still empties the queue, calling nothing."""

    def __init__(self, name: str, tracker: Tracker) -> None:
        self.name, self.tracker = name, tracker
        self.failed = False
        self._queue: queue.SimpleQueue[tuple[str, tuple[Any, ...]]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"ablate-track-{name}", daemon=True)
        self.thread.start()

    def put(self, op: str, *args: Any) -> None:
        self._queue.put((op, args))

    def _loop(self) -> None:
        while True:
            op, args = self._queue.get()
            if op == "stop":
                return
            if not self.failed:
                try:
                    getattr(self.tracker, op)(*args)
                except (Exception, SystemExit) as e:  # any failure of a tracker drops it, never the run
                    self.failed = True
                    warn(_failure(self.name, DOING[op], e))
            if op == "finish":
                return


class FanOut:
    """The trackers of one attempt of a run: RunDir's metrics mirror (`rewind`, `append`), closed with the run's
    state at its end (`close`). The trackers start at the first `rewind` (the attempt's resume point: metrics.jsonl
    cut back to its checkpoint, or emptied for a fresh start) or at the first line."""

    def __init__(self, ctx: TrackContext, trackers: Sequence[Tracker], *, wait_s: float | None = None) -> None:
        self.ctx, self.wait_s = ctx, close_wait() if wait_s is None else wait_s
        self._started = False
        self.late: list[str] = []
        """The trackers still sending when `close` stopped waiting."""
        self.behind: list[str] = []
        """The trackers that were not sent the whole run: still sending at `close`, or failed (recorded in UNSENT)."""
        self._workers = [_Worker(t.name, t) for t in trackers]

    @property
    def names(self) -> list[str]:
        return [w.name for w in self._workers]

    def _start(self, resumed_from: int | None) -> None:
        self._started = True
        for w in self._workers:
            w.put("start", self.ctx, resumed_from)

    def rewind(self, step: int) -> None:
        """metrics.jsonl now ends at `step` (-1: empty, a fresh start): the trackers start, told where this attempt
        resumed. A later rewind in the same attempt changes nothing (an attempt resumes once)."""
        if not self._started:
            self._start(step if step >= 0 else None)

    def append(self, record: dict[str, Any]) -> None:
        """One metrics line, queued for every tracker (a copy: the caller may change its dict)."""
        if not self._started:
            self._start(None)
        for w in self._workers:
            w.put("log", dict(record))

    def close(self, state: str) -> None:
        """Tell every tracker the run's state and wait at most `wait_s` for all of them to send what they hold; a
        tracker still sending then is left behind with a warning."""
        for w in self._workers:
            w.put("finish", state) if self._started else w.put("stop")
        deadline = time.monotonic() + self.wait_s
        for w in self._workers:
            w.thread.join(max(0.0, deadline - time.monotonic()))
        late = [w.name for w in self._workers if w.thread.is_alive()]
        self.late = late
        if not self._started:
            return
        path = self.ctx.run_dir / UNSENT
        self.behind = behind = [*late, *(w.name for w in self._workers if w.failed and w.name not in late)]
        if behind:  # a tracker that failed (it warned then) lacks the rest of the run too
            _record_unsent(path, behind, state, sent=self.names)
        where = self.ctx.sweep_dir or self.ctx.run_dir
        keep = f"is kept in metrics.jsonl and recorded in {UNSENT}: send it with: ablate sync {where}"
        if late:
            warn(
                f"tracker {', '.join(late)} still sending after {self.wait_s:.0f} s at the end of the run; "
                f"what it has not sent {keep}"
            )
        if failed := [n for n in behind if n not in late]:
            warn(f"tracker {', '.join(failed)} stopped early (warned above); what it lacks {keep}")
        if not behind and path.exists():  # an earlier attempt's tail, sent as this attempt's trackers started
            _record_unsent(path, [], state, sent=self.names)


def context(config: Any, rd: RunDir, device: str | None = None) -> TrackContext:
    """What a tracker is told about the run in `rd` (its ids, names, sweep and whether it is a baseline seed read
    from run.json, which the launcher wrote; a run outside a sweep is named after its directory), and the kind of
    `device` it trains on."""
    info = rd.info()
    path = rd.path.absolute()
    in_sweep = info.sweep is not None and path.parent.name == "runs" and path.parent.parent.name == info.sweep
    return TrackContext(
        run_dir=path,
        sweep_dir=path.parent.parent if in_sweep else None,
        sweep=info.sweep or path.name,
        arm_id=arm_id(config),
        arm_label=info.arm if info.label else arm_id(config),
        run_id=run_id(config),
        label=info.label or path.name,
        config=config.to_dict(),
        options=config.track,
        baseline=info.baseline,
        device=device,
    )


def end_state(rd: RunDir) -> str:
    """The state the run ended in, as its trackers are told: run.json's (the run records its end there before the
    session lets go of the directory), the stop request's when the prune monitor stopped it (the job records that
    state once the run has returned), `failed` when run.json still says running."""
    try:
        status = rd.info().status
        request = rd.stop_request() if status == RunState.PREEMPTED else None
    except UserError:  # a link planted at run.json or stop.json: refused, as every read of them is
        return RunState.FAILED
    if request is not None:
        return request.state
    return status if status != RunState.RUNNING else RunState.FAILED


def build(names: Sequence[str]) -> list[Tracker]:
    """The trackers named (each once, in the order given); one that cannot be built is warned about and left out."""
    trackers = []
    for name in dict.fromkeys(names):
        try:
            trackers.append(CLASSES.get(name)())
        except Exception as e:  # an unknown name, a class that fails to build
            warn(_failure(name, "load", e))
    return trackers


def open_fanout(config: Any, rd: RunDir, device: str | None = None) -> FanOut | None:
    """The fan-out of the recipe's `track.to` for the run in `rd` (training on a `device` of that kind), or None
    when it mirrors to no tracker. Called on the main thread: the trackers' environment is set here, before their
    threads start."""
    set_environment(config.track.to)
    trackers = build(config.track.to)
    return FanOut(context(config, rd, device), trackers) if trackers else None


def _record_unsent(path: Path, names: Sequence[str], state: str, *, sent: Sequence[str]) -> None:
    """Record the trackers whose tail was not sent (`names`), with the run's end state, keeping an earlier attempt's
    names that were not among this attempt's trackers (`sent`); removed when none is left. A failure to write it
    only loses the record, never the run (metrics.jsonl has every line)."""
    with contextlib.suppress(OSError, UserError):
        old = unsent(path.parent.parent)
        keep = [n for n in (old.trackers if old else ()) if n not in sent]
        left = list(dict.fromkeys([*keep, *names]))
        if not left:
            path.unlink(missing_ok=True)
            return
        fs.make_dirs(path.parent)
        store.write_json(path, {"trackers": left, "state": str(state)})


@dataclass(frozen=True)
class Unsent:
    """What a run's end left unsent (UNSENT, read field by field): the trackers, and the state to finish them with."""

    trackers: tuple[str, ...]
    state: str


def unsent(run_dir: Path) -> Unsent | None:
    """The run's UNSENT record, or None when there is none or it is not one (a link is refused, as everywhere)."""
    try:
        data = store.read_json(RunDir(run_dir).at(run_dir / UNSENT))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        return None
    names = data.get("trackers") if isinstance(data, dict) else None
    state = data.get("state") if isinstance(data, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) and n in CLASSES.names() for n in names):
        return None
    if state not in {s.value for s in RunState}:
        return None
    return Unsent(tuple(names), str(state))


def send_unsent(config: Any, rd: RunDir, *, wait_s: float = SYNC_WAIT_S) -> list[str] | None:
    """Send the trackers named in the run's UNSENT record what they lack: each starts at the last step metrics.jsonl
    keeps (so it first sends the kept lines its run lacks, as on a resume) and finishes with the recorded state.
    Holds the run's writer lock (a UserError if a process is writing the run: its own trackers do this). Returns
    the trackers still late or failed (the record then stays), None when the run had nothing unsent."""
    with rd.writer():
        record = unsent(rd.path)
        if record is None:
            return None
        set_environment(record.trackers)
        trackers = build(record.trackers)
        lines = rd.metric_lines()
        last = max((r["step"] for _, r in lines if isinstance(r.get("step"), int)), default=-1)
        fan = FanOut(context(config, rd), trackers, wait_s=wait_s)
        fan.rewind(last)
        fan.close(record.state)
        return [*fan.behind, *(n for n in record.trackers if n not in fan.names)]  # close kept both in the record
