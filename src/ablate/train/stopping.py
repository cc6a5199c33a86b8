"""Stop requests: how a signal reaches the training loop.

The loop polls a `threading.Event` at every step boundary; when it is set, the run checkpoints where it is and
returns with status `preempted` (a re-run resumes it there). Who sets the event depends on who runs the loop:

- the launcher's job side (ablate.launch.job) sets it from the scheduler's checkpoint signal and then hands the
  signal on to the scheduler (submitit requeues the job); the loop knows nothing of schedulers;
- a foreground `ablate train` uses `stop_on_signals()`: SIGTERM, SIGINT (Ctrl-C), SIGUSR1 and SIGUSR2 set the event.
  A second SIGINT interrupts at once (KeyboardInterrupt); the run resumes from its last checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Iterator

log = logging.getLogger("ablate.train")

FOREGROUND_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event | None = None) -> Iterator[threading.Event]:
    """The event a run polls. Given an event, it is used as is (its owner handles signals); otherwise, in the main
    thread, FOREGROUND_SIGNALS set a fresh one while the block runs (previous handlers restored after)."""
    if stop is not None:
        yield stop
        return
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_signal(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGINT and stop.is_set():
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        stop.set()
        log.warning("received %s: checkpointing at the next step boundary", name)

    old = {s: signal.signal(s, on_signal) for s in FOREGROUND_SIGNALS}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)
