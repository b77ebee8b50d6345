"""One test per claim of the Raft paper (Ongaro and Ousterhout, USENIX ATC 2014).

Each test names the section or figure it checks. The cluster is driven by hand
(`warren.testing.raft_cluster`), so every interleaving here is exactly the one written.

Figure 3's properties: Election Safety (5.2 one vote per term, split votes), Leader
Append-Only (5.3), Log Matching (5.3 consistency check and truncation, figure 7), Leader
Completeness (5.4.1, 5.4.3), State Machine Safety (5.4.2, figure 8). Sections 6 to 8:
membership changes, log compaction, client reads.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from warren.raft import (
    Entry,
    EntryKind,
    HardState,
    Membership,
    MembershipChange,
    Message,
    MessageType,
    NodeId,
    RaftConfig,
    RaftNode,
    Role,
    compact,
    run_ready,
)
from warren.testing.raft_cluster import Cluster


def plain(voters: int = 3, **kwargs: object) -> Cluster:
    """A cluster without pre-vote and check-quorum: the paper's basic algorithm."""
    return Cluster(range(1, voters + 1), pre_vote=False, check_quorum=False, **kwargs)  # type: ignore[arg-type]


def entries(*terms: int) -> list[Entry]:
    return [
        Entry(term, index, EntryKind.NORMAL, b"%d" % index) for index, term in enumerate(terms, 1)
    ]


# --------------------------------------------------------------- 5.1 terms


def test_5_1_a_higher_term_turns_a_leader_into_a_follower() -> None:
    cluster = plain()
    leader = cluster.elect(1)
    assert leader.role is Role.LEADER
    leader.step(Message(MessageType.APPEND, 1, 2, term=leader.term + 3))
    assert leader.role is Role.FOLLOWER
    assert leader.term == 4
    assert leader.leader_id == 2


def test_5_1_a_request_with_a_stale_term_is_rejected() -> None:
    cluster = plain()
    cluster.elect(1)
    follower = cluster[2]
    log_before = list(follower.log.entries)
    cluster.deliver_one(
        Message(
            MessageType.APPEND, 2, 3, term=0, index=1, log_term=1, entries=tuple(entries(9, 9)[1:])
        )
    )
    assert follower.log.entries == log_before
    # The answer carries the current term so that the stale leader steps down.
    answer = cluster.pending[-1]
    assert answer.type is MessageType.APPEND_RESPONSE and answer.term == follower.term


# --------------------------------------------------------------- 5.2 elections


def test_5_2_nodes_start_as_followers() -> None:
    cluster = plain()
    assert all(node.role is Role.FOLLOWER and node.term == 0 for node in cluster.nodes.values())


def test_5_2_a_follower_that_hears_nothing_becomes_candidate_and_votes_for_itself() -> None:
    cluster = plain()
    cluster.tick(1, 2 * 10)  # past any randomized election timeout
    node = cluster[1]
    assert node.role is Role.CANDIDATE
    assert node.term == 1 and node.vote == 1
    votes = [m for m in cluster.pending if m.type is MessageType.VOTE]
    assert sorted(m.to for m in votes) == [2, 3]
    # the vote for itself was persisted before the requests went out
    assert cluster.storage[1].hard_state == HardState(term=1, vote=1, commit=0)


def test_5_2_election_timeouts_are_randomized_in_one_to_two_timeouts() -> None:
    timeouts = set()
    for seed in range(50):
        node = RaftNode(
            RaftConfig(1, election_ticks=10, pre_vote=False),
            random.Random(seed),
            membership=Membership(frozenset({1, 2, 3})),
        )
        ticks = 0
        while node.role is Role.FOLLOWER:
            node.tick()
            ticks += 1
        timeouts.add(ticks)
    assert min(timeouts) >= 10 and max(timeouts) < 20
    assert len(timeouts) > 5


def test_5_2_a_candidate_with_a_majority_of_votes_becomes_leader() -> None:
    cluster = plain(5)
    cluster.campaign(1)
    cluster.drop(to=4)
    cluster.drop(to=5)
    cluster.stabilize()
    assert cluster[1].role is Role.LEADER


