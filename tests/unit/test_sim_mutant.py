"""clusters/sim/mutant.py: a simulated cluster runs a mutant of the broker, as a real mutant run's nodes do.
The mutant here, controller-metadata-not-fsynced, stops the controller's fsync of its metadata log: a power
cut of the controller then loses metadata the shipped broker keeps."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
from kafkaesque_harness.clusters.sim.mutant import mutant_code
copy = mutant_code(sys.argv[2]) if sys.argv[2] else None
from kafkaesque_harness.clusters.sim.cluster import SimCluster
from kafkaesque_harness.clusters.sim.probe import create_topic
sim = SimCluster(seed=1, run_dir=sys.argv[1])
sim.start_all()
assert sim.wait_ready(30)
sim.run_as(sim.add_client("admin"), create_topic(sim, "t"))
report = sim.power_cut("controller-0")
lines = open(sim.node_dir("controller-0") + "/controller.log").read().splitlines()
code = [json.loads(l) for l in lines if '"node_code"' in l][0]
sim.close()
if copy is not None:
    copy.close()
print(json.dumps({"bytes_lost": report.bytes_lost, "root": code["root"], "digest": code["digest"]}))
"""


def power_cut_controller(tmp_path, mutant: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / (mutant or "shipped")), mutant],
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_mutant_runs_and_loses_the_metadata_the_shipped_controller_keeps(tmp_path):
    shipped = power_cut_controller(tmp_path, "")
    mutant = power_cut_controller(tmp_path, "controller-metadata-not-fsynced")
    assert shipped["bytes_lost"] == 0  # every metadata record was fsynced before it was acted on
    assert mutant["bytes_lost"] > 0
    assert "kafkaesque-code-controller-metadata-not-fsynced" in mutant["root"]
    assert mutant["digest"] != shipped["digest"]
