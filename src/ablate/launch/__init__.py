"""Launching sweeps: the submitting side (submit.py; what it submits: submission.py), the job side (job.py) and
the job function it calls (jobfn.py), the local runner (local.py), SLURM profiles and queries (slurm.py), and
liveness checks of the runs a ledger calls live (liveness.py, which also records the deaths it finds).

The names below are loaded on first use, so that `python -m ablate.launch.local` (the detached runner) starts
without importing its own module twice."""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "DEFAULT_JOB": "jobfn",
    "RunJob": "job",
    "resolve_job": "jobfn",
    "load_profile": "slurm",
    "slurm_up": "slurm",
    "EXECUTORS": "submit",
    "Submission": "submission",
    "launch_sweep": "submit",
    "make_submission": "submission",
    "resolve_executor": "submit",
}

__all__ = [
    "DEFAULT_JOB",
    "EXECUTORS",
    "RunJob",
    "Submission",
    "launch_sweep",
    "load_profile",
    "make_submission",
    "resolve_executor",
    "resolve_job",
    "slurm_up",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'ablate.launch' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ablate.launch.{_HOME[name]}"), name)
