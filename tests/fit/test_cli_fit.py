"""`ablate fit` through the CLI: the table, --json contract, --plot, and one clear line for each bad input; and
`ablate rank`'s table read in one glance (two lines a row at 120 columns), its shared notes, --explain and
--min-effect."""

import itertools
import json
import re
from dataclasses import replace

import pytest
from sweep_writer import write_sweep
from typer.testing import CliRunner

from ablate.cli import app
from ablate.curves.tables import write_csv
from ablate.errors import ErrorKind
from ablate.fit.settings import Difference
from ablate.fit.synthetic import PAPER_CURVES, synthetic_curve
from ablate.storage import store
from jobs import one_error

runner = CliRunner()


@pytest.fixture
def curves_csv(tmp_path):
    path = tmp_path / "curves.csv"
    write_csv(
        [
            synthetic_curve(**PAPER_CURVES["scalerl-8b"], seed=0, run="a"),
            synthetic_curve(**PAPER_CURVES["scalerl-scout"], seed=1, run="b"),
        ],
        path,
    )
    return path


def test_table_and_window_printed(curves_csv):
    res = runner.invoke(app, ["fit", str(curves_csv), "--fit-until", "8000", "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    assert "fit window [0, 8000]" in res.output
    assert "converged" in res.output and "R@16000" in res.output


def test_json_contract_and_plot(curves_csv, tmp_path):
    png = tmp_path / "fit.png"
    res = runner.invoke(
        app,
        [
            "fit",
            str(curves_csv),
            "--json",
            "--n-boot",
            "200",
            "--plot",
            str(png),
            "--target-r",
            "0.5",
            "--compare-forms",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    keys = {
        "run",
        "group",
        "method",
        "n_points",
        "window",
        "R0",
        "A",
        "B",
        "C_mid",
        "A_ci",
        "B_ci",
        "C_mid_ci",
        "gain_fraction",
        "identifiable",
        "status",
        "sse",
        "target",
        "pred_at_target",
        "pred_ci",
    }
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
    path.write_text(
        "".join(
            json.dumps({"step": i, "flops": float(x), "acc": float(y)}) + "\n" for i, (x, y) in enumerate(zip(c.x, c.y))
        )
    )
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
    "content, args, kind, culprits",
    [
        (None, [], ErrorKind.FILE, ["{path}"]),
        ("gpu_hours,acc\n" + GOOD_ROWS, [], ErrorKind.FILE, ["{path}", "'val_pass_rate'", "gpu_hours, acc", "--y"]),
        (
            "gpu_hours,val_pass_rate\n0,0.3\n100,nan\n200,0.4\n300,inf\n400,0.5\n",
            [],
            ErrorKind.FILE,
            ["{path}", "'val_pass_rate'", "3, 5"],
        ),
        (
            "gpu_hours,val_pass_rate\n0,30\n100,35\n200,40\n300,45\n400,50\n",
            [],
            ErrorKind.FILE,
            ["{path}", "'val_pass_rate'", "[0, 1]", "2, 3, 4, 5, 6"],
        ),
        (
            "gpu_hours,val_pass_rate\n0,0.3\n100,0.35\n200,0.4\n",
            [],
            ErrorKind.DATA,
            ["bad", "2 point(s)", "at least 4"],
        ),
        (
            "gpu_hours,val_pass_rate\n0,0.3\n100,0.35\n300,0.4\n200,0.45\n400,0.5\n",
            [],
            ErrorKind.FILE,
            ["{path}", "line 5", "'gpu_hours'", "'bad'", "200", "300"],
        ),
        (
            "gpu_hours,val_pass_rate\n" + GOOD_ROWS,
            ["--fit-from", "5000"],
            ErrorKind.DATA,
            ["bad", "[5000, end]", "--fit-from"],
        ),
        (
            "gpu_hours,val_pass_rate\n" + GOOD_ROWS,
            ["--fit-from", "500", "--fit-until", "400"],
            ErrorKind.SETTING,
            ["--fit-from 500", "--fit-until 400"],
        ),
        ("gpu_hours,val_pass_rate\n0,0.3\n100,abc\n", [], ErrorKind.FILE, ["{path}", "'abc'", "'val_pass_rate'"]),
        (
            "gpu_hours,val_pass_rate\n",
            [],
            ErrorKind.FILE,
            ["{path}", "data rows"],
        ),  # tells it from the file's other faults
    ],
    ids=[
        "missing-file",
        "missing-column",
        "nan-inf",
        "out-of-range",
        "too-few-points",
        "non-increasing",
        "empty-window",
        "inverted-window",
        "not-a-number",
        "empty-file",
    ],
)
def test_bad_input_gives_one_clear_line(tmp_path, content, args, kind, culprits):
    path = tmp_path / "missing.csv" if content is None else _write(tmp_path, content)
    res = runner.invoke(app, ["fit", str(path), *args])
    one_error(res, kind, *(c.format(path=path) for c in culprits), stream="stderr")
    assert res.stderr.count("\n") == 1


def test_bad_option_value():
    res = runner.invoke(app, ["fit", "x.csv", "--method", "magic"])
    one_error(res, ErrorKind.SETTING, "--method magic", "default, paper", stream="stderr")


def test_cmid_interval_is_shown_as_its_bounds():
    """C_mid's interval is skewed and can span decades: the tables print its bounds, never a symmetric ±, and a
    small bound keeps its digits and a large one stays short."""
    from ablate.render.numbers import fmt_range

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


# ---- `ablate rank`'s table: a row in one glance ----

LOSS_SHAPE = dict(
    a=0.75, b=1.1, c_mid=37000.0, r0=0.43, c_max=256000.0, n_points=50, n_prompts=200, k=4, drift_sd=0.006
)
"""The embedded task's curve (fit/calibrate.py's `embedded` shape) over the loss sweep's 256,000 samples."""
LOSSES = {"loss=cispo": {}, "loss=grpo": {"a": 0.77}, "loss=dapo": {"c_mid": 30000.0}, "loss=gspo": {"a": 0.74}}


def loss_sweep(root, name, seeds):
    """A sweep shaped like `ablate sweep recipes/loss.yaml`: four losses, CISPO the baseline."""
    from sweep_writer import write_sweep

    arms = {
        label: [synthetic_curve(**{**LOSS_SHAPE, **change}, seed=10 * i + s) for s in range(seeds)]
        for i, (label, change) in enumerate(LOSSES.items())
    }
    return write_sweep(root, name, arms, baseline="loss=cispo")


def row_heights(table, width=120, key="R0"):
    """Lines each row of a rich table takes at `width` columns (a row starts where its `key` cell, one line, is)."""
    from rich.console import Console

    console = Console(width=width, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines)
    body = lines[
        next(i for i, s in enumerate(lines) if s.startswith("┡")) + 1 : next(
            i for i, s in enumerate(lines) if s.startswith("└")
        )
    ]
    assert all(line.endswith("│") for line in body), body  # nothing cut off at the right edge
    header = lines[next(i for i, s in enumerate(lines) if s.startswith("┏")) + 1]
    r0 = [c.strip() for c in header.split("┃")].index(key)
    starts = [i for i, line in enumerate(body) if line.split("│")[r0].strip()] + [len(body)]
    return [b - a for a, b in itertools.pairwise(starts)]


def ranked(paths):
    from ablate.curves.inputs import input_names, load_inputs
    from ablate.fit.compare import rank
    from ablate.fit.result import FitOptions

    curves, _ = load_inputs(paths)
    base = "loss=cispo" if len(paths) == 1 else f"{input_names(paths)[0]}:loss=cispo"
    return rank(curves, FitOptions(n_boot=200, target=512000.0), baseline=base)


@pytest.fixture(scope="module")
def loss_sweeps(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps")
    return {
        "one": loss_sweep(root / "one", "loss", 1),
        "three": loss_sweep(root / "three", "loss", 3),
        "a": loss_sweep(root / "a" / "sweeps", "loss", 1),
        "b": loss_sweep(root / "b" / "sweeps", "loss", 3),
    }


@pytest.mark.parametrize("which", ["one", "three", "two inputs"])
def test_every_rank_row_fits_two_lines_at_120_columns(loss_sweeps, which):
    """The 4-arm one-seed and 3-seed loss sweeps, and two sweeps read together (arms named by their path suffix,
    `a/sweeps/loss:loss=grpo`; one seed an arm in one, three in the other, so the table has a seeds column): no
    row takes more than two lines, and the why cell holds the effect, not the notes every row shares."""
    from ablate.render.rank import rank_table

    paths = [loss_sweeps["a"], loss_sweeps["b"]] if which == "two inputs" else [loss_sweeps[which]]
    ranking = ranked(paths)
    heights = row_heights(rank_table(ranking))
    assert len(heights) == len(ranking.arms) and max(heights) <= 2, heights
    # the why cell: the effect and its interval, each part on its own line within 27 characters
    assert all(len(part) <= 27 for a in ranking.arms for part in a.effect.split("; ")), [a.effect for a in ranking.arms]
    if which == "one":
        assert {a.verdict for a in ranking.arms} <= {"baseline", "inconclusive", "not_identified"}
        assert any(n.text.startswith("needs seeds") for n in ranking.notes)
    if which == "two inputs":
        assert any(a.arm.startswith("a/sweeps/loss:") for a in ranking.arms), [a.arm for a in ranking.arms]


def test_the_longest_verdicts_and_effects_still_fit_two_lines(loss_sweeps):
    """Every verdict the table can show, with its mark, against the longest effect text: still two lines a row."""
    from ablate.fit.arms import SeedsToDecide
    from ablate.render.rank import rank_table, verdict_cell

    ranking = ranked([loss_sweeps["a"], loss_sweeps["b"]])
    worst = [
        ("inconclusive", "unclear", SeedsToDecide(None, 1.0, 0.8, "more than 32 seeds")),
        ("inconclusive", "unclear", SeedsToDecide(24, 1.0, 0.8, "~24 seeds")),
        ("efficiency_down", "negligible", None),
        ("ceiling_up", "unclear", None),
        ("ceiling_down", "material", None),
        ("equivalent", "negligible", None),
        ("not_identified", None, None),
    ]
    effect = "ΔA -0.050 [-0.145, +0.045]; 10.61x [10.35, 11.04]"
    others = [
        replace(a, verdict=verdict, practical=practical, decide=decide, effect=effect)
        for a, (verdict, practical, decide) in zip([a for a in ranking.arms if a.verdict != "baseline"], worst)
    ]
    by_arm = {a.arm: a for a in others}
    ranking = replace(ranking, arms=[by_arm.get(a.arm, a) for a in ranking.arms])
    assert max(row_heights(rank_table(ranking))) <= 2
    shown = {a.arm: verdict_cell(a).plain for a in others}
    assert shown[others[0].arm] == "inconclusive · >32 seeds" and shown[others[1].arm] == "inconclusive · ~24 seeds"
    assert shown[others[2].arm] == "efficiency ↓ (negligible)" and shown[others[4].arm] == "ceiling ↓"


def test_rank_prints_shared_notes_once_and_explains_on_request(loss_sweeps):
    """One seed an arm: every arm is inconclusive, and `needs seeds` with the command that adds them is said once
    under the table, not in each row; the header names the smallest effect that matters; --explain adds each
    arm's full reasoning."""
    args = ["rank", str(loss_sweeps["one"]), "--n-boot", "200", "--to", "512000"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.output.count("needs seeds") == 1 and "seed=0,1,2" in res.output
    assert "smallest effect that matters: ±0.02 on A, ±15% compute" in res.output
    assert "no detectable" not in res.output and "why, in full" not in res.output
    res = runner.invoke(app, args + ["--explain", "--min-effect", "0.05", "--min-effect-compute", "1.3"])
    assert res.exit_code == 0, res.output
    assert "smallest effect that matters: ±0.05 on A, ±30% compute" in res.output
    assert "why, in full" in res.output and "loss=grpo — inconclusive: no seed spread to test against" in res.output
    out = json.loads(runner.invoke(app, args + ["--json", "--min-effect", "0.05"]).stdout)
    assert out["min_effect"] == {"A": 0.05, "compute_ratio": 1.15}


@pytest.mark.parametrize(
    "flag, value, culprits",
    [  # the flag as the command line spells it, the value as read, and the range it must be in
        ("--min-effect", "0", ["--min-effect 0.0", "(0, 1)"]),
        ("--min-effect", "1.5", ["--min-effect 1.5", "(0, 1)"]),
        ("--min-effect", "nan", ["--min-effect nan", "(0, 1)"]),
        ("--min-effect-compute", "1", ["--min-effect-compute 1.0", "(1, 100]"]),
        ("--min-effect-compute", "inf", ["--min-effect-compute inf", "(1, 100]"]),
    ],
)
def test_a_bad_min_effect_is_one_line(loss_sweeps, flag, value, culprits):
    res = runner.invoke(app, ["rank", str(loss_sweeps["one"]), flag, value])
    one_error(res, ErrorKind.SETTING, *culprits, stream="stderr")
    assert res.stderr.count("\n") == 1, res.stderr


def test_the_rank_tables_numbers_stand_over_their_intervals():
    """Two lines a number: the value over ± its half-interval, C_mid over its bounds in two significant digits
    (never e-notation: 999.6 is 1k, 99.96 is 100)."""
    from ablate.render.numbers import stacked

    assert stacked(0.661, (0.656, 0.666)) == "0.661\n±0.005"
    assert stacked(1.91, (1.77, 2.05), 2) == "1.91\n±0.14"
    assert stacked(35_300.0, (20_400.0, 61_000.0), skewed=True) == "35.3k\n[20k, 61k]"
    assert stacked(2_000.0, (99.96, 999.6), skewed=True) == "2k\n[100, 1k]"
    assert stacked(0.5, None) == "0.500" and stacked(None, None, skewed=True) == "—"


def test_rank_says_with_which_settings_a_prune_monitor_settled_the_stopped_arms(loss_sweeps):
    """An arm the monitor stopped was settled with the analysis its monitor ranked with (prune/decisions.jsonl; a
    line from before monitors recorded it stands for --to and 200 resamples): ranked otherwise, rank says so with
    the command that reads the verdicts that way; ranked that way it says nothing."""
    import io
    import shutil
    from dataclasses import replace

    from rich.console import Console

    from ablate.analysis.verbs import Inputs, decided_elsewhere
    from ablate.render.rank import print_rank

    sweep = loss_sweeps["three"]
    ranking = ranked([sweep])
    inputs = Inputs([sweep], [], [], ranking.x, None)
    (sweep / "prune").mkdir()
    try:
        (sweep / "prune" / "decisions.jsonl").write_text(json.dumps({"x": ranking.x, "target": 256000.0}) + "\n")
        assert decided_elsewhere(ranking, inputs) is None  # no arm was stopped
        ranking = replace(ranking, arms=[*ranking.arms[:-1], replace(ranking.arms[-1], stopped=["pruned"])])
        found = decided_elsewhere(ranking, inputs)
        assert found is not None and found.sweep == sweep and found.by == "--prune monitor"
        assert found.differences == [
            Difference("to", "256000", "512000")
        ]  # ranked() uses 200 resamples, as old monitors
        out = io.StringIO()
        print_rank(Console(file=out, width=400), ranking, [sweep], window=False, explain=False, elsewhere=found)
        assert (
            f"decided with other settings: {sweep}: the stopped arms were settled by its --prune monitor with "
            "--to 256000 (here: 512000); to read them so: "
            f"`ablate rank {sweep} --x {ranking.x} --to 256000 --n-boot 200`"
        ) in out.getvalue()
        more = replace(ranking, opts=replace(ranking.opts, n_boot=1000))
        assert decided_elsewhere(more, inputs).differences[-1] == Difference("n_boot", "200", "1000")
        same = replace(ranking, target=256000.0, opts=replace(ranking.opts, target=256000.0))
        assert decided_elsewhere(same, inputs) is None  # ranked as they were settled
    finally:
        shutil.rmtree(sweep / "prune")


def markdown_rows(text):
    """The rows of the one GitHub pipe table in `text` (header first), each cell unescaped; asserts the table's shape:
    one block of `|` lines, a delimiter row under the header, every row as wide as the header."""
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("|")]
    assert at and at == list(range(at[0], at[-1] + 1)), "one table, its lines together"
    rows = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", lines[i])[1:-1]] for i in at]
    assert all(re.fullmatch(r" ?-{3,}:? ?", c) for c in rows[1]), rows[1]
    assert all(len(r) == len(rows[0]) for r in rows), rows
    return [rows[0], *rows[2:]]


def test_rank_format_md_is_the_verdict_table_as_markdown(loss_sweeps):
    """`rank --format md`: the header lines as text, then a pipe table with the terminal table's columns, one row
    per arm with the verdict `rank --json` gives, then the notes; a pipe or a tag in a label stays in its cell."""
    from ablate.fit.arms import VERDICT_TEXT
    from ablate.render.markdown import rank_markdown

    args = ["rank", str(loss_sweeps["three"]), "--n-boot", "200", "--to", "512000"]
    res = runner.invoke(app, [*args, "--format", "md"])
    assert res.exit_code == 0 and res.stderr == "", res.output
    verdicts = {a["arm"]: a["verdict"] for a in json.loads(runner.invoke(app, [*args, "--json"]).stdout)["arms"]}
    header, *rows = markdown_rows(res.stdout)
    assert header == ["arm", "R0", "A", "B", "C_mid", "R@512k", "verdict", "why"]
    assert {r[0]: r[6].split(" · ")[0].split(" (")[0] for r in rows} == {
        arm: VERDICT_TEXT[v] for arm, v in verdicts.items()
    }
    before, after = res.stdout.split("\n| arm |")[0], res.stdout.split("|\n\n")[-1]
    assert "baseline: loss=cispo" in before and "smallest effect that matters: ±0.02 on A" in before
    assert "[" not in before.replace("\\[0, end\\]", "") and "inconclusive: neither a change" in after
    ranking = ranked([loss_sweeps["three"]])
    ranking = replace(
        ranking,
        arms=[replace(ranking.arms[0], arm="lr=1|2 <b>x</b> ![i](http://e.x/p.png) *e* `c`"), *ranking.arms[1:]],
    )
    header, *rows = markdown_rows(rank_markdown(ranking, [loss_sweeps["three"]], None))
    # shown as written: no HTML tag, no external image or live URL (a zero-width space after its scheme), no emphasis
    # or code span, and the pipe stays in its cell
    assert rows[0][0] == "lr=1|2 &lt;b&gt;x&lt;/b&gt; !\\[i\\](http\u200b://e.x/p.png) \\*e\\* \\`c\\`"
    assert len(rows) == len(ranking.arms)


def test_rank_hints_add_to_the_sweep_ranked_with_its_overrides_and_root(tmp_path, monkeypatch):
    """The commands rank prints to add seeds carry the overrides the sweep was launched with and its --root, so
    that pasted they add to this sweep and make the same configs; the ledger may be another user's, so only keys of
    a run's id set to plain values are carried: no destination (a whole section, a server, a tracker), no sweep of
    values, no interpolation."""
    import shlex

    from ablate.render.rank import decide_hint, seeds_hint

    monkeypatch.chdir(tmp_path)
    curves = [synthetic_curve(a=0.6, b=1.5, c_mid=2000, c_max=16000, n_points=30, seed=s) for s in range(2)]
    elsewhere = write_sweep(tmp_path / "cc", "loss", {"loss=cispo": curves}, baseline="loss=cispo")
    hostile = "'track={to:[mlflow],mlflow_uri:http://evil.example}' 'launcher={name:slurm}' track.to=[wandb] "
    hostile += "trainer.vllm_server_url=http://evil.example 'optim.lr=range(0,3333)' 'loss.eps_max=${oc.env:HOME}'"
    launched = f"ablate sweep recipes/loss.yaml seed=0 train.max_steps=20 {hostile} 'launcher.x=1' --root cc"
    store.append_jsonl(elsewhere / "ledger.jsonl", {"event": "launch", "batch": "b", "command": launched})
    hint = seeds_hint([elsewhere])
    assert shlex.split(hint) == [
        "ablate", "sweep", "recipes/loss.yaml", "train.max_steps=20", "seed=0,1,2", "--root", str(tmp_path / "cc")
    ]  # fmt: skip
    assert shlex.split(decide_hint([elsewhere], 9))[-5:] == [
        "--decide",
        "--max-seeds",
        "9",
        "--root",
        str(tmp_path / "cc"),
    ]
    here = write_sweep(tmp_path / "sweeps", "loss", {"loss=cispo": curves}, baseline="loss=cispo")
    assert seeds_hint([here]) == "ablate sweep recipes/loss.yaml seed=0,1,2"  # no ledger, ./sweeps: nothing to add


def test_the_rank_table_reads_at_80_columns(loss_sweeps):
    """At 80 columns the table leaves out R0, B and C_mid (they are in --explain and --json): no line is wider
    than the terminal, no row takes more than two lines, and the why cell keeps the effect's value whole."""
    import io

    from rich.console import Console

    from ablate.render.rank import rank_table

    ranking = ranked([loss_sweeps["three"]])
    out = io.StringIO()
    console = Console(file=out, width=80)
    table = rank_table(ranking, narrow=True)
    console.print(table)
    lines = out.getvalue().splitlines()
    assert max(len(ln) for ln in lines) <= 80, max(len(ln) for ln in lines)
    assert [c.header for c in table.columns][:2] == ["arm", "A"] and "B" not in [c.header for c in table.columns]
    assert max(row_heights(table, 80, key="verdict")) <= 2
    for a in ranking.arms:
        if a.effect and a.effect != "reference":
            assert a.effect.split(" [")[0] in out.getvalue(), a.effect
