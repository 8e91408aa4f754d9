"""Protocol-aware fault scenarios: faults timed against the cluster's own state, as data (issue 8).

Random faults find shallow bugs; the protocol's deep flaws need a fault at the moment the
protocol is weakest: kill the leader just after the ISR shrank to one, power-cut the last
ISR member, restart a follower and kill the leader before it catches up. A scenario is a
list of steps that bind roles to nodes from the cluster's own metadata ("L is partition
0's leader"), act on them (kill, lossy-crash, pause, isolate, controlled stop, restart)
and wait for the protocol to react ("until the ISR is [L]", "until L is fenced"), each
wait with a timeout. It runs inside a normal test: the workload keeps going, every step
is recorded in the history as a nemesis op (`scenario-<step>`, with the nodes and what
was seen), and the run's final heal restarts, resumes and reconnects whatever the
scenario left down.

    kafkaesque run --nemesis scenario:last-replica-standing --cluster docker ...
    kafkaesque run --nemesis scenario:my-scenario.toml ...     # your own, as data (below)

Steps (`Step.do`): bind (a role: leader, follower, successor: the ISR member the controller elects
when the leader goes, any broker, other-leader: the leader of another partition of the topic, held by
no bound name, which becomes the scenario's partition; txn-coordinator and group-coordinator: the
broker coordinating the workload's transactional ids or consumer group, found the way clients find
it, as the leader of the key's __transaction_state or __consumer_offsets partition), wait (a condition on the
partition or a broker: isr-is, in-isr, not-in-isr, leader-is, leader-is-not, no-leader,
has-leader, fenced, unfenced, log-reaches: the node's log end offset has reached each
named node's), kill, lossy-crash, pause, resume, stop (controlled shutdown), start,
isolate (cut one node off from every other), cut (one node from one other, or from the
controllers, both ways), heal (one node's cuts, or all), sleep; and two steps on the workload's
own clients rather than a node: stall-producer (a client process stops inside an open transaction
for the transaction timeout plus `seconds`; with a node, a process whose transactional id that
broker coordinates: nemesis/actions.py stall_producer, workloads/stalls.py) and resume-producer (wait
until it goes on, and record what its transaction came to). A wait that times out, or a stall no
process could take, ends the scenario there (recorded, not an error of the run): the protocol did not go
where the scenario needed it, which the detection table counts separately from "no
anomaly".
"""

from __future__ import annotations

import random
import re
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkaesque_harness.clusters.waiting import WaitTimeout, wait_until
from kafkaesque_harness.history import BEYOND_BUDGET, Op
from kafkaesque_harness.nemesis import grudge
from kafkaesque_harness.nemesis.actions import PROCESS_FAULTS, resumed
from kafkaesque_harness.nemesis.base import NemesisBase, NemesisRefused
from kafkaesque_harness.nemesis.plan import Plan, PlanStep
from kafkaesque_harness.nemesis.requirements import IsolatedNodes, StateDumps, can, steps_refusal


@dataclass(frozen=True)
class Step:
    do: str
    node: str = ""            # a bound name ("L"), or a node name ("broker-2")
    role: str = ""            # bind: one of ROLES
    until: str = ""           # wait: the condition's name
    nodes: tuple[str, ...] = ()  # wait isr-is: the bound names that must make up the ISR
    peer: str = ""            # cut: the other side, a bound name, a node name or "controllers"
    seconds: float = 30.0     # wait: timeout; sleep: duration; stall-producer: how far past the txn timeout


@dataclass(frozen=True)
class Scenario:
    name: str
    doc: str
    steps: tuple[Step, ...]
    needs_isolated_nodes: bool = False   # partitions or lossy crashes: docker or local-netns
    targets: tuple[str, ...] = ()        # the broker variants it exists to catch


# --- the DSL -------------------------------------------------------------------------------------------
def bind(name: str, role: str) -> Step:
    return Step("bind", node=name, role=role)


def wait(until: str, node: str = "", nodes: tuple[str, ...] = (), timeout: float = 30.0) -> Step:
    return Step("wait", node=node, until=until, nodes=tuple(nodes), seconds=timeout)


def act(do: str, node: str = "") -> Step:
    return Step(do, node=node)


def sleep(seconds: float) -> Step:
    return Step("sleep", seconds=seconds)


def cut(node: str, peer: str) -> Step:
    """Cut `node` off from `peer` only (both ways); `peer` "controllers" is every controller."""
    return Step("cut", node=node, peer=peer)


STALL_PAST_TIMEOUT_S = 3.0  # a stall's default length past the transaction timeout


def stall_producer(of: str = "", past_timeout_s: float = STALL_PAST_TIMEOUT_S) -> Step:
    """A client process stops inside an open transaction for its transaction timeout plus `past_timeout_s`;
    `of`: a bound broker, and then a process whose transactional id that broker coordinates (any when "")."""
    return Step("stall-producer", node=of, seconds=past_timeout_s)


