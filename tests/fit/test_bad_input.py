"""Bad input to `ablate fit`, `rank` and `extrapolate`: one line `error[KIND]: ...` naming the culprit and the fix,
exit 2, nothing written (no figure, nothing on stdout), never a traceback. And the inputs that look odd but are fine
(a UTF-8 BOM, names with markup in them, a very long curve) just work."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.curves.tables import write_csv
from ablate.errors import ErrorKind
from ablate.fit.analysis import fit_curves
from ablate.fit.curve import Curve
from ablate.fit.result import FitOptions
from ablate.fit.sigmoid import sigmoid
from ablate.fit.synthetic import synthetic_curve
from jobs import error_kind

runner = CliRunner()
BASE = dict(a=0.61, b=1.92, c_mid=2542.0)
COMMANDS = ["fit", "rank", "extrapolate"]


def fails(args: list[str], kind: ErrorKind, *culprits: str, plot=None) -> str:
    """Run the CLI; assert exit 2 with a single `error[KIND]:` line of this `kind` naming each culprit (the path,
    line, column, value or flag at fault), nothing on stdout, no traceback, and (when given) no figure at `plot`.
    Returns the error line."""
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    err = res.stderr
    assert err.startswith("error[") and err.count("\n") == 1, err
    assert error_kind(err) is kind, (kind, err)
    for e in culprits:
        assert e in err, (e, err)
    assert res.stdout == "" and "Traceback" not in res.output
    if plot is not None:
        assert not list(plot.parent.glob(plot.stem + "*")), list(plot.parent.iterdir())
    return err


def works(args: list[str]):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, (res.output, res.exception)
    return res


def curve_rows(seed=0, n_points=30, **change) -> list[tuple[float, float]]:
    c = synthetic_curve(**{**BASE, **change}, seed=seed, n_points=n_points)
    return list(zip(c.x.tolist(), c.y.tolist()))


@pytest.fixture
def good_csv(tmp_path):
    path = tmp_path / "curves.csv"
    write_csv(
        [synthetic_curve(**BASE, seed=0, n_points=30, run="a"), synthetic_curve(**BASE, seed=1, n_points=30, run="b")],
        path,
    )
    return path


def write_run(sweep, run_id: str, label: str, lines: list, *, status: str = "done", **info):
    """A run directory written by hand: run.json, and metrics.jsonl from dicts (JSON) or bytes (raw lines)."""
    rd = sweep / "runs" / run_id
    rd.mkdir(parents=True)
    (rd / "run.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "arm_id": label.split(",")[0],
                "label": label,
                "status": status,
                "baseline": False,
                **info,
            }
        )
    )
    raw = [ln if isinstance(ln, bytes) else json.dumps(ln).encode() for ln in lines]
    (rd / "metrics.jsonl").write_bytes(b"".join(ln + b"\n" for ln in raw))
    return rd


def metric_lines(seed=0, n_points=30) -> list[dict]:
    return [
        {"step": 10 * i, "gpu_hours": x, "samples": 100 * i, "flops": 1e15 * x, "val_pass_rate": y}
        for i, (x, y) in enumerate(curve_rows(seed, n_points))
    ]


@pytest.fixture
def sweep(tmp_path):
    s = tmp_path / "sw"
    write_run(s, "r0", "loss=cispo,seed=0", metric_lines(0), baseline=True)
    write_run(s, "r1", "loss=dapo,seed=0", metric_lines(1))
    return s


# 1. -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "digits, culprits", [(400, ["m.jsonl line 4", "'gpu_hours'", "1326 bits"]), (5000, ["m.jsonl:4", "4300 digits"])]
)
def test_a_huge_integer_in_a_jsonl_curve(tmp_path, digits, culprits):
    path = tmp_path / "m.jsonl"
    lines = [json.dumps({"gpu_hours": x, "val_pass_rate": y}) for x, y in curve_rows()]
    lines[3] = '{"gpu_hours": ' + "1" * digits + ', "val_pass_rate": 0.4}'
    path.write_text("\n".join(lines) + "\n")
    for cmd in COMMANDS:
        fails([cmd, path], ErrorKind.FILE, str(path), *culprits)


# 2. -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_file_that_is_not_utf8(tmp_path, cmd, fmt):
    path = tmp_path / f"bad.{fmt}"
    if fmt == "csv":
        body = "gpu_hours,val_pass_rate\n0,0.3\n" + "100,0.35\xff\n".encode("latin-1").decode("latin-1")
        path.write_bytes(body.encode("latin-1"))
    else:
        path.write_bytes(b'{"gpu_hours": 0, "val_pass_rate": 0.3}\n{"gpu_hours": 100, "val_pass_rate": "\xff"}\n')
    png = tmp_path / "out.png"
    fails([cmd, path, "--plot", png], ErrorKind.FILE, f"{path}:", "0xff", "UTF-8", plot=png)


# 3. -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", COMMANDS)
def test_deeply_nested_json_on_a_line(tmp_path, cmd):
    path = tmp_path / "deep.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text('{"gpu_hours": 0, "val_pass_rate": 0.3}\n{"gpu_hours": ' + deep + ', "val_pass_rate": 0.4}\n')
    fails([cmd, path], ErrorKind.FILE, f"{path}:2", "nested")  # tells it from a line that is not valid JSON


def test_a_nested_value_where_a_name_or_number_belongs(tmp_path):
    path = tmp_path / "nest.jsonl"
    nested = "[" * 500 + "]" * 500
    rows = [f'{{"run": "a", "gpu_hours": {x}, "val_pass_rate": {y}}}' for x, y in curve_rows()]
    path.write_text("\n".join(rows[:2] + ['{"run": ' + nested + ', "gpu_hours": 5000, "val_pass_rate": 0.5}']) + "\n")
    fails(["fit", path], ErrorKind.FILE, f"{path} line 3", "list", "'run'", "--run")
    path.write_text("\n".join(rows[:2] + ['{"run": "a", "gpu_hours": ' + nested + ', "val_pass_rate": 0.5}']) + "\n")
    fails(["fit", path], ErrorKind.FILE, f"{path} line 3", "list", "'gpu_hours'")


# 4. -------------------------------------------------------------------------------------------------------------


def test_a_curve_of_a_million_and_a_half_points_fits_in_bounded_memory():
    rng = np.random.default_rng(0)
    x = np.linspace(0.0, 16000.0, 1_500_001)
    y = sigmoid(x, 0.3, 0.61, 1.92, 2542.0) + rng.normal(0.0, 0.004, x.size)
    y[0] = 0.3
    tracemalloc.start()  # numpy reports its buffers to tracemalloc: the grid start alone used to ask for ~28 GiB
    try:
        res = fit_curves([Curve("long", None, x, y)], FitOptions(n_boot=100, fit_until=8000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * 2**30, f"peak {peak / 2**30:.1f} GiB"
    assert res.n_points == 750_000 and res.identifiable
    assert abs(res.A - 0.61) < 0.005 and abs(res.B - 1.92) < 0.1
    assert abs(res.pred_at_target - float(sigmoid(16000.0, 0.3, 0.61, 1.92, 2542.0))) < 0.005
    assert res.A_ci[0] < res.A < res.A_ci[1] and "batch means" in res.interval_method


# 5, 6. ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_figure_format_matplotlib_cannot_write_is_refused_first(tmp_path, good_csv, cmd):
    out = tmp_path / "out.xyz"
    err = fails(
        [cmd, good_csv, "--plot", out], ErrorKind.SETTING, f"--plot {out}", "'.xyz'", ".png", ".pdf", ".svg", plot=out
    )
    assert ".pgf" not in err  # matplotlib lists it, but it needs LaTeX
    fails(
        [cmd, tmp_path / "missing.csv", "--plot", out], ErrorKind.SETTING, "'.xyz'"
    )  # checked before the input is even read


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_directory_as_the_figure_is_refused(tmp_path, good_csv, cmd):
    folder = tmp_path / "figs"
    folder.mkdir()
    fails([cmd, good_csv, "--plot", folder], ErrorKind.FILE, f"--plot {folder}/")  # and a file name in it
    assert not (tmp_path / "figs.png").exists() and not list(folder.iterdir())


def test_the_printed_figure_path_is_the_file_written(tmp_path, good_csv):
    res = works(["fit", good_csv, "--n-boot", "50", "--plot", tmp_path / "noext"])
    assert (tmp_path / "noext.png").read_bytes()[:4] == b"\x89PNG"
    assert f"figure: {tmp_path / 'noext.png'}" in res.stdout.replace("\n", "")
    res = works(["fit", good_csv, "--n-boot", "50", "--plot", tmp_path / "fit.svg"])
    assert (tmp_path / "fit.svg").read_text().lstrip().startswith("<?xml")


# 7, 9. ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize(
    "args, culprits",
    [
        (["--seed", "-1"], ["--seed -1", ">= 0"]),
        (["--seed", "-7"], ["--seed -7", ">= 0"]),
        (["--to", "nan"], ["--to nan", "> 0"]),
        (["--to", "inf"], ["--to inf", "> 0"]),
        (["--fit-until", "nan"], ["--fit-until nan"]),
    ],
)
def test_impossible_numbers_are_refused(tmp_path, good_csv, cmd, args, culprits):
    png = tmp_path / "out.png"
    fails([cmd, good_csv, *args, "--plot", png], ErrorKind.SETTING, *culprits, plot=png)


@pytest.mark.parametrize("margin", ["nan", "-0.01", "inf"])
def test_a_margin_that_is_not_a_distance_is_refused(tmp_path, good_csv, margin):
    fails(["rank", good_csv, "--margin", margin], ErrorKind.SETTING, f"--margin {margin}", ">= 0", "paper")


# 8. -------------------------------------------------------------------------------------------------------------

MARKUP_NAMES = ["[/]", "[bold]x[/bold]", ":thumbs_up:", "a$\\frac$b"]


def test_names_with_markup_are_shown_as_written_by_fit(tmp_path):
    path = tmp_path / "m.csv"
    write_csv([synthetic_curve(**BASE, seed=i, n_points=30, run=name) for i, name in enumerate(MARKUP_NAMES)], path)
    res = works(
        [
            "fit",
            path,
            "--n-boot",
            "50",
            "--target-r",
            "0.5",
            "--compare-forms",
            "--fit-until",
            "3000",
            "--plot",
            tmp_path / "f.png",
        ]
    )
    for name in MARKUP_NAMES:
        assert res.stdout.count(name) >= 3, (name, res.stdout)  # fit table, compute-to-reach line, forms table
    assert (tmp_path / "f.png").exists()


def test_names_with_markup_are_shown_as_written_by_rank_and_extrapolate(tmp_path):
    path = tmp_path / "m.csv"
    curves = [
        synthetic_curve(**BASE, seed=i, n_points=30, run=f"run{i}", group=name) for i, name in enumerate(MARKUP_NAMES)
    ]
    young = synthetic_curve(**BASE, seed=9, n_points=30, run="young", group="[red]young[/red]")
    young.x, young.y = young.x[:3], young.y[:3]  # too few points: listed as not fitted
    write_csv(curves + [young], path)
    res = works(["rank", path, "--group", "group", "--baseline", "[/]", "--n-boot", "50", "--plot", tmp_path / "r.png"])
    out = res.stdout
    for name in MARKUP_NAMES:
        assert name in out, (name, out)
    assert "baseline: [/]\n" in out and "not fitted [red]young[/red]:" in out
    assert (tmp_path / "r.png").exists() and (tmp_path / "r-efficiency.png").exists()
    res = works(
        [
            "extrapolate",
            path,
            "--group",
            "group",
            "--arm",
            "[bold]x[/bold]",
            "--n-boot",
            "50",
            "--fit-until",
            "8000",
            "--plot",
            tmp_path / "e.png",
        ]
    )
    assert "subject: [bold]x[/bold];" in res.stdout and "[bold]x[/bold]: fitted on" in res.stdout


# 10, 11, 12. ----------------------------------------------------------------------------------------------------


def test_a_csv_with_a_utf8_bom_keeps_its_runs_apart(tmp_path, good_csv):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + good_csv.read_bytes())
    res = works(["fit", path, "--json", "--n-boot", "0"])
    assert [f["run"] for f in json.loads(res.stdout)["fits"]] == ["a", "b"]


def test_a_run_in_two_groups_is_refused(tmp_path):
    path = tmp_path / "g.csv"
    rows = curve_rows()
    path.write_text(
        "run,arm,gpu_hours,val_pass_rate\n"
        + "".join(f"r1,{'g1' if i < 10 else 'g2'},{x},{y}\n" for i, (x, y) in enumerate(rows))
    )
    for cmd in COMMANDS:
        fails([cmd, path, "--group", "arm"], ErrorKind.FILE, f"{path} line 12", "'r1'", "'g2'", "'g1'")


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("run,gpu_hours,val_pass_rate,run\n" + "".join(f"a,{x},{y},b\n" for x, y in curve_rows()))
    for cmd in COMMANDS:
        fails([cmd, path], ErrorKind.FILE, str(path), "'run'", "twice")  # "twice" tells it from a missing column


def test_a_row_with_more_fields_than_the_header_is_refused(tmp_path):
    path = tmp_path / "comma.csv"  # an unquoted comma in the run's name shifts every later column
    rows = "".join(f"a,{x},{y}\n" for x, y in curve_rows())
    path.write_text("run,gpu_hours,val_pass_rate\n" + rows + "b,1,5,0.4\n")
    line = len(curve_rows()) + 2
    for cmd in COMMANDS:
        fails([cmd, path], ErrorKind.FILE, f"{path}:{line}", "4 fields, the header has 3", "quote a value")


# 13, 14, 15: sweep and run directories ---------------------------------------------------------------------------


def test_a_killed_run_says_what_happened(sweep):
    write_run(
        sweep,
        "r2",
        "loss=gspo,seed=0",
        [],
        status="failed",
        cause="killed",
        error={"class": None, "message": "local job 12 ended without writing a result\nmore", "traceback": []},
    )
    res = works(["rank", sweep, "--n-boot", "50"])
    assert "not fitted loss=gspo,seed=0: failed (killed): local job 12 ended without writing a result" in res.stdout
    res = works(["rank", sweep, "--n-boot", "50", "--json"])
    (nf,) = json.loads(res.stdout)["not_fitted"]
    assert nf["reason"] == "failed (killed): local job 12 ended without writing a result"


def test_run_and_group_columns_on_a_sweep_or_run_directory_are_refused(sweep):
    for path, what in [(sweep, "is a sweep"), (sweep / "runs" / "r0", "is a run directory")]:
        for flag in (["--group", "arm"], ["--run", "seed"]):
            for cmd in COMMANDS:
                fails([cmd, path, *flag], ErrorKind.SETTING, flag[0], str(path), what, "drop it")


def test_a_metric_no_run_logs_is_named(sweep):
    err = fails(["rank", sweep, "--y", "nope"], ErrorKind.FILE, str(sweep), "'nope'", "--y", "step, gpu_hours, samples")
    assert "no metrics yet" not in err
    fails(
        ["extrapolate", sweep / "runs" / "r0", "--y", "nope"],
        ErrorKind.FILE,
        "'nope'",
        str(sweep / "runs" / "r0" / "metrics.jsonl"),
        "step, gpu_hours",
        "--y",
    )


@pytest.mark.parametrize("cmd", ["rank", "extrapolate"])
@pytest.mark.parametrize(
    "bad, culprits",
    [
        ({"gpu_hours": None}, ["'gpu_hours'", "null"]),
        ({"gpu_hours": "soon"}, ["'gpu_hours'", "'soon'"]),
        ({"val_pass_rate": None}, ["'val_pass_rate'", "null"]),
        ({"val_pass_rate": 37.5}, ["'val_pass_rate'", "37.5", "[0, 1]"]),
        (b'{"step": 30, "gpu_hours": \xff}', ["UTF-8"]),
    ],
)
def test_damaged_metrics_in_a_run_directory(sweep, tmp_path, cmd, bad, culprits):
    rd = sweep / "runs" / "r1"
    lines = metric_lines(1)
    lines[3] = bad if isinstance(bad, bytes) else {**lines[3], **bad}
    raw = [ln if isinstance(ln, bytes) else json.dumps(ln).encode() for ln in lines]
    (rd / "metrics.jsonl").write_bytes(b"".join(ln + b"\n" for ln in raw))
    png = tmp_path / "out.png"
    fails([cmd, sweep, "--plot", png], ErrorKind.FILE, f"{rd / 'metrics.jsonl'}:4", *culprits, plot=png)


# Found while fuzzing the three commands: a curve already at 1 at compute 0 has no gain to fit (least_squares
# used to be handed an empty box and raise).


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_curve_that_starts_at_one(tmp_path, cmd):
    path = tmp_path / "one.csv"
    path.write_text("gpu_hours,val_pass_rate\n" + "".join(f"{x},1\n" for x in [0, 100, 200, 400, 800, 1600]))
    fails([cmd, path], ErrorKind.DATA, "R0 = 1")


@pytest.mark.parametrize("cmd", ["rank", "extrapolate"])
def test_a_target_far_past_the_data_is_refused_as_a_units_mismatch(tmp_path, cmd):
    """CPU runs log a few hundredths of a GPU-hour: --to 16000 (the paper's scale) would rank on an extrapolation
    of ~10^5 x. Refused with the fix (the data's units), and fine once --to is in them, or without --to (a target in
    the data's units is chosen)."""
    c = synthetic_curve(a=0.7, b=1.2, c_mid=0.01, c_max=0.05, seed=0, n_points=30, run="cpu")
    path = tmp_path / "cpu.csv"
    write_csv([c], path)
    plot = tmp_path / "f.png"
    fails(
        [cmd, path, "--to", "16000", "--plot", plot],
        ErrorKind.SETTING,
        "--to 16000",
        "320,000x",
        "0.05 gpu_hours",
        "--to 0.1",  # the fix: a target in the data's units
        plot=plot,
    )
    works([cmd, path, "--to", "0.1", "--n-boot", "100"])
    works([cmd, path, "--n-boot", "100"])


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_mistyped_sweep_name_lists_the_sweeps_there_are(cmd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("loss", "batch"):
        (tmp_path / "sweeps" / name).mkdir(parents=True)
        (tmp_path / "sweeps" / name / "ledger.jsonl").write_text("")
    fails([cmd, "los"], ErrorKind.FILE, "los:", "batch, loss")


@pytest.mark.parametrize(
    "args, culprit",
    [
        (["calibrate", "--fs", "1"], "No such option: --fs"),
        (["rank", "--n-boot", "many", "x.csv"], "Invalid value for '--n-boot'"),
        (["rank"], "Missing argument 'INPUTS'"),
        (["rnak", "x.csv"], "No such command 'rnak'"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_culprit_and_the_help(args, culprit):
    """A mistyped option, a bad value for one, a missing argument or command: one `error[usage]:` line (no box),
    exit 2."""
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"error[usage]: {culprit}") and "--help`" in line, line
    assert "?;" not in line, line  # "Did you mean 'rank'? (see ...)", not "'rank'?; see"


def test_a_mistyped_compute_axis_is_named_with_the_closest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweeps" / "loss" / "runs").mkdir(parents=True)
    fails(["rank", "loss", "--x", "sample"], ErrorKind.SETTING, "--x sample", "(did you mean 'samples'?)")


def test_a_header_with_spaces_after_its_commas_is_read(tmp_path):
    path = tmp_path / "spaced.csv"
    path.write_text("run, gpu_hours, val_pass_rate\n" + "".join(f"a, {x}, {y}\n" for x, y in curve_rows()))
    res = works(["fit", path, "--json", "--n-boot", "0"])
    assert [f["run"] for f in json.loads(res.stdout)["fits"]] == ["a"]


def test_the_same_compute_twice_is_not_told_to_sort(tmp_path):
    path = tmp_path / "twice.csv"
    rows = curve_rows()
    rows.insert(5, rows[4])  # line 6 repeats line 5's evaluation
    path.write_text("run,gpu_hours,val_pass_rate\n" + "".join(f"a,{x},{y}\n" for x, y in rows))
    err = fails(["fit", path], ErrorKind.FILE, f"{path} line 7", "keep one evaluation", "line 6 or 7")
    assert "sort the rows" not in err


def test_a_curves_file_with_nothing_to_fit_says_what_would_help(tmp_path, good_csv):
    """R0 alone: no window can help, so none is suggested. Negative compute: a fix is named. A --to far past a
    curves file's own column: the other axes of a run (gpu_hours, ...) are not its columns, so they are not offered."""
    zero = tmp_path / "zero.csv"
    zero.write_text("run,gpu_hours,val_pass_rate\na,0,0.3\n")
    err = fails(["fit", zero], ErrorKind.DATA, "no points with compute > 0", "log evaluations")
    assert "--fit-from" not in err
    neg = tmp_path / "neg.csv"
    neg.write_text("run,gpu_hours,val_pass_rate\na,0,0.3\na,-5,0.4\n")
    fails(["fit", neg], ErrorKind.FILE, "negative compute", "line(s) 3", "counts up from 0")
    mine = tmp_path / "mine.csv"
    mine.write_text(good_csv.read_text().replace("gpu_hours", "compute"))
    err = fails(["extrapolate", mine, "--x", "compute", "--to", "1e12"], ErrorKind.SETTING, "--to 1e+12")
    assert "a compute column of the file" in err and "flops" not in err
