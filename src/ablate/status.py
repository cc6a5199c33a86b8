"""`ablate status`: every run of a sweep from the files alone (ledger + each run's metrics tail), plus at most one
batched `sacct` call per refresh when SLURM runs are live. Read-only: it never writes, so it is safe from any shell
while the sweep runs. Also the progress bar of `ablate sweep --follow` and `wait_for` (tests, benchmarks)."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from rich.table import Table
from rich.text import Span, Text

from ablate import store
from ablate.launch.liveness import current_states
from ablate.ledger import TERMINAL, Ledger
from ablate.prune import saved
from ablate.rundir import TRUNCATION_WARN, RunDir, sweep_dir
from ablate.text import safe

ENDED = TERMINAL  # states a run does not leave by itself


@dataclass
class RunStatus:
    run_id: str
    label: str
    state: str
    """pending (submitting/queued), running, requeued, done, diverged, failed, preempted, pruned, unstable"""
    cause: str | None
    job_id: str | None
    executor: str
    step: int | None
    max_steps: int | None
    val_pass_rate: float | None
    gpu_hours: float | None
    truncation_rate: float | None
    truncation_warning: bool
    attempts: int
    requeues: int
    error: str | None
    log: str | None
    reason: str | None = None
    """pruned / unstable: why the prune monitor stopped it."""

    @property
    def progress(self) -> float | None:
        if self.step is None or not self.max_steps:
            return None
        return min(1.0, self.step / self.max_steps)

    @property
    def ended(self) -> bool:
        return self.state in ENDED


def sweep_status(root: Path | str, name: str) -> list[RunStatus]:
    """The status of every run in `root/name`'s ledger, in submission order."""
    sdir = sweep_dir(root, name)
    if not (sdir / "ledger.jsonl").exists():
        raise_missing(root, name)
    check_ledger(sdir)
    recs, verdicts = current_states(Ledger(sdir))
    out = []
    for rid, r in recs.items():
        v = verdicts.get(rid)
        state, cause, error = (v.state, v.cause, v.error) if v else (r.state, r.cause, r.error)
        if state in ("new",):
            state = "lost"  # its submitter died before handing it over; `ablate sweep` resubmits it
        elif state in ("submitting", "queued"):
            state = "pending"
        m = RunDir.of(root, name, rid).last_metrics() or {}
        trunc = store.finite_number(m.get("truncation_rate"))
        out.append(RunStatus(
            run_id=rid, label=r.label, state=state, cause=cause, job_id=r.job_id, executor=r.executor,
            step=_step(m.get("step")), max_steps=_step(r.max_steps),
            val_pass_rate=store.finite_number(m.get("val_pass_rate")), gpu_hours=store.finite_number(m.get("gpu_hours")), truncation_rate=trunc,
            truncation_warning=isinstance(trunc, (int, float)) and trunc > TRUNCATION_WARN,
            attempts=r.attempts, requeues=r.requeues, error=error, log=r.log, reason=r.reason))
    return out