def test_5_2_a_candidate_rejected_by_a_majority_steps_down() -> None:
    cluster = plain()
    for node_id in (2, 3):
        cluster[node_id].term = 1
        cluster[node_id].vote = node_id  # both already voted for themselves in term 1
    cluster.campaign(1)  # term 1 as well
    cluster.stabilize()
    assert cluster[1].role is Role.FOLLOWER


def test_5_2_a_node_votes_at_most_once_per_term() -> None:
    cluster = plain()
    cluster.campaign(1)
    cluster.campaign(2)  # same term 1, both candidates
    cluster.deliver(sender=1, to=3)
    cluster.deliver(sender=2, to=3)
    answers = {m.to: m.reject for m in cluster.pending if m.type is MessageType.VOTE_RESPONSE}
    assert answers == {1: False, 2: True}
    assert cluster[3].vote == 1


def test_5_2_election_safety_split_vote_elects_at_most_one_leader() -> None:
    cluster = plain(5)
    cluster.campaign(1)
    cluster.campaign(2)
    cluster.stabilize()
    leaders = [n for n in cluster.nodes.values() if n.role is Role.LEADER]
    assert len(leaders) <= 1


def test_5_2_a_candidate_that_hears_from_a_leader_of_its_term_steps_down() -> None:
    cluster = plain()
    cluster.campaign(1)
    cluster.campaign(2)
    cluster.deliver(sender=1, to=3)
    cluster.deliver(to=1)  # node 1 wins with node 3's vote
    assert cluster[1].role is Role.LEADER
    cluster.drop(sender=2)
    cluster.deliver(sender=1, to=2)  # node 1's append reaches candidate 2 (term 1)
    assert cluster[2].role is Role.FOLLOWER and cluster[2].leader_id == 1


def test_5_2_leader_sends_heartbeats_every_heartbeat_interval() -> None:
    cluster = plain()
    cluster.elect(1)
    cluster.tick(1)
    beats = [m for m in cluster.pending if m.type is MessageType.HEARTBEAT]
    assert sorted(m.to for m in beats) == [2, 3]


# --------------------------------------------------------------- 5.3 log replication


def test_5_3_an_entry_is_committed_once_a_majority_stores_it_and_then_applied() -> None:
    cluster = plain(5)
    leader = cluster.elect(1)
    index = cluster.propose(1, b"x")
    assert index is not None
    cluster.deliver(sender=1, to=2)
    cluster.deliver(sender=1, to=3)
    cluster.drop(sender=1)
    assert leader.log.commit_index < index
    cluster.deliver(to=1)  # two acknowledgements + the leader itself
    assert leader.log.commit_index == index
    assert cluster.machines[1].data == [b"x"]
    cluster.tick(1)  # the heartbeat carries the commit index
    cluster.stabilize()
    assert all(cluster.machines[n].data == [b"x"] for n in range(1, 6))


def test_5_3_followers_reject_an_append_whose_previous_entry_does_not_match() -> None:
    cluster = plain()
    follower = cluster[2]
    cluster.deliver_one(Message(MessageType.APPEND, 2, 1, term=1, index=5, log_term=1, entries=()))
    answer = cluster.pending[-1]
    assert answer.reject and answer.index == 5
    assert answer.reject_hint == follower.log.last_index


def test_5_3_a_follower_deletes_a_conflicting_suffix() -> None:
    cluster = plain()
    storage = cluster.storage[2]
    storage.entries = entries(1, 1, 2, 2)
    storage.hard_state = HardState(term=2, commit=1)
    cluster.restart(2)
    cluster.deliver_one(
        Message(
            MessageType.APPEND,
            2,
            1,
            term=3,
            index=2,
            log_term=1,
            entries=(Entry(3, 3, EntryKind.NORMAL, b"new"),),
            commit=1,
        )
    )
    assert [e.term for e in cluster[2].log.entries] == [1, 1, 3]
    assert [e.term for e in cluster.storage[2].entries] == [1, 1, 3]


