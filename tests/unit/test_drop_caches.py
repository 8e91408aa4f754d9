"""The drop-caches fault: refused by name before the run where /proc/sys/vm/drop_caches is not writable (it
could never act), and a real eviction of the page cache where it is (the local backend as root), seen by
the page cache shrinking."""

import os
import subprocess

import pytest

from kafkaesque_harness.clusters.base import proc_sys_refusal
from kafkaesque_harness.clusters.remote import LocalRemote, RemoteResult
from kafkaesque_harness.history import INVOKE, Op
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.faults import DROP_CACHES
from kafkaesque_harness.nemesis.registry import make_nemesis
from tests.unit.fakes import fault_actions

BROKERS = ["broker-1", "broker-2"]


class ReadOnlyProcSys:
    """A node whose /proc/sys is read-only, as in a container: every `test -w` fails."""

    name = "docker"

    def __init__(self):
        self.commands = []

    def run(self, argv, timeout=30.0, check=False):
        self.commands.append(argv)
        return RemoteResult(1, "", "")


class Nodes:
    """Brokers on one Remote that declare PageCacheDrop as the docker and local backends do: they ask a
    broker's node, and a container's answer says why."""

    capabilities = None

    def __init__(self, name, remote):
        self.name = name
        self._remote = remote

    def page_cache_unavailable(self):
        return proc_sys_refusal(self, "/proc/sys is read-only in the containers" if self.name == "docker"
                                else "the nodes' user may not write it (run as root)")

    def broker_nodes(self):
        return BROKERS

    def nodes(self):
        return ["controller-0"] + BROKERS

    def remote(self, node):
        return self._remote


def _op(f):
    return Op(INVOKE, f, "nemesis", None)


def test_a_read_only_proc_sys_refuses_the_fault_by_name_and_writes_nothing():
    remote = ReadOnlyProcSys()
    cluster = Nodes("docker", remote)
    nem = make_nemesis(["drop-caches"], {})
    with pytest.raises(NemesisRefused, match=f"the drop-caches fault needs the nodes' page-cache control: {DROP_CACHES} is not writable on "
                                             "broker-1 \\(/proc/sys is read-only in the containers\\); drop "
                                             "drop-caches from --nemesis"):
        nem.setup(cluster, fault_actions(cluster))
    assert remote.commands == [["test", "-w", DROP_CACHES]]  # the probe only, never a write


def _resident_pages(path) -> int:
    # fincore (util-linux) asks mincore(2) how many of the file's pages are in the page cache.
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "PAGES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(DROP_CACHES, os.W_OK),
                    reason="writing /proc/sys/vm/drop_caches needs root and a writable /proc/sys")
def test_as_root_on_the_local_backend_the_page_cache_is_really_dropped(tmp_path):
    f = tmp_path / "segment.log"
    with open(f, "wb") as out:
        out.write(os.urandom(4 << 20))
        out.flush()
        os.fsync(out.fileno())  # clean pages: the only kind drop_caches evicts
    f.read_bytes()
    assert _resident_pages(f) > 0
    cluster = Nodes("local", LocalRemote())
    nem = make_nemesis(["drop-caches"], {"seed": 3})
    nem.setup(cluster, fault_actions(cluster))
    done = nem.invoke(cluster, _op("start-drop-caches"))
    assert done.value["drop-caches"][0] in BROKERS
    assert _resident_pages(f) == 0
    (rec,) = nem.faults.ledger.records()
    before, after = rec.evidence["cached_kib"]
    assert rec.applied and rec.observed and after < before and rec.healed
