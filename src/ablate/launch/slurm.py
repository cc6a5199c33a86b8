"""SLURM: whether a controller answers, cluster profiles, and the queries that tell what became of a job.

Profiles are short YAML files whose keys map onto submitit's SlurmExecutor parameters. They are chosen, never found: a
profile's `setup:` lines are pasted into the sbatch script, so neither a recipe nor the folder you run in may supply
one. `--profile NAME` is ablate's own packaged profile (ablate/profiles/NAME.yaml), `--profile path/to/x.yaml` (anything
with a `/` or a .yaml suffix) is exactly that file, and no `--profile` is the packaged `local`. A `slurm/NAME.yaml` in
the working directory is used only when named by path (`--profile ./slurm/NAME.yaml`). The sbatch script says which file
it came from (`# ablate profile: <absolute path>`, its first setup line).

`job_states` asks `sacct` (accounting on) or, without accounting, `squeue` once for a batch of jobs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ablate.compose.resources import profile_names, profile_path
from ablate.config.validation import closest
from ablate.errors import ErrorKind, UserError

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
SACCT_LIVE = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SUSPENDED",
    "CONFIGURING",
    "COMPLETING",
    "STAGE_OUT",
    "SIGNALING",
    "RESV_DEL_HOLD",
    "SPECIAL_EXIT",
}
SACCT_CAUSE = {
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "OUT_OF_MEMORY": "oom",
    "NODE_FAIL": "node_failure",
    "BOOT_FAIL": "node_failure",
    "DEADLINE": "timeout",
    "FAILED": "exception",
    "COMPLETED": "no_result",
    "REVOKED": "cancelled",
    "GONE": "lost",
}


def slurm_up(timeout: float = 5.0) -> bool:
    """True when a SLURM controller answers (`scontrol ping` ... UP), not merely when sbatch is installed (packages
    outlive clusters)."""
    if shutil.which("scontrol") is None:
        return False
    try:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=timeout, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return False
    return out.returncode == 0 and "UP" in out.stdout


def find_profile(profile: str | None = None) -> Path:
    """The profile file, as an absolute path: a name is ablate's own packaged <name>.yaml, a path (a `/` or a .yaml/.yml
    suffix) exactly that file, None the packaged default. Never a file the working directory happens to hold."""
    name = profile or DEFAULT_PROFILE
    by_path = name.endswith((".yaml", ".yml")) or "/" in name or os.sep in name
    path = Path(name) if by_path else profile_path(name)
    if not path.is_file():
        names = ", ".join(profile_names()) or "none"
        raise UserError(
            f"SLURM profile {name!r} not found (looked for {path}); --profile NAME takes one of ablate's "
            f"own profiles ({names}), a file of your own goes by path: --profile ./slurm/{path.stem}.yaml",
            kind=ErrorKind.RECIPE,
        )
    path = path.resolve()
    if not str(path).isprintable():  # it is written into the sbatch script as a comment line
        raise UserError(
            f"SLURM profile {str(path)!r}: its path holds control characters; rename the file", kind=ErrorKind.RECIPE
        )
    return path


def load_profile(profile: str | None = None) -> dict[str, Any]:
    """Read a profile (see `find_profile`) into SlurmExecutor parameters; unknown keys are errors naming the closest
    valid key. The first setup line names the profile's file, so the sbatch script says where it came from."""
    import yaml

    from ablate.compose.safe_yaml import check_yaml

    path = find_profile(profile)
    try:
        text = path.read_text(encoding="utf-8")
        check_yaml(text, str(path))  # an alias bomb is refused before PyYAML expands it
        data = yaml.safe_load(text) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0]})", kind=ErrorKind.FILE) from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a SLURM profile must be a mapping of keys to values", kind=ErrorKind.RECIPE)
    params: dict[str, Any] = {}
    for key, value in data.items():
        if key not in PROFILE_KEYS:
            hint = closest(str(key), list(PROFILE_KEYS)) or f"; valid keys: {', '.join(PROFILE_KEYS)}"
            raise UserError(f"{path}: unknown key {key!r}{hint}", kind=ErrorKind.RECIPE)
        if value is None or value == [] or value == {}:
            continue
        params[PROFILE_KEYS[key]] = f"{value}G" if key == "mem_gb" else value
    setup = params.get("setup", [])
    setup = [setup] if isinstance(setup, str) else setup
    if not isinstance(setup, list) or not all(isinstance(x, str) for x in setup):
        raise UserError(
            f"{path}: setup must be a list of shell lines, e.g. setup: [module load cuda]", kind=ErrorKind.RECIPE
        )
    params["setup"] = [f"# ablate profile: {path}", *setup]
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
        return subprocess.run(cmd + [",".join(bases)], capture_output=True, text=True, timeout=30, check=False)
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
