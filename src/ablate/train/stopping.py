"""Stop requests: how a signal reaches the training loop.

The loop polls a `threading.Event` at every step boundary; when it is set, the run checkpoints where it is and
returns with status `preempted` (a re-run resumes it there). Who sets the event depends on who runs the loop:

- the launcher's job side (ablate.launch.job) sets it from the scheduler's checkpoint signal and then hands the
  signal on to the scheduler (submitit requeues the job); the loop knows nothing of schedulers;
- a foreground `ablate train` uses `stop_on_signals()`: SIGTERM, SIGINT (Ctrl-C), SIGUSR1 and SIGUSR2 set the event.
  A second SIGINT interrupts at once (KeyboardInterrupt); the run resumes from its last checkpoint. The event
  (a `Stop`) remembers the first signal, so that the command exits 128 + its number (130 for Ctrl-C, 143 for
  SIGTERM), as a shell expects of a process a signal ended: a script's `ablate train ... && next` must not go on
  as if the run had finished.

`ctrl_c()` is the same exit for the commands that only wait (`ablate status --watch`, `ablate sweep --follow`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger("ablate.train")

FOREGROUND_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


class Stop(threading.Event):
    """A stop request that knows the signal that made it (`signum`, None when none did)."""

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None

    def exit_code(self) -> int:
        """128 + the signal's number (the shell's convention for a process a signal ended: 130 for Ctrl-C, 143 for
        SIGTERM); for a request a signal made (`signum` set)."""
        if self.signum is None:
            raise ValueError("no signal made this stop request: it has no exit code")
        return 128 + self.signum


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event | None = None) -> Iterator[threading.Event]:
    """The event a run polls. Given an event, it is used as is (its owner handles signals); otherwise, in the main
    thread, FOREGROUND_SIGNALS set a fresh one while the block runs (previous handlers restored after)."""
    if stop is not None:
        yield stop
        return
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_signal(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGINT and stop.is_set():
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        if stop.signum is None:
            stop.signum = signum
        stop.set()
        log.warning("received %s: checkpointing at the next step boundary", name)

    old = {s: signal.signal(s, on_signal) for s in FOREGROUND_SIGNALS}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def ctrl_c() -> Iterator[threading.Event]:
    """For a command that only waits (a refreshed table, a progress bar): Ctrl-C still raises KeyboardInterrupt in
    the block (which may catch it to say goodbye), and the event it yields is set either way, so that the command
    can exit 130 instead of 0 or a traceback. A KeyboardInterrupt the block lets out ends here."""
    hit = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield hit
        return

    def on_sigint(signum: int, frame: object) -> None:
        hit.set()
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield hit
    except KeyboardInterrupt:
        hit.set()
    finally:
        signal.signal(signal.SIGINT, old)
