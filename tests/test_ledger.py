"""The ledger: folding events into run states, torn lines, the lock, concurrent writers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from ablate.storage.ledger import Ledger, proc_alive, proc_start
from jobs import GUARD


def ev(kind, rid="r1", batch="b1", **kw):
    return {"event": kind, "run_id": rid, "batch": batch, **kw}


def test_fold_follows_the_current_batch_only(tmp_path):
    led = Ledger(tmp_path)
    led.append(
        ev("submitting", label="x", executor="slurm"),
        ev("submitted", job_id="7_0"),
        ev("started", job_id="7_0", pid=1, start=2),
        ev("failed", cause="oom", error="boom"),
    )
    rec = led.fold()["r1"]
    assert (rec.state, rec.cause, rec.job_id, rec.attempts) == ("failed", "oom", "7_0", 1)
    # A resubmission starts a fresh record; late events of the old batch (an orphan job) are ignored.
    led.append(ev("submitting", batch="b2", label="x", executor="local"), ev("finished", batch="b1"))
    rec = led.fold()["r1"]
    assert (rec.state, rec.batch, rec.cause, rec.job_id, rec.executor) == ("submitting", "b2", None, None, "local")
    led.append(
        ev("submitted", batch="b2", runner={"pid": 5, "start": 6}),
        ev("started", batch="b2", job_id="42"),
        ev("preempted", batch="b2", requeue=True, requeues=1),
    )
    rec = led.fold()["r1"]
    assert (rec.state, rec.requeues, rec.runner) == ("requeued", 1, {"pid": 5, "start": 6})
    led.append(
        ev("requeued", batch="b2", requeues=1),
        ev("started", batch="b2", attempt=2),
        ev("finished", batch="b2", status="diverged"),
    )
    rec = led.fold()["r1"]
    assert (rec.state, rec.attempts) == ("diverged", 2)


def test_final_preemption_is_its_own_state(tmp_path):
    led = Ledger(tmp_path)
    led.append(ev("submitting"), ev("started"), ev("preempted", requeue=False, requeues=3))
    rec = led.fold()["r1"]
    assert (rec.state, rec.cause) == ("preempted", "preempted")


def test_torn_last_line_is_skipped_and_the_next_append_starts_a_new_line(tmp_path):
    led = Ledger(tmp_path)
    led.append(ev("submitting"), ev("started"))
    with open(led.path, "ab") as f:
        f.write(b'{"event": "finished", "run_id": "r1", "ba')  # the launcher died mid-write
    assert led.fold()["r1"].state == "running"
    led.append(ev("failed", cause="killed"))
    lines = led.path.read_text().splitlines()
    assert len(lines) == 4 and lines[2].startswith('{"event": "finished"')
    assert json.loads(lines[3])["event"] == "failed"
    assert led.fold()["r1"].state == "failed"


def test_lock_is_exclusive_survives_a_deleted_lock_file_and_is_released_when_its_holder_dies(tmp_path):
    led = Ledger(tmp_path / "sweep")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from ablate.storage.ledger import Ledger\n"
                "with Ledger(sys.argv[1]).lock():\n    print('locked', flush=True); time.sleep(600)"
            ),
            str(led.dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    with led.lock(timeout=0) as held:
        assert not held.locked, "the lock was taken while another process held it"
    for f in led.dir.iterdir():  # what used to let a second launcher in: deleting the lock file
        f.unlink()
    (led.dir / "ledger.lock").unlink(missing_ok=True)
    with led.lock(timeout=0) as held:
        assert not held.locked, "deleting files let a second process in"
    holder.kill()  # SIGKILL: no cleanup code runs, the kernel drops the lock
    holder.wait()
    got = threading.Event()

    def take():
        with led.lock() as held:
            got.set() if held.locked else None

    t = threading.Thread(target=take)
    t.start()
    assert got.wait(GUARD), "the lock of a killed process was not released"
    t.join()
    # With a timeout, a held lock is given up on (used from signal handlers) instead of deadlocking.
    with led.lock(), led.lock(timeout=0.05) as inner:
        assert not inner.locked


def test_concurrent_appenders_never_corrupt_lines(tmp_path):
    code = (
        "import sys; from ablate.storage.ledger import Ledger; led = Ledger(sys.argv[1])\n"
        "for i in range(100):\n"
        "    with led.lock(): led.append({'event': 'started', 'run_id': f'{sys.argv[2]}-{i}', 'batch': 'b'},"
        " {'event': 'finished', 'run_id': f'{sys.argv[2]}-{i}', 'batch': 'b', 'pad': 'x' * 3000})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(k)]) for k in range(4)]
    assert [p.wait() for p in procs] == [0] * 4
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert len(lines) == 800 and all(json.loads(line)["batch"] == "b" for line in lines)


def test_proc_alive_tells_recycled_and_dead_pids_apart():
    me = os.getpid()
    assert proc_alive(me, proc_start(me))
    assert not proc_alive(me, proc_start(me) + 1)  # same pid, another process start: recycled
    p = subprocess.Popen(["true"])
    p.wait()
    assert not proc_alive(p.pid, None) and proc_start(p.pid) is None
    assert not proc_alive(None, None)
