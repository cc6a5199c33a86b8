"""Inputs that would make ablate read without end, crash or act: a device, a pipe or a huge file given as a log
(refused unopened, or read within bounds), a crafted MLflow store (read field by field), labels that would go live
in a pull request or hide in the report page, a calibration with an unknown axis, and names that would leave the
packaged recipes or profiles. Each is refused in one line, or shown as text (docs/security.md)."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.resources import RECIPES_DIR, profile_path
from ablate.curves import logs
from ablate.curves.tables import write_csv
from ablate.errors import ErrorKind
from ablate.fit.synthetic import synthetic_curve
from ablate.render.markdown import md_text
from ablate.track.mlflow_read import read_back
from jobs import calibration, one_error, refused

sys.path.insert(0, str(Path(__file__).parent / "fit"))
from sweep_writer import write_sweep

runner = CliRunner()
NOT_REGULAR = "not a regular file"  # tells a refusal before opening from one of what was read (same path)
CONSOLE = "step:{} - val_pass_rate:0.5 - loss:1.0\n"


def curves_csv(path: Path, names: tuple[str, ...]) -> Path:
    curves = [
        synthetic_curve(a=0.61, b=1.92, c_mid=2542.0, seed=10 * i + s, n_points=30, run=f"r{i}-{s}", group=n)
        for i, n in enumerate(names)
        for s in range(2)
    ]
    write_csv(curves, path)
    return path


# ---- 1. a device, a pipe, a huge file: refused unopened, or read within bounds ----


@pytest.fixture
def fifo(tmp_path):
    """A named pipe no one writes to: opening it to read would block for ever."""
    p = tmp_path / "run.log"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("fmt", ["auto", "verl", "trl", "table", "wandb", "wandb-csv", "tensorboard", "mlflow"])
def test_a_pipe_or_a_device_is_refused_before_it_is_opened(fifo, fmt):
    for source in (fifo, Path("/dev/zero")):
        for verb in ("fit", "rank", "extrapolate"):
            one_error(
                runner.invoke(app, [verb, str(source), "--from", fmt, "--x", "step"]),
                ErrorKind.FILE,
                str(source),
                NOT_REGULAR,
            )
    with refused(ErrorKind.FILE, str(fifo), NOT_REGULAR):
        logs.detect(fifo)


def test_a_pipe_among_a_tensorboard_folders_event_files_is_refused(tmp_path):
    """TensorBoard opens every file named *tfevents* in a run's folder, not only those ablate found."""
    from ablate.curves.readers import read_tensorboard

    run = tmp_path / "tb" / "run1"
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1.host").write_bytes(b"")  # a real (empty) event file: the folder is a TB log
    os.mkfifo(run / "events.out.tfevents.2.host")
    with refused(ErrorKind.FILE, str(run / "events.out.tfevents.2.host"), NOT_REGULAR):
        read_tensorboard(tmp_path / "tb")


def test_detection_reads_a_bounded_prefix(tmp_path):
    """A console line past the scanned prefix is not looked for (before: the whole file was read, a line at a time,
    so one endless line took all memory); `--from verl` still reads the file."""
    from ablate.storage import reading

    p = tmp_path / "console.log"
    with open(p, "wb") as f:
        f.truncate(reading.SCAN_BYTES + (1 << 20))  # sparse: NUL bytes, no newline, past the prefix
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + CONSOLE.format(1).encode() + CONSOLE.format(2).encode())
    with refused(ErrorKind.FILE, str(p), "--from"):
        logs.detect(p)
    runs = logs.READERS["verl"](p)
    assert runs == {"console": {1.0: {"val_pass_rate": 0.5, "loss": 1.0}, 2.0: {"val_pass_rate": 0.5, "loss": 1.0}}}


def test_a_file_over_the_size_limit_is_refused_naming_its_size(tmp_path, monkeypatch):
    monkeypatch.setattr("ablate.storage.reading.MAX_FILE_BYTES", 4096)
    log = tmp_path / "big.log"
    log.write_text("".join(CONSOLE.format(i) for i in range(200)))
    one_error(
        runner.invoke(app, ["fit", str(log), "--from", "verl", "--x", "step"]),
        ErrorKind.FILE,
        str(log),
        f"{log.stat().st_size:,}",
        "4,096",
    )
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": [{"step": i, "val_pass_rate": 0.5} for i in range(200)]}))
    one_error(
        runner.invoke(app, ["fit", str(state), "--x", "step"]),
        ErrorKind.FILE,
        str(state),
        f"{state.stat().st_size:,}",
        "4,096",
    )
    wandb = tmp_path / "run-abc.wandb"
    wandb.write_bytes(b":W&B" + b"\0" * 5000)
    one_error(
        runner.invoke(app, ["fit", str(wandb), "--x", "step"]),
        ErrorKind.FILE,
        str(wandb),
        f"{wandb.stat().st_size:,}",
        "4,096",
        "W&B",
    )
    small = tmp_path / "small.log"
    small.write_text("".join(CONSOLE.format(i) for i in range(3)))
    assert logs.READERS["verl"](small)["small"][2.0] == {"val_pass_rate": 0.5, "loss": 1.0}  # under it: read


