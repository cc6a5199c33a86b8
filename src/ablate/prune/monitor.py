"""The prune monitor of `ablate sweep --prune`: one detached process per sweep, started after the sweep's runs are
submitted (`start_hook`) unless one is already watching it, that applies the pruning rules (ablate.prune.rules) to
the runs whose current submission asked for it, and exits when none of them is live. It reads only files (the
ledger, each run's metrics) and acts only through stop requests (`<run>/stop.json`, ablate.storage.rundir): the run's
job checkpoints at its next step boundary and ends `pruned` or `unstable` with the reason. Its decisions go to
`<sweep>/prune/decisions.jsonl`, its log to `<sweep>/prune/monitor.log` (docs/run-directory.md, "Pruning").
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ablate.curves.inputs import curves_from_sweep
from ablate.errors import UserError
from ablate.launch.liveness import current_states
from ablate.prune.outlook import Standing, run_ends
from ablate.prune.rules import PruneSettings, broken, recorded_analysis, recorded_target, settled
from ablate.states import LIVE, RunState
from ablate.storage import fs, locks, store
from ablate.storage.ledger import Ledger, RunRecord, proc_alive, proc_start
from ablate.storage.rundir import RunDir
from ablate.storage.runinfo import RunInfo
from ablate.text import as_cli
from ablate.topology.process import start_module

LIVENESS_EVERY_S = 30.0
"""How often the monitor asks whether the watched jobs are alive (sacct on SLURM); the ledger is read each tick."""


class Monitor:
    """The monitor's state over one sweep (see the module docstring)."""

    def __init__(self, sweep_dir: Path | str, settings: PruneSettings, log: Callable[[str], None] = print):
        self.sdir = Path(sweep_dir)
        self.ledger = Ledger(self.sdir)
        self.s = settings
        self.log = log
        self.seen: dict[str, int] = {}  # run id -> metrics lines read at the last broken check
        self.checked_at: dict[str, int] = {}  # run id -> step at the last settled check
        self.decisions = self.sdir / "prune" / "decisions.jsonl"
        self.target: float | None = settings.to if settings.to is not None else recorded_target(self.sdir, settings.x)
        """The compute every settled check ranks at: --prune-to, else the one an earlier monitor of this sweep
        recorded, else twice the budget the first check sees."""
        self._dead: set[str] = set()
        self._checked_live_at = -math.inf

    def rd(self, run_id: str) -> RunDir:
        return RunDir.of(self.sdir.parent, self.sdir.name, run_id)

    def watched(self) -> dict[str, RunRecord]:
        """Live runs whose current submission asked for pruning (a job found dead is not live). The ledger is read
        every tick; whether the jobs are alive (sacct on SLURM) at most every LIVENESS_EVERY_S."""
        if time.monotonic() - self._checked_live_at >= LIVENESS_EVERY_S:
            recs, dead = current_states(self.ledger)
            self._dead, self._checked_live_at = set(dead), time.monotonic()
        else:
            recs = self.ledger.fold()
        return {rid: r for rid, r in recs.items() if r.prune and r.state in LIVE and rid not in self._dead}

    def stop(
        self, run_id: str, state: RunState, reason: str, step: int | None, max_steps: int | None, batch: str
    ) -> None:
        """Ask run `run_id` to stop in `state`, and record why, unless it has been asked already, is about to end
        anyway, or is no longer the live submission `batch` the decision was made about."""
        rd = self.rd(run_id)
        if rd.stop_request() is not None:
            return
        if step is not None and max_steps and step >= max_steps:
            return  # it is ending anyway: a request now could only race with its own end
        rec = self.ledger.fold().get(run_id)
        if rec is None or not rec.prune or rec.state not in LIVE or rec.batch != batch:
            return  # it ended, or was submitted again, while the check ran: the decision was about another run
        rd.request_stop(state, reason, step=step)
        store.append_jsonl(
            self.decisions,
            {"t": round(time.time(), 3), "run_id": run_id, "state": state, "reason": reason, "step": step},
        )
        self.log(f"{time.strftime('%H:%M:%S')} {state} {run_id} at step {step}: {reason}")

    def tick(self) -> bool:
        """One pass; False once nothing is left to watch."""
        live = self.watched()
        if not live:
            return False
        steps: dict[str, tuple[int, int]] = {}
        for rid, rec in live.items():
            rd = self.rd(rid)
            lines = rd.metrics()
            if lines and len(lines) != self.seen.get(rid):
                self.seen[rid] = len(lines)
                why = broken(lines, self.s)
                if why:
                    self.stop(rid, RunState.UNSTABLE, why, lines[-1].get("step"), rec.max_steps, rec.batch)
            step = lines[-1].get("step") if lines else None
            if isinstance(step, int) and rec.max_steps:
                steps[rid] = (step, rec.max_steps)
        # pending runs have nothing to check yet; the running ones must all have moved on
        due = bool(steps) and all(
            st - self.checked_at.get(rid, 0) >= self.s.check_every * mx for rid, (st, mx) in steps.items()
        )
        if due:
            for rid, (st, _) in steps.items():
                self.checked_at[rid] = st
            try:
                self.settled_check(live)
            except Exception as e:  # a check that breaks must not end the monitor: the broken checks go on
                self.log(
                    f"settled check failed ({type(e).__name__}: {e}); the next one retries\n" + traceback.format_exc()
                )
        return True

    def settled_check(self, live: dict[str, RunRecord]) -> None:
        """Rank the sweep as it stands and stop the live runs of arms whose verdict is settled."""
        try:
            curves, skipped = curves_from_sweep(self.sdir, x=self.s.x)
        except UserError as e:
            self.log(f"settled check skipped: {as_cli(e)}")
            return
        if not curves:
            return
        ends = run_ends(self.sdir, curves, self.s.x)
        if self.target is None:
            self.target = 2.0 * max(e.x_end for e in ends.values())
            why = "twice the budget (--prune-to not given)"
        else:
            why = "--prune-to" if self.s.to is not None else "an earlier monitor of this sweep"
        analysis = self.s.analysis(self.target)
        if recorded_analysis(self.sdir, self.s.x) != analysis:  # what `rank` reads the settled verdicts with
            line = {"t": round(time.time(), 3), "target": self.target, "x": self.s.x, "why": why}
            store.append_jsonl(self.decisions, {**line, "analysis": analysis.to_json()})
            self.log(f"settled checks rank at {self.target:.4g} {self.s.x} ({why}), {self.s.n_boot} resamples")
        try:
            ranking, arms = settled(curves, ends, self.target, self.s, skipped)
        except UserError as e:
            self.log(f"settled check skipped: {as_cli(e)}")
            return
        if ranking.baseline is None:
            self.log("settled check skipped: the sweep has no baseline arm to read verdicts against")
            return
        self.log(
            f"{time.strftime('%H:%M:%S')} settled check: "
            + "; ".join(
                f"{a.arm} {a.verdict} {a.advice.standing}"
                + (f" ({(a.p_change or 0.0) * a.futures_n:.0f}/{a.futures_n} futures changed)" if a.futures_n else "")
                for a in arms
            )
        )
        by_arm: dict[str, list[tuple[str, RunInfo]]] = {}
        for rid in live:
            info = self.rd(rid).info()
            by_arm.setdefault(info.arm, []).append((rid, info))
        for a in arms:
            if a.advice.standing != Standing.SETTLED:
                continue
            # every live run of the arm, pending ones too: the verdict was settled on the runs it has
            for rid, info in by_arm.get(a.arm, []):
                self.stop(
                    rid,
                    RunState.PRUNED,
                    f"verdict {a.verdict} settled at {a.compute_now:.4g} {self.s.x}: {a.advice.grounds}",
                    info.step,
                    info.max_steps,
                    live[rid].batch,
                )


