"""The one way ablate starts a child Python process: the ranks of a data-parallel run, the local runner and the
prune monitor all go through `start_module`, so each child imports this very ablate (an uninstalled checkout
included) and a detached one outlives the command that started it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
"""The folder holding this `ablate` package: first on the child's PYTHONPATH."""


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment, with `extra` on top and this ablate first on PYTHONPATH."""
    env = {**os.environ, **(extra or {})}
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = PACKAGE_PARENT + (os.pathsep + rest if rest else "")
    return env


def start_module(
    module: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    log: IO[bytes] | None = None,
    detach: bool = False,
) -> subprocess.Popen[bytes]:
    """Start `python -m module *args` with this interpreter.

    `env`: variables set on top of this process's environment. `log`: where stdout and stderr go (inherited when
    None). `detach`: a new session with stdin closed, so the child outlives this command and `ablate sweep | cat`
    returns at once."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env=child_env(env),
        stdout=log,
        stderr=subprocess.STDOUT if log is not None else None,
        stdin=subprocess.DEVNULL if detach else None,
        start_new_session=detach,
        close_fds=True,
    )
