"""What was swept and how each run stands, for `ablate report`, read from the runs' own files: each arm's changes
against the baseline (config.yaml), its seeds and compute, and every run's status row (ablate.launch.status)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.config.identity import label_seed
from ablate.launch.status import RunStatus, check_ledger, sweep_status
from ablate.states import RunState
from ablate.storage import fs, store
from ablate.storage.rundir import RunDir, sweep_run_dirs
from ablate.storage.runinfo import RunInfo

NOT_COMPARED_KEYS = ("seed", "launcher", "resources", "track")
"""config.yaml sections that never make an arm (seeds, where and how it ran): left out of the changes column."""


@dataclass
class SweptArm:
    """One arm as it was swept: what it changes against the baseline, its seeds and the compute of its runs."""

    label: str
    baseline: bool
    changes: list[str]
    seeds: list[str]
    runs: int
    trainer: str
    device: str
    max_steps: int | None
    samples: float | None
    """Samples (completions) per run, the mean of its runs' last metrics."""
    gpu_hours: float | None
    """GPU-hours per run, the mean of its runs' last metrics."""


def run_statuses(sweep: Path) -> list[RunStatus]:
    """`ablate status`'s rows; a sweep folder with no ledger (runs copied from elsewhere) is read from run.json."""
    if (sweep / "ledger.jsonl").exists():
        check_ledger(sweep)
        return sweep_status(sweep.resolve().parent, sweep.resolve().name)
    rows = [status_from_run_json(rd) for rd in sweep_run_dirs(sweep)]
    return sorted(rows, key=lambda s: s.label)


def status_from_run_json(rd: RunDir) -> RunStatus:
    """A run's status row from its own files only (run.json and the tail of metrics.jsonl)."""
    from ablate.storage.metricsfile import TRUNCATION_WARN

    info = rd.info()
    m = rd.last_metrics() or {}
    try:
        state = RunState(info.status)
    except ValueError:
        state = RunState.LOST
    trunc = store.finite_number(m.get("truncation_rate"))
    step = m.get("step")
    return RunStatus(
        run_id=info.run_id,
        label=info.label or info.run_id,
        state=state,
        cause=info.cause,
        job_id=info.raw.get("job_id") if isinstance(info.raw.get("job_id"), str) else None,
        executor=str(info.raw.get("executor") or ""),
        step=step if isinstance(step, int) and not isinstance(step, bool) else info.step,
        max_steps=info.max_steps,
        val_pass_rate=store.finite_number(m.get("val_pass_rate")),
        gpu_hours=store.finite_number(m.get("gpu_hours")),
        truncation_rate=trunc,
        truncation_warning=trunc is not None and trunc > TRUNCATION_WARN,
        attempts=attempt if isinstance(attempt := info.raw.get("attempt"), int) and attempt >= 1 else 1,
        requeues=0,
        error=None if info.error is None else info.why(),
        log=None,
        reason=info.reason,
    )


def run_warnings(s: RunStatus) -> list[str]:
    """What a reader of a run's row should know: why it ended as it did, requeues, truncation."""
    out = []
    if s.state in (RunState.FAILED, RunState.PREEMPTED, RunState.LOST, RunState.DIVERGED) and (s.error or s.cause):
        out.append(str(s.error or s.cause))
    if s.reason:
        out.append(str(s.reason))
    if s.requeues:
        out.append(f"requeued {s.requeues}x")
    if s.truncation_warning and s.truncation_rate is not None:
        out.append(f"truncation {s.truncation_rate:.0%} (over 10%: the pass rate is biased)")
    return out


def swept_arms(sweep: Path, statuses: list[RunStatus]) -> list[SweptArm]:
    """Each arm, in the order its runs were submitted, with its changes against the baseline's config.yaml."""
    by_id = {s.run_id: s for s in statuses}
    runs: dict[str, list[tuple[RunInfo, dict[str, Any], dict[str, Any]]]] = {}
    for rd in sweep_run_dirs(sweep):  # no link followed: a linked run, or file of one, is refused in one line
        info = rd.info()
        runs.setdefault(info.arm, []).append((info, flat_config(rd), rd.last_metrics() or {}))
    order = list(dict.fromkeys(RunInfo(s.run_id, label=s.label).arm for s in statuses))
    labels = [a for a in order if a in runs] + [a for a in runs if a not in order]
    base = next((a for a in labels if any(i.baseline for i, _, _ in runs[a])), None)
    labels.sort(key=lambda a: a != base)  # the baseline first, the others as they were submitted
    base_cfg = runs[base][0][1] if base else {}
    out = []
    for label in labels:
        members = runs[label]
        info, cfg, _ = members[0]
        st = [by_id[i.run_id] for i, _, _ in members if i.run_id in by_id]
        out.append(
            SweptArm(
                label=label,
                baseline=label == base,
                changes=changes(cfg, base_cfg, info.overrides) if label != base else [],
                seeds=sorted((seed_of(i, c) for i, c, _ in members), key=seed_order),
                runs=len(members),
                trainer=str(cfg.get("trainer.name") or info.raw.get("trainer") or "—"),
                device=", ".join(sorted({str(i.raw.get("device") or "—") for i, _, _ in members})),
                max_steps=info.max_steps,
                samples=mean([store.finite_number(m.get("samples")) for _, _, m in members]),
                gpu_hours=mean([s.gpu_hours for s in st]),
            )
        )
    return out


def flat_config(rd: RunDir) -> dict[str, Any]:
    """A run's config.yaml as dotted keys (empty when it has none: runs written by other tools)."""
    import yaml

    try:
        with fs.safe_open(rd.at(rd.config_path), "r") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return {}
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        else:
            out[prefix[:-1]] = node

    walk(data if isinstance(data, dict) else {}, "")
    return out


def changes(cfg: dict[str, Any], base: dict[str, Any], overrides: list[str]) -> list[str]:
    """`key: baseline's → this arm's` for each recipe value that differs (both config.yaml read), else the overrides
    the run recorded; seeds and where it ran are not changes."""
    if not cfg or not base:
        return [o for o in overrides if not o.startswith("seed=")]
    keys = [k for k in dict.fromkeys([*base, *cfg]) if k.split(".")[0] not in NOT_COMPARED_KEYS]
    return [f"{k}: {base.get(k, '—')} → {cfg.get(k, '—')}" for k in keys if base.get(k) != cfg.get(k)]


def seed_of(info: RunInfo, cfg: dict[str, Any]) -> str:
    """The run's seed: config.yaml's, else the `seed=` part of its label."""
    if "seed" in cfg:
        return str(cfg["seed"])
    return label_seed(info.label) or "—"


def seed_order(seed: str) -> tuple[bool, int, str]:
    """Seeds in numeric order (2 before 10), any that is not a number after them."""
    return (not seed.isdigit(), int(seed) if seed.isdigit() else 0, seed)


def mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