def _step(v: Any) -> int | None:
    """A step count: an integer in [0, 2^53] (past that, no run's: progress would overflow), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 2**53 else None


def check_ledger(sdir: Path | str) -> None:
    """A ledger that is there but no file (a directory, a device): one UserError line, before anything reads or
    appends to it."""
    path = Path(sdir) / "ledger.jsonl"
    if path.exists() and not path.is_file():
        from ablate.errors import UserError

        what = "a directory" if path.is_dir() else "not a regular file"
        raise UserError(f"{safe(path)}: {what}, not the sweep's ledger file; move it aside (the run directories keep "
                        "their results) and run `ablate sweep` again to write a new one")


def raise_missing(root: Path | str, name: str) -> None:
    from ablate.errors import UserError

    have = ", ".join(list_sweeps(root)) or "none"
    raise UserError(f"no sweep {name!r} under {root}/ (sweeps there: {have}); run `ablate sweep RECIPE` first")


def list_sweeps(root: Path | str) -> list[str]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/ledger.jsonl"))


def summary(statuses: Sequence[RunStatus]) -> dict[str, Any]:
    counts = Counter(s.state for s in statuses)
    return {"runs": len(statuses), **{k: counts.get(k, 0) for k in
            ("done", "diverged", "running", "requeued", "pending", "failed", "preempted", "lost", "pruned",
             "unstable")},
            "gpu_hours": round(sum(s.gpu_hours or 0.0 for s in statuses), 4),
            "truncation_warnings": sum(s.truncation_warning for s in statuses),
            "pruning": saved(statuses)}


def summary_line(name: str, statuses: Sequence[RunStatus]) -> str:
    s = summary(statuses)
    parts = [f"{s[k]} {k}" for k in ("done", "running", "pending", "requeued", "failed", "preempted", "diverged",
                                       "pruned", "unstable", "lost") if s[k] or k in ("done", "running", "failed")]
    warn = f", {s['truncation_warnings']} truncation warnings" if s["truncation_warnings"] else ""
    p = s["pruning"]
    kept = (f"; pruning saved {p['gpu_hours_saved']:.3g} of {p['gpu_hours_full']:.3g} GPU-hours ({p['share']:.0%}) "
            "against running every run to its max_steps") if p else ""
    return f"{name}: {s['runs']} runs: " + ", ".join(parts) + f"; {s['gpu_hours']:.3g} GPU-hours{warn}{kept}"


STYLE = {"done": "green", "running": "cyan", "pending": "dim", "requeued": "yellow", "failed": "red",
         "preempted": "yellow", "diverged": "magenta", "lost": "red", "pruned": "blue", "unstable": "magenta"}


COLUMNS = (("label", "left"), ("run", "left"), ("state", "left"), ("job", "left"), ("step", "right"),
           ("pass rate", "right"), ("GPU-h", "right"), ("trunc", "right"))
# rich's Table costs ~1.2 ms a row (cell measuring); above this many runs we align the columns ourselves
# (same columns and colours, 10x faster) so that `ablate status` on 1,000 runs stays under a second.
FAST_TABLE_ROWS = 200


def _cells(s: RunStatus) -> list[tuple[str, str | None]]:
    """One row as (text, style) per column; what the ledger says (label, run id, job id, cause) shown as text
    (text.safe: an escape sequence in a label is printed, not obeyed)."""
    state = s.state + (f"({s.cause})" if s.cause and s.state in ("failed", "preempted") and s.cause != "preempted" else "")
    step = "" if s.step is None else (f"{s.step}/{s.max_steps} ({s.progress:.0%})" if s.max_steps else str(s.step))
    trunc = "" if s.truncation_rate is None else f"{s.truncation_rate:.0%}" + (" !" if s.truncation_warning else "")
    return [(safe(s.label), None), (safe(s.run_id), None), (safe(state), STYLE.get(s.state)),
            (safe(s.job_id or ""), None), (step, None),
            ("" if s.val_pass_rate is None else f"{s.val_pass_rate:.3f}", None),
            ("" if s.gpu_hours is None else f"{s.gpu_hours:.3g}", None),
            (trunc, "red" if s.truncation_warning else None)]


def status_table(name: str, statuses: Iterable[RunStatus]) -> Any:
    """A rich renderable with one row per run: a Table, or aligned styled text for very large sweeps."""
    rows = [_cells(s) for s in statuses]
    if len(rows) > FAST_TABLE_ROWS:
        return _fast_table(name, rows)
    t = Table(title=Text(f"sweep {safe(name)}"), title_justify="left")
    for col, justify in COLUMNS:
        t.add_column(col, no_wrap=True, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        t.add_row(*(Text(text, style=style or "") for text, style in row))
    return t


def _fast_table(name: str, rows: list[list[tuple[str, str | None]]]) -> Text:
    widths = [max([len(col)] + [len(r[j][0]) for r in rows]) for j, (col, _) in enumerate(COLUMNS)]

    def pad(text: str, j: int) -> str:
        return text.rjust(widths[j]) if COLUMNS[j][1] == "right" else text.ljust(widths[j])

    parts = [f"sweep {safe(name)}\n", "  ".join(pad(col, j) for j, (col, _) in enumerate(COLUMNS)) + "\n"]
    spans = [Span(0, len(parts[0]) - 1, "italic"), Span(len(parts[0]), len(parts[0]) + len(parts[1]) - 1, "bold")]
    pos = len(parts[0]) + len(parts[1])
    for row in rows:
        for j, (text, style) in enumerate(row):
            cell = pad(text, j)
            if style:
                spans.append(Span(pos, pos + len(cell), style))
            sep = "  " if j < len(row) - 1 else "\n"
            parts.append(cell + sep)
            pos += len(cell) + len(sep)
    out = Text("".join(parts), spans=spans)
    out.no_wrap = True
    out.overflow = "ignore"
    return out


def status_json(name: str, statuses: Sequence[RunStatus]) -> dict[str, Any]:
    return {"sweep": name, "summary": summary(statuses),
            "runs": [{**asdict(s), "progress": s.progress} for s in statuses]}


def follow_runs(root: Path | str, name: str, run_ids: Sequence[str], interval: float = 2.0,
                timeout: float | None = None) -> list[RunStatus]:
    """`ablate sweep --follow`: a progress bar until every run in `run_ids` has ended."""
    want = set(run_ids)
    t0 = time.monotonic()
    try:
        return _follow(root, name, want, interval, timeout, t0)
    except KeyboardInterrupt:
        print(f"stopped following; the runs go on (ablate status {name})")
        return []


def _follow(root: Path | str, name: str, want: set[str], interval: float, timeout: float | None,
            t0: float) -> list[RunStatus]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=False) as bar:
        task = bar.add_task(f"{name}", total=len(want))
        while True:
            sts = [s for s in sweep_status(root, name) if s.run_id in want]
            ended = sum(s.ended for s in sts)
            c = Counter(s.state for s in sts)
            bar.update(task, completed=ended, description=f"{name} " + " ".join(f"{k}={v}" for k, v in sorted(c.items())))
            if ended >= len(want) or (timeout is not None and time.monotonic() - t0 > timeout):
                return sts
            time.sleep(interval)


def wait_for(root: Path | str, name: str, run_ids: Sequence[str], *, states: Sequence[str] = ENDED,
             timeout: float = 60.0, interval: float = 0.3) -> dict[str, RunStatus]:
    """Poll until each run in `run_ids` is in one of `states` (tests, bench); raises TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        sts = {s.run_id: s for s in sweep_status(root, name) if s.run_id in run_ids}
        if len(sts) == len(set(run_ids)) and all(s.state in states for s in sts.values()):
            return sts
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs not in {states} after {timeout}s: "
                               + ", ".join(f"{k}={v.state}" for k, v in sts.items()))
        time.sleep(interval)


