"""`ablate report` (issue 29, item 2): one self-contained HTML page of a sweep. Checked here without a browser: the
sections, the verdict table against `ablate rank --json`, no network reference, escaping, the DOM contract
(docs/report.md) and the Plotly JSON's legend groups; tests/test_report_browser.py opens the page in Chromium."""

import json
import os
import re
import shlex
import socket
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner

from ablate import __version__
from ablate.cli import app
from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from ablate.fit.synthetic import synthetic_curve
from ablate.storage import store
from ablate.storage.ledger import Ledger

sys.path.insert(0, str(Path(__file__).parent / "fit"))
from sweep_writer import write_sweep

from jobs import TOY_JOB, git, one_error

runner = CliRunner()
N_BOOT = "200"
HOSTILE = "x=<script>alert(1)</script>"
"""An arm label a page must show as text, never run."""
SECTIONS = ("swept", "ranking", "fits", "efficiency", "extrapolation", "decide", "status", "provenance")


def seeds(a: float, c_mid: float, first_seed: int, n: int = 3) -> list:
    return [synthetic_curve(a=a, b=1.9, c_mid=c_mid, c_max=16000, n_points=60, seed=first_seed + s) for s in range(n)]


class Dom(HTMLParser):
    """The parts of the page the DOM contract names: elements by id, the verdict rows, the `missing` notes."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, dict[str, str | None]] = {}
        self.rows: list[str] = []
        self.verdicts: list[str] = []
        self.missing: list[str] = []
        self.stack: list[str] = []
        self.table: str | None = None
        self.capture: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids[a["id"]] = {"tag": tag, **a}
        if tag == "table":
            self.table = a.get("id")
        if self.table == "verdicts" and tag == "tr" and "data-arm" in a:
            self.rows.append(a["data-arm"])
        if self.table == "verdicts" and tag == "td" and a.get("class", "").split()[:1] == ["verdict"]:
            self.capture, self.text = "verdict", ""
        if tag == "p" and "missing" in (a.get("class") or "").split():
            self.capture, self.text = "missing", ""

    def handle_endtag(self, tag):
        if tag == "table":
            self.table = None
        if self.capture == "verdict" and tag == "td":
            self.verdicts.append(self.text.strip())
            self.capture = None
        if self.capture == "missing" and tag == "p":
            self.missing.append(self.text.strip())
            self.capture = None

    def handle_data(self, data):
        if self.capture:
            self.text += data


def dom(page: str) -> Dom:
    d = Dom()
    d.feed(page)
    return d


def plots(page: str) -> dict:
    """The figures' Plotly JSON, by the id of the div each is drawn in."""
    m = re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S)
    assert m, "no figures JSON in the page"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def three_arms(tmp_path_factory):
    """A sweep of three arms of three seeds: the baseline, a lower ceiling, and the baseline's twin named with a
    script tag; reported once, ranked once (`rank --json`)."""
    root = tmp_path_factory.mktemp("report")
    arms = {"loss=cispo": seeds(0.61, 2500, 0), "loss=grpo": seeds(0.52, 2500, 10), HOSTILE: seeds(0.61, 2500, 20)}
    sweep = write_sweep(root, "toy", arms, baseline="loss=cispo")
    out = root / "page" / "toy.html"
    res = runner.invoke(app, ["report", str(sweep), "--out", str(out), "--n-boot", N_BOOT])
    assert res.exit_code == 0, res.output
    ranked = runner.invoke(app, ["rank", str(sweep), "--n-boot", N_BOOT, "--json"])
    assert ranked.exit_code == 0, ranked.output
    return sweep, out, res, json.loads(ranked.stdout)


def test_the_page_has_every_section_and_the_path_is_printed_last(three_arms):
    sweep, out, res, _ = three_arms
    assert res.stdout.strip().splitlines()[-1] == str(out)
    assert "report: ranking 3 arms" in res.stderr  # the steps, on stderr
    page = out.read_text(encoding="utf-8")
    ids = dom(page).ids
    for section in SECTIONS:
        assert ids.get(section, {}).get("tag") == "section", section
    runs = page.split('id="runs"', 1)[1].split("</table>", 1)[0]
    assert runs.count("<tr>") == 1 + 9 and runs.count(">done<") == 9  # the header, then every run
    swept = page.split('id="arms"', 1)[1].split("</table>", 1)[0]
    assert '<tr data-arm="loss=grpo">' in swept and "<code>loss=grpo</code>" in swept  # its change, recorded
    prov = page.split('id="provenance"', 1)[1]
    assert "not recorded" in prov and "UTC" in prov  # written by hand: no launch, no git checkout
    assert "ablate report " + str(sweep) in prov  # the command line that made it


