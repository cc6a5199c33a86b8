"""Launching sweeps: the submitting side (submit.py), the job side (job.py), the local runner (local.py), SLURM
profiles and queries (slurm.py), and liveness checks of the runs a ledger calls live (liveness.py)."""

from ablate.launch.job import DEFAULT_JOB, RunJob, resolve_job
from ablate.launch.slurm import load_profile, slurm_up
from ablate.launch.submit import EXECUTORS, Plan, launch_sweep, make_plan, resolve_executor

__all__ = ["DEFAULT_JOB", "EXECUTORS", "Plan", "RunJob", "launch_sweep", "load_profile", "make_plan",
           "resolve_executor", "resolve_job", "slurm_up"]
