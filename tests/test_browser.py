"""The report in a real browser: Debian's headless chromium (``make browser`` installs it).

Chromium loads the page from file:// behind a proxy on a dead port, with a net log. The test
reads the DOM after a virtual-time budget: every chart's <div> must say it rendered and hold SVG
marks, the page's error trap must have caught nothing, the console must be clean, and the net
log must show no request made by the page (the browser's own update pings are ignored).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pipeline.report import build_report
from tests.fixtures.report_data import Spec, make_warehouse

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip(
        "chromium is not installed (`make browser` or `apt-get install -y chromium`)",
        allow_module_level=True,
    )

# Hosts chromium itself talks to (component updates, time, accounts); never the page's.
BROWSER_HOSTS = re.compile(
    r"^https?://([^/]*\.)?(google\.com|googleapis\.com|gvt1\.com|gstatic\.com)(:\d+)?/"
)


def open_in_chromium(page: Path, tmp: Path) -> tuple[str, str, list[str]]:
    """DOM after rendering, stderr, and the http(s) URLs the page requested."""
    netlog = tmp / "netlog.json"
    cmd = [
        CHROMIUM,
        "--headless=new",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--proxy-server=127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>",
        f"--user-data-dir={tmp / 'profile'}",
        f"--log-net-log={netlog}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=20000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    urls = []
    if netlog.exists():
        text = netlog.read_text(errors="replace")
        if not text.rstrip().endswith("}"):
            text = text.rstrip().rstrip(",") + "]}"  # a net log cut short by exit
        try:
            events = json.loads(text).get("events", [])
        except ValueError:
            events = []
            urls = re.findall(r'"url":"(https?://[^"]*)"', text)
        for e in events:
            url = (e.get("params") or {}).get("url", "")
            if url.startswith(("http://", "https://")):
                urls.append(url)
    page_urls = sorted({u for u in urls if not BROWSER_HOSTS.match(u)})
    return res.stdout, res.stderr, page_urls


class Dom(HTMLParser):
    """Start tags outside <script>/<style>, with their attributes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def charts(self) -> dict[str, dict]:
        return {
            a["id"]: a
            for t, a in self.tags
            if t == "div" and (a.get("id") or "").startswith("chart-")
        }


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    layout = make_warehouse(root / "wh", root / "logs", [Spec(n=1200, seed=7)], odd=True)
    result = build_report(layout, root / "reports")
    dom, stderr, urls = open_in_chromium(result.path, root)
    return result, dom, stderr, urls


def test_every_chart_rendered_with_marks(rendered):
    result, dom, _, _ = rendered
    charts = Dom(dom).charts()
    assert len(charts) == result.summary["charts"] == 10  # 4 + 5 CDFs + over time
    assert {c: a.get("data-rendered") for c, a in charts.items()} == dict.fromkeys(charts, "ok")
    marks = {c: int(a["data-marks"]) for c, a in charts.items()}
    assert all(n > 0 for n in marks.values()), marks
    assert len(re.findall(r"<svg\b", dom)) >= 4
    # the marks are really in the DOM, not just counted by the page's own script
    assert len(re.findall(r'role="graphics-symbol"', dom)) >= sum(marks.values()) // 2
    assert 'data-charts-done="10"' in dom and 'data-charts-failed="0"' in dom


def test_no_script_errors_and_clean_console(rendered):
    _, dom, stderr, _ = rendered
    assert 'data-js-errors="0"' in dom
    bad = [
        line
        for line in console_lines(stderr)
        if re.search(r"error|uncaught|refused|violat|failed", line, re.I)
    ]
    assert bad == []


def test_page_makes_no_network_request(rendered):
    *_, urls = rendered
    assert urls == []


def test_net_log_does_see_a_page_that_fetches(tmp_path):
    """Control: the same harness catches a page that loads something from the network."""
    page = tmp_path / "fetching.html"
    page.write_text('<html><body><img src="http://example.com/pixel.png"></body></html>')
    *_, urls = open_in_chromium(page, tmp_path)
    assert urls == ["http://example.com/pixel.png"]


def test_model_name_with_markup_is_shown_as_text(rendered):
    _, dom, _, _ = rendered
    assert [t for t, _ in Dom(dom).tags if t == "img"] == []  # no element made from the name
    assert "onerror=alert(1)&gt;" in dom
    # the name appears as text in the headline tables and in chart legends (SVG <text>)
    assert dom.count("&lt;img src=x onerror=alert(1)&gt;") >= 3
    assert re.search(r"<text[^>]*>&lt;img src=x onerror=alert\(1\)&gt;", dom)


def test_series_menu_renders_beyond_twenty_series(tmp_path):
    """25 deployments: the distributions draw 20 and offer the rest in an 'also show' menu; the
    page still renders every chart with no script error and a clean console."""
    deps = tuple((f"org/model-{k:02d}", "H100-SXM", 6.0e-5, 0.0075, 2.0e-5) for k in range(25))
    layout = make_warehouse(tmp_path / "wh", tmp_path / "logs", [Spec(n=2500, deployments=deps)])
    result = build_report(layout, tmp_path / "reports")
    dom, stderr, _ = open_in_chromium(result.path, tmp_path)
    charts = Dom(dom).charts()
    assert {a.get("data-rendered") for a in charts.values()} == {"ok"}
    assert 'data-charts-failed="0"' in dom and console_lines(stderr) == []
    # One menu per distribution chart (5) and on TTFT-vs-prompt and TPOT-vs-batch, as selects.
    assert dom.count("<select") == 7


def test_over_time_menu_renders_beyond_twenty_runs(tmp_path):
    """25 runs of one deployment: 'over time' draws 20 and offers the next 5 in one 'also show'
    menu shared by its five panels (a top-level parameter of the stacked chart); the page
    renders every chart with no script error and a clean console."""
    from tests.fixtures.report_data import EPOCH

    specs = [Spec(n=40, seed=k, rate=2.0, start=EPOCH + 600 * k) for k in range(25)]
    layout = make_warehouse(tmp_path / "wh", tmp_path / "logs", specs)
    result = build_report(layout, tmp_path / "reports")
    html = result.path.read_text()
    section = html.split('id="over_time"')[1].split("</section>")[0]
    assert "5 smaller run(s) not drawn; the 'also show' menu" in section
    dom, stderr, _ = open_in_chromium(result.path, tmp_path)
    charts = Dom(dom).charts()
    assert {a.get("data-rendered") for a in charts.values()} == {"ok"}
    assert 'data-charts-failed="0"' in dom and console_lines(stderr) == []
    over = dom.split('id="over_time"')[1].split("</section>")[0]
    assert over.count("<select") == 1
