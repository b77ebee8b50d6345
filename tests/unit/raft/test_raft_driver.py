"""The driver's `Round`: many groups through one Ready each, with the sync left to the caller."""

from __future__ import annotations

import random

from warren.raft import (
    Entry,
    EntryKind,
    HardState,
    Membership,
    MembershipChange,
    Message,
    MessageType,
    RaftConfig,
    RaftNode,
    ReadState,
    Snapshot,
    begin,
    run_ready,
)


class Group:
    """A `Driven` group whose ports write what they are asked into one shared journal."""

    def __init__(self, name: str, voters: frozenset[int], journal: list[str]) -> None:
        self.name = name
        self.journal = journal
        self.node = RaftNode(
            RaftConfig(1, pre_vote=False), random.Random(1), membership=Membership(voters)
        )
        self.storage = self.transport = self.state_machine = self

    def save_snapshot(self, snapshot: Snapshot) -> None:
        self.journal.append(f"{self.name} snapshot")

    def append_entries(self, entries: object) -> None:
        self.journal.append(f"{self.name} entries")

    def save_hard_state(self, hard_state: HardState) -> None:
        self.journal.append(f"{self.name} hard_state")

    def sync(self) -> None:
        self.journal.append(f"{self.name} sync")

    def send(self, message: Message) -> None:
        self.journal.append(f"{self.name} send")

    def restore(self, snapshot: Snapshot) -> None:
        self.journal.append(f"{self.name} restore")

    def apply(self, entry: Entry) -> None:
        self.journal.append(f"{self.name} apply")

    def read(self, read_state: ReadState) -> None:
        self.journal.append(f"{self.name} read")


def candidates(journal: list[str], *names: str) -> list[Group]:
    groups = [Group(name, frozenset({1, 2}), journal) for name in names]
    for group in groups:
        group.node.campaign()
    return groups


def test_begin_persists_every_group_and_finish_sends_all_before_applying_any() -> None:
    journal: list[str] = []
    solo = Group("s", frozenset({1}), journal)
    solo.node.campaign()  # a single voter leads at once: its empty entry commits
    a, b = candidates(journal, "a", "b")
    round_ = begin([solo, a, b])
    assert round_.wrote and round_.groups == [solo, a, b]
    assert journal == ["s entries", "s hard_state", "a hard_state", "b hard_state"]
    journal.clear()
    round_.finish()
    assert journal == ["a send", "b send"]  # the leader's entry commits only once it is stable
    round_ = begin([solo, a, b])
    assert round_.groups == [solo]
    journal.clear()
    round_.finish()
    assert journal[-1] == "s apply" and "s send" not in journal[journal.index("s apply") :]


def test_groups_take_input_again_after_finish() -> None:
    journal: list[str] = []
    (group,) = candidates(journal, "a")
    begin([group]).finish()
    assert not group.node.has_ready()
    group.node.tick()  # allowed again: the node was advanced


def test_a_group_dropped_from_a_round_is_neither_sent_for_nor_advanced() -> None:
    journal: list[str] = []
    a, b = candidates(journal, "a", "b")
    round_ = begin([a, b])
    round_.drop(a)
    journal.clear()
    round_.finish()
    assert journal == ["b send"]
    assert round_.groups == [b]


def test_a_round_without_readies_writes_nothing() -> None:
    journal: list[str] = []
    (group,) = candidates(journal, "a")
    begin([group]).finish()
    round_ = begin([group])
    assert round_.groups == [] and not round_.wrote


def test_run_ready_is_a_round_of_one_with_the_sync_inline() -> None:
    journal: list[str] = []
    (group,) = candidates(journal, "a")
    assert run_ready(group.node, group, group, group)
    assert journal == ["a hard_state", "a sync", "a send"]
    assert not run_ready(group.node, group, group, group)


class Recorded(Group):
    """A group that records the types of the messages it sends."""

    def send(self, message: Message) -> None:
        self.journal.append(f"{self.name} send {message.type.value}")


def leader(journal: list[str]) -> Recorded:
    """Node 1 of voters {1, 2}, elected with node 2's vote, its empty entry committed."""
    group = Recorded("l", frozenset({1, 2}), journal)
    node = group.node
    node.campaign()
    run_ready(node, group, group, group)
    node.step(Message(MessageType.VOTE_RESPONSE, 1, 2, node.term))
    run_ready(node, group, group, group)
    node.step(Message(MessageType.APPEND_RESPONSE, 1, 2, node.term, index=node.log.last_index))
    run_ready(node, group, group, group)
    journal.clear()
    return group


def test_a_leader_sends_its_appends_before_its_sync_and_only_once() -> None:
    journal: list[str] = []
    group = leader(journal)
    assert group.node.propose(b"x") is not None
    round_ = begin([group])
    round_.send_early()
    assert journal == ["l entries", "l send append"]  # the follower writes meanwhile
    journal.clear()
    round_.finish()
    assert "l send append" not in journal


def test_responses_and_vote_requests_wait_for_the_sync() -> None:
    journal: list[str] = []
    (candidate,) = (Recorded("c", frozenset({1, 2}), journal),)
    candidate.node.campaign()  # a new term and vote in the same Ready as the request
    round_ = begin([candidate])
    round_.send_early()
    assert journal == ["c hard_state"]
    round_.finish()
    assert journal[-1] == "c send vote"
    journal.clear()
    follower = Recorded("f", frozenset({1, 2}), journal)
    append = Message(MessageType.APPEND, 1, 2, 1, entries=(Entry(1, 1, EntryKind.NORMAL, b"x"),))
    follower.node.step(append)
    round_ = begin([follower])
    round_.send_early()
    assert not any("send" in line for line in journal)
    round_.finish()
    assert journal[-1] == "f send append_response"


def test_a_leader_elected_in_the_ready_that_persists_its_term_waits() -> None:
    """A lone voter wins in the Ready that persists its vote: an append sent before
    that is durable could be contradicted after a crash by the same term won again."""
    journal: list[str] = []
    group = Recorded("s", frozenset({1}), journal)
    group.node.campaign()
    group.node.propose_membership(MembershipChange.ADD_LEARNER, 2)
    round_ = begin([group])
    assert round_.groups and not group.node.may_send_early(round_._readies[0][1])
    round_.send_early()
    assert not any("send" in line for line in journal)


def test_entries_durable_before_the_round_are_applied_before_its_sync_once() -> None:
    journal: list[str] = []
    group = leader(journal)
    node = group.node
    node.propose(b"x")
    run_ready(node, group, group, group)  # the entry is durable here
    node.step(Message(MessageType.APPEND_RESPONSE, 1, 2, node.term, index=node.log.last_index))
    node.propose(b"y")
    journal.clear()
    round_ = begin([group])
    round_.apply_early()
    assert journal == ["l entries", "l hard_state", "l apply"]  # x, before y is synced
    journal.clear()
    round_.finish()
    assert "l apply" not in journal and node.log.applied == node.log.commit_index


def test_committed_entries_not_yet_durable_wait_for_the_sync() -> None:
    journal: list[str] = []
    follower = Group("f", frozenset({1, 2}), journal)
    entry = Entry(1, 1, EntryKind.NORMAL, b"x")
    follower.node.step(Message(MessageType.APPEND, 1, 2, 1, entries=(entry,), commit=1))
    round_ = begin([follower])
    round_.apply_early()
    assert "f apply" not in journal  # committed, but written only in this round
    round_.finish()
    assert journal[-1] == "f apply"