def test_5_3_figure_7_the_leader_brings_divergent_followers_in_line() -> None:
    cluster = plain(5)
    logs = {
        1: entries(1, 1, 1, 4, 4, 5, 5, 6, 6, 6),
        2: entries(1, 1, 1, 4, 4, 5, 5, 6, 6),  # (a) missing entries
        3: entries(1, 1, 1, 4),  # (b)
        4: entries(1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6),  # (c) an extra uncommitted entry
        5: entries(1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3),  # (f) entries of terms 2 and 3
    }
    for node_id, log in logs.items():
        cluster.storage[node_id].entries = log
        cluster.storage[node_id].hard_state = HardState(term=7)
        cluster.restart(node_id)
    leader = cluster.elect(1)
    cluster.propose(1, b"after")
    cluster.stabilize()
    cluster.tick(1)
    cluster.stabilize()
    expected = [e.term for e in leader.log.entries]
    for node_id in range(2, 6):
        assert [e.term for e in cluster[node_id].log.entries] == expected


def test_5_3_leader_append_only_a_leader_never_rewrites_its_log() -> None:
    cluster = plain()
    leader = cluster.elect(1)
    cluster.propose(1, b"a")
    before = list(leader.log.entries)
    # a follower's stale entries, sent as if by another node of the same term, are ignored
    cluster.deliver_one(
        Message(MessageType.APPEND, 1, 2, term=leader.term, index=0, entries=tuple(entries(9)))
    )
    assert leader.log.entries[: len(before)] == before


# --------------------------------------------------------------- 5.4 safety


def test_5_4_1_a_voter_denies_its_vote_to_a_less_up_to_date_candidate() -> None:
    cluster = plain()
    cluster.storage[2].entries = entries(1, 2)
    cluster.storage[2].hard_state = HardState(term=2)
    cluster.restart(2)
    cluster.storage[1].entries = entries(1, 1, 1)  # longer, but of an older last term
    cluster.storage[1].hard_state = HardState(term=2)
    cluster.restart(1)
    cluster.campaign(1)
    cluster.deliver(sender=1, to=2)
    answer = next(m for m in cluster.pending if m.type is MessageType.VOTE_RESPONSE)
    assert answer.reject


def test_5_4_2_figure_8_an_old_term_entry_is_not_committed_by_counting_replicas() -> None:
    # Figure 8 (c): S1 leads term 4 and has copied 2@2 to a majority (S1, S2, S3); S5
    # holds 3@2. Counting replicas would commit index 2; S5 could then overwrite it.
    cluster = plain(5, max_entries_per_append=1)
    setup = {
        1: (entries(1, 2), 3),
        2: (entries(1, 2), 3),
        3: (entries(1), 3),
        4: (entries(1), 3),
        5: (entries(1, 3), 3),
    }
    for node_id, (log, term) in setup.items():
        cluster.storage[node_id].entries = log
        cluster.storage[node_id].hard_state = HardState(term=term, commit=1)
        cluster.restart(node_id)
    cluster.campaign(1)  # term 4
    cluster.deliver(sender=1, to=2)
    cluster.deliver(sender=1, to=3)
    cluster.deliver(sender=1, to=4)
    cluster.drop(sender=1)
    cluster.deliver(to=1)
    s1 = cluster[1]
    assert s1.role is Role.LEADER and s1.term == 4
    # S1 now probes S3 one entry at a time: first 2@2, and S3 acknowledges index 2.
    cluster.drop()
    cluster.tick(1)
    cluster.deliver(sender=1, to=3)  # heartbeat
    cluster.deliver(to=1)  # heartbeat response: S1 sends the probe for S3
    cluster.drop(sender=1, to=2)
    cluster.drop(sender=1, to=4)
    cluster.drop(sender=1, to=5)
    for _ in range(4):
        cluster.deliver(sender=1, to=3)
        cluster.deliver(sender=3, to=1)
        if cluster[3].log.last_index >= 2:
            break
    assert cluster[3].log.term_at(2) == 2
    assert s1.progress[3].match_index >= 2
    assert s1.log.commit_index == 1  # a majority stores 2@2, yet it is not committed
    # (d): S1 crashes, S5 is elected with S2, S3, S4 and overwrites index 2 everywhere.
    cluster.crash(1)
    cluster.pending.clear()
    cluster.campaign(5)  # term 4: everyone already voted for S1 in it
    cluster.stabilize()
    assert cluster[5].role is Role.FOLLOWER
    cluster.campaign(5)  # term 5
    cluster.stabilize()
    assert cluster[5].role is Role.LEADER
    cluster.tick(5)
    cluster.stabilize()
    for node_id in (2, 3, 4, 5):
        assert cluster[node_id].log.term_at(2) == 3
    assert all(e.term != 2 for n in (2, 3, 4, 5) for e in cluster.machines[n].applied)


