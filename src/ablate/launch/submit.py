"""The submitting side: sort a sweep's runs by their ledger state and submit only what that says, idempotently.

`launch_sweep` takes the ledger lock, folds the ledger into run states, checks that the runs it believes queued or
running are still alive (liveness.py), prints what it found ("N done, M running, K failed, J new") and submits new
runs, preempted runs, failed runs with `--retry-failed`, and everything not live with `--force`. A run that is queued or
running is never submitted twice. Everything that can be checked is checked before anything is written: the job
function imports, the executor exists (a SLURM controller answers), the profile reads, the limits are sane.

Executors (all run the same job, job.RunJob):
- `local`: a detached runner per submission keeps at most `max_parallel` runs of the sweep going (local.py).
- `slurm`: one job array per submission (`submit_array`), resources from a profile (slurm.py).
- `debug`: submitit's DebugExecutor, in the launcher's own process, one run after another, so pdb works.
- `auto`: slurm when `scontrol ping` says a controller is UP, else local.

Deaths a job cannot record (scancel, OOM kill, time limit, node failure, SIGKILL) are read from `sacct`/`squeue`
(SLURM) or inferred from a dead pid (local) and written as `failed` events with their cause by the next
`ablate sweep`. A run the executor refused (an sbatch error) is new again on the next call. Where the jobs' files
and the run directories `--force` replaced are kept, and the failure causes: docs/run-directory.md.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import submitit

from ablate.compose.project import git_commit
from ablate.compose.spec import RunSpec
from ablate.errors import ErrorKind, UserError
from ablate.launch.executors import executor_setup
from ablate.launch.job import RunJob
from ablate.launch.jobenv import crashpoint
from ablate.launch.jobfn import DEFAULT_JOB
from ablate.launch.liveness import current_states, record_deaths
from ablate.launch.local import spawn_runner
from ablate.launch.mixing import check_one_config, recorded_states
from ablate.launch.submission import Submission, make_submission
from ablate.states import FINISHED, STOPPED, TERMINAL
from ablate.storage import failure_reports, fs, ownership
from ablate.storage.ledger import Ledger, hostname, me
from ablate.storage.rundir import RunDir
from ablate.storage.rundir import sweep_dir as sweep_path
from ablate.version import installed

if TYPE_CHECKING:
    from ablate.compose.sweep import Sweep


def launch_sweep(
    sweep: Sweep,
    *,
    root: Path | str = Path("sweeps"),
    executor: str | None = None,
    max_parallel: int | None = None,
    profile: str | None = None,
    retry_failed: bool = False,
    force: bool = False,
    job: str = DEFAULT_JOB,
    echo: Callable[[str], None] | None = print,
    monitored: bool = False,
    after_submit: Callable[[Path], None] | None = None,
    resume_pruned: bool = False,
    group_read: bool = False,
    command: str | None = None,
) -> Submission:
    """Submit the runs of `sweep` (an ablate.compose.sweep.Sweep: `.name`, `.runs: list[RunSpec]`) that are due
    (launch.submission); return the Submission. Safe to call again at any time. `echo` prints its summary line
    (None: silent). `profile`: a SLURM profile name or path (default: the packaged `local`); recipes cannot name
    one. `monitored`: a monitor may stop the runs this call submits (`ablate sweep --prune`; runs resumed with
    `resume_pruned` are not stopped again): the ledger says so, and they go baseline first, then every arm's first
    seed, then the next. `after_submit` is called with the sweep directory once the runs are submitted
    (ablate.prune.monitor.start_hook starts the monitor). The sweep directory is made owner-only (0700), or
    readable by its group with `group_read` (0750; asking for it opens an existing sweep to the group too); a
    sweep directory others could change is refused before anything is written (`_check_sweep_dir`). Each batch
    submitted is recorded with its `command` line, the recipes' commit and where it ran (`launch_event`). All of it
    runs under the sweep's umask (fs.sweep_umask): what submitit makes in the sweep (job folders, pickles) is as
    private as the folders ablate makes itself."""
    root = Path(root).resolve()  # job processes may run elsewhere (another cwd, a node): absolute paths only
    with fs.sweep_umask(group_read or fs.group_readable(sweep_path(root, sweep.name))):
        return _submit_sweep(
            sweep,
            root,
            _Launch(executor, max_parallel, profile, retry_failed, force, job, monitored, resume_pruned, group_read),
            echo,
            after_submit,
            command,
        )


@dataclass(frozen=True)
class _Launch:
    """What `launch_sweep` was asked (its docstring)."""

    executor: str | None
    max_parallel: int | None
    profile: str | None
    retry_failed: bool
    force: bool
    job: str
    monitored: bool
    resume_pruned: bool
    group_read: bool


def _submit_sweep(
    sweep: Sweep,
    root: Path,
    o: _Launch,
    echo: Callable[[str], None] | None,
    after_submit: Callable[[Path], None] | None,
    command: str | None,
) -> Submission:
    runs: list[RunSpec] = list(sweep.runs)
    if not runs:
        raise UserError(f"sweep {sweep.name!r} has no runs", kind=ErrorKind.RECIPE)
    kind, parallel, slurm_params = executor_setup(runs, o.executor, o.max_parallel, o.profile, o.job)
    sdir = sweep_path(root, sweep.name)
    _check_sweep_dir(sdir, [s.run_id for s in runs])
    recorded_states(sdir, runs)  # a changed re-launch is refused before anything is made (again under the lock)
    fs.make_dirs(sdir, fs.dir_mode(o.group_read))
    if o.group_read:
        fs.open_to_group(sdir)
    for sub in ("runs", "jobs", "launch"):  # jobs/ holds pickles the jobs load, launch/ the runner's queues
        fs.make_dirs(sdir / sub)
    ledger = Ledger(sdir)
    by_id = {s.run_id: s for s in runs}
    debug_jobs: list[Any] = []
    with ledger.lock():
        recs, verdicts = current_states(ledger, locked=True)
        check_one_config(sdir, runs, recs)
        record_deaths(ledger, root, sweep.name, recs, verdicts)
        submission = make_submission(
            sweep.name,
            list(by_id),
            recs,
            verdicts,
            kind,
            retry_failed=o.retry_failed,
            force=o.force,
            resume_pruned=o.resume_pruned,
        )
        if echo:
            echo(submission.summary())
        if submission.submit:
            submission.batch = secrets.token_hex(6)
            debug_jobs = _submit(
                ledger,
                root,
                submission,
                [by_id[rid] for rid in submission.submit],
                parallel,
                slurm_params,
                job=o.job,
                force=o.force,
                monitored=o.monitored,
                launch=launch_event(submission.batch, sweep, command),
            )
    if after_submit is not None:
        after_submit(sdir)
    # Debug runs execute here, in this process, after the lock is released (each job claims its run).
    for dj in debug_jobs:
        with contextlib.suppress(Exception):  # recorded in the ledger by RunJob; pdb has already had its chance
            dj.result()
    return submission


def _submit(
    ledger: Ledger,
    root: Path,
    submission: Submission,
    specs: list[RunSpec],
    parallel: int,
    slurm_params: dict[str, Any],
    *,
    job: str,
    force: bool,
    monitored: bool,
    launch: dict[str, Any],
) -> list[Any]:
    """Under the ledger lock: write the runs' intent (`submitting`), hand them to the executor, record its answer
    (or, when it refuses, that they failed to submit); the batch's `launch` event goes with the intent. Returns
    the debug executor's jobs, to run after the lock."""
    kind, batch, sdir, lcfg = submission.executor, submission.batch or "", ledger.dir, specs[0].config.launcher
    if monitored:
        # the monitor decides on what runs: the baseline first, then every arm's first seed, then the next
        seed_rank = {s: i for i, s in enumerate(dict.fromkeys(r.config.seed for r in specs))}
        specs.sort(key=lambda r: (seed_rank[r.config.seed], not r.baseline))
    _prepare_dirs(root, sdir, specs, submission, kind, force)
    ledger.append(
        launch,
        *(
            {
                "event": "submitting",
                "run_id": s.run_id,
                "batch": batch,
                "label": s.label,
                "executor": kind,
                "launcher": me(),
                "max_steps": s.config.train.max_steps,
                "prune": monitored and submission.previous.get(s.run_id) not in STOPPED,
            }
            for s in specs
        ),
    )
    crashpoint("after_submitting")
    jobs = [RunJob(s, str(sdir), batch, job, lcfg.threads, lcfg.max_requeues, lcfg.timeout_min) for s in specs]
    try:
        if kind == "local":
            runner = spawn_runner(
                ledger, batch, jobs, parallel, lcfg.timeout_min, lcfg.max_requeues, lcfg.signal_delay_s
            )
            crashpoint("after_spawn")
            ledger.append(*({"event": "submitted", "run_id": j.run_id, "batch": batch, "runner": runner} for j in jobs))
            submission.job_ids = {j.run_id: f"local:{runner['pid']}" for j in jobs}
        elif kind == "slurm":
            _submit_slurm(ledger, submission, jobs, slurm_params, lcfg.timeout_min, lcfg.max_requeues, submission.sweep)
        else:
            return _submit_debug(ledger, submission, jobs)
    except Exception as e:
        msg = _first_line(e)
        for j in jobs:  # run.json first: once the ledger says failed, run.json agrees
            RunDir.of(root, submission.sweep, j.run_id).try_failed("submit", msg)
        ledger.append(
            *({"event": "failed", "run_id": j.run_id, "batch": batch, "cause": "submit", "error": msg} for j in jobs)
        )
        # a refusal keeps its kind (a link in the sweep, its directory gone); anything else is the launcher's
        said = e.kind if isinstance(e, UserError) else ErrorKind.ENVIRONMENT
        raise UserError(f"submitting {len(jobs)} runs via {kind} failed: {msg}", kind=said) from e
    return []