CONTROLLERS = "controllers"
ACTIONS = ("kill", "lossy-crash", "pause", "resume", "stop", "start", "isolate", "cut", "heal", "stall-producer",
           "resume-producer")
CLIENT_ACTIONS = ("stall-producer", "resume-producer")  # on the workload's clients, not on a node
CONDITIONS = ("isr-is", "in-isr", "not-in-isr", "leader-is", "leader-is-not", "no-leader", "has-leader",
              "fenced", "unfenced", "log-reaches")

# The set-up of the power-loss scenarios: S cut off (it falls behind), F restarted cleanly (its
# log is synced up to then), later L too (synced further), so a power cut leaves L holding the most.
L_SYNCED_FURTHER_THAN_F = (
    bind("L", "leader"), bind("F", "follower"), bind("S", "follower"),
    act("isolate", "S"), wait("isr-is", nodes=("L", "F")), sleep(2),
    act("stop", "F"), act("start", "F"), wait("in-isr", "F", timeout=60), sleep(3),
    act("stop", "L"), act("start", "L"), wait("in-isr", "L", timeout=60), sleep(2))

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario(
        "unclean-election",
        "004, last section (and Jepsen 2013): a follower is cut off and falls out of the ISR while the "
        "others keep acknowledging; then the whole ISR dies and only the stale follower is left. With "
        "unclean.leader.election.enable it leads and the writes acknowledged in its absence are gone; "
        "by default the partition waits for a complete replica.",
        (bind("L", "leader"), bind("F", "follower"), bind("S", "follower"),
         act("isolate", "S"), wait("not-in-isr", "S"), sleep(3),
         act("kill", "L"), act("kill", "F"), wait("fenced", "L"), wait("fenced", "F"),
         act("heal", "S"), sleep(8), act("start", "L"), act("start", "F"), wait("has-leader")),
        needs_isolated_nodes=True, targets=("unclean-election",)),
    Scenario(
        "last-replica-standing",
        "002 2.4.2 / PROTOCOL.md 9.4: the ISR shrinks to the leader (two followers cut off one after "
        "the other), then the leader loses power and its unsynced writes. Without the ELR it is the "
        "only candidate and the others truncate to its shortened log; with the ELR the follower that "
        "left last (complete up to the frozen HWM) leads.",
        (bind("L", "leader"), bind("F1", "follower"), bind("F2", "follower"),
         act("isolate", "F1"), wait("not-in-isr", "F1"), sleep(2),
         act("isolate", "F2"), wait("isr-is", nodes=("L",)), sleep(2),
         act("lossy-crash", "L"), wait("fenced", "L"), act("heal"), sleep(5),
         act("start", "L"), wait("has-leader"), wait("in-isr", "L", timeout=60)),
        needs_isolated_nodes=True, targets=("no-elr",)),
    Scenario(
        "elr-clean-recovery",
        "001 5.2.2: the ISR shrinks to the leader, the leader and sole ISR member loses power, the "
        "follower that left the ISR last (in the ELR) comes back and must lead; then the old leader "
        "restarts without its unsynced data and catches up. Nothing acknowledged may be lost. Without "
        "the ELR the lone ISR member stays the only candidate and leads from its shortened log. (The "
        "unclean-election variant elects like the default here: an ELR member is alive when it leads.)",
        (bind("L", "leader"), bind("F1", "follower"), bind("F2", "follower"),
         act("isolate", "F1"), wait("not-in-isr", "F1"), sleep(2),
         act("isolate", "F2"), wait("isr-is", nodes=("L",)), sleep(2),
         act("lossy-crash", "L"), wait("fenced", "L"), act("heal", "F2"), wait("leader-is", "F2"),
         act("start", "L"), act("heal"), wait("in-isr", "L", timeout=60)),
        needs_isolated_nodes=True, targets=("no-elr",)),
    Scenario(
        "hw-truncation-then-election",
        "004, 'HW truncation followed by immediate leader election': with a third replica cut off, "
        "the leader L stops answering just after a write, the follower A restarts (a controlled "
        "restart: it stays a leader candidate in the ELR) before learning the HW that covers it, and "
        "L dies. A truncating to its checkpointed HW loses what L acknowledged last.",
        (bind("L", "leader"), bind("A", "follower"), bind("C", "follower"),
         act("isolate", "C"), wait("isr-is", nodes=("L", "A")), sleep(2),
         act("pause", "L"), act("stop", "A"), wait("fenced", "L"), act("start", "A"), wait("leader-is", "A"),
         act("kill", "L"), act("start", "L"), act("heal"), wait("in-isr", "L", timeout=60)),
        needs_isolated_nodes=True, targets=("truncate-to-hw",)),
    Scenario(
        "balanced-recovery",
        "001 5.3.3: both ISR members lose power (beyond the durability contract: acknowledged writes may "
        "be lost, silently they may not). F restarted cleanly early (its log is synced up to then), L "
        "later (synced further), so after the power cuts L holds more. F returns first: L, still in the "
        "ELR, is waited for; when L returns too, both are in the LastKnownELR and the balanced unclean "
        "recovery asks each for its log and elects the highest (last epoch, end offset), L, and reports "
        "it as a potential data-loss event. Without the ELR, F is the last ISR member and leads from its "
        "shorter log the moment it is back, reporting nothing.",
        (*L_SYNCED_FURTHER_THAN_F, act("lossy-crash", "L"), wait("not-in-isr", "L"), act("lossy-crash", "F"), wait("no-leader"),
         act("start", "F"), sleep(5), act("start", "L"), wait("has-leader", timeout=60),
         act("heal", "S"), wait("in-isr", "L", timeout=60), wait("in-isr", "F", timeout=60)),
        needs_isolated_nodes=True, targets=("no-elr",)),
    Scenario(
        "power-loss-all-replicas",
        "004, 'divergence after power loss of all replicas': every replica loses power, each keeping a "
        "different synced prefix (S cut off early and synced least, F restarted cleanly early, L later, "
        "so L holds the most). They return in the worst order, S, then F, then L. With leader epochs "
        "the replicas that come back truncate to the leader's log and converge; truncating to the "
        "checkpointed HW instead, a replica keeps records past the new leader's log beside the new "
        "leader's own writes at the same offsets, for good. Beyond the fault budget: acknowledged "
        "writes may be lost, silently they may not (each unclean recovery must be reported). Run it "
        "with --min-isr 1, 004's setting: L then leaves the ISR without entering the ELR, so the "
        "balanced recovery's only candidate is the less complete F. With min ISR 2 the ELR keeps L "
        "a candidate, L leads and nothing diverges (the protocol's fix at work).",
        (*L_SYNCED_FURTHER_THAN_F, act("lossy-crash", "L"), wait("not-in-isr", "L"), act("lossy-crash", "F"), act("lossy-crash", "S"),
         wait("no-leader"), act("heal"),
         act("start", "S"), sleep(3), act("start", "F"), sleep(5), act("start", "L"), wait("has-leader", timeout=60),
         wait("in-isr", "L", timeout=60), wait("in-isr", "F", timeout=60), wait("in-isr", "S", timeout=60)),
        needs_isolated_nodes=True, targets=("truncate-to-hw",)),
    Scenario(
        "zombie-leader",
        "A leader paused past its session timeout while clients still talk to it: a new leader is "
        "elected, then the old one resumes believing it leads, and answers the requests queued while "
        "it slept until the metadata tells it otherwise. No follower may take its replies as the new "
        "epoch's and it may acknowledge nothing the new leader lacks. It targets none of our variants: "
        "even a follower that sends no epochs checks its log when it follows the new leader, so this "
        "guards the default (and acks=1 shows what an acknowledgement without the ISR is worth).",
        (bind("L", "leader"), act("pause", "L"), wait("leader-is-not", "L"), sleep(2),
         act("resume", "L"), sleep(5), wait("in-isr", "L", timeout=60))),
    Scenario(
        "zombie-follower",
        "KAFKA-6880, the case KIP-320's epoch fencing closed: a follower Z cut off from the controller "
        "is fenced and misses every leader change, yet still reaches the leader L it knew and keeps "
        "fetching from it. L gathers a suffix the other follower F never gets (F is cut off from L) and "
        "Z copies it; L is paused past its session timeout and F leads (L resumes, a zombie leader for "
        "a moment, and truncates that suffix as F's follower); then F dies and L leads again, and its "
        "log grows back to Z's length. By default Z's next fetch names its stale epoch and L fences "
        "it; once the cut heals, Z's first fetch in the new epoch finds the divergence and truncates. A follower "
        "that sends no epochs (Kafka before KIP-320, which checks its log only when it becomes a "
        "follower) is served by offset and splices L's new records after its stale ones, and when the "
        "cut heals it joins the ISR with them: the replicas differ below the HWM, for good.",
        (bind("L", "leader"), bind("F", "follower"), bind("Z", "follower"),
         cut("Z", CONTROLLERS), wait("not-in-isr", "Z"),
         cut("F", "L"), sleep(3),
         act("pause", "L"), wait("leader-is", "F"), act("heal", "F"), act("resume", "L"),
         wait("in-isr", "L", timeout=60),
         act("kill", "F"), wait("leader-is", "L"), act("start", "F"),
         wait("log-reaches", "L", nodes=("Z",), timeout=60), sleep(2),
         act("heal", "Z"), wait("in-isr", "Z", timeout=60)),
        needs_isolated_nodes=True, targets=("no-epoch-fencing",)),
    # --- the transaction and group coordinators (issue 25 deliverable 4) --------------------------------
    Scenario(
        "txn-coordinator-killed-mid-commit",
        "KIP-98 fencing: the transaction coordinator of the workload's transactional ids is killed while "
        "transactions commit (the workload commits several a second, so there is always one in flight): "
        "their commits time out, the processes that ran them end info and are replaced, and each new "
        "process re-initialises its slot's transactional id at the coordinator that took over, which "
        "must abort the open transaction at a bumped epoch and fence the previous producer of the id. "
        "Under zombie-not-fenced the epoch stays, so whatever the previous producer still has on its "
        "way (a produce queued at a partition leader) lands beside the new one's writes.",
        (bind("C", "txn-coordinator"), act("kill", "C"), wait("fenced", "C"), sleep(5),
         act("start", "C"), wait("unfenced", "C", timeout=60)),
        targets=("zombie-not-fenced",)),
    Scenario(
        "producer-paused-past-txn-timeout",
        "KIP-890's hanging transaction, from the producer's side: a client process whose transactional id "
        "the coordinator C coordinates stops in the middle of an open transaction (a send of it delivered, "
        "a send to a partition it has not written and the commit to come), as a GC pause or a stopped client "
        "VM would stop it, for the workload's transaction timeout plus 3 s; then it goes on with the same "
        "transaction. C aborts the transaction on its timeout. By default that abort bumps the producer's "
        "epoch, so the resumed producer is fenced (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH) and nothing it "
        "sends after the abort is visible; under txn-markers-no-epoch-bump the markers keep its epoch, so C "
        "takes the resumed producer's new partition for a new transaction, which the commit then commits "
        "without the aborted sends before the stall (a torn transaction: lost-write, unseen; the trace "
        "checker's txn-abort-not-fenced judges the abort itself).",
        (bind("C", "txn-coordinator"), stall_producer("C"), act("resume-producer"), sleep(3)),
        targets=("txn-markers-no-epoch-bump",)),
    Scenario(
        "late-txn-markers",
        "The transaction coordinator C is cut off from the leader L of a partition its transactions "
        "write to, for 12 s (past the 10 s transaction timeout): the markers of every transaction ending "
        "then are late at L, and transactions there stay open, some to be aborted. A read_committed "
        "consumer must see none of them until their commit marker (the LSO holds at the first open "
        "one); read-committed-to-hwm serves them up to the HWM (aborted and uncommitted reads, G1a and "
        "precommitted-read). Late markers also widen txn-markers-no-epoch-bump's window.",
        (bind("C", "txn-coordinator"), bind("L", "other-leader"), cut("C", "L"), sleep(12),
         act("heal", "C"), sleep(3)),
        needs_isolated_nodes=True, targets=("read-committed-to-hwm",)),
    Scenario(
        "group-coordinator-fails-over",
        "002 2.5: the group coordinator G is cut off from every other node while the group commits "
        "offsets (the queue workload's subscribe mode commits after each poll), then killed, so a "
        "follower of its __consumer_offsets partition takes over. By default a commit is answered only "
        "once the ISR has it, so the commits G took while cut off fail (the ISR cannot grow back to min "
        "ISR 2); under offsets-commit-acks-1 G answers them alone and the new coordinator lacks them: "
        "the group resumes below offsets it was told were committed (the queue checker's lost-commit).",
        # 20 s first: a group takes several rebalances to settle after the run starts (members join one by
        # one), and a commit can be lost only once the group has committed
        (sleep(20), bind("G", "group-coordinator"), act("isolate", "G"), sleep(4), act("kill", "G"), wait("fenced", "G"),
         act("heal", "G"), sleep(3), act("start", "G"), wait("unfenced", "G", timeout=60)),
        needs_isolated_nodes=True, targets=("offsets-commit-acks-1",)),
)}


