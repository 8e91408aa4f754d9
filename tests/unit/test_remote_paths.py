"""Remote node dirs (clusters/ownership.py, clusters/ssh.py, clusters/external.py): the harness writes and
(SSH backend) wipes a node's dir as root, so a dir is refused, in one sentence naming it and the fix,
when its normalised path is not absolute, is a system dir or a direct child of one, resolves on the node
into one, or holds files the harness did not put there; it is checked before anything is written.

The node here is this machine through LocalRemote (the same shell commands an SSH node runs), in
pytest's tmp dir.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec
from kafkaesque_harness.clusters.cluster_file import ClusterFileError, load_cluster_file
from kafkaesque_harness.clusters.external import ExternalCluster
from kafkaesque_harness.clusters.ownership import (
    NODE_MARKER,
    PAUSED_FILE,
    Harness,
    check_node_dir,
    claim_node_dir,
    node_dir_problem,
    normalise_remote_path,
    read_node_marker,
    record_pause_script,
    release_node_dir,
    resume_paused_script,
    this_harness,
)
from kafkaesque_harness.clusters.remote import LocalRemote
from kafkaesque_harness.clusters.ssh import NodeFileError, SshCluster, load_node_file

UNSAFE = {
    "/usr": "'/usr' is a system directory",
    "/var/lib/..": "'/var/lib/..' (that is /var) is a system directory",
    "/tmp/..": "'/tmp/..' (that is /) is a system directory",
    "/etc": "'/etc' is a system directory",
    "/": "'/' is a system directory",
    "relative/path": "'relative/path' is not an absolute path",
    "~": "'~' is not an absolute path",
    "~/kafkaesque": "'~/kafkaesque' is not an absolute path",
    "/var/lib": "'/var/lib' is a direct child of the system directory /var",
    "/usr/lib/": "'/usr/lib/' (that is /usr/lib) is a direct child of the system directory /usr",
    "//etc/ssh": "'//etc/ssh' (that is /etc/ssh) is a direct child of the system directory /etc",
    "/home/alice": "'/home/alice' is a direct child of the system directory /home",
    "/root/.ssh": "'/root/.ssh' is a direct child of the system directory /root",
    "/tmp/kq": "'/tmp/kq' is a direct child of the system directory /tmp",
    "/var/lib/kafkaesque/../../..": "'/var/lib/kafkaesque/../../..' (that is /) is a system directory",
}


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAESQUE_STATE_DIR", str(tmp_path / "state"))


@pytest.mark.parametrize("path", list(UNSAFE))
def test_an_unsafe_node_dir_is_refused_by_name(path):
    assert node_dir_problem(path) == UNSAFE[path]


@pytest.mark.parametrize("path, normalised", [
    ("/var/lib/kafkaesque", "/var/lib/kafkaesque"),
    ("/var/lib/kafkaesque/", "/var/lib/kafkaesque"),
    ("/var/lib/x/../kafkaesque", "/var/lib/kafkaesque"),
    ("/opt/kafkaesque", "/opt/kafkaesque"),      # /opt/<package>: a per-application dir
    ("/srv/kafkaesque", "/srv/kafkaesque"),
    ("/home/kq/kafkaesque", "/home/kq/kafkaesque"),
    ("/data/kafkaesque", "/data/kafkaesque"),
])
def test_a_dir_of_its_own_is_accepted_normalised(path, normalised):
    assert node_dir_problem(path) is None and check_node_dir(path, "node 1") == normalised


def test_the_literal_path_is_normalised_before_any_use():
    assert normalise_remote_path("//var//lib/./kq/") == "/var/lib/kq"


@pytest.mark.parametrize("path", list(UNSAFE))
def test_the_ssh_node_file_refuses_an_unsafe_dir_in_one_sentence(tmp_path, path):
    f = tmp_path / "nodes.toml"
    f.write_text(f"dir = {json.dumps(path)}\n[[nodes]]\nname = 'controller-0'\nhost = 'a'\n"
                 "[[nodes]]\nname = 'broker-1'\nhost = 'b'\n")
    with pytest.raises(NodeFileError) as e:
        load_node_file(str(f))
    said = str(e.value)
    assert said == (f"node 1 (controller-0) of {f}: dir = {UNSAFE[path]}; the harness writes and wipes there as "
                     "root, so it must be an absolute dir of its own, e.g. /var/lib/kafkaesque.")


def test_the_ssh_node_file_keeps_the_normalised_dir(tmp_path):
    f = tmp_path / "nodes.toml"
    f.write_text("dir = '/var/lib/kq/./x/../'\n[[nodes]]\nname = 'controller-0'\nhost = 'a'\n")
    assert [n.dir for n in load_node_file(str(f))] == ["/var/lib/kq"]


def external_file(tmp_path: Path, dir_: str, data_dir: str = "{{ dir }}/data", name: str = "k1") -> Path:
    f = tmp_path / "cluster.toml"
    f.write_text(f'kind = "external"\n[commands]\nstart = "true"\nstop = "true"\npid = "true"\n'
                 f'[paths]\ndir = {json.dumps(dir_)}\ndata_dir = {json.dumps(data_dir)}\n'
                 f'[[nodes]]\nname = "{name}"\nid = 1\nhost = "10.0.0.1"\n')
    return f


@pytest.mark.parametrize("path", ["/usr", "/var/lib/..", "/tmp/..", "/etc", "/", "relative/path", "/var/lib"])
def test_the_external_cluster_file_refuses_an_unsafe_dir_in_one_sentence(tmp_path, path):
    f = external_file(tmp_path, path)
    with pytest.raises(ClusterFileError) as e:
        load_cluster_file(str(f))
    assert str(e.value) == (f"[paths] dir of the cluster file {f} for k1: {UNSAFE[path]}; give an absolute dir of "
                            "its own (the harness and your commands write there as root), e.g. /var/lib/kafkaesque.")


def test_the_external_cluster_file_refuses_a_data_dir_that_climbs_into_the_system(tmp_path):
    f = external_file(tmp_path, "/var/lib/kafkaesque", data_dir="{{ dir }}/../..")
    with pytest.raises(ClusterFileError, match=r"\[paths\] data_dir .*: '/var/lib/kafkaesque/\.\./\.\.' \(that is /var\) is a system directory"):
        load_cluster_file(str(f))


def test_an_external_node_name_that_is_a_path_is_refused(tmp_path):
    # the name is a folder of the run dir (nodes/<name>/): "../x" would write beside the run
    with pytest.raises(ClusterFileError, match=r"needs a name of letters, digits and \._-"):
        load_cluster_file(str(external_file(tmp_path, "/var/lib/kafkaesque", name="../x")))


# --- on the node --------------------------------------------------------------------------------------------
def node() -> LocalRemote:
    return LocalRemote("node-1")


def test_a_new_dir_is_claimed_and_marked_with_the_run(tmp_path):
    d = tmp_path / "kq"
    claim_node_dir(node(), "node-1", str(d), "run-a", "nodes.toml", {"chain": "KAFKAESQUE"})
    marker = json.loads((d / NODE_MARKER).read_text())
    assert (marker["run"], marker["chain"], marker["dir"]) == ("run-a", "KAFKAESQUE", str(d))
    assert Harness(**marker["harness"]) == this_harness()


def test_an_empty_dir_and_a_dir_the_harness_marked_are_accepted(tmp_path):
    (tmp_path / "empty").mkdir()
    claim_node_dir(node(), "node-1", str(tmp_path / "empty"), "run-a", "nodes.toml")
    release_node_dir(node(), str(tmp_path / "empty"), "run-a")
    (tmp_path / "empty" / "data").mkdir()  # what a run leaves: files, and the marker naming no run
    claim_node_dir(node(), "node-1", str(tmp_path / "empty"), "run-b", "nodes.toml")
    assert read_node_marker(node(), str(tmp_path / "empty"))["run"] == "run-b"


def test_a_dir_holding_someone_elses_files_is_refused_and_left_untouched(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir()
    (d / "lib").mkdir()
    (d / "important.db").write_text("keep me")
    with pytest.raises(ClusterError) as e:
        claim_node_dir(node(), "node-1", str(d), "run-a", "the node file n.toml")
    assert str(e.value) == (f"node-1 (node-1): dir {d} holds files the harness did not put there (important.db, "
                            f"lib, ...) and no {NODE_MARKER}; give dir in the node file n.toml an empty or new dir of "
                            "its own, since the harness writes and wipes there.")
    assert sorted(p.name for p in d.iterdir()) == ["important.db", "lib"]


@pytest.mark.parametrize("target, says", [("/usr", "which is a system directory"),
                                          ("/var/lib", "which is a direct child of the system directory /var")])
def test_a_dir_that_is_a_link_into_the_system_is_refused(tmp_path, target, says):
    link = tmp_path / "kq"
    link.symlink_to(target)
    with pytest.raises(ClusterError, match=f"dir {link} resolves to {target}, {says}; point dir in n.toml at a dir "
                                           "of its own that is no link into the system"):
        claim_node_dir(node(), "node-1", str(link), "run-a", "n.toml")


def test_a_dir_a_live_run_holds_is_refused_and_a_dead_runs_is_taken_over(tmp_path):
    d = tmp_path / "kq"
    claim_node_dir(node(), "node-1", str(d), "run-live", "n.toml")  # this process: live
    with pytest.raises(ClusterError, match=r"dir .* is in use by run run-live, which is still live \(pid \d+"):
        claim_node_dir(node(), "node-1", str(d), "run-b", "n.toml")
    marker = json.loads((d / NODE_MARKER).read_text())
    marker["harness"]["pid"], marker["harness"]["start"] = 1, 1  # its harness is gone
    (d / NODE_MARKER).write_text(json.dumps(marker))
    claim_node_dir(node(), "node-1", str(d), "run-b", "n.toml")
    assert read_node_marker(node(), str(d))["run"] == "run-b"


def test_releasing_touches_only_the_runs_own_marker(tmp_path):
    d = tmp_path / "kq"
    claim_node_dir(node(), "node-1", str(d), "run-a", "n.toml")
    release_node_dir(node(), str(d), "run-b")
    assert read_node_marker(node(), str(d))["run"] == "run-a"
    release_node_dir(node(), str(d), "run-a")
    assert read_node_marker(node(), str(d))["run"] == ""


class FakeSshNode(LocalRemote):
    """An SSH node that is this machine: the backend's own commands run here."""

    target = SimpleNamespace(sudo=False)

    def connect(self):
        return self

    def close(self) -> None:
        pass

    def where(self) -> str:
        return f"fake {self.name}"


