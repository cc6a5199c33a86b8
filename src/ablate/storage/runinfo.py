"""What run.json says of a run, as its readers see it (`RunInfo`), and the record of an exception run.json and the
ledger keep (`error_record`, `cause_of`). The file itself is written only through ablate.storage.rundir.RunDir; its
fields are in docs/run-directory.md.
"""

from __future__ import annotations

import errno
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

from ablate.config.identity import label_arm

TRACEBACK_LINES = 15


def error_record(exc: BaseException, lines: int = TRACEBACK_LINES) -> dict[str, Any]:
    """What run.json and the ledger keep of an exception: class, message, the last traceback lines."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip().splitlines()[-lines:]
    return {"class": type(exc).__name__, "message": str(exc), "traceback": tb}


def no_space(exc: BaseException) -> bool:
    """True when `exc` (or an exception it chains) is a full disk."""
    seen = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        link = link.__cause__ or link.__context__
    return False


def cause_of(exc: BaseException) -> str:
    """The `cause` recorded for a crash: oom, no_space or exception (or the `cause` an exception carries, as a
    data-parallel run's RankFailed does: `killed` for a rank that died of a signal)."""
    if isinstance(getattr(exc, "cause", None), str):
        return exc.cause  # type: ignore[attr-defined]
    torch = sys.modules.get("torch")  # a process that never imported torch cannot have run out of device memory
    if isinstance(exc, MemoryError) or (torch is not None and isinstance(exc, torch.OutOfMemoryError)):
        return "oom"
    return "no_space" if no_space(exc) else "exception"


@dataclass
class RunInfo:
    """The reader's view of run.json. Every field tolerates a missing or ill-typed value (it reads as unknown)."""

    run_id: str
    arm_id: str | None = None
    label: str = ""
    sweep: str | None = None
    overrides: list[str] = field(default_factory=list)
    baseline: bool = False
    status: str = "unknown"
    cause: str | None = None
    error: dict[str, Any] | None = None
    reason: str | None = None
    step: int | None = None
    max_steps: int | None = None
    val_pass_rate: float | None = None
    truncation_warning: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def arm(self) -> str:
        """The label without its `seed=...` part: the arm's name in `rank`."""
        return label_arm(self.label)

    def why(self) -> str:
        """One line on why the run ended as it did, e.g. `failed (killed): local job 123 ended ...`."""
        head = self.status + (f" ({self.cause})" if self.cause and self.cause != self.status else "")
        detail = self.reason
        if self.error:
            detail = self.error.get("message") or (self.error.get("traceback") or [None])[-1] or self.error.get("class")
        if not detail:
            return head
        first = str(detail).strip().splitlines()[0] if str(detail).strip() else ""
        return f"{head}: {first[:160]}" if first else head

    @classmethod
    def from_json(cls, data: Any, default_id: str) -> RunInfo:
        d = data if isinstance(data, dict) else {}

        def get(key: str, kind: type | tuple, default: Any = None) -> Any:
            v = d.get(key)
            return v if isinstance(v, kind) and not (kind is int and isinstance(v, bool)) else default

        err = get("error", dict)
        return cls(
            run_id=get("run_id", str, default_id),
            arm_id=get("arm_id", str),
            label=get("label", str, ""),
            sweep=get("sweep", str),
            overrides=[str(o) for o in get("overrides", list, [])],
            baseline=get("baseline", bool, False),
            status=get("status", str, "unknown"),
            cause=get("cause", str),
            error=err,
            reason=get("reason", str),
            step=get("step", int),
            max_steps=get("max_steps", int),
            val_pass_rate=get("val_pass_rate", (int, float)),
            truncation_warning=get("truncation_warning", bool, False),
            raw=d,
        )
