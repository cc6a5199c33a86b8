"""`ablate sweep --prune`: a monitor that stops the runs that can no longer decide anything, while the sweep runs.

It is one detached process per sweep (like the local runner, it needs nothing else to stay up), started by
`ablate sweep --prune` unless one is already watching the sweep. It reads only files (the ledger, each run's
metrics) and acts only through stop requests (`<run>/stop.json`, see ablate.rundir): the run's job checkpoints
at its next step boundary and ends `pruned` or `unstable` with the reason. It watches the runs whose current
submission asked for it, and exits when none of them is live.

Two kinds of stop:
- **broken** (`unstable`), checked at every new evaluation of a run: the truncation rate above 10% at
  `truncation_evals` evaluations in a row (ScaleRL's sign of instability), or the pass rate below R0 by more than
  `collapse_sd` evaluation-noise sd (sqrt(R0 (1 - R0) / val_n)) at `collapse_evals` evaluations in a row. A run
  whose loss or gradients diverge is already stopped by its trainer (`diverged`).
- **settled** (`pruned`): once every running run has advanced by `check_every` of its max_steps since the last check,
  the sweep is ranked as `ablate rank --x X --to TO` would (on `x`, at `to`, fixed at the first check and
  recorded), and its future is simulated `futures` times up to the runs' max_steps (fit/planning.futures): each
  future is ranked with every arm continued (what the full sweep would say) and with the candidate arms stopped now
  (what the pruned sweep will say: `rank` reads a stopped arm against the baseline fitted on the stopped arm's
  window). A candidate is an arm other than the baseline whose A is identified (its window has passed C_mid), read
  against an identified baseline with a measured seed spread. It is settled, and its live runs (pending ones too)
  are stopped, when the one-sided 95% upper bound on the chance of a change is at most `settled_bound` (with 40
  futures: no change in any). A change is its verdict differing in either ranking, or stopping it moving another
  arm's verdict; when only some candidates settle, their futures are checked again with just them stopped. The
  baseline runs to the end, since every verdict is read against it.

Every decision goes to `<sweep>/prune/decisions.jsonl` (its first line: the compute the checks rank at); the
monitor's own log to `<sweep>/prune/monitor.log`.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from dataclasses import replace as dataclass_replace
from pathlib import Path
from typing import Any

from ablate import store
from ablate.ledger import LIVE, Ledger, proc_alive, proc_start
from ablate.rundir import RunDir, TRUNCATION_WARN

LIVENESS_EVERY_S = 30.0
"""How often the monitor asks whether the watched jobs are alive (sacct on SLURM); the ledger is read each tick."""


@dataclass
class PruneSettings:
    x: str = "gpu_hours"
    """Compute axis of the ranking the settled check makes."""
    to: float | None = None
    """Compute the verdicts are ranked at (None: twice the budget, the compute a run reaches at max_steps)."""
    truncation_evals: int = 3
    collapse_sd: float = 4.0
    collapse_evals: int = 3
    check_every: float = 0.1
    """Settled check each time every live run has advanced by this share of its max_steps."""
    futures: int = 40
    settled_bound: float = 0.10
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def broken(metrics: list[dict[str, Any]], s: PruneSettings) -> str | None:
    """Why a run's metrics say it is broken (see the module docstring), or None."""
    evals = [m for m in metrics if isinstance(m.get("val_pass_rate"), (int, float))]
    trunc = [m for m in evals if isinstance(m.get("truncation_rate"), (int, float))]
    last = trunc[-s.truncation_evals:]
    if len(last) >= s.truncation_evals and all(m["truncation_rate"] > TRUNCATION_WARN for m in last):
        steps = ", ".join(str(m.get("step")) for m in last)
        return (f"truncation above {TRUNCATION_WARN:.0%} at {len(last)} evaluations in a row (steps {steps}; "
                f"last {last[-1]['truncation_rate']:.0%}): unstable")
    r0 = next((m for m in evals if m.get("step") == 0), None)
    if r0 is None or len(evals) < s.collapse_evals + 1:
        return None
    p0 = float(r0["val_pass_rate"])
    n = r0.get("val_n")
    if not isinstance(n, (int, float)) or n <= 0 or not 0.0 < p0 < 1.0:
        return None
    floor = p0 - s.collapse_sd * math.sqrt(p0 * (1 - p0) / float(n))
    tail = evals[-s.collapse_evals:]
    if all(m.get("step") != 0 and float(m["val_pass_rate"]) < floor for m in tail):
        return (f"pass rate {float(tail[-1]['val_pass_rate']):.3f} below R0 {p0:.3f} by more than {s.collapse_sd:g} "
                f"sd of evaluation noise at {len(tail)} evaluations in a row: collapsed")
    return None


