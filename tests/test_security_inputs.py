"""Hostile and oversized input on a shared cluster: text from files is shown as text (an escape sequence or a bidi
override in a run name is printed, never obeyed), every number read from a noise or calibration file is
range-checked, work asked of one command is bounded, and every output path is checked before any compute. Each
refusal is one `error[KIND]:` line and exit 2 (tests/test_robustness.py's `one_error`)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.resources import RECIPES_DIR
from ablate.curves.tables import write_csv
from ablate.errors import ErrorKind
from ablate.fit.spread import LOG_COMPUTE
from ablate.fit.synthetic import synthetic_curve
from ablate.storage import store
from ablate.storage.ledger import Ledger, proc_start
from ablate.text import safe
from jobs import calibration, one_error

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
SWEEP_FILE = RECIPES_DIR / "loss.yaml"
EVIL = "ev\x1b[2Jil\u202e\x07"  # clears the screen, reverses what follows, rings the bell
SHOWN = "ev\\x1b[2Jil\\u202e\\x07"


def no_raw_controls(text: str) -> None:
    """Nothing a terminal would obey: no ESC, BEL or CR byte, no bidi override."""
    for ch in ("\x1b", "\x07", "\r", "\u202e"):
        assert ch not in text, (ch, text)


def curves_csv(path: Path, names: tuple[str, ...] = (EVIL, "base"), seeds: int = 1) -> Path:
    write_csv(
        [
            synthetic_curve(a=0.61, b=1.92, c_mid=2542.0, seed=10 * i + s, n_points=30, run=f"{n}#{s}", group=n)
            for i, n in enumerate(names)
            for s in range(seeds)
        ],
        path,
    )
    return path


# ---- 1. untrusted text is shown as text ----


def test_safe_shows_control_format_and_separator_characters_and_leaves_names_alone():
    assert safe("a\x1b[31mb\rc\nd\te\x00\x7f\x85") == "a\\x1b[31mb\\rc\\nd\\te\\x00\\x7f\\x85".replace(
        "\\r", "\\x0d"
    ).replace("\\n", "\\x0a").replace("\\t", "\\x09")
    assert safe("x\u202ey\u2066z\u200b\ufeff\u2028") == "x\\u202ey\\u2066z\\u200b\\ufeff\\u2028"
    assert safe("bad\udcff") == "bad\\udcff"  # an undecodable byte kept by surrogateescape: not even encodable
    assert safe("\U000e0041") == "\\U000e0041"  # a tag character (invisible)
    for fine in ("loss=dapo,seed=0", "é 中文 ✓ [bold] $x$", "a b", "a\u00a0b"):
        assert safe(fine) == fine
    assert safe(safe(EVIL)) == safe(EVIL) == SHOWN
    assert safe(3) == "3"


def test_status_shows_hostile_labels_job_ids_and_errors_as_text(tmp_path):
    name = "demo"  # sweep names are letters, digits, _ and - (rundir.sweep_dir)
    led = Ledger(tmp_path / name)
    me = {"pid": os.getpid(), "start": proc_start(os.getpid())}
    led.append(
        {
            "event": "submitting",
            "run_id": "r0",
            "batch": "b",
            "label": f"loss={EVIL}",
            "executor": "local",
            "launcher": me,
            "max_steps": 10,
        },
        {"event": "submitted", "run_id": "r0", "batch": "b", "runner": me},
        {"event": "started", "run_id": "r0", "batch": "b", "job_id": "1\x1b[8m", **me},
        {
            "event": "failed",
            "run_id": "r0",
            "batch": "b",
            "cause": "exception",
            "log": "/x/\u202elog",
            "error": "Traceback ...\nValueError: \x1b[2J boom",
        },
    )
    for args in (["status", name, "--root", str(tmp_path)], ["status", "--root", str(tmp_path)]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        no_raw_controls(res.output)
        for shown in (f"loss={SHOWN}", "1\\x1b[8m", "\\x1b[2J boom", "/x/\\u202elog"):
            assert shown in res.output, (shown, res.output)
    res = runner.invoke(app, ["status", name, "--root", str(tmp_path), "--json"])  # JSON escapes them itself
    assert res.exit_code == 0 and json.loads(res.output)["runs"][0]["label"] == f"loss={EVIL}"
    no_raw_controls(res.output)


def test_status_reads_huge_numbers_and_blank_errors_in_a_sweeps_files(tmp_path):
    """A metrics line with numbers of hundreds of digits (the progress would overflow), and a failure whose error
    is blank: the table still shows, those cells empty."""
    from ablate.storage.rundir import RunDir

    led = Ledger(tmp_path / "demo")
    me = {"pid": os.getpid(), "start": proc_start(os.getpid())}
    led.append(
        {
            "event": "submitting",
            "run_id": "r0",
            "batch": "b",
            "label": "a",
            "executor": "local",
            "launcher": me,
            "max_steps": 10,
        },
        {"event": "submitted", "run_id": "r0", "batch": "b", "runner": me},
        {"event": "started", "run_id": "r0", "batch": "b", "job_id": "1", **me},
        {"event": "failed", "run_id": "r0", "batch": "b", "cause": "exception", "error": " \n "},
    )
    big = "1" + "0" * 400
    store.append_jsonl(RunDir.of(tmp_path, "demo", "r0").metrics_path, {"step": 1})
    RunDir.of(tmp_path, "demo", "r0").metrics_path.write_text(
        f'{{"step": {big}, "val_pass_rate": {big}, "gpu_hours": 1e400, "truncation_rate": -{big}}}\n'
    )
    res = runner.invoke(app, ["status", "demo", "--root", str(tmp_path)])
    assert res.exit_code == 0 and "failed(exception)" in res.output and big[:20] not in res.output, res.output
    res = runner.invoke(app, ["status", "demo", "--root", str(tmp_path), "--json"])
    run = json.loads(res.output)["runs"][0]
    assert (run["step"], run["val_pass_rate"], run["gpu_hours"], run["truncation_rate"]) == (None, None, None, None)


def test_fit_rank_and_their_errors_show_hostile_run_names_as_text(tmp_path):
    path = curves_csv(tmp_path / "c.csv", seeds=2)
    fig = tmp_path / "fit.png"
    res = runner.invoke(app, ["fit", str(path), "--group", "group", "--n-boot", "0", "--plot", str(fig)])
    assert res.exit_code == 0, res.output
    no_raw_controls(res.output)
    assert SHOWN in res.output and "Glyph" not in res.output and fig.stat().st_size > 0  # no warning about glyphs
    res = runner.invoke(
        app,
        [
            "rank",
            str(path),
            "--group",
            "group",
            "--baseline",
            "base",
            "--n-boot",
            "200",
            "--x",
            "gpu_hours",
            "--to",
            "20000",
        ],
    )
    assert res.exit_code == 0, res.output
    no_raw_controls(res.output)
    assert "ev\\x1b[2Jil" in res.output  # the table may cut the name's end short ("…")
    line = one_error(
        runner.invoke(app, ["rank", str(path), "--group", "group", "--baseline", "nope\x1b[2J", "--n-boot", "200"]),
        ErrorKind.SETTING,
        "--baseline",
        "nope",
        SHOWN,
    )
    no_raw_controls(line)


def test_a_hostile_override_value_in_an_error_is_shown_as_text(tmp_path):
    """(A config's several errors stay one line each: tests/test_cli_sweep.py.)"""
    line = one_error(
        runner.invoke(app, ["sweep", str(SWEEP_FILE), f"loss='{EVIL}'", "--root", str(tmp_path), "--dry-run"]),
        ErrorKind.RECIPE,
        f"loss={SHOWN}",
        "cispo, dapo, grpo, gspo",
    )
    no_raw_controls(line)


def test_figure_labels_carry_no_control_characters():
    from ablate.render.figures import as_figure_text as _tex

    assert _tex(f"{EVIL}: $x$") == SHOWN + r": \$x\$"


def test_plan_shows_a_calibrations_source_and_notes_as_text(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(calibration(source=f"from {EVIL}", notes=[f"note {EVIL}"])))
    res = runner.invoke(
        app, ["plan", str(SWEEP_FILE), "--calibration", str(cal), "--question", "ceiling", "--trials", "20"]
    )
    assert res.exit_code == 0, res.output
    no_raw_controls(res.output)
    assert f"from {SHOWN}" in res.output and f"note {SHOWN}" in res.output
    assert "A cannot be identified" in res.output  # nothing was simulated


# ---- 2. numbers read from files are range-checked; work is bounded ----


GOOD_NOISE = {"sd_A": 0.02, "sd_logc": 0.2, "dof": 6, "source": "pilot", "log_compute": LOG_COMPUTE}


@pytest.mark.parametrize(
    "change,parts",
    [  # the value as the file holds it, and the range it must be in (every key is named in the fix)
        ({"sd_A": -0.01}, ["-0.01", "(0, 1]"]),
        ({"sd_A": 0}, ["(0, 1]"]),
        ({"sd_logc": 1e300}, ["1e+300", "(0, 10]"]),
        ({"sd_A": "NaN"}, ['"NaN"']),
        ({"sd_A": True}, ["true"]),
        ({"dof": 2.5}, ["2.5", "integer"]),
        ({"dof": 0}, ["[1, 1e+09]"]),
        ({"dof": 10**30}, [str(10**30), "[1, 1e+09]"]),
        ({"dof": None}, ["no dof"]),  # tells it from a dof out of range
        ({"source": ["x"]}, ['["x"]']),
        ({"log_compute": None}, ["older ablate", "--save-noise"]),  # a spread of another statistic
    ],
)
def test_noise_file_values_are_range_checked(tmp_path, change, parts):
    noise = tmp_path / "noise.json"
    noise.write_text(json.dumps({**GOOD_NOISE, **change}))
    one_error(
        runner.invoke(app, ["rank", str(tmp_path / "absent.csv"), "--noise", str(noise)]),
        ErrorKind.SETTING,
        f"--noise {noise}",
        *parts,
    )


@pytest.mark.parametrize(
    "text,parts",
    [
        ('{"sd_A": NaN, "sd_logc": 0.2, "dof": 6}', ["NaN", "(0, 1]"]),
        ('{"sd_A": Infinity, "sd_logc": 0.2, "dof": 6}', ["Infinity", "(0, 1]"]),
        ("[" * 100_000 + "]" * 100_000, ["nested"]),  # tells it from other JSON that is not a noise file
        ("[1, 2]", ["list"]),
        ("{", ["not valid JSON"]),  # tells it from JSON that is not a noise file
    ],
)
def test_noise_files_that_are_not_json_objects_are_one_line(tmp_path, text, parts):
    noise = tmp_path / "noise.json"
    noise.write_text(text)
    one_error(
        runner.invoke(app, ["rank", str(tmp_path / "absent.csv"), "--noise", str(noise)]),
        ErrorKind.SETTING,
        f"--noise {noise}",
        *parts,
    )


def test_noise_file_that_is_a_folder_binary_or_huge_is_one_line(tmp_path):
    for what, make, parts in (
        ("dir", lambda p: p.mkdir(), ["directory"]),
        ("bin", lambda p: p.write_bytes(b"\xff\xfe{"), ["UTF-8"]),
        ("big", lambda p: p.write_bytes(b" " * (2 << 20)), ["2,097,152", "1,048,576"]),
    ):
        p = tmp_path / what
        make(p)
        one_error(
            runner.invoke(app, ["rank", str(tmp_path / "absent.csv"), "--noise", str(p)]),
            ErrorKind.SETTING,
            f"--noise {p}",
            *parts,
        )


@pytest.mark.parametrize(
    "change,parts",
    [  # the key, the value as the file holds it, and the range it must be in
        ({"c_mid": 1e-300}, ["c_mid", "1e-300", "[1e-09, 1e+30]"]),  # made `ablate plan` run without end
        ({"budget": 1e300}, ["budget", "1e+300", "[1e-09, 1e+30]"]),
        ({"eval_every": 0}, ["eval_every", "[1e-09, 1e+30]"]),
        ({"b": 1e9}, ["1000000000.0", "[0.05, 20]"]),
        ({"a": 1.5}, ["1.5", "(0, 1]"]),
        ({"r0": 0.7}, ["r0 < a", "0.7"]),
        ({"drift_rho": -0.5}, ["drift_rho", "-0.5", "[0, 1]"]),
        ({"seed_sd_logc": 1e10}, ["seed_sd_logc", "10000000000.0", "[0, 10]"]),
        ({"val_n": 1e300}, ["val_n", "1e+300", "[1, 1e+09]"]),
        ({"seed_dof": True}, ["seed_dof", "true", "integer"]),
        ({"seed_dof": 3.5}, ["seed_dof", "3.5", "integer"]),
        ({"arms": "4"}, ["arms", '"4"', "integer"]),
        ({"gpu_hours_per_x": -1}, ["gpu_hours_per_x", "-1", "(0, 1e+40]"]),
        ({"steps_per_x": 1e30}, ["steps_per_x", "1e+30", "[1e-09, 1e+30]"]),  # a budget of ~1e-27 from max_steps
        ({"x": ""}, ["compute axis", "gpu_hours"]),
        ({"notes": [1]}, ["notes"]),
    ],
)
def test_calibration_file_values_are_range_checked(tmp_path, change, parts):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(calibration(**change)))
    one_error(
        runner.invoke(app, ["plan", str(SWEEP_FILE), "--calibration", str(cal), "--trials", "20"]),
        ErrorKind.SETTING,
        f"--calibration {cal}",
        *parts,
    )


