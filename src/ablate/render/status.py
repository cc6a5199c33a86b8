"""What `ablate status` prints: one table per sweep (state, job, progress, pass rate, GPU-hours, truncation), its
summary line and the reasons runs failed or were stopped; refreshed in place with --watch; and `ablate sweep
--follow`'s progress bar. The statuses come from ablate.launch.status (read-only: ledger + metrics tails); their JSON:
docs/json.md."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Span, Text

from ablate.launch.status import RunStatus, list_sweeps, status_json, summary, sweep_status
from ablate.render.terminal import dump_json
from ablate.states import STOPPED, RunState
from ablate.text import safe

STYLE = {
    RunState.DONE: "green",
    RunState.RUNNING: "cyan",
    RunState.PENDING: "dim",
    RunState.REQUEUED: "yellow",
    RunState.FAILED: "red",
    RunState.PREEMPTED: "yellow",
    RunState.DIVERGED: "magenta",
    RunState.PRUNED: "blue",
    RunState.UNSTABLE: "magenta",
    RunState.LOST: "red",
}
"""Each state's colour; the summary line counts the states in this order."""
ALWAYS_COUNTED = (RunState.DONE, RunState.RUNNING, RunState.FAILED)
"""States the summary line counts even at zero."""


COLUMNS = (
    ("label", "left"),
    ("run", "left"),
    ("state", "left"),
    ("job", "left"),
    ("step", "right"),
    ("pass rate", "right"),
    ("GPU-h", "right"),
    ("trunc", "right"),
)
# rich's Table costs ~1.2 ms a row (cell measuring); above this many runs we align the columns ourselves
# (same columns and colours, 10x faster) so that `ablate status` on 1,000 runs stays under a second.
FAST_TABLE_ROWS = 200


def summary_line(name: str, statuses: Sequence[RunStatus]) -> str:
    """One line per sweep: how many runs are in each state, the GPU-hours spent, truncation warnings and what
    pruning saved."""
    s = summary(statuses)
    parts = [f"{s[k]} {k}" for k in STYLE if s[k] or k in ALWAYS_COUNTED]
    warn = f", {s['truncation_warnings']} truncation warnings" if s["truncation_warnings"] else ""
    p = s["pruning"]
    kept = (
        (
            f"; pruning saved {p['gpu_hours_saved']:.3g} of {p['gpu_hours_full']:.3g} GPU-hours ({p['share']:.0%}) "
            "against running every run to its max_steps"
        )
        if p
        else ""
    )
    return f"{name}: {s['runs']} runs: " + ", ".join(parts) + f"; {s['gpu_hours']:.3g} GPU-hours{warn}{kept}"


def row_cells(s: RunStatus) -> list[tuple[str, str | None]]:
    """One row as (text, style) per column; what the ledger says (label, run id, job id, cause) shown as text
    (text.safe: an escape sequence in a label is printed, not obeyed)."""
    cause = s.state in (RunState.FAILED, RunState.PREEMPTED) and s.cause and s.cause != "preempted"
    state = s.state + (f"({s.cause})" if cause else "")
    step = "" if s.step is None else (f"{s.step}/{s.max_steps} ({s.progress:.0%})" if s.max_steps else str(s.step))
    trunc = "" if s.truncation_rate is None else f"{s.truncation_rate:.0%}" + (" !" if s.truncation_warning else "")
    return [
        (safe(s.label), None),
        (safe(s.run_id), None),
        (safe(state), STYLE.get(s.state)),
        (safe(s.job_id or ""), None),
        (step, None),
        ("" if s.val_pass_rate is None else f"{s.val_pass_rate:.3f}", None),
        ("" if s.gpu_hours is None else f"{s.gpu_hours:.3g}", None),
        (trunc, "red" if s.truncation_warning else None),
    ]


