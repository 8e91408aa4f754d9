"""`kafkaesque image build` and `kafkaesque cluster up|status|down`: the node image, and a docker cluster of
the reference broker outside any test run (to point a Kafka client at, or to watch by hand).

A cluster is found again from a fresh process by its docker labels: every container and the
network carry `kafkaesque=<name>` (so `kafkaesque cleanup` removes them too), each container
its node (`kafkaesque.node`) and the cluster's spec (`kafkaesque.spec`), see clusters/docker.py.
"""

from __future__ import annotations

import re
import tempfile
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kafkaesque_harness.harness.console import err, fail

DEFAULT_NAME = "kafkaesque"
# Docker's rule for container and network names, which embed the cluster name.
_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
_DOCKER_FIX = "start dockerd (the cluster commands need a Docker engine)"

image_app = typer.Typer(no_args_is_help=True, help="The node image the docker cluster runs.")
cluster_app = typer.Typer(no_args_is_help=True,
                          help="A docker cluster of the reference broker, outside any test run.")

NameOption = Annotated[str, typer.Option("--name", help="the cluster's name (its docker label kafkaesque=NAME)")]
# The reference broker's settings, as `kafkaesque run` and `kafkaesque cluster up` both take them.
FlushPolicyOption = Annotated[str, typer.Option(help="every-write, every-N-records:N, every-ms:N, never")]
BrokerVariantOption = Annotated[str, typer.Option(help="default, or a historic flaw of the reference broker to "
                                                       "switch on: truncate-to-hw, no-elr, unclean-election, "
                                                       "no-epoch-fencing, txn-markers-no-epoch-bump, "
                                                       "read-committed-to-hwm, offsets-commit-acks-1, "
                                                       "zombie-not-fenced")]
UncleanRecoveryOption = Annotated[str, typer.Option(help="the controller's unclean.recovery.strategy: balanced, "
                                                         "proactive or manual")]


@image_app.command("build")
def image_build(force: Annotated[bool, typer.Option(help="rebuild the node image even if its tag exists")] = False
                ) -> None:
    """Build the node image, or reuse it while its inputs are unchanged; print the set-up time, then the tag."""
    from kafkaesque_harness.clusters.image import ImageError, ensure_image

    t0 = time.monotonic()
    try:
        tag = ensure_image(log=lambda m: err.print(m), force=force)
    except ImageError as e:
        fail(str(e))
    err.print(f"image set-up: {time.monotonic() - t0:.1f} s in all (reused layers included)")
    print(tag)


def _check_name(name: str) -> None:
    if not _NAME_RE.fullmatch(name):
        fail(f"--name {name!r} is not a valid docker name; use letters, digits, '_', '.' and '-', "
              "starting with a letter or digit.")


def _attach(name: str):
    """The running cluster called `name`, or a one-sentence failure."""
    from kafkaesque_harness.clusters.base import ClusterError
    from kafkaesque_harness.clusters.docker import DockerCluster, docker_client

    try:
        client = docker_client(fix=_DOCKER_FIX)
    except ClusterError as e:
        fail(str(e))
    cluster = DockerCluster.attach(client, name)
    if cluster is None:
        fail(f"No cluster named {name!r} is up (no container labelled kafkaesque={name}); start one with "
              f"`kafkaesque cluster up --name {name}`.")
    return cluster


