"""ablate from Python (docs/api.md): the functions a notebook calls give the commands' own records, the same
verdicts as `ablate rank --json`, and bad input as one UserError line."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import ErrorKind, SettingError
from ablate.fit.synthetic import synthetic_curve
from jobs import refused

sys.path.insert(0, str(Path(__file__).parent / "fit"))
from sweep_writer import write_sweep

BASE = "loss=cispo"


def seeds(a: float, c_mid: float, first: int, n: int = 3) -> list:
    return [synthetic_curve(a=a, b=1.9, c_mid=c_mid, c_max=16000, n_points=60, seed=first + s) for s in range(n)]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    arms = {BASE: seeds(0.61, 2500, 0), "loss=gspo": seeds(0.68, 2500, 10), "loss=dapo": seeds(0.61, 1250, 20)}
    return write_sweep(root, "loss", arms, baseline=BASE)


def test_import_ablate_is_light_and_offers_the_verbs():
    """`import ablate` loads neither scipy nor torch, and exposes the verbs' functions."""
    code = "import sys, ablate; print(sorted(m for m in ('scipy', 'torch', 'numpy') if m in sys.modules)); "
    code += "print(all(callable(getattr(ablate, f)) for f in ablate.__all__ if f != '__version__'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "True", out


def test_rank_from_python_is_rank_json(sweep):
    import ablate

    ranking = ablate.rank(sweep, x="gpu_hours")
    printed = json.loads(CliRunner().invoke(app, ["rank", str(sweep), "--x", "gpu_hours", "--json"]).output)
    assert printed.pop("schema") == 1 and ranking.to_json() == printed
    by = {a.arm: a for a in ranking.arms}
    assert ranking.baseline == BASE and by["loss=gspo"].verdict == "ceiling_up"
    assert by["loss=gspo"].delta_A_ci[0] > 0 and by["loss=gspo"].fit.A_ci is not None


def test_what_the_verbs_return_is_frozen(sweep):
    """A returned ranking, its arms, their fits and an extrapolation cannot be changed in place: a notebook that
    wants another view makes a copy with `dataclasses.replace`, and the ranking it printed stays what it was."""
    import ablate

    ranking = ablate.rank(sweep, x="gpu_hours")
    arm = next(a for a in ranking.arms if a.arm == "loss=gspo")
    for record, field in [(ranking, "baseline"), (arm, "verdict"), (arm.fit, "A"), (arm, "fit")]:
        with pytest.raises(FrozenInstanceError):
            setattr(record, field, None)
    ex = ablate.extrapolate(sweep, x="gpu_hours", fit_until=8000)
    with pytest.raises(FrozenInstanceError):
        ex.subject = "other"  # type: ignore[misc]
    changed = replace(arm, verdict="inconclusive")
    assert changed.verdict == "inconclusive" and arm.verdict == "ceiling_up"
    changed.effect = "a copy is the caller's own, to fill in"


def test_fit_extrapolate_read_and_status_from_python(sweep):
    import ablate

    fits = ablate.fit_curves(sweep, x="gpu_hours", by_arm=True)
    assert sorted(f.run for f in fits) == sorted([BASE, "loss=gspo", "loss=dapo"])
    assert all(f.A_ci is not None and f.A_ci[0] <= f.A <= f.A_ci[1] for f in fits)
    winner = ablate.extrapolate(sweep, x="gpu_hours", fit_until=8000)
    assert winner.subject == ablate.rank(sweep, x="gpu_hours").arms[0].arm
    assert winner.heldout and winner.heldout_mae is not None
    read = ablate.read(sweep, x="gpu_hours")
    assert len(read.curves) == 9 and read.x == "gpu_hours"
    runs = ablate.status(sweep)
    assert len(runs) == 9 and {str(r.state) for r in runs} == {"done"}