# ---- 2. a crafted MLflow store: read field by field ----

SCHEMA = """
CREATE TABLE experiments (experiment_id INTEGER, name VARCHAR(256), lifecycle_stage VARCHAR(32));
CREATE TABLE runs (run_uuid VARCHAR(32), name VARCHAR(250), experiment_id INTEGER, lifecycle_stage VARCHAR(20));
CREATE TABLE tags (key VARCHAR(250), value VARCHAR(5000), run_uuid VARCHAR(32));
CREATE TABLE metrics (key VARCHAR(250), value FLOAT, timestamp BIGINT, run_uuid VARCHAR(32), step BIGINT,
                      is_nan BOOLEAN);
INSERT INTO experiments VALUES (1, 'sw', 'active');
INSERT INTO runs VALUES ('r1', 'loss=grpo,seed=0', 1, 'active');
INSERT INTO tags VALUES ('ablate.arm', 'loss=grpo', 'r1');
"""


def store_with(path: Path, rows: list[tuple]) -> Path:
    """MLflow's tables as far as ablate reads them (the column types MLflow declares), with these metric rows
    (key, value, step, is_nan)."""
    with sqlite3.connect(path) as con:
        con.executescript(SCHEMA)
        con.executemany("INSERT INTO metrics VALUES (?, ?, 0, 'r1', ?, ?)", rows)
    con.close()
    return path


GOOD = [("val_pass_rate", 0.1 * s, s, 0) for s in range(1, 5)]


def test_a_well_formed_store_is_read(tmp_path):
    (got,) = read_back(store_with(tmp_path / "mlflow.db", [*GOOD, ("loss", 0.0, 4, 1)]))
    assert got.arm == "loss=grpo" and got.steps[2.0] == {"val_pass_rate": 0.2}
    assert got.steps[4.0]["loss"] != got.steps[4.0]["loss"]  # is_nan: NaN


@pytest.mark.parametrize(
    "row,parts",
    [
        (("val_pass_rate", "0.5 (text)", 5, 0), ["'val_pass_rate'", "step 5", "str '0.5 (text)'"]),
        (("val_pass_rate", None, 5, 0), ["'val_pass_rate'", "step 5", "NoneType None"]),
        (("val_pass_rate", b"\x00\x01", 5, 0), ["'val_pass_rate'", "step 5", "bytes"]),
        (("val_pass_rate", 0.5, "five", 0), ["'val_pass_rate'", "step str 'five'", "[0, 2^53]"]),
        (("val_pass_rate", 0.5, 2**60, 0), ["'val_pass_rate'", str(2**60), "[0, 2^53]"]),
        (("val_pass_rate", 0.5, -1, 0), ["'val_pass_rate'", "step int -1"]),
        (("val_pass_rate", 0.5, 5.5, 0), ["'val_pass_rate'", "step float 5.5"]),
        (("val_pass_rate", 0.5, 5, "yes"), ["'val_pass_rate'", "is_nan str 'yes'"]),
        ((b"\x1b[2J", 0.5, 5, 0), ["metric key", "r1", "bytes"]),
    ],
)
def test_a_crafted_store_is_one_line_naming_the_field(tmp_path, row, parts):
    db = store_with(tmp_path / "mlflow.db", [*GOOD, row])
    line = one_error(runner.invoke(app, ["fit", str(db), "--x", "step"]), ErrorKind.FILE, str(db), *parts)
    assert "\x1b" not in line


