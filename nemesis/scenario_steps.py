"""The scenario language: steps, scenarios, the DSL the catalogue is written in, and scenario files.

A scenario is a list of steps that bind roles to nodes from the cluster's own metadata ("L is
partition 0's leader"), act on them and wait for the protocol to react; nemesis/scenario.py is
its interpreter and nemesis/scenarios.py the catalogue of named ones. The vocabulary, as
`Step.do`: bind, wait, sleep, and the actions below (nemesis/scenario.py's docstring says what
each does); a scenario of one's own is the same steps written as TOML (load_scenario_file).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
           "resume-producer", "cut-clients")
CLIENT_ACTIONS = ("stall-producer", "resume-producer")  # on the workload's clients, not on a node
CONDITIONS = ("isr-is", "in-isr", "not-in-isr", "leader-is", "leader-is-not", "no-leader", "has-leader",
              "fenced", "unfenced", "log-reaches")


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
                    needs_isolated_nodes=any(st.do in ("isolate", "cut", "lossy-crash", "cut-clients") for st in steps),
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