def test_bad_input_from_python_is_the_commands_one_line(tmp_path):
    import ablate

    with refused(ErrorKind.FILE, str(tmp_path / "nope")) as e:
        ablate.rank(tmp_path / "nope")
    assert "\n" not in str(e.value)
    with refused(ErrorKind.SETTING):
        ablate.rank()
    with refused(ErrorKind.SETTING) as e:  # docs/api.md's example: the kind, not the words
        ablate.rank("sweeps/loss", to=-1)
    res = CliRunner().invoke(app, ["rank", "sweeps/loss", "--to", "-1"])
    assert res.stderr == f"error[setting]: {e.value.named(lambda s: '--' + s)}\n"  # the same refusal, as a line


def test_a_refused_setting_is_named_by_its_keyword_from_python(tmp_path):
    """From Python a refusal names the keyword at fault (`x`, `n_boot`, `arm`, `to`), never a flag, and says which in
    `.settings`; the command line names the flag."""
    import ablate

    sweep = write_sweep(tmp_path, "s", {BASE: seeds(0.61, 2500, 0), "loss=gspo": seeds(0.68, 2500, 10)}, baseline=BASE)
    cases = [
        (lambda: ablate.rank(sweep, x="gpu_hourz"), ("x",), "x gpu_hourz: unknown compute axis"),
        (lambda: ablate.rank(sweep, x="gpu_hours", n_boot=0), ("n_boot",), "give n_boot of 200"),
        (lambda: ablate.extrapolate(sweep, x="gpu_hours", arm="nope"), ("arm",), "arm 'nope': no such arm"),
        (lambda: ablate.extrapolate(sweep, x="gpu_hours", to=1e12), ("to", "x"), "pass to in the data's units"),
        (lambda: ablate.rank(sweep, x="gpu_hours", to=1.0), ("to", "x"), "pass to in gpu_hours"),
    ]
    for call, settings, words in cases:
        with pytest.raises(SettingError) as e:
            call()
        assert e.value.settings == settings and words in str(e.value) and "--" not in str(e.value), str(e.value)
    res = CliRunner().invoke(app, ["extrapolate", str(sweep), "--x", "gpu_hours", "--to", "1e12"])
    assert "pass --to in the data's units" in res.stderr and "another --x" in res.stderr, res.stderr


def test_a_refusal_crosses_a_process_boundary_whole():
    """The fits share work over forked processes, which send an error back pickled: every kind of refusal arrives as
    raised, with its class, message, kind and fields (a required `kind` must not break the rebuild)."""
    import pickle

    from ablate.config.schema import ConfigErrors
    from ablate.errors import SettingError, UserError
    from ablate.storage.fs import LinkRefused
    from ablate.storage.rundir import DirectoryGone

    sent = [
        UserError("x.csv: no such file", kind=ErrorKind.FILE),
        SettingError("{to} -1: must be > 0", "to"),
        SettingError("no seed spread; give {noise} FILE", "noise", kind=ErrorKind.DATA),
        ConfigErrors(["loss.eps_mx: unknown key", "optim.lr: must be > 0"]),
        LinkRefused("runs/a is a symbolic link"),
        DirectoryGone("runs/a was removed"),
    ]
    for e in sent:
        got = pickle.loads(pickle.dumps(e))  # noqa: S301 (our own bytes, made a line above)
        assert type(got) is type(e) and str(got) == str(e) and got.kind is e.kind and vars(got) == vars(e)