def status_table(name: str, statuses: Iterable[RunStatus]) -> Any:
    """A rich renderable with one row per run: a Table, or aligned styled text for very large sweeps."""
    rows = [row_cells(s) for s in statuses]
    if len(rows) > FAST_TABLE_ROWS:
        return fast_table(name, rows)
    t = Table(title=Text(f"sweep {safe(name)}"), title_justify="left")
    for col, justify in COLUMNS:
        t.add_column(col, no_wrap=True, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        t.add_row(*(Text(text, style=style or "") for text, style in row))
    return t


def fast_table(name: str, rows: list[list[tuple[str, str | None]]]) -> Text:
    """The table as one styled Text, columns aligned by hand: what status_table draws past FAST_TABLE_ROWS."""
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


def sweeps_view(data: list[tuple[str, list[RunStatus]]], root: Path) -> Group:
    """Each sweep's table and summary line, why its failed or stopped runs ended, and the command that sends its
    trackers what the runs' ends left unsent."""
    parts: list[Any] = []
    for n, sts in data:
        parts += [status_table(n, sts), Text(safe(summary_line(n, sts)))]
        for s in sts:
            if s.state == RunState.FAILED and s.error:
                last = (str(s.error).strip().splitlines() or [""])[-1]
                parts.append(
                    Text(safe(f"  {s.label} ({s.run_id}) failed({s.cause}): {last}  log: {s.log or '-'}"), style="red")
                )
            elif s.state in STOPPED and s.reason:
                parts.append(
                    Text(safe(f"  {s.label} ({s.run_id}) {s.state} at step {s.step}: {s.reason}"), style=STYLE[s.state])
                )
        if behind := [s for s in sts if s.trackers_behind]:
            names = ", ".join(dict.fromkeys(t for s in behind for t in s.trackers_behind))
            line = (
                f"  trackers behind on {len(behind)} run(s) ({names}): send what they lack with: ablate sync {root / n}"
            )
            parts.append(Text(safe(line), style="yellow"))
    return Group(*parts)


def show_status(
    root: Path | str, sweep: str | None, *, watch: bool = False, interval: float = 5.0, as_json: bool = False
) -> None:
    """The `ablate status` command: one table (or JSON object) per sweep, refreshed with `watch`."""
    names = [sweep] if sweep else list_sweeps(root)
    if not names:
        from ablate.errors import ErrorKind, UserError

        raise UserError(
            f"no sweeps under {root}/; run `ablate sweep RECIPE` first (or pass the --root it used)",
            kind=ErrorKind.FILE,
        )

    def collect() -> list[tuple[str, list[RunStatus]]]:
        return [(n, sweep_status(root, n)) for n in names]

    if as_json:
        objects = [status_json(n, s) for n, s in collect()]
        print(dump_json(objects[0] if sweep else {"sweeps": objects}))
        return
    console = Console()
    if not console.is_terminal:  # piped or redirected: do not squeeze the table into 80 columns
        console = Console(width=max(console.width, 160))
    data = collect()
    if not watch:
        console.print(sweeps_view(data, Path(root)))
        return
    try:
        with Live(sweeps_view(data, Path(root)), console=console, refresh_per_second=4) as live:
            while not all(s.ended for _, sts in data for s in sts):
                time.sleep(interval)
                data = collect()
                live.update(sweeps_view(data, Path(root)))
    except KeyboardInterrupt:
        pass


def follow_runs(
    root: Path | str,
    name: str,
    run_ids: Sequence[str],
    interval: float = 2.0,
    timeout: float | None = None,
    status_cmd: str | None = None,
) -> list[RunStatus]:
    """`ablate sweep --follow`: a progress bar until every run in `run_ids` has ended. `status_cmd`: the command
    that shows the sweep (with its --root), said when Ctrl-C stops the following."""
    want = set(run_ids)
    t0 = time.monotonic()
    try:
        return follow_bar(root, name, want, interval, timeout, t0)
    except KeyboardInterrupt:
        print(f"stopped following; the runs go on ({status_cmd or f'ablate status {name}'})")
        return []


def follow_bar(
    root: Path | str, name: str, want: set[str], interval: float, timeout: float | None, t0: float
) -> list[RunStatus]:
    """follow_runs' bar: each state's count of the runs followed, and how many have ended."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False
    ) as bar:
        task = bar.add_task(f"{name}", total=len(want))
        while True:
            sts = [s for s in sweep_status(root, name) if s.run_id in want]
            ended = sum(s.ended for s in sts)
            c = Counter(s.state for s in sts)
            counts = " ".join(f"{k}={v}" for k, v in sorted(c.items()))
            bar.update(task, completed=ended, description=f"{name} {counts}")
            if ended >= len(want) or (timeout is not None and time.monotonic() - t0 > timeout):
                return sts
            time.sleep(interval)
