"""`ablate report`'s page in a real browser (issue 29, item 3): a sweep laid out like the demo's is reported, and the
page is opened in headless Chromium (Debian's `chromium`, which `make browser-setup` installs, driven by Playwright)
with every request other than the page's own file refused and recorded. What the page must hold for this test is the
DOM contract of ablate.report (its template); the screenshot goes to test-out/report.png."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.fit.synthetic import synthetic_curve
from ablate.storage import store

sys.path.insert(0, str(Path(__file__).parent / "fit"))
from sweep_writer import write_sweep

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "test-out" / "report.png"
runner = CliRunner()

DEMO_ARMS = {"scalerl": [], "small-policy": ["model.hidden=64", "model.mlp=256"]}
"""recipes/demo.yaml's arms and their overrides; scalerl is the baseline."""
DEMO_SHAPES = {"scalerl": dict(a=0.61, b=1.92, c_mid=0.0079), "small-policy": dict(a=0.55, b=1.6, c_mid=0.012)}
"""Curves on a CPU run's clock (tests/test_defaults.py's CPU_SHAPE): a twentieth of a GPU-hour in all, the smaller
policy learning less, as the demo measures."""
N_BOOT = "200"
SYSTEM_CHROMIUM = "/usr/bin/chromium"
"""Where Debian's chromium package puts the browser (mk/browser.mk)."""


def demo_sweep(root: Path) -> Path:
    """The demo's sweep as `ablate sweep recipes/demo.yaml` leaves it: two arms, three seeds each, run on CPU (so
    --x auto picks samples)."""
    arms = {
        arm: [synthetic_curve(**shape, c_max=0.05, n_points=50, seed=10 * i + s) for s in range(3)]
        for i, (arm, shape) in enumerate(DEMO_SHAPES.items())
    }
    sweep = write_sweep(root, "demo", arms, baseline="scalerl")
    for run in sorted((sweep / "runs").iterdir()):
        arm = store.read_json(run / "run.json")["label"].split(",")[0]
        store.update_json(run / "run.json", device="cpu", overrides=DEMO_ARMS[arm])
    return sweep


def chromium() -> str:
    """The system Chromium; missing, the test fails (never skips) and says how to install it."""
    path = shutil.which("chromium") or SYSTEM_CHROMIUM
    if not Path(path).is_file():
        pytest.fail("no chromium on this machine: run `make browser-setup` (apt-get installs Debian's chromium)")
    return path


PLOTS_JS = """() => Array.from(document.querySelectorAll(".plot")).map(gd => ({
    id: gd.id,
    svg: gd.querySelectorAll(".main-svg").length,
    data: (gd.data || []).length,
    traces: gd.querySelectorAll(".scatterlayer .trace").length,
    marks: Array.from(gd.querySelectorAll(".scatterlayer .trace path, .scatterlayer .trace .point"))
        .filter(m => (m.getAttribute("d") || "").length > 1).length,
}))"""
"""Each figure's div as drawn: its svg, the traces Plotly holds (gd.data) and those it drew with a visible mark."""
GROUPS_JS = """() => document.getElementById("plot-fits").data.map(t => ({
    group: t.legendgroup, legend: t.showlegend !== false, visible: t.visible === undefined ? true : t.visible,
}))"""
"""Every trace of the fits' figure: its arm (legendgroup), whether the legend shows it, whether it is drawn."""


def open_report(page_file: Path, arm: str) -> dict[str, Any]:
    """Open the page, wait until every figure is drawn (body.dataset.ready), screenshot it, then click `arm` in the
    fits' legend. Returns what was seen: refused requests, console and page errors, the plots, the verdict table's
    rows and the fits' traces before and after the click."""
    from playwright.sync_api import sync_playwright

    url = page_file.resolve().as_uri()
    seen: dict[str, Any] = {"requests": [], "errors": []}

    def refuse(route: Any) -> None:
        route.continue_() if route.request.url == url else route.abort()

    def record(request: Any) -> None:  # a data: URL is the page's own bytes, not a request to anywhere
        if request.url != url and not request.url.startswith("data:"):
            seen["requests"].append(request.url)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("**/*", refuse)
            page.on("request", record)
            page.on("console", lambda m: m.type == "error" and seen["errors"].append(f"console: {m.text}"))
            page.on("pageerror", lambda e: seen["errors"].append(f"page error: {e}"))
            page.goto(url)
            page.wait_for_function("document.body.dataset.ready === '1'")
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
            seen["plots"] = page.evaluate(PLOTS_JS)
            seen["verdicts"] = page.evaluate(
                """() => Array.from(document.querySelectorAll("#verdicts tr[data-arm]"))
                    .map(tr => [tr.dataset.arm, tr.querySelector("td.verdict").textContent.trim()])"""
            )
            seen["before"] = page.evaluate(GROUPS_JS)
            page.locator("#plot-fits .legend .traces", has_text=arm).click()
            page.wait_for_function(  # Plotly acts on a legend click once the double-click delay has passed
                """arm => document.getElementById("plot-fits").data
                    .some(t => t.legendgroup === arm && t.visible === "legendonly")""",
                arg=arm,
            )
            seen["after"] = page.evaluate(GROUPS_JS)
        finally:
            browser.close()
    return seen


def test_the_report_opens_offline_draws_every_figure_and_toggles_an_arm(tmp_path):
    sweep = demo_sweep(tmp_path)
    page_file = tmp_path / "report.html"
    res = runner.invoke(app, ["report", str(sweep), "--out", str(page_file), "--n-boot", N_BOOT])
    assert res.exit_code == 0, (res.output, res.exception)
    assert res.stdout.strip() == str(page_file) and page_file.is_file()
    ranked = runner.invoke(app, ["rank", str(sweep), "--n-boot", N_BOOT, "--json"])
    assert ranked.exit_code == 0, ranked.output
    verdicts = {a["arm"]: a["verdict"] for a in json.loads(ranked.stdout)["arms"]}
    assert set(verdicts) == set(DEMO_ARMS)

    seen = open_report(page_file, "small-policy")

    assert seen["errors"] == [] and seen["requests"] == [], seen
    assert SCREENSHOT.stat().st_size > 0
    plots = {p["id"]: p for p in seen["plots"]}
    assert set(plots) == {"plot-fits", "plot-efficiency", "plot-extrapolation"}, plots
    for p in plots.values():
        assert p["svg"] > 0 and p["data"] > 0 and p["traces"] > 0 and p["marks"] > 0, p
    assert dict(seen["verdicts"]) == verdicts and len(seen["verdicts"]) == len(verdicts)
    before, after = seen["before"], seen["after"]
    assert {t["group"] for t in before} == set(DEMO_ARMS) and all(t["visible"] is True for t in before)
    assert sorted(t["group"] for t in before if t["legend"]) == sorted(DEMO_ARMS)  # one legend entry an arm
    hidden = [t for t in after if t["group"] == "small-policy"]
    assert len(hidden) > 1 and all(t["visible"] == "legendonly" for t in hidden), after
    assert all(t["visible"] is True for t in after if t["group"] != "small-policy"), after


def test_without_chromium_the_test_fails_naming_the_setup(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys.modules[__name__], "SYSTEM_CHROMIUM", str(tmp_path / "chromium"))
    with pytest.raises(pytest.fail.Exception, match="run `make browser-setup`"):
        chromium()
