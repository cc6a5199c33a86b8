"""Progress bars of long commands (calibrate's cells), on stderr's terminal and gone when done."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def counting_bar(description: str, total: int, *, disable: bool) -> Iterator[Callable[[int], None]]:
    """A bar counting to `total`; yields the function that sets how many are done."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
        disable=disable,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)
