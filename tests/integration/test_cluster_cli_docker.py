"""`kafkaesque cluster up`, `status` and `down` for real on docker, each a fresh CLI invocation that finds the
cluster by its labels. Needs the Docker engine: fails, never skips, without it."""

from __future__ import annotations

import random

import pytest
from typer.testing import CliRunner

from kafkaesque_harness.clusters.base import ClusterError
from kafkaesque_harness.clusters.docker import LABEL, DockerCluster, docker_client

pytestmark = pytest.mark.integration


def test_up_status_down_on_docker():
    try:
        client = docker_client()
    except ClusterError as e:
        pytest.fail(f"the cluster command test needs a Docker engine: {e}")
    from kafkaesque_harness.harness.cli import app

    runner = CliRunner()
    name = f"clitest{random.randrange(10**6)}"
    try:
        up = runner.invoke(app, ["cluster", "up", "--name", name, "--brokers", "1"])
        assert up.exit_code == 0, up.output
        bootstrap = up.stdout.strip().splitlines()[-1]
        containers = client.containers.list(filters={"label": f"{LABEL}={name}"})
        assert sorted(c.labels[f"{LABEL}.node"] for c in containers) == ["broker-1", "controller-0"]
        broker = next(c for c in containers if c.labels[f"{LABEL}.node"] == "broker-1")
        assert bootstrap == f"{broker.attrs['NetworkSettings']['Networks'][f'kafkaesque-{name}']['IPAddress']}:9092"

        status = runner.invoke(app, ["cluster", "status", "--name", name], env={"COLUMNS": "200"})
        assert status.exit_code == 0, status.output
        broker_row = next(line for line in status.stdout.splitlines() if f"kq-{name}-broker-1" in line)
        assert "running" in broker_row and " no " in broker_row  # registered, unfenced
        assert f"bootstrap: {bootstrap}" in status.stdout

        again = runner.invoke(app, ["cluster", "up", "--name", name, "--brokers", "1"])
        assert again.exit_code == 3 and "is already up" in again.output

        down = runner.invoke(app, ["cluster", "down", "--name", name])
        assert down.exit_code == 0, down.output
        assert not client.containers.list(all=True, filters={"label": f"{LABEL}={name}"})
        assert not client.networks.list(filters={"label": f"{LABEL}={name}"})
        gone = runner.invoke(app, ["cluster", "status", "--name", name])
        assert gone.exit_code == 3 and f"No cluster named '{name}' is up" in gone.output
    finally:
        leftover = DockerCluster.attach(client, name)
        if leftover is not None:
            leftover.down()


def test_down_removes_a_network_left_without_containers():
    client = docker_client()
    from kafkaesque_harness.harness.cli import app

    runner = CliRunner()
    name = f"clitest{random.randrange(10**6)}"
    network = client.networks.create(f"kafkaesque-{name}", driver="bridge", labels={LABEL: name})
    try:
        up = runner.invoke(app, ["cluster", "up", "--name", name, "--brokers", "1"])
        assert up.exit_code == 3 and "is already up" in up.output  # not a Docker name conflict traceback
        down = runner.invoke(app, ["cluster", "down", "--name", name])
        assert down.exit_code == 0, down.output
        assert not client.networks.list(filters={"label": f"{LABEL}={name}"})
    finally:
        try:
            network.remove()
        except Exception:  # noqa: BLE001 - removed by the test, as it should be
            pass
