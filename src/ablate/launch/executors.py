"""Which executor a launch uses, and what it needs, checked before anything is written: the executor's name (`auto`
resolved by asking SLURM), a CUDA device for runs that execute here, the job function, the SLURM controller and
profile, and how many runs go at once."""

from __future__ import annotations

from typing import Any

from ablate.compose.spec import RunSpec
from ablate.errors import ErrorKind, UserError
from ablate.launch.jobfn import resolve_job
from ablate.launch.slurm import DEFAULT_PROFILE, load_profile, slurm_up
from ablate.storage import fs

EXECUTORS = ("local", "slurm", "debug", "auto")


def resolve_executor(name: str | None) -> str:
    """An executor name, `auto` resolved; a UserError for an unknown one."""
    name = (name or "local").lower()
    if name not in EXECUTORS:
        raise UserError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}", kind=ErrorKind.SETTING)
    if name == "auto":
        return "slurm" if slurm_up() else "local"
    return name


def check_devices_here(runs: list[RunSpec]) -> None:
    """Runs that will execute on this machine and need CUDA (train.device=cuda, as preset=scalerl_8b sets) are
    refused here when it has none, before anything is written, rather than failing one by one."""
    need = next((s for s in runs if s.config.train.device == "cuda"), None)
    if need is None:
        return
    import torch

    if not torch.cuda.is_available():
        raise UserError(
            f"{need.label}: train.device=cuda, but this machine has no CUDA device and the local executor "
            "runs here; launch from a GPU machine or with -e slurm on GPU nodes (or set train.device=auto)",
            kind=ErrorKind.ENVIRONMENT,
        )


def executor_setup(
    runs: list[RunSpec], executor: str | None, max_parallel: int | None, profile: str | None, job: str
) -> tuple[str, int, dict[str, Any]]:
    """(executor, runs at once on the local executor, SLURM parameters), once every check that can fail before
    anything is written has passed: the job function imports, the devices and the SLURM controller are there,
    the profile reads."""
    lcfg = runs[0].config.launcher
    kind = resolve_executor(executor or lcfg.name)
    if max_parallel is not None and max_parallel < 1:
        raise UserError(f"--max-parallel {max_parallel}: must be at least 1", kind=ErrorKind.SETTING)
    asked_parallel = max_parallel or lcfg.max_parallel
    # as many runs as the cores hold: a run takes `threads` cores per rank
    per_run = lcfg.threads * max(s.config.resources.nproc for s in runs)
    parallel = asked_parallel or max(1, fs.cpu_count() // per_run)
    resolve_job(job)  # a job function that does not import would fail every run: refuse before writing anything
    if kind in ("local", "debug"):
        check_devices_here(runs)
    slurm_params: dict[str, Any] = {}
    if kind == "slurm":
        slurm_params = load_profile(profile or DEFAULT_PROFILE)  # bad profiles fail before any write
        if not slurm_up():
            raise UserError(
                "-e slurm: no SLURM controller answers `scontrol ping`; start the cluster (or check "
                "`scontrol ping` on this host), or run with -e local",
                kind=ErrorKind.ENVIRONMENT,
            )
        if asked_parallel:
            slurm_params["array_parallelism"] = int(asked_parallel)  # --max-parallel beats the profile's value
    return kind, parallel, slurm_params