def test_the_status_table_goes_by_arm_then_seed(three_arms):
    _, out, _, ranked = three_arms
    runs = out.read_text(encoding="utf-8").split('id="runs"', 1)[1].split("</table>", 1)[0]
    labels = [re.sub(r"<[^>]+>", "", row.split("</td>", 1)[0]) for row in runs.split("<tr>")[2:]]
    order = [a["arm"] for a in ranked["arms"]]
    expected = [f"{arm},seed={s}" for arm in ["loss=cispo", *(a for a in order if a != "loss=cispo")] for s in range(3)]
    assert [lab.strip().replace("&lt;", "<").replace("&gt;", ">") for lab in labels] == expected


def test_seeds_go_in_numeric_order(tmp_path):
    from ablate.report.data import ReportData
    from ablate.report.page import status_rows
    from ablate.report.runs import run_statuses, swept_arms

    curves = [synthetic_curve(a=0.6, b=1.9, c_mid=2500, n_points=3, seed=s) for s in range(11)]
    sweep = write_sweep(tmp_path, "many", {"b=1": curves, "a=1": curves}, baseline="b=1")
    statuses = run_statuses(sweep)
    arms = swept_arms(sweep, statuses)
    assert [a.label for a in arms] == ["b=1", "a=1"] and arms[0].seeds == [str(s) for s in range(11)]
    data = ReportData(sweep, "many", arms, statuses[::-1], None, "none", None, "none", {}, "", [])
    labels = [r["cells"]["label"] for r in status_rows(data)]
    assert labels == [f"{arm},seed={s}" for arm in ("b=1", "a=1") for s in range(11)]


def test_provenance_outside_a_git_checkout_is_not_recorded(tmp_path, monkeypatch):
    """No launch recorded a commit and the sweep folder is no git checkout: "not recorded", never the commit of the
    working directory (here the ablate repository, an unrelated checkout)."""
    from ablate.report.data import provenance

    monkeypatch.chdir(Path(__file__).parent)
    prov = provenance(tmp_path, [])
    assert prov["commit"] == "not recorded" and prov["ablate"] == __version__
    assert "cores" in prov["machine"]


def test_without_a_recorded_commit_the_sweep_folders_checkout_is_named_as_such(tmp_path):
    from ablate.report.data import Launch, provenance

    git(tmp_path, "init", "-q")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "empty")
    head = git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "sweeps" / "s").mkdir(parents=True)
    old = Launch("2026-01-01 00:00:00 UTC", "ablate sweep s.yaml", str(tmp_path), None, "h", "0.1.0")
    prov = provenance(tmp_path / "sweeps" / "s", [old])
    assert prov["commit"] == f"{head} (the sweep folder's checkout today: no launch recorded one)"


def launches(sweep: Path) -> list[dict]:
    return [e for e in store.read_jsonl(sweep / "ledger.jsonl") if e.get("event") == "launch"]


def test_each_launch_is_recorded_and_the_page_lists_them(tmp_path, monkeypatch):
    """`ablate sweep` records each batch it submits (the command as typed, the recipes' commit, where and when);
    a dry run or a re-run that submits nothing records nothing; fold reads the runs as if the events were not
    there; the page lists every launch, newest last, and the newest commit as the recipes'."""
    proj = tmp_path / "proj"
    proj.mkdir()
    recipe = f"base: {RECIPES_DIR / 'base.yaml'}\nseeds: [0]\ngrid: {{precision: [bf16]}}\n"
    (proj / "mine.yaml").write_text(recipe)
    git(proj, "init", "-q")
    git(proj, "add", "mine.yaml")
    git(proj, "commit", "-qm", "recipes")
    head = git(proj, "rev-parse", "HEAD")
    monkeypatch.chdir(proj)
    args = ["sweep", "mine.yaml", "-e", "debug", "--job", TOY_JOB]

    def sweep(*more: str) -> None:
        monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/ablate", *args, *more])  # as the shell starts it
        res = runner.invoke(app, [*args, *more])
        assert res.exit_code == 0, res.output

    sweep()
    sdir = proj / "sweeps" / "mine"
    (first,) = launches(sdir)
    batches = {e["batch"] for e in store.read_jsonl(sdir / "ledger.jsonl") if e["event"] == "submitting"}
    assert batches == {first["batch"]}
    assert first["command"] == shlex.join(["ablate", *args]) and first["commit"] == head
    assert first["cwd"] == str(proj) and first["host"] == socket.gethostname() and first["ablate"] == __version__
    sweep("--dry-run")
    sweep()  # every run done: nothing submitted
    assert launches(sdir) == [first]
    (proj / "mine.yaml").write_text(recipe + "# tuned\n")
    sweep("--force")
    newest = launches(sdir)[-1]
    assert len(launches(sdir)) == 2 and newest["commit"] == f"{head} + uncommitted changes"
    events = Ledger(sdir).events()
    assert Ledger(sdir).fold(events) == Ledger(sdir).fold([e for e in events if e["event"] != "launch"])

    res = runner.invoke(app, ["report", str(sdir), "--no-plan", "--n-boot", N_BOOT])
    assert res.exit_code == 0, res.output
    prov = (proj / "report-mine.html").read_text(encoding="utf-8").split('id="provenance"', 1)[1]  # in the cwd
    recipes_commit = prov.split("recipes' commit</dt>", 1)[1].split("</dd>", 1)[0]
    assert f"{head} + uncommitted changes" in recipes_commit
    table = prov.split('id="launches"', 1)[1].split("</table>", 1)[0]
    rows = table.split("<tr>")[2:]
    assert len(rows) == 2 and "--force" not in rows[0] and "--force" in rows[1]  # newest last
    assert shlex.join(["ablate", *args]) in rows[0] and head in rows[0] and str(proj) in rows[0]
    assert socket.gethostname() in rows[1] and "uncommitted" in rows[1]


