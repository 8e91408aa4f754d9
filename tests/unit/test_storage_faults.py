"""The diskless cluster of issue 43 without a cluster: the cluster file's storage role, the storage faults'
planning and refusals, and each fault's ledger record (applied, observed, healed) over a fake network that
obeys the iptables and tc commands our fault code sends. The real store and brokers are exercised by
tests/integration/test_tansu_s3.py."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.cluster_file import ClusterFileError, load_cluster_file, render_all
from kafkaesque_harness.clusters.external import ExternalCluster
from kafkaesque_harness.clusters.remote import RemoteResult
from kafkaesque_harness.harness.runner import worker_bootstraps
from kafkaesque_harness.history import Op
from kafkaesque_harness.nemesis import actions as actions_module
from kafkaesque_harness.nemesis.base import NemesisRefused
from kafkaesque_harness.nemesis.faults import PartitionNemesis
from kafkaesque_harness.nemesis.grudge import storage_grudge
from kafkaesque_harness.nemesis.registry import make_nemesis
from kafkaesque_harness.nemesis.storage import (
    ClientPartitionNemesis,
    StorageKillNemesis,
    StoragePartitionNemesis,
    StoragePauseNemesis,
    StorageSlowNemesis,
)
from tests.unit.fakes import FakeCluster, FakeNetwork, ProcessStates, fault_actions

EXAMPLES = Path(__file__).resolve().parents[2] / "clusters" / "examples"
BROKERS = ["tansu-1", "tansu-2", "tansu-3"]
CLIENTS = "10.9.0.254"  # where the fake brokers see the harness's clients come from
_TBF = re.compile(r"tc qdisc replace dev (\S+) root tbf rate (\S+)")


class FakeRemote:
    def __init__(self, cluster, node):
        self.cluster, self.node = cluster, node

    def run(self, argv, timeout=30.0, check=False):
        cmd = " ".join(argv)
        qdiscs = self.cluster.qdisc
        if _TBF.search(cmd):
            qdiscs[self.node] = f"qdisc tbf 8001: root refcnt 2 rate {_TBF.search(cmd).group(2)}"
            return RemoteResult(0, "", "")
        if "qdisc del" in cmd:
            qdiscs.pop(self.node, None)
            return RemoteResult(0, "", "")
        if "qdisc show" in cmd:
            return RemoteResult(0, qdiscs.get(self.node, "qdisc noqueue 0: root refcnt 2") + "\n", "")
        return self.cluster.net.run(self.node, argv) or RemoteResult(0, "", "")


class StoreCluster(ProcessStates):
    """A store (s3) and three brokers that share nothing else, as clusters/examples/tansu-s3.toml describes
    them: the abilities ObjectStore, ClientCuts, IsolatedNodes and Pausable."""

    name = "external"
    capabilities = None

    def __init__(self, durable: bool = False, stores: tuple[str, ...] = ("s3",)):
        super().__init__()
        self._stores = list(stores)
        self.durable = durable
        self.net = FakeNetwork(self)
        self.qdisc: dict[str, str] = {}

    def nodes(self):
        return self._stores + BROKERS

    def broker_nodes(self):
        return list(BROKERS)

    def controller_nodes(self):
        return []

    def storage_nodes(self):
        return list(self._stores)

    def store_kill_unavailable(self):
        return None if self.durable else "s3 keeps its objects only in memory"

    def brokers_share_nothing_reason(self):
        return "the brokers share nothing but the object store (s3)" if self._stores else None

    def client_address(self, node):
        return CLIENTS

    def client_cut_unavailable(self):
        return None

    def isolation_unavailable(self):
        return None

    def net_device(self, node):
        return "eth0"

    def address(self, n):
        return (f"10.9.0.{self.nodes().index(n) + 1}", 9000 if n in self._stores else 9092)

    def remote(self, n):
        return FakeRemote(self, n)

    def node_name(self, i):
        return "tansu-1"

    def partitions(self, topic):
        return []

    def is_running(self, n):
        return self.process_state(n) != "down"

    def resume(self, n):
        self._act("resume", n, "running")

    def start(self, n):
        self._act("start", n, "running")


def set_up(nemesis, cluster):
    faults = fault_actions(cluster)
    nemesis.setup(cluster, faults)
    return faults


def clients_cut_from(cluster, node) -> bool:
    return CLIENTS in cluster.net.drops[node]


@pytest.fixture
def harness_probe(monkeypatch):
    """probe_from_harness over the fake network: the harness's connect times out where the broker drops the
    clients' address."""
    monkeypatch.setattr(actions_module, "probe_from_harness",
                        lambda cluster, node: "timeout" if clients_cut_from(cluster, node) else "open")