__all__ = ["RunStatus", "sweep_status", "status_table", "status_json", "summary_line", "follow_runs", "wait_for",
           "list_sweeps"]


def show_status(root: Path | str, sweep: str | None, *, watch: bool = False, interval: float = 5.0,
                as_json: bool = False) -> None:
    """The `ablate status` command: one table (or JSON object) per sweep, refreshed with `watch`."""
    from rich.console import Console, Group
    from rich.live import Live

    names = [sweep] if sweep else list_sweeps(root)
    if not names:
        from ablate.errors import UserError

        raise UserError(f"no sweeps under {root}/; run `ablate sweep RECIPE` first (or pass --root)")

    def collect() -> list[tuple[str, list[RunStatus]]]:
        return [(n, sweep_status(root, n)) for n in names]

    if as_json:
        data = [status_json(n, s) for n, s in collect()]
        print(json.dumps(data[0] if sweep else {"sweeps": data}, indent=2, default=str))
        return

    def render(data: list[tuple[str, list[RunStatus]]]) -> Group:
        parts: list[Any] = []
        for n, sts in data:
            parts += [status_table(n, sts), Text(safe(summary_line(n, sts)))]
            for s in sts:
                if s.state == "failed" and s.error:
                    last = (str(s.error).strip().splitlines() or [""])[-1]
                    parts.append(Text(safe(f"  {s.label} ({s.run_id}) failed({s.cause}): {last}  log: {s.log or '-'}"),
                                      style="red"))
                elif s.state in ("pruned", "unstable") and s.reason:
                    parts.append(Text(safe(f"  {s.label} ({s.run_id}) {s.state} at step {s.step}: {s.reason}"),
                                      style=STYLE[s.state]))
        return Group(*parts)

    console = Console()
    if not console.is_terminal:  # piped or redirected: do not squeeze the table into 80 columns
        console = Console(width=max(console.width, 160))
    data = collect()
    if not watch:
        console.print(render(data))
        return
    try:
        with Live(render(data), console=console, refresh_per_second=4) as live:
            while not all(s.ended for _, sts in data for s in sts):
                time.sleep(interval)
                data = collect()
                live.update(render(data))
    except KeyboardInterrupt:
        pass