def test_calibration_file_nested_too_deeply_or_a_folder_is_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for cal, part in ((deep, "nested"), (tmp_path, "directory")):  # what is wrong with it: nothing else tells
        one_error(
            runner.invoke(app, ["plan", str(SWEEP_FILE), "--calibration", str(cal)]),
            ErrorKind.SETTING,
            f"--calibration {cal}",
            part,
        )


HUGE = "9" * 5000  # past int()'s 4,300 digits


@pytest.mark.parametrize(
    "name,text,args",
    [
        ("console.log", "".join(f"step:{s} - val_pass_rate:0.{i}\n" for i, s in enumerate(["1", "2", HUGE])), []),
        ("c2.log", "".join(f"step:{s} - val_pass_rate:0.{i}\n" for i, s in enumerate(["1", "2", "1" + "0" * 30])), []),
        (
            "verl.jsonl",
            "".join(
                json.dumps({"step": s, "data": {"val_pass_rate": 0.1 * i}}) + "\n" for i, s in enumerate([1, 2, 1e300])
            ),
            [],
        ),
        (
            "verl2.jsonl",
            "".join(
                f'{{"step": {s}, "data": {{"val_pass_rate": 0.{i}}}}}\n' for i, s in enumerate(["1", "2", "9" * 400])
            ),
            [],
        ),
        (
            "trainer_state.json",
            json.dumps({"log_history": [{"step": s, "val_pass_rate": 0.1 * i} for i, s in enumerate([1, 2, 2**60])]}),
            [],
        ),
        ("wb.csv", f"Step,r - val_pass_rate\n1,0.1\n2,0.2\n{HUGE},0.3\n", []),
    ],
)
def test_huge_step_numbers_in_other_tools_logs_are_one_line(tmp_path, name, text, args):
    p = tmp_path / name
    p.write_text(text)
    one_error(
        runner.invoke(app, ["fit", str(p), "--x", "step", "--n-boot", "0", *args]), ErrorKind.FILE, str(p), "2^53"
    )


