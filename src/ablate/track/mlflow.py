"""The MLflow tracker: one MLflow run per ablate run, in the experiment named after the sweep, continued across
resumes with each step logged once (docs/trackers.md, "MLflow")."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ablate.states import RunState
from ablate.storage import fs, locks, store
from ablate.storage.rundir import RunDir
from ablate.track.base import TrackContext, numbers

STATE_FILE = Path("track") / "mlflow.json"
"""Under the run directory: the tracking URI and the MLflow run id this run mirrors to, so that a resumed attempt
continues the same MLflow run."""

ARTIFACTS = "mlflow-artifacts"
"""Next to a SQLite store: the artifact root of the experiments ablate creates there (nothing is logged to it; MLflow
would otherwise name ./mlruns in the working directory), and the directory locked while the store is created."""

TAGS = ("ablate.arm_id", "ablate.arm", "ablate.run_id", "ablate.sweep", "ablate.baseline", "ablate.device")
STATE_TAG = "ablate.state"
ARM_TAG = "ablate.arm"
ARM_ID_TAG = "ablate.arm_id"
BASELINE_TAG = "ablate.baseline"
"""`true` on the runs of the sweep's baseline arm (`false` on the others)."""
DEVICE_TAG = "ablate.device"
"""The kind of device the run trains on: cpu, cuda (no tag when not known)."""
ENDS: dict[str, str] = {
    RunState.DONE: "FINISHED",
    RunState.FAILED: "FAILED",
    RunState.UNSTABLE: "FAILED",
    RunState.DIVERGED: "FAILED",
}
"""MLflow's end status for a run state; any other end (preempted, pruned, stopped) is KILLED."""

PARAMS_PER_BATCH = 100
PARAM_VALUE_MAX = 6000  # MLflow's limit on a param value (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH)
PARAM_KEY_MAX = 250