# --- the cluster file ------------------------------------------------------------------------------------
def test_the_shipped_tansu_s3_file_has_three_brokers_and_a_store_in_memory_that_they_reach_by_address():
    cf = load_cluster_file(str(EXAMPLES / "tansu-s3.toml"))
    store, *brokers = cf.nodes
    assert (store.name, store.roles, store.storage_port, store.durable) == ("s3", ["storage"], 9000, False)
    assert [b.name for b in brokers] == BROKERS and {b.id for b in brokers} == {111}
    for i, n in enumerate(cf.nodes):
        n.host = f"10.9.0.{i + 1}"
    rendered = render_all(cf, brokers[1])
    assert "export AWS_ENDPOINT=http://10.9.0.1:9000" in rendered["config"]  # {{ storage }}: the store's address
    assert "--storage-engine s3://tansu/" in rendered["commands"]["start"]
    assert "head_bucket" in render_all(cf, store)["commands"]["ready"]  # the health check: the bucket exists


@pytest.mark.parametrize("node, says", [
    ('roles = ["storage", "broker"]', "a storage node is the object store alone"),
    ('storage_port = 9000', "which only a node of role storage takes"),
    ('durable = true', "which only a node of role storage takes"),
])
def test_a_storage_node_is_the_store_alone_and_its_keys_belong_to_it_only(tmp_path, node, says):
    text = (EXAMPLES / "tansu-s3.toml").read_text().replace('name = "tansu-3"\nid = 111', f'name = "tansu-3"\nid = 111\n{node}')
    path = tmp_path / "c.toml"
    path.write_text(text)
    (tmp_path / "tansu-s3.env.j2").write_text((EXAMPLES / "tansu-s3.env.j2").read_text())
    with pytest.raises(ClusterFileError, match=says):
        load_cluster_file(str(path))


def external(tmp_path) -> ExternalCluster:
    """The shipped file as an ExternalCluster whose containers are never asked for (addresses fixed)."""
    c = ExternalCluster.from_file(str(EXAMPLES / "tansu-s3.toml"), None, str(tmp_path))
    for i, n in enumerate(c.cf.nodes):
        n.host = f"10.9.0.{i + 1}"
        c.remotes[n.name] = object()
    return c


def test_the_store_is_no_broker_and_is_reached_at_its_own_port(tmp_path):
    c = external(tmp_path)
    assert (c.broker_nodes(), c.storage_nodes(), c.controller_nodes()) == (BROKERS, ["s3"], [])
    assert c.address("s3") == ("10.9.0.1", 9000) and c.address("tansu-2") == ("10.9.0.3", 9092)
    assert c.bootstrap() == "10.9.0.2:9092,10.9.0.3:9092,10.9.0.4:9092"
    assert "keeps its objects only in memory" in c.store_kill_unavailable()
    assert "share nothing but the object store (s3)" in c.brokers_share_nothing_reason()


def test_workers_are_spread_over_brokers_that_share_ids_and_not_otherwise(tmp_path):
    c = external(tmp_path)
    assert worker_bootstraps(c, 4, c.bootstrap()) == ["10.9.0.2:9092", "10.9.0.3:9092", "10.9.0.4:9092",
                                                      "10.9.0.2:9092"]
    plain = FakeCluster()  # declares no SpreadClients: every worker gets the one bootstrap
    assert worker_bootstraps(plain, 3, "b:1") == ["b:1", "b:1", "b:1"]


