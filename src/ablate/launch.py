"""Launch a sweep's runs through submitit, idempotently (design.md §6).

`launch_sweep` takes the ledger lock (ledger.py), folds the ledger into run states, checks that the
runs it believes queued or running are still alive (one batched `sacct` for SLURM, /proc for local and
debug), prints the plan ("N done, M running, K failed, J new") and submits only what the plan says:
new runs, preempted runs, failed runs with `--retry-failed`, everything not live with `--force`.
A run that is queued or running is never submitted twice.

Executors (all run the same job, `RunJob`, a submitit `Checkpointable`):
- `local`: submitit's LocalExecutor has no parallelism limit and its controllers keep the caller's
  stdio open (slurm-notes §6). So `ablate sweep` spawns one detached *runner* process per submission
  (new session, stdio to `launch/<batch>.log`) and returns at once; the runner keeps at most
  `max_parallel` LocalExecutor jobs alive, starting the next when one ends, and exits when its queue
  is empty. Nothing else has to stay up: the ledger records the runner's pid, and a run whose runner
  died before starting it is simply new again on the next `ablate sweep`.
- `slurm`: one job array per submission (`submit_array`, `array_parallelism` from the profile),
  resources from `slurm/<profile>.yaml`.
- `debug`: DebugExecutor, in the launcher's own process, one run after another, so pdb works.
- `auto`: slurm when `scontrol ping` says the controller is UP, else local. (Not "sbatch exists":
  packages outlive clusters, slurm-notes G18.)

Preemption and timeouts: SLURM (and the local controller at `timeout_min`) sends USR2; submitit calls
`RunJob.checkpoint`, which records a `preempted` event and returns the same job for requeue, at most
`max_requeues` times; the job function resumes from its own last checkpoint (train/ saves
periodically). After the last allowed requeue the run stays `preempted`, which `ablate sweep`
resubmits (not a failure). Jobs run under submitit must not install their own USR2/TERM handlers.

Failure triage: the job records exceptions itself (class, message, last traceback lines, log path);
deaths it cannot record (scancel, OOM kill, time limit, node failure, SIGKILL) are read from `sacct`
(SLURM; `squeue` where accounting is off) or inferred from a dead pid (local) and written as `failed`
events with their cause by the next `ablate sweep`. A run the executor refused (sbatch error) is new.

Files, besides the ledger and `runs/<run_id>/` (store.py):
    sweeps/<name>/jobs/<job_id>/       submitit's pickles and the job's stdout/stderr (`job_logs` in run.json)
    sweeps/<name>/launch/<batch>.json  a local runner's queue; `<batch>.log` its own log
    sweeps/<name>/archive/<run_id>.<t>/  run directories replaced by `--force` (never overwritten)
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import submitit

from ablate import store
from ablate.errors import UserError
from ablate.ledger import (LIVE, TERMINAL, Ledger, RunFiles, RunRecord, Verdict, current_states, hostname, me,
                           proc_start)

EXECUTORS = ("local", "slurm", "debug", "auto")
DEFAULT_JOB = "ablate.train:run"
DEFAULT_TIMEOUT_MIN = 24 * 60
REPO_ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# Executor choice and SLURM profiles


def slurm_up(timeout: float = 5.0) -> bool:
    """True when a SLURM controller answers (`scontrol ping` ... UP), not merely when sbatch exists."""
    if shutil.which("scontrol") is None:
        return False
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=timeout)
    except (subprocess.TimeoutExpired, OSError):
        return False
    return out.returncode == 0 and "UP" in out.stdout


def resolve_executor(name: str | None) -> str:
    name = (name or "local").lower()
    if name not in EXECUTORS:
        raise UserError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
    if name == "auto":
        return "slurm" if slurm_up() else "local"
    return name


# Profile keys -> submitit SlurmExecutor parameters. A profile is a short YAML file, slurm/<name>.yaml.
PROFILE_KEYS = {
    "partition": "partition",
    "gpus_per_node": "gpus_per_node",
    "cpus_per_task": "cpus_per_task",
    "mem_gb": "mem",
    "time_min": "time",
    "account": "account",
    "qos": "qos",
    "constraint": "constraint",
    "setup": "setup",
    "array_parallelism": "array_parallelism",
    "signal_delay_s": "signal_delay_s",
    "exclude": "exclude",
    "additional_parameters": "additional_parameters",
}


def find_profile(profile: str) -> Path:
    if profile.endswith((".yaml", ".yml")) or "/" in profile:
        candidates = [Path(profile)]
    else:
        candidates = [Path("slurm") / f"{profile}.yaml", REPO_ROOT / "slurm" / f"{profile}.yaml"]
    for c in candidates:
        if c.is_file():
            return c
    raise UserError(f"SLURM profile {profile!r} not found (looked for {', '.join(map(str, candidates))}); "
                    "pass --profile NAME for slurm/NAME.yaml or a path to a YAML file")


def load_profile(profile: str) -> dict[str, Any]:
    """Read slurm/<profile>.yaml into SlurmExecutor parameters; unknown keys are errors."""
    import yaml

    path = find_profile(profile)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: a SLURM profile must be a mapping of keys to values")
    params: dict[str, Any] = {}
    for key, value in data.items():
        if key not in PROFILE_KEYS:
            close = difflib.get_close_matches(key, PROFILE_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(PROFILE_KEYS)}"
            raise UserError(f"{path}: unknown key {key!r}{hint}")
        if value is None or value == [] or value == {}:
            continue
        if key == "mem_gb":
            value = f"{value}G"
        params[PROFILE_KEYS[key]] = value
    return params


# ---------------------------------------------------------------------------------------------
# The job: what every executor runs for one run


def resolve_job(job: str) -> Callable[..., Any]:
    """`module:function` or `path/to/file.py:function` -> the callable (kept as a string until the job
    process imports it, so the launcher stays decoupled from train/ and pickles stay small)."""
    mod_name, _, attr = job.rpartition(":")
    if not mod_name or not attr:
        raise UserError(f"job {job!r} must look like 'module:function' or 'file.py:function'")
    if mod_name.endswith(".py") or "/" in mod_name:
        path = Path(mod_name).resolve()
        spec = importlib.util.spec_from_file_location(f"ablate_job_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise UserError(f"job file {path} cannot be imported")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(mod_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UserError(f"job {job!r}: {mod_name} has no attribute {attr!r}") from None


def _set_threads(n: int) -> None:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def _job_env() -> tuple[str | None, dict[str, str]]:
    """(job id, log paths) from submitit's environment in the job process."""
    try:
        env = submitit.JobEnvironment()
        job_id = env.job_id
    except RuntimeError:
        return None, {}
    try:
        paths = env.paths
        return job_id, {"stdout": str(paths.stdout), "stderr": str(paths.stderr)}
    except KeyError:
        return job_id, {}