def tracking_uri(ctx: TrackContext) -> str:
    """Where the run is mirrored: the recipe's `track.mlflow_uri`, else $MLFLOW_TRACKING_URI, else a SQLite database
    in the sweep directory (a run outside a sweep: its own directory)."""
    given = getattr(ctx.options, "mlflow_uri", None) or os.environ.get("MLFLOW_TRACKING_URI")
    if given:
        return str(given)
    return "sqlite:///" + str((ctx.sweep_dir or ctx.run_dir).resolve() / "mlflow.db")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///PATH` tracking URI (SQLAlchemy's form: PATH is what follows the third
    slash, so `sqlite:////abs/x.db` is /abs/x.db and `sqlite:///x.db` is x.db here), None for any other store."""
    if not uri.startswith("sqlite:///"):
        return None
    path = unquote(urlparse(uri).path[1:])
    return Path(path) if path else None


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested recipe as MLflow params: dotted keys, values as text cut to MLflow's length limit."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name[:PARAM_KEY_MAX]] = str(value)[:PARAM_VALUE_MAX]
    return out


def metric_values(record: dict[str, Any]) -> dict[str, float]:
    """A metrics line's numbers (base.numbers) as the floats MLflow stores: an integer past the floats is left out.
    NaN and infinities stay: MLflow stores them, and a diverged run shows."""
    out: dict[str, float] = {}
    for k, v in numbers(record).items():
        with contextlib.suppress(OverflowError):
            out[k] = float(v)
    return out


class MlflowTracker:
    """Mirrors a run to MLflow through its own `MlflowClient` (never the global `mlflow.start_run` state: the
    fan-out calls it from a background thread)."""

    name = "mlflow"

    def __init__(self) -> None:
        self._client: Any = None
        self._run_id = ""
        self._uri = ""
        self._skip_through: float = -float("inf")
        """The highest step the server holds (when this attempt reopened the run, then each line logged): a line up
        to it is not logged (a checkpoint's line the session appends again after a resume, say, already sent from
        metrics.jsonl)."""

    def start(self, ctx: TrackContext, resumed_from: int | None) -> None:
        """Open the MLflow run this run directory mirrors to (a new one the first time, or when the tracking URI
        changed); on a reopened run, the steps the server already holds are not logged again."""
        self._uri = tracking_uri(ctx)
        with _worded(self._uri):
            self._open(ctx, self._uri)
            if resumed_from is not None:
                self._send_kept(ctx, resumed_from)
        if sqlite_path(self._uri) is not None:  # a server names its run's address itself; a file store does not
            ctx.note(
                f"MLflow run {self._run_id} is in {self._uri}; view it with: mlflow ui --backend-store-uri {self._uri}"
            )

    def _open(self, ctx: TrackContext, uri: str) -> None:
        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating initial MLflow database..."
        db = sqlite_path(uri)
        if db is None:
            self._client = MlflowClient(tracking_uri=uri)
        else:
            missing = [m for m in ("sqlalchemy", "alembic") if importlib.util.find_spec(m) is None]
            if missing:
                raise RuntimeError(
                    f"{uri}: an MLflow SQLite store needs {' and '.join(missing)}: pip install mlflow, or set "
                    "MLFLOW_TRACKING_URI to a tracking server"
                )
            with locks.dir_lock(_artifacts(ctx, db)):  # the client creates the database (MLflow's migrations)
                if not os.path.lexists(db):
                    _build_store(db)
                self._client = _client_of(db, uri)
        saved = _saved(ctx.run_dir, uri)
        if saved and self._reopen(saved):
            self._run_id = saved
            self._skip_through = self._last_step()
            self._tag(ctx)  # a run an older attempt created may lack a tag, or hold an out-of-date one
            return
        self._run_id = self._create(ctx, db)
        state = fs.check_no_links(ctx.run_dir / STATE_FILE, ctx.run_dir)
        fs.make_dirs(state.parent)
        store.write_json(state, {"tracking_uri": uri, "run_id": self._run_id})

    def _send_kept(self, ctx: TrackContext, resumed_from: int) -> None:
        """The lines this attempt kept from earlier ones that the server lacks (the tracker added on a resume, or
        dropped in an earlier attempt), sent before this attempt's own: the server then holds every step."""
        for _, record in RunDir(ctx.run_dir).metric_lines():
            step = record.get("step")
            if isinstance(step, int) and step <= resumed_from:
                self.log(record)

    def _reopen(self, run_id: str) -> bool:
        """Mark a run this run directory mirrored to before as running again; False when the server no longer
        has it (deleted, or another database at the same URI)."""
        from mlflow.exceptions import MlflowException

        try:
            run = self._client.get_run(run_id)
        except MlflowException as e:
            if e.error_code == "RESOURCE_DOES_NOT_EXIST":
                return False
            raise
        if run.info.lifecycle_stage != "active":
            return False
        self._client.update_run(run_id, status="RUNNING")
        return True

    def _last_step(self) -> float:
        """The highest step of any metric the server holds for the run (each metrics line is one batch)."""
        run = self._client.get_run(self._run_id)
        steps = [m.step for key in run.data.metrics for m in self._client.get_metric_history(self._run_id, key)]
        return max(steps, default=-float("inf"))

    def _tag(self, ctx: TrackContext) -> None:
        """Set the run's facts as tags (each attempt: a reader groups, marks the baseline and picks the axis by
        them)."""
        from mlflow.entities import RunTag

        self._client.log_batch(self._run_id, tags=[RunTag(k, v) for k, v in _tags(ctx).items()])

    def _create(self, ctx: TrackContext, db: Path | None) -> str:
        from mlflow.entities import Param

        experiment = self._experiment(ctx.sweep or ctx.run_dir.name, db)
        run = self._client.create_run(experiment, run_name=ctx.label, tags=_tags(ctx))
        params = [Param(k, v) for k, v in flatten(ctx.config).items()]
        for i in range(0, len(params), PARAMS_PER_BATCH):
            self._client.log_batch(run.info.run_id, params=params[i : i + PARAMS_PER_BATCH])
        return str(run.info.run_id)

    def _experiment(self, name: str, db: Path | None) -> str:
        """The id of the experiment named `name`, created if missing (by this run or, racing it, another)."""
        from mlflow.exceptions import MlflowException

        for _ in range(2):
            found = self._client.get_experiment_by_name(name)
            if found is not None:
                if found.lifecycle_stage != "active":
                    raise RuntimeError(
                        f"MLflow experiment {name!r} is deleted; restore it (mlflow experiments restore "
                        f"--experiment-id {found.experiment_id}) or remove it for good (mlflow gc)"
                    )
                return str(found.experiment_id)
            where = None if db is None else (db.parent / ARTIFACTS / name).resolve().as_uri()
            try:
                return str(self._client.create_experiment(name, artifact_location=where))
            except MlflowException as e:
                if e.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
        raise RuntimeError(f"MLflow experiment {name!r} could not be created nor found")

    def log(self, record: dict[str, Any]) -> None:
        """One metrics line as one batch at its step; a step the server already holds is skipped."""
        from mlflow.entities import Metric

        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step <= self._skip_through:
            return
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in metric_values(record).items()]
        if metrics:
            with _worded(self._uri):
                self._client.log_batch(self._run_id, metrics=metrics)
        self._skip_through = step

    def finish(self, state: str) -> None:
        """Tag the run with its ablate state and end it as FINISHED, FAILED or KILLED."""
        with _worded(self._uri):
            self._client.set_tag(self._run_id, STATE_TAG, str(state))
            self._client.set_terminated(self._run_id, status=ENDS.get(state, "KILLED"))


