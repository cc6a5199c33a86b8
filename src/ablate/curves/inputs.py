"""Training curves from disk: CSV/JSONL files, run directories and sweep directories, read into `fit.curve.Curve`s
(other tools' logs: `ablate.curves.logs`).

The fitting core (`ablate.fit`) takes arrays; this module is where files are read and every kind of bad input
becomes one `UserError` line naming the file, the line and the fix. Run directories are read through
`ablate.storage.rundir.RunDir` only (run.json via `.info()`, metrics.jsonl via `.metric_lines()`).

    load_curves(path, x=, y=, run=, group=)     one CSV/JSONL file, one row per (run, evaluation) -> [Curve]:
                                                ablate.curves.tables
    curve_from_run_dir(run_dir, x=, y=)         one run directory -> its Curve, or NotFitted with the reason:
                                                ablate.curves.sweeps
    curves_from_sweep(sweep_dir, x=, y=)        every run of a sweep -> ([Curve], [runs not fitted, with why])
    load_inputs(paths, x=, y=, run=, group=,    any mix of the three and other tools' logs (`ablate.curves.logs`)
                fmt=, per_step=)                -> ([Curve], [runs not fitted])
    write_csv(curves, path, x=, y=)             curves as a long CSV that `load_curves` reads back (tables)
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ablate.config.validation import closest
from ablate.curves import logs, readers, tracked
from ablate.curves.sweeps import curve_from_run_dir
from ablate.curves.tables import load_curves
from ablate.errors import ErrorKind, SettingError, UserError
from ablate.fit.curve import Curve, NotFitted
from ablate.storage import reading
from ablate.storage.metricsfile import COMPUTE_AXES
from ablate.storage.rundir import RunDir, sweep_run_dirs

MLFLOW = "mlflow"
"""The input format of an MLflow experiment (`mlflow:EXPERIMENT`, or an mlflow.db file: docs/run-directory.md)."""


def recorded_devices(paths: list[Path]) -> list[str | None] | None:
    """The device each run of these inputs trained on, as its run.json records it (the trainer writes `device`,
    e.g. "cpu" or "cuda:0", when it starts; None for a run that has not started) or its tracker copy's tags say
    (ablate.curves.tracked). None when an input is neither (a table or another tool's log records no device)."""
    devices: list[str | None] = []
    for p in (bare_sweep(Path(p)) for p in paths):
        if p.is_dir() and _is_sweep(p):
            runs = sweep_run_dirs(p)
        elif p.is_dir() and _is_run_dir(p):
            runs = [RunDir(p).check_links()]
        elif tracked.is_mlflow(p) or _is_wandb(p):
            try:
                tagged = tracked.devices(p, MLFLOW if tracked.is_mlflow(p) else "wandb")
            except readers.WrongFormat:  # reading it for its curves says what is wrong, in one line
                return None
            if not any(tagged):  # a copy ablate did not tag (another tool's runs): no device, as any other log
                return None
            devices += tagged
            continue
        else:
            return None
        for r in runs:
            d = r.info().raw.get("device")
            devices.append(d if isinstance(d, str) else None)
    return devices


def curves_from_sweep(
    sweep_dir: Path | str, *, x: str = "gpu_hours", y: str = "val_pass_rate"
) -> tuple[list[Curve], list[NotFitted]]:
    """Read every run of a sweep directory (`<sweep>/runs/<run_id>/`).

    Returns the curves of runs that have metrics (meta as in `curve_from_run_dir`), and the runs that can't be
    fitted, each a `NotFitted` with its reason (failed, diverged, no metrics yet, metric not logged).
    """
    sweep_dir = Path(sweep_dir)
    check_axis(x)
    runs_dir = sweep_dir / "runs"
    if not sweep_dir.is_dir():
        raise UserError(
            f"{sweep_dir}: no such sweep directory (run `ablate sweep RECIPE` first, or give a CSV/JSONL file)",
            kind=ErrorKind.FILE,
        )
    run_dirs = sweep_run_dirs(sweep_dir)  # no link followed: a linked runs/, run or run file is refused
    if not run_dirs:
        raise UserError(f"{sweep_dir}: the sweep has no runs yet (expected {runs_dir}/<run_id>/)", kind=ErrorKind.DATA)
    curves: list[Curve] = []
    skipped: list[NotFitted] = []
    missing = []
    labelled: list[tuple[Path, Curve]] = []
    for rd in run_dirs:
        got = curve_from_run_dir(rd, x=x, y=y)
        if isinstance(got, Curve):
            curves.append(got)
            if got.run != rd.path.name:  # a run with a label (one without is named after its directory)
                labelled.append((rd.path, got))
            continue
        if got.missing is not None:
            missing.append(got.missing)
        skipped.append(got)
    if not curves and missing:  # the metric's name is wrong, not the runs: say so once
        name, flag, _ = missing[0]
        present = list(dict.fromkeys(k for *_, names in missing for k in names))
        raise UserError(
            f"{sweep_dir}: no run logs the metric '{name}' ({flag}); its runs' metrics are: {', '.join(present)}",
            kind=ErrorKind.FILE,
        )
    if not curves:
        reasons = "; ".join(f"{s.label}: {s.reason}" for s in skipped[:3])
        raise UserError(f"{sweep_dir}: no run has metrics to fit ({reasons})", kind=ErrorKind.DATA)
    _arms_by_config(labelled)
    return curves, skipped


def _arms_by_config(runs: list[tuple[Path, Curve]]) -> None:
    """Make a sweep's arms its configs (arm ids), not its labels: curves' `group` (and `run`) renamed in place.

    One config under two labels (a run.json edited, or a label copied from another run) is refused in one line
    naming the run whose label most of the config's runs do not carry. One label over several configs (the recipe or
    a command-line override changed between two launches of the sweep: the same arm name, other runs) keeps them
    apart as `<label>@<arm id>`, each with its own seeds: they are different arms, and one could be better. Runs
    with no label of their own (named after their directory) are left as they are, each its own arm."""
    by_id: dict[str, list[tuple[Path, Curve]]] = {}
    for p, c in runs:
        if c.arm_id:
            by_id.setdefault(c.arm_id, []).append((p, c))
    for aid, members in by_id.items():
        labels: dict[frozenset[str], list[tuple[Path, Curve]]] = {}
        for p, c in members:  # a label's parts in any order name one arm, as a sweep's baseline does
            labels.setdefault(frozenset(str(c.group).split(",")), []).append((p, c))
        if len(labels) > 1:
            ranked = sorted(labels.values(), key=lambda m: (-len(m), str(m[0][0])))
            (p0, c0), (p1, c1) = ranked[0][0], ranked[1][0]
            raise UserError(
                f"{p1}: run.json labels it {c1.run!r}, but its config.yaml is arm {aid}, whose run "
                f"{p0.name} is labelled {c0.run!r}; one config is one arm: fix the label in run.json, "
                "or move the run directory out of the sweep",
                kind=ErrorKind.FILE,
            )
        name = members[0][1].group
        for _, c in members:
            c.group = name
    ids_of: dict[str, set[str]] = {}
    for _, c in runs:
        ids_of.setdefault(str(c.group), set()).add(c.arm_id or "")
    for _, c in runs:
        arm = c.arm_id
        if arm and len(ids_of[str(c.group)]) > 1:
            c.group, c.run = f"{c.group}@{arm[:8]}", f"{c.run}@{arm[:8]}"


def _is_run_dir(p: Path) -> bool:
    rd = RunDir(p)  # a link there counts too, to be refused when the run is read
    return os.path.lexists(rd.metrics_path) or os.path.lexists(rd.info_path)


def _is_sweep(p: Path) -> bool:
    """A sweep directory: runs/ with a ledger or a run directory in it (a TRL output's runs/ holds TensorBoard
    logs instead), or with nothing else to read the folder as."""
    runs = p / "runs"
    if not runs.is_dir() and not runs.is_symlink():  # a linked runs/ is a sweep's, refused by sweep_run_dirs
        return False
    if (p / "ledger.jsonl").exists() or any(_is_run_dir(rd.path) for rd in sweep_run_dirs(p)):
        return True
    try:
        logs.detect(p)
    except UserError:
        return True
    return False


def load_inputs(
    paths: list[Path],
    *,
    x: str = "gpu_hours",
    y: str = "val_pass_rate",
    run: str | None = "run",
    group: str | None = None,
    fmt: str = "auto",
    per_step: dict[str, float] | None = None,
) -> tuple[list[Curve], list[NotFitted]]:
    """Curves from any mix of sweep directories, single run directories, CSV/JSONL files and other tools' logs.

    A bare name that is not a file means `sweeps/<name>`. A file's runs form arms by its `group` column
    (else each run is its own arm); so does each run of a foreign log (`ablate.curves.logs`: TensorBoard, W&B, TRL,
    verl; an MLflow run: the arm its `ablate.arm` tag names), read when `fmt` names its format or, with `auto`, when
    it is detected. `per_step` ({"samples": S, "gpu_hours": H}) makes compute from a foreign log's steps; sweeps,
    run directories and tables log their own.
    With several inputs, arm names are prefixed by their input's name (`input_names`: distinct inputs get distinct
    names) so that they stay apart. Returns the curves and the runs that can't be fitted (see `curves_from_sweep`).
    """
    if not paths:
        raise UserError(
            "give a sweep directory (sweeps/NAME), a run directory, a CSV/JSONL file or a log "
            "(TensorBoard, W&B, TRL, verl, MLflow)",
            kind=ErrorKind.SETTING,
        )
    fmt = {"csv": "table", "jsonl": "table"}.get(fmt, fmt)  # the names users reach for first
    if fmt != "auto" and fmt not in (*logs.FORMATS, MLFLOW):
        raise UserError(
            f"--from {fmt}: unknown; valid: auto, {', '.join((*logs.FORMATS, MLFLOW))}", kind=ErrorKind.SETTING
        )
    per_step = {k: v for k, v in (per_step or {}).items() if v is not None}
    for axis, v in per_step.items():
        if not (math.isfinite(v) and v > 0):
            raise UserError(
                f"{logs.PER_STEP[axis]} {v:g}: the {axis} of one step, a number > 0", kind=ErrorKind.SETTING
            )
    curves: list[Curve] = []
    skipped: list[NotFitted] = []
    paths = [bare_sweep(Path(p)) for p in paths]
    _refuse_recipes(paths)
    _check_present(paths)
    if len(paths) > 1 and fmt in ("auto", "wandb") and group is None and run == "run" and _wandb_copies(paths):
        try:
            runs = tracked.read_wandb(*paths)  # a sweep's runs/*/wandb: one copy, its arms as the sweep's
        except readers.WrongFormat as e:
            raise logs.wrong_format(e.path, e.fmt, e.why) from None
        return logs.to_curves(runs, " ".join(map(str, paths)), x=x, y=y, per_step=per_step, fmt="wandb"), []
    names = input_names(paths)
    for p, name in zip(paths, names):
        reading.refuse_special(p)  # a device, a pipe or a socket: refused unopened, whatever --from says
        ours = "sweep" if p.is_dir() and _is_sweep(p) else "run" if p.is_dir() and _is_run_dir(p) else None
        kind = fmt if fmt != "auto" else ours or (MLFLOW if tracked.is_mlflow(p) else logs.detect(p))
        if ours and kind != ours:
            raise UserError(f"{p}: a {ours} directory, read as such: drop --from {fmt}", kind=ErrorKind.SETTING)
        if per_step and kind not in (*logs.FOREIGN, MLFLOW):
            flag = logs.PER_STEP[next(iter(per_step))]
            raise UserError(
                f"{flag}: {p} is a {'CSV/JSONL table' if kind == 'table' else kind + ' directory'}, "
                "which logs its compute (gpu_hours, samples, ...): drop it, or choose the column with --x",
                kind=ErrorKind.SETTING,
            )
        if kind != "table" and (group is not None or run != "run"):
            whose = {"sweep": "a sweep, whose arms are its recipe's", "run": "a run directory, one run"}
            raise UserError(
                f"{'--group' if group is not None else '--run'}: {p} is "
                f"{whose.get(kind, f'a {kind} log, whose runs are its arms')}; "
                "--run and --group name columns of CSV/JSONL tables: drop it",
                kind=ErrorKind.SETTING,
            )
        cs, sk = _read_one(p, kind, x=x, y=y, run=run, group=group, per_step=per_step)
        if len(paths) > 1:
            for c in cs:
                c.group = f"{name}:{c.group or c.run}"
        curves += cs
        skipped += sk
    return curves, skipped


def _read_one(
    p: Path, kind: str, *, x: str, y: str, run: str | None, group: str | None, per_step: dict[str, float]
) -> tuple[list[Curve], list[NotFitted]]:
    """One input's curves and the runs that can't be fitted, read as `kind` (sweep, run, table, mlflow or a log)."""
    if kind == "sweep":
        return curves_from_sweep(p, x=x, y=y)
    if kind == "run":
        check_axis(x)
        got = curve_from_run_dir(RunDir(p).check_links(), x=x, y=y)  # a linked run file: refused
        if isinstance(got, NotFitted):
            raise UserError(f"{p}: {got.reason}", kind=ErrorKind.FILE)
        return [got], []
    if kind == "table":
        return load_curves(p, x=x, y=y, run=run, group=group), []
    if kind == MLFLOW:
        return logs.to_curves(tracked.read_mlflow(p), p, x=x, y=y, per_step=per_step, fmt=MLFLOW), []
    return logs.load(p, kind, x=x, y=y, per_step=per_step), []


def _is_wandb(p: Path) -> bool:
    """W&B run files, as `--from auto` tells them (neither a sweep nor a run directory, nor an MLflow store)."""
    if (p.is_dir() and (_is_sweep(p) or _is_run_dir(p))) or tracked.is_mlflow(p) or not readers.wandb_files(p):
        return False
    try:
        return logs.detect(p) == "wandb"  # a TRL output folder that holds a wandb/ too is TRL's
    except UserError:
        return False


def _wandb_copies(paths: list[Path]) -> bool:
    """Every input is W&B run files (each run's wandb/ folder of a sweep, say)."""
    return all(_is_wandb(p) for p in paths)


def check_axis(x: str) -> None:
    """A run's compute axis is one its metrics log (COMPUTE_AXES); refused in one line naming the setting."""
    if x not in COMPUTE_AXES:
        raise SettingError(
            f"{{x}} {x}: unknown compute axis; valid: {', '.join(COMPUTE_AXES)}{closest(x, COMPUTE_AXES)}", "x"
        )


def _refuse_recipes(paths: list[Path]) -> None:
    """One line for a recipe or sweep file given where results go (`ablate rank recipes/loss.yaml`), naming the
    sweep folder its results go to (under ./sweeps, the default --root), and for a run's config.yaml, its run
    directory. No format of results is YAML."""
    for p in paths:
        if p.name == "config.yaml" and (p.parent / "run.json").exists():
            raise UserError(
                f"{p}: a run's config, not its results; give its run directory, {p.parent}", kind=ErrorKind.FILE
            )
        if p.suffix.lower() in (".yaml", ".yml"):
            sweep = Path("sweeps") / p.stem
            then = (
                f"its results are in {sweep}: give that"
                if (sweep / "ledger.jsonl").is_file()
                else f"`ablate sweep {p}` launches it, and its results go to {sweep} (under --root, sweeps/ unless "
                "given)"
            )
            raise UserError(
                f"{p}: a recipe or sweep file, which says what to run, not results; {then}", kind=ErrorKind.FILE
            )


def _check_present(paths: list[Path]) -> None:
    """One line for an input that is not there, with the sweeps there are (a mistyped sweep name is the usual
    cause)."""
    for p in paths:
        if not p.exists() and not p.is_symlink() and not str(p).startswith(f"{MLFLOW}:"):
            here = sorted(q.parent.name for q in Path("sweeps").glob("*/ledger.jsonl"))
            raise UserError(
                f"{p}: no such file, folder or sweep (sweeps under sweeps/: {', '.join(here) or 'none'}); give a "
                "sweep's name or path, a run directory, a CSV/JSONL file or a log",
                kind=ErrorKind.FILE,
            )


def bare_sweep(p: Path) -> Path:
    """`sweeps/NAME` for a bare NAME that is no file or folder here but a sweep there (as `ablate status NAME`)."""
    if not p.exists() and len(p.parts) == 1 and (Path("sweeps") / p).is_dir():
        return Path("sweeps") / p  # a bare sweep name, as `ablate status NAME` takes
    return p


def input_names(paths: list[Path]) -> list[str]:
    """The name each input's arms are prefixed with when several are read together: its file or directory name,
    or, where two inputs share that name (`a/sweeps/loss` and `b/sweeps/loss`, `x/curves.csv` and
    `y/curves.csv`), the shortest end of its path that no other input shares (`a/sweeps/loss`, `x/curves.csv`).

    Kept apart rather than refused: the same sweep under two roots (two clusters, a copy before and after a change)
    is what a practitioner puts side by side, and renaming a sweep directory to compare it would part it from the
    name its runs record. Merged, two sweeps' seeds would pool into one arm: their spread, not their difference,
    would decide its verdict. One input given twice (the same file or directory by two paths) is refused, as its
    runs would count twice as seeds."""
    if len(paths) < 2:
        return [p.name for p in paths]
    seen: dict[Path, Path] = {}
    for p in paths:
        real = p.resolve()
        if real in seen:
            raise UserError(
                f"{p}: given twice (also as {seen[real]}); its runs would count twice: give it once",
                kind=ErrorKind.SETTING,
            )
        seen[real] = p
    parts = [Path(os.path.abspath(p)).parts for p in paths]
    names = []
    for i, own in enumerate(parts):
        k = 1
        while k < len(own) and any(o[-k:] == own[-k:] for j, o in enumerate(parts) if j != i):
            k += 1
        names.append(Path(*own[-k:]).as_posix())
    return names
