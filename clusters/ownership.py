"""Who owns what the harness creates, and whether that owner still lives (issue 20 items 1 and 3).

A run is known by its owner id (clusters/reference.py `owner`), which every thing it makes
carries: node processes (KAFKAESQUE_OWNER), network namespaces and bridges (a tag derived
from it), the FORWARD rule's comment, a marker file beside each lossy mount, the docker
label `kafkaesque.run`, and a marker file in each remote node's dir. While its cluster is
up, the process that started it holds a registration here: one JSON file per run under
`state_dir()/runs`, naming the host, the boot, the pid and the pid's start time (from
/proc/<pid>/stat), so a pid reused by another program is not mistaken for the live run.

`kafkaesque cleanup` (clusters/cleanup.py) removes only what belongs to a run it can prove
dead: registered on this host and boot with a harness that is gone. A live run is skipped
and named; a thing whose run is not registered here (an older kafkaesque, another user or
another host) is left alone unless the user names the run.

Remote node dirs: the SSH and external backends write, upload and (SSH) wipe inside a dir
on every node. `node_dir_problem` refuses, before anything reaches a node, a dir that is
not absolute or is a system dir or a direct child of one; `claim_node_dir` then checks on
the node itself that the dir (symlinks resolved) is empty, absent, or holds the marker the
harness wrote there, and writes the marker naming this run.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import shlex
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from kafkaesque_harness.clusters.base import ClusterError

STATE_ENV = "KAFKAESQUE_STATE_DIR"
NODE_MARKER = ".kafkaesque-node.json"      # in a remote node's dir: ours, and which run uses it now
PAUSED_FILE = ".kafkaesque-paused"         # beside it: "pid start-time" of each process the run SIGSTOPped
LOCAL_MARKER = ".kafkaesque-run"           # in a local node dir: the owner of the mount inside it
_SAFE_OWNER = re.compile(r"[^A-Za-z0-9_.-]")

RunState = Literal["live", "dead", "elsewhere", "unregistered"]


# --- where the harness keeps its own state --------------------------------------------------------------
def state_dir() -> Path:
    """$KAFKAESQUE_STATE_DIR, else $XDG_STATE_HOME/kafkaesque (~/.local/state/kafkaesque): the run
    registrations and the markers of SSH and external clusters. Not /run: a marker must survive a reboot
    of this machine, since the nodes it names keep their faults."""
    base = os.environ.get(STATE_ENV) or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "kafkaesque")
    return Path(base)


def runs_dir() -> Path:
    return state_dir() / "runs"


def owner_tag(owner: str) -> str:
    """The short tag of a run in names that cannot hold its whole id (network namespaces, bridges)."""
    return hashlib.sha1(owner.encode()).hexdigest()[:6]


# --- the harness process --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Harness:
    """The process that owns a run: where it runs and which process it is (pid plus start time)."""

    host: str
    boot: str
    pid: int
    start: int  # clock ticks after boot (/proc/<pid>/stat field 22): a reused pid has another

    def state(self) -> Literal["live", "dead", "elsewhere"]:
        """live or dead when it ran on this machine; "elsewhere" when on another (it cannot be checked)."""
        if self.host != socket.gethostname():
            return "elsewhere"
        if self.boot != boot_id():
            return "dead"  # this machine rebooted since
        return "live" if process_start_time(self.pid) == self.start else "dead"

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks after boot, or None when there is no such process (or
    only its zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def this_harness() -> Harness:
    pid = os.getpid()
    return Harness(socket.gethostname(), boot_id(), pid, process_start_time(pid) or 0)


# --- the registry of runs ---------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """One registration: a run whose cluster is (or was, when its harness died) up."""

    owner: str
    harness: Harness
    cluster: str = ""
    run_dir: str = ""
    started: float = 0.0
    path: Path | None = None  # its file

    def state(self) -> Literal["live", "dead", "elsewhere"]:
        return self.harness.state()

    def details(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started)) if self.started else "?"
        what = f"cluster {self.cluster}, " if self.cluster else ""
        return f"{what}harness {self.harness.describe()}, since {when}"

    def describe(self) -> str:
        return f"run {self.owner} ({self.details()})"


def _record_path(owner: str) -> Path:
    # The owner is free text (a cluster name, a run dir's name): the file name keeps it readable and
    # unique without letting a "/" or ".." in it point anywhere else.
    return runs_dir() / f"{_SAFE_OWNER.sub('_', owner)[:80]}-{hashlib.sha1(owner.encode()).hexdigest()[:8]}.json"


def register_run(owner: str, cluster: str = "", run_dir: str = "") -> RunRecord:
    """Record that this process owns `owner`'s cluster; returns the handle for unregister_run. A live
    registration of the same owner by another process is a ClusterError (two harnesses, one run id)."""
    if not owner:
        raise ClusterError("A run needs an owner id to register; this is a harness bug.")
    path = _record_path(owner)
    existing = _read_record(path)
    me = this_harness()
    if existing is not None and existing.harness != me and existing.state() == "live":
        raise ClusterError(f"Run {owner} is already live ({existing.harness.describe()}); give this cluster another "
                           "name, or stop that harness first.")
    record = RunRecord(owner, me, cluster, run_dir, time.time(), path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"owner": owner, "harness": asdict(me), "cluster": cluster, "run_dir": run_dir,
                               "started": record.started}, indent=1) + "\n")
    os.replace(tmp, path)
    return record


def unregister_run(handle: RunRecord) -> None:
    """The run's normal end: drop its registration (if it is still this handle's)."""
    path = handle.path or _record_path(handle.owner)
    current = _read_record(path)
    if current is not None and current.harness == handle.harness:
        path.unlink(missing_ok=True)


def release_run(owner: str) -> None:
    """Drop `owner`'s registration when its cluster is gone, whoever registered it (`kafkaesque cluster
    down` from another process), unless another harness that is still live holds it."""
    path = _record_path(owner)
    current = _read_record(path)
    if current is not None and (current.harness == this_harness() or current.state() != "live"):
        path.unlink(missing_ok=True)


def _read_record(path: Path) -> RunRecord | None:
    try:
        d = json.loads(path.read_text())
        return RunRecord(str(d["owner"]), Harness(**d["harness"]), str(d.get("cluster", "")),
                         str(d.get("run_dir", "")), float(d.get("started", 0)), path)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def registered_runs() -> list[RunRecord]:
    """Every registration readable here (live, dead or from another host), oldest first."""
    d = runs_dir()
    if not d.is_dir():
        return []
    found = [r for p in sorted(d.glob("*.json")) if (r := _read_record(p)) is not None]
    return sorted(found, key=lambda r: r.started)


def live_runs() -> list[RunRecord]:
    return [r for r in registered_runs() if r.state() == "live"]


def run_state(owner: str, records: list[RunRecord] | None = None) -> RunState:
    """"live", "dead" (registered here, its harness gone), "elsewhere" (registered by another host: cannot
    be checked) or "unregistered" (nothing here says whose it is)."""
    record = _read_record(_record_path(owner)) if records is None else next(
        (r for r in records if r.owner == owner), None)
    return "unregistered" if record is None else record.state()


def is_live(owner: str) -> bool:
    return run_state(owner) == "live"


# --- leftovers: what cleanup finds -------------------------------------------------------------------------
@dataclass
class Leftover:
    """One thing a run made that is still there, found by a backend (clusters/cleanup.py lists them)."""

    owner: str                         # the run it belongs to; "" when nothing found names one
    what: str                          # "process 1234 (run X)", "network namespace kqab12cd-0"
    remove: Callable[[], object]       # undoes it; raises when it could not
    rank: int = 0                      # removal order: processes before their mounts before networks
    tag: str = ""                      # the run's short tag, for things named by it (owner_tag)
    extra: dict[str, Any] = field(default_factory=dict)


def owners_by_tag(owners: Iterable[str]) -> dict[str, str]:
    return {owner_tag(o): o for o in owners if o}


def pick(items: list[Leftover], owner: str = "", tag: str = "") -> list[Leftover]:
    """The leftovers of one run (`owner`, or the run `tag` names), or, with neither, of every run that is
    provably dead: registered on this machine with a harness that is gone."""
    if owner or tag:
        return [i for i in items if (owner and i.owner == owner) or (tag and i.tag == tag)]
    records = registered_runs()
    return [i for i in items if i.owner and run_state(i.owner, records) == "dead"]


def remove_all(items: list[Leftover]) -> list[str]:
    """Remove each (in rank order); returns what was removed. A failure is skipped: cleanup is best effort
    and says what it did."""
    done = []
    for item in sorted(items, key=lambda i: i.rank):
        try:
            item.remove()
            done.append(item.what)
        except Exception:  # noqa: BLE001 - one stuck leftover must not keep the others
            continue
    return done


# --- remote node dirs ---------------------------------------------------------------------------------------
# A node dir is wiped (SSH backend) or written to (both remote backends) as root: none of these, nor a
# direct child of one (/var/lib, /usr/lib, /etc/ssh, /home/alice), may be it. /opt and /srv are the
# exception FHS makes them for: /opt/<package> and /srv/<service> are per-application dirs, and one
# that holds someone else's files is refused by claim_node_dir (not empty, no marker of ours).
SYSTEM_DIRS = ("/", "/usr", "/etc", "/var", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/boot",
               "/dev", "/proc", "/sys", "/home", "/root", "/opt", "/srv", "/tmp", "/run", "/mnt", "/media")
APPLICATION_PARENTS = ("/opt", "/srv")


def normalise_remote_path(path: str) -> str:
    """The literal path without "." or ".." parts, repeated or trailing slashes (posixpath.normpath,
    which keeps a leading "//": collapsed here too). Nothing is resolved: the node is not asked."""
    norm = posixpath.normpath(path) if path else path
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def node_dir_problem(path: str) -> str | None:
    """Why `path` cannot be a node's own dir (a clause naming it, no full stop), or None."""
    if not isinstance(path, str) or not path.startswith("/"):
        return f"{path!r} is not an absolute path"
    norm = normalise_remote_path(path)
    reason = _system_dir_reason(norm)
    if reason is None:
        return None
    return f"{path!r} {reason}" if norm == path else f"{path!r} (that is {norm}) {reason}"


def _system_dir_reason(norm: str) -> str | None:
    if norm in SYSTEM_DIRS:
        return "is a system directory"
    parent = posixpath.dirname(norm)
    if parent in SYSTEM_DIRS and parent not in APPLICATION_PARENTS:
        return f"is a direct child of the system directory {parent}"
    return None


def check_node_dir(path: str, where: str, key: str = "dir") -> str:
    """The normalised node dir, or a ClusterError sentence (cause and fix) naming `where` it was given."""
    problem = node_dir_problem(path)
    if problem:
        raise ClusterError(f"{where}: {key} = {problem}; the harness writes and wipes there as root, so it must "
                           "be an absolute dir of its own, e.g. /var/lib/kafkaesque.")
    return normalise_remote_path(path)


@dataclass
class NodeDirState:
    resolved: str               # the dir with symlinks resolved on the node ("" when it cannot be)
    state: str                  # absent, empty, marked, legacy, foreign, notdir
    marker: dict[str, Any] | None
    sample: list[str]           # a few of the names a foreign dir holds


def inspect_node_dir(remote, path: str) -> NodeDirState:
    """What the node says of its dir, in one round trip (read only)."""
    d, m = shlex.quote(path), shlex.quote(f"{path}/{NODE_MARKER}")
    script = (f"printf 'resolved=%s\\n' \"$(readlink -f -- {d} 2>/dev/null)\"; "
              f"if [ ! -e {d} ] && [ ! -L {d} ]; then echo state=absent; "
              f"elif [ ! -d {d} ]; then echo state=notdir; "
              f"elif [ -f {m} ]; then echo state=marked; cat {m}; "
              # what the SSH backend left in its dir before it wrote markers: its code tarball, unpacked
              f"elif [ -f {d}/clusters.tar.gz ] && [ -d {d}/code/clusters/broker ]; then echo state=legacy; "
              f"elif [ -z \"$(ls -A {d} 2>/dev/null)\" ]; then echo state=empty; "
              f"else echo state=foreign; ls -A {d} | head -n 5; fi")
    r = remote.run(["sh", "-c", script], timeout=20)
    lines = r.out.splitlines()
    if not r.ok or len(lines) < 2 or not lines[1].startswith("state="):
        raise ClusterError(f"{remote.name}: could not look into {path} ({(r.err.strip() or 'no answer')[-200:]}); "
                           "check that the node's user may read it.")
    resolved, state, rest = lines[0].removeprefix("resolved="), lines[1].removeprefix("state="), lines[2:]
    marker = None
    if state == "marked":
        try:
            marker = json.loads("\n".join(rest))
        except ValueError:
            marker = {}
        if not isinstance(marker, dict):
            marker = {}
    return NodeDirState(resolved, state, marker, rest if state == "foreign" else [])


def marker_harness(marker: dict[str, Any] | None) -> Harness | None:
    try:
        return Harness(**marker["harness"]) if marker and marker.get("harness") else None
    except TypeError:
        return None


def claim_node_dir(remote, node: str, path: str, owner: str, file: str, extra: dict[str, Any] | None = None,
                   legacy_ok: bool = False) -> None:
    """Make `path` on the node this run's, or raise a ClusterError sentence before anything is written:
    its resolved path must pass node_dir_problem too, it must be absent, empty or marked by the harness
    (or, `legacy_ok`, laid out as the SSH backend left it before markers), and no other run that is still
    live may hold it. Then the marker names this run."""
    where = f"{node} ({getattr(remote, 'where', lambda: remote.name)()})"
    found = inspect_node_dir(remote, path)
    reason = _system_dir_reason(normalise_remote_path(found.resolved)) if found.resolved.startswith("/") else None
    if reason:
        raise ClusterError(f"{where}: dir {path} resolves to {found.resolved}, which {reason}; point dir in {file} "
                           "at a dir of its own that is no link into the system.")
    if found.state == "notdir":
        raise ClusterError(f"{where}: dir {path} is a file, not a directory; give dir in {file} a path of its own.")
    if found.state == "foreign" or found.state == "legacy" and not legacy_ok:
        names = f" ({', '.join(found.sample[:3])}, ...)" if found.sample else ""
        raise ClusterError(f"{where}: dir {path} holds files the harness did not put there{names} and no "
                           f"{NODE_MARKER}; give dir in {file} an empty or new dir of its own, since the harness "
                           "writes and wipes there.")
    holder = (found.marker or {}).get("run") or ""
    if holder and holder != owner:
        harness = marker_harness(found.marker)
        state = harness.state() if harness else "dead"
        if state == "live":
            raise ClusterError(f"{where}: dir {path} is in use by run {holder}, which is still live "
                               f"({harness.describe()}); wait for it to end, or give this run other nodes or dirs.")
        if state == "elsewhere":
            raise ClusterError(f"{where}: dir {path} is held by run {holder} of {harness.host}, whose end this "
                               f"machine cannot check; run `kafkaesque cleanup --run {holder}` there (or delete "
                               f"{path}/{NODE_MARKER} on the node if that run is over).")
    write_node_marker(remote, path, owner, extra)


def write_node_marker(remote, path: str, owner: str, extra: dict[str, Any] | None = None) -> None:
    marker = {"kafkaesque": "a node dir the harness made and may wipe", "dir": path, "run": owner,
              "harness": asdict(this_harness()) if owner else None, "since": time.time(), **(extra or {})}
    remote.run(["mkdir", "-p", path], check=True)
    remote.put(f"{path}/{NODE_MARKER}", (json.dumps(marker, indent=1) + "\n").encode())


def read_node_marker(remote, path: str) -> dict[str, Any] | None:
    """The node dir's marker, or None when there is none (or it cannot be read)."""
    try:
        found = inspect_node_dir(remote, path)
    except ClusterError:
        return None
    return found.marker if found.state == "marked" else None


def release_node_dir(remote, path: str, owner: str) -> None:
    """The run's normal end on one node: its marker stays (the dir remains the harness's) but names no
    run; the list of paused processes goes. Only a marker naming `owner` is touched."""
    marker = read_node_marker(remote, path)
    if marker is None or marker.get("run") != owner:
        return
    remote.run(["rm", "-f", f"{path}/{PAUSED_FILE}"], timeout=20)
    write_node_marker(remote, path, "", {k: v for k, v in marker.items()
                                         if k not in ("kafkaesque", "dir", "run", "harness", "since")})


def record_pause_script(path: str) -> str:
    """Shell text that appends "$p <start time>" to the dir's paused list ($p: the pid just stopped)."""
    f = shlex.quote(f"{path}/{PAUSED_FILE}")
    return f"echo \"$p $(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f20)\" >> {f}"


def forget_pause_script(path: str) -> str:
    f = shlex.quote(f"{path}/{PAUSED_FILE}")
    return f"{{ test -f {f} && sed -i \"/^$p /d\" {f}; true; }}"


def resume_paused_script(path: str) -> str:
    """SIGCONT every process on the paused list that is still the process that was stopped (same start
    time), then drop the list."""
    f = shlex.quote(f"{path}/{PAUSED_FILE}")
    return (f"test -f {f} || exit 0; while read p s; do "
            f"test -r /proc/$p/stat && [ \"$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f20)\" = \"$s\" ] && "
            f"kill -CONT $p && echo resumed $p; done < {f}; rm -f {f}")


def root_qdisc(remote, device: str) -> str:
    """The device's root qdisc as tc shows it ("" without tc): kept in a node's marker at its claim."""
    r = remote.run(["sh", "-c", f"tc qdisc show dev {shlex.quote(device)} root 2>/dev/null | head -n 1"], timeout=20)
    return r.out.strip()


def remove_added_qdisc(remote, marker: dict[str, Any]) -> None:
    """Delete the root qdisc of the marker's device if it is a token bucket (what the net fault adds,
    clusters/netrules.py) and the node had none before the run: never a qdisc the node had of its own."""
    from kafkaesque_harness.clusters.netrules import clear_qdisc

    device = str(marker.get("device") or "eth0")
    if _qdisc_kind(root_qdisc(remote, device)) == "tbf" and _qdisc_kind(str(marker.get("qdisc_before", ""))) != "tbf":
        remote.run(clear_qdisc(device), timeout=20)


def _qdisc_kind(line: str) -> str:
    """"tbf" of "qdisc tbf 8001: root refcnt 2 rate 1Mbit ..." ("" when there is none)."""
    words = line.split()
    return words[1] if len(words) > 1 and words[0] == "qdisc" else ""


# --- local node dirs ----------------------------------------------------------------------------------------
def mark_local_dir(path: str | os.PathLike, owner: str) -> None:
    """A local node dir names its run, so a mount left inside it after a crash can be traced to it."""
    Path(path, LOCAL_MARKER).write_text(owner + "\n")


def local_dir_owner(path: str | os.PathLike) -> str:
    try:
        return Path(path, LOCAL_MARKER).read_text().strip()
    except OSError:
        return ""
