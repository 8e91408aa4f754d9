"""The HTML reports in a real browser: headless Chromium (Debian's `chromium`) over the DevTools Protocol.

One real campaign of one failing run (the unclean-election broker under its scenario: lost
acknowledged writes, about 80 s on the local cluster) gives both pages: the run's
report.html and the campaign's index.html. Each must load with no JavaScript error (uncaught
exceptions, console.error, the browser's own error log) and no request off the machine; the
report's four plots must have been drawn by plotly (its SVG inside each plot div) and its
anomaly sections and first-screen summary must be there. A report with dependency cycles (two
small checked histories, no campaign) must draw them without error. A negative test breaks a copy
of the report on purpose and checks that the checker says so.

Screenshots (the first 1280x900 screen and the whole page) are kept under $KAFKAESQUE_ARTIFACTS
(default: pytest's tmp dir) and their paths printed. Chromium missing is a failure, not a skip:
CI installs it through scripts/install-system-packages.sh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cdp import Browser, ChromiumMissing, PageReport

pytestmark = pytest.mark.integration

PLOTS = ("latency", "throughput", "offsets", "timeline")

# One cell: the broker with the historic unclean-election flaw, under the scenario that makes an
# unclean election happen while the workload runs. It loses acknowledged writes (README).
CAMPAIGN = """
[campaign]
name = "browser"
budget = 900
seed = 41
time_limit = 45
nemesis_interval = 5
workloads = ["queue"]
nemeses = ["scenario:unclean-election"]
broker_variants = ["unclean-election"]
"""

# True once plotly has drawn every plot div (its SVG is there) or written "(no data ...)" into it.
PLOTS_DRAWN_JS = ("[...document.querySelectorAll('div.plot')].every("
                  "d => d.querySelector('svg.main-svg') || d.textContent.startsWith('(no data'))")

# Per plot div: plotly's SVG layers, its SVG traces (scatter, bar) and its WebGL canvases (scattergl).
PLOT_STATE_JS = """JSON.stringify(Object.fromEntries([...document.querySelectorAll('div.plot')].map(d => [
  d.id, {svg: d.querySelectorAll('svg.main-svg').length, traces: d.querySelectorAll('g.trace').length,
         canvas: d.querySelectorAll('canvas').length, rendered: d.dataset.rendered || ''}])))"""


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    d = os.environ.get("KAFKAESQUE_ARTIFACTS")
    out = Path(d) / "browser" if d else tmp_path_factory.mktemp("browser-artifacts")
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def browser():
    missing = ""
    try:
        b = Browser(width=1280, height=900)
    except ChromiumMissing as e:
        missing = str(e)
    if missing:
        pytest.fail(missing, pytrace=False)  # a failure, not a skip: CI must have a browser
    with b:
        yield b


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> tuple[Path, Path]:
    """Run the one-cell campaign for real; return (campaign dir, the failing run's dir)."""
    tmp = tmp_path_factory.mktemp("browser-campaign")
    f = tmp / "browser.toml"
    f.write_text(CAMPAIGN)
    r = subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", "campaign", str(f), "--cluster", "local",
                        "--store", str(tmp / "store"), "--no-panel"],
                       capture_output=True, text=True, timeout=600)
    assert r.stdout.strip(), r.stderr[-3000:]
    campaign_dir = Path(r.stdout.strip().splitlines()[-1])
    doc = json.loads((campaign_dir / "campaign.json").read_text())
    (run,) = doc["runs"]
    # Exit status 1 and an invalid run: the scenario did lose acknowledged writes, so the report
    # below has anomaly sections and a lost-write table to show.
    assert (r.returncode, run["status"]) == (1, "invalid"), \
        f"{run['status']}: {run.get('error')}\n{r.stderr[-3000:]}"
    assert "lost-write" in {a["name"] for a in run["anomalies"]}, run["anomalies"]
    return campaign_dir, Path(run["run_dir"])


def _screenshots(browser: Browser, artifacts: Path, name: str) -> list[Path]:
    shots = [browser.screenshot(artifacts / f"{name}-first-screen.png"),
             browser.screenshot(artifacts / f"{name}-full.png", full_page=True)]
    for p in shots:
        print(f"screenshot: {p}")
    return shots


def _assert_clean(page: PageReport) -> None:
    assert page.errors == [], f"JavaScript errors on {page.url}:\n" + "\n".join(page.errors)
    assert page.remote_requests == [], f"{page.url} fetched from elsewhere: {page.remote_requests}"


