"""The views of a campaign, rendered from its campaign.json document: junit.xml for CI and index.html.

junit.xml: one <testcase> per run (classname = the campaign, name = the run's cell id),
<failure> with the anomalies for an invalid run, <error> for an unknown or crashed one,
<skipped> for a run the budget (or a Ctrl-C) left out; and one per required state (the
campaign's `require`), an <error> when no run reached it. Built with ElementTree, so every
value is escaped; characters XML 1.0 cannot carry at all are dropped.

index.html: self-contained (styles inline, no scripts, nothing fetched). The pass/fail
matrix has a row per workload x nemesis and a column per broker variant x acks x flush
policy; a cell is coloured by its worst run and links each repetition to that run's
report.html by a relative path, so a copied or archived store keeps working. Every value
goes through jinja2's autoescape.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2

from kafkaesque_harness.results.store import store_relative, write_atomically, write_json

# Worst first: a cell takes the colour of its worst run.
_SEVERITY = ("invalid", "unknown", "valid", "pending", "skipped")
_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__), "templates")),
                          autoescape=True)


def write_campaign(campaign_dir: str | os.PathLike, doc: dict[str, Any]) -> None:
    """Write campaign.json, junit.xml and index.html into the campaign directory."""
    out = Path(campaign_dir)
    write_json(out / "campaign.json", doc)
    write_atomically(out / "junit.xml", junit_xml(doc))
    write_atomically(out / "index.html", render_index(doc, out))


# --- junit.xml ---------------------------------------------------------------------------------

def junit_xml(doc: dict[str, Any]) -> str:
    runs = doc["runs"]
    required = doc.get("requirements") or []
    totals = {"tests": str(len(runs) + len(required)),
              "failures": str(sum(r["status"] == "invalid" for r in runs)),
              "errors": str(sum(r["status"] == "unknown" for r in runs) + sum(not q["met"] for q in required)),
              "skipped": str(sum(r["status"] in ("skipped", "pending") for r in runs)),
              "time": f"{doc.get('duration_s', 0):.3f}"}
    suites = ET.Element("testsuites", name=_x(doc["name"]), **totals)
    suite = ET.SubElement(suites, "testsuite", name=_x(doc["name"]), timestamp=_x(doc.get("started", "")), **totals)
    props = ET.SubElement(suite, "properties")
    for key in ("source", "cluster", "store"):
        ET.SubElement(props, "property", name=key, value=_x(_by_name(doc.get(key, ""))))
    for r in runs:
        case = ET.SubElement(suite, "testcase", classname=_x(doc["name"]), name=_x(r["id"]),
                             time=f"{r.get('duration_s') or 0:.3f}")
        status = r["status"]
        if status == "invalid":
            names = ", ".join(f"{a['name']} x{a['count']}" for a in r["anomalies"]) or "invalid history"
            el = ET.SubElement(case, "failure", type="invalid", message=_x(f"invalid: {names}"))
            el.text = _x(anomalies_text(r))
        elif status == "unknown":
            error = r.get("error") or "the verdict is unknown"
            el = ET.SubElement(case, "error", type="unknown", message=_x(error.splitlines()[0][:500] if error else ""))
            el.text = _x(error)
        elif status == "skipped":
            ET.SubElement(case, "skipped", message=_x(f"skipped: {r.get('skipped')}"))
        elif status == "pending":
            ET.SubElement(case, "skipped", message="pending: the campaign has not reached this run yet")
        out = [f"seed: {r['spec'].get('seed')}"]
        if r.get("run_dir"):
            where = store_relative(r["run_dir"])
            out += [f"run dir: {where} (in the store)", f"report: {where}/report.html"]
        ET.SubElement(case, "system-out").text = _x("\n".join(out))
    for q in doc.get("requirements") or []:  # a required state no run reached fails the campaign (exit 2)
        case = ET.SubElement(suite, "testcase", classname=_x(doc["name"]), name=_x(f"requires {q['state']}"),
                             time="0.000")
        if not q["met"]:
            el = ET.SubElement(case, "error", type="unreached",
                               message=_x(f"no run reached {q['state']}: the campaign did not test it"))
            el.text = _x(f"required state {q['state']} was reached by none of the runs")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def anomalies_text(record: dict[str, Any]) -> str:
    """The anomalies of one run as plain text: name, count, checker, explanation, example summaries."""
    lines = []
    for a in record.get("anomalies", []):
        lines.append(f"{a['name']} x{a['count']} ({a['checker']}){': ' + a['explanation'] if a.get('explanation') else ''}")
        lines += [f"  - {ex}" for ex in a.get("examples", [])]
    if record.get("error"):
        lines.append(f"also: {record['error']}")
    if not lines:
        lines.append("the checkers found the history invalid; see the run's report")
    if record.get("run_dir"):
        lines.append(f"report: {store_relative(record['run_dir'])}/report.html (in the store)")
    return "\n".join(lines)


def _by_name(path: str) -> str:
    """A file or the store as a campaign's pages name it: as the user gave it when relative, else by its name
    (the pages travel to CI and archives; the absolute paths of the machine that ran it do not)."""
    return Path(path).name if path and os.path.isabs(path) else path


def _x(value: Any) -> str:
    """A string XML 1.0 can hold (ElementTree escapes <, & and quotes; it does not drop control characters)."""
    return _XML_ILLEGAL.sub("", str(value))


# --- index.html ----------------------------------------------------------------------------------

def render_index(doc: dict[str, Any], campaign_dir: str | os.PathLike) -> str:
    """The campaign's index page; links are relative to campaign_dir, where the page is written."""
    by_cell: dict[tuple[str, str], list[dict[str, Any]]] = {}
    runs = []
    for r in doc["runs"]:
        view = {**r, "href": report_link(r.get("run_dir"), campaign_dir),
                "anomaly_names": ", ".join(f"{a['name']} x{a['count']}" for a in r["anomalies"]),
                "title": f"{r['id']}: {r['status']}" + (f" ({r['skipped']})" if r.get("skipped") else "")}
        runs.append(view)
        by_cell.setdefault((r["row"], r["column"]), []).append(view)
    matrix = [{"row": row, "cells": [_cell(by_cell.get((row, col), [])) for col in doc["columns"]]}
              for row in doc["rows"]]
    columns = [col.split("|") for col in doc["columns"]]
    shown = {**doc, "source": _by_name(doc.get("source", "")), "store": _by_name(doc.get("store", ""))}
    return _ENV.get_template("campaign_index.html.j2").render(doc=shown, matrix=matrix, columns=columns, runs=runs)


def _cell(runs: list[dict[str, Any]]) -> dict[str, Any]:
    statuses = [r["status"] for r in runs]
    worst = next((s for s in _SEVERITY if s in statuses), "skipped")
    counts = [f"{statuses.count(s)} {s}" for s in ("valid", "invalid", "unknown", "skipped", "pending")
              if s in statuses]
    return {"status": worst, "counts": " · ".join(counts), "runs": runs}


def report_link(run_dir: str | None, campaign_dir: str | os.PathLike) -> str | None:
    """A relative, URL-quoted link from the campaign directory to a run's report (or its folder)."""
    if not run_dir:
        return None
    target = Path(run_dir) / "report.html"
    if not target.exists():
        target = Path(run_dir)
        if not target.exists():
            return None
    rel = os.path.relpath(os.path.abspath(target), os.path.abspath(campaign_dir))
    return quote(Path(rel).as_posix())
