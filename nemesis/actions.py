"""The one implementation of each fault's act, observation and heal, shared by every nemesis.

A nemesis decides what to hit and when (random faults, scenarios, the protocol nemesis, the
controller and membership nemeses); how a node is killed, paused, cut off, power-cut or
skewed, how we see that it happened, and how it is undone is written once, here, and every
step goes through the run's FaultLedger (nemesis/ledger.py):

- kill, stop, pause, lossy_crash: the cluster's own process control; observed in /proc on
  the node (gone, or state T); `start` and `resume` heal every such fault on the node and
  see the process running again. `start` also notes whether a killed node still leads any
  partition (the leadership should have moved while it was down).
- cut, heal_cuts: iptables DROP rules in our chain (clusters/netrules.py); the rules on every
  node are always the union of the active cuts and loss rules, so one fault's heal never
  undoes another's; observed by a TCP probe across each cut (it must time out) and, after
  the heal, back (it must not).
- degrade, restore_net: a tbf bandwidth limit and random loss (the net fault); observed by
  reading the qdisc and rules back.
- slow_link, restore_links: a tbf bandwidth limit alone on a node's egress (a slow object store:
  every answer it sends is held to the rate); observed by reading the qdisc back.
- cut_clients, heal_client_cuts: iptables DROP on one node of every packet from the address the
  harness's clients reach it from (ClientCuts), in the same chain as the cuts; observed by a TCP connect
  from the harness itself, which must time out, and after the heal must not.
- set_clock, reset_clock: the node's clock control file (clusters/clock_preload.py); observed
  by the node's own clock, read from its state dump.
- stall_producer, resume_producers: a client fault, not a node's: one of the workload's own client
  processes stops inside an open transaction (workloads/stalls.py, through the control the runner
  hands over); applied when a client holds the stall (what it held is the evidence), observed when
  it stood still past the transaction timeout (measured), healed when it goes on (and what its
  transaction came to: committed, fenced, aborted).
- heal_everything: the run's final heal: everything the ledger still holds active.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from kafkaesque_harness.clusters import netrules
from kafkaesque_harness.clusters.remote import shell_join
from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until
from kafkaesque_harness.history import FaultRecord
from kafkaesque_harness.nemesis.grudge import Grudge, describe
from kafkaesque_harness.nemesis.ledger import FaultLedger
from kafkaesque_harness.nemesis.observe import (
    net_state,
    node_clock_reading,
    probe_from_harness,
    probe_pairs,
    process_state_within,
)

PROCESS_FAULTS = ("kill", "stop", "lossy-crash", "disk")  # the node's process is down until started
HEALED_BY_START = PROCESS_FAULTS + ("pause",)
CLOCK_FAULTS = ("clock", "clock-jump", "clock-strobe")
CLOCK_TOLERANCE_S = 0.2  # beyond each reading's own error bound (half its round trip); the faults shift clocks by seconds
CLOCK_MAX_ERROR_S = 1.0  # a reading less sure than this proves nothing either way
CLOCK_SETTLE_S = 3.0     # how long a clock heal may take to show in the node's readings
STALL_FAULT = "stall-producer"
STALL_ENTRY_S = 20.0    # how long a stall waits for a client to reach a stall point (several txns a second do)
STALL_OUTCOME_S = 30.0  # after it resumes, the longest its transaction takes to end (sends, commit retried, abort)


def _reads(offset_s: float, want_s: float, error_s: float) -> bool:
    """Whether a clock reading (offset, error bound) shows the node's clock `want_s` off ours."""
    return error_s <= CLOCK_MAX_ERROR_S and abs(offset_s - want_s) <= CLOCK_TOLERANCE_S + error_s


class ProducerStalls(Protocol):
    """What the stall-producer fault needs of the workload: the control its clients obey
    (workloads/stalls.py ProducerStallControl; the runner hands it over when the workload has one)."""

    txn_timeout_s: float

    def request(self, seconds: float, process: int | None = None, transactional_ids: Collection[str] | None = None,
                fault: int | None = None) -> Any:
        """A Stall: its `entered`, `resumed` and `finished` Events, `evidence`, `stalled_s`, `outcome`, `release()`."""

    def withdraw(self, stall: Any) -> bool: ...

    def release_all(self) -> list[Any]: ...


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