# --- scenarios of one's own, as TOML -------------------------------------------------------------------
STEP_KEYS = {"do", "node", "role", "until", "nodes", "peer", "seconds", "timeout"}
ROLES = ("leader", "follower", "successor", "broker", "other-leader", "txn-coordinator", "group-coordinator")
# The roles bound through the workload's own transactional ids or consumer groups (the runner passes
# them as options "transactional_ids" and "groups"): the coordinator of a key is the leader of its
# partition of the internal topic (clusters/broker/group_coordinator.py coordinator_partition).
COORDINATOR_ROLES = {"txn-coordinator": ("transactional_ids", "__transaction_state", "transactional id"),
                     "group-coordinator": ("groups", "__consumer_offsets", "consumer group")}
_NODE_NAME = re.compile(r"^(broker|controller)-\d+$")


class ScenarioFileError(ValueError):
    """A scenario file that cannot run; the message is one sentence naming the step and the fix."""


def load_scenario_file(path: str | Path) -> Scenario:
    """A scenario written as TOML, checked in full before anything runs:

        name = "isolate-then-power-cut"
        doc = "what it does and what it exists to catch"
        targets = ["no-elr"]                       # optional: the broker variants it should catch
        steps = [
          {do = "bind", node = "L", role = "leader"},
          {do = "isolate", node = "L"},
          {do = "wait", until = "not-in-isr", node = "L", timeout = 30},
          {do = "cut", node = "broker-2", peer = "controllers"},
          {do = "sleep", seconds = 3},
          {do = "heal"},
        ]
    """
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ScenarioFileError(f"scenario file {p} does not exist; give the path of a scenario TOML file.") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ScenarioFileError(f"cannot read scenario file {p} ({e}); fix the file's TOML.") from None
    unknown = set(doc) - {"name", "doc", "targets", "steps"}
    if unknown:
        raise ScenarioFileError(f"unknown key {sorted(unknown)[0]!r} in {p}; valid: name, doc, targets, steps.")
    raw_steps = doc.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ScenarioFileError(f"{p} has no steps; add steps = [{{do = \"bind\", node = \"L\", role = \"leader\"}}, ...].")
    steps, bound = [], set()
    for i, raw in enumerate(raw_steps, 1):
        steps.append(_file_step(p, i, raw, bound))
    from kafkaesque_harness.clusters.reference import FLAW_VARIANTS

    targets = doc.get("targets", [])
    bad = [t for t in targets if t not in FLAW_VARIANTS] if isinstance(targets, list) else [targets]
    if bad:
        raise ScenarioFileError(f"targets in {p} names {bad[0]!r}; valid: {', '.join(FLAW_VARIANTS)}.")
    return Scenario(str(doc.get("name") or p.stem), str(doc.get("doc") or f"scenario file {p}"), tuple(steps),
                    needs_isolated_nodes=any(st.do in ("isolate", "cut", "lossy-crash") for st in steps),
                    targets=tuple(targets))


