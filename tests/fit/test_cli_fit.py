"""`ablate fit` through the CLI: the table, --json contract, --plot, and one clear line for each bad input."""

import json

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.curves import write_csv
from ablate.fit.synthetic import PAPER_CURVES, synthetic_curve

runner = CliRunner()


@pytest.fixture
def curves_csv(tmp_path):
    path = tmp_path / "curves.csv"
    write_csv([synthetic_curve(**PAPER_CURVES["scalerl-8b"], seed=0, run="a"),
               synthetic_curve(**PAPER_CURVES["scalerl-scout"], seed=1, run="b")], path)
    return path


def test_table_and_window_printed(curves_csv):
    res = runner.invoke(app, ["fit", str(curves_csv), "--fit-until", "8000", "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    assert "fit window [0, 8000]" in res.output
    assert "converged" in res.output and "R@16000" in res.output


def test_json_contract_and_plot(curves_csv, tmp_path):
    png = tmp_path / "fit.png"
    res = runner.invoke(app, ["fit", str(curves_csv), "--json", "--n-boot", "200", "--plot", str(png),
                              "--target-r", "0.5", "--compare-forms"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    keys = {"run", "group", "method", "n_points", "window", "R0", "A", "B", "C_mid", "A_ci", "B_ci", "C_mid_ci",
            "gain_fraction", "identifiable", "status", "sse", "target", "pred_at_target", "pred_ci"}
    assert [f["run"] for f in out["fits"]] == ["a", "b"]
    for f in out["fits"]:
        assert keys <= set(f)
        assert f["A_ci"][0] < f["A"] < f["A_ci"][1]
        assert f["compute_to_target"] > 0
    assert set(out["forms"]["a"]) == {"sigmoid", "power", "exponential"}
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_jsonl_input_with_custom_columns(tmp_path):
    c = synthetic_curve(**PAPER_CURVES["scalerl-8b"], seed=2)
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"step": i, "flops": float(x), "acc": float(y)}) + "\n"
                            for i, (x, y) in enumerate(zip(c.x, c.y))))
    res = runner.invoke(app, ["fit", str(path), "--x", "flops", "--y", "acc", "--json", "--n-boot", "100"])
    assert res.exit_code == 0, res.output
    (f,) = json.loads(res.stdout)["fits"]
    assert f["run"] == "m" and abs(f["A"] - 0.61) < 0.01


def _write(tmp_path, text, name="bad.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


GOOD_ROWS = "".join(f"{x},{0.3 + 0.3 * x / (x + 1000):.4f}\n" for x in [0, 100, 200, 400, 800, 1600, 3200])


@pytest.mark.parametrize(
    "content, args, expected",
    [
        (None, [], "no such file"),
        ("gpu_hours,acc\n" + GOOD_ROWS, [], "no column 'val_pass_rate'; columns are: gpu_hours, acc"),
        ("gpu_hours,val_pass_rate\n0,0.3\n100,nan\n200,0.4\n300,inf\n400,0.5\n", [], "NaN or infinite values in 'val_pass_rate' at line(s) 3, 5"),
        ("gpu_hours,val_pass_rate\n0,30\n100,35\n200,40\n300,45\n400,50\n", [], "outside [0, 1] at line(s) 2, 3, 4, 5, 6 (percentages? divide by 100)"),
        ("gpu_hours,val_pass_rate\n0,0.3\n100,0.35\n200,0.4\n", [], "need at least 4 for 3 parameters"),
        ("gpu_hours,val_pass_rate\n0,0.3\n100,0.35\n300,0.4\n200,0.45\n400,0.5\n", [], "line 5: compute 'gpu_hours' does not increase in run 'bad' (200 after 300)"),
        ("gpu_hours,val_pass_rate\n" + GOOD_ROWS, ["--fit-from", "5000"], "no points in the fit window [5000, end]"),
        ("gpu_hours,val_pass_rate\n" + GOOD_ROWS, ["--fit-from", "500", "--fit-until", "400"], "the window is empty"),
        ("gpu_hours,val_pass_rate\n0,0.3\n100,abc\n", [], "'abc' in column 'val_pass_rate' is not a number"),
        ("gpu_hours,val_pass_rate\n", [], "no data rows"),
    ],
    ids=["missing-file", "missing-column", "nan-inf", "out-of-range", "too-few-points", "non-increasing",
         "empty-window", "inverted-window", "not-a-number", "empty-file"],
)
def test_bad_input_gives_one_clear_line(tmp_path, content, args, expected):
    path = tmp_path / "missing.csv" if content is None else _write(tmp_path, content)
    res = runner.invoke(app, ["fit", str(path), *args])
    assert res.exit_code == 2, res.output
    assert expected in res.stderr, res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert "Traceback" not in res.output


def test_bad_option_value():
    res = runner.invoke(app, ["fit", "x.csv", "--method", "magic"])
    assert res.exit_code == 2 and "--method magic: unknown; valid: default, paper" in res.stderr


def test_cmid_interval_is_shown_as_its_bounds():
    """C_mid's interval is skewed and can span decades: the tables print its bounds, never a symmetric ±, and a
    small bound keeps its digits and a large one stays short."""
    from ablate.report import fmt_range

    assert fmt_range(2.5, (0.0012, 40_000.0)) == "2.5 [0.0012, 40k]"
    assert fmt_range(97_084.0, (5_665.0, 450_031.0)) == "97.1k [5.67k, 450k]"
    assert "±" not in fmt_range(8000.0, (3000.0, 9e6))
    assert fmt_range(None, None) == "—"


@pytest.mark.parametrize("slope", [-0.25, 0.0])
def test_a_falling_or_flat_curve_is_said_to_have_no_gain(tmp_path, slope):
    import numpy as np

    rng = np.random.default_rng(1)
    x = np.linspace(0, 8000, 41)
    path = tmp_path / "c.csv"
    y = 0.5 + slope * x / 8000 + rng.normal(0, 0.01, x.size)
    path.write_text("gpu_hours,val_pass_rate\n" + "".join(f"{a},{b:.4f}\n" for a, b in zip(x, y)))
    res = CliRunner().invoke(app, ["fit", str(path), "--n-boot", "100", "--json"])
    assert res.exit_code == 0, res.output
    fit = json.loads(res.output)["fits"][0]
    assert fit["status"] == "not_identified" and not fit["identifiable"]
    assert any("does not rise above R0" in n for n in fit["notes"]), fit["notes"]