def test_failing_run_report_draws_its_plots_without_errors(browser, campaign, artifacts):
    _, run_dir = campaign
    page = browser.open(run_dir / "report.html", ready=PLOTS_DRAWN_JS)
    _screenshots(browser, artifacts, "report")
    _assert_clean(page)
    state = json.loads(browser.evaluate(PLOT_STATE_JS))
    assert sorted(state) == sorted(f"plot-{p}" for p in PLOTS), state
    for plot, s in state.items():
        assert s["svg"] > 0 and s["rendered"] == "1" and s["traces"] + s["canvas"] > 0, f"{plot} was not drawn: {s}"
    # Every plot's title and both axis titles drawn (plotly.js 3 ignores a title given as a bare string).
    titles = json.loads(browser.evaluate(
        "JSON.stringify([...document.querySelectorAll('div.plot')].map(d => [d.id, "
        "[...d.querySelectorAll('.gtitle, .g-xtitle, .g-ytitle')].map(t => t.textContent)]))"))
    for plot, texts in titles:
        assert len([t for t in texts if t.strip()]) == 3, f"{plot} lacks a title or an axis title: {texts}"
    # the verdict, the first-screen summary, and the detailed anomaly sections
    assert browser.evaluate("document.getElementById('verdict').textContent.trim()") == "INVALID"
    lines = browser.evaluate("[...document.querySelectorAll('#summary-lines li b')].map(b => b.textContent)")
    assert any(t.startswith("lost-write ×") for t in lines), lines
    rows = browser.evaluate("document.querySelectorAll('#lost-writes-table tr').length")
    assert rows >= 2, "no lost write listed on the first screen"
    sections = browser.evaluate("[...document.querySelectorAll('#anomalies ~ .anomaly h3')].map(h => h.textContent)")
    assert sections and sections[0].startswith("lost-write"), sections
    # the lost-write table ends within the first screen (900 px), where a reader sees it
    bottom = browser.evaluate("document.getElementById('lost-writes-table').getBoundingClientRect().bottom")
    assert bottom <= 900, f"the lost-write table ends at {bottom} px, below the first screen"
    # the first screen tells the story (issue 39 item 4): the system under test by name, the fault plan in
    # words, availability, and links to each anomaly, the faults, the reached states, the plots and the timeline
    facts = browser.evaluate("document.getElementById('run-facts').innerText")
    assert "System under test: the reference broker (unclean-election)" in facts, facts
    assert "Faults: the scenario unclean-election" in facts and "Availability: client ops succeeded in" in facts, facts
    assert browser.evaluate("document.title").startswith("the reference broker (unclean-election) · queue · INVALID")
    links = browser.evaluate("[...document.querySelectorAll('#jump a')].map(a => a.getAttribute('href'))")
    for target in ("#faults", "#reached", "#plots", "#timeline"):
        assert target in links, links
    anomaly_links = [h for h in links if h.startswith("#anomaly-")]
    assert anomaly_links and all(browser.evaluate(f"!!document.getElementById('{h[1:]}')") for h in anomaly_links)
    assert browser.evaluate("document.getElementById('jump').getBoundingClientRect().bottom") <= 900
    # evidence is text a person reads, not JSON cut off mid-string
    cells = browser.evaluate("[...document.querySelectorAll('#fault-ledger td:nth-child(6)')].map(c => c.innerText)")
    assert cells and not any(c.lstrip().startswith(("{", "yes ({")) for c in cells), cells


# Per cycle drawing: its nodes' labels, its arrows' labels, and whether every node was laid out (a box of some size).
CYCLES_JS = """JSON.stringify([...document.querySelectorAll('svg.cycle')].map(s => ({
  nodes: [...s.querySelectorAll('g.txn text')].map(t => t.textContent),
  edges: [...s.querySelectorAll('g.edge')].map(g => (g.querySelector('text') || {}).textContent || ''),
  laid_out: [...s.querySelectorAll('g.txn ellipse')].every(e => e.getBBox().width > 0)})))"""


def test_a_report_with_dependency_cycles_draws_them_without_errors(browser, artifacts, tmp_path):
    """No campaign: the elle and txn checkers' results on two small histories, each with a wr cycle."""
    from tests.unit.test_report_cycles import elle_and_txn_cycles, report_of

    report = report_of(tmp_path, *elle_and_txn_cycles())
    page = browser.open(report, ready=PLOTS_DRAWN_JS)
    _screenshots(browser, artifacts, "cycles-report")
    _assert_clean(page)
    drawings = json.loads(browser.evaluate(CYCLES_JS))
    assert len(drawings) >= 2, drawings
    for d in drawings:
        assert d["nodes"] == ["T0", "T1"] and d["edges"] == ["wr", "wr"] and d["laid_out"], d


def test_campaign_index_renders_and_links_to_the_report(browser, campaign, artifacts):
    campaign_dir, run_dir = campaign
    page = browser.open(campaign_dir / "index.html", ready="document.getElementById('matrix')")
    _screenshots(browser, artifacts, "campaign-index")
    _assert_clean(page)
    cells = browser.evaluate("[...document.querySelectorAll('#matrix td.cell')].map(c => c.className)")
    assert cells == ["cell s-invalid"], cells
    assert "1 invalid" in browser.evaluate("document.getElementById('counts').textContent")
    # the matrix's link, resolved by the browser, reaches the run's report
    href = browser.evaluate("document.querySelector('#matrix a.rep').href")
    assert href == (run_dir / "report.html").resolve().as_uri(), href
    page = browser.open(run_dir / "report.html", ready=PLOTS_DRAWN_JS)
    _assert_clean(page)


def test_the_checker_catches_a_broken_report(browser, campaign, artifacts, tmp_path):
    """A copy of the real report with a script that throws, a console.error, a remote image, and
    plotly's newPlot stubbed out: each must show up in what the checker reports."""
    _, run_dir = campaign
    html = (run_dir / "report.html").read_text()
    broken = html.replace("const PLOTS =", "Plotly.newPlot = function () {};\n const PLOTS =", 1)
    broken = broken.replace("</body>", '<script>window.kafkaesqueNoSuchFunction();</script>\n'
                            '<script>console.error("deliberate console error");</script>\n'
                            '<img src="http://example.invalid/tracker.png" alt="">\n</body>', 1)
    assert broken.count("kafkaesqueNoSuchFunction") == 1 and "Plotly.newPlot = function" in broken
    copy = tmp_path / "broken-report.html"
    copy.write_text(broken)
    page = browser.open(copy)
    _screenshots(browser, artifacts, "broken-report")
    assert any("uncaught exception" in e and "kafkaesqueNoSuchFunction" in e for e in page.errors), page.errors
    assert any(e == "console.error: deliberate console error" for e in page.errors), page.errors
    assert "http://example.invalid/tracker.png" in page.remote_requests, page.remote_requests
    state = json.loads(browser.evaluate(PLOT_STATE_JS))
    assert all(s["svg"] == 0 for s in state.values()), state