# --- refusals --------------------------------------------------------------------------------------------
def test_a_partition_between_brokers_that_share_only_the_store_is_refused_by_name():
    with pytest.raises(NemesisRefused, match="cuts brokers apart, and the brokers share nothing but the object "
                                             "store .* use storage-partition"):
        set_up(PartitionNemesis({"seed": 1}), StoreCluster())
    set_up(PartitionNemesis({"seed": 1}), StoreCluster(stores=()))  # brokers that talk: the partition fault runs


def test_killing_a_store_that_keeps_objects_in_memory_is_refused_and_a_durable_one_is_killed_and_restarted():
    with pytest.raises(NemesisRefused, match="storage-kill fault is refused: s3 keeps its objects only in memory"):
        set_up(StorageKillNemesis({}), StoreCluster(durable=False))
    cluster = StoreCluster(durable=True)
    nemesis = StorageKillNemesis({})
    faults = set_up(nemesis, cluster)
    assert nemesis.invoke(cluster, Op("invoke", "start-storage-kill", "nemesis")).value == {"storage-kill": ["s3"]}
    assert cluster.process_state("s3") == "down" and all(cluster.process_state(b) == "running" for b in BROKERS)
    nemesis.invoke(cluster, Op("invoke", "stop-storage-kill", "nemesis"))
    (rec,) = faults.ledger.records()
    assert (rec.fault, rec.nodes, rec.applied, rec.observed, rec.healed) == ("kill", ["s3"], True, True, True)


@pytest.mark.parametrize("nemesis", [StoragePauseNemesis({}), StoragePartitionNemesis({}), StorageSlowNemesis({})],
                         ids=lambda n: n.name)
def test_storage_faults_are_refused_by_name_on_a_cluster_without_a_store(nemesis):
    class Plain(FakeCluster):
        def isolation_unavailable(self):
            return None

        def pause(self, n):
            pass

        def resume(self, n):
            pass

    with pytest.raises(NemesisRefused, match=f"the {nemesis.name} fault acts on the object store .* has no object "
                                             "store of its own"):
        set_up(nemesis, Plain())


def test_cutting_the_clients_off_from_the_only_broker_is_refused():
    class OneBroker(StoreCluster):
        def broker_nodes(self):
            return ["tansu-1"]

    with pytest.raises(NemesisRefused, match="cuts the clients off from one broker, and the external cluster has 1"):
        set_up(ClientPartitionNemesis({}), OneBroker())


def test_every_storage_fault_kind_is_registered_with_its_needs():
    parts = make_nemesis(["storage-pause", "storage-partition", "storage-slow", "client-partition", "storage-kill"],
                         {"seed": 0})
    assert sorted(p.name for p in parts.parts) == ["client-partition", "storage-kill", "storage-partition",
                                                   "storage-pause", "storage-slow"]


# --- planning and the ledger -----------------------------------------------------------------------------
@pytest.mark.parametrize("shape, cut", [("one-broker", 1), ("all-brokers", 3)])
def test_a_storage_cut_separates_brokers_from_the_store_both_ways_and_never_brokers_from_each_other(shape, cut):
    g, brokers = storage_grudge(BROKERS, "s3", shape, random.Random(3))
    assert len(brokers) == cut and g["s3"] == set(brokers)
    assert all(g[b] == {"s3"} for b in brokers) and set(g) == {"s3", *brokers}


def test_pausing_the_store_freezes_it_alone_and_the_stop_resumes_it():
    cluster = StoreCluster()
    nemesis = StoragePauseNemesis({})
    faults = set_up(nemesis, cluster)
    assert nemesis.invoke(cluster, Op("invoke", "start-storage-pause", "nemesis")).value == {"storage-pause": ["s3"]}
    assert cluster.calls == ["pause s3"]
    nemesis.invoke(cluster, Op("invoke", "stop-storage-pause", "nemesis"))
    (rec,) = faults.ledger.records()
    assert (rec.fault, rec.nodes, rec.by, rec.observed, rec.healed) == ("pause", ["s3"], "storage-pause", True, True)