def test_the_verdict_table_is_rank_json(three_arms):
    _, out, _, ranked = three_arms
    d = dom(out.read_text(encoding="utf-8"))
    assert d.rows == [a["arm"] for a in ranked["arms"]]
    assert d.verdicts == [a["verdict"] or "" for a in ranked["arms"]]
    assert "baseline" in d.verdicts and len(set(d.verdicts)) > 1


def test_the_page_needs_no_network_and_inlines_plotly_once(three_arms):
    _, out, _, _ = three_arms
    page = out.read_text(encoding="utf-8")
    js = get_plotlyjs()
    assert page.count(js) == 1
    rest = page.replace(js, "")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", rest, re.I)
    assert not re.search(r"<link\b|@import|url\(", rest, re.I)
    assert "cdn" not in rest.lower()


def test_a_label_with_a_script_tag_is_shown_not_run(three_arms):
    _, out, _, _ = three_arms
    page = out.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page
    assert "x=&lt;script&gt;alert(1)&lt;/script&gt;" in page  # in the tables, as text
    assert HOSTILE in dom(page).rows  # the attribute holds the label itself
    fits = plots(page)["plot-fits"]
    assert any(t.get("legendgroup") == HOSTILE for t in fits["data"])


def test_the_dom_contract(three_arms):
    _, out, _, _ = three_arms
    page = out.read_text(encoding="utf-8")
    d = dom(page)
    for plot in ("plot-fits", "plot-efficiency", "plot-extrapolation"):
        assert d.ids[plot]["tag"] == "div" and d.ids[plot]["class"] == "plot", plot
    assert set(plots(page)) == {"plot-fits", "plot-efficiency", "plot-extrapolation"}
    assert d.ids["verdicts"]["tag"] == "table"
    assert 'document.body.dataset.ready = "1"' in page and "Promise.all" in page


def test_each_arm_is_one_legend_entry_and_one_group(three_arms):
    _, out, _, ranked = three_arms
    arms = [a["arm"] for a in ranked["arms"]]
    traces = plots(out.read_text(encoding="utf-8"))["plot-fits"]["data"]
    assert {t["legendgroup"] for t in traces} == set(arms)  # every trace belongs to an arm
    for arm in arms:
        mine = [t for t in traces if t["legendgroup"] == arm]
        assert sum(t.get("showlegend", True) for t in mine) == 1, arm
        modes = {t["mode"] for t in mine}
        assert {"markers", "lines"} <= modes and any(t.get("fill") == "tonexty" for t in mine), arm  # points, band
        assert any("hovertemplate" in t and t["mode"] == "markers" for t in mine)


def test_the_extrapolation_has_its_held_out_check(three_arms):
    _, out, _, _ = three_arms
    page = out.read_text(encoding="utf-8")
    held = [t for t in plots(page)["plot-extrapolation"]["data"] if t.get("marker", {}).get("symbol") == "diamond-open"]
    assert held and all(x > 8000 - 1e-9 for t in held for x in t["x"])  # after the fit window: half the compute
    assert "Held-out check: on the" in page
    # the page gives the command that reproduces its projection: pasted, it prints the page's R
    import html

    text = re.sub(r"\s+", " ", page)
    command = html.unescape(re.search(r"To reproduce it: <code>(.*?)</code>", text).group(1))
    r = re.search(r"R = ([0-9.]+)", text[text.index('id="extrapolation"') :]).group(1)
    res = CliRunner().invoke(app, shlex.split(command)[1:])
    assert res.exit_code == 0 and r in res.output, (command, r, res.output)