def watch_sweep(sweep_dir: str | Path, settings: dict[str, Any] | None = None, poll_s: float = 2.0) -> None:
    """The monitor process (`python -m ablate.prune.monitor SWEEP_DIR SETTINGS_JSON`): tick until no watched run is
    live."""
    m = Monitor(sweep_dir, PruneSettings(**(settings or {})), log=lambda msg: print(msg, flush=True))
    print(f"{time.strftime('%H:%M:%S')} prune monitor watching {sweep_dir}: {m.s.to_json()}", flush=True)
    while m.tick():
        time.sleep(poll_s)
    print(f"{time.strftime('%H:%M:%S')} no watched run is live: exiting", flush=True)


def monitor_alive(sweep_dir: Path) -> bool:
    """Whether the monitor `<sweep>/prune/monitor.json` names is still running (a damaged file reads as none)."""
    info = sweep_dir / "prune" / "monitor.json"
    try:
        d = store.read_json(info)
    except (OSError, ValueError, RecursionError):  # missing, torn, or nested past reading: no monitor there
        return False
    if not isinstance(d, dict):
        return False
    pid, start = d.get("pid"), d.get("start")
    ok = (
        isinstance(pid, int)
        and not isinstance(pid, bool)
        and 0 < pid < 2**22
        and (start is None or (isinstance(start, int) and not isinstance(start, bool) and 0 <= start < 2**63))
    )
    return ok and proc_alive(pid, start)


def ensure_monitor(sweep_dir: Path, settings: PruneSettings) -> dict[str, int] | None:
    """Start the detached monitor unless one is already watching the sweep; returns its {pid, start} or None."""
    pdir = sweep_dir / "prune"
    fs.make_dirs(pdir)  # as private as the sweep
    with locks.dir_lock(pdir):
        if monitor_alive(sweep_dir):
            return None
        threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        with fs.safe_open(pdir / "monitor.log", "ab") as log:
            proc = start_module(
                "ablate.prune.monitor",
                [str(sweep_dir), json.dumps(settings.to_json())],
                env=threads,
                log=log,
                detach=True,
            )
        me = {"pid": proc.pid, "start": proc_start(proc.pid) or 0}
        store.write_json(pdir / "monitor.json", {**me, "settings": settings.to_json()})
        return me


def start_hook(settings: PruneSettings, echo: Callable[[str], None] | None = print) -> Callable[[Path], None]:
    """What `ablate sweep --prune` hands the launcher as `after_submit`: once the runs are submitted, start the
    monitor on the sweep unless one is watching it already, when a run it may stop is live; `echo` says which."""

    def start(sweep_dir: Path) -> None:
        if not any(r.prune and r.state in LIVE for r in Ledger(sweep_dir).fold().values()):
            return
        started = ensure_monitor(sweep_dir, settings)
        if echo:
            echo(
                f"prune monitor {'started' if started else 'already watching'}: decisions in "
                f"{sweep_dir / 'prune' / 'decisions.jsonl'}"
            )

    return start


if __name__ == "__main__":
    watch_sweep(sys.argv[1], json.loads(sys.argv[2]))