def _file_step(path: Path, i: int, raw: Any, bound: set[str]) -> Step:
    where = f"step {i} of {path}"
    if not isinstance(raw, dict):
        raise ScenarioFileError(f"{where} is not a table; write it as {{do = \"...\", ...}}.")
    extra = set(raw) - STEP_KEYS
    if extra:
        raise ScenarioFileError(f"{where} has unknown key {sorted(extra)[0]!r}; valid: {', '.join(sorted(STEP_KEYS))}.")
    do = raw.get("do")
    if do not in ("bind", "wait", "sleep", *ACTIONS):
        raise ScenarioFileError(f"{where} does {do!r}; valid: bind, wait, sleep, {', '.join(ACTIONS)}.")
    node, peer = str(raw.get("node", "")), str(raw.get("peer", ""))
    nodes = raw.get("nodes", [])
    if not isinstance(nodes, list):
        raise ScenarioFileError(f"{where}: nodes must be a list of names, e.g. nodes = [\"L\"].")
    seconds = raw.get("timeout", raw.get("seconds", STALL_PAST_TIMEOUT_S if do == "stall-producer" else 30.0))
    if not isinstance(seconds, int | float) or seconds < 0:
        raise ScenarioFileError(f"{where}: timeout/seconds is {seconds!r}; give a number of seconds, 0 or more.")
    if do == "bind":
        if not node or raw.get("role") not in ROLES:
            raise ScenarioFileError(f"{where} binds {node!r} to role {raw.get('role')!r}; give node = a name and "
                                    f"role = one of {', '.join(ROLES)}.")
        bound.add(node)
    if do == "wait" and raw.get("until") not in CONDITIONS:
        raise ScenarioFileError(f"{where} waits until {raw.get('until')!r}; valid: {', '.join(CONDITIONS)}.")
    if do == "wait" and raw.get("until") in ("isr-is", "log-reaches") and not nodes:
        raise ScenarioFileError(f"{where} waits until {raw['until']} of no nodes; add nodes = [\"L\", ...].")
    if do == "cut" and not (node and peer):
        raise ScenarioFileError(f"{where} cuts without node and peer; give both (peer may be \"controllers\").")
    needs_node = do in ACTIONS and do not in ("heal", *CLIENT_ACTIONS) or (do == "wait" and raw.get("until") not in
                                                     ("isr-is", "no-leader", "has-leader"))
    if needs_node and not node:
        raise ScenarioFileError(f"{where} ({do}) names no node; add node = a bound name or a node name.")
    for name in [n for n in (node, peer, *nodes) if n] if do != "bind" else []:
        if name not in bound and name != CONTROLLERS and not _NODE_NAME.match(name):
            raise ScenarioFileError(f"{where} names {name!r}, which no earlier bind step binds and which is not a "
                                    "node name (broker-N, controller-N); bind it first.")
    return Step(do, node=node, role=str(raw.get("role", "")), until=str(raw.get("until", "")),
                nodes=tuple(str(n) for n in nodes), peer=peer, seconds=float(seconds))


