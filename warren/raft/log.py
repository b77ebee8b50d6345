"""One node's view of the replicated log: a snapshot offset, entries after it, and cursors.

Theory of operation:
1. The log holds the entries after `released_index` in memory: `entries[i].index ==
   released_index + 1 + i`. The snapshot stands in for everything up to `snapshot_index`,
   whose term is `snapshot_term` (the paper's lastIncludedIndex/lastIncludedTerm).
   Entries between the two are in the log but only on stable storage (point 5).
2. Five cursors, always ordered ``applied <= commit_index <= last_index``,
   ``snapshot_index <= stable_index <= last_index`` and ``snapshot_index <= released_index
   <= min(applied, commit_index, stable_index)``:
   - `stable_index`: entries up to here are on the node's stable storage; later ones are
     handed out in the next `Ready` to be persisted;
   - `commit_index`: known to be committed (figure 2's commitIndex);
   - `applied`: handed to the state machine (lastApplied).
3. Appending entries that conflict with the log truncates the log at the first conflict
   (figure 2, AppendEntries receiver rule 3). A committed entry is never truncated: that
   would be a safety bug, so it raises.
4. The log never reaches for storage: a node is built from what storage recovered, and
   afterwards the log is the source of truth that storage follows. One exception, read
   only: an `EntrySource` the driver may set (`source`) answers for entries a compaction
   dropped from memory that storage still keeps (a queue reads its bodies from them), so
   a leader can send them to a follower that is only a little behind instead of a whole
   snapshot. Those entries are committed, hence the same on every node.
5. `release(index)` drops entries up to `index` from memory without a snapshot: they are
   committed, applied and stable, so the `source` answers for them (their term, their
   data) as for compacted ones. A snapshot costs as much as the state it holds, so it is
   taken rarely; releasing costs nothing, so a log whose entries a machine keeps reading
   (a quorum queue's bodies) need not hold them in memory until the next snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from warren.raft.messages import Entry, Snapshot


class EntrySource(Protocol):
    def entry(self, index: int) -> Entry | None:
        """The compacted entry at `index` if stable storage still has it."""


class SafetyError(AssertionError):
    """The core was asked to do something Raft forbids; always a bug somewhere."""


class RaftLog:
    __slots__ = (
        "applied",
        "commit_index",
        "entries",
        "released_index",
        "released_term",
        "snapshot_index",
        "snapshot_term",
        "source",
        "stable_index",
    )

    def __init__(self, snapshot: Snapshot | None, entries: Sequence[Entry], commit_index: int):
        self.snapshot_index = snapshot.index if snapshot is not None else 0
        self.snapshot_term = snapshot.term if snapshot is not None else 0
        self.released_index = self.snapshot_index
        self.released_term = self.snapshot_term
        self.entries: list[Entry] = [e for e in entries if e.index > self.snapshot_index]
        for offset, entry in enumerate(self.entries):
            if entry.index != self.snapshot_index + 1 + offset:
                raise SafetyError(f"log has a gap before index {entry.index}")
        self.stable_index = self.last_index
        # A stored commit index beyond the stored log can only come from lost writes; the
        # entries will be re-learned from the leader, so trust only what is here.
        self.commit_index = max(self.snapshot_index, min(commit_index, self.last_index))
        self.applied = self.snapshot_index
        self.source: EntrySource | None = None  # point 4

    @property
    def first_index(self) -> int:
        return self.snapshot_index + 1

    @property
    def last_index(self) -> int:
        return self.released_index + len(self.entries)

    @property
    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.released_term

    def term_at(self, index: int) -> int | None:
        """The term of the entry at `index`; None if compacted away or not yet written."""
        if index == self.released_index:
            return self.released_term
        if index == self.snapshot_index:
            return self.snapshot_term
        if index < self.released_index:
            if self.source is None:
                return None
            if index == 0:
                return 0  # before the first entry of every log
            found = self.source.entry(index)
            return found.term if found is not None else None
        if index > self.last_index:
            return None
        return self.entries[index - self.released_index - 1].term

    def matches(self, index: int, term: int) -> bool:
        return self.term_at(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Section 5.4.1: is a candidate's log at least as up-to-date as ours?"""
        return last_term > self.last_term or (
            last_term == self.last_term and last_index >= self.last_index
        )

    def slice(self, low: int, high: int) -> list[Entry]:
        """Entries with low <= index < high; low must be after the snapshot, or the
        compacted entries from low on must be in the `source` (else none are returned).
        Released ones come from the `source` too."""
        offset = self.released_index + 1
        if low > self.released_index:
            return self.entries[low - offset : high - offset]
        if self.source is None:
            raise SafetyError(
                f"entries from {low} are compacted (snapshot at {self.snapshot_index})"
            )
        stored = []
        for index in range(low, min(high, offset)):
            found = self.source.entry(index)
            if found is None:
                return []
            stored.append(found)
        return stored + self.entries[: max(0, high - offset)]

    def in_memory(self, index: int) -> bool:
        return self.released_index < index <= self.last_index

    def entry_at(self, index: int) -> Entry:
        """The entry at `index`, which must be `in_memory`."""
        return self.entries[index - self.released_index - 1]

    def append(self, entries: Sequence[Entry]) -> None:
        """Add entries after the last one, or replace a conflicting suffix with them."""
        if not entries:
            return
        first = entries[0].index
        if first <= self.commit_index:
            raise SafetyError(f"truncating committed entry {first} (commit {self.commit_index})")
        if first > self.last_index + 1 or first <= self.snapshot_index:
            raise SafetyError(f"append at {first} leaves a gap after {self.last_index}")
        del self.entries[first - self.released_index - 1 :]
        self.entries.extend(entries)
        self.stable_index = min(self.stable_index, first - 1)

    def try_append(
        self, prev_index: int, prev_term: int, leader_commit: int, entries: Sequence[Entry]
    ) -> int | None:
        """AppendEntries receiver rules 2-5; the last index now known to match, or None."""
        if not self.matches(prev_index, prev_term):
            return None
        last_new_index = prev_index + len(entries)
        conflict = self.find_conflict(entries)
        if conflict:
            self.append(entries[conflict - prev_index - 1 :])
        self.commit_to(min(leader_commit, last_new_index))
        return last_new_index

    def find_conflict(self, entries: Sequence[Entry]) -> int:
        """The index of the first entry that is new or differs in term; 0 if none."""
        for entry in entries:
            if entry.index <= self.released_index:
                continue  # snapshotted or released, therefore committed and equal
            if not self.matches(entry.index, entry.term):
                return entry.index
        return 0

    def conflict_hint(self, index: int, term: int) -> int:
        """The largest index <= `index` whose term is <= `term`: nothing after it can match
        a log whose entry at `index` has `term` (etcd's findConflictByTerm)."""
        index = min(index, self.last_index)
        while index > self.snapshot_index:
            entry_term = self.term_at(index)
            if entry_term is not None and entry_term <= term:
                break
            index -= 1
        return index

    def commit_to(self, index: int) -> bool:
        if index <= self.commit_index:
            return False
        if index > self.last_index:
            raise SafetyError(f"commit {index} beyond last index {self.last_index}")
        self.commit_index = index
        return True

    def unstable(self) -> list[Entry]:
        return self.entries[self.stable_index - self.released_index :]

    def committed_unapplied(self) -> list[Entry]:
        start = max(self.applied, self.released_index) + 1
        return self.slice(start, self.commit_index + 1) if start <= self.commit_index else []

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log by a snapshot from the leader (InstallSnapshot rule 7)."""
        self.entries = []
        self.snapshot_index = self.released_index = snapshot.index
        self.snapshot_term = self.released_term = snapshot.term
        self.commit_index = snapshot.index
        self.stable_index = snapshot.index
        # `applied` moves when the driver has applied the snapshot (advance).

    def compact(self, index: int) -> int:
        """Drop entries up to `index` (covered by a local snapshot); returns its term."""
        if index > self.applied or index > self.stable_index:
            raise SafetyError(f"compacting {index} beyond applied {self.applied}")
        term = self.term_at(index)
        if term is None:
            raise SafetyError(f"compacting {index}: not in the log")
        if index > self.released_index:
            self._drop_to(index, term)
        self.snapshot_index = index
        self.snapshot_term = term
        return term

    def release(self, index: int) -> None:
        """Drop the entries up to `index` from memory, keeping them in the log (point 5)."""
        if index <= self.released_index:
            return
        if self.source is None:
            raise SafetyError(f"releasing {index}: no source to read released entries from")
        if index > min(self.applied, self.commit_index, self.stable_index):
            raise SafetyError(f"releasing {index} beyond applied, committed and stable")
        self._drop_to(index, self.entry_at(index).term)

    def _drop_to(self, index: int, term: int) -> None:
        del self.entries[: index - self.released_index]
        self.released_index = index
        self.released_term = term