def test_a_real_mlflow_store_with_a_text_metric_is_one_line(tmp_path, monkeypatch):
    """The store MLflow's own client writes, one metric value then made text by hand."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    db = tmp_path / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.create_experiment("sw", artifact_location=(tmp_path / "artifacts").as_uri())
    run = client.create_run(exp, run_name="loss=grpo,seed=0", tags={"ablate.arm": "loss=grpo"})
    for step in range(1, 6):
        client.log_metric(run.info.run_id, "val_pass_rate", 0.1 * step, step=step)
    client.set_terminated(run.info.run_id)
    (got,) = read_back(db)
    assert sorted(got.steps) == [1.0, 2.0, 3.0, 4.0, 5.0]
    with sqlite3.connect(db) as con:
        con.execute("UPDATE metrics SET value = 'twelve' WHERE step = 3")
    con.close()
    one_error(
        runner.invoke(app, ["fit", str(db), "--x", "step"]),
        ErrorKind.FILE,
        str(db),
        "'val_pass_rate'",
        "step 3",
        "str 'twelve'",
    )


# ---- 3. Markdown for a pull request: nothing goes live ----


def test_md_text_cuts_mentions_issue_references_and_urls():
    zw = "\u200b"
    assert md_text("@octocat") == f"@{zw}octocat"
    assert md_text("fixes #123, org/repo#4 and GH-5") == f"fixes #{zw}123, org/repo#{zw}4 and GH-{zw}5"
    assert md_text("see https://evil.example/x or www.evil.example") == (
        f"see https{zw}://evil.example/x or www{zw}.evil.example"
    )
    assert md_text("a@b.example") == f"a@{zw}b.example"
    for same in ("loss=grpo C#sharp x=1e+04", "R@512k", "loss=grpo@1a2b3c4d"):  # nothing GitHub links: unchanged
        assert md_text(same) == same


def test_rank_md_leaves_no_mention_reference_or_url_live(tmp_path):
    names = ("base", "@octocat", "fixes #123", "http://evil.example/x")
    path = curves_csv(tmp_path / "c.csv", names)
    res = runner.invoke(
        app, ["rank", str(path), "--group", "group", "--baseline", "base", "--n-boot", "200", "--format", "md"]
    )
    assert res.exit_code == 0, res.output
    zw = "\u200b"
    for live, cut in (("@octocat", f"@{zw}octocat"), ("#123", f"#{zw}123"), ("http://", f"http{zw}://")):
        assert live not in res.stdout and cut in res.stdout, (live, res.stdout)


# ---- 4. the report page: escape characters shown escaped, in the text and in the figures ----


def test_the_report_page_shows_escape_characters_escaped(tmp_path):
    evil = "loss=ev\x1b[2Jil\u202e\x07"
    arms = {
        "loss=cispo": [synthetic_curve(a=0.61, b=1.9, c_mid=2500, n_points=40, seed=s) for s in range(2)],
        evil: [synthetic_curve(a=0.52, b=1.9, c_mid=2500, n_points=40, seed=10 + s) for s in range(2)],
    }
    sweep = write_sweep(tmp_path, "toy", arms, baseline="loss=cispo")
    out = tmp_path / "page.html"
    res = runner.invoke(app, ["report", str(sweep), "--out", str(out), "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    for ch in ("\x1b", "\x07", "\u202e"):
        assert ch not in page, repr(ch)
    shown = "loss=ev\\x1b[2Jil\\u202e\\x07"
    assert shown in page  # in the tables, as text
    figures = json.loads(page.split('<script type="application/json" id="figures">')[1].split("</script>")[0])
    strings = json.dumps(figures, ensure_ascii=False)
    for ch in ("\x1b", "\x07", "\u202e"):
        assert ch not in strings, repr(ch)
    assert any(t.get("legendgroup") == shown for t in figures["plot-fits"]["data"])
    assert any(shown in (t.get("name") or "") for t in figures["plot-fits"]["data"])


# ---- 5. a calibration's axis is a compute axis ----


PLAN = ["--question", "ceiling", "--trials", "20"]


@pytest.mark.parametrize("axis", ["tokens", "gpu_hours\x1b[2J", "../etc"])
def test_a_calibration_with_an_unknown_axis_is_one_line(tmp_path, axis):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(calibration(x=axis)))
    line = one_error(
        runner.invoke(app, ["plan", str(RECIPES_DIR / "loss.yaml"), "--calibration", str(cal), *PLAN]),
        ErrorKind.SETTING,
        f"--calibration {cal}",
        "gpu_hours, flops, samples, step",
    )
    assert "\x1b" not in line


def test_save_calibration_refuses_an_axis_it_could_not_read_back(tmp_path):
    path = curves_csv(tmp_path / "c.csv", ("base", "other"))
    one_error(
        runner.invoke(app, ["plan", str(path), "--x", "val_n", "--save-calibration", str(tmp_path / "cal.json")]),
        ErrorKind.SETTING,
        "--save-calibration",
        "--x val_n",
        "gpu_hours, flops, samples, step",
    )
    assert not (tmp_path / "cal.json").exists()


# ---- 6. plan finds a packaged sweep file as show and sweep do ----


def test_plan_finds_the_packaged_sweep_file_that_show_and_sweep_find(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no recipes/ here: the packaged one is meant
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(calibration()))
    res = runner.invoke(app, ["plan", "recipes/loss.yaml", "--calibration", str(cal), *PLAN, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model"]["arms"] > 1
    one_error(
        runner.invoke(app, ["plan", "recipes/nope.yaml", "--calibration", str(cal)]),
        ErrorKind.FILE,
        "recipes/nope.yaml",
        "ablate init",  # looked for among the packaged recipes too
    )


# ---- 7. a profile NAME never leaves the packaged profiles ----


@pytest.mark.parametrize("name", ["../recipes/base", "..", "x/../../y", "..\\x", ".hidden", "a b"])
def test_a_profile_name_that_is_not_a_plain_name_is_refused(name):
    with refused(ErrorKind.SETTING, f"--profile {name!r}", "example-cluster, local", "--profile ./slurm/mine.yaml"):
        profile_path(name)
    assert profile_path("local").is_file()
