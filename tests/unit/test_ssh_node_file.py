"""The SSH backend's node file (clusters/ssh.py): what it accepts, and one sentence for each way it can be wrong."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kafkaesque_harness.clusters.ssh import NodeFileError, code_tarball, load_node_file

GOOD = """
user = "kq"
sudo = true
[[nodes]]
name = "broker-2"
host = "10.0.0.12"
[[nodes]]
name = "controller-0"
host = "10.0.0.10"
port = 2222
[[nodes]]
name = "broker-1"
host = "10.0.0.11"
user = "root"
sudo = false
kafka_port = 19092
"""


def write(tmp_path, text: str) -> str:
    p = tmp_path / "nodes.toml"
    p.write_text(text)
    return str(p)


def test_defaults_apply_and_a_nodes_own_keys_win(tmp_path):
    nodes = load_node_file(write(tmp_path, GOOD))
    assert [n.name for n in nodes] == ["controller-0", "broker-1", "broker-2"]
    c, b1, b2 = nodes
    assert (c.target.port, c.target.user, c.target.sudo, c.kafka_port) == (2222, "kq", True, 9092)
    assert (b1.target.user, b1.target.sudo, b1.kafka_port) == ("root", False, 19092)
    assert (b2.target.host_key_policy, b2.dir) == ("strict", "/var/lib/kafkaesque")


@pytest.mark.parametrize("text, says", [
    ("nodes = 3", "has no [[nodes]] tables"),
    ("[[nodes]]\nname = 'controller-0'\n", "has no host"),
    ("[[nodes]]\nname = 'controller-0'\nhost = 'a'\n[[nodes]]\nname = 'broker-2'\nhost = 'b'\n",
     "brokers named broker-1 .. broker-N"),
    ("[[nodes]]\nname = 'broker-1'\nhost = 'b'\n", "exactly one controller-0"),
    ("usr = 'root'\n[[nodes]]\nname = 'controller-0'\nhost = 'a'\n", "unknown top-level key(s) usr"),
    ("[[nodes]]\nname = 'controller-0'\nhost = 'a'\nport = '22'\n", "port = '22' should be an int"),
    ("[[nodes]]\nname = 'controller-0'\nhost = 'a'\nhost_key_policy = 'yes'\n", "use one of strict, accept-new"),
    ("[[nodes]]\nname = 'controller-0'\nhost = 'a'\nkey = '/no/such/key'\n", "key file /no/such/key does not exist"),
    ("[[nodes]]\nname = 'controller-0'\nhost = 'a'\ndir = '/'\n", "must be an absolute dir of its own"),
    ("[[nodes]]\nname = 'controller-0'\nhost = 'a'\n[[nodes]]\nname = 'broker-1'\nhost = 'a'\n",
     "the same host and dir"),
    ("[[nodes]\n", "is not valid TOML"),
])
def test_a_bad_file_is_one_sentence_naming_the_problem(tmp_path, text, says):
    with pytest.raises(NodeFileError) as e:
        load_node_file(write(tmp_path, text))
    assert says in str(e.value) and str(e.value).count("\n") == 0


def test_a_missing_file_names_the_flag(tmp_path):
    with pytest.raises(NodeFileError, match="cannot read the node file .*--cluster ssh:FILE.toml"):
        load_node_file(str(tmp_path / "nope.toml"))


def test_kafkaesque_run_refuses_a_bad_node_file_in_one_line_without_a_traceback(tmp_path):
    path = write(tmp_path, "[[nodes]]\nname = 'broker-1'\nhost = 'b'\n")
    r = subprocess.run([sys.executable, "-m", "kafkaesque_harness.harness.cli", "run", "--cluster", f"ssh:{path}", "--store",
                        str(tmp_path / "store")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3
    assert "exactly one controller-0" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "store").exists()  # refused before anything ran


def test_the_code_tarball_carries_the_broker_and_no_bytecode():
    import io
    import tarfile

    names = tarfile.open(fileobj=io.BytesIO(code_tarball())).getnames()
    assert {"kafkaesque_harness/__init__.py", "kafkaesque_harness/clusters/__init__.py",
            "kafkaesque_harness/clusters/broker/__main__.py", "kafkaesque_harness/clusters/lossyfs.py"} <= set(names)
    # the node runs the broker only: none of the harness's own rooms goes there
    assert not [n for n in names if not n.startswith(("kafkaesque_harness/clusters/broker/",
                                                       "kafkaesque_harness/clusters/__init__", "kafkaesque_harness/clusters/lossyfs",
                                                       "kafkaesque_harness/__init__"))]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