def test_a_storage_partition_is_observed_across_the_cut_and_healed():
    cluster = StoreCluster()
    nemesis = StoragePartitionNemesis({"storage_partition_target": "all-brokers"})
    faults = set_up(nemesis, cluster)
    done = nemesis.invoke(cluster, Op("invoke", "start-storage-partition", "nemesis"))
    assert done.value["storage-partition"] == BROKERS
    assert all(cluster.net.cut_between("s3", b) for b in BROKERS)
    assert not any(cluster.net.cut_between(a, b) for a in BROKERS for b in BROKERS if a != b)
    nemesis.invoke(cluster, Op("invoke", "stop-storage-partition", "nemesis"))
    (rec,) = faults.ledger.records()
    assert (rec.fault, rec.observed, rec.healed) == ("partition", True, True)
    assert set(rec.evidence["probes"].values()) == {"timeout"} and "open" in rec.heal_evidence["probes"].values()
    assert not any(cluster.net.cut_between("s3", b) for b in BROKERS)


def test_a_storage_cut_that_does_not_take_is_not_observed():
    cluster = StoreCluster()
    cluster.net.broken = {"s3", *BROKERS}  # the rules silently do nothing
    nemesis = StoragePartitionNemesis({"storage_partition_target": "one-broker"})
    faults = set_up(nemesis, cluster)
    nemesis.invoke(cluster, Op("invoke", "start-storage-partition", "nemesis"))
    (rec,) = faults.ledger.records()
    assert rec.applied is True and rec.observed is False and "traffic still flows" in rec.observe_error


def test_a_slow_store_link_is_a_tbf_on_the_stores_egress_read_back_and_removed():
    cluster = StoreCluster()
    nemesis = StorageSlowNemesis({"storage_rate": "128kbit"})
    faults = set_up(nemesis, cluster)
    assert nemesis.invoke(cluster, Op("invoke", "start-storage-slow", "nemesis")).value == {
        "storage-slow": ["s3"], "rate": "128kbit"}
    assert "tbf" in cluster.qdisc["s3"] and set(cluster.qdisc) == {"s3"}
    nemesis.invoke(cluster, Op("invoke", "stop-storage-slow", "nemesis"))
    (rec,) = faults.ledger.records()
    assert (rec.fault, rec.nodes, rec.observed, rec.healed) == ("slow-link", ["s3"], True, True)
    assert cluster.qdisc == {}


def test_a_slow_link_that_does_not_show_is_not_observed():
    cluster = StoreCluster()
    faults = fault_actions(cluster)
    cluster.remote = lambda n: type("Deaf", (), {"run": lambda self, argv, timeout=30.0, check=False:
                                                 RemoteResult(0, "", "")})()
    rec = faults.slow_link("s3", "1mbit", by="storage-slow")
    assert rec.applied is True and rec.observed is False and "not tbf" in rec.observe_error


def test_the_clients_cut_off_from_one_broker_are_observed_from_the_harness_and_healed(harness_probe):
    cluster = StoreCluster()
    nemesis = ClientPartitionNemesis({"seed": 2})
    faults = set_up(nemesis, cluster)
    done = nemesis.invoke(cluster, Op("invoke", "start-client-partition", "nemesis"))
    (node,) = done.value["client-partition"]
    assert done.value["clients"] == CLIENTS
    assert [n for n in cluster.nodes() if clients_cut_from(cluster, n)] == [node]
    assert not any(cluster.net.cut_between(node, other) for other in cluster.nodes() if other != node)
    nemesis.invoke(cluster, Op("invoke", "stop-client-partition", "nemesis"))
    (rec,) = faults.ledger.records()
    assert (rec.fault, rec.nodes, rec.observed, rec.healed) == ("client-partition", [node], True, True)
    assert rec.evidence["probes"] == {f"clients->{node}": "timeout"}
    assert not clients_cut_from(cluster, node)


def test_a_client_cut_and_a_store_cut_on_one_broker_are_healed_apart(harness_probe):
    cluster = StoreCluster()
    faults = fault_actions(cluster)
    faults.cut({"tansu-1": {"s3"}, "s3": {"tansu-1"}}, by="storage-partition", nodes=["tansu-1"])
    clients = faults.cut_clients("tansu-1", by="client-partition")
    store_address = cluster.address("s3")[0]
    assert cluster.net.drops["tansu-1"] == {store_address, CLIENTS}  # one chain holds both
    assert faults.heal_client_cuts(node="tansu-1") == [clients]
    assert cluster.net.drops["tansu-1"] == {store_address}  # the store stays cut off
    assert clients.healed and clients.heal_evidence["probes"] == {"clients->tansu-1": "open"}
    faults.heal_cuts(node="tansu-1")
    assert not cluster.net.drops["tansu-1"] and not faults.ledger.active()