def test_the_ssh_backend_checks_the_dir_on_every_node_before_it_wipes_anything(tmp_path):
    d = tmp_path / "theirs"
    (d / "lib").mkdir(parents=True)
    (d / "lib" / "libc.so").write_text("not ours")
    (d / "code").mkdir()
    f = tmp_path / "nodes.toml"
    f.write_text(f"dir = '{d}'\n" + "".join(f"[[nodes]]\nname = '{n}'\nhost = 'h{i}'\n"
                                            for i, n in enumerate(("controller-0", "broker-1"))))
    c = SshCluster.from_file(str(f), ClusterSpec(), str(tmp_path / "run"))
    c.remotes = {n: FakeSshNode(n) for n in c.nodes()}
    with pytest.raises(ClusterError, match=f"dir {d} holds files the harness did not put there"):
        c.up()
    assert (d / "lib" / "libc.so").read_text() == "not ours" and (d / "code").is_dir()
    assert not (d / NODE_MARKER).exists()


def test_the_external_backend_checks_the_dir_before_it_stops_or_installs_anything(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir()
    (d / "server.properties").write_text("theirs")
    f = external_file(tmp_path, str(d))
    text = f.read_text().replace('stop = "true"', f'stop = "touch {tmp_path}/stopped"')
    f.write_text(text)
    c = ExternalCluster.from_file(str(f), None, str(tmp_path / "run"))
    c.remotes = {n: FakeSshNode(n) for n in c.nodes()}
    with pytest.raises(ClusterError, match=f"dir {d} holds files the harness did not put there"):
        c.up()
    assert sorted(p.name for p in d.iterdir()) == ["server.properties"]
    assert not (tmp_path / "stopped").exists()  # the node it was refused is not stopped at teardown either


# --- what an external run paused, and what cleanup resumes ----------------------------------------------
@pytest.fixture
def stopped_sleeper():
    procs = []

    def start() -> subprocess.Popen:
        p = subprocess.Popen(["sleep", "300"])
        procs.append(p)
        deadline = time.monotonic() + 5
        while not Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"sleep") and time.monotonic() < deadline:
            time.sleep(0.01)
        return p

    yield start
    for p in procs:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait(5)


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_cleanup_resumes_the_processes_a_run_paused_and_only_those(tmp_path, stopped_sleeper):
    d = tmp_path / "kq"
    d.mkdir()
    paused, reused = stopped_sleeper(), stopped_sleeper()
    subprocess.run(["sh", "-c", f"p={paused.pid}; kill -STOP $p && {record_pause_script(str(d))}"], check=True)
    # a pid on the list whose process started at another time is not the process the run stopped
    reused.send_signal(signal.SIGSTOP)
    with open(d / PAUSED_FILE, "a") as f:
        f.write(f"{reused.pid} 1\n")
    time.sleep(0.1)
    assert state_of(paused.pid) == state_of(reused.pid) == "T"
    out = subprocess.run(["sh", "-c", resume_paused_script(str(d))], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["resumed", str(paused.pid)]
    time.sleep(0.1)
    assert state_of(paused.pid) in ("S", "R") and state_of(reused.pid) == "T"
    assert not (d / PAUSED_FILE).exists()


def test_every_remote_path_of_an_external_cluster_file_is_normalised_before_use(tmp_path):
    from kafkaesque_harness.clusters.cluster_file import render_all

    f = external_file(tmp_path, "/var/lib/kq//x/..")
    text = f.read_text().replace("[[nodes]]", 'logs = ["{{ dir }}/./logs/../server.log"]\n[install]\n'
                                              'unpack_to = "{{ dir }}/code/"\n[[nodes]]')
    f.write_text(text)
    cf = load_cluster_file(str(f))
    r = render_all(cf, cf.nodes[0])
    assert (r["vars"]["dir"], r["vars"]["data_dir"]) == ("/var/lib/kq", "/var/lib/kq/data")
    assert (r["logs"], r["unpack_to"]) == (["/var/lib/kq/server.log"], "/var/lib/kq/code")
