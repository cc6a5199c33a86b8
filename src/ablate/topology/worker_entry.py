"""Entry point of a worker that ablate.topology.workers.spawn starts: `python -m ablate.topology.worker_entry SPEC`.

Signals come first, before torch is imported: a stop request (SIGTERM, SIGINT, SIGUSR1/2) that arrives while the
worker is still starting is kept and honoured at the first step boundary, never fatal. The worker then says it is
ready for signals (`rank-<r>.ready` beside the spec file); the starter forwards stops only to ready workers. Then
the worker runs (workers.worker_main). Exit status 1 on an error: the worker has logged it and written its report.
"""

import os
import signal
import sys
import threading
from pathlib import Path

STOP = threading.Event()


def _on_signal(signum, frame):
    STOP.set()


for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(_sig, _on_signal)

if __name__ == "__main__":
    # the starter forwards a stop only once this file exists: before it, SIGTERM would still kill the interpreter
    (Path(sys.argv[1]).parent / f"rank-{os.environ.get('RANK', '0')}.ready").touch()
    from ablate.topology.workers import worker_main

    try:
        worker_main(sys.argv[1], STOP)
    except BaseException:
        sys.exit(1)
