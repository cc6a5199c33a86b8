"""SLURM: whether a controller answers, cluster profiles, and the queries that tell what became of a job.

Profiles are short YAML files, `slurm/<name>.yaml`, whose keys map onto submitit's SlurmExecutor parameters. They
are named on the command line only (`ablate sweep ... --profile NAME` or a path), never by a recipe: a profile's
`setup:` lines are pasted into the sbatch script, so a sweep file someone hands you must not be able to choose one.

`job_states` asks `sacct` (accounting on) or, without accounting, `squeue` once for a batch of jobs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, Sequence

from ablate.config import closest
from ablate.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_PROFILE = "local"

# Profile keys -> submitit SlurmExecutor parameters.
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

# sacct states of a job that has not ended, and the failure cause of those that ended without a result.
SACCT_LIVE = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED",
              "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
SACCT_CAUSE = {"CANCELLED": "cancelled", "TIMEOUT": "timeout", "OUT_OF_MEMORY": "oom", "NODE_FAIL": "node_failure",
               "BOOT_FAIL": "node_failure", "DEADLINE": "timeout", "FAILED": "exception",
               "COMPLETED": "no_result", "REVOKED": "cancelled", "GONE": "lost"}


def slurm_up(timeout: float = 5.0) -> bool:
    """True when a SLURM controller answers (`scontrol ping` ... UP), not merely when sbatch is installed (packages
    outlive clusters)."""
    if shutil.which("scontrol") is None:
        return False
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=timeout)
    except (subprocess.TimeoutExpired, OSError):
        return False
    return out.returncode == 0 and "UP" in out.stdout


def find_profile(profile: str) -> Path:
    """A profile name (slurm/<name>.yaml in the working directory, then in ablate's own slurm/) or a YAML path."""
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
    """Read a profile into SlurmExecutor parameters; unknown keys are errors naming the closest valid key."""
    import yaml

    path = find_profile(profile)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a SLURM profile must be a mapping of keys to values")
    params: dict[str, Any] = {}
    for key, value in data.items():
        if key not in PROFILE_KEYS:
            hint = closest(str(key), list(PROFILE_KEYS)) or f"; valid keys: {', '.join(PROFILE_KEYS)}"
            raise UserError(f"{path}: unknown key {key!r}{hint}")
        if value is None or value == [] or value == {}:
            continue
        if key == "mem_gb":
            value = f"{value}G"
        params[PROFILE_KEYS[key]] = value
    return params


def _expand_array_id(jid: str) -> list[str]:
    """`12_[1-3,5%2]` -> 12_1, 12_2, 12_3, 12_5; plain ids unchanged."""
    if "_[" not in jid:
        return [jid]
    base, rng = jid.split("_[", 1)
    out = []
    for part in rng.rstrip("]").split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        out += [f"{base}_{i}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def _query(cmd: list[str], job_ids: Sequence[str]) -> subprocess.CompletedProcess | None:
    """Run one batched SLURM query over the jobs' base ids; None when the tool is missing or does not answer."""
    bases = sorted({j.split("_")[0] for j in job_ids if j})
    if not bases or shutil.which(cmd[0]) is None:
        return None
    try:
        return subprocess.run(cmd + [",".join(bases)], capture_output=True, text=True, timeout=30)
    except (subprocess.TimeoutExpired, OSError):
        return None


def _rows(text: str) -> dict[str, list[str]]:
    """`id|field|...` lines -> job id -> fields, array ranges expanded."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        jid, *fields = line.split("|")
        for j in _expand_array_id(jid.strip()):
            out[j] = [f.strip() for f in fields]
    return out


def sacct_states(job_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """One batched `sacct` call: job id -> (STATE word, exit code). Missing ids are unknown (sacct lags a few
    seconds for array tasks), which callers must treat as still alive. Without accounting: `squeue_states`."""
    out = _query(["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j"], job_ids)
    if out is None:
        return {}
    if out.returncode != 0:  # accounting disabled on this cluster
        return squeue_states(job_ids)
    return {j: ((f[0].split() or [""])[0], f[1]) for j, f in _rows(out.stdout).items() if len(f) >= 2}


def squeue_states(job_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Without accounting: one `squeue` call. A job it no longer lists has left the queue (state GONE): if it did
    not record its own end, it died (cancelled, killed, out of time) and we cannot say which."""
    out = _query(["squeue", "-h", "-o", "%i|%T", "-j"], job_ids)
    if out is None or (out.returncode != 0 and "Invalid job id" not in out.stderr):
        return {}  # the controller did not answer: know nothing rather than call everything dead
    listed = {j: (f[0], "") for j, f in _rows(out.stdout).items() if f}
    return {j: listed.get(j, ("GONE", "?")) for j in job_ids if j}