def test_a_note_names_a_setting_as_each_front_end_spells_it(tmp_path):
    """The fit says which setting would fix a note or a refusal without knowing any front end: from Python the note
    names the keyword (`r0`), on the command line and in its JSON the flag (`--r0`), and the record says which
    setting it is about, so neither reader parses the words."""
    import ablate

    sweep = write_sweep(tmp_path, "s", {BASE: seeds(0.61, 2500, 0), "loss=gspo": seeds(0.68, 2500, 10)}, baseline=BASE)
    for metrics in sweep.glob("runs/*/metrics.jsonl"):  # no evaluation at step 0: no R0 measured
        metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[1:]))
    ranking = ablate.rank(sweep, x="gpu_hours")
    note = next(n for a in ranking.arms for n in a.fit.notes if "compute 0" in n.body)
    assert note.body.settings == ("r0",) and "give r0 to fix it" in note.body and "--r0" not in note.body
    printed = json.loads(CliRunner().invoke(app, ["rank", str(sweep), "--x", "gpu_hours", "--json"]).output)
    notes = [n for a in printed["arms"] for n in a["notes"] if "compute 0" in n]
    assert notes and all("give --r0 to fix it" in n for n in notes)
    shown = CliRunner().invoke(app, ["fit", str(sweep), "--x", "gpu_hours"]).output
    assert "give --r0 to fix it" in shown and "give r0" not in shown

    with pytest.raises(SettingError) as e:  # no points left in any arm's window
        ablate.rank(sweep, x="gpu_hours", fit_from=1e9)
    assert set(e.value.settings) == {"fit_from", "fit_until"} and "widen fit_from/fit_until" in str(e.value)
    res = CliRunner().invoke(app, ["rank", str(sweep), "--x", "gpu_hours", "--fit-from", "1e9"])
    assert res.exit_code == 2 and "widen --fit-from/--fit-until" in res.output and "fit_from" not in res.output

    short = [synthetic_curve(a=0.6, b=1.9, c_max=4000, c_mid=2500, n_points=30, seed=s) for s in range(2)]
    sweep = write_sweep(tmp_path, "t", {BASE: seeds(0.61, 2500, 0), "loss=dapo": short}, baseline=BASE)
    reason = ablate.rank(sweep, x="gpu_hours", fit_from=5000).not_fitted[0].reason  # dapo ends at 4000
    assert reason.settings == ("fit_from", "fit_until") and "widen fit_from/fit_until" in reason
    args = ["rank", str(sweep), "--x", "gpu_hours", "--fit-from", "5000"]
    printed = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    assert [s["arm"] for s in printed["not_fitted"]] == ["loss=dapo"]
    assert "widen --fit-from/--fit-until" in printed["not_fitted"][0]["reason"]
    assert "widen --fit-from/--fit-until" in CliRunner().invoke(app, args).output

    args = ["rank", str(sweep), "--x", "gpu_hours", "--fit-from", "12000", "--explain"]  # only plateau points left
    shown = CliRunner().invoke(app, args).output
    assert "start it earlier (--fit-from)" in shown and "(fit_from)" not in shown  # the baseline's reasons too


def test_a_curves_file_of_ones_own_names_its_columns_from_python(tmp_path):
    """A CSV with its own column names (compute, pass_rate, seed runs of arms): Python names them as the command
    does with --x, --y, --run and --group, and gets the command's ranking (before: no `y` or `group` argument)."""
    import ablate

    rows = ["seed_run,arm,compute,pass_rate"]
    for arm, a in (("base", 0.61), ("up", 0.68)):
        for s in range(3):
            c = synthetic_curve(a=a, b=1.9, c_mid=2500, c_max=16000, n_points=40, seed=s + (10 if arm == "up" else 0))
            rows += [f"{arm}-{s},{arm},{x:g},{y:.4f}" for x, y in zip(c.x, c.y)]
    csv = tmp_path / "mine.csv"
    csv.write_text("\n".join(rows) + "\n")
    cols = dict(x="compute", y="pass_rate", run="seed_run", group="arm")
    ranking = ablate.rank(csv, baseline="base", n_boot=200, **cols)
    assert sorted(a.arm for a in ranking.arms) == ["base", "up"] and all(a.seeds == 3 for a in ranking.arms)
    flags = ["--x", "compute", "--y", "pass_rate", "--run", "seed_run", "--group", "arm"]
    printed = json.loads(
        CliRunner().invoke(app, ["rank", str(csv), *flags, "--baseline", "base", "--n-boot", "200", "--json"]).stdout
    )
    assert {a["arm"]: a["verdict"] for a in printed["arms"]} == {a.arm: str(a.verdict) for a in ranking.arms}
    fits = ablate.fit_curves(csv, n_boot=100, **cols)  # a group column pools each arm's seeds, as --group does
    assert sorted(f.run for f in fits) == ["base", "up"] and all(f.n_runs == 3 for f in fits)
    assert ablate.extrapolate(csv, arm="up", fit_until=8000, n_boot=100, **cols).subject == "up"
