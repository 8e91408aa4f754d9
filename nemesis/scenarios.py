"""The catalogue of named scenarios (`--nemesis scenario:NAME`): each the protocol's weak moment it
aims at, with the document it comes from and the broker variants it exists to catch. Written in
the scenario language of nemesis/scenario_steps.py; nemesis/scenario.py runs them.
"""

from __future__ import annotations

from kafkaesque_harness.nemesis.scenario_steps import (
    CONTROLLERS,
    Scenario,
    act,
    bind,
    cut,
    sleep,
    stall_producer,
    wait,
)

# The set-up of the power-loss scenarios: S cut off (it falls behind), F restarted cleanly (its
# log is synced up to then), later L too (synced further), so a power cut leaves L holding the most.
L_SYNCED_FURTHER_THAN_F = (
    bind("L", "leader"), bind("F", "follower"), bind("S", "follower"),
    act("isolate", "S"), wait("isr-is", nodes=("L", "F")), sleep(2),
    act("stop", "F"), act("start", "F"), wait("in-isr", "F", timeout=60), sleep(3),
    act("stop", "L"), act("start", "L"), wait("in-isr", "L", timeout=60), sleep(2))

# The ISR shrinks to the leader L: F1 cut off and out, then F2, so F2 is the follower that left last.
ISR_SHRUNK_TO_L = (
    bind("L", "leader"), bind("F1", "follower"), bind("F2", "follower"),
    act("isolate", "F1"), wait("not-in-isr", "F1"), sleep(2),
    act("isolate", "F2"), wait("isr-is", nodes=("L",)), sleep(2))

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
        (*ISR_SHRUNK_TO_L,
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
        (*ISR_SHRUNK_TO_L,
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
