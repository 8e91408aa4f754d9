"""The controller quorum (002 1.2.1, 1.2.2): three (or five) controller processes replicate the
metadata log with Raft; the Raft leader is the active controller. Off unless the controller
is started with `--quorum`; the single controller of controller_server.py is the default.

How it fits together, per controller process:

- one `RaftNode` (raft.py) with a `FileRaftStore` at <data-dir>/raft.log, ticked every 50 ms;
  its messages travel over the internal RPC as the `raft` API, batched per peer;
- committed entries (skipping the leaders' no-ops) are the metadata log. Every controller
  applies them, in log order, to its committed `MetadataImage`; a record's metadata offset is
  its position among them, so a broker epoch (the offset of the registration record) grows
  across fail-overs as it does across restarts;
- only the active controller runs `Controller.handle` and `Controller.tick`, on a working copy
  of the committed image. The records they emit are proposed to Raft, and a request is
  answered only once everything emitted so far is committed (durable on a majority, 002
  1.2.1). A controller becomes active only after its first entry of the term (the no-op) is
  committed, so its copy starts from the whole committed log; when it loses leadership the
  copy is dropped (its uncommitted records may never commit) and waiting requests fail;
- every other controller answers controller requests and `fetch_metadata` with NOT_CONTROLLER
  and the leader's id and address, which brokers follow (server.ControllerClient). Only the
  active controller serves the metadata log, and only committed records: a follower's copy
  may be shorter than what a broker already has.

Partition reassignment, preferred-leader election and `unregister_broker` (PROTOCOL.md 7) are
plain `Controller.handle` APIs, so they reach the active controller like any other request.

Compaction (002 1.2.x): once more than `--snapshot-every` records were applied since the last
snapshot, a controller snapshots its committed image (`MetadataImage.to_snapshot`, with the
metadata end offset) into the Raft core (`RaftNode.compact`), and raft.log is rewritten as that
snapshot plus the entries after it. Metadata offsets stay continuous: `base_offset` is the first
offset `records` still holds (in memory, the records since the previous snapshot are kept for
brokers a little behind). A follower too far behind gets InstallSnapshot and restores the image;
a restarted controller starts from its snapshot plus the tail; a broker fetching from before the
snapshot gets the snapshot instead of records and replaces its own copy with it.

Not yet here (issue #9): changes of the quorum's own membership.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import Coroutine
from typing import Any

from kafkaesque_harness.clusters.broker import hostenv, rpc
from kafkaesque_harness.clusters.broker.controller import Controller
from kafkaesque_harness.clusters.broker.controller_server import (
    ControllerServer,
    JsonLog,
    controller_config,
    controller_events,
    now_ms,
)
from kafkaesque_harness.clusters.broker.listener import Limits, serve
from kafkaesque_harness.clusters.broker.metadata import MetadataImage
from kafkaesque_harness.clusters.broker.raft import (
    LEADER,
    AppendEntries,
    AppendResponse,
    InstallSnapshot,
    Message,
    RaftConfig,
    RaftNode,
    RequestVote,
    SnapshotResponse,
    VoteResponse,
)
from kafkaesque_harness.clusters.broker.raft_store import Entry, FileRaftStore, Snapshot

RAFT_TICK_S = 0.05
# Python processes on a loaded machine stall for tens of milliseconds; Raft's default 0.5-1 s
# election timeout made leaders flap there, so elections wait 1-2 s (still well inside the
# brokers' 6 s session timeout, so a fail-over fences nobody).
HEARTBEAT_MS = 100
ELECTION_TIMEOUT_MS = (1000, 2000)
COMMIT_WAIT_S = 5.0
OUTBOX_LIMIT = 1000  # messages queued for an unreachable peer beyond this are dropped (Raft resends)

_MESSAGE_TYPES: dict[str, type[Message]] = {cls.__name__: cls for cls in (
    RequestVote, VoteResponse, AppendEntries, AppendResponse, InstallSnapshot, SnapshotResponse)}


def parse_quorum(spec: str) -> dict[int, tuple[str, int]]:
    """`1@host:port,2@host:port,3@host:port` -> {1: (host, port), ...}"""
    voters: dict[int, tuple[str, int]] = {}
    for item in spec.split(","):
        node, _, addr = item.strip().partition("@")
        host, _, port = addr.rpartition(":")
        if not node.isdigit() or not host or not port.isdigit():
            raise ValueError(f"quorum member {item!r} is not ID@HOST:PORT (e.g. 1@127.0.0.1:19090)")
        voters[int(node)] = (host, int(port))
    return voters


def encode_message(m: Message) -> dict[str, Any]:
    fields = {k: getattr(m, k) for k in m.__dataclass_fields__}
    if isinstance(m, AppendEntries):
        fields["entries"] = [[e.index, e.term, e.record] for e in m.entries]
    if isinstance(m, InstallSnapshot):
        fields["snapshot"] = [m.snapshot.index, m.snapshot.term, m.snapshot.data]
    return {"type": type(m).__name__, **fields}


def decode_message(d: dict[str, Any]) -> Message:
    fields = dict(d)
    cls = _MESSAGE_TYPES[fields.pop("type")]
    if cls is AppendEntries:
        fields["entries"] = tuple(Entry(i, t, r) for i, t, r in fields["entries"])
    if cls is InstallSnapshot:
        fields["snapshot"] = Snapshot(*fields["snapshot"])
    return cls(**fields)


class QuorumControllerServer(ControllerServer):
    # The base class's RPC listener (listener()) and GetReplicaLogInfo sender are reused;
    # everything that touched the single controller's metadata.log is replaced.
    def __init__(self, args: Any, secret: str):
        self.host, port = args.listen.rsplit(":", 1)
        self.port = int(port)
        self.secret = secret
        self.limits = Limits.from_args(args)
        self.node_id = args.node_id
        self.voters = parse_quorum(args.quorum)
        if self.node_id not in self.voters:
            raise ValueError(f"--node-id {self.node_id} is not in --quorum {args.quorum}")
        os.makedirs(args.data_dir, exist_ok=True)
        self.log = JsonLog(args.log_file, args.node_id, "controller")
        self.events = controller_events(args, self.log)
        self.config = controller_config(args)
        raft_config = RaftConfig(node_id=self.node_id, voters=tuple(sorted(self.voters)),
                                 heartbeat_interval=HEARTBEAT_MS, election_timeout_min=ELECTION_TIMEOUT_MS[0],
                                 election_timeout_max=ELECTION_TIMEOUT_MS[1])
        self.store = FileRaftStore(os.path.join(args.data_dir, "raft.log"))
        self.raft = RaftNode(raft_config, self.store, hostenv.rng(), now=now_ms(), logger=self.log)
        # The metadata log after the last snapshot: committed records in order; a record's
        # offset is base_offset + its index here.
        self.records: list[dict[str, Any]] = []
        self.base_offset = 0
        self.snapshot_end = 0  # the metadata end offset of the last snapshot (>= base_offset)
        self.snapshot_every = int(getattr(args, "snapshot_every", 0) or 0)  # 0: never compact
        self.image = MetadataImage()  # the committed records applied, on every controller
        # The active controller's working copy (committed + proposed), None elsewhere.
        self.controller: Controller | None = None
        self.active_term = 0  # the term the working copy belongs to
        self._noop: tuple[int, int] | None = None  # (term, index) of this leader's no-op
        self._waiters: list[tuple[int, asyncio.Future]] = []  # (metadata end offset, answer)
        self._new_records = asyncio.Event()
        self._log_info_in_flight: set[tuple[tuple[str, int], int]] = set()
        self._broker_clients: dict[tuple[str, int], rpc.RpcClient] = {}
        self._outbox: dict[int, asyncio.Queue] = {}
        self.log({"event": "controller_started", "quorum": args.quorum, "listen": args.listen,
                  "raft_log_entries": self.raft.last_index})

    # --- Raft I/O --------------------------------------------------------------------------
    def process_ready(self) -> None:
        """After every Raft event: send its messages, apply what committed, and notice a change
        of leadership (the only place the working copy is created or dropped)."""
        ready = self.raft.ready()
        if ready.snapshot is not None:
            self.restore_snapshot(ready.snapshot.data)
        for m in ready.messages:
            q = self._outbox.get(m.dst)
            if q is not None and q.qsize() < OUTBOX_LIMIT:
                q.put_nowait(encode_message(m))
        if ready.committed:
            self.apply_committed(ready.committed)
            self.maybe_compact()
        self.check_leadership()

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.records)

    def restore_snapshot(self, data: dict[str, Any]) -> None:
        """A snapshot from the leader (InstallSnapshot) or our own at restart: it replaces the image
        and every record before its end offset."""
        self.image = MetadataImage.from_snapshot(data["image"])
        self.base_offset = self.snapshot_end = int(data["end_offset"])
        self.records = []
        self.log({"event": "metadata_snapshot_restored", "end_offset": self.base_offset})

    def maybe_compact(self) -> None:
        end = self.end_offset
        if self.snapshot_every <= 0 or end - self.snapshot_end <= self.snapshot_every:
            return
        # Everything Raft committed is applied (ready() handed it all over): snapshot there.
        self.raft.compact(self.raft.last_applied, {"end_offset": end, "image": self.image.to_snapshot()})
        # In memory, the records since the previous snapshot stay, so a broker a little behind
        # still gets records rather than the whole image.
        keep_from = self.snapshot_end
        self.records = self.records[keep_from - self.base_offset:]
        self.base_offset, self.snapshot_end = keep_from, end
        self.log({"event": "metadata_compacted", "end_offset": end, "raft_index": self.raft.last_applied})

    def apply_committed(self, entries: list[Entry]) -> None:
        for e in entries:
            if e.record is None:
                continue  # a leader's no-op: not a metadata record
            self.image.apply(self.end_offset, e.record)
            self.records.append(e.record)
        end = self.end_offset
        waiting = []
        for target, fut in self._waiters:
            if end >= target:
                if not fut.done():
                    fut.set_result(True)
            else:
                waiting.append((target, fut))
        self._waiters = waiting
        self._new_records.set()
        self._new_records = asyncio.Event()

    def check_leadership(self) -> None:
        leads = self.raft.role == LEADER
        if self.controller is not None and (not leads or self.raft.current_term != self.active_term):
            self.events({"event": "controller_deactivated", "term": self.raft.current_term,
                      "leader": self.raft.leader_id})
            self.controller = None
            for _, fut in self._waiters:
                if not fut.done():
                    fut.set_result(False)
            self._waiters = []
        if not leads or self.controller is not None:
            return
        term = self.raft.current_term
        if self._noop is None or self._noop[0] != term:
            # Just elected: the first entry of this term in the log is the leader's no-op.
            first = next((i for i in range(self.raft.last_index, 0, -1) if self.raft.term_at(i) != term), 0) + 1
            self._noop = (term, first)
        if self.raft.commit_index >= self._noop[1]:
            # Everything earlier terms left is committed and applied: take over from there.
            # Volatile state (sessions, recoveries) starts afresh, as after a restart.
            self.controller = Controller(self.config, copy.deepcopy(self.image), log=self.events)
            self.controller.start(now_ms())
            self.active_term = self.raft.current_term
            self.events({"event": "controller_activated", "term": self.active_term,
                      "metadata_end_offset": self.end_offset})

    async def peer_sender(self, peer: int) -> None:
        """One connection per peer; whatever queued up meanwhile goes in one call. An unreachable
        peer's messages are dropped: Raft resends from its own state (heartbeats, refusals)."""
        q = self._outbox[peer]
        client = rpc.RpcClient(*self.voters[peer], secret=self.secret, connect_timeout=0.5)
        while True:
            batch = [await q.get()]
            while not q.empty():
                batch.append(q.get_nowait())
            try:
                await client.call("raft", {"messages": batch}, timeout=1.0)
            except rpc.RpcError:
                await asyncio.sleep(0.1)

    def on_raft(self, body: dict[str, Any]) -> dict[str, Any]:
        for d in body["messages"]:
            m = decode_message(d)
            if m.dst == self.node_id and m.src in self.voters:
                self.raft.receive(m)
        self.process_ready()
        return {"error": rpc.NONE}

    # --- the active controller ---------------------------------------------------------------
    def persist(self) -> None:
        """Propose what the state machine emitted (the single controller fsyncs it instead)."""
        if self.controller is None:
            return
        records = self.controller.take_pending()
        if records:
            self.raft.propose_batch(records)
            self.process_ready()

    async def committed(self) -> bool:
        """Wait until everything the working copy holds is committed; False if leadership went."""
        if self.controller is None:
            return False
        target = self.controller.end_offset
        if self.end_offset >= target:
            return True
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((target, fut))
        try:
            return await asyncio.wait_for(fut, COMMIT_WAIT_S)
        except TimeoutError:
            return False

    def not_controller(self) -> dict[str, Any]:
        leader = self.raft.leader_id
        addr = self.voters.get(leader) if leader is not None else None
        return {"error": rpc.NOT_CONTROLLER, "leader_id": leader,
                "leader": f"{addr[0]}:{addr[1]}" if addr else None,
                "message": "not the active controller" if leader != self.node_id else "taking over; retry"}

    async def ticker(self) -> None:
        while True:
            now = now_ms()
            self.raft.tick(now)
            self.process_ready()
            if self.controller is not None:
                self.controller.tick(now)
                self.persist()
                self.send_log_info_requests()
            self.events.flush()
            await asyncio.sleep(RAFT_TICK_S)

    async def fetch_metadata(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.controller is None:
            return self.not_controller()
        offset = int(body.get("offset", 0))
        max_records = int(body.get("max_records", 1000))
        end = self.end_offset
        if offset > end:
            # Cannot happen for a broker that fetched only committed records from active
            # controllers (the active one holds all of them); kept for a broker's damaged copy.
            return {"error": rpc.OFFSET_OUT_OF_RANGE, "records": [], "end_offset": end}
        if offset == end:
            await self.long_poll(body)
        base = self.base_offset
        if offset < base:
            # Compacted away (perhaps while we waited): the broker replaces its image with our
            # last snapshot.
            data = self.raft.snapshot.data
            return {"error": rpc.NONE, "records": [], "end_offset": self.end_offset,
                    "snapshot": {"end_offset": data["end_offset"], "image": data["image"]}}
        records = [[o, self.records[o - base]] for o in range(offset, min(self.end_offset, offset + max_records))]
        return {"error": rpc.NONE, "records": records, "end_offset": self.end_offset}

    def dump(self, include_log: bool) -> dict[str, Any]:
        # The committed view, on every controller, so the dumps of a quorum can be compared.
        state = Controller(self.config, self.image).dump()
        state["active"] = self.controller is not None
        if self.controller is not None:
            state["recoveries_in_progress"] = self.controller.dump()["recoveries_in_progress"]
        state["metadata_end_offset"] = self.end_offset
        state["metadata_snapshot_offset"] = self.base_offset  # metadata_log starts at this offset
        state["raft"] = {"role": self.raft.role, "term": self.raft.current_term, "leader": self.raft.leader_id,
                         "commit_index": self.raft.commit_index, "log_length": self.raft.last_index,
                         "snapshot_index": self.raft.snapshot.index,
                         "voters": sorted(self.voters)}
        if include_log:
            state["metadata_log"] = list(self.records)
        state["time_ms"] = int(hostenv.wall_s() * 1000)
        return state

    async def dispatch(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        if api == "raft":
            return self.on_raft(body)
        if api == "dump_state":
            return {"error": rpc.NONE, "state": self.dump(bool(body.get("include_log", False)))}
        if api == "fetch_metadata":
            return await self.fetch_metadata(body)
        if self.controller is None:
            return self.not_controller()
        response = self.controller.handle(api, body, now_ms())
        self.persist()
        if not await self.committed():
            return self.not_controller() if self.controller is None else {
                "error": rpc.REQUEST_TIMED_OUT, "message": "metadata records not committed in time"}
        return response

    def background(self) -> list[Coroutine[Any, Any, None]]:
        """The ticker, and one sender per peer voter (its outbox keeps the order of what it is sent)."""
        self._outbox = {p: asyncio.Queue() for p in self.voters if p != self.node_id}
        return [*(self.peer_sender(p) for p in self._outbox), self.ticker()]

    def close_storage(self) -> None:
        self.store.close()


def run_controller(args: Any) -> int:
    """The controller role's entry point: the single controller (controller_server.py), or, with
    --quorum, a member of the Raft quorum. Here, above both, so neither imports the other back."""
    quorum = bool(getattr(args, "quorum", None))

    def check() -> None:
        if quorum and args.node_id not in parse_quorum(args.quorum):
            raise ValueError(f"--node-id {args.node_id} is not a member of --quorum {args.quorum}")

    server_class = QuorumControllerServer if quorum else ControllerServer
    return serve("controller", args, check, lambda secret: server_class(args, secret))
