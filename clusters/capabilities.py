"""What each node of a cluster allows, probed through its Remote at set-up (issue 10 item 4).

One POSIX shell script per node (no Python needed there, so it works on any machine a
cluster file names) answers six questions, one line each:

- iptables:     `iptables -w -S INPUT` runs for the node's user (partition, net's loss)
- tc:           `tc qdisc show dev eth0` runs (net's bandwidth limit)
- netem:        a netem qdisc can be added to eth0 and removed again (delay, duplication,
                reordering); not probed where the cluster says not to (NetDevice: the local
                cluster, whose nodes share this host's eth0)
- fuse:         /dev/fuse is a readable and writable character device and fusermount3 is
                installed (the lossy file system behind lossy-crash)
- cap_sys_time: CAP_SYS_TIME is in the effective set (reported only: our clock faults shift a
                process's clock through an LD_PRELOAD library and never need it)
- preload:      the node's process is dynamically linked (its /proc/<pid>/exe has a PT_INTERP
                program header), so an LD_PRELOAD library such as the clock preload can act in it;
                a static binary (tansu's static-pie build, say) runs no preload (reported only)
- sigstop:      the node's process (found by its pid file or the cluster file's pid command)
                may be signalled, and a SIGSTOP really stops a process there (kill, pause, disk)

`probe_cluster` returns node -> capability -> Capability(ok, detail); `capability_table`
renders it for the run's output; `report_capabilities` does both for the runner and keeps
the result on the cluster (`cluster.capabilities`), where nemesis/requirements.py reads it to
refuse, before the test starts, a fault a node cannot do.
"""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from kafkaesque_harness.clusters.base import DEFAULT_NET_DEVICE

CAPABILITIES = ("iptables", "tc", "netem", "fuse", "cap_sys_time", "preload", "sigstop")
CAP_SYS_TIME_BIT = 25  # linux/capability.h
NET_DEVICE = DEFAULT_NET_DEVICE  # the device the net fault shapes where a node names none of its own

# Each check prints "<name>\t<yes|no>\t<detail>". `check NAME CMD...` runs CMD and reports its last
# line of output as the detail when it fails (the reason), nothing when it works.
_PRELUDE = r"""
check() {
  name=$1; shift
  if out=$("$@" 2>&1); then printf '%s\tyes\t\n' "$name"
  else printf '%s\tno\t%s\n' "$name" "$(printf '%s' "$out" | tr -s '\n' | tail -n 1)"; fi
}
"""
_FUSE = ("test -c /dev/fuse || { echo 'no /dev/fuse device'; exit 1; }; "
         "test -r /dev/fuse -a -w /dev/fuse || { echo \"/dev/fuse is not readable and writable by $(id -un)\"; "
         "exit 1; }; command -v fusermount3 >/dev/null || { echo 'fusermount3 is not installed'; exit 1; }")
_CAP_SYS_TIME = (r"c=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status); "
                 "test -n \"$c\" || { echo 'no CapEff line in /proc/self/status'; exit 1; }; "
                 f"test $(( (0x$c >> {CAP_SYS_TIME_BIT}) & 1 )) -eq 1 || "
                 "{ echo \"the effective capabilities ($c) lack CAP_SYS_TIME\"; exit 1; }")


def _sigstop(pid_command: str) -> str:
    return (f"p=$({pid_command}); p=$(printf '%s' \"$p\" | head -n 1 | tr -dc 0-9); "
            "test -n \"$p\" || { echo 'the node has no running process (its pid is unknown)'; exit 1; }; "
            "kill -0 \"$p\" 2>&1 || exit 1; "
            # a signal is delivered asynchronously: look for the stopped state for up to 2 s
            "sleep 30 & s=$!; kill -STOP $s; i=0; while [ $i -lt 20 ]; do "
            "st=$(sed -n 's/^State:[[:space:]]*//p' /proc/$s/status); case $st in T*) break;; esac; "
            "sleep 0.1; i=$((i + 1)); done; kill -CONT $s; kill $s; "
            "case $st in T*) ;; *) echo \"a SIGSTOP did not stop a process (state ${st:-unknown})\"; exit 1;; esac")


def _preload(pid_command: str) -> str:
    """Whether the node's process has a PT_INTERP program header (type 3), read with od from its ELF header:
    without one the kernel maps no dynamic loader, and LD_PRELOAD is never read."""
    return (f"p=$({pid_command}); p=$(printf '%s' \"$p\" | head -n 1 | tr -dc 0-9); "
            "test -n \"$p\" || { echo 'the node has no running process (its pid is unknown)'; exit 1; }; "
            "f=/proc/$p/exe; x=$(readlink $f); test -r $f || { echo \"cannot read $f\"; exit 1; }; "
            "n() { od -An -t u$1 -j $2 -N $1 $f | tr -d ' '; }; "
            "if [ \"$(n 1 4)\" = 2 ]; then off=$(n 8 32); ent=$(n 2 54); num=$(n 2 56); "
            "else off=$(n 4 28); ent=$(n 2 42); num=$(n 2 44); fi; "
            "i=0; while [ $i -lt ${num:-0} ]; do [ \"$(n 4 $((off + i * ent)))\" = 3 ] && exit 0; i=$((i + 1)); done; "
            "echo \"$x is a static binary (no PT_INTERP program header): LD_PRELOAD cannot act in it\"; exit 1")