def _tags(ctx: TrackContext) -> dict[str, str]:
    """The run's facts as MLflow tags (TAGS; a fact not known is left out)."""
    facts = (ctx.arm_id, ctx.arm_label, ctx.run_id, ctx.sweep or "", str(ctx.baseline).lower(), ctx.device)
    return {k: v for k, v in zip(TAGS, facts) if v is not None}


def _build_store(db: Path) -> None:
    """A new SQLite store, built whole before it takes its name: MLflow's migrations (seconds on a busy node) run on
    a temporary file that is then moved into place, so a process that ends mid-way (a run's end waits only so long
    for its trackers) leaves no half-built store, only a temporary file the next build removes. Called under the
    store's lock."""
    from mlflow.tracking import MlflowClient

    for old in db.parent.glob(f".{db.name}.*.tmp"):  # left by a build that was killed
        old.unlink(missing_ok=True)
    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    MlflowClient(tracking_uri=f"sqlite:///{tmp}")
    os.replace(tmp, db)


def _client_of(db: Path, uri: str) -> Any:
    """The client of an existing SQLite store; one that MLflow cannot open (left half-built by a version of ablate
    that built it in place, or damaged) is one line saying how to start a new one."""
    from mlflow.tracking import MlflowClient

    try:
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments(max_results=1)  # its tables as MLflow made them
        return client
    except Exception as e:
        from sqlalchemy.exc import OperationalError

        if not isinstance(e, OperationalError) and not isinstance(e.__cause__, OperationalError):
            raise  # MLflow wraps sqlalchemy's errors: not a store whose tables MLflow made
        raise RuntimeError(
            f"{db}: not an MLflow store MLflow can open (half-built or damaged: {str(e).splitlines()[0][:200]}); "
            f"move it aside (mv {db} {db}.broken) and send the runs again with: ablate sync {db.parent}"
        ) from None


def _artifacts(ctx: TrackContext, db: Path) -> Path:
    """The `mlflow-artifacts` directory next to a SQLite store, made if missing. In the default store (the sweep's,
    or the run directory's) no component of it or of the database may be a link: every file stays in the sweep."""
    top = (ctx.sweep_dir or ctx.run_dir).resolve()
    folder = db.parent / ARTIFACTS
    if db.parent == top:
        fs.check_no_links(db, top)
        fs.check_no_links(folder, top)
    return fs.make_dirs(folder)


def _saved(run_dir: Path, uri: str) -> str | None:
    """The MLflow run id an earlier attempt mirrored this run to at the same tracking URI."""
    path = run_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        saved = store.read_json(path)
    except ValueError:  # torn or edited: a new MLflow run rather than no tracking
        return None
    if isinstance(saved, dict) and saved.get("tracking_uri") == uri and isinstance(saved.get("run_id"), str):
        return str(saved["run_id"])
    return None


@contextlib.contextmanager
def _worded(uri: str) -> Iterator[None]:
    """MLflow's errors as one line for the fan-out's warning: the store, the cause in a few words, the fix."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as e:
        raise RuntimeError(said(uri, e)) from None


def said(uri: str, e: Exception, setting: str = "MLFLOW_TRACKING_URI or track.mlflow_uri") -> str:
    """MLflow's error in a few words, after the store: the socket's error and the fix when the server could not be
    reached (MLflow's message then runs over several lines of urllib3's), else its message's first line."""
    text = str(e)
    if "filesystem tracking backend" in text:  # MLflow 3 refuses file stores (`file:`, a path) in five sentences
        fix = f"give a SQLite store (sqlite:///PATH/mlflow.db) or a tracking server ({setting})"
        return f"{uri}: MLflow no longer writes a file store; {fix}"
    socket = re.search(r"\[Errno -?\d+\][^'\")]*", text)
    if socket:
        fix = f"start the server or fix the URI ({setting})"
        return f"{uri}: {socket.group(0).strip()}; {fix}"
    return f"{uri}: {text.splitlines()[0][:300] if text else type(e).__name__}"