def _process_age() -> float | None:
    """Seconds since this process started (submitit times a job from its process start, too)."""
    try:
        start = proc_start(os.getpid())
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start / os.sysconf("SC_CLK_TCK") if start is not None else None
    except (OSError, ValueError):
        return None


def _cause_of(exc: BaseException) -> str:
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or "OutOfMemory" in name:
        return "oom"
    return "exception"


def _error_text(exc: BaseException, lines: int = 15) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(tb).rstrip().splitlines()[-lines:]
    return "\n".join(tail)


class RunJob(submitit.helpers.Checkpointable):
    """One run, as submitted to any executor: claim it in the ledger, call the job function, record
    the outcome. `checkpoint` is submitit's preemption/timeout hook (requeue, bounded)."""

    def __init__(self, spec: dict[str, Any], sweep_dir: str, batch: str, job: str = DEFAULT_JOB,
                 threads: int = 1, max_requeues: int = 3, timeout_min: float = DEFAULT_TIMEOUT_MIN):
        self.spec, self.sweep_dir, self.batch, self.job = spec, str(sweep_dir), batch, job
        self.threads, self.max_requeues, self.timeout_min = threads, max_requeues, timeout_min
        self._t0 = 0.0

    @property
    def run_id(self) -> str:
        return self.spec["run_id"]

    def _run_dir(self) -> Path:
        return store.run_dir(Path(self.sweep_dir).parent, Path(self.sweep_dir).name, self.run_id)

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"event": kind, "run_id": self.run_id, "batch": self.batch, **fields}

    def __call__(self) -> dict[str, Any]:
        self._t0 = time.time()
        ledger = Ledger(self.sweep_dir)
        job_id, logs = _job_env()
        log = logs.get("stderr")
        with ledger.lock():
            rec = ledger.fold().get(self.run_id)
            # The claim: only the current submission of a run that has not ended may run it.
            if rec is None or rec.batch != self.batch or rec.state in TERMINAL:
                return {"run_id": self.run_id, "skipped": "superseded"}
            events = []
            if rec.state == "requeued":
                events.append(self._event("requeued", job_id=job_id, requeues=rec.requeues))
            events.append(self._event("started", job_id=job_id, host=hostname(), attempt=rec.attempts + 1,
                                      log=log, **me()))
            ledger.append(*events)
        files = RunFiles(self._run_dir())
        # `job_logs`: submitit's stdout/stderr of this job (the job function keeps its own `logs`).
        files.update(status="running", job_id=job_id, job_logs=logs, host=hostname(), started_at=self._t0,
                     attempt=rec.attempts + 1)
        _set_threads(self.threads)
        try:
            fn = resolve_job(self.job)
            summary = fn(self.spec["config"], self._run_dir(), threads=self.threads)
        except submitit.core.utils.UncompletedJobError as e:
            # Raised by submitit's signal handler when it will not requeue: out of requeues (our
            # checkpoint returned None: the run is `preempted`, already recorded) or timed out too often.
            if "timed-out" in str(e):
                self._fail("timeout", e, log)
            raise
        except Exception as e:
            self._fail(_cause_of(e), e, log)
            raise
        status = summary.get("status", "done") if isinstance(summary, dict) else "done"
        with ledger.lock():
            if status == "preempted":  # the job stopped itself on a signal (outside submitit): resume later
                ledger.append(self._event("preempted", job_id=job_id, reason="signal", requeue=False,
                                          requeues=rec.requeues))
            else:
                status = status if status in ("done", "diverged") else "done"
                ledger.append(self._event("finished", job_id=job_id, status=status))
        files.update(status=status, ended_at=time.time())
        return summary if isinstance(summary, dict) else {"result": summary}

    def _fail(self, cause: str, exc: BaseException, log: str | None) -> None:
        ledger = Ledger(self.sweep_dir)
        job_id, _ = _job_env()
        text = _error_text(exc)
        with ledger.lock(timeout=5):
            ledger.append(self._event("failed", job_id=job_id, cause=cause, error=text, log=log))
        RunFiles(self._run_dir()).update(status="failed", cause=cause, log=log, ended_at=time.time(), error={
            "class": type(exc).__name__, "message": str(exc), "traceback": text.splitlines()})

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission | None:
        """Called by submitit on USR2 (preemption, or the time limit close): record, then requeue.

        Runs inside a signal handler, possibly while this process holds the ledger lock, hence the
        lock timeout. The job function's last periodic checkpoint is what the requeued job resumes
        from; we do not save from here (the training step in flight is in an unknown state).
        """
        ledger = Ledger(self.sweep_dir)
        job_id, _ = _job_env()
        elapsed = _process_age() or (time.time() - self._t0 if self._t0 else 0.0)
        limit = self.timeout_min * 60  # same rule as submitit's SignalHandler.has_timed_out
        reason = "timeout" if elapsed >= min(0.8 * limit, limit - 600) else "preemption"
        with ledger.lock(timeout=5):
            rec = ledger.fold().get(self.run_id)
            done = rec.requeues if rec and rec.batch == self.batch else 0
            requeue = done < self.max_requeues
            ledger.append(self._event("preempted", job_id=job_id, reason=reason, requeue=requeue,
                                      requeues=done + int(requeue)))
        RunFiles(self._run_dir()).update(status="preempted", requeues=done + int(requeue))
        return submitit.helpers.DelayedSubmission(self) if requeue else None


