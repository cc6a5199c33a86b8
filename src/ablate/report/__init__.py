"""`ablate report`: one self-contained HTML page of a sweep (data: what the page shows, gathered; figures: its Plotly
figures; page: the Jinja2 template rendered and written). What the page shows and how to share it: docs/report.md."""

from __future__ import annotations

from pathlib import Path

from ablate.report.data import Planner, Progress, gather, sweep_folder


def build_report(
    sweep: Path, out: Path, *, n_boot: int, command: str, progress: Progress, plan: Planner | None
) -> Path:
    """Gather the sweep, render the page and write it atomically to `out`; returns `out`."""
    from ablate.report.page import render, write

    data = gather(sweep, n_boot=n_boot, command=command, progress=progress, plan=plan)
    progress("drawing the figures and writing the page")
    return write(out, render(data))


__all__ = ["Planner", "build_report", "sweep_folder"]
