"""Sending trackers what a run's end left unsent (`ablate sync PATH`, and a re-run `ablate sweep` for its ended
runs). A tracker that cannot keep up when a run ends (a busy node, a slow server) is not waited for long: the run's
process may have seconds left. What it had not sent stays in metrics.jsonl and the run records it
(ablate.track.fanout.UNSENT); sending it later opens the same tracker run and sends only the lines it lacks, as a
resumed attempt does (docs/trackers.md)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import yaml

from ablate.compose.safe_yaml import check_yaml
from ablate.config.schema import RunConfig, validate
from ablate.errors import ErrorKind, UserError
from ablate.storage import fs, ownership
from ablate.storage.rundir import RunDir, sweep_run_dirs
from ablate.text import safe
from ablate.track.fanout import send_unsent, unsent


@dataclass(frozen=True)
class Synced:
    """One run whose trackers were sent what they lacked: the trackers still behind (empty: all caught up), or why
    it was left for later (`skipped`: another process is writing the run)."""

    run: Path
    left: tuple[str, ...]
    skipped: str | None = None


def run_config(rd: RunDir) -> RunConfig:
    """The run's config.yaml (written by ablate from the command line it was launched with), read without following
    a link and without expanding aliases past the usual bound, then validated."""
    try:
        with fs.safe_open(rd.at(rd.config_path), "rb") as f:
            text = f.read(1 << 20).decode("utf-8")
        check_yaml(text, str(rd.config_path))
        return validate(yaml.safe_load(text))
    except UserError:
        raise
    except Exception as e:  # OSError, UnicodeDecodeError, yaml.YAMLError, ConfigErrors
        raise UserError(
            f"{rd.config_path}: can't read the run's config ({type(e).__name__}); restore it", kind=ErrorKind.FILE
        ) from None


def pending(path: Path) -> list[RunDir]:
    """The runs under `path` (a sweep directory or a run directory) that record trackers left behind. A link among
    a sweep's runs is refused, as every reader of a sweep does."""
    if not path.is_dir():
        raise UserError(
            f"{path}: no such directory; give a sweep directory (sweeps/NAME) or a run directory", kind=ErrorKind.FILE
        )
    if not (path / "runs").is_dir() and not os.path.islink(path / "runs"):
        if not any(os.path.lexists(path / name) for name in ("run.json", "metrics.jsonl")):
            raise UserError(
                f"{path}: neither a sweep directory (runs/) nor a run directory (run.json); give one",
                kind=ErrorKind.FILE,
            )
        runs = [RunDir(path).check_links()]
    else:
        runs = sweep_run_dirs(path)
    return [rd for rd in runs if unsent(rd.path) is not None]


def sync(path: Path, *, skip: Collection[str] = (), echo: Callable[[str], None] | None = None) -> list[Synced]:
    """Send the trackers of every run under `path` that recorded some left behind what they lack (`skip`: run
    directory names not to touch, e.g. those just submitted again). The folder must be the user's own: a run's
    config names where its trackers send data, with the user's credentials."""
    runs = [rd for rd in pending(path) if rd.path.name not in skip]
    mine = "sync a sweep or run of your own"
    if runs:  # its configs name where data goes: only folders no one else could have changed, as for a launch
        ownership.check_owned_dir(path, choose=mine)
    done = []
    quiet = logging.NullHandler()  # the trackers' warnings go to stderr once (a run's logger has train.log)
    logging.getLogger("ablate.train").addHandler(quiet)
    try:
        for rd in runs:
            for folder in (rd.path, rd.path / "track"):
                ownership.check_owned_dir(folder, chain=False, choose=mine)
            record = unsent(rd.path)
            if echo and record:
                echo(f"sending {', '.join(record.trackers)} the rest of run {safe(rd.path.name)}")
            try:
                with fs.sweep_umask(fs.group_readable(path)):  # what the trackers make is as private as the run
                    left = send_unsent(run_config(rd), rd)
            except UserError as e:  # another process writes the run (its own trackers will do this), or no config
                done.append(Synced(rd.path, (), skipped=str(e)))
                continue
            if left is not None:
                done.append(Synced(rd.path, tuple(left)))
    finally:
        logging.getLogger("ablate.train").removeHandler(quiet)
    return done
