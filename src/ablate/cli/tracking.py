"""`ablate sync`: send trackers what a run's end left unsent (ablate.track.sync)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from ablate.cli.commands import argument, verb


@dataclass(frozen=True, kw_only=True)
class SyncSettings:
    """`ablate sync`'s options."""

    path: Path = argument("A sweep directory (sweeps/NAME) or a run directory.")


@verb(SyncSettings)
def sync(s: SyncSettings) -> None:
    """Send each tracker the metrics lines it has not received: the end of runs whose tracker could not keep up (a
    busy node, a slow server) or failed. Each run's tracker run is reopened and sent only what it lacks, then
    finished with the run's state; `ablate sweep` does this too for the ended runs of a sweep it re-runs. The
    folder must be your own (its configs name where data goes). Exit status 1 when a tracker is still behind.

    Example: ablate sync sweeps/loss
    """
    from ablate.text import safe
    from ablate.track.sync import sync as send

    synced = send(s.path, echo=lambda line: typer.echo(line, err=True))
    behind = [one for one in synced if one.left]
    for one in synced:
        if one.skipped:
            typer.echo(f"{safe(one.run.name)}: left for later ({safe(one.skipped)})", err=True)
        elif one.left:
            typer.echo(
                f"{safe(one.run.name)}: {', '.join(one.left)} still behind (the warning above says why); run this "
                "again once that is fixed",
                err=True,
            )
    sent = len(synced) - len(behind) - sum(1 for one in synced if one.skipped)
    typer.echo(f"{sent} run(s) sent in full, {len(behind)} still behind" if synced else "nothing left unsent")
    if behind:
        raise typer.Exit(1)
