"""`kafkaesque image build` and `kafkaesque cluster up|status|down`: arguments checked before anything starts,
errors as one sentence with exit 3, and the status table drawn from docker's and the controller's view."""

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kafkaesque_harness.clusters import docker, image
from kafkaesque_harness.harness.cli import app
from kafkaesque_harness.harness.cluster_cli import status_tables

runner = CliRunner()


@pytest.fixture
def no_docker_calls(monkeypatch):
    def refuse(*a, **kw):
        raise AssertionError("docker was contacted before the arguments were checked")

    monkeypatch.setattr(docker, "docker_client", refuse)
    monkeypatch.setattr(image, "ensure_image", refuse)


class NoContainers:
    """A Docker client that knows no container and no network."""

    class containers:
        @staticmethod
        def list(**kw):
            return []

    networks = containers


def test_image_build_prints_the_set_up_time_and_then_the_tag(monkeypatch):
    calls = []
    monkeypatch.setattr(image, "ensure_image", lambda log, force: calls.append(force) or "kafkaesque-node:abc")
    r = runner.invoke(app, ["image", "build", "--force"])
    assert r.exit_code == 0 and calls == [True]
    assert "image set-up:" in r.output and r.stdout.strip().splitlines()[-1] == "kafkaesque-node:abc"


def test_image_build_failure_is_one_sentence_and_exit_3(monkeypatch):
    def fail(log, force):
        raise image.ImageError("debootstrap is not installed; run `apt-get install -y debootstrap`.")

    monkeypatch.setattr(image, "ensure_image", fail)
    r = runner.invoke(app, ["image", "build"])
    assert r.exit_code == 3 and "error: debootstrap is not installed" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("args, message", [
    (["--broker-variant", "no-fsync"], "unknown --broker-variant 'no-fsync'; valid: default, truncate-to-hw"),
    (["--brokers", "0"], "--brokers 0 leaves no broker; pass --brokers 1 or more"),
    (["--flush-policy", "sometimes"], "sometimes"),
    (["--unclean-recovery-strategy", "yolo"], "unknown --unclean-recovery-strategy 'yolo'"),
    (["--name", "my cluster"], "--name 'my cluster' is not a valid docker name"),
])
def test_cluster_up_checks_its_arguments_before_touching_docker(no_docker_calls, args, message):
    r = runner.invoke(app, ["cluster", "up", *args])
    assert r.exit_code == 3 and message in r.output and "Traceback" not in r.output


def test_no_docker_engine_is_one_sentence_naming_the_fix():
    r = runner.invoke(app, ["cluster", "status"], env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert r.exit_code == 3
    assert "The Docker engine does not answer" in r.output and "start dockerd" in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("command", ["status", "down"])
def test_a_cluster_that_is_not_up_is_named_with_the_command_that_starts_it(monkeypatch, command):
    monkeypatch.setattr(docker, "docker_client", lambda fix: NoContainers())
    r = runner.invoke(app, ["cluster", command, "--name", "lab"])
    assert r.exit_code == 3
    assert "No cluster named 'lab' is up" in r.output and "kafkaesque cluster up --name lab" in r.output


def test_cluster_up_refuses_a_name_already_up(monkeypatch):
    monkeypatch.setattr(docker, "docker_client", lambda fix: NoContainers())
    monkeypatch.setattr(docker.DockerCluster, "attach", classmethod(lambda cls, client, owner: object()))
    r = runner.invoke(app, ["cluster", "up"])
    assert r.exit_code == 3 and "A cluster named 'kafkaesque' is already up" in r.output


class TwoNodeCluster:
    """What the status table reads: docker's state per container and the controller's dump."""

    owner = "lab"

    def nodes(self):
        return ["controller-0", "broker-1", "broker-2"]

    def node_id(self, node):
        return 1000 if node == "controller-0" else int(node[-1])

    def node_name(self, node_id):
        return f"broker-{node_id}"

    def container_name(self, node):
        return f"kq-lab-{node}"

    def address(self, node):
        return f"172.20.0.{self.node_id(node) % 100}", 9092

    def container_status(self, node):
        return "running"

    def process_state(self, node):
        return "paused" if node == "broker-2" else "running"

    def dump_state(self, node, include_log=True):
        return {"brokers": [{"broker_id": 1, "broker_epoch": 4, "fenced": False},
                            {"broker_id": 2, "broker_epoch": 7, "fenced": True}],
                "partitions": [{"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 3, "isr": [1],
                                "elr": [2]},
                               {"topic": "t", "partition": 1, "leader": -1, "leader_epoch": 5, "isr": [],
                                "elr": []}]}


def test_status_shows_paused_and_fenced_brokers_and_partitions_without_a_leader():
    out = Console(width=200, record=True, color_system=None)
    for table in status_tables(TwoNodeCluster()):
        out.print(table)
    text = out.export_text()
    broker2 = next(line for line in text.splitlines() if "kq-lab-broker-2" in line)
    assert "172.20.0.2:9092" in broker2 and "paused" in broker2 and " 7 " in broker2 and "yes" in broker2
    assert "kq-lab-controller-0" in text
    p1 = next(line for line in text.splitlines() if line.strip("│ ").startswith("t") and " 1 " in line
              and "none" in line)
    assert " 5 " in p1
