"""The Raft log's read-only `source`: compacted or released entries that storage still keeps."""

from __future__ import annotations

import pytest

from warren.raft import Entry, EntryKind, RaftLog, Snapshot
from warren.raft.log import SafetyError
from warren.raft.messages import Membership


class Kept:
    """Storage that still has the compacted entries from `first` on."""

    def __init__(self, entries: list[Entry], first: int) -> None:
        self.entries = {entry.index: entry for entry in entries if entry.index >= first}

    def entry(self, index: int) -> Entry | None:
        return self.entries.get(index)


def compacted_log(first_kept: int) -> tuple[RaftLog, list[Entry]]:
    entries = [
        Entry(1 + index // 4, index, EntryKind.NORMAL, b"%d" % index) for index in range(1, 11)
    ]
    raft_log = RaftLog(Snapshot(6, entries[5].term, Membership(frozenset({1}))), entries, 10)
    raft_log.source = Kept(entries, first_kept)
    return raft_log, entries


def test_compacted_entries_storage_keeps_are_read_from_it() -> None:
    raft_log, entries = compacted_log(first_kept=3)
    assert raft_log.term_at(3) == entries[2].term
    assert raft_log.slice(3, 9) == entries[2:8]  # from storage, then from memory


def test_without_them_the_caller_is_told_to_send_a_snapshot() -> None:
    raft_log, _entries = compacted_log(first_kept=5)
    assert raft_log.term_at(3) is None
    assert raft_log.slice(3, 9) == []


def test_released_entries_stay_in_the_log_and_are_read_from_the_source() -> None:
    entries = [
        Entry(1 + index // 4, index, EntryKind.NORMAL, b"%d" % index) for index in range(1, 11)
    ]
    raft_log = RaftLog(None, entries, 10)
    raft_log.applied = 10
    raft_log.source = Kept(entries, 1)
    raft_log.release(7)
    assert len(raft_log.entries) == 3  # only 8..10 stay in memory
    assert (raft_log.released_index, raft_log.snapshot_index, raft_log.last_index) == (7, 0, 10)
    assert not raft_log.in_memory(7) and raft_log.in_memory(8)
    assert [raft_log.term_at(index) for index in (5, 7, 8)] == [2, 2, 3]
    assert raft_log.slice(5, 10) == entries[4:9]  # released ones from the source
    # an append that repeats released (committed) entries finds no conflict
    assert raft_log.try_append(4, 2, 10, entries[4:]) == 10
    assert raft_log.entries == entries[7:]
    raft_log.release(5)  # behind what is released already: nothing to do
    assert raft_log.compact(9) == 3  # a snapshot later drops what is left before it
    assert (raft_log.snapshot_index, raft_log.released_index, raft_log.entries) == (
        9,
        9,
        entries[9:],
    )


def test_only_applied_stable_entries_are_released_and_only_with_a_source() -> None:
    entries = [Entry(1, index, EntryKind.NORMAL, b"") for index in range(1, 6)]
    raft_log = RaftLog(None, entries, 5)
    raft_log.applied = 3
    with pytest.raises(SafetyError):
        raft_log.release(2)  # no source to read them back from
    raft_log.source = Kept(entries, 1)
    with pytest.raises(SafetyError):
        raft_log.release(4)  # not applied yet
    raft_log.release(3)
    assert raft_log.committed_unapplied() == entries[3:]
