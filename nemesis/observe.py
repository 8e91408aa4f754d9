"""Looking at a node to see whether a fault took effect, or was undone: the evidence the ledger keeps.

Each function asks the node itself, through its Remote or its own answers, never trusts the
exit status of the command that made the fault:

- process_state_within: the process is gone, stopped (state T) or running, per /proc on the node
- probe_tcp: can `src` open a TCP connection to `dst`'s port? "open", "refused" (nothing listens,
  but packets flow) or "timeout" (the packets are dropped: the cut holds)
- probe_from_harness: the same from the harness itself, where the workload's clients run (client-partition)
- node_clock_reading: the node's own wall clock (its state dump's time_ms) against
  ours, with the reading's error bound (half the dump's round trip)
- cached_kib: the page cache size from the node's /proc/meminfo (drop-caches)
- net_state: the qdisc and loss rules in place on a node (the net fault)
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafkaesque_harness.clusters import netrules
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until

PROBE_TIMEOUT_S = 1.0  # a SYN on a live link is answered in under a millisecond here; DROP never answers

# Runs on the source node. Python where the node has it (our nodes do); else bash's /dev/tcp.
_PROBE_PY = ("import socket,sys\n"
             "s=socket.socket(); s.settimeout(float(sys.argv[3]))\n"
             "try:\n s.connect((sys.argv[1], int(sys.argv[2]))); print('open')\n"
             "except socket.timeout: print('timeout')\n"
             "except ConnectionRefusedError: print('refused')\n"
             "except OSError as e: print('error', e.errno)\n")


def probe_script(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    h, p, t = shlex.quote(host), str(int(port)), f"{timeout_s:g}"
    return ["sh", "-c",
            f"if command -v python3 >/dev/null 2>&1; then python3 -c {shlex.quote(_PROBE_PY)} {h} {p} {t}; "
            f"else timeout {t} bash -c 'exec 3<>/dev/tcp/$0/$1' {h} {p} 2>/dev/null && echo open || "
            "{ [ $? -eq 124 ] && echo timeout || echo refused; }; fi"]


def probe_tcp(cluster, src: str, dst: str) -> str:
    """From node `src`, a TCP connect to `dst`'s Kafka port: open, refused, timeout, or error ...."""
    host, port = cluster.address(dst)
    r = cluster.remote(src).run(probe_script(host, port), timeout=PROBE_TIMEOUT_S + 10)
    words = r.out.strip().splitlines()[-1:] if r.out.strip() else []
    return words[0] if words else f"error (exit {r.exit}: {r.err.strip()[-120:]})"


def probe_from_harness(cluster, dst: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """From the harness itself (where the workload's clients run), a TCP connect to `dst`'s address: open,
    refused, timeout, or error ...; what a cut between the clients and one broker must make time out."""
    import socket

    host, port = cluster.address(dst)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return "open"
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        return f"error {e.errno}"


def probe_pairs(cluster, pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Every (src, dst) probe at once; "src->dst" -> result."""
    pairs = list(dict.fromkeys(pairs))
    if not pairs:
        return {}
    with ThreadPoolExecutor(max_workers=min(len(pairs), 16)) as pool:
        results = list(pool.map(lambda sd: probe_tcp(cluster, *sd), pairs))
    return {f"{s}->{d}": r for (s, d), r in zip(pairs, results, strict=True)}


def process_state_within(cluster, node: str, want: tuple[str, ...], timeout_s: float = 5.0) -> str:
    """The node's process state ("running", "paused", "down"), polled until it is one of `want` or the
    time is up (a signal is delivered asynchronously); the last state seen."""
    state = ""

    def reached() -> bool:
        nonlocal state
        state = cluster.process_state(node)
        return state in want

    try:
        wait_until(reached, timeout_s, 0.1, f"{node}'s process becoming {' or '.join(want)}")
    except WaitTimeout:
        pass
    return state


def node_clock_reading(cluster, node: str) -> tuple[float, float] | None:
    """The node's wall clock minus ours, from its own state dump, and that reading's error bound: half
    the dump's round trip, since the node read its clock somewhere inside it (None: it did not answer).
    The round trip is milliseconds on a quiet machine, but a `docker exec` into a busy node can take
    most of a second, and the reading is then off by up to half of that either way."""
    t0 = time.time()
    state = cluster.dump_state(node, include_log=False)
    t1 = time.time()
    if not state or "time_ms" not in state:
        return None
    return round(state["time_ms"] / 1000 - (t0 + t1) / 2, 3), round((t1 - t0) / 2, 3)


def cached_kib(cluster, node: str) -> int | None:
    r = cluster.remote(node).run(["sh", "-c", "sed -n 's/^Cached:[[:space:]]*\\([0-9]*\\).*/\\1/p' /proc/meminfo"])
    try:
        return int(r.out.strip())
    except ValueError:
        return None


def net_state(cluster, node: str, device: str) -> dict[str, Any]:
    """What shapes a node's traffic now: its root qdisc and how many random-loss rules are in our chain."""
    q = cluster.remote(node).run(["sh", "-c", f"tc qdisc show dev {shlex.quote(device)} root"])
    rules = cluster.remote(node).run(netrules.list_rules()).out
    return {"qdisc": q.out.strip()[:120], "loss_rules": sum(1 for line in rules.splitlines() if "statistic" in line),
            "drop_rules": sum(1 for line in rules.splitlines() if line.endswith("-j DROP") and "statistic" not in line)}
