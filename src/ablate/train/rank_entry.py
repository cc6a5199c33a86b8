"""Entry point of a rank that ablate.train.distributed.spawn starts: `python -m ablate.train.rank_entry SPEC`.

Signals come first, before torch is imported: a stop request (SIGTERM, SIGINT, SIGUSR1/2) that arrives while the
rank is still starting is kept and honoured at the first step boundary, never fatal. The rank then says it is
ready for signals (`rank-<r>.ready` beside the spec file); the spawner forwards stops only to ready ranks. Then
the rank runs (distributed.main). Exit status 1 on an error: the rank has logged it and written its report.
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
    # the spawner forwards a stop only once this file exists: before it, SIGTERM would still kill the interpreter
    (Path(sys.argv[1]).parent / f"rank-{os.environ.get('RANK', '0')}.ready").touch()
    from ablate.train.distributed import main

    try:
        main(sys.argv[1], STOP)
    except BaseException:
        sys.exit(1)