# ---------------------------------------------------------------------------------------------
# The plan


@dataclass
class Plan:
    sweep: str
    executor: str
    done: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    submit: list[str] = field(default_factory=list)
    """Run ids submitted by this call, in sweep order."""
    job_ids: dict[str, str] = field(default_factory=dict)
    batch: str | None = None
    sweep_dir: Path | None = None

    def summary(self) -> str:
        parts = [f"{len(self.done)} done", f"{len(self.running)} running", f"{len(self.failed)} failed"]
        if self.preempted:
            parts.append(f"{len(self.preempted)} preempted")
        parts.append(f"{len(self.new)} new")
        verb = f"submitting {len(self.submit)} via {self.executor}" if self.submit else "nothing to submit"
        return f"{self.sweep}: " + ", ".join(parts) + f" -> {verb}"


def make_plan(sweep_name: str, run_ids: Sequence[str], recs: dict[str, RunRecord], verdicts: dict[str, Verdict],
              executor: str, *, retry_failed: bool = False, force: bool = False) -> Plan:
    plan = Plan(sweep_name, executor)
    for rid in run_ids:
        rec = recs.get(rid)
        state = verdicts[rid].state if rid in verdicts else (rec.state if rec else "new")
        if state == "failed" and rec is not None and rec.cause == "submit" and rid not in verdicts:
            state = "new"  # the executor refused it (bad profile, sbatch error): it never ran
        if state in ("done", "diverged"):
            plan.done.append(rid)
        elif state == "failed":
            plan.failed.append(rid)
        elif state == "preempted":
            plan.preempted.append(rid)
        elif state in LIVE:
            plan.running.append(rid)  # queued or running: never submitted twice, not even with --force
            continue
        else:
            plan.new.append(rid)
        if state in ("new", "preempted") or force or (state == "failed" and retry_failed):
            plan.submit.append(rid)
    return plan


