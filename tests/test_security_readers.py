"""Readers walk a sweep as writers do: no link followed (docs/security.md). A planted `runs/<id>` link to a run
directory elsewhere, a linked run.json, or a linked `runs` folder is refused in one line naming the link by every
command that reads runs (rank, fit, extrapolate, report with and without a ledger), and nothing of the link's
target reaches the output. `ablate report` writes its page in the current folder by default, never inside a sweep
that may be another user's, and owner-only (0600)."""

import os
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import ErrorKind
from ablate.fit.synthetic import synthetic_curve
from ablate.storage import fs
from ablate.storage.ledger import Ledger
from ablate.storage.rundir import RunDir
from jobs import error_kind

sys.path.insert(0, str(Path(__file__).parent / "fit"))
from sweep_writer import write_sweep

runner = CliRunner()
PRIVATE = "hunter2"
"""What the user's private files hold: it must reach no output."""
N_BOOT = ["--n-boot", "200"]


def curves(a: float, first_seed: int, n: int = 2) -> list:
    return [synthetic_curve(a=a, b=1.9, c_mid=2500, c_max=16000, n_points=30, seed=first_seed + s) for s in range(n)]


def sweep_of(root: Path, name: str = "s") -> Path:
    return write_sweep(
        root, name, {"loss=cispo": curves(0.61, 0), "loss=grpo": curves(0.52, 10)}, baseline="loss=cispo"
    )


def foreign_run(root: Path) -> Path:
    """A run directory of the user's own, outside the sweep, labelled with the secret (its files private)."""
    other = write_sweep(root / "private", "mine", {f"leak={PRIVATE}": curves(0.9, 20, n=1)})
    (run,) = (other / "runs").iterdir()
    for f in run.iterdir():
        f.chmod(0o600)
    return run


def private_run_json(root: Path) -> Path:
    victim = root / "secret.json"
    victim.write_text(f'{{"label": "leak={PRIVATE},seed=0", "status": "done", "run_id": "{PRIVATE}"}}\n')
    victim.chmod(0o600)
    return victim


def plant(kind: str, root: Path) -> tuple[Path, Path]:
    """A sweep with the link `kind` planted in it: (the sweep, the link)."""
    sweep = sweep_of(root)
    runs = sweep / "runs"
    if kind == "run":  # (a) runs/<id> -> a run directory elsewhere
        link = runs / "zzplanted"
        link.symlink_to(foreign_run(root), target_is_directory=True)
    elif kind == "run.json":  # (b) a run's run.json -> a private file
        link = sorted(runs.iterdir())[0] / "run.json"
        link.unlink()
        link.symlink_to(private_run_json(root))
    else:  # (c) runs -> a folder of run directories elsewhere
        elsewhere = root / "elsewhere"
        runs.rename(elsewhere)
        (elsewhere / "zzplanted").mkdir()
        for f in foreign_run(root).iterdir():
            f.rename(elsewhere / "zzplanted" / f.name)
        link = runs
        link.symlink_to(elsewhere, target_is_directory=True)
    return sweep, link


def with_ledger(sweep: Path) -> None:
    """The ledger of the sweep's own runs (a planted one is not in it), all done."""
    led, evs = Ledger(sweep), []
    for p in sorted(os.scandir(fs.check_no_links(sweep / "runs", sweep)), key=lambda e: e.name):
        if p.is_symlink() or p.name == "zzplanted":
            continue
        rd = RunDir(p.path)
        label = rd.info().label or p.name
        evs += [
            {"event": "submitting", "run_id": p.name, "batch": "b", "label": label, "executor": "local"},
            {"event": "finished", "run_id": p.name, "batch": "b", "status": "done"},
        ]
    led.append(*evs)


def refused(res, link: Path) -> str:
    """One `error[file]:` line on stderr (besides report's steps), exit 2, naming the link; nothing of its target in
    any output."""
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    lines = [line for line in res.stderr.strip().splitlines() if not line.startswith("report: ")]
    assert len(lines) == 1, res.stderr
    assert error_kind(lines[0]) is ErrorKind.FILE and str(link) in lines[0], lines[0]
    assert "symbolic link" in lines[0], lines[0]  # tells it from a refusal of what the link points to
    assert PRIVATE not in res.stdout and PRIVATE not in res.stderr
    return lines[0]


COMMANDS = {
    "rank": lambda s: ["rank", str(s), *N_BOOT],
    "fit": lambda s: ["fit", str(s), *N_BOOT],
    "extrapolate": lambda s: ["extrapolate", str(s), *N_BOOT],
    "report": lambda s: ["report", str(s), "--no-plan", *N_BOOT, "--out", str(s.parent / "page.html")],
}


