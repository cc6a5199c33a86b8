"""Where a command will write, checked before any work (the writes themselves: ablate.storage.store's atomic writes)."""

from __future__ import annotations

import os
from pathlib import Path

from ablate.errors import ErrorKind, UserError
from ablate.text import safe


def check_writable_output(path: Path | str, flag: str, *, folder: bool = False) -> Path:
    """Where a command will write (`--out`, `--plot`, `--save-noise`, `--save-calibration`; `folder`: a directory
    it creates or fills, `--root`), checked before any work: a folder where a file goes (or a file, or a device,
    where a folder goes), a path under a file, or a place that can't be written (a read-only file system, no
    permission) is one UserError line naming the flag. Writes still go through store's atomic writes: this only
    moves the refusal to before the minutes of fitting it would otherwise follow."""
    p = Path(path)
    where = f"{flag} {safe(p)}"
    if folder and p.exists() and not p.is_dir():
        raise UserError(f"{where}: is a file, not a directory; choose another path", kind=ErrorKind.FILE)
    if not folder and p.is_dir():
        raise UserError(
            f"{where}: is a directory; give a file name, e.g. {flag} {safe(p / 'out.json')}", kind=ErrorKind.FILE
        )
    if not folder and p.exists() and not p.is_file():
        raise UserError(
            f"{where}: not a regular file (a device, a pipe, a socket); give a file name", kind=ErrorKind.FILE
        )
    parent = p if folder and p.exists() else p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{where}: {safe(parent)} is a file, not a directory; choose another path", kind=ErrorKind.FILE)
    try:
        read_only = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise UserError(
            f"{where}: {safe(parent)} is on a read-only file system; choose another path", kind=ErrorKind.FILE
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{where}: no permission to write in {safe(parent)}; choose another path", kind=ErrorKind.FILE)
    return p
