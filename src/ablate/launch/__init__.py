"""Launching sweeps: the submitting side (submit.py; what it submits: submission.py), the job side (job.py) and
the job function it calls (jobfn.py), the local runner (local.py), SLURM profiles and queries (slurm.py), and
liveness checks of the runs a ledger calls live (liveness.py, which also records the deaths it finds). Import each
name from its module; this package re-exports nothing, so `python -m ablate.launch.local` (the detached runner)
imports only what it runs."""