def test_one_arm_still_renders_with_the_comparison_missing(tmp_path, monkeypatch):
    sweep = write_sweep(tmp_path, "one", {"loss=cispo": seeds(0.61, 2500, 0, n=2)}, baseline="loss=cispo")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["report", str(sweep), "--n-boot", N_BOOT])
    assert res.exit_code == 0, res.output
    out = Path("report-one.html")  # the default --out: in the current folder
    assert res.stdout.strip() == str(out)
    d = dom(out.read_text(encoding="utf-8"))
    assert "plot-efficiency" not in d.ids and "plot-fits" in d.ids
    assert any("one arm only" in m for m in d.missing)
    assert d.rows == ["loss=cispo"] and d.verdicts == ["baseline"]


def test_too_few_points_leave_notes_not_a_failure(tmp_path, monkeypatch):
    short = [synthetic_curve(a=0.61, b=1.9, c_mid=2500, n_points=2, seed=s) for s in range(2)]
    sweep = write_sweep(tmp_path, "short", {"loss=cispo": short, "loss=grpo": short}, baseline="loss=cispo")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["report", str(sweep), "--n-boot", N_BOOT])
    assert res.exit_code == 0, res.output
    d = dom((tmp_path / "report-short.html").read_text(encoding="utf-8"))
    assert d.missing and {"plot-fits", "plot-extrapolation"} - set(d.ids)
    assert "status" in d.ids and "provenance" in d.ids


def error_line(res, kind: ErrorKind, *culprits: str) -> str:
    """jobs.one_error on stderr (report writes its steps to stdout)."""
    return one_error(res, kind, *culprits, stream="stderr")


def test_bad_input_is_one_line_naming_it(tmp_path):
    (tmp_path / "empty").mkdir()
    error_line(
        runner.invoke(app, ["report", str(tmp_path / "empty")]), ErrorKind.FILE, str(tmp_path / "empty"), "runs/"
    )
    error_line(
        runner.invoke(app, ["report", str(tmp_path / "gone")]), ErrorKind.FILE, str(tmp_path / "gone"), "sweeps/"
    )
    sweep = write_sweep(tmp_path, "s", {"loss=cispo": seeds(0.61, 2500, 0, n=1)}, baseline="loss=cispo")
    res = runner.invoke(app, ["report", str(sweep), "--out", str(tmp_path)])
    error_line(res, ErrorKind.FILE, f"--out {tmp_path}", str(tmp_path / "report.html"))  # and a file in it
    (tmp_path / "file").write_text("x")
    res = runner.invoke(app, ["report", str(sweep), "--out", str(tmp_path / "file" / "r.html")])
    error_line(res, ErrorKind.FILE, f"--out {tmp_path / 'file' / 'r.html'}")
    error_line(runner.invoke(app, ["report", str(sweep), "--n-boot", "0"]), ErrorKind.SETTING, "--n-boot 0", "200")


def test_the_page_is_never_written_through_a_link(tmp_path):
    sweep = write_sweep(tmp_path, "s", {"loss=cispo": seeds(0.61, 2500, 0, n=1)}, baseline="loss=cispo")
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text("keep")
    os.symlink(elsewhere, tmp_path / "link.html")
    error_line(
        runner.invoke(app, ["report", str(sweep), "--out", str(tmp_path / "link.html"), "--n-boot", N_BOOT]),
        ErrorKind.FILE,
        f"--out {tmp_path / 'link.html'}",
    )
    assert elsewhere.read_text() == "keep"


def test_undecided_arms_say_what_would_decide_them(tmp_path, monkeypatch):
    """An arm whose window has not passed C_mid is not identified: the page says more compute would decide it, and
    shows `ablate plan`'s answer."""
    arms = {"loss=cispo": seeds(0.61, 2500, 0, n=2), "loss=slow": seeds(0.61, 60000, 10, n=2)}
    sweep = write_sweep(tmp_path, "slow", arms, baseline="loss=cispo")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["report", str(sweep), "--n-boot", N_BOOT])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "report-slow.html").read_text(encoding="utf-8")
    assert dom(page).verdicts == ["baseline", "not_identified"]
    decide = page.split('id="decide"', 1)[1].split("</section>", 1)[0]
    assert (
        "loss=slow" in decide
        and "more compute per run would measure it" in decide
        and "larger train.max_steps" in decide
    )
    assert "task model" in decide and "━" not in decide and "│" not in decide  # a table, not terminal text
    plan = decide.split('<table id="plan">', 1)[1].split("</table>", 1)[0]
    assert "<th>seeds per arm</th>" in plan and "what a sweep of 2 arms needs" in plan
    rows = plan.split("<tr")[2:]
    assert rows and all(row.count("<td") == 8 for row in rows)
    assert any("★ cheapest" in row for row in rows) or "no design in the ladder" in decide
    assert "planning what would decide" in res.stderr
