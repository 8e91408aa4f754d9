"""The controller's asyncio shell: the RPC listener, the durable metadata log, the fencing timer.

All protocol decisions are in controller.py; this module only moves bytes, keeps time and
makes records durable: records the state machine emits are appended and fsynced to
<data-dir>/metadata.log before the request is answered and before any broker can fetch
them (002 1.2.1).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Coroutine
from typing import Any

from kafkaesque_harness.clusters.broker import hostenv, rpc
from kafkaesque_harness.clusters.broker.controller import Controller, ControllerConfig
from kafkaesque_harness.clusters.broker.listener import Limits, Listener, start_serving
from kafkaesque_harness.clusters.broker.metadata import MetadataImage, MetadataLogFile
from kafkaesque_harness.clusters.broker.trace import EventSink, default_trace_path, open_sink

TICK_S = 0.1


class JsonLog:
    """One JSON object per line: the state-change log (000 point 7a in spirit)."""

    def __init__(self, path: str | None, node: int, role: str):
        self.node, self.role = node, role
        self._fh = open(path, "a", buffering=1) if path else sys.stderr

    def __call__(self, event: dict[str, Any]) -> None:
        # ts is the node's wall clock (a clock fault shifts it); mono is the host's monotonic clock, which
        # no fault touches and which the harness shares on one host: it places the line on the run's timeline.
        line = {"ts": round(hostenv.wall_s(), 6), "mono": round(hostenv.monotonic_s(), 6), "node": self.node,
                "role": self.role, **event}
        self._fh.write(json.dumps(line, default=str) + "\n")
        self._fh.flush()


def now_ms() -> int:
    # Monotonic: session timeouts must not jump with a skewed wall clock (the clock nemesis).
    return hostenv.monotonic_ms()


def controller_events(args: Any, log: JsonLog) -> EventSink:
    """The controller's event sink: its state-change log and its protocol trace (trace.py)."""
    return open_sink(log, getattr(args, "trace_file", None) or default_trace_path(args.log_file), args.node_id,
                     "controller", variants=sorted(getattr(args, "variant", []) or []))


def controller_config(args: Any) -> ControllerConfig:
    """The controller's settings from its command line (__main__.py), for the single controller and the quorum."""
    return ControllerConfig(
        node_id=args.node_id,
        session_timeout_ms=args.session_timeout_ms,
        unclean_leader_election=args.unclean_leader_election,
        unclean_recovery_strategy=args.unclean_recovery_strategy,
        unclean_recovery_timeout_ms=args.unclean_recovery_timeout_ms,
        variants=frozenset(args.variant),
    )


class ControllerServer:
    def __init__(self, args: Any, secret: str):
        self.host, port = args.listen.rsplit(":", 1)
        self.port = int(port)
        self.secret = secret
        self.limits = Limits.from_args(args)
        os.makedirs(args.data_dir, exist_ok=True)
        self.log = JsonLog(args.log_file, args.node_id, "controller")
        self.events = controller_events(args, self.log)
        self.metadata = MetadataLogFile(os.path.join(args.data_dir, "metadata.log"))
        image = MetadataImage()
        for offset, record in enumerate(self.metadata.records):
            image.apply(offset, record)
        config = controller_config(args)
        self.controller = Controller(config, image, log=self.events)
        self.controller.start(now_ms())
        self._new_records = asyncio.Event()
        self._log_info_in_flight: set[tuple[tuple[str, int], int]] = set()
        self._broker_clients: dict[tuple[str, int], rpc.RpcClient] = {}
        self.log({"event": "controller_started", "metadata_end_offset": self.metadata.end_offset,
                  "listen": args.listen})

    def persist(self) -> None:
        records = self.controller.take_pending()
        if not records:
            return
        first = self.metadata.append(records, fsync=True)
        assert first + len(records) == self.controller.end_offset, "metadata log and image diverged"
        self._new_records.set()
        self._new_records = asyncio.Event()

    async def ticker(self) -> None:
        while True:
            self.controller.tick(now_ms())
            self.persist()
            self.send_log_info_requests()
            self.events.flush()
            await asyncio.sleep(TICK_S)

    def send_log_info_requests(self) -> None:
        """Unclean recovery (001 5.3): GetReplicaLogInfo to each candidate the state machine names,
        one request in flight per (partition, broker), retried on the next tick when unanswered."""
        for key, bid, host, port in self.controller.log_info_requests():
            if (key, bid) in self._log_info_in_flight:
                continue
            self._log_info_in_flight.add((key, bid))
            asyncio.create_task(self._ask_log_info(key, bid, host, port))

    async def _ask_log_info(self, key: tuple[str, int], bid: int, host: str, port: int) -> None:
        try:
            client = self._broker_clients.get((host, port))
            if client is None:
                client = self._broker_clients[(host, port)] = rpc.RpcClient(host, port, secret=self.secret)
            reply = await client.call("get_replica_log_info", {"topic": key[0], "partition": key[1]}, timeout=1.0)
            if self.controller is not None:  # in a quorum, leadership may have moved while we waited
                self.controller.on_replica_log_info(key, bid, reply, now_ms())
                self.persist()
        except rpc.RpcError:
            await asyncio.sleep(0.5)  # a broker that is down: ask again later, not in a tight loop
        finally:
            self._log_info_in_flight.discard((key, bid))

    async def long_poll(self, body: dict[str, Any]) -> None:
        """A metadata fetch at the end of the log waits for the next record, up to its max_wait_ms (10 s at most)."""
        wait_s = min(int(body.get("max_wait_ms", 0)), 10_000) / 1000
        if wait_s > 0:
            try:
                await asyncio.wait_for(self._new_records.wait(), wait_s)
            except TimeoutError:
                pass

    async def fetch_metadata(self, body: dict[str, Any]) -> dict[str, Any]:
        offset = int(body.get("offset", 0))
        max_records = int(body.get("max_records", 1000))
        if offset > self.metadata.end_offset:
            # The broker holds records this log does not: its copy must be cut back.
            return {"error": rpc.OFFSET_OUT_OF_RANGE, "records": [], "end_offset": self.metadata.end_offset}
        if offset == self.metadata.end_offset:
            await self.long_poll(body)
        records = self.controller.records_since(self.metadata.records, offset, max_records)
        return {"error": rpc.NONE, "records": records, "end_offset": self.metadata.end_offset}

    async def dispatch(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        if api == "fetch_metadata":
            return await self.fetch_metadata(body)
        if api == "dump_state":
            state = self.controller.dump()
            state["time_ms"] = int(hostenv.wall_s() * 1000)
            return {"error": rpc.NONE, "state": state}
        response = self.controller.handle(api, body, now_ms())
        self.persist()
        return response

    def listener(self) -> Listener:
        """The controller's port: the internal RPC only (listener.py refuses Kafka frames here)."""
        return Listener(self.limits, self.secret, self.log, self.dispatch)

    async def run(self) -> int:
        server, stop = await start_serving(self.listener(), self.host, self.port, self.log)
        tasks = [asyncio.create_task(c) for c in self.background()]
        await stop.wait()
        for t in tasks:
            t.cancel()
        server.close()
        self.persist()
        self.close_storage()
        self.log({"event": "controller_stopped"})
        self.events.flush()
        return 0

    def background(self) -> list[Coroutine[Any, Any, None]]:
        """What runs beside the listener until the controller stops: the ticker."""
        return [self.ticker()]

    def close_storage(self) -> None:
        self.metadata.close()