class Monitor:
    """The monitor's state over one sweep (see the module docstring)."""

    def __init__(self, sweep_dir: Path | str, settings: PruneSettings, log=print):
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

    def watched(self) -> dict[str, Any]:
        """Live runs whose current submission asked for pruning (a job found dead is not live). The ledger is read
        every tick; whether the jobs are alive (sacct on SLURM) at most every LIVENESS_EVERY_S."""
        from ablate.launch.liveness import current_states

        if time.monotonic() - self._checked_live_at >= LIVENESS_EVERY_S:
            recs, dead = current_states(self.ledger)
            self._dead, self._checked_live_at = set(dead), time.monotonic()
        else:
            recs = self.ledger.fold()
        return {rid: r for rid, r in recs.items() if r.prune and r.state in LIVE and rid not in self._dead}

    def stop(self, run_id: str, state: str, reason: str, step: int | None, max_steps: int | None,
             batch: str) -> None:
        rd = self.rd(run_id)
        if rd.stop_request() is not None:
            return
        if step is not None and max_steps and step >= max_steps:
            return  # it is ending anyway: a request now could only race with its own end
        rec = self.ledger.fold().get(run_id)
        if rec is None or not rec.prune or rec.state not in LIVE or rec.batch != batch:
            return  # it ended, or was submitted again, while the check ran: the decision was about another run
        rd.request_stop(state, reason, step=step)
        store.append_jsonl(self.decisions, {"t": round(time.time(), 3), "run_id": run_id, "state": state,
                                            "reason": reason, "step": step})
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
                    self.stop(rid, "unstable", why, lines[-1].get("step"), rec.max_steps, rec.batch)
            step = lines[-1].get("step") if lines else None
            if isinstance(step, int) and rec.max_steps:
                steps[rid] = (step, rec.max_steps)
        # pending runs have nothing to check yet; the running ones must all have moved on
        due = bool(steps) and all(st - self.checked_at.get(rid, 0) >= self.s.check_every * mx
                                  for rid, (st, mx) in steps.items())
        if due:
            for rid, (st, _) in steps.items():
                self.checked_at[rid] = st
            try:
                self.settled_check(live)
            except Exception as e:  # a check that breaks must not end the monitor: the broken checks go on
                import traceback

                self.log(f"settled check failed ({type(e).__name__}: {e}); the next one retries\n"
                         + traceback.format_exc())
        return True

    def settled_check(self, live: dict[str, Any]) -> None:
        """Rank the sweep as it stands and stop the live runs of arms whose verdict is settled."""
        from ablate.curves import curves_from_sweep
        from ablate.errors import UserError
        from ablate.plan import run_ends

        try:
            curves, skipped = curves_from_sweep(self.sdir, x=self.s.x)
        except UserError as e:
            self.log(f"settled check skipped: {e}")
            return
        if not curves:
            return
        ends = run_ends(self.sdir, curves, self.s.x)
        if self.target is None:
            self.target = 2.0 * max(e.x_end for e in ends.values())
            why = "twice the budget (--prune-to not given)"
        else:
            why = "--prune-to" if self.s.to is not None else "an earlier monitor of this sweep"
        if recorded_target(self.sdir, self.s.x) != self.target:  # what `rank` reads the settled verdicts at
            store.append_jsonl(self.decisions, {"t": round(time.time(), 3), "target": self.target, "x": self.s.x,
                                                "why": why})
            self.log(f"settled checks rank at {self.target:.4g} {self.s.x} ({why})")
        try:
            ranking, arms = settled(curves, ends, self.target, self.s, skipped)
        except UserError as e:
            self.log(f"settled check skipped: {e}")
            return
        if ranking.baseline is None:
            self.log("settled check skipped: the sweep has no baseline arm to read verdicts against")
            return
        self.log(f"{time.strftime('%H:%M:%S')} settled check: " + "; ".join(
            f"{a['arm']} {a['verdict']} {a['state']}" + (f" ({a['p_change'] * a['futures_n']:.0f}/{a['futures_n']} "
                                                        "futures changed)" if a["futures_n"] else "") for a in arms))
        by_arm: dict[str, list] = {}
        for rid in live:
            info = self.rd(rid).info()
            by_arm.setdefault(info.arm, []).append((rid, info))
        for a in arms:
            if a["state"] != "settled":
                continue
            # every live run of the arm, pending ones too: the verdict was settled on the runs it has
            for rid, info in by_arm.get(a["arm"], []):
                self.stop(rid, "pruned", f"verdict {a['verdict']} settled at {a['compute_now']:.4g} {self.s.x}: "
                          f"{a['advice'].split(':')[0]}", info.step, info.max_steps, live[rid].batch)