def test_the_clients_are_not_cut_where_the_cluster_does_not_say_where_they_come_from(harness_probe):
    unknown = StoreCluster()
    unknown.client_address = lambda node: None  # a docker network without a gateway, say
    rec = fault_actions(unknown).cut_clients("tansu-2", by="client-partition")
    assert rec.applied is False and "the address the clients reach it from is not known" in rec.apply_error
    assert not any(unknown.net.drops.values())
    undeclared = FakeCluster()  # no ClientCuts at all: the requirement's own sentence
    rec = fault_actions(undeclared).cut_clients("broker-1", by="protocol")
    assert rec.applied is False and "does not say from which address the harness's clients" in rec.apply_error


@pytest.mark.parametrize("backend", ["docker:DockerCluster", "netns:NetnsCluster", "external:ExternalCluster"])
def test_every_backend_that_cuts_clients_says_where_they_come_from_per_node(backend):
    import importlib
    import inspect

    module, name = backend.split(":")
    cls = getattr(importlib.import_module(f"kafkaesque_harness.clusters.{module}"), name)
    assert list(inspect.signature(cls.client_address).parameters) == ["self", "node"]
    assert callable(cls.client_cut_unavailable)


def test_the_final_heal_undoes_every_storage_fault_left_active(harness_probe):
    cluster = StoreCluster()
    faults = fault_actions(cluster)
    parts = [StoragePauseNemesis({}), StoragePartitionNemesis({}), StorageSlowNemesis({}),
             ClientPartitionNemesis({})]
    for p in parts:
        p.setup(cluster, faults)
        p.invoke(cluster, Op("invoke", p.start_f, "nemesis"))
    assert len(faults.ledger.active()) == 4
    assert faults.heal_everything() == []
    assert faults.ledger.active() == [] and all(r.healed for r in faults.ledger.records())
    assert cluster.qdisc == {} and not any(cluster.net.drops.values())


# --- the txn workload asks InitProducerId before the main phase ----------------------------------------------
class FakeTxnProducer:
    """kafka-python's KafkaProducer as far as the preflight uses it; `answer` is what init_transactions raises."""

    answer: Exception | None = None
    asked: list[list[str]] = []

    def __init__(self, bootstrap_servers, **kw):
        FakeTxnProducer.asked.append(bootstrap_servers)
        self.transactional_id = kw["transactional_id"]

    def init_transactions(self):
        if FakeTxnProducer.answer is not None:
            raise FakeTxnProducer.answer

    def close(self, timeout=None):
        pass


@pytest.fixture
def txn_producer(monkeypatch):
    import kafka

    FakeTxnProducer.answer, FakeTxnProducer.asked = None, []
    monkeypatch.setattr(kafka, "KafkaProducer", FakeTxnProducer)
    return FakeTxnProducer


def test_the_txn_workload_is_refused_with_the_clusters_answer_where_initproducerid_fails(txn_producer):
    from kafka.errors import TransactionalIdAuthorizationFailedError

    from kafkaesque_harness.workloads.txn import TxnWorkload

    txn_producer.answer = TransactionalIdAuthorizationFailedError()
    said = TxnWorkload({}).preflight(["10.9.0.2:9092", "10.9.0.3:9092"])
    assert said.startswith("the txn workload needs transactions, and the cluster did not answer InitProducerId "
                           "for a transactional id through 10.9.0.2:9092 (TransactionalIdAuthorizationFailedError")
    assert said.endswith("run the queue workload on it instead")


def test_the_txn_workload_asks_each_distinct_bootstrap_once_and_runs_where_every_broker_answers(txn_producer):
    from kafkaesque_harness.workloads.txn import TxnWorkload

    assert TxnWorkload({}).preflight(["a:1", "b:1", "a:1"]) is None
    assert txn_producer.asked == [["a:1"], ["b:1"]]