@cluster_app.command("up")
def cluster_up(
    name: NameOption = DEFAULT_NAME,
    brokers: Annotated[int, typer.Option(help="brokers, beside the one controller")] = 3,
    flush_policy: FlushPolicyOption = "never",
    broker_variant: BrokerVariantOption = "default",
    unclean_recovery_strategy: UncleanRecoveryOption = "balanced",
) -> None:
    """Start a docker cluster (building the image if needed); print its status, then the bootstrap servers."""
    from docker.errors import DockerException

    from kafkaesque_harness.clusters.base import ClusterError, ClusterSpec
    from kafkaesque_harness.clusters.broker import UNCLEAN_RECOVERY_STRATEGIES, parse_flush_policy
    from kafkaesque_harness.clusters.docker import DockerCluster, docker_client
    from kafkaesque_harness.clusters.image import ImageError, ensure_image
    from kafkaesque_harness.clusters.reference import BROKER_VARIANTS

    _check_name(name)
    if brokers < 1:
        fail(f"--brokers {brokers} leaves no broker; pass --brokers 1 or more.")
    try:
        parse_flush_policy(flush_policy)
    except ValueError as e:
        fail(str(e))
    if broker_variant not in BROKER_VARIANTS:
        fail(f"unknown --broker-variant {broker_variant!r}; valid: {', '.join(BROKER_VARIANTS)}.")
    if unclean_recovery_strategy not in UNCLEAN_RECOVERY_STRATEGIES:
        fail(f"unknown --unclean-recovery-strategy {unclean_recovery_strategy!r}; "
              f"valid: {', '.join(UNCLEAN_RECOVERY_STRATEGIES)}.")
    try:
        client = docker_client(fix=_DOCKER_FIX)
    except ClusterError as e:
        fail(str(e))
    if DockerCluster.attach(client, name) is not None:
        fail(f"A cluster named {name!r} is already up; see it with `kafkaesque cluster status --name {name}`, "
              f"remove it with `kafkaesque cluster down --name {name}`, or pick another --name.")
    t0 = time.monotonic()
    try:
        ensure_image(log=lambda m: err.print(m))  # first, so a long build is not silent
    except ImageError as e:
        fail(str(e))
    spec = ClusterSpec(brokers=brokers, flush_policy=flush_policy, broker_variant=broker_variant,
                       broker_config={"unclean_recovery_strategy": unclean_recovery_strategy})
    cluster = DockerCluster(spec, tempfile.gettempdir(), owner=name)
    err.print(f"starting cluster {name!r}: 1 controller, {brokers} broker(s) ...")
    try:
        bootstrap = cluster.up()  # tears down what it started if it fails
    except ClusterError as e:
        fail(str(e))
    except DockerException as e:  # e.g. no free address pool for one more network
        fail(f"Docker refused to start cluster {name!r} ({getattr(e, 'explanation', None) or e}); "
              "`kafkaesque cleanup` removes what earlier runs left behind.")
    err.print(f"cluster {name!r} up in {time.monotonic() - t0:.1f} s; `kafkaesque cluster down --name {name}` "
                 "removes it")
    _print_status(cluster, stderr=True)  # stdout is the bootstrap alone: `$(kafkaesque cluster up)` works
    print(bootstrap)


@cluster_app.command("status")
def cluster_status(name: NameOption = DEFAULT_NAME) -> None:
    """Nodes (container, address, running or paused, broker epoch, fenced) and partitions (leader, ISR)."""
    _check_name(name)
    cluster = _attach(name)
    _print_status(cluster)
    print(f"bootstrap: {cluster.bootstrap()}")


@cluster_app.command("down")
def cluster_down(name: NameOption = DEFAULT_NAME) -> None:
    """Remove the cluster's containers and network."""
    _check_name(name)
    cluster = _attach(name)
    gone = [cluster.container_name(n) for n in cluster.containers]
    cluster.down()
    err.print(f"cluster {name!r} down: removed {len(gone)} container(s) and its network")


def status_tables(cluster) -> list[Table]:
    """The node table and the partition table, from docker and from the controller's own state dump."""
    from kafkaesque_harness.clusters.reference import CONTROLLER

    state = cluster.dump_state(CONTROLLER, include_log=False)
    registered = {b["broker_id"]: b for b in state["brokers"]} if state else {}
    nodes = Table("node", "container", "address", "state", "broker process", "broker epoch", "fenced",
                  title=f"cluster {cluster.owner}" + ("" if state else " (the controller does not answer)"))
    for node in cluster.nodes():
        container = cluster.container_status(node)
        process = cluster.process_state(node) if container == "running" else "-"
        reg = registered.get(cluster.node_id(node))
        if node == CONTROLLER:
            epoch = fenced = ""
        elif reg is None:
            epoch, fenced = ("not registered", "") if state else ("?", "?")
        else:
            epoch, fenced = str(reg["broker_epoch"]), "[red]yes[/]" if reg["fenced"] else "no"
        colour = {"running": "green", "paused": "yellow"}.get(process, "red")
        host, port = cluster.address(node)
        nodes.add_row(node, cluster.container_name(node), f"{host}:{port}", container,
                      f"[{colour}]{process}[/]", epoch, fenced)
    tables = [nodes]
    if state and state.get("partitions"):
        parts = Table("topic", "partition", "leader", "leader epoch", "ISR", "ELR", title="partitions")
        for p in state["partitions"]:
            leader = cluster.node_name(p["leader"]) if p["leader"] >= 0 else "[red]none[/]"
            parts.add_row(p["topic"], str(p["partition"]), leader, str(p["leader_epoch"]),
                          ",".join(map(str, p["isr"])), ",".join(map(str, p.get("elr") or [])))
        tables.append(parts)
    return tables


def _print_status(cluster, stderr: bool = False) -> None:
    out = Console(stderr=stderr)
    if not out.is_terminal:
        out = Console(stderr=stderr, width=200)  # a CI log: do not squeeze the columns
    for t in status_tables(cluster):
        out.print(t)