def launch_event(batch: str, sweep: Any, command: str | None) -> dict[str, Any]:
    """The ledger's `launch` event of a batch: the command line as typed (None when called as a library), the
    working directory, the commit of the folder holding the sweep file (ablate.compose.project.git_commit; None when
    that file is not on disk or not in a git checkout), ablate's version and the host. Fold ignores it (no run_id)."""
    path = Path(sweep.path)
    try:
        cwd: str | None = os.getcwd()
    except OSError:  # the working directory was removed
        cwd = None
    return {
        "event": "launch",
        "batch": batch,
        "command": command,
        "cwd": cwd,
        "commit": git_commit(path.resolve()) if path.is_file() else None,
        "ablate": installed(),
        "host": hostname(),
    }


def _first_line(e: BaseException) -> str:
    """The informative line of an executor's error (sbatch prints its complaint after submitit's preamble)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln.lower() or "fatal:" in ln.lower():
            return ln
    return lines[0] if lines else type(e).__name__


SWEEP_FILES = ("ledger.jsonl", "runs", "jobs", "launch", "archive", "prune", "decide")
"""What ablate keeps directly in a sweep directory."""


def _check_sweep_dir(sdir: Path, run_ids: Sequence[str]) -> None:
    """Refuse (UserError), before anything is written, a sweep directory that someone else could change: one they
    own or can write, one in a folder they can write that has no sticky bit (they could replace it), or one whose
    ledger, folders or run directories are links (they would put the sweep's files elsewhere). Plain state
    readers (status, rank) do not check: they load no code from the sweep."""
    ownership.check_owned_dir(sdir)
    if not sdir.exists():
        return
    for p in [*(sdir / f for f in SWEEP_FILES), *(sdir / "runs" / rid for rid in run_ids)]:
        fs.check_no_links(p, sdir)
        if p.is_dir():
            ownership.check_owned_dir(p, chain=False)


def _prepare_dirs(root: Path, sdir: Path, specs: list[RunSpec], submission: Submission, kind: str, force: bool) -> None:
    """Mark each run pending in its run.json; under --force, archive a finished run's directory first."""
    now = int(time.time())
    for spec in specs:
        rd = RunDir.of(root, spec.sweep, spec.run_id)
        # a run.json that says finished is archived too when the ledger lost the run (it plans as new): run.json
        # never leaves a finished state in place, so --force must move the directory aside to run it again
        if (
            force
            and rd.path.exists()
            and (submission.previous.get(spec.run_id) in TERMINAL or rd.info().status in FINISHED)
        ):
            arch = sdir / "archive" / f"{spec.run_id}.{now}"  # --force re-runs from scratch; the old one is kept
            fs.make_dirs(fs.check_no_links(arch.parent, sdir))
            rd.path.rename(arch)
        failure_reports.clear(rd)  # a failed data-parallel attempt's: its tasks start afresh
        rd.clear_stop_request()  # a prune request the last attempt did not live to obey
        rd.submitted(
            run_id=spec.run_id,
            arm_id=spec.arm_id,
            label=spec.label,
            sweep=spec.sweep,
            overrides=list(spec.overrides),
            baseline=spec.baseline,
            executor=kind,
            batch=submission.batch or "",
        )


def _submit_slurm(
    ledger: Ledger,
    submission: Submission,
    jobs: list[RunJob],
    params: dict[str, Any],
    timeout_min: float,
    max_requeues: int,
    name: str,
) -> None:
    """One job array per shape of job: a data-parallel run is one job of nproc tasks per node on `nodes` nodes (a
    GPU per task when it trains on CUDA); the profile's other settings apply to all."""
    params = {"time": int(-(-timeout_min // 1)), "job_name": f"ablate-{name}", **params}
    params["time"] = max(1, int(params["time"]))  # sbatch --time is whole minutes; 0 would mean no limit
    shapes: dict[tuple[int, int, bool], list[RunJob]] = {}
    for j in jobs:
        res, dev = j.spec.config.resources, j.spec.config.train.device
        shapes.setdefault((res.nproc, res.nodes, dev == "cuda" and res.world > 1), []).append(j)
    done: list[tuple[RunJob, Any]] = []
    for (nproc, nodes, gpu_per_task), group in shapes.items():
        ex = submitit.SlurmExecutor(folder=str(ledger.dir / "jobs" / "%j"), max_num_timeout=max_requeues)
        shape: dict[str, Any] = {}
        if nproc * nodes > 1:  # one task per rank; a task that fails ends the job (a dead NCCL peer is not noticed)
            shape = {
                "ntasks_per_node": nproc,
                "nodes": nodes,
                "srun_args": [*params.get("srun_args", []), "--kill-on-bad-exit=1"],
            }
        if gpu_per_task:
            shape["gpus_per_task"] = 1
        ex.update_parameters(**{**params, **shape})
        for j in group:
            j.timeout_min = params["time"]
        done += zip(group, ex.submit_array(group))  # one sbatch call per shape: a job array
    for j, sj in done:
        submission.job_ids[j.run_id] = sj.job_id
    ledger.append(
        *({"event": "submitted", "run_id": j.run_id, "batch": submission.batch, "job_id": sj.job_id} for j, sj in done)
    )
    for j, sj in done:
        RunDir.of(ledger.dir.parent, ledger.dir.name, j.run_id).job(
            job_id=sj.job_id, job_logs={"stdout": str(sj.paths.stdout), "stderr": str(sj.paths.stderr)}
        )


def _submit_debug(ledger: Ledger, submission: Submission, jobs: list[RunJob]) -> list[Any]:
    ex = submitit.DebugExecutor(folder=str(ledger.dir / "jobs" / "%j"))
    out = [ex.submit(j) for j in jobs]
    ledger.append(
        *(
            {"event": "submitted", "run_id": j.run_id, "batch": submission.batch, "job_id": dj.job_id}
            for j, dj in zip(jobs, out)
        )
    )
    return out
