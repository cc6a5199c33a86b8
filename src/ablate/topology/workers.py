"""Workers of a data-parallel run started on this machine, torchrun-style: one fresh interpreter per worker
(`python -m ablate.topology.worker_entry`, through ablate.topology.process), a free port on 127.0.0.1, env://
rendezvous. Under SLURM the workers are the job's tasks instead (world.init_from_submitit). See docs/distributed.md.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.storage import store
from ablate.topology.process import start_module
from ablate.topology.world import init, shutdown, visible_gpus

EXIT_GRACE_S = 60.0
"""After a worker has exited, how long the others may take to end by themselves before they are killed: far more
than a normal teardown takes, and a peer that waits on a dead worker in a collective (NCCL notices a dead peer only
at its timeout) is not left hanging."""


@dataclass
class Spawned:
    """What `spawn` saw: worker 0's return value, each worker's exit code (None: `spawn` had to kill it) and when
    each exit was seen (time.time())."""

    result: Any
    codes: dict[int, int | None]
    ended_at: dict[int, float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(
    target: str,
    size: int,
    payload: dict[str, Any],
    workdir: Path,
    *,
    backend: str,
    timeout_s: float,
    stop: threading.Event,
) -> Spawned:
    """Run `target` ("module:function", called as fn(world, stop=event, **payload) with a JSON payload) on `size`
    local workers, each a fresh interpreter, and wait for all of them.

    When `stop` is set (a signal reached this process), the workers get SIGTERM, which they take as a stop request
    from the moment they start (they agree on a step boundary, checkpoint and return). Once a worker has exited,
    the others have EXIT_GRACE_S to follow before they are killed."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = workdir / "ranks.json"
    result = workdir / "rank-0.result.json"
    result.unlink(missing_ok=True)
    spec.write_text(json.dumps({"target": target, "payload": payload, "result": str(result)}))
    ready = [workdir / f"rank-{r}.ready" for r in range(size)]  # worker_entry: its signal handlers are in place
    for f in ready:
        f.unlink(missing_ok=True)
    port = _free_port()
    gpus = visible_gpus() if backend == "nccl" else []
    procs = []
    for r in range(size):
        one_gpu = {"CUDA_VISIBLE_DEVICES": gpus[r]} if gpus else {}  # each worker (and its vLLM engine) on its GPU
        env = {
            **one_gpu,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(r),
            "WORLD_SIZE": str(size),
            "LOCAL_RANK": str(r),
            "LOCAL_WORLD_SIZE": str(size),
            "ABLATE_BACKEND": backend,
            "ABLATE_COLLECTIVE_TIMEOUT_S": str(timeout_s),
        }
        procs.append(start_module("ablate.topology.worker_entry", [str(spec)], env=env))
    threading.Thread(target=_forward_stop, args=(stop, procs, ready), name="ablate-stop-forwarder", daemon=True).start()
    ended, reaped = _wait(procs)
    out = None
    with contextlib.suppress(OSError, ValueError):
        out = json.loads(result.read_text())
    return Spawned(out, {r: None if r in reaped else p.returncode for r, p in enumerate(procs)}, ended)


def _forward_stop(stop: threading.Event, procs: list[subprocess.Popen[bytes]], ready: list[Path]) -> None:
    """Once `stop` is set: SIGTERM to each worker as soon as it can take it as a stop request (or has ended)."""
    stop.wait()
    todo = set(range(len(procs)))
    while todo:
        for r in sorted(todo):
            p = procs[r]
            if p.poll() is not None:
                todo.discard(r)
            elif ready[r].exists():
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
                todo.discard(r)
        time.sleep(0.05)


def _wait(procs: list[subprocess.Popen[bytes]]) -> tuple[dict[int, float], set[int]]:
    """Wait for every worker; kill those still running EXIT_GRACE_S after the first exit. Returns when each exit
    was seen and which workers were killed here."""
    size = len(procs)
    ended: dict[int, float] = {}
    reaped: set[int] = set()
    try:
        while len(ended) < size:
            for r, p in enumerate(procs):
                if r not in ended and p.poll() is not None:
                    ended[r] = time.time()
            if ended and len(ended) < size and time.time() > min(ended.values()) + EXIT_GRACE_S:
                for r, p in enumerate(procs):
                    if p.poll() is None:
                        p.kill()
                        reaped.add(r)
            time.sleep(0.1)
    finally:
        for r, p in enumerate(procs):
            if p.poll() is None:
                p.kill()
                reaped.add(r)
            p.wait()
            ended.setdefault(r, time.time())
    return ended, reaped


def worker_main(spec_file: str, stop: threading.Event) -> None:
    """A started worker (see worker_entry): join the group from the environment `spawn` set, run the target with
    the stop event, write worker 0's result."""
    spec = json.loads(Path(spec_file).read_text())
    world = init(os.environ["ABLATE_BACKEND"], float(os.environ["ABLATE_COLLECTIVE_TIMEOUT_S"]))
    mod, _, name = spec["target"].partition(":")
    fn = getattr(importlib.import_module(mod), name)
    try:
        out = fn(world, stop=stop, **spec["payload"])
        if world.lead:
            store.write_json(spec["result"], out)
    finally:
        shutdown()


def exit_reason(code: int | None) -> str:
    """How a worker ended, in words: 'exited with code 1', 'was killed by SIGKILL', 'did not exit'."""
    if code is None:
        return "did not exit (killed after its peers had ended)"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"
