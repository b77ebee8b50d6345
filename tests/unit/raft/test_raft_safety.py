"""Safety rules beyond the paper's happy path, each from a run that broke them.

Stack simulator seed 27 (on the `seeds` branch's commits 41a0132 to 0fe91ac) ended with a
queue's leader of term 2 holding a term-2 entry at index 52 where its followers had
committed a term-1 entry: the leader of term 1 had committed it with a replica that was
then removed and made again, empty, and that empty replica elected a node that lacked it.
The commit cap on heartbeats is the rule the investigation suspected first.
"""

from __future__ import annotations

from warren.raft import (
    Entry,
    EntryKind,
    HardState,
    Membership,
    MembershipChange,
    Message,
    MessageType,
    Role,
    Snapshot,
)
from warren.testing.raft_cluster import Cluster


def plain() -> Cluster:
    """Three voters, no pre-vote and no check-quorum: every step is the test's."""
    return Cluster([1, 2, 3], pre_vote=False, check_quorum=False)


def entries(*terms: int, first: int = 1) -> tuple[Entry, ...]:
    return tuple(
        Entry(term, index, EntryKind.NORMAL, b"%d@%d" % (index, term))
        for index, term in enumerate(terms, first)
    )


def test_a_heartbeat_commits_only_what_an_append_of_this_term_matched() -> None:
    # Figure 2, AppendEntries rule 5: commitIndex = min(leaderCommit, index of last new
    # entry). Node 2 holds an uncommitted term-1 tail; the term-2 leader's log is
    # 1@1 2@1 3@2, committed to 3. A leader's belief of where a follower matches can be
    # wrong (seed 27's precursor set it from a reject's hint); the follower must not trust it.
    cluster = plain()
    cluster.storage[2].entries = list(entries(1, 1, 1))
    cluster.storage[2].hard_state = HardState(term=2, commit=1)
    node = cluster.restart(2)
    node.step(Message(MessageType.HEARTBEAT, 2, 1, term=2, commit=3))
    cluster.run(2)
    assert node.log.commit_index == 1  # nothing of its log is known to match yet
    # an append matches up to 2 only: its entry 3 (term 1) is still not the leader's
    node.step(
        Message(MessageType.APPEND, 2, 1, term=2, index=1, log_term=1, entries=entries(1, first=2))
    )
    cluster.run(2)
    node.step(Message(MessageType.HEARTBEAT, 2, 1, term=2, commit=3))
    cluster.run(2)
    assert node.log.commit_index == 2
    node.step(
        Message(
            MessageType.APPEND,
            2,
            1,
            term=2,
            index=2,
            log_term=1,
            entries=entries(2, first=3),
            commit=3,
        )
    )
    cluster.run(2)
    assert node.log.commit_index == 3
    assert [entry.term for entry in cluster.machines[2].applied] == [1, 1, 2]


def test_a_replica_made_again_empty_votes_for_no_one() -> None:
    # Seed 27: 1 leads term 1 and commits an entry with 2 while 3 is cut off; 1 then
    # removes 2, whose node drops its replica and makes it again, empty (delete_member,
    # then add_member). 3 never learned of the removal and still counts 2 as a voter: the
    # empty replica's vote, had it been given, made 3 leader without the committed entry.
    cluster = plain()
    leader = cluster.elect(1)
    cluster.isolate(3)
    kept = cluster.propose(1, b"kept")
    cluster.stabilize()
    assert kept is not None and leader.log.commit_index >= kept
    assert leader.propose_membership(MembershipChange.REMOVE, 2) is not None
    cluster.run(1)
    cluster.stabilize()
    assert leader.membership.voters == {1, 3}
    cluster.wipe(2)
    cluster.crash(1)
    cluster.heal()
    assert cluster[3].membership.voters == {1, 2, 3}
    cluster.campaign(3)
    cluster.stabilize()
    assert cluster[3].role is not Role.LEADER
    answers = [m for m in cluster.delivered if m.type is MessageType.VOTE_RESPONSE]
    assert [(m.sender, m.to, m.reject) for m in answers][-1] == (2, 3, True)
    # the removed leader's node comes back; the group goes on with what it committed
    cluster.restart(1)
    for _ in range(2):  # 3 took term 2 already: 1's first campaign may lose
        if cluster[1].role is not Role.LEADER:
            cluster.campaign(1)
            cluster.stabilize()
    assert cluster[1].role is Role.LEADER
    cluster.tick(1)
    cluster.stabilize()
    assert cluster[3].log.entry_at(kept).data == b"kept"


def test_a_learner_still_votes() -> None:
    # A candidate may know a later configuration in which the learner is a voter (etcd
    # lets learners vote for the same reason): membership of either kind is enough.
    cluster = Cluster([1, 2, 3], others=[4], pre_vote=False, check_quorum=False)
    leader = cluster.elect(1)
    assert leader.propose_membership(MembershipChange.ADD_LEARNER, 4) is not None
    cluster.run(1)
    cluster.stabilize()
    assert cluster[4].membership.learners == {4} or 4 in cluster[4].membership.voters
    cluster.crash(1)
    cluster.campaign(2)
    cluster.deliver(sender=2, to=4)
    answer = next(m for m in cluster.pending if m.type is MessageType.VOTE_RESPONSE)
    assert answer.sender == 4 and not answer.reject


def test_a_replica_made_again_does_not_vote_twice_in_a_term() -> None:
    # The gap point 13 left. 1 leads term 4; 3 campaigns in term 5 and 2 votes for it.
    # Before 1 hears of term 5 it removes 2, whose node drops the replica and makes it
    # again, empty; 1 sends the new replica a snapshot with the configuration it knows
    # (2 a voter). Had the new replica started at term 0 it would take term 4 from 1,
    # then grant 1's vote request for term 5: node 2's second vote in term 5, for a
    # second leader of the term.
    cluster = plain()
    node = cluster[2]
    node.step(Message(MessageType.VOTE, 2, 3, term=5))
    cluster.run(2)
    assert (node.term, node.vote) == (5, 3)
    node = cluster.wipe(2)
    old = Snapshot(1, 1, Membership(frozenset({1, 2, 3})))
    node.step(Message(MessageType.SNAPSHOT, 2, 1, term=4, snapshot=old))
    cluster.run(2)
    node.step(Message(MessageType.VOTE, 2, 1, term=5, index=1, log_term=1))
    cluster.run(2)
    answer = [m for m in cluster.pending if m.type is MessageType.VOTE_RESPONSE][-1]
    assert (answer.to, answer.reject) == (1, True)
    assert (node.term, node.vote) == (5, 3)
