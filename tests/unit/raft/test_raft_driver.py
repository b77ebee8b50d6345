"""The driver's `Round`: many groups through one Ready each, with the sync left to the caller."""

from __future__ import annotations

import random

from warren.raft import (
    Entry,
    HardState,
    Membership,
    Message,
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
