"""A small step-by-step scenario runner for the documents' worked examples, on real broker processes.

A scenario is a script of steps against a TestCluster (conftest.py): produce and remember
what was acknowledged, kill -9 a broker, "power-cut" it, restart it, pause it, wait until the
controller shows a given leader/ISR/ELR. Every step is written to a transcript, which a
failing assertion prints along with the node logs, so a reader sees where the story went
another way than the document's.

The power cut (001 5.1.1, a lossy unclean shutdown) is emulated here without the lossy file
system of the fault tooling: after the SIGKILL, each segment file is cut to the length it
had at its last fsync, as the broker's own flush log (`<data dir>/logs/flush.log`) recorded
it. The checkpoints and the metadata log are written with fsync, so they survive as they
would. This shortcut stays inside the scenario tests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from kafkaesque_harness.clusters.broker.log.flush import last_synced_lengths


class Scenario:
    def __init__(self, cluster, topic: str = "s", partition: int = 0):
        self.cluster = cluster
        self.topic, self.partition = topic, partition
        self.transcript: list[str] = []
        self.acked: dict[bytes, int] = {}  # value -> offset, for every acknowledged acks=all send
        self.t0 = time.monotonic()
        self.unreachable: set[int] = set()  # paused or killed: clients must not bootstrap from them
        self.final: dict[int, dict[str, Any] | None] = {}  # replica states kept by snapshot()

    # --- bookkeeping ---------------------------------------------------------------------------
    def note(self, text: str) -> None:
        self.transcript.append(f"{time.monotonic() - self.t0:6.2f}s  {text}")

    def story(self) -> str:
        return "scenario transcript:\n  " + "\n  ".join(self.transcript)

    def check(self, condition: bool, message: str) -> None:
        """assert, with the transcript and the node logs in the message."""
        assert condition, f"{message}\n{self.story()}\n{self.cluster.logs()}"

    # --- the controller's view ------------------------------------------------------------------
    def partition_state(self) -> dict[str, Any]:
        return self.cluster.partition(self.topic, self.partition)

    def wait_partition(self, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = 30) -> dict:
        self.note(f"wait until {what}")
        p = self.cluster.wait_for(lambda: (lambda s: s if predicate(s) else None)(self.partition_state()),
                                  timeout=timeout, what=what + "\n" + self.story())
        self.note(f"  -> leader={p['leader']} isr={p['isr']} elr={p['elr']} "
                  f"last_known_elr={p['last_known_elr']} leader_epoch={p['leader_epoch']}")
        return p

    def wait_broker_fenced(self, b: int, fenced: bool = True, timeout: float = 30) -> None:
        self.note(f"wait until broker {b} is {'fenced' if fenced else 'unfenced'}")
        self.cluster.wait_for(lambda: any(x["broker_id"] == b and x["fenced"] == fenced
                                          for x in self.cluster.controller_state()["brokers"]),
                              timeout=timeout, what=f"broker {b} fenced={fenced}\n{self.story()}")

    # --- faults -------------------------------------------------------------------------------
    def kill(self, b: int) -> None:
        self.note(f"kill -9 broker {b}")
        self.cluster.kill(b)
        self.unreachable.add(b)

    def power_cut(self, b: int) -> dict[str, int]:
        """kill -9, then every segment loses the bytes written after its last fsync.
        Returns {file: bytes lost}."""
        self.cluster.kill(b)
        self.unreachable.add(b)
        logs_dir = self.cluster.root / f"broker-{b}" / "logs"
        lost = {}
        for rel, synced in last_synced_lengths(str(logs_dir)).items():
            path = logs_dir / rel
            if synced is None or not path.exists():
                continue
            size = path.stat().st_size
            if size > synced:
                os.truncate(path, synced)
                lost[rel] = size - synced
        self.note(f"power cut broker {b} (kill -9, unsynced bytes dropped: {lost or 'none'})")
        return lost

    def stop(self, b: int) -> None:
        self.note(f"controlled shutdown of broker {b} (SIGTERM)")
        rc = self.cluster.stop(b)
        self.unreachable.add(b)
        self.check(rc == 0, f"broker {b} exited {rc} from its controlled shutdown")

    def restart(self, b: int) -> None:
        self.note(f"start broker {b}")
        self.cluster.restart(b)
        self.unreachable.discard(b)

    def pause(self, b: int) -> None:
        self.note(f"SIGSTOP broker {b}")
        self.cluster.pause(b)
        self.unreachable.add(b)

    def resume(self, b: int) -> None:
        self.note(f"SIGCONT broker {b}")
        self.cluster.resume(b)
        self.unreachable.discard(b)

    # --- clients -------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> list[str]:
        """The brokers a client can reach (a paused one accepts TCP and never answers)."""
        return [f"127.0.0.1:{p}" for b, p in self.cluster.broker_ports.items() if b not in self.unreachable]

    def produce(self, values: list[str], acks: str | int = "all") -> list[str]:
        """Send one record at a time (so each outcome is known); returns the values acknowledged.
        Only acks=all acknowledgements are remembered as promises the cluster must keep."""
        p = KafkaProducer(bootstrap_servers=self.bootstrap, acks=acks, retries=0,
                          request_timeout_ms=5000, max_block_ms=10000)
        ok = []
        try:
            for v in values:
                try:
                    md = p.send(self.topic, value=v.encode(), partition=self.partition).get(timeout=15)
                except Exception:  # noqa: BLE001 - not acknowledged: no promise made
                    continue
                ok.append(v)
                if acks == "all":
                    self.acked[v.encode()] = md.offset
        finally:
            p.close(timeout=5)
        self.note(f"produce {len(values)} records acks={acks}: {len(ok)} acknowledged "
                  f"({values[0]}..{values[-1]})")
        return ok

    def read_committed(self, timeout: float = 30) -> dict[int, bytes]:
        """Everything below the HWM, read through a real consumer from the current leader."""
        def attempt() -> tuple[dict[int, bytes]] | None:
            c = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                              group_id=None, request_timeout_ms=5000)
            try:
                tp = TopicPartition(self.topic, self.partition)
                c.assign([tp])
                end = c.end_offsets([tp])[tp]
                c.seek_to_beginning(tp)
                out: dict[int, bytes] = {}
                deadline = time.monotonic() + 10
                while c.position(tp) < end and time.monotonic() < deadline:
                    for records in c.poll(timeout_ms=300).values():
                        out.update((r.offset, r.value) for r in records)
                return (out,) if c.position(tp) >= end else None  # a tuple: an empty log is an answer too
            except Exception:  # noqa: BLE001 - a leader change under the consumer: try again
                return None
            finally:
                c.close()

        (got,) = self.cluster.wait_for(attempt, timeout=timeout, interval=0.5, what="a full read up to the HWM")
        self.note(f"read {len(got)} records up to the HWM")
        return got

    def lost_acked(self, read: dict[int, bytes]) -> list[str]:
        """Acknowledged values not at their acknowledged offset."""
        return sorted(v.decode() for v, o in self.acked.items() if read.get(o) != v)

    def check_nothing_acked_lost(self, read: dict[int, bytes]) -> None:
        self.check(self.lost_acked(read) == [], f"acknowledged records lost: {self.lost_acked(read)}")

    def final_reads(self) -> dict[int, bytes]:
        """A scenario's end, while its cluster is still up: every replica's state kept (snapshot), and
        everything below the HWM read (read_committed)."""
        self.snapshot()
        return self.read_committed()

    # --- openings the documents share ------------------------------------------------------------
    def three_replicas_then_2_paused(self) -> None:
        """001 5.2.2's opening: the topic with RF 3 and min ISR 2, led by 1 with all three in the ISR;
        a0..a19 sent; then 2 paused until it leaves the ISR (not into the ELR: the ISR still meets min ISR)."""
        self.cluster.create_topic(self.topic, partitions=1, rf=3, min_isr=2)
        self.wait_partition(lambda p: p["leader"] == 1 and p["isr"] == [1, 2, 3], "Leader=1, ISR=[1,2,3], ELR=[]")
        self.produce([f"a{i}" for i in range(20)])
        self.pause(2)
        self.wait_partition(lambda p: p["isr"] == [1, 3], "2 leaves the ISR (not into the ELR: ISR still at min ISR)")

    # --- replicas' own logs ----------------------------------------------------------------------
    def snapshot(self) -> None:
        """Keep every replica's state (with its physical log) for assertions after the cluster is down."""
        self.final = {b: self.replica(b) for b in self.cluster.broker_ports}

    def replica(self, b: int) -> dict[str, Any] | None:
        if b in self.final:
            return self.final[b]
        st = self.cluster.broker_state(b)
        if st is None:
            return None
        for p in st["partitions"]:
            if p["topic"] == self.topic and p["partition"] == self.partition:
                return p
        return None

    def physical_log(self, b: int) -> list[tuple[int, int, str]]:
        r = self.replica(b)
        return [tuple(x) for x in r["log"]] if r else []

    def wait_replicas_caught_up(self, brokers: list[int], timeout: float = 40) -> int:
        """Until every named replica's LEO equals the leader's and their HWMs agree; returns the HWM."""
        def caught_up():
            reps = [self.replica(b) for b in brokers]
            if any(r is None for r in reps):
                return None
            leos, hwms = {r["leo"] for r in reps}, {r["hwm"] for r in reps}
            return hwms.pop() if len(leos) == 1 and len(hwms) == 1 else None
        self.note(f"wait until replicas {brokers} have one LEO and one HWM")
        hwm = self.cluster.wait_for(lambda: (lambda h: (h,) if h is not None else None)(caught_up()),
                                    timeout=timeout, what=f"replicas {brokers} caught up\n{self.story()}")[0]
        self.note(f"  -> HWM {hwm}")
        return hwm

    def logs_below(self, b: int, offset: int) -> list[tuple[int, int, str]]:
        return [x for x in self.physical_log(b) if x[0] < offset]