def test_deeply_nested_json_in_logs_is_one_line(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    trl = tmp_path / "trainer_state.json"
    trl.write_text('{"log_history": ' + deep + "}")
    # "nested" tells it from other JSON that is not a TRL trainer_state.json (or not a table)
    one_error(runner.invoke(app, ["fit", str(trl), "--x", "step"]), ErrorKind.FILE, str(trl), "nested")
    table = tmp_path / "t.jsonl"  # detect() reads the first line as JSON too
    table.write_text(deep + "\n")
    one_error(runner.invoke(app, ["fit", str(table), "--x", "step"]), ErrorKind.FILE, f"{table}:1", "nested")


def test_prune_files_nested_too_deeply_or_out_of_range_read_as_nothing(tmp_path):
    from ablate.prune.monitor import monitor_alive
    from ablate.prune.rules import recorded_target

    pdir = tmp_path / "prune"
    pdir.mkdir()
    (pdir / "monitor.json").write_text("[" * 100_000 + "]" * 100_000)
    assert monitor_alive(tmp_path) is False
    for bad in ({"pid": "1"}, {"pid": True}, {"pid": 10**30}, {"pid": os.getpid(), "start": "x"}):
        store.write_json(pdir / "monitor.json", bad)
        assert monitor_alive(tmp_path) is False, bad
    store.write_json(pdir / "monitor.json", {"pid": os.getpid(), "start": proc_start(os.getpid())})
    assert monitor_alive(tmp_path) is True
    lines = [
        "[" * 100_000 + "]" * 100_000,
        '{"x": "samples", "target": 1' + "0" * 400 + "}",
        '{"x": "samples", "target": true}',
        '{"x": "samples", "target": NaN}',
        '{"x": "samples", "target": -1}',
    ]
    (pdir / "decisions.jsonl").write_text('{"x": "samples", "target": 500.0}\n' + "\n".join(lines) + "\n")
    assert recorded_target(tmp_path, "samples") == 500.0
    (pdir / "decisions.jsonl").unlink()
    (pdir / "decisions.jsonl").mkdir()
    assert recorded_target(tmp_path, "samples") is None


@pytest.mark.parametrize(
    "args,parts",
    [
        (["fit", "{csv}", "--n-boot", str(10**9)], ("--n-boot 1000000000", "10,000")),
        (["rank", "{csv}", "--n-boot", str(10**30)], (f"--n-boot {10**30}", "10,000")),
        (["extrapolate", "{csv}", "--n-boot", "20000"], ("--n-boot 20000", "10,000")),
        (["plan", "{csv}", "--trials", str(10**6)], ("--trials 1000000", "1,000")),
        (["plan", "{csv}", "--futures", str(10**6)], ("--futures 1000000", "1,000")),
        (["calibrate", "--trials", str(10**6)], ("--trials 1000000", "1,000")),
        (["calibrate", "--n-boot", str(10**9)], ("--n-boot 1000000000", "10,000")),
        (["calibrate", "--f", ",".join(["0.5"] * 20)], ("--f", "2,400 cells", "2,000")),
    ],
)
def test_work_beyond_memory_and_time_is_refused_naming_the_limit(tmp_path, monkeypatch, args, parts):
    import ablate.fit.calibrate

    def never(*a, **k):
        raise AssertionError("ran the calibration")

    monkeypatch.setattr(ablate.fit.calibrate, "calibrate", never)
    csv = tmp_path / "absent.csv"  # checked before any input is read
    one_error(runner.invoke(app, [a.format(csv=csv) for a in args]), ErrorKind.SETTING, *parts)


# ---- 3. output paths are checked before any compute; a ledger that is a folder; read-only file systems ----


def _outputs(tmp_path: Path, out: Path) -> list[tuple[list[str], str]]:
    absent = str(tmp_path / "absent.csv")  # the output is refused before this missing input is even looked at
    return [
        (["fit", absent, "--plot", str(out)], "--plot"),
        (["rank", absent, "--plot", str(out)], "--plot"),
        (["extrapolate", absent, "--plot", str(out)], "--plot"),
        (["rank", absent, "--save-noise", str(out)], "--save-noise"),
        (["plan", absent, "--save-calibration", str(out)], "--save-calibration"),
        (["calibrate", "--out", str(out)], "--out"),
    ]


@pytest.fixture
def no_calibration(monkeypatch):
    import ablate.fit.calibrate

    def never(*a, **k):
        raise AssertionError("ran the calibration before checking --out")

    monkeypatch.setattr(ablate.fit.calibrate, "calibrate", never)


def test_output_path_that_is_a_folder_is_refused_before_any_compute(tmp_path, no_calibration):
    folder = tmp_path / "out.png"
    folder.mkdir()
    for args, flag in _outputs(tmp_path, folder):
        one_error(runner.invoke(app, args), ErrorKind.FILE, f"{flag} {folder}/")  # and a file in it
    assert list(folder.iterdir()) == []


def test_output_path_under_a_file_is_refused_before_any_compute(tmp_path, no_calibration):
    f = tmp_path / "file"
    f.write_text("x")
    for args, flag in _outputs(tmp_path, f / "sub" / "out.png"):
        one_error(runner.invoke(app, args), ErrorKind.FILE, f"{flag} {f / 'sub' / 'out.png'}")
    assert f.read_text() == "x"


def _read_only(monkeypatch, where: Path) -> None:
    """`where` and everything under it as if on a read-only mount (root ignores permission bits, not ro mounts)."""
    real = os.statvfs

    class RO:
        def __init__(self, st):
            self.st = st

        def __getattr__(self, k):
            return getattr(self.st, k)

        @property
        def f_flag(self):
            return self.st.f_flag | os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda p: RO(real(p)) if Path(p).resolve().is_relative_to(where) else real(p))