def settled(curves: list, ends: dict[str, Any], target: float, s: PruneSettings,
            not_fitted: list[dict[str, Any]] | None = None):
    """The settled check on curves as they stand: the ranking (at `target`) and plan.running_arms' row per arm,
    whose `state` is `settled` for the arms to stop. `ends`: plan.RunEnd per run."""
    from ablate.fit.analysis import FitOptions
    from ablate.fit.compare import rank
    from ablate.plan import running_arms

    ranking = rank(curves, FitOptions(n_boot=200, target=target, seed=s.seed), x=s.x, not_fitted=not_fitted)
    if ranking.baseline is None:
        return ranking, []
    return ranking, running_arms(ranking, ends, s.futures, s.seed, None, bound=s.settled_bound, settle_only=True)


def replay(curves: list, target: float, s: PruneSettings) -> dict[str, Any]:
    """The monitor's settled rule replayed on finished curves (each run's last point is its max_steps): every run
    advances together, a settled check at each `check_every` of the way, the runs of settled arms cut where they
    were stopped. Returns {"stopped": {run: share of its compute it ran}, "full": the ranking of the whole curves,
    "pruned": the ranking of the pruned sweep, "spent": compute of the pruned sweep / the full one}. What
    bench/prune.py and the simulations check the rule with: the same decision the live monitor makes, without
    the runs."""
    from dataclasses import replace

    from ablate.errors import UserError
    from ablate.fit.analysis import FitOptions
    from ablate.fit.compare import rank
    from ablate.plan import RunEnd

    end = {c.run: float(c.x[-1]) for c in curves}
    stopped: dict[str, float] = {}

    def cut(c, share: float, pruned: bool):
        keep = c.x <= share * end[c.run] * (1 + 1e-9)
        meta = {**c.meta, "status": "pruned"} if pruned else dict(c.meta)
        return replace(c, x=c.x[keep], y=c.y[keep], n=None if c.n is None else c.n[keep], meta=meta)

    k = 1
    while k * s.check_every < 1.0 - 1e-9:
        share = k * s.check_every
        k += 1
        now = [cut(c, stopped.get(c.run, share), c.run in stopped) for c in curves]
        ends = {c.run: RunEnd(run=c.run, arm=c.group or c.run, x_now=float(c.x[-1]),
                              x_end=float(c.x[-1]) if c.run in stopped else end[c.run], step=None, max_steps=None,
                              gpu_hours_per_x=None, ended=c.run in stopped) for c in now}
        if all(e.ended for e in ends.values()):
            break
        try:
            ranking, arms = settled(now, ends, target, s)
        except UserError:  # nothing can be fitted yet
            continue
        for a in arms:
            if a["state"] == "settled":
                for c in next(r for r in ranking.arms if r.arm == a["arm"]).fit.curves:
                    stopped[c.run] = share
    opts = FitOptions(n_boot=200, target=target, seed=s.seed)
    full = rank(curves, opts, x=s.x)
    pruned = rank([cut(c, stopped.get(c.run, 1.0), c.run in stopped) for c in curves], opts, x=s.x)
    total = sum(end.values())
    return {"stopped": stopped, "full": full, "pruned": pruned,
            "spent": sum(end[r] * stopped.get(r, 1.0) for r in end) / total if total > 0 else 1.0}


def recorded_target(sweep_dir: Path, x: str) -> float | None:
    """The compute on `x` the sweep's settled checks rank at, as its monitor last recorded it (None: none yet)."""
    path = sweep_dir / "prune" / "decisions.jsonl"
    if not path.is_file():
        return None

    got = [t for d in store.read_jsonl(path)  # read_jsonl skips damaged lines and ones nested too deeply
           if d.get("x") == x and (t := store.finite_number(d.get("target"))) is not None and t > 0]
    return got[-1] if got else None


def monitor(sweep_dir: str | Path, settings: dict[str, Any] | None = None, poll_s: float = 2.0) -> None:
    """The monitor process: tick until no watched run is live."""
    m = Monitor(sweep_dir, PruneSettings(**(settings or {})), log=lambda msg: print(msg, flush=True))
    print(f"{time.strftime('%H:%M:%S')} prune monitor watching {sweep_dir}: {m.s.to_json()}", flush=True)
    while m.tick():
        time.sleep(poll_s)
    print(f"{time.strftime('%H:%M:%S')} no watched run is live: exiting", flush=True)