class FaultActions:
    def __init__(self, cluster, ledger: FaultLedger, topic: str = "queue", stalls: ProducerStalls | None = None):
        self.cluster = cluster
        self.ledger = ledger
        self.topic = topic
        self.stalls = stalls  # the workload's producer stalls; None: its clients have none
        self._held: dict[int, Any] = {}                               # record id -> the Stall a client holds
        self._cuts: dict[int, Grudge] = {}                            # record id -> who drops whom
        self._loss: dict[int, tuple[str, list[str], float]] = {}       # record id -> (node, peers, probability)
        self._slow: dict[int, str] = {}                               # record id -> the node whose egress is slowed
        self._client_cuts: dict[int, tuple[str, str]] = {}             # record id -> (broker, clients' address)
        self._network_ready = False
        self._lock = threading.RLock()  # the nemesis thread and the final heal may overlap at the end

    # --- processes -------------------------------------------------------------------------------
    def kill(self, node: str, by: str, detail: Any = None) -> FaultRecord:
        with self.ledger.applying("kill", [node], by, detail) as rec:
            self.cluster.kill(node)
        self._observe_process(rec, node, "down")
        return rec

    def stop(self, node: str, by: str, detail: Any = None) -> FaultRecord:
        """A controlled shutdown (SIGTERM, then the broker's own shutdown): a fault of kind stop."""
        with self.ledger.applying("stop", [node], by, detail) as rec:
            self.cluster.stop(node)
        self._observe_process(rec, node, "down")
        return rec

    def pause(self, node: str, by: str, detail: Any = None) -> FaultRecord:
        with self.ledger.applying("pause", [node], by, detail) as rec:
            self.cluster.pause(node)
        self._observe_process(rec, node, "paused")
        return rec

    def _observe_process(self, rec: FaultRecord, node: str, want: str) -> None:
        try:
            state = process_state_within(self.cluster, node, (want,))
        except Exception as e:  # noqa: BLE001 - a node that cannot be asked gives no evidence
            self.ledger.observed(rec, False, error=f"could not read {node}'s process state ({_error(e)})")
            return
        self.ledger.observed(rec, state == want, {"process": state},
                             f"{node}'s process is {state}, not {want}")

    def start(self, node: str, note_leadership: bool = True) -> list[FaultRecord]:
        """Start the node's process (a no-op when it runs); heals every kill, stop, power cut and disk
        fault on it, and a pause too when the process now runs (a paused process that was killed)."""
        owed = self.ledger.active(HEALED_BY_START, node)
        if note_leadership and any(r.fault in PROCESS_FAULTS for r in owed):
            self._note_leadership(node, [r for r in owed if r.fault in PROCESS_FAULTS])
        self.cluster.start(node)
        # A live paused process stays paused through a start (it is running, as far as a start can tell):
        # polling for "running" alone would wait out the whole timeout on it.
        return self._heal_process(node, owed, ("running",), timeout_s=10.0, also_final=("paused",))

    def resume(self, node: str) -> list[FaultRecord]:
        owed = self.ledger.active(("pause",), node)
        self.cluster.resume(node)
        return self._heal_process(node, owed, ("running", "down"), timeout_s=5.0)

    def _heal_process(self, node: str, owed: list[FaultRecord], want: tuple[str, ...], timeout_s: float,
                      also_final: tuple[str, ...] = ()) -> list[FaultRecord]:
        """Wait (up to timeout_s) for the process to reach a state of `want`, or one of `also_final`, which
        ends the wait but is no heal, then record each owed fault healed or not; a pause left in place by
        a start is not recorded at all (resume heals it)."""
        try:
            state = process_state_within(self.cluster, node, want + also_final, timeout_s)
        except Exception as e:  # noqa: BLE001
            state = f"unknown ({_error(e)})"
        healed = []
        for rec in owed:
            if rec.fault == "pause" and state == "paused" and "paused" in also_final:
                continue  # start() of a live paused process leaves it paused: resume heals it
            self.ledger.healed(rec, state in want, {"process": state},
                               f"{node}'s process is {state} after the heal, not {' or '.join(want)}")
            healed.append(rec)
        return healed

    def _note_leadership(self, node: str, recs: list[FaultRecord]) -> None:
        """Evidence that a kill reached the protocol: after its broker has been down a while, it should
        lead no partition of the test's topic (best effort: the cluster may be answering slowly)."""
        try:
            node_id = self.cluster.node_id(node)
            still = sorted(p.partition for p in self.cluster.partitions(self.topic) if p.leader == node_id)
        except Exception:  # noqa: BLE001 - evidence, not a step of the fault
            return
        for rec in recs:
            self.ledger.note(rec, still_leads_at_restart=still)

    def lossy_crash(self, node: str, by: str, detail: Any = None) -> FaultRecord:
        """SIGKILL the broker, then make its lossy file system drop every byte not yet fsynced (a power
        cut); observed by the process being gone and the file system's report of what it dropped."""
        with self.ledger.applying("lossy-crash", [node], by, detail) as rec:
            report = self._crash_and_drop(node)
        try:
            state = process_state_within(self.cluster, node, ("down",))
        except Exception as e:  # noqa: BLE001
            state = f"unknown ({_error(e)})"
        ok = state == "down" and report.get("event") == "dropped"
        self.ledger.observed(rec, ok, {"process": state, "lossyfs": report},
                             f"process {state}, lossy file system reported {report}")
        return rec

    def _crash_and_drop(self, node: str) -> dict[str, Any]:
        r = self.cluster.remote(node)
        pidfile, status = self.cluster.lossyfs_files(node)
        before = len(r.run(["cat", status]).out.strip().splitlines())
        self.cluster.kill(node)
        if not r.signal_daemon(pidfile, signal.SIGUSR1):
            raise RuntimeError(f"the lossy file system of {node} could not be signalled (pid file {pidfile})")

        def reported() -> list[str] | None:
            lines = r.run(["cat", status]).out.strip().splitlines()
            return lines if len(lines) > before else None

        try:
            return json.loads(wait_until(reported, 10, 0.05, f"the lossy file system's report on {node}")[-1])
        except WaitTimeout:
            return {"event": "no report from lossyfs within 10 s"}

    # --- the network -----------------------------------------------------------------------------
    def prepare_network(self) -> None:
        """Our iptables chain on every node (idempotent); a nemesis that cuts or degrades calls it in setup,
        so a node that cannot take the rules stops the run before it starts."""
        with self._lock:
            for node in self.cluster.nodes():
                for argv in netrules.chain_setup():
                    self.cluster.remote(node).run(argv, check=True)
            self._network_ready = True

    def cut(self, grudge: Grudge, by: str, nodes: list[str] | None = None, detail: Any = None) -> FaultRecord:
        """Drop packets along a grudge (node -> the nodes it will not hear). `nodes` are the ones the cut is
        about (heal_cuts(node) undoes the cuts that name it); by default every node that drops something."""
        involved = sorted(n for n, drops in grudge.items() if drops)
        detail = {"grudge": {n: sorted(d) for n, d in grudge.items() if d}, "description": describe(grudge),
                  **(detail or {})}
        rec = self.ledger.request("partition", nodes or involved, by, detail)
        if not involved:
            self.ledger.applied(rec, False, "the partition's shape cuts nothing on these nodes (no grudge)")
            return rec
        with self._lock:
            self._cuts[rec.id] = grudge
            try:
                self._apply_rules()
            except BaseException as e:
                self.ledger.applied(rec, False, _error(e))
                self._cuts.pop(rec.id)
                self._reapply_quietly()  # no half-applied rule of a failed cut may stay behind
                raise
            self.ledger.applied(rec)
        seen = probe_pairs(self.cluster, _cut_pairs(grudge))
        cut = [k for k, v in seen.items() if v == "timeout"]
        self.ledger.observed(rec, len(cut) == len(seen), {"probes": seen},
                             "traffic still flows across the cut: " + ", ".join(
                                 f"{k} {v}" for k, v in seen.items() if v != "timeout"))
        return rec

    def _remove_rules(self, owed: list[FaultRecord], active: dict[int, Any]) -> dict[int, Any]:
        """Drop the owed records' entries from `active` (a table of the rules in force) and apply what is left
        (the caller holds the lock); the entries removed, by record id. If the rules cannot be applied, each owed
        record is healed as failed and the error raised."""
        removed = {r.id: active.pop(r.id) for r in owed}
        try:
            self._apply_rules()
        except BaseException as e:
            for rec in owed:
                self.ledger.healed(rec, False, error=f"the rules could not be removed: {_error(e)}")
            raise
        return removed

    def heal_cuts(self, node: str | None = None, by: str | None = None) -> list[FaultRecord]:
        """Undo the active cuts (those naming `node`, or asked for by `by`; all when neither is given),
        then probe back across each: the packets must flow again."""
        with self._lock:
            owed = [r for r in self.ledger.active(("partition",), node, by) if r.id in self._cuts]
            if not owed:
                return []
            removed = self._remove_rules(owed, self._cuts)
            still = self._union()
        for rec in owed:
            pairs = [(s, d) for s, d in _cut_pairs(removed[rec.id]) if s not in still.get(d, set())]
            seen = probe_pairs(self.cluster, pairs)
            blocked = [f"{k} {v}" for k, v in seen.items() if v == "timeout" or v.startswith("error")]
            self.ledger.healed(rec, not blocked, {"probes": seen}, "still cut after the heal: " + ", ".join(blocked))
        return owed

    def degrade(self, node: str, rate: str, loss: float, by: str) -> FaultRecord:
        """A bandwidth limit on the node's egress and random loss of what it receives from every peer."""
        peers = [self.cluster.address(n)[0] for n in self.cluster.nodes() if n != node]
        device = self.cluster.net_device(node)
        with self.ledger.applying("net", [node], by, {"rate": rate, "loss": loss}) as rec, self._lock:
            self._loss[rec.id] = (node, peers, loss)
            try:
                self._apply_rules()
                self.cluster.remote(node).run(netrules.bandwidth_limit(device, rate), check=True)
            except BaseException:
                self._loss.pop(rec.id)
                self._reapply_quietly()
                self.cluster.remote(node).run(netrules.clear_qdisc(device))
                raise
        state = net_state(self.cluster, node, device)
        ok = "tbf" in state["qdisc"] and state["loss_rules"] > 0
        self.ledger.observed(rec, ok, state, f"the node shows qdisc {state['qdisc']!r} and "
                                             f"{state['loss_rules']} loss rule(s)")
        return rec

    def restore_net(self, by: str | None = None) -> list[FaultRecord]:
        with self._lock:
            owed = [r for r in self.ledger.active(("net",), by=by) if r.id in self._loss]
            for rec in owed:
                self._loss.pop(rec.id)
            if owed:
                self._apply_rules()
            degraded = {n for n, _, _ in self._loss.values()} | set(self._slow.values())
        for rec in owed:
            node = rec.nodes[0]
            state = self._unshaped(node, degraded)
            ok = node in degraded or ("tbf" not in state["qdisc"] and state["loss_rules"] == 0)
            self.ledger.healed(rec, ok, state, f"the node still shows qdisc {state['qdisc']!r} and "
                                               f"{state['loss_rules']} loss rule(s)")
        return owed

    def _unshaped(self, node: str, still_shaped: set[str]) -> dict[str, Any]:
        """Clear the node's qdisc unless another fault still shapes it; the node's traffic state read back."""
        device = self.cluster.net_device(node)
        if node not in still_shaped:
            self.cluster.remote(node).run(netrules.clear_qdisc(device))
        return net_state(self.cluster, node, device)

    def slow_link(self, node: str, rate: str, by: str, detail: Any = None) -> FaultRecord:
        """A tbf bandwidth limit on the node's egress and nothing else (no loss): for a store, every answer
        it sends is held to `rate`."""
        device = self.cluster.net_device(node)
        with self.ledger.applying("slow-link", [node], by, {"rate": rate, **(detail or {})}) as rec, self._lock:
            self.cluster.remote(node).run(netrules.bandwidth_limit(device, rate), check=True)
            self._slow[rec.id] = node
        state = net_state(self.cluster, node, device)
        self.ledger.observed(rec, "tbf" in state["qdisc"], state, f"the node shows qdisc {state['qdisc']!r}, not tbf")
        return rec

    def restore_links(self, by: str | None = None) -> list[FaultRecord]:
        """Undo the active slow links (of `by`; all when None); a node another fault still shapes keeps its
        qdisc. Healed when the qdisc read back is no tbf."""
        with self._lock:
            owed = [r for r in self.ledger.active(("slow-link",), by=by) if r.id in self._slow]
            for rec in owed:
                self._slow.pop(rec.id)
            shaped = set(self._slow.values()) | {n for n, _, _ in self._loss.values()}
        for rec in owed:
            node = rec.nodes[0]
            state = self._unshaped(node, shaped)
            self.ledger.healed(rec, node in shaped or "tbf" not in state["qdisc"], state,
                               f"the node still shows qdisc {state['qdisc']!r}")
        return owed

    def cut_clients(self, node: str, by: str, detail: Any = None) -> FaultRecord:
        """Cut `node` off from the harness's own clients, not from the other nodes: its rules drop every packet
        from the address the clients reach it from (ClientCuts). No client of the workload (nor the harness's
        own Metadata lookups) reaches it, while it still hears its peers and the store: a group coordinator so
        cut stays up and leads while its members' heartbeats and commits are lost (issue 40), a diskless broker
        goes on writing to the store (issue 43's client-partition). Probed from this process, the clients'
        side; heal_client_cuts undoes it."""
        from kafkaesque_harness.nemesis.requirements import ClientCuts, why_not

        why = why_not(self.cluster, ClientCuts)
        address = None if why else self.cluster.client_address(node)
        rec = self.ledger.request("client-partition", [node], by, {"clients": address, **(detail or {})})
        if not address:
            self.ledger.applied(rec, False, f"{node} cannot be cut off from the clients: "
                                            f"{why or 'the address the clients reach it from is not known'}")
            return rec
        with self._lock:
            self._client_cuts[rec.id] = (node, address)
            try:
                self._apply_rules()
            except BaseException as e:
                self.ledger.applied(rec, False, _error(e))
                self._client_cuts.pop(rec.id)
                self._reapply_quietly()
                raise
            self.ledger.applied(rec)
        seen = probe_from_harness(self.cluster, node)
        self.ledger.observed(rec, seen == "timeout", {"probes": {f"clients->{node}": seen}},
                             f"the harness still reaches {node}: {seen}")
        return rec

    def heal_client_cuts(self, node: str | None = None, by: str | None = None) -> list[FaultRecord]:
        """Undo the active client cuts (of `node`, of `by`; all when neither is given), then connect from the
        harness again: it must reach each node, unless another client cut still holds it."""
        with self._lock:
            owed = [r for r in self.ledger.active(("client-partition",), node, by) if r.id in self._client_cuts]
            if not owed:
                return []
            removed = self._remove_rules(owed, self._client_cuts)
            still = {n for n, _ in self._client_cuts.values()}
        for rec in owed:
            cut = removed[rec.id][0]
            seen = "still cut by another fault" if cut in still else probe_from_harness(self.cluster, cut)
            self.ledger.healed(rec, cut in still or seen in ("open", "refused"), {"probes": {f"clients->{cut}": seen}},
                               f"the harness does not reach {cut} after the heal: {seen}")
        return owed

    def _union(self) -> Grudge:
        union: Grudge = {}
        for g in self._cuts.values():
            for n, drops in g.items():
                union.setdefault(n, set()).update(drops)
        return union

    def _reapply_quietly(self) -> None:
        try:
            self._apply_rules()
        except Exception:  # noqa: BLE001 - the caller raises the first error; the final heal removes the chain
            pass

    def _apply_rules(self) -> None:
        """Every node's chain becomes exactly the union of the active cuts and loss rules, all nodes at once
        (one exec per node: flush, then add)."""
        if not self._network_ready:
            self.prepare_network()
        union = self._union()
        (flush,) = netrules.heal()
        commands = {}
        for node in self.cluster.nodes():
            rules = [shell_join(flush)]
            rules += [shell_join(a) for a in netrules.drop_from(self.cluster.address(n)[0] for n in union.get(node, ()))]
            for owner, peers, p in self._loss.values():
                if owner == node:
                    rules += [shell_join(a) for a in netrules.random_loss_from(peers, p)]
            rules += [shell_join(a) for a in netrules.drop_from(address for broker, address in
                                                                 self._client_cuts.values() if broker == node)]
            commands[node] = ["sh", "-c", " && ".join(rules)]
        on_nodes(self.cluster, commands, check=True)

    # --- clocks ----------------------------------------------------------------------------------
    def set_clock(self, node: str, fault: str, control_text: str, expect_s: tuple[float, ...], by: str,
                  detail: Any = None) -> FaultRecord:
        """Write the node's clock control file; observed when the node's own clock reads one of `expect_s`
        (seconds off ours; two values for a strobe) within CLOCK_TOLERANCE_S beyond the reading's error bound."""
        first = node_clock_reading(self.cluster, node)  # a remote host's clock may differ a little anyway
        baseline = first[0] if first and first[1] <= CLOCK_TOLERANCE_S else None  # only a tight reading
        with self.ledger.applying(fault, [node], by, detail) as rec:
            self.cluster.remote(node).put(self.cluster.clock_file(node), control_text.encode())
        samples = self._clock_samples(node, baseline, samples=10 if len(expect_s) > 1 else 3)
        seen, error = [s for s, _ in samples], [e for _, e in samples]
        hit = any(_reads(s, want, err) for s, err in samples for want in expect_s if want)
        self.ledger.observed(rec, hit, {"clock_offset_s": seen, "error_s": error, "expected_s": list(expect_s),
                                        "baseline_s": baseline},
                             f"the node's clock read {seen} s off (each within {error} s), not {list(expect_s)}"
                             if seen else f"{node} did not answer with its clock")
        return rec

    def reset_clock(self, node: str) -> list[FaultRecord]:
        """Back to the real time (offset 0); heals every clock fault on the node."""
        from kafkaesque_harness.clusters.clock_preload import offset_file_text

        owed = self.ledger.active(CLOCK_FAULTS, node)
        self.cluster.remote(node).put(self.cluster.clock_file(node), offset_file_text(0).encode())
        baseline = next((r.evidence.get("baseline_s") for r in owed if r.evidence.get("baseline_s") is not None), None)
        # The node's preload re-reads the control file lazily (at most every 10 ms of its own clock calls),
        # so a first reading may still show the old offset: healed once three readings in a row are back
        # within tolerance, sampled for up to CLOCK_SETTLE_S (a real run's heal was judged on its first,
        # stale reading alone and made the verdict unknown).
        # A reading counts within its own error bound: a docker exec into a loaded node took up to 0.7 s
        # and read a healed clock 0.3 s off for seconds (a default clock run was unknown for it).
        samples: list[tuple[float, float]] = []
        deadline = time.monotonic() + CLOCK_SETTLE_S
        while True:
            got = self._clock_samples(node, baseline, samples=1)
            samples += got
            ok = len(samples) >= 3 and all(_reads(s, 0.0, err) for s, err in samples[-3:])
            if ok or not got or time.monotonic() > deadline:
                break
        seen, error = [s for s, _ in samples], [e for _, e in samples]
        for rec in owed:
            self.ledger.healed(rec, ok, {"clock_offset_s": seen, "error_s": error},
                               f"the node's clock still reads {seen} s off (each within {error} s)"
                               if seen else f"{node} did not answer with its clock")
        return owed

    def _clock_samples(self, node: str, baseline: float | None, samples: int) -> list[tuple[float, float]]:
        """(offset less the baseline, error bound) of each reading."""
        out = []
        for _ in range(samples):
            reading = node_clock_reading(self.cluster, node)
            if reading is None:
                break  # a paused or dead node: asking again only waits out more timeouts
            out.append((round(reading[0] - (baseline or 0.0), 3), reading[1]))
            time.sleep(0.03)
        return out

    # --- client processes -----------------------------------------------------------------------
    def producer_stalls_unavailable(self) -> str | None:
        """Why no producer can be stalled (one clause), or None."""
        return None if self.stalls is not None else "the workload's clients hold no transactional producer"

    def stall_refusal(self, what: str) -> str | None:
        """One sentence refusing `what` (a fault, a scenario, a move) that stalls producers here, or None."""
        why = self.producer_stalls_unavailable()
        return f"{what} stalls a transactional producer of the workload, and {why}; run it with --workload txn" \
            if why else None

    @property
    def txn_timeout_s(self) -> float:
        """The stallable producers' transaction timeout (what a stall must outlast)."""
        if self.stalls is None:
            raise RuntimeError(f"no producer stalls: {self.producer_stalls_unavailable()}")
        return self.stalls.txn_timeout_s

    def stall_producer(self, seconds: float, by: str, process: int | None = None,
                       transactional_ids: Collection[str] | None = None, detail: Any = None) -> FaultRecord:
        """Ask the workload's clients for a stall of `seconds` at the next stall point of a matching process
        (`process`; one holding one of `transactional_ids`; any). Applied once a client holds it, with what
        it holds as the evidence; not applied, with the reason, when none did within STALL_ENTRY_S. The
        client goes on by itself when the seconds are up; resume_producers records the rest."""
        timeout_s = self.txn_timeout_s
        asked = {"process": "any" if process is None else process, "seconds": seconds, "txn_timeout_s": timeout_s}
        if transactional_ids is not None:
            asked["transactional_ids"] = sorted(transactional_ids)
        rec = self.ledger.request(STALL_FAULT, [], by, {**asked, **(detail or {})})
        stall = self.stalls.request(seconds, process, transactional_ids, fault=rec.id)
        if not stall.entered.wait(STALL_ENTRY_S) and self.stalls.withdraw(stall):
            which = (f"process {process}" if process is not None else "no process" if transactional_ids is None
                     else f"no process of transactional id {', '.join(sorted(transactional_ids)) or '(none)'}")
            self.ledger.applied(rec, False, f"{which} held an open transaction with a delivered send at a stall "
                                            f"point within {STALL_ENTRY_S:g} s, so nothing stalled")
            return rec
        if not stall.entered.wait(STALL_ENTRY_S):  # claimed, so entering at once: this is a broken client
            self.ledger.applied(rec, False, "a client claimed the stall but never entered it")
            return rec
        with self._lock:
            self._held[rec.id] = stall
        self.ledger.applied(rec)
        self.ledger.note(rec, **stall.evidence)
        return rec

    def resume_producers(self, by: str | None = None, release: bool = False) -> list[FaultRecord]:
        """Wait for each stalled process (of `by`; all when None) to go on at the end of its stall, or end
        the stall now (`release`, the final heal). Observed: it stood still past the transaction timeout,
        measured by the client; healed: it resumed, with what its transaction came to."""
        with self._lock:
            owed = [(r, self._held[r.id]) for r in self.ledger.active((STALL_FAULT,), by=by) if r.id in self._held]
        if release and by is None and self.stalls is not None:
            self.stalls.release_all()  # and withdraw any request still open
        for rec, stall in owed:
            if release:
                stall.release()
            if not stall.resumed.wait(stall.seconds + 5.0):  # at most its seconds are left
                stall.release()
                stall.resumed.wait(5.0)
            timeout_s = float(rec.detail["txn_timeout_s"])
            stood = stall.stalled_s
            self.ledger.observed(rec, stood is not None and stood > timeout_s,
                                 {**stall.evidence, "stalled_s": stood, "txn_timeout_s": timeout_s},
                                 f"the process stood still {stood} s, not past the transaction timeout of "
                                 f"{timeout_s:g} s" if stood is not None else "the process never resumed")
            outcome = stall.outcome if stall.finished.wait(STALL_OUTCOME_S) else {
                "result": "none", "error": f"its transaction had not ended {STALL_OUTCOME_S:g} s after the stall"}
            self.ledger.healed(rec, stall.resumed.is_set(), {"stalled_s": stood, "outcome": outcome},
                               "the stalled process did not resume")
            with self._lock:
                self._held.pop(rec.id, None)
        return [rec for rec, _ in owed]

    # --- heals -----------------------------------------------------------------------------------
    def heal(self, by: str | None = None) -> list[str]:
        """Undo everything still active that `by` asked for (everything, when None): the network first
        (a restarted broker cut off from its controller could not register), then paused and downed
        processes, then clocks, then stalled client producers. Every part is tried; the errors come back as sentences."""
        errors: list[str] = []

        def attempt(what: str, fn) -> None:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - heal the rest, then report
                errors.append(f"{what}: {_error(e)}")

        # The final heal also undoes faults whose apply failed half-way (a signal sent, then an error; a
        # clock file written, then an error): they may have acted, and every undo is a no-op elsewhere.
        failed = [r for r in self.ledger.records() if r.applied is False] if by is None else []

        def nodes_of(kinds: tuple[str, ...]) -> list[str]:
            return sorted({n for r in [*self.ledger.active(kinds, by=by), *failed] if r.fault in kinds
                           for n in r.nodes})

        attempt("reconnect the network", lambda: self.heal_cuts(by=by))
        attempt("reconnect the clients", lambda: self.heal_client_cuts(by=by))
        attempt("restore the network's rate and loss", lambda: self.restore_net(by=by))
        attempt("restore the slowed links", lambda: self.restore_links(by=by))
        for node in nodes_of(("pause",)):
            attempt(f"resume {node}", lambda node=node: self.resume(node))
        controllers = set(self.cluster.controller_nodes())
        for node in sorted(nodes_of(PROCESS_FAULTS), key=lambda n: (n not in controllers, n)):
            # controllers first: a broker registers with one
            attempt(f"start {node}", lambda node=node: self.start(node, note_leadership=by is not None))
        for node in nodes_of(CLOCK_FAULTS):
            attempt(f"reset the clock of {node}", lambda node=node: self.reset_clock(node))
        # last: a stalled client's transaction ends against the healed cluster
        attempt("resume stalled producers", lambda: self.resume_producers(by=by, release=True))
        return errors

    def heal_everything(self) -> list[str]:
        """The run's final heal: everything still active, whoever asked for it, then our iptables chain
        off every node."""
        errors = self.heal()
        if self._network_ready:
            try:
                on_nodes(self.cluster, {n: netrules.remove_chain()[0] for n in self.cluster.nodes()})
                self._network_ready = False
            except Exception as e:  # noqa: BLE001
                errors.append(f"remove our iptables chain: {_error(e)}")
        return errors


def resumed(records: list[FaultRecord]) -> list[dict[str, Any]]:
    """What resume_producers saw of each stall, for a nemesis op's completion."""
    return [{"fault": r.id, "stalled_s": r.heal_evidence.get("stalled_s"), "outcome": r.heal_evidence.get("outcome")}
            for r in records]


def _cut_pairs(grudge: Grudge) -> list[tuple[str, str]]:
    """One probe per node that drops something: from one of the nodes it drops, to it."""
    return [(sorted(drops)[0], node) for node, drops in sorted(grudge.items()) if drops]


def on_nodes(cluster, commands: dict[str, list[str]], check: bool = False) -> None:
    """Run one command per node, on all nodes in parallel."""
    if not commands:
        return
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        for f in [pool.submit(cluster.remote(n).run, argv, 30.0, check) for n, argv in commands.items()]:
            f.result()