def test_output_on_a_read_only_file_system_is_refused_before_any_compute(tmp_path, monkeypatch, no_calibration):
    ro = tmp_path / "ro"
    ro.mkdir()
    _read_only(monkeypatch, ro)
    for args, flag in _outputs(tmp_path, ro / "out.png"):
        one_error(runner.invoke(app, args), ErrorKind.FILE, f"{flag} {ro / 'out.png'}")
    one_error(
        runner.invoke(app, ["sweep", str(SWEEP_FILE), "--root", str(ro)]), ErrorKind.FILE, f"--root {ro / 'loss'}"
    )
    assert list(ro.iterdir()) == []


def test_sweep_root_that_is_a_file_or_holds_a_ledger_folder_is_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    one_error(runner.invoke(app, ["sweep", str(SWEEP_FILE), "--root", str(f)]), ErrorKind.FILE, f"--root {f / 'loss'}")
    one_error(
        runner.invoke(app, ["sweep", str(SWEEP_FILE), "--root", str(f / "sub")]),
        ErrorKind.FILE,
        f"--root {f / 'sub' / 'loss'}",
    )
    (tmp_path / "root" / "loss" / "ledger.jsonl").mkdir(parents=True)
    one_error(
        runner.invoke(app, ["sweep", str(SWEEP_FILE), "--root", str(tmp_path / "root")]),
        ErrorKind.FILE,
        str(tmp_path / "root" / "loss" / "ledger.jsonl"),
        "ablate sweep",
    )
    assert [p.name for p in (tmp_path / "root" / "loss").iterdir()] == ["ledger.jsonl"]  # nothing submitted