def idle(seconds: float, stopped: Callable[[], bool]) -> bool:
    """Wait `seconds`, or less if the run stops first; whether the time passed (False: stopped)."""
    try:  # this module's clock, so a test's fast clock reaches the idle time too
        wait_until(stopped, seconds, 0.1, "the end of the run", clock=time.monotonic, sleep=time.sleep)
    except WaitTimeout:
        return True
    return False


class ScenarioStalled(RuntimeError):
    """A wait timed out: the cluster did not reach the state the next step needs."""


class ScenarioNemesis(NemesisBase):
    """Runs one scenario once, `delay` seconds into the main phase, then lets the workload go on."""

    name = "scenario"

    def __init__(self, scenario: str | Scenario, options: dict[str, Any]):
        if isinstance(scenario, str) and scenario.endswith(".toml"):
            scenario = load_scenario_file(scenario)
        if isinstance(scenario, str) and scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; valid: {', '.join(SCENARIOS)}, or a scenario file "
                             "NAME.toml")
        self.scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
        self.topic = options.get("topic", "queue")
        self.partition = int(options.get("scenario_partition", 0))
        self.delay = float(options.get("scenario_delay", 10.0))
        self.rng = random.Random(options.get("seed", 0))
        self.min_isr = int(options.get("min_isr", 2))
        self.bound: dict[str, str] = {}
        # the workload's coordinated keys, for the coordinator roles (COORDINATOR_ROLES)
        self.keys = {"transactional_ids": list(options.get("transactional_ids") or ()),
                     "groups": list(options.get("groups") or ())}
        self.by = f"scenario:{self.scenario.name}"  # how the ledger knows this scenario's faults

    # --- the Nemesis shape (its plan is its steps: own_plan()) -----------------------------------------
    def pairs(self) -> list[tuple[str, str]]:
        return []

    def fs(self) -> set[str]:
        return {f"scenario-{s.do}" for s in self.scenario.steps}

    def capability_refusal(self, cluster, capabilities) -> str | None:
        """Refused as a whole when a node lacks what one of its steps needs (nemesis/requirements.py)."""
        return steps_refusal(f"scenario {self.scenario.name}", self.scenario.steps, cluster, capabilities)

    def ability_refusal(self, cluster) -> str | None:
        why = self.keys_refusal(self.scenario.name, self.scenario.steps)
        if why:
            return why
        if self.scenario.needs_isolated_nodes and not can(cluster, IsolatedNodes):
            return (f"scenario {self.scenario.name} cuts nodes off or power-cuts them, which needs nodes of their "
                    f"own (--cluster docker, or local as root); {cluster.name} has not")
        return None

    def setup(self, cluster, faults) -> None:
        super().setup(cluster, faults)
        why = self.stalls_refusal(f"scenario {self.scenario.name}", self.scenario.steps, faults)
        if why:
            raise NemesisRefused(why)
        if self.scenario.needs_isolated_nodes:
            faults.prepare_network()

    @staticmethod
    def stalls_refusal(what: str, steps, faults) -> str | None:
        """Why `what` cannot stall a producer: the run's fault actions were given no producer stalls."""
        return faults.stall_refusal(what) if any(st.do in CLIENT_ACTIONS for st in steps) else None

    def keys_refusal(self, what: str, steps) -> str | None:
        """Why `what` cannot bind its coordinator roles or stall a producer: the workload has no such keys (no
        transactional ids: no transactional producer); or None."""
        if any(st.do in CLIENT_ACTIONS for st in steps) and not self.keys["transactional_ids"]:
            return (f"{what} stalls a transactional producer of the workload, and this workload has none; run it "
                    "with --workload txn")
        for st in steps:
            if st.do == "bind" and st.role in COORDINATOR_ROLES:
                option, _, noun = COORDINATOR_ROLES[st.role]
                if not self.keys[option]:
                    return (f"{what} binds the {st.role}, the coordinator of the workload's {noun}s, and this "
                            f"workload has none; run it with --workload txn"
                            + (" or --workload queue --workload-option queue_mode=subscribe"
                               if st.role == "group-coordinator" else ""))
        return None

    # --- what it has done and not undone: the ledger's records of it ---------------------------------
    def active_nodes(self, kinds: tuple[str, ...]) -> set[str]:
        return {n for r in self.faults.ledger.active(kinds, by=self.by) for n in r.nodes}

    def down_nodes(self) -> set[str]:
        """Killed, stopped or power-cut, and not started again."""
        return self.active_nodes(PROCESS_FAULTS)

    def cut_off(self) -> bool:
        return bool(self.active_nodes(("partition",)))

    def invoke(self, cluster, op: Op) -> Op:
        raise ValueError("a scenario runs as a whole through its plan (own_plan()), not op by op")

    def own_plan(self, cluster, stopped: Callable[[], bool]) -> Plan:
        """The steps in order, `delay` seconds into the main phase, each decided when the one before it
        has ended. It ends early when the run is over or a step fails (a wait that stalls): the rest
        needs that step."""
        if not idle(self.delay, stopped):
            return
        steps = self.scenario.steps
        for i, step in enumerate(steps, 1):
            if stopped():
                return
            # "step i of n" lets a stored run show whether the scenario ran to its end (checkers/evidence.py)
            value = {**self._describe(step), "step": i, "steps": len(steps)}
            try:
                yield PlanStep(f"scenario-{step.do}", value, lambda step=step: self._perform(cluster, step, stopped))
            except Exception:  # noqa: BLE001 - recorded as the step's error; the rest needs this step
                return

    # --- steps ------------------------------------------------------------------------------------------
    def _describe(self, step: Step) -> dict[str, Any]:
        d: dict[str, Any] = {"scenario": self.scenario.name}
        for k in ("node", "role", "until", "peer"):
            if getattr(step, k):
                d[k] = getattr(step, k)
        if step.nodes:
            d["nodes"] = list(step.nodes)
        if step.do in ("wait", "sleep"):
            d["seconds"] = step.seconds
        if step.do == "stall-producer":
            d["past_txn_timeout_s"] = step.seconds
        return d

    def node(self, name: str) -> str:
        return self.bound.get(name, name)

    def _perform(self, cluster, step: Step, stopped: Callable[[], bool]) -> Any:
        if step.do == "bind":
            node = self._choose(cluster, step.role)
            self.bound[step.node] = node
            return {step.node: node}
        if step.do == "wait":
            return self._wait(cluster, step, stopped)
        if step.do == "sleep":
            idle(step.seconds, stopped)
            return None
        if step.do == "stall-producer":
            return self._stall_producer(cluster, step)
        if step.do == "resume-producer":
            return {"resumed": resumed(self.faults.resume_producers(by=self.by))}
        node = self.node(step.node) if step.node else ""
        if step.do == "kill":
            self.faults.kill(node, self.by)
        elif step.do == "lossy-crash":
            from kafkaesque_harness.nemesis.faults import beyond_fault_budget

            rec = self.faults.lossy_crash(node, self.by)
            out = {"lossy-crash": node, "dropped": rec.evidence.get("lossyfs")}
            brokers_cut = self.active_nodes(("lossy-crash",)) & set(cluster.broker_nodes())  # a controller's is no replica's
            if node in brokers_cut and beyond_fault_budget(len(brokers_cut), self.min_isr):
                # More power cuts at once than the durability contract covers (001: n-1 replicas):
                # what was acknowledged before may be gone (checkers/queue.py counts it apart).
                out[BEYOND_BUDGET] = True
            return out
        elif step.do == "pause":
            self.faults.pause(node, self.by)
        elif step.do == "resume":
            self.faults.resume(node)
        elif step.do == "stop":
            self.faults.stop(node, self.by)
        elif step.do == "start":
            self.faults.start(node)
        elif step.do == "isolate":
            self.faults.cut(grudge.isolate(cluster.nodes(), node), self.by, nodes=[node])
        elif step.do == "cut":
            peers = [p for p in (cluster.controller_nodes() if step.peer == CONTROLLERS else [self.node(step.peer)])
                     if p != node]
            g: grudge.Grudge = {node: set(peers), **{p: {node} for p in peers}}
            self.faults.cut(g, self.by, nodes=[node, *peers])
            return {"cut": node, "from": sorted(peers)}
        elif step.do == "heal":
            # One node: its isolation and every cut it is part of; no node: everything the scenario cut.
            healed = self.faults.heal_cuts(node=node or None, by=self.by)
            return {"healed": ([node] if healed else []) if node else sorted({n for r in healed for n in r.nodes})}
        else:
            raise ValueError(f"unknown scenario step {step.do!r}; valid: bind, wait, sleep, {', '.join(ACTIONS)}")
        return {step.do: node}

    def _stall_producer(self, cluster, step: Step) -> dict[str, Any]:
        """Stall a client producer for the transaction timeout plus `step.seconds`: with a node, one whose
        transactional id that broker coordinates now. A stall no process took ends the scenario here."""
        from kafkaesque_harness.nemesis.targets import coordinator_node

        ids, detail = None, {}
        if step.node:
            node = self.node(step.node)
            ids = [k for k in self.keys["transactional_ids"]
                   if coordinator_node(cluster, COORDINATOR_ROLES["txn-coordinator"][1], k) == node]
            if not ids:
                raise ScenarioStalled(f"{node} coordinates none of the workload's transactional ids now")
            detail = {"coordinator": node}
        seconds = round(self.faults.txn_timeout_s + step.seconds, 3)
        rec = self.faults.stall_producer(seconds, self.by, transactional_ids=ids, detail=detail)
        if not rec.applied:
            raise ScenarioStalled(rec.apply_error or "the stall was not applied")
        return {"stalled": {k: v for k, v in rec.evidence.items() if k != "txn_timeout_s"}, "seconds": seconds}

    def _choose(self, cluster, role: str) -> str:
        p = self._partition(cluster)
        taken = set(self.bound.values())
        if role == "leader":
            if p is None or p.leader < 0:
                raise ScenarioStalled(f"partition {self.partition} has no leader to bind")
            return cluster.node_name(p.leader)
        if role == "follower":
            followers = [cluster.node_name(r) for r in (p.replicas if p else []) if r != p.leader]
            free = [n for n in followers if n not in taken]
            if not free:
                raise ScenarioStalled("no unbound follower left")
            return self.rng.choice(sorted(free))
        if role == "successor":
            # The controller elects the first eligible ISR member in replica order (controller.py
            # _choose_leader): that one, or none if it is already bound (a later one would not be elected).
            nxt = [r for r in (p.replicas if p else []) if p and r in p.isr and r != p.leader]
            if not nxt or cluster.node_name(nxt[0]) in taken:
                raise ScenarioStalled("no unbound successor in the ISR")
            return cluster.node_name(nxt[0])
        if role == "broker":
            return self.rng.choice(sorted(n for n in cluster.broker_nodes() if n not in taken))
        if role == "other-leader":
            held = [q for q in cluster.partitions(self.topic)
                    if q.leader >= 0 and cluster.node_name(q.leader) not in taken]
            if not held:
                raise ScenarioStalled(f"no partition of {self.topic} has a leader that no bound name holds")
            q = self.rng.choice(sorted(held, key=lambda q: q.partition))
            self.partition = q.partition  # the later steps and waits are about this partition
            return cluster.node_name(q.leader)
        if role in COORDINATOR_ROLES:
            return self._coordinator(cluster, role, taken)
        raise ValueError(f"unknown role {role!r}; valid: {', '.join(ROLES)}")

    def _coordinator(self, cluster, role: str, taken: set[str]) -> str:
        """The broker coordinating the most of the workload's keys (ties drawn), down or paused ones aside."""
        from kafkaesque_harness.nemesis.targets import coordinator_node

        option, topic, noun = COORDINATOR_ROLES[role]
        if not self.keys[option]:
            raise ValueError(self.keys_refusal(f"scenario {self.scenario.name}", [bind("X", role)]))
        out = taken | self.down_nodes() | self.active_nodes(("pause",))
        counts: dict[str, int] = {}
        for key in self.keys[option]:
            node = coordinator_node(cluster, topic, key)
            if node is not None and node not in out:
                counts[node] = counts.get(node, 0) + 1
        if not counts:
            raise ScenarioStalled(f"no {noun} of the workload has a coordinator right now ({topic} has no "
                                  "leader for it, or does not exist yet)")
        most = max(counts.values())
        return self.rng.choice(sorted(n for n, k in counts.items() if k == most))

    def _partition(self, cluster):
        for p in cluster.partitions(self.topic):
            if p.partition == self.partition:
                return p
        return None

    def _holds(self, cluster, step: Step) -> tuple[bool, dict[str, Any]]:
        if step.until in ("fenced", "unfenced"):
            fenced = cluster.node_id(self.node(step.node)) in cluster.fenced_brokers()
            return fenced == (step.until == "fenced"), {"fenced": fenced}
        if step.until == "log-reaches":
            leos = {n: self._leo(cluster, self.node(n)) for n in (step.node, *step.nodes)}
            mine = leos.pop(step.node)
            return mine is not None and all(o is not None and mine >= o for o in leos.values()), {"leo": {
                self.node(step.node): mine, **{self.node(n): o for n, o in leos.items()}}}
        p = self._partition(cluster)
        if p is None:
            return False, {}
        isr = sorted(cluster.node_name(r) for r in p.isr)
        leader = cluster.node_name(p.leader) if p.leader >= 0 else None
        seen = {"leader": leader, "isr": isr}
        node = self.node(step.node) if step.node else None
        holds = {
            "isr-is": lambda: isr == sorted(self.node(n) for n in step.nodes),
            "in-isr": lambda: node in isr,
            "not-in-isr": lambda: node not in isr,
            "leader-is": lambda: leader == node,
            "leader-is-not": lambda: leader is not None and leader != node,
            "no-leader": lambda: leader is None,
            "has-leader": lambda: leader is not None,
        }.get(step.until)
        if holds is None:
            raise ValueError(f"unknown condition {step.until!r}; valid: {', '.join(CONDITIONS)}")
        return holds(), seen

    def _leo(self, cluster, node: str) -> int | None:
        """The node's log end offset for the scenario's partition, from its own state dump. A cluster we
        did not build has none (the Kafka protocol tells a replica's end offset only to its leader)."""
        if not can(cluster, StateDumps):
            raise ScenarioStalled(f"the {cluster.name} cluster reports no replica's log end offset (no state "
                                  "dumps); log-reaches needs the reference broker")
        state = cluster.dump_state(node, include_log=False) or {}
        for p in state.get("partitions", []):
            if p.get("topic") == self.topic and p.get("partition") == self.partition:
                return int(p["leo"])
        return None

    def _wait(self, cluster, step: Step, stopped: Callable[[], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + step.seconds
        seen: dict[str, Any] = {}
        while time.monotonic() < deadline and not stopped():
            try:
                ok, seen = self._holds(cluster, step)
            except ScenarioStalled:
                raise  # the condition cannot be seen on this cluster at all: waiting will not help
            except Exception:  # noqa: BLE001 - the controller may be unreachable for a moment
                ok = False
            if ok:
                return {"reached": True, **seen}
            time.sleep(0.2)
        raise ScenarioStalled(f"{step.until} {step.node or list(step.nodes)} not reached in {step.seconds:.0f} s "
                              f"(last seen: {seen})")

    def teardown(self, cluster) -> list[str]:
        """Reconnect, resume and restart everything the scenario left down; every part is tried."""
        errors = self.faults.heal(by=self.by) if self.faults is not None else []
        if errors:
            raise RuntimeError("scenario teardown: " + "; ".join(errors))
        return []