@pytest.mark.parametrize("kind", ["run", "run.json", "runs"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_reader_refuses_a_planted_link_in_one_line(tmp_path, command, kind):
    sweep, link = plant(kind, tmp_path)
    refused(runner.invoke(app, COMMANDS[command](sweep)), link)
    assert not (tmp_path / "page.html").exists()  # nothing half-written either


@pytest.mark.parametrize("kind", ["run", "run.json"])
def test_a_report_of_a_sweep_with_a_ledger_refuses_a_planted_link(tmp_path, kind):
    sweep, link = plant(kind, tmp_path)
    with_ledger(sweep)
    refused(runner.invoke(app, COMMANDS["report"](sweep)), link)
    assert not (tmp_path / "page.html").exists()


@pytest.mark.parametrize("name", ["run.json", "metrics.jsonl", "config.yaml"])
def test_a_run_directory_given_directly_with_a_linked_file_is_refused(tmp_path, name):
    sweep = sweep_of(tmp_path)
    run = sorted((sweep / "runs").iterdir())[0]
    link = run / name
    if link.exists():
        victim = tmp_path / f"victim-{name}"
        link.rename(victim)
    else:
        victim = private_run_json(tmp_path)
    link.symlink_to(victim)
    refused(runner.invoke(app, ["fit", str(run), *N_BOOT]), link)


def test_the_walk_refuses_in_name_order_and_leaves_wandbs_own_link(tmp_path):
    """sweep_run_dirs: run directories below the sweep (their `top`), files of runs/ left out; W&B's
    `wandb/latest-run` link inside a run is its own and not refused; the library readers refuse what the CLI does."""
    from ablate.curves.inputs import curves_from_sweep, recorded_devices
    from ablate.prune.outlook import run_ends
    from ablate.storage.rundir import sweep_run_dirs

    sweep = sweep_of(tmp_path)
    first = sorted((sweep / "runs").iterdir())[0]
    (first / "wandb" / "run-1").mkdir(parents=True)
    (first / "wandb" / "latest-run").symlink_to("run-1", target_is_directory=True)
    (sweep / "runs" / "notes.txt").write_text("not a run")
    rds = sweep_run_dirs(sweep)
    assert [rd.path.name for rd in rds] == sorted(p.name for p in (sweep / "runs").iterdir() if p.is_dir())
    assert all(rd.top == sweep for rd in rds) and len(rds) == 4
    assert len(curves_from_sweep(sweep)[0]) == 4
    assert sweep_run_dirs(tmp_path / "nothing") == [] and sweep_run_dirs(sweep / "runs" / "notes.txt") == []

    link = sweep / "runs" / "zzplanted"
    link.symlink_to(foreign_run(tmp_path), target_is_directory=True)
    for read in (sweep_run_dirs, curves_from_sweep, lambda s: recorded_devices([s]), lambda s: run_ends(s, [], "x")):
        with pytest.raises(fs.LinkRefused) as e:
            read(sweep)
        assert str(link) in str(e.value)


def test_reports_default_page_is_in_the_current_folder_and_owner_only(tmp_path, monkeypatch):
    """A sweep others can write (mode 0777, as one of another user's may be): the page does not land in it but in
    the current folder, as report-NAME.html, and is 0600 whatever the umask."""
    sweep = sweep_of(tmp_path / "shared")
    sweep.chmod(0o777)
    here = tmp_path / "me"
    here.mkdir()
    monkeypatch.chdir(here)
    old = os.umask(0)
    try:
        res = runner.invoke(app, ["report", str(sweep), "--no-plan", *N_BOOT])
    finally:
        os.umask(old)
    assert res.exit_code == 0, (res.output, res.exception)
    page = here / "report-s.html"
    assert res.stdout.strip().splitlines()[-1] == "report-s.html" and page.is_file()
    assert not any(p.suffix == ".html" for p in sweep.iterdir())
    assert stat.S_IMODE(page.stat().st_mode) == 0o600


def test_the_page_replaces_an_open_file_owner_only_and_never_through_a_link(tmp_path):
    from ablate.report.page import write

    tmp_path.chmod(0o755)  # a folder all may read, as a home directory often is: the page still is not
    out = tmp_path / "page.html"
    out.write_text("old")
    out.chmod(0o644)
    write(out, "<html>new</html>")
    assert out.read_text() == "<html>new</html>" and stat.S_IMODE(out.stat().st_mode) == 0o600
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link.html").symlink_to(victim)
    with pytest.raises(fs.LinkRefused) as e:
        write(tmp_path / "link.html", "<html>x</html>")
    assert str(tmp_path / "link.html") in str(e.value)
    assert victim.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == [
        "link.html",
        "page.html",
        "victim",
    ]


@pytest.mark.parametrize("kind", ["run", "run.json"])
def test_status_refuses_a_planted_link_the_ledger_does_not_name(tmp_path, kind):
    """`status` reads the runs its ledger names; a link planted under another name is refused all the same, as
    every reader of the sweep refuses it."""
    sweep, link = plant(kind, tmp_path)
    with_ledger(sweep)
    res = runner.invoke(app, ["status", sweep.name, "--root", str(sweep.parent)])
    refused(res, link)
