"""Reading MLflow runs back as curves: `ablate fit|rank mlflow:EXPERIMENT` (at $MLFLOW_TRACKING_URI) or an
mlflow.db file (a sweep's default store), read field by field like every other input (ablate.curves.readers calls it;
the tracker that writes them: ablate.track.mlflow)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from ablate.errors import ErrorKind, UserError
from ablate.storage.reading import metric_row, text_field
from ablate.text import safe
from ablate.track.base import Logged, set_environment
from ablate.track.mlflow import ARM_ID_TAG, ARM_TAG, BASELINE_TAG, DEVICE_TAG, said, sqlite_path


def read_back(source: Path) -> list[Logged]:
    """The active runs of `mlflow:EXPERIMENT` (at $MLFLOW_TRACKING_URI), or of every experiment of a SQLite store
    (read as a database: read-only, and whichever MLflow version wrote it)."""
    text = str(source)
    if not text.startswith("mlflow:"):
        return _read_sqlite(source, None)
    name, uri = text.removeprefix("mlflow:"), os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise UserError(
            f"{text}: MLFLOW_TRACKING_URI is not set; set it to the tracking server (http://HOST:PORT), or give the "
            "mlflow.db file",
            kind=ErrorKind.ENVIRONMENT,
        )
    db = sqlite_path(uri)
    return _read_sqlite(db, name) if db is not None else _read_server(uri, name)


def _read_sqlite(db: Path, experiment: str | None) -> list[Logged]:
    where = f"mlflow:{experiment}" if experiment else str(db)
    if db.is_dir():
        raise UserError(
            f"{where}: a folder, not an MLflow store; give its mlflow.db file, or mlflow:EXPERIMENT",
            kind=ErrorKind.FILE,
        )
    if not db.is_file():
        raise UserError(f"{where}: no such file {db}", kind=ErrorKind.FILE)
    query = (
        "SELECT r.run_uuid, r.name, e.name FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
        "WHERE r.lifecycle_stage = 'active' AND (? IS NULL OR e.name = ?)"
    )
    try:
        with contextlib.closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as con:
            found = con.execute(query, (experiment, experiment)).fetchall()
            keys = (ARM_TAG, ARM_ID_TAG, BASELINE_TAG, DEVICE_TAG)
            tags = con.execute("SELECT run_uuid, key, value FROM tags WHERE key IN (?, ?, ?, ?)", keys)
            arms = {(run, k): text_field(where, f"tag {k} of run {run}", v, BAD_STORE) for run, k, v in tags}
            if experiment and not found:
                names = [n for (n,) in con.execute("SELECT name FROM experiments WHERE lifecycle_stage = 'active'")]
                names = [safe(n) for n in names if isinstance(n, str)]
                raise UserError(
                    f"{where}: no runs in experiment {experiment!r}; its experiments: {', '.join(names)}",
                    kind=ErrorKind.DATA,
                )
            runs: dict[str, Logged] = {}
            for uuid, n, e in found:  # each field checked as MLflow writes it: one line for a store it did not
                r = text_field(where, "a run id", uuid, BAD_STORE, optional=False)
                exp = text_field(where, f"the experiment of run {r}", e, BAD_STORE, optional=False)
                name = text_field(where, f"the name of run {r}", n, BAD_STORE) or r
                runs[r] = Logged(exp, name, r, arms.get((r, ARM_TAG)), arms.get((r, ARM_ID_TAG)))
                runs[r].baseline = arms.get((r, BASELINE_TAG)) == "true"
                runs[r].device = arms.get((r, DEVICE_TAG))
            for run, key, step, value, is_nan in con.execute("SELECT run_uuid, key, step, value, is_nan FROM metrics"):
                if run in runs:
                    got = metric_row(where, f"run {run}", key, step, value, is_nan, BAD_STORE)
                    runs[run].steps.setdefault(got[0], {})[got[1]] = got[2]
    except sqlite3.DatabaseError as e:  # not a database, or not MLflow's
        raise UserError(
            f"{where}: not an MLflow SQLite store ({e}); give the mlflow.db a tracked run wrote", kind=ErrorKind.FILE
        ) from None
    return list(runs.values())


BAD_STORE = "not a store MLflow wrote; give the mlflow.db a tracked run wrote"


def _read_server(uri: str, experiment: str) -> list[Logged]:
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise UserError(
            f"mlflow:{experiment}: reading MLflow needs its client: pip install mlflow-skinny",
            kind=ErrorKind.ENVIRONMENT,
        ) from None
    set_environment(["mlflow"])  # bounded retries, no telemetry (ablate.track.base)
    try:
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            raise UserError(
                f"mlflow:{experiment}: no such experiment at {uri}; check the name (the sweep's)", kind=ErrorKind.FILE
            )
        out, token = [], None
        while True:
            page = client.search_runs([exp.experiment_id], max_results=1000, page_token=token)
            for r in page:
                tags = r.data.tags
                got = Logged(exp.name, r.info.run_name or r.info.run_id, r.info.run_id, tags.get(ARM_TAG))
                got.arm_id, got.device = tags.get(ARM_ID_TAG), tags.get(DEVICE_TAG)
                got.baseline = tags.get(BASELINE_TAG) == "true"
                for key in r.data.metrics:
                    for m in client.get_metric_history(r.info.run_id, key):
                        got.steps.setdefault(float(m.step), {})[key] = float(m.value)
                out.append(got)
            token = page.token
            if not token:
                return out
    except MlflowException as e:
        raise UserError(
            f"mlflow:{experiment}: can't read {said(uri, e, 'MLFLOW_TRACKING_URI')}", kind=ErrorKind.ENVIRONMENT
        ) from None