def test_status_on_a_ledger_that_is_a_folder_is_one_line(tmp_path):
    sdir = tmp_path / "loss"
    (sdir / "ledger.jsonl").mkdir(parents=True)
    for args in (
        ["status", "loss", "--root", str(tmp_path)],
        ["status", "--root", str(tmp_path)],
        ["status", str(sdir)],
    ):
        one_error(runner.invoke(app, args), ErrorKind.FILE, str(sdir / "ledger.jsonl"), "ablate sweep")


def test_a_write_that_fails_after_the_checks_is_one_line(tmp_path, monkeypatch):
    """A file system that turns read-only (or full) between the check and the write: one line, nothing written."""
    path = curves_csv(tmp_path / "c.csv", names=("a", "base"), seeds=2)
    noise = tmp_path / "noise.json"

    def eros(p, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(p))

    monkeypatch.setattr(store, "atomic_write_bytes", eros)
    one_error(
        runner.invoke(
            app,
            [
                "rank",
                str(path),
                "--group",
                "group",
                "--baseline",
                "base",
                "--n-boot",
                "200",
                "--save-noise",
                str(noise),
                "--x",
                "gpu_hours",
                "--to",
                "20000",
            ],
        ),
        ErrorKind.FILE,
        str(noise),
        "Read-only file system",
    )
    assert not noise.exists()


@pytest.mark.parametrize("verb", ["fit", "rank", "extrapolate"])
def test_ctrl_c_in_any_verb_exits_130_without_a_traceback(tmp_path, monkeypatch, verb):
    """Ctrl-C while a verb works (here, while it reads its input) is the shell's 130 and one line, not click's
    "Aborted!" with status 1 or a traceback."""
    import ablate.curves.inputs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ablate.curves.inputs, "load_inputs", interrupted)
    res = runner.invoke(app, [verb, str(curves_csv(tmp_path / "c.csv"))])
    assert res.exit_code == 130, (res.output, res.exception)
    assert res.output.strip() == "interrupted" and "Traceback" not in res.output


def test_a_reader_that_leaves_the_pipe_is_exit_141_and_no_error(tmp_path, monkeypatch):
    """`ablate show ... | head -1`: the write to the closed pipe ends the command quietly with 128 + SIGPIPE."""
    import ablate.compose.sweep

    def closed_pipe(*args, **kwargs):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(ablate.compose.sweep, "config_yaml", closed_pipe)
    res = runner.invoke(app, ["show", str(RECIPES_DIR / "base.yaml")])
    assert res.exit_code == 141 and res.output == "", (res.output, res.exception)
