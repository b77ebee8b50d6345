"""The Raft log's read-only `source`: compacted entries that storage still keeps."""

from __future__ import annotations

from warren.raft import Entry, EntryKind, RaftLog, Snapshot
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