# ---------------------------------------------------------------------------------------------
# Launch


def _launcher_cfg(runs: Sequence[Any]) -> dict[str, Any]:
    return dict((runs[0].config or {}).get("launcher") or {}) if runs else {}


def _crashpoint(name: str) -> None:
    """Fault injection for the robustness tests: SIGKILL ourselves at a named point of a submission."""
    if os.environ.get("ABLATE_CRASHPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _spec_dict(spec: Any) -> dict[str, Any]:
    return {"run_id": spec.run_id, "arm_id": spec.arm_id, "label": spec.label, "sweep": spec.sweep,
            "overrides": list(spec.overrides), "config": spec.config, "baseline": spec.baseline}


def launch_sweep(sweep: Any, *, root: Path | str = Path("sweeps"), executor: str | None = None,
                 max_parallel: int | None = None, profile: str | None = None, retry_failed: bool = False,
                 force: bool = False, follow: bool = False, job: str = DEFAULT_JOB,
                 echo: Callable[[str], None] | None = print) -> Plan:
    """Submit the runs of `sweep` (`.name`, `.runs: list[RunSpec]`) that the plan says to; return the plan.

    Safe to call again at any time: see the module docstring. `echo` prints the plan (None: silent).
    """
    runs = list(sweep.runs)
    lcfg = _launcher_cfg(runs)
    kind = resolve_executor(executor or lcfg.get("name"))
    threads = int(lcfg.get("threads") or 1)
    max_requeues = int(lcfg.get("max_requeues", 3))
    timeout_min = lcfg.get("timeout_min") or DEFAULT_TIMEOUT_MIN
    asked_parallel = max_parallel or lcfg.get("max_parallel")
    if asked_parallel is not None and int(asked_parallel) < 1:
        raise UserError(f"--max-parallel {asked_parallel}: must be at least 1")
    max_parallel = int(asked_parallel or max(1, store.cpu_count() // threads))  # as many runs as the cores hold, threads each
    profile = profile or lcfg.get("profile") or "local"
    slurm_params = load_profile(profile) if kind == "slurm" else {}  # bad profiles fail before any write
    if asked_parallel and kind == "slurm":
        slurm_params["array_parallelism"] = int(asked_parallel)  # --max-parallel beats the profile's value

    root = Path(root).resolve()  # job processes may run elsewhere (another cwd, a node): absolute paths only
    sweep_dir = store.sweep_dir(root, sweep.name)
    ledger = Ledger(sweep_dir)
    by_id = {s.run_id: s for s in runs}
    debug_jobs: list[Any] = []
    with ledger.lock():
        recs, verdicts = current_states(ledger, locked=True)
        # Persist what liveness checks found, so the verdict survives sacct forgetting the job.
        dead = [{"event": "failed", "run_id": rid, "batch": recs[rid].batch, "job_id": recs[rid].job_id,
                 "cause": v.cause, "error": v.error, "log": recs[rid].log}
                for rid, v in verdicts.items() if v.state == "failed"]
        dead += [{"event": "preempted", "run_id": rid, "batch": recs[rid].batch, "job_id": recs[rid].job_id,
                  "requeue": False, "reason": "preemption"} for rid, v in verdicts.items() if v.state == "preempted"]
        ledger.append(*dead)
        for ev in dead:
            RunFiles(store.run_dir(root, sweep.name, ev["run_id"])).update(
                status="failed" if ev["event"] == "failed" else "preempted", cause=ev.get("cause"),
                error={"class": None, "message": ev.get("error"), "traceback": []} if ev.get("error") else None)
        plan = make_plan(sweep.name, list(by_id), recs, verdicts, kind, retry_failed=retry_failed, force=force)
        plan.sweep_dir = sweep_dir
        if echo:
            echo(plan.summary())
        if plan.submit:
            plan.batch = batch = secrets.token_hex(6)
            specs = [by_id[rid] for rid in plan.submit]
            now = time.time()
            for spec in specs:
                rdir = store.run_dir(root, sweep.name, spec.run_id)
                prev = recs.get(spec.run_id)
                prev_state = verdicts[spec.run_id].state if spec.run_id in verdicts else (prev.state if prev else "new")
                if force and prev_state in ("done", "diverged", "failed", "preempted") and rdir.exists():
                    # --force re-runs from scratch; the old directory is kept, never overwritten.
                    arch = sweep_dir / "archive" / f"{spec.run_id}.{int(now)}"
                    arch.parent.mkdir(parents=True, exist_ok=True)
                    rdir.rename(arch)
                RunFiles(rdir).update(run_id=spec.run_id, arm_id=spec.arm_id, label=spec.label, sweep=spec.sweep,
                                      overrides=list(spec.overrides), baseline=spec.baseline, status="pending",
                                      executor=kind, batch=batch, job_id=None, submitted_at=now, error=None,
                                      cause=None)
            launcher = me()
            ledger.append(*({"event": "submitting", "run_id": s.run_id, "batch": batch, "label": s.label,
                             "executor": kind, "launcher": launcher,
                             "max_steps": ((s.config or {}).get("train") or {}).get("max_steps")} for s in specs))
            _crashpoint("after_submitting")
            jobs = [RunJob(_spec_dict(s), str(sweep_dir), batch, job, threads, max_requeues, timeout_min)
                    for s in specs]
            try:
                if kind == "local":
                    _submit_local(ledger, plan, jobs, max_parallel, timeout_min, max_requeues)
                elif kind == "slurm":
                    _submit_slurm(ledger, plan, jobs, slurm_params, timeout_min, max_requeues, sweep.name)
                else:
                    debug_jobs = _submit_debug(ledger, plan, jobs)
            except UserError:
                raise
            except Exception as e:
                ledger.append(*({"event": "failed", "run_id": j.run_id, "batch": batch, "cause": "submit",
                                 "error": _error_text(e)} for j in jobs))
                raise UserError(f"submitting {len(jobs)} runs via {kind} failed: {e}") from e
    # Debug runs execute here, in this process, after the lock is released (each job claims its run).
    for dj in debug_jobs:
        try:
            dj.result()
        except Exception:
            pass  # recorded in the ledger by RunJob; pdb has already had its chance
    if follow and (plan.submit or plan.running):
        from ablate.status import follow_runs

        follow_runs(root, sweep.name, plan.submit + plan.running)
    return plan


def _submit_slurm(ledger: Ledger, plan: Plan, jobs: list[RunJob], params: dict[str, Any], timeout_min: float,
                  max_requeues: int, name: str) -> None:
    ex = submitit.SlurmExecutor(folder=str(ledger.dir / "jobs" / "%j"), max_num_timeout=max_requeues)
    params = {"time": int(timeout_min), "job_name": f"ablate-{name}", **params}
    params["time"] = max(1, int(params["time"]))  # sbatch --time is whole minutes; 0 would mean no limit
    ex.update_parameters(**params)
    for j in jobs:
        j.timeout_min = params["time"]
    submitted = ex.submit_array(jobs)  # one sbatch call: a job array
    evs = []
    for j, sj in zip(jobs, submitted):
        plan.job_ids[j.run_id] = sj.job_id
        evs.append({"event": "submitted", "run_id": j.run_id, "batch": plan.batch, "job_id": sj.job_id})
    ledger.append(*evs)
    for j, sj in zip(jobs, submitted):
        RunFiles(store.run_dir(ledger.dir.parent, ledger.dir.name, j.run_id)).update(
            job_id=sj.job_id, job_logs={"stdout": str(sj.paths.stdout), "stderr": str(sj.paths.stderr)})


def _submit_debug(ledger: Ledger, plan: Plan, jobs: list[RunJob]) -> list[Any]:
    ex = submitit.DebugExecutor(folder=str(ledger.dir / "jobs" / "%j"))
    out = [ex.submit(j) for j in jobs]
    ledger.append(*({"event": "submitted", "run_id": j.run_id, "batch": plan.batch, "job_id": dj.job_id}
                    for j, dj in zip(jobs, out)))
    return out


def _submit_local(ledger: Ledger, plan: Plan, jobs: list[RunJob], max_parallel: int, timeout_min: float,
                  max_requeues: int) -> None:
    """Spawn the detached runner for this batch; it reads its queue from launch/<batch>.json."""
    launch_dir = ledger.dir / "launch"
    launch_dir.mkdir(parents=True, exist_ok=True)
    queue = launch_dir / f"{plan.batch}.json"
    store.write_json(queue, {"sweep_dir": str(ledger.dir), "batch": plan.batch, "max_parallel": max_parallel,
                             "timeout_min": timeout_min, "max_requeues": max_requeues,
                             "jobs": [{"spec": j.spec, "job": j.job, "threads": j.threads} for j in jobs]})
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])  # so the runner imports this very ablate
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(launch_dir / f"{plan.batch}.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from ablate.launch import run_local_queue; run_local_queue(sys.argv[1])",
             str(queue)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, close_fds=True)  # detached: `ablate sweep | cat` returns at once
    _crashpoint("after_spawn")
    runner = {"pid": proc.pid, "start": proc_start(proc.pid) or 0}
    ledger.append(*({"event": "submitted", "run_id": j.run_id, "batch": plan.batch, "runner": runner}
                    for j in jobs))
    plan.job_ids = {j.run_id: f"local:{proc.pid}" for j in jobs}


def run_local_queue(queue_file: str | Path, poll_s: float = 0.2) -> None:
    """The local runner: keep at most max_parallel submitit LocalExecutor jobs alive until the queue
    is empty. Runs superseded meanwhile (a later submission of the same run) are skipped."""
    q = store.read_json(queue_file)
    sweep_dir, batch = Path(q["sweep_dir"]), q["batch"]
    ledger = Ledger(sweep_dir)
    ex = submitit.LocalExecutor(folder=str(sweep_dir / "jobs" / "%j"), max_num_timeout=q["max_requeues"])
    ex.update_parameters(timeout_min=q["timeout_min"], signal_delay_s=min(30, int(q["timeout_min"] * 60 * 0.1) + 1))
    todo = deque(q["jobs"])
    active: dict[str, Any] = {}
    while todo or active:
        while todo and len(active) < q["max_parallel"]:
            item = todo.popleft()
            rec = ledger.fold().get(item["spec"]["run_id"])
            if rec is None or rec.batch != batch or rec.state not in ("submitting", "queued"):
                continue
            job = RunJob(item["spec"], str(sweep_dir), batch, item["job"], item["threads"], q["max_requeues"],
                         q["timeout_min"])
            active[job.run_id] = ex.submit(job)
            print(f"{time.strftime('%H:%M:%S')} started {job.run_id} as local job {active[job.run_id].job_id}",
                  flush=True)
        ended = [rid for rid, j in active.items() if j.done()]
        for rid in ended:
            _finalize_local(ledger, batch, rid, active.pop(rid))
        if not ended:
            time.sleep(poll_s)


def _finalize_local(ledger: Ledger, batch: str, run_id: str, job: Any) -> None:
    """A local job ended: if it could not record its own end (killed), record it as failed."""
    with ledger.lock():
        rec = ledger.fold().get(run_id)
        if rec is None or rec.batch != batch or rec.state in TERMINAL:
            return
        state = job.state
        cause = "cancelled" if state == "INTERRUPTED" else "killed"
        err = f"local job {job.job_id} ended ({state}) without recording a result"
        ledger.append({"event": "failed", "run_id": run_id, "batch": batch, "job_id": job.job_id, "cause": cause,
                       "error": err, "log": str(job.paths.stderr)})
    RunFiles(store.run_dir(ledger.dir.parent, ledger.dir.name, run_id)).update(
        status="failed", cause=cause, error={"class": None, "message": err, "traceback": []})
