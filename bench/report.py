"""Benchmark: `ablate report`'s page for a demo-shaped sweep (two arms, three seeds; tests/test_report_browser.py
writes it), its size and its load time in headless Chromium until every figure is drawn (body.dataset.ready),
against a peer measured in the same run: a page holding only plotly.js inline and one empty plot, the least any
self-contained Plotly page costs. Prints both and their ratio; writes bench/out/report.json.

    .venv/bin/python bench/report.py [--loads 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_report_browser import ROOT, SYSTEM_CHROMIUM, demo_sweep

READY_AT = """new MutationObserver((changes, observer) => {
    if (document.body && document.body.dataset.ready === "1") {
        window.readyAt = performance.now();
        observer.disconnect();
    }
}).observe(document, {attributes: true, subtree: true, attributeFilter: ["data-ready"]});"""
"""Injected before the page's own scripts: the moment body.dataset.ready turns "1", in ms since navigation began."""


def peer_page(path: Path) -> Path:
    """The peer: plotly.js inline, as the report holds it, and one empty plot that sets body.dataset.ready."""
    from plotly.offline import get_plotlyjs

    path.write_text(
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>peer</title>'
        f'<script>{get_plotlyjs()}</script></head>\n<body><div id="plot"></div><script>'
        'Plotly.newPlot("plot", [], {}).then(function () { document.body.dataset.ready = "1"; });'
        "</script></body></html>\n",
        encoding="utf-8",
    )
    return path


def load_ms(browser: Any, page_file: Path) -> float:
    """One cold load of `page_file` in a fresh context, every request refused: ms from navigation to ready."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        url = page_file.resolve().as_uri()
        page.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
        page.add_init_script(READY_AT)
        page.goto(url)
        page.wait_for_function("window.readyAt !== undefined")
        return float(page.evaluate("window.readyAt"))
    finally:
        context.close()


def measure(pages: dict[str, Path], loads: int) -> dict[str, list[float]]:
    """`loads` load times of each page, taken in turns so that both see the same machine."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or SYSTEM_CHROMIUM
    if not Path(chromium).is_file():
        raise SystemExit("bench/report.py: no chromium on this machine: run `make browser-setup`")
    times: dict[str, list[float]] = {name: [] for name in pages}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            for _ in range(loads):
                for name, page_file in pages.items():
                    times[name].append(load_ms(browser, page_file))
        finally:
            browser.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=5, help="loads of each page; the median is reported")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sweep = demo_sweep(Path(tmp))
        report = Path(tmp) / "report.html"
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "ablate", "report", str(sweep), "--out", str(report)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        written_s = time.perf_counter() - t0
        pages = {"report": report, "peer": peer_page(Path(tmp) / "peer.html")}
        size = {name: f.stat().st_size for name, f in pages.items()}
        times = measure(pages, args.loads)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"demo-shaped sweep (2 arms x 3 seeds): `ablate report` wrote the page in {written_s:.1f} s")
    print(
        f"size: report {size['report']:,} bytes, peer (plotly.js + one empty plot) {size['peer']:,} bytes, "
        f"ratio {size['report'] / size['peer']:.3f}"
    )
    print(
        f"load to body.dataset.ready, median of {args.loads}: report {median['report']:.0f} ms, peer "
        f"{median['peer']:.0f} ms, ratio {median['report'] / median['peer']:.2f}"
    )
    out = ROOT / "bench" / "out" / "report.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"bytes": size, "load_ms": times, "median_ms": median, "written_s": written_s}) + "\n")
    print(f"written: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