def test_5_4_3_leader_completeness_committed_entries_survive_leader_changes() -> None:
    cluster = plain(5)
    cluster.elect(1)
    index = cluster.propose(1, b"kept")
    cluster.stabilize()
    assert cluster[1].log.commit_index >= (index or 0)
    cluster.crash(1)
    cluster.pending.clear()
    new_leader = cluster.elect(2)
    assert new_leader.role is Role.LEADER
    assert new_leader.log.entry_at(index or 0).data == b"kept"


# --------------------------------------------------------------- 5.5 crashes


def test_5_5_appends_are_idempotent_so_retries_are_harmless() -> None:
    cluster = plain()
    cluster.elect(1)
    cluster.propose(1, b"once")
    append = next(m for m in cluster.pending if m.type is MessageType.APPEND and m.to == 2)
    cluster.stabilize()
    before = list(cluster[2].log.entries)
    cluster.deliver_one(append)
    cluster.deliver_one(append)
    assert cluster[2].log.entries == before


def test_5_5_a_restarted_node_keeps_its_term_vote_and_log() -> None:
    cluster = plain()
    cluster.elect(1)
    cluster.propose(1, b"durable")
    cluster.stabilize()
    node = cluster[2]
    term, vote, last = node.term, node.vote, node.log.last_index
    cluster.crash(2)
    node = cluster.restart(2)
    assert (node.term, node.vote, node.log.last_index) == (term, vote, last)


# --------------------------------------------------------------- figure 2: persistence order


def test_figure_2_state_is_persisted_before_the_messages_that_depend_on_it() -> None:
    order: list[str] = []

    class Recorder:
        def save_snapshot(self, snapshot: object) -> None:
            order.append("snapshot")

        def append_entries(self, entries: object) -> None:
            order.append("entries")

        def save_hard_state(self, hard_state: object) -> None:
            order.append("hard_state")

        def sync(self) -> None:
            order.append("sync")

        def send(self, message: object) -> None:
            order.append("send")

        def restore(self, snapshot: object) -> None:
            order.append("restore")

        def apply(self, entry: object) -> None:
            order.append("apply")

        def read(self, read_state: object) -> None:
            order.append("read")

    node = RaftNode(
        RaftConfig(1, pre_vote=False), random.Random(1), membership=Membership(frozenset({1, 2}))
    )
    node.campaign()
    recorder = Recorder()
    run_ready(node, recorder, recorder, recorder)
    assert order == ["hard_state", "sync", "send"]


# --------------------------------------------------------------- 6, 7, 8


def test_6_a_new_server_joins_as_a_non_voter_and_is_promoted_once_caught_up() -> None:
    cluster = Cluster([1, 2, 3], others=[4])
    leader = cluster.elect(1)
    for n in range(5):
        cluster.propose(1, b"%d" % n)
    cluster.stabilize()
    index = leader.propose_membership(MembershipChange.ADD_LEARNER, 4)
    cluster.run(1)
    assert index is not None
    cluster.deliver()  # the change reaches 2 and 3
    cluster.deliver()  # their acknowledgements: the change commits on the leader
    assert leader.membership.learners == {4} and 4 not in leader.membership.voters
    assert cluster[4].log.last_index == 0  # the learner has nothing yet: not promoted
    cluster.stabilize()
    assert 4 in leader.membership.voters
    assert cluster[4].log.last_index == leader.log.last_index


def only(*voters: int) -> Callable[[NodeId], bool]:
    return lambda node_id: node_id in voters


