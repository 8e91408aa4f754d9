"""`kafkaesque campaign` end to end on the local cluster: two real runs, their JUnit verdicts, and an index
page whose links reach the runs' reports."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote

import pytest

pytestmark = pytest.mark.integration

TINY = """
[campaign]
name = "tiny"
budget = 600
seed = 7
time_limit = 8
recovery_wait = 1
concurrency = 4
rate = 40.0
partitions = 2
workloads = ["queue"]
nemeses = [""]
broker_variants = ["default"]
acks = ["all", "1"]
"""


def test_a_two_cell_campaign_runs_both_and_reports_them(tmp_path):
    f = tmp_path / "tiny.toml"
    f.write_text(TINY)
    r = subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", "campaign", str(f), "--cluster", "local",
                        "--store", str(tmp_path / "store"), "--no-panel"],
                       capture_output=True, text=True, timeout=240)
    assert r.stdout.strip(), r.stderr[-3000:]
    campaign_dir = Path(r.stdout.strip().splitlines()[-1])  # the campaign directory is the last line
    assert r.returncode == 0, r.stderr[-3000:] + _run_errors(campaign_dir)
    assert campaign_dir.parent == tmp_path / "store" / "campaigns" / "tiny"

    suite = ET.parse(campaign_dir / "junit.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["queue|none|default|acks=all|flush=never|rep1",
                                              "queue|none|default|acks=1|flush=never|rep1"]
    assert all(c.get("classname") == "tiny" for c in cases)
    # no faults: both verdicts valid, so no <failure>, <error> or <skipped>
    assert [[child.tag for child in c] for c in cases] == [["system-out"], ["system-out"]]
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("0", "0", "0")

    doc = json.loads((campaign_dir / "campaign.json").read_text())
    assert [r["status"] for r in doc["runs"]] == ["valid", "valid"] and doc["exit_code"] == 0
    run_dirs = [Path(r["run_dir"]) for r in doc["runs"]]
    assert {d.parent for d in run_dirs} == {tmp_path / "store" / "tiny"}
    assert [json.loads((d / "test.json").read_text())["acks"] for d in run_dirs] == ["all", "1"]

    html = (campaign_dir / "index.html").read_text()
    matrix = html[html.index('id="matrix"'):html.index('id="runs"')]
    links = [part.split('"')[0] for part in matrix.split('href="')[1:]]
    assert len(links) == 2
    assert sorted((campaign_dir / unquote(link)).resolve() for link in links) == \
        sorted((d / "report.html").resolve() for d in run_dirs)
    assert all((campaign_dir / unquote(link)).is_file() for link in links)


def _run_errors(campaign_dir: Path) -> str:
    """Why runs were not valid, for the assertion message (the tmp store may be gone by the time one looks)."""
    try:
        doc = json.loads((campaign_dir / "campaign.json").read_text())
    except (OSError, ValueError):
        return ""
    out = []
    for r in doc["runs"]:
        out.append(f"\n{r['id']}: {r['status']} {r.get('error') or ''}")
        if r.get("run_dir"):
            res = Path(r["run_dir"]) / "results.json"
            out.append(res.read_text()[:3000] if res.exists() else "(no results.json)")
    return "".join(out)