def monitor_alive(sweep_dir: Path) -> bool:
    info = sweep_dir / "prune" / "monitor.json"
    try:
        d = store.read_json(info)
    except (OSError, ValueError, RecursionError):  # missing, torn, or nested past reading: no monitor there
        return False
    if not isinstance(d, dict):
        return False
    pid, start = d.get("pid"), d.get("start")
    ok = (isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2**22
          and (start is None or isinstance(start, int) and not isinstance(start, bool) and 0 <= start < 2**63))
    return ok and proc_alive(pid, start)


def ensure_monitor(sweep_dir: Path, settings: PruneSettings) -> dict[str, int] | None:
    """Start the detached monitor unless one is already watching the sweep; returns its {pid, start} or None."""
    pdir = sweep_dir / "prune"
    store.make_dirs(pdir)  # as private as the sweep
    with store.dir_lock(pdir):
        if monitor_alive(sweep_dir):
            return None
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("OMP_NUM_THREADS", "1")
        import json

        with store.safe_open(pdir / "monitor.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", "import sys, json; from ablate.prune import monitor; "
                 "monitor(sys.argv[1], json.loads(sys.argv[2]))", str(sweep_dir), json.dumps(settings.to_json())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                close_fds=True)
        me = {"pid": proc.pid, "start": proc_start(proc.pid) or 0}
        store.write_json(pdir / "monitor.json", {**me, "settings": settings.to_json()})
        return me


def saved(statuses) -> dict[str, float] | None:
    """Compute the pruned and unstable runs did not spend, against running every run to its max_steps (GPU-hours,
    each stopped run's spend per step times the steps it had left), or None when nothing was stopped. In that
    total, running runs count at their max_steps too, runs that failed or diverged at what they spent, and runs not
    started yet at the median run's cost."""
    stopped = [s for s in statuses if s.state in ("pruned", "unstable")]
    if not stopped:
        return None

    def at_end(s) -> float:
        g = s.gpu_hours or 0.0
        if s.state in ("failed", "diverged"):
            return g
        return g * s.max_steps / s.step if s.step and s.max_steps and s.step < s.max_steps else g

    started = [at_end(s) for s in statuses if s.step]
    typical = float(sorted(started)[len(started) // 2]) if started else 0.0
    full = sum(at_end(s) if s.step else typical for s in statuses)
    kept = sum(at_end(s) - (s.gpu_hours or 0.0) for s in stopped)
    return {"runs": len(stopped), "gpu_hours_saved": kept, "gpu_hours_full": full,
            "share": kept / full if full > 0 else 0.0}


def simulate(arms: dict[str, dict[str, float]], *, shape: str = "scalerl-8b", noise: str = "seeds", seeds: int = 3,
             f: float = 0.9, seed: int = 0, settings: PruneSettings | None = None) -> dict[str, Any]:
    """One simulated sweep with known truth, run in full and pruned by `replay`: `arms` maps each arm to its
    effect on the baseline's curve (fit/calibrate's shapes and noises; the first arm is the baseline, every run
    ends where the baseline has made a share `f` of its gain, verdicts are read at twice that). Returns
    {"full": {arm: verdict}, "practical": {arm: the full verdict's practical}, "pruned": {arm: verdict}, "stopped": {arm: share of the budget it ran, for stopped
    arms}, "spent": compute of the pruned sweep / the full one}."""
    import numpy as np

    from ablate.fit.calibrate import NOISES, SHAPES, simulate_arm, window_end
    from ablate.fit.planning import _verdict_key

    sh, nz = SHAPES[shape], NOISES[noise]
    budget = window_end(sh, f)
    rng = np.random.default_rng([seed, 17])
    curves = []
    for k, (arm, effect) in enumerate(arms.items()):
        made, _ = simulate_arm(sh, nz, effect, seeds, f, rng, arm)
        for c in made:
            keep = c.x <= budget * (1 + 1e-9)  # the continuation past the window is the held-out truth: not run
            curves.append(dataclass_replace(c, x=c.x[keep], y=c.y[keep], n=None if c.n is None else c.n[keep],
                                            meta={**c.meta, "baseline": k == 0}))
    s = settings or PruneSettings(x="gpu_hours", seed=seed)
    r = replay(curves, 2.0 * budget, s)
    arm_of = {c.run: c.group for c in curves}
    return {"full": {a.arm: _verdict_key(a) for a in r["full"].arms},
            "practical": {a.arm: a.practical for a in r["full"].arms},
            "pruned": {a.arm: _verdict_key(a) for a in r["pruned"].arms},
            "stopped": {arm_of[run]: share for run, share in r["stopped"].items()}, "spent": r["spent"]}
