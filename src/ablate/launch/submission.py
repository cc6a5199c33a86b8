"""What `ablate sweep` submits: the sweep's runs sorted by the state the ledger and the liveness checks say they are
in ("N done, M running, K failed, J new"), and which of them this call submits (see launch/submit.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.launch.liveness import Verdict
from ablate.launch.mixing import recorded_states
from ablate.states import FINISHED, LIVE, STOPPED, RunState
from ablate.storage.ledger import RunRecord


@dataclass
class Submission:
    """What one `ablate sweep` call found and submits: the runs by state, those it submits, their job ids."""

    sweep: str
    executor: str
    done: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    """Stopped by the prune monitor (pruned or unstable); resubmitted only with --resume-pruned."""
    new: list[str] = field(default_factory=list)
    submit: list[str] = field(default_factory=list)
    """Run ids submitted by this call, in sweep order."""
    job_ids: dict[str, str] = field(default_factory=dict)
    batch: str | None = None
    previous: dict[str, str] = field(default_factory=dict)
    """Run id -> the state it was found in (new, done, failed, ...)."""

    def summary(self) -> str:
        parts = [f"{len(self.done)} done", f"{len(self.running)} running", f"{len(self.failed)} failed"]
        if self.preempted:
            parts.append(f"{len(self.preempted)} preempted")
        for state in (s for s in RunState if s in STOPPED):  # pruned, then unstable
            n = sum(self.previous.get(rid) == state for rid in self.pruned)
            if n:
                parts.append(f"{n} {state}")
        parts.append(f"{len(self.new)} new")
        verb = f"submitting {len(self.submit)} via {self.executor}" if self.submit else "nothing to submit"
        if left := [rid for rid in self.failed if rid not in self.submit]:
            verb += f"; {len(left)} failed left as they are: --retry-failed resubmits them (from their checkpoints)"
        return f"{self.sweep}: " + ", ".join(parts) + f" -> {verb}"


def make_submission(
    sweep_name: str,
    run_ids: Sequence[str],
    recs: dict[str, RunRecord],
    verdicts: dict[str, Verdict],
    executor: str,
    *,
    retry_failed: bool = False,
    force: bool = False,
    resume_pruned: bool = False,
) -> Submission:
    """Sort the runs by state and pick those to submit (new and preempted ones; failed ones with `retry_failed`,
    stopped ones with `resume_pruned`, everything not live with `force`)."""
    sub = Submission(sweep_name, executor)
    for rid in run_ids:
        rec = recs.get(rid)
        state = verdicts[rid].state if rid in verdicts else (rec.state if rec else RunState.NEW)
        if state == RunState.FAILED and rec is not None and rec.cause == "submit" and rid not in verdicts:
            state = RunState.NEW  # the executor refused it (bad profile, sbatch error): it never ran
        sub.previous[rid] = state
        if state in FINISHED:
            sub.done.append(rid)
        elif state == RunState.FAILED:
            sub.failed.append(rid)
        elif state == RunState.PREEMPTED:
            sub.preempted.append(rid)
        elif state in STOPPED:
            sub.pruned.append(rid)
        elif state in LIVE:
            sub.running.append(rid)  # queued or running: never submitted twice, not even with --force
            continue
        else:
            sub.new.append(rid)
        if (
            state in (RunState.NEW, RunState.PREEMPTED)
            or force
            or (state == RunState.FAILED and retry_failed)
            or (state in STOPPED and resume_pruned)
        ):
            sub.submit.append(rid)
    return sub


def preview(
    sdir: Path, runs: Sequence[Any], executor: str, *, retry_failed: bool, force: bool, resume_pruned: bool
) -> tuple[dict[str, str], list[str]]:
    """`ablate sweep --dry-run`: each run's state in the sweep folder's ledger as last recorded (`new` when it has
    none), and the runs a launch with these flags would submit (make_submission; liveness is not checked, so a run
    the ledger calls running counts as live). A changed re-launch is refused as `ablate sweep` refuses it. Nothing
    is written."""
    recs = recorded_states(sdir, runs)
    ids = [s.run_id for s in runs]
    sub = make_submission(
        sdir.name, ids, recs, {}, executor, retry_failed=retry_failed, force=force, resume_pruned=resume_pruned
    )
    return {rid: str(sub.previous[rid]) for rid in ids}, sub.submit