def _unavailable(name: str, why: str) -> str:
    return f"printf '%s\\tno\\t%s\\n' {name} {shlex.quote(why)}"


def probe_script(pid_command: str | None, device: str = NET_DEVICE, netem_unavailable: str | None = None) -> str:
    """The shell script that probes one node; `pid_command` prints the node's pid; netem is tried unless
    `netem_unavailable` says why not."""
    d = shlex.quote(device)
    lines = [_PRELUDE,
             "check iptables iptables -w -S INPUT",
             f"check tc tc qdisc show dev {d}"]
    if netem_unavailable is None:
        lines.append(f"check netem sh -c {shlex.quote(f'tc qdisc add dev {d} root netem delay 0ms && tc qdisc del dev {d} root')}")
    else:
        lines.append(_unavailable("netem", netem_unavailable))
    lines.append(f"check fuse sh -c {shlex.quote(_FUSE)}")
    lines.append(f"check cap_sys_time sh -c {shlex.quote(_CAP_SYS_TIME)}")
    if pid_command:
        lines.append(f"check preload sh -c {shlex.quote(_preload(pid_command))}")
        lines.append(f"check sigstop sh -c {shlex.quote(_sigstop(pid_command))}")
    else:
        lines.append(_unavailable("preload", "the cluster does not say how to find the node's pid"))
        lines.append(_unavailable("sigstop", "the cluster does not say how to find the node's pid"))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Capability:
    ok: bool
    detail: str = ""  # why not, when not


def parse_probe(output: str) -> dict[str, Capability]:
    """The probe script's lines as capabilities; a capability with no line is unknown, so not available."""
    found: dict[str, Capability] = {}
    for line in output.splitlines():
        parts = line.split("\t", 2)
        if len(parts) >= 2 and parts[0] in CAPABILITIES and parts[1] in ("yes", "no"):
            found[parts[0]] = Capability(parts[1] == "yes", parts[2].strip() if len(parts) > 2 else "")
    return {c: found.get(c, Capability(False, "the probe gave no answer")) for c in CAPABILITIES}


def probe_node(cluster, node: str) -> dict[str, Capability]:
    """One node's capabilities, asked through its Remote (HasRemotes) about its own device (NetDevice)."""
    script = probe_script(cluster.pid_command(node), device=cluster.net_device(node),
                          netem_unavailable=cluster.netem_probe_unavailable())
    r = cluster.remote(node).run(["sh", "-c", script], timeout=60)
    if r.exit in (124, 125, 255) and not r.out.strip():  # the node did not answer at all
        why = (r.err.strip().splitlines() or [f"exit {r.exit}"])[-1]
        return {c: Capability(False, f"the node did not answer the probe ({why})") for c in CAPABILITIES}
    return parse_probe(r.out)


def probe_cluster(cluster) -> dict[str, dict[str, Capability]]:
    """Every node's capabilities, probed in parallel (one round trip per node)."""
    nodes = cluster.nodes()
    with ThreadPoolExecutor(max_workers=max(len(nodes), 1)) as pool:
        results = list(pool.map(lambda n: probe_node(cluster, n), nodes))
    return dict(zip(nodes, results, strict=True))


def capability_table(caps: dict[str, dict[str, Capability]]) -> str:
    """A plain-text table (one row per node), then one line per distinct reason something is missing."""
    header = ["node", *CAPABILITIES]
    rows = [[node, *("yes" if c[k].ok else "no" for k in CAPABILITIES)] for node, c in caps.items()]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    reasons: dict[tuple[str, str], list[str]] = {}
    for node, c in caps.items():
        for k in CAPABILITIES:
            if not c[k].ok:
                reasons.setdefault((k, c[k].detail), []).append(node)
    for (k, detail), nodes in reasons.items():
        lines.append(f"  no {k} on {', '.join(nodes)}: {detail or 'no reason given'}")
    return "\n".join(lines)


def capabilities_json(caps: dict[str, dict[str, Capability]]) -> dict[str, dict[str, Any]]:
    return {node: {k: asdict(v) for k, v in c.items()} for node, c in caps.items()}


def report_capabilities(cluster, log=print) -> dict[str, dict[str, Any]]:
    """Probe (unless the backend already did at its set-up), print the table, keep it on the cluster;
    returns the JSON form for test.json."""
    caps = cluster.capabilities or probe_cluster(cluster)
    cluster.capabilities = caps
    log("node capabilities (probed at set-up):\n" + capability_table(caps))
    return capabilities_json(caps)
