"""Directory locks: an exclusive `flock` on a sweep or run directory itself, released by the kernel when its holder
dies. The ledger's decisions (ablate.storage.ledger), a run directory's writer (ablate.storage.rundir) and the prune
monitor's start hold one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ablate.storage.fs import make_dirs


class Lock:
    """An exclusive `flock` on a directory, held while `locked` is True (see `dir_lock`)."""

    def __init__(self, locked: bool, fd: int | None = None) -> None:
        self.locked = locked
        self.fd = fd

    def still_at(self, directory: Path | str) -> bool:
        """Whether `directory` is still the directory this lock holds (not removed, renamed or replaced)."""
        return self.fd is not None and _same_file(self.fd, Path(directory))


@contextlib.contextmanager
def dir_lock(directory: Path | str, *, timeout: float | None = None, blocking: bool = True) -> Iterator[Lock]:
    """Exclusive lock on `directory` itself (an flock on the directory's own descriptor), released by the kernel
    when the holder dies.

    Locking the directory, not a lock file inside it, means no file can be deleted from under a holder: deleting
    a lock file used to let a second process in. After the flock the path is checked to still be the directory
    that was locked (it may have been renamed or replaced meanwhile), and the lock is taken again if not.

    `blocking=False` tries once; `timeout` gives up after that many seconds. Either way the caller learns from
    `Lock.locked` whether it holds the lock (used from signal handlers, where the interrupted code may itself hold
    it: a second flock would deadlock).
    """
    directory = Path(directory)
    deadline = None if timeout is None else time.monotonic() + timeout
    fd: int | None
    while True:
        make_dirs(directory)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        got = _flock(fd, blocking=blocking and deadline is None, deadline=deadline)
        if got and _same_file(fd, directory):
            break
        if got:  # replaced while we waited: lock the directory that is there now
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            continue
        os.close(fd)
        fd = None
        break
    try:
        yield Lock(locked=fd is not None, fd=fd)
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _flock(fd: int, *, blocking: bool, deadline: float | None) -> bool:
    if blocking:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if deadline is None or time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
