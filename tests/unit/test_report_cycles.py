"""The report draws each dependency cycle: its transactions as nodes on a circle, its steps as arrows
labelled with the kind the checker gave, capped for long cycles, every text escaped."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from kafkaesque_harness.checkers.core import run_checkers
from kafkaesque_harness.checkers.elle import ElleListAppendChecker, check_list_append
from kafkaesque_harness.checkers.txn import TxnChecker
from kafkaesque_harness.history import HistoryWriter, Op
from kafkaesque_harness.results.cycle_svg import MAX_DRAWN, cycle_svg
from kafkaesque_harness.results.report import render_report
from tests.unit.test_elle import concurrent, txn
from tests.unit.test_txn_checker import wr_cycle

SVG_NS = "{http://www.w3.org/2000/svg}"
EVIL = "</script><script>alert(1)</script>"


def report_of(tmp_path, results: dict, history: list[Op]) -> Path:
    """The report.html of a run made of `results` and `history` (tests/integration/test_browser.py opens one too)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "test.json").write_text(json.dumps({"name": "cycles", "workload": "txn"}))
    w = HistoryWriter(run / "history.jsonl")
    for op in history:
        w.append(op)
    w.close()
    (run / "results.json").write_text(json.dumps(results, default=str))
    return render_report(run)


def _drawings_by_anomaly(html: str) -> dict[str, list[ET.Element]]:
    """Each anomaly section's heading ("G1c · txn") and its cycle drawings, parsed as XML (so they are well formed)."""
    out = {}
    anomalies = html[html.index('<h2 id="anomalies">'):html.index('<h2 id="faults">')]
    for section in anomalies.split('<div class="anomaly"')[1:]:
        name, checker = re.search(r"<h3>(.*?) <span class=\"muted\">× \d+ · (.*?)</span>", section).groups()
        out[f"{name} · {checker}"] = [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", section, re.S)]
    return out


def _nodes(svg: ET.Element) -> list[str]:
    return [g.find(f"{SVG_NS}text").text for g in svg.iter(f"{SVG_NS}g") if g.get("class") == "txn"]


def _edge_labels(svg: ET.Element) -> list[str]:
    edges = [g for g in svg.iter(f"{SVG_NS}g") if g.get("class") == "edge"]
    return [g.find(f"{SVG_NS}text").text if g.find(f"{SVG_NS}text") is not None else "" for g in edges]


def _chain(n: int) -> list[Op]:
    """A list-append history whose one wr cycle runs through n transactions: each reads the one before's append."""
    return concurrent(*(txn(i, i, [("append", i, 100 + i), ("r", (i - 1) % n, [100 + (i - 1) % n])])
                        for i in range(n)))


def elle_and_txn_cycles() -> tuple[dict, list[Op]]:
    """results.json of a two-transaction wr cycle found by each of the elle and txn checkers, and a history."""
    elle_history = concurrent(txn(0, 0, [("append", "x", 1), ("r", "y", [1])]),
                              txn(1, 1, [("append", "y", 1), ("r", "x", [1])]))
    results = run_checkers([ElleListAppendChecker(["serializable"])], {}, elle_history)
    results["checkers"].update(run_checkers([TxnChecker()], {}, wr_cycle().ops)["checkers"])
    return results, elle_history


def test_the_cycles_of_the_elle_and_txn_checkers_are_drawn_with_their_edge_kinds(tmp_path):
    html = report_of(tmp_path, *elle_and_txn_cycles()).read_text()
    drawings = _drawings_by_anomaly(html)
    for section in ("G1c · elle-list-append", "G1c · txn"):
        (svg,) = drawings[section]
        assert _nodes(svg) == ["T0", "T1"] and _edge_labels(svg) == ["wr", "wr"], section
        assert svg.get("aria-label") == "T0 → T1 → T0"
    # a node's tooltip is its transaction's op; an arrow's, the step in words
    (txn_svg,) = drawings["G1c · txn"]
    titles = [t.text for t in txn_svg.iter(f"{SVG_NS}title")]
    assert "T0 sent 1 to key 0 (offset 0), which T1 polled (wr)" in titles
    assert any(t.startswith("T0: op #2, process 0, ok txn") for t in titles)
    # beside the drawing, the steps one per line
    assert html.count('<ol class="cycle-steps">') == html.count('<div class="cycle-drawing">') >= 2


def test_a_cycle_longer_than_the_cap_is_drawn_capped_with_a_note():
    long_cycle = check_list_append(_chain(20), ["serializable"]).anomalies[0].examples[0]
    assert len(long_cycle["cycle"]) == 21
    svg = ET.fromstring(cycle_svg(long_cycle))
    nodes = _nodes(svg)
    assert len(nodes) == MAX_DRAWN and nodes[-1] == "+9 more" and nodes[:2] == ["T0", "T1"]
    assert _edge_labels(svg) == ["wr"] * MAX_DRAWN
    note = "".join(next(t for t in svg.iter(f"{SVG_NS}text") if t.get("class") == "cycle-note").itertext())
    assert note.startswith("A cycle of 20 transactions: the first 11 are drawn")
    # at the cap, every transaction is drawn and nothing is said
    at_cap = ET.fromstring(cycle_svg(check_list_append(_chain(MAX_DRAWN), ["serializable"]).anomalies[0].examples[0]))
    assert len(_nodes(at_cap)) == MAX_DRAWN and "+" not in "".join(_nodes(at_cap))
    assert not [t for t in at_cap.iter(f"{SVG_NS}text") if t.get("class") == "cycle-note"]


def test_hostile_text_in_a_cycle_is_escaped(tmp_path):
    a, b = EVIL, "it's \"quoted\" & <b>"
    example = {"summary": "a cycle", "cycle": [a, b, a], "edges": [[a, b, EVIL], [b, a, "wr"]],
               "steps": [f"T{a} {EVIL} T{b}", f"T{b} wr T{a}: '\"<"],
               "ops": [{"index": 1, "time": 0, "process": 0, "type": "ok", "f": "txn", "value": [EVIL]}]}
    results = {"valid": False, "checkers": {"elle-list-append": {"valid": False, "anomalies": [
        {"name": "G1c", "count": 1, "explanation": "", "examples": [example]}]}}}
    html = report_of(tmp_path, results, []).read_text()
    assert "<script>alert(1)" not in html
    (svg,) = _drawings_by_anomaly(html)["G1c · elle-list-append"]  # and it parses: the escaping kept it well formed
    assert _nodes(svg) == [f"T{a}"[:15] + "…", f"T{b}"[:15] + "…"]  # cut to fit; the tooltips keep them whole
    assert {f"T{a}", f"T{b}"} <= {t.text.split(":")[0] for t in svg.iter(f"{SVG_NS}title")}
    assert _edge_labels(svg)[1] == "wr" and _edge_labels(svg)[0].startswith("</script>")  # shown as text
    drawing = html[html.index('<div class="cycle-drawing">'):]
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in drawing and "&quot;quoted&quot; &amp; &lt;b&gt;" in drawing


def test_an_example_without_edges_draws_its_cycle_without_guessing_the_kinds():
    svg = ET.fromstring(cycle_svg({"cycle": [3, 5, 8, 3]}))
    assert _nodes(svg) == ["T3", "T5", "T8"] and _edge_labels(svg) == ["", "", ""]


def test_an_example_without_a_cycle_gets_no_drawing():
    assert cycle_svg({"summary": "lost", "op": {}}) is None
    assert cycle_svg({"cycle": [4, 4]}) is None