def test_6_a_learner_that_may_not_vote_follows_and_stays_a_learner() -> None:
    cluster = Cluster([1], others=[2, 3], may_vote=only(1))
    leader = cluster.elect(1)
    for node_id in (2, 3):
        assert leader.propose_membership(MembershipChange.ADD_LEARNER, node_id) is not None
        cluster.run(1)
        cluster.stabilize()
    index = cluster.propose(1, b"declare")
    cluster.isolate(2)  # a learner down holds up no commit
    cluster.isolate(3)
    cluster.stabilize()
    assert index is not None and leader.log.commit_index >= index
    cluster.heal()
    for _ in range(3):
        cluster.tick(1)
        cluster.stabilize()
    assert leader.membership == Membership(frozenset({1}), frozenset({2, 3}))
    assert b"declare" in cluster.machines[3].data  # it caught up


def test_6_voters_that_may_not_vote_become_learners_leader_last() -> None:
    """A configuration written when every member voted (a node's workers before worker 0
    alone voted) converges to the rule through membership changes, even from a leader the
    rule makes a learner: it hands leadership to one that may vote first."""
    cluster = Cluster([1, 2, 3])
    cluster.elect(2)
    cluster.propose(2, b"before")
    cluster.stabilize()
    for node_id in (1, 2, 3):  # restarted on code with the rule, logs as they were
        cluster.configs[node_id] = dataclasses.replace(cluster.configs[node_id], may_vote=only(1))
        cluster.crash(node_id)
        cluster.restart(node_id)
    cluster.elect(2)
    for _ in range(30):
        for node_id in (1, 2, 3):
            cluster.tick(node_id)
        cluster.stabilize()
    leader = cluster[1]
    assert leader.role is Role.LEADER
    assert {cluster[n].membership for n in (1, 2, 3)} == {
        Membership(frozenset({1}), frozenset({2, 3}))
    }
    assert cluster.propose(1, b"after") is not None
    cluster.stabilize()
    assert all(b"after" in cluster.machines[n].data for n in (1, 2, 3))


def test_6_a_configuration_is_known_by_the_index_that_made_it_on_every_node() -> None:
    cluster = Cluster([1, 2, 3], others=[4])
    leader = cluster.elect(1)
    assert leader.membership_index == 0  # bootstrapped
    added = leader.propose_membership(MembershipChange.ADD_LEARNER, 4)
    cluster.run(1)
    cluster.stabilize()
    promoted = leader.membership_index  # the learner caught up: the promotion's entry
    assert added is not None and promoted > added and 4 in leader.membership.voters
    assert {cluster[n].membership_index for n in (1, 2, 3, 4)} == {promoted}
    # compacted past it, a node knows it by its snapshot's index, still below the next
    compact(cluster[2], cluster.storage[2], cluster[2].log.applied, b"state")
    assert promoted <= cluster[2].membership_index == cluster[2].log.snapshot_index
    removed = leader.propose_membership(MembershipChange.REMOVE, 4)
    cluster.run(1)
    cluster.stabilize()
    assert removed is not None and removed > cluster[2].log.snapshot_index
    assert cluster[2].membership_index == removed == leader.membership_index

    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.crash(3)
    for n in range(4):
        cluster.propose(1, b"%d" % n)
    cluster.stabilize()
    compact(leader, cluster.storage[1], leader.log.applied, b"state")
    cluster.restart(3)
    cluster.tick(1)
    cluster.stabilize()
    assert any(m.type is MessageType.SNAPSHOT for m in cluster.delivered)
    assert cluster.machines[3].snapshot is not None
    assert cluster.machines[3].snapshot.data == b"state"
    assert cluster[3].log.commit_index == leader.log.commit_index


def test_8_a_leader_cut_off_from_the_majority_serves_no_read() -> None:
    cluster = Cluster([1, 2, 3])
    leader = cluster.elect(1)
    cluster.isolate(1)
    assert leader.read_index(b"r1")
    cluster.run(1)
    cluster.stabilize()
    cluster.tick(1, 3)
    cluster.stabilize()
    assert cluster.machines[1].reads == []  # no majority answered the heartbeat
    cluster.heal()
    cluster.tick(1)
    cluster.stabilize()
    assert [r.context for r in cluster.machines[1].reads] == [b"r1"]
