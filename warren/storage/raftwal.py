"""One write-ahead log per node for every Raft group it hosts.

Theory of operation:
1. `RaftWal` is the only writer of its `Log` (own directory). Every record names its
   group (a string) and is one of: ENTRIES (a run of consecutive entries, each index, term,
   kind, data), HARD_STATE (term, vote, commit), SNAPSHOT (index, term, the first index
   whose entry must stay readable, the membership bytes as the caller gave them, the
   application's data), BODIES (entries encoded as ENTRIES, kept only to be read back,
   never part of the log), DROP (forget the group) or LEFT (the node left the group:
   forget it as DROP does, but keep its term and vote for a replica made again; see
   `warren.runtime.cluster.raft_host`, point 10). Encoding is plain `struct`,
   little-endian; the log adds the CRC and sequence number.
2. Writes only append in memory. Durability is the log's group commit: `seal` on the
   event loop, `sync_batch` on a worker thread (appends may go on meanwhile), then
   `reclaim` back on the loop with no batch in flight. `sync` does all three at once.
3. Replay (`open`) folds the records in order into one `GroupState` per group, with the
   rules of `warren.raft.Storage`: an ENTRIES record at index i replaces stored entries
   from i on; a SNAPSHOT drops the entries up to its index and keeps later ones only if
   the stored entry at its index had the snapshot's term (InstallSnapshot receiver rules 6
   and 7: a diverged log goes whole); a DROP forgets the group. The keep-or-drop decision
   is taken when the snapshot is written and stored in the record, so replay never needs
   an entry that space reclaim may have deleted since. A LEFT record's term and vote are
   handed over apart (`take_left`) unless a later record of the group made it again,
   whose state then starts from them. LEFT is a later kind than the others: data
   written before it has none and reads as before; a release before it refuses a WAL
   holding one (an unknown kind) rather than forget a vote.
4. Space: per group a ledger of which records are live: the latest HARD_STATE, the latest
   SNAPSHOT, and ENTRIES records holding an entry after the snapshot not replaced by a
   later append; a LEFT record counts as the group's latest HARD_STATE. Everything else is
   dead, a DROP record at once. A record becomes dead
   only when the record that supersedes it is durable (a pending kill waits in `_kills`),
   so a crash can never find the old record deleted and the new one lost. A sealed
   segment with no live record is retired; the log deletes retired segments oldest first
   only, which is what lets superseding records be dead themselves (see `warren.storage.
   log`, point 6).
6. Reading entries back (`read_entry`): a snapshot says from which index on the entries
   must stay readable (``keep_from``; the index after the snapshot's by default). A queue
   keeps only a small record per message and reads its body from the entry that enqueued
   it (RabbitMQ's quorum queues do the same): the log is kept from the oldest live
   message on. Each ENTRIES record is therefore live twice, as part of the Raft log (until
   a snapshot covers it) and as something to read (until a snapshot's ``keep_from`` is past
   it, or a later append replaced its entries). A snapshot installed from the leader comes
   with the entries the application still reads; they are written as one BODIES record
   just before it, and every older readable record of the group dies with it (the log it
   came from may have diverged). Replay tracks where every readable record lies, so reads
   work after a restart too. The latest snapshot's data can be read back too
   (`read_snapshot_data`, once durable), so a Raft host need not keep it in memory.
5. The WAL knows nothing about Raft: it takes primitive values and never imports
   `warren.raft`. Threads: as `Log` (only `sync_batch` may run on another thread).
"""

from __future__ import annotations

import array
import bisect
import enum
import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from warren.storage.log import SEGMENT_MAX_BYTES_DEFAULT, Batch, Log, LogCorrupt, RecoveryReport

__all__ = ["GroupState", "RaftWal", "StoredEntry", "StoredHardState", "StoredSnapshot"]


class _Kind(enum.IntEnum):
    ENTRIES = 1
    HARD_STATE = 2
    SNAPSHOT = 3
    DROP = 4
    BODIES = 5
    LEFT = 6


_HEAD: Final = struct.Struct("<BH")  # record kind, group id length; then the group id
_COUNT: Final = struct.Struct("<I")
_ENTRY: Final = struct.Struct("<QQBI")  # index, term, kind length, data length; kind, data
_HARD_STATE: Final = struct.Struct("<QQQ")  # term, vote, commit
_LEFT: Final = struct.Struct("<QQ")  # term, vote
# index, term, keeps entries, keep_from, membership and data lengths
_SNAPSHOT: Final = struct.Struct("<QQBQII")


@dataclass(frozen=True, slots=True)
class StoredEntry:
    index: int
    term: int
    kind: str
    data: bytes


@dataclass(frozen=True, slots=True)
class StoredHardState:
    term: int = 0
    vote: int = 0
    commit: int = 0


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    index: int
    term: int
    membership: bytes
    data: bytes


@dataclass(slots=True)
class GroupState:
    """One group as replay found it: the entries follow the snapshot (if any) in order."""

    hard_state: StoredHardState = field(default_factory=StoredHardState)
    snapshot: StoredSnapshot | None = None
    entries: list[StoredEntry] = field(default_factory=list)


class _Readable:
    """Where the live readable records (ENTRIES and BODIES) of one group lie, in index
    order, as columns: a long queue keeps tens of thousands of records alive, and a list
    per record would cost more than the queue's own record per message."""

    __slots__ = ("first", "in_log", "last", "offset", "segment", "sequence")

    def __init__(self) -> None:
        self.first = array.array("q")  # the index of the record's first entry
        self.last = array.array("q")  # ... and of its last one
        self.segment = array.array("q")  # the segment id, offset and sequence of the record
        self.offset = array.array("q")
        self.sequence = array.array("q")
        self.in_log = array.array("B")  # 1: an ENTRIES record, 0: BODIES (no terms)

    def __len__(self) -> int:
        return len(self.first)

    def columns(self) -> tuple[array.array[int], ...]:
        return (self.first, self.last, self.segment, self.offset, self.sequence, self.in_log)

    def find(self, index: int) -> int | None:
        """The position of the record holding `index`, if any."""
        position = bisect.bisect_right(self.first, index) - 1
        return position if position >= 0 and self.last[position] >= index else None

    def append(self, *record: int) -> None:
        for column, value in zip(self.columns(), record, strict=True):
            column.append(value)

    def pop(self) -> int:
        """Remove the last record; its segment id."""
        segment_id = self.segment[-1]
        for column in self.columns():
            column.pop()
        return segment_id

    def drop_front(self, count: int) -> list[int]:
        """Remove the first `count` records; their segment ids."""
        segments = self.segment[:count].tolist()
        for column in self.columns():
            del column[:count]
        return segments


@dataclass(slots=True)
class _Ledger:
    """Which records of one group are live, and the terms of its stored entries."""

    first_index: int = 1  # the index of terms[0]
    terms: list[int] = field(default_factory=list)
    # [first index, last index, segment id] of live ENTRIES records, in index order
    entry_records: deque[list[int]] = field(default_factory=deque)
    hard_state_segment: int = 0  # 0: none stored
    snapshot_segment: int = 0
    snapshot_offset: int = 0  # where the latest SNAPSHOT record lies in its segment
    snapshot_sequence: int = 0
    snapshot_index: int = 0
    snapshot_term: int = 0
    readable: _Readable = field(default_factory=_Readable)
    readable_from: int = 0  # the latest snapshot's keep_from: no entry before it is read

    def term_at(self, index: int) -> int | None:
        if index == self.snapshot_index and self.snapshot_segment:
            return self.snapshot_term
        offset = index - self.first_index
        return self.terms[offset] if 0 <= offset < len(self.terms) else None


class RaftWal:
    """See the module docstring. Create with `RaftWal.open`."""

    def __init__(self, log: Log, report: RecoveryReport) -> None:
        self.log = log
        self.report = report
        self._ledgers: dict[str, _Ledger] = {}
        self._live: dict[int, int] = {}  # segment id -> live records in it
        self._kills: deque[tuple[int, int]] = deque()  # (killer sequence, victim segment)
        self._recovered: dict[str, GroupState] = {}
        self._left: dict[str, StoredHardState] = {}  # replay: the LEFT records in force
        # the entries of the record read last (sequential reads hit it): (sequence, entries)
        self._last_read: tuple[int, list[StoredEntry]] = (0, [])
        # replay: (group, entries, sequence, segment id, offset) of a BODIES record
        self._pending_bodies: tuple[str, list[StoredEntry], int, int, int] | None = None

    @classmethod
    def open(
        cls, directory: str | Path, segment_max_bytes: int = SEGMENT_MAX_BYTES_DEFAULT
    ) -> RaftWal:
        """Open (or create) the WAL in `directory` and replay it (`take_recovered`)."""
        log, report = Log.open(directory, segment_max_bytes)
        wal = cls(log, report)
        try:
            for sequence, segment_id, offset, payload in log.located_records():
                wal._replay(sequence, segment_id, offset, payload)
            wal._kills_due()
        except BaseException:
            log.close(flush=False)
            raise
        return wal

    def take_recovered(self) -> dict[str, GroupState]:
        """The groups replay found, handed over once (later calls return nothing)."""
        recovered, self._recovered = self._recovered, {}
        return recovered

    def take_left(self) -> dict[str, StoredHardState]:
        """The term and vote (commit 0) of every group the node left and did not host
        again, as replay found them, handed over once."""
        left, self._left = self._left, {}
        return left

    # --- writing ---------------------------------------------------------------------------

    def append_entries(self, group: str, entries: Sequence[StoredEntry]) -> None:
        """Store consecutive entries; stored entries from `entries[0].index` on are replaced."""
        if not entries:
            return
        sequence, segment_id = self._append(_encode_entries(_Kind.ENTRIES, group, entries))
        ledger = self._ledger(group)
        self._track_entries(ledger, entries, sequence, segment_id)
        self._track_readable(ledger, entries, sequence, segment_id, self.log.last_record_offset)

    def save_hard_state(self, group: str, term: int, vote: int, commit: int) -> None:
        sequence, segment_id = self._append(
            _head(_Kind.HARD_STATE, group) + _HARD_STATE.pack(term, vote, commit)
        )
        self._track_hard_state(self._ledger(group), sequence, segment_id)

    def save_snapshot(
        self,
        group: str,
        index: int,
        term: int,
        membership: bytes,
        data: bytes,
        keep_from: int | None = None,
        bodies: Sequence[StoredEntry] = (),
    ) -> None:
        """Store a snapshot in place of the entries up to `index` (module docstring, 3);
        entries from `keep_from` on stay readable, and `bodies` (a snapshot installed from
        the leader: the entries up to `index` still read) replace every readable record."""
        ledger = self._ledger(group)
        if bodies:
            bodies_sequence, segment_id = self._append(_encode_entries(_Kind.BODIES, group, bodies))
            offset = self.log.last_record_offset
            self._track_installed_bodies(ledger, index, bodies, bodies_sequence, segment_id, offset)
        keeps = ledger.term_at(index) == term
        keep_from = index + 1 if keep_from is None else keep_from
        head = _SNAPSHOT.pack(index, term, keeps, keep_from, len(membership), len(data))
        sequence, segment_id = self._append(
            b"".join((_head(_Kind.SNAPSHOT, group), head, membership, data))
        )
        location = (sequence, segment_id, self.log.last_record_offset)
        self._track_snapshot(ledger, index, term, keeps, *location)
        self._track_keep_from(ledger, index, keeps, keep_from, sequence)

    def durable_snapshot_index(self, group: str) -> int | None:
        """The index of the group's latest snapshot once its record is durable, else None."""
        ledger = self._ledgers.get(group)
        if ledger is None or not ledger.snapshot_segment:
            return None
        if ledger.snapshot_sequence > self.log.durable_sequence:
            return None
        return ledger.snapshot_index

    def read_snapshot_data(self, group: str) -> bytes:
        """The application's data of the group's latest snapshot (`durable_snapshot_index`)."""
        ledger = self._ledgers[group]
        sequence = ledger.snapshot_sequence
        payload = self.log.read_record(ledger.snapshot_segment, ledger.snapshot_offset, sequence)
        return _decode_snapshot(payload, _decode_head(payload)[2])[0].data

    def read_entry(self, group: str, index: int) -> bytes | None:
        """The data of the entry at `index` if it is readable (module docstring, 6)."""
        found = self.read_stored(group, index, from_log=False)
        return found.data if found is not None else None

    def read_stored(self, group: str, index: int, from_log: bool = True) -> StoredEntry | None:
        """The entry at `index` if it is readable; `from_log`: only as an ENTRIES record
        wrote it (a BODIES record keeps no term)."""
        ledger = self._ledgers.get(group)
        if ledger is None or index < ledger.readable_from:
            return None  # a record may hold entries before keep_from as well
        readable = ledger.readable
        position = readable.find(index)
        if position is None or (from_log and not readable.in_log[position]):
            return None
        first, sequence = readable.first[position], readable.sequence[position]
        if self._last_read[0] != sequence:
            segment_id, record_offset = readable.segment[position], readable.offset[position]
            payload = self.log.read_record(segment_id, record_offset, sequence)
            self._last_read = (sequence, _decode_entries(payload, _decode_head(payload)[2]))
        entries = self._last_read[1]
        offset = index - first  # consecutive in ENTRIES records, sparse in BODIES ones
        if offset >= len(entries) or entries[offset].index != index:
            offset = bisect.bisect_left(entries, index, key=_entry_index)
            if offset >= len(entries) or entries[offset].index != index:
                return None
        return entries[offset]

    def drop_group(self, group: str) -> None:
        """Forget the group: its records are dead once this record is durable."""
        sequence, _segment_id = self._append(_head(_Kind.DROP, group))
        self._track_drop(group, sequence)

    def leave_group(self, group: str, term: int, vote: int) -> None:
        """Forget the group as `drop_group` does, but keep its term and vote (`take_left`
        after a restart) until the group is stored again or dropped."""
        sequence, segment_id = self._append(_head(_Kind.LEFT, group) + _LEFT.pack(term, vote))
        self._track_left(group, sequence, segment_id)

    def _append(self, payload: bytes) -> tuple[int, int]:
        sequence = self.log.append(payload)
        return sequence, self.log.active_segment_id

    # --- group commit and space ------------------------------------------------------------

    def seal(self) -> Batch | None:
        return self.log.seal()

    def sync_batch(self, batch: Batch) -> int:
        """Write and sync a sealed batch (any thread); `LogFailed` if the disk refused."""
        return self.log.sync_batch(batch)

    def reclaim(self) -> list[int]:
        """Apply kills whose killer is durable and retire sealed segments with no live
        record; the segment ids deleted. Never while a batch is in flight."""
        self._kills_due()
        segments = self.log.segments()
        for info in segments[:-1]:
            if not info.retired and not self._live.get(info.segment_id):
                self._live.pop(info.segment_id, None)
                self.log.retire(info.segment_id)
        return self.log.reclaim()

    def sync(self) -> int:
        """Seal, sync and reclaim on this thread; the highest durable sequence number."""
        durable = self.log.flush_and_sync()
        self.reclaim()
        return durable

    def close(self) -> None:
        self.log.close()

    @property
    def segment_count(self) -> int:
        return len(self.log.segments())

    # --- the ledger ------------------------------------------------------------------------

    def _ledger(self, group: str) -> _Ledger:
        ledger = self._ledgers.get(group)
        if ledger is None:
            ledger = self._ledgers[group] = _Ledger()
        return ledger

    def _add_live(self, segment_id: int) -> None:
        self._live[segment_id] = self._live.get(segment_id, 0) + 1

    def _kill(self, killer: int, segment_id: int) -> None:
        self._kills.append((killer, segment_id))

    def _kills_due(self) -> None:
        durable = self.log.durable_sequence
        kills = self._kills
        live = self._live
        while kills and kills[0][0] <= durable:
            segment_id = kills.popleft()[1]
            live[segment_id] -= 1

    def _track_entries(
        self, ledger: _Ledger, entries: Sequence[StoredEntry], sequence: int, segment_id: int
    ) -> None:
        first = entries[0].index
        records = ledger.entry_records
        while records and records[-1][0] >= first:
            self._kill(sequence, records.pop()[2])
        if records and records[-1][1] >= first:
            records[-1][1] = first - 1
        records.append([first, entries[-1].index, segment_id])
        self._add_live(segment_id)
        offset = first - ledger.first_index
        if 0 <= offset <= len(ledger.terms):
            del ledger.terms[offset:]
        else:
            ledger.terms = []
            ledger.first_index = first
        ledger.terms.extend(entry.term for entry in entries)

    def _track_readable(
        self,
        ledger: _Ledger,
        entries: Sequence[StoredEntry],
        sequence: int,
        segment_id: int,
        offset: int,
    ) -> None:
        first = entries[0].index
        readable = ledger.readable
        while readable and readable.first[-1] >= first:
            self._kill(sequence, readable.pop())
        if readable and readable.last[-1] >= first:
            readable.last[-1] = first - 1
        readable.append(first, entries[-1].index, segment_id, offset, sequence, 1)
        self._add_live(segment_id)

    def _track_installed_bodies(
        self,
        ledger: _Ledger,
        index: int,
        bodies: Sequence[StoredEntry],
        sequence: int,
        segment_id: int,
        offset: int,
    ) -> None:
        """The bodies of a snapshot at `index` installed from the leader: every readable
        record holding entries up to `index` dies (the log it came from has diverged, or
        the leader would not have sent a snapshot)."""
        readable = ledger.readable
        ledger.readable_from = 0  # the snapshot's keep_from follows: what the bodies hold
        for victim in readable.drop_front(bisect.bisect_right(readable.first, index)):
            self._kill(sequence, victim)
        record = (bodies[0].index, bodies[-1].index, segment_id, offset, sequence, 0)
        for column, value in zip(readable.columns(), record, strict=True):
            column.insert(0, value)
        self._add_live(segment_id)

    def _track_keep_from(
        self, ledger: _Ledger, index: int, keeps: bool, keep_from: int, sequence: int
    ) -> None:
        readable = ledger.readable
        ledger.readable_from = max(ledger.readable_from, keep_from)
        if not keeps:  # a diverged log goes whole after `index`: so does what it held
            while readable and readable.first[-1] > index:
                self._kill(sequence, readable.pop())
            if readable and readable.last[-1] > index:
                readable.last[-1] = index
        for victim in readable.drop_front(bisect.bisect_left(readable.last, keep_from)):
            self._kill(sequence, victim)

    def _track_hard_state(self, ledger: _Ledger, sequence: int, segment_id: int) -> None:
        if ledger.hard_state_segment:
            self._kill(sequence, ledger.hard_state_segment)
        ledger.hard_state_segment = segment_id
        self._add_live(segment_id)

    def _track_snapshot(
        self,
        ledger: _Ledger,
        index: int,
        term: int,
        keeps: bool,
        sequence: int,
        segment_id: int,
        offset: int,
    ) -> None:
        if ledger.snapshot_segment:
            self._kill(sequence, ledger.snapshot_segment)
        ledger.snapshot_segment = segment_id
        ledger.snapshot_offset = offset
        ledger.snapshot_sequence = sequence
        ledger.snapshot_index = index
        ledger.snapshot_term = term
        self._add_live(segment_id)
        records = ledger.entry_records
        while records and (not keeps or records[0][1] <= index):
            self._kill(sequence, records.popleft()[2])
        if keeps:
            drop = min(max(index + 1 - ledger.first_index, 0), len(ledger.terms))
            del ledger.terms[:drop]
            ledger.first_index += drop
        else:
            ledger.terms = []
            ledger.first_index = index + 1

    def _track_drop(self, group: str, sequence: int) -> None:
        ledger = self._ledgers.pop(group, None)
        if ledger is None:
            return
        for segment_id in (ledger.hard_state_segment, ledger.snapshot_segment):
            if segment_id:
                self._kill(sequence, segment_id)
        for record in ledger.entry_records:
            self._kill(sequence, record[2])
        for segment_id in ledger.readable.segment:
            self._kill(sequence, segment_id)

    def _track_left(self, group: str, sequence: int, segment_id: int) -> None:
        self._track_drop(group, sequence)
        self._track_hard_state(self._ledger(group), sequence, segment_id)

    # --- replay ----------------------------------------------------------------------------

    def _replay(self, sequence: int, segment_id: int, offset: int, payload: bytes) -> None:
        # a BODIES record counts only with the SNAPSHOT record written right after it
        pending, self._pending_bodies = self._pending_bodies, None
        try:
            kind, group, position = _decode_head(payload)
            if kind is _Kind.ENTRIES:
                entries = _decode_entries(payload, position)
                _replay_entries(self._replayed(group), entries)
                ledger = self._ledger(group)
                self._track_entries(ledger, entries, sequence, segment_id)
                self._track_readable(ledger, entries, sequence, segment_id, offset)
            elif kind is _Kind.BODIES:
                bodies = _decode_entries(payload, position)
                self._pending_bodies = (group, bodies, sequence, segment_id, offset)
            elif kind is _Kind.HARD_STATE:
                term, vote, commit = _HARD_STATE.unpack_from(payload, position)
                state = self._replayed(group)
                state.hard_state = StoredHardState(term, vote, commit)
                self._track_hard_state(self._ledger(group), sequence, segment_id)
            elif kind is _Kind.SNAPSHOT:
                snapshot, keeps, keep_from = _decode_snapshot(payload, position)
                state = self._replayed(group)
                state.snapshot = snapshot
                state.entries = [e for e in state.entries if keeps and e.index > snapshot.index]
                ledger = self._ledger(group)
                if pending is not None and pending[0] == group:
                    self._track_installed_bodies(ledger, snapshot.index, *pending[1:])
                self._track_snapshot(
                    ledger, snapshot.index, snapshot.term, keeps, sequence, segment_id, offset
                )
                self._track_keep_from(ledger, snapshot.index, keeps, keep_from, sequence)
            elif kind is _Kind.LEFT:
                term, vote = _LEFT.unpack_from(payload, position)
                self._recovered.pop(group, None)
                self._left[group] = StoredHardState(term, vote)
                self._track_left(group, sequence, segment_id)
            else:
                self._recovered.pop(group, None)
                self._left.pop(group, None)
                self._track_drop(group, sequence)
        except (struct.error, ValueError, IndexError) as error:
            raise LogCorrupt(f"Raft WAL record {sequence} does not decode: {error}") from error

    def _replayed(self, group: str) -> GroupState:
        """The group's state so far; a group left and stored again starts from the term
        and vote its LEFT record kept."""
        state = self._recovered.get(group)
        if state is None:
            left = self._left.pop(group, None)
            state = self._recovered[group] = GroupState(left or StoredHardState())
        return state


def _head(kind: _Kind, group: str) -> bytes:
    name = group.encode("utf-8")
    return _HEAD.pack(kind, len(name)) + name


def _encode_entries(kind: _Kind, group: str, entries: Sequence[StoredEntry]) -> bytes:
    parts = [_head(kind, group), _COUNT.pack(len(entries))]
    for entry in entries:
        entry_kind = entry.kind.encode("ascii")
        parts.append(_ENTRY.pack(entry.index, entry.term, len(entry_kind), len(entry.data)))
        parts.append(entry_kind)
        parts.append(entry.data)
    return b"".join(parts)


def _entry_index(entry: StoredEntry) -> int:
    return entry.index


def _decode_head(payload: bytes) -> tuple[_Kind, str, int]:
    kind, length = _HEAD.unpack_from(payload, 0)
    start = _HEAD.size
    return _Kind(kind), payload[start : start + length].decode("utf-8"), start + length


def _decode_entries(payload: bytes, position: int) -> list[StoredEntry]:
    (count,) = _COUNT.unpack_from(payload, position)
    position += _COUNT.size
    entries = []
    for _ in range(count):
        index, term, kind_length, data_length = _ENTRY.unpack_from(payload, position)
        position += _ENTRY.size
        kind = payload[position : position + kind_length].decode("ascii")
        position += kind_length
        data = payload[position : position + data_length]
        if len(data) != data_length:
            raise ValueError("entry data cut short")
        position += data_length
        entries.append(StoredEntry(index, term, kind, data))
    return entries


def _decode_snapshot(payload: bytes, position: int) -> tuple[StoredSnapshot, bool, int]:
    index, term, keeps, keep_from, membership_length, data_length = _SNAPSHOT.unpack_from(
        payload, position
    )
    position += _SNAPSHOT.size
    membership = payload[position : position + membership_length]
    position += membership_length
    data = payload[position : position + data_length]
    if len(data) != data_length:
        raise ValueError("snapshot data cut short")
    return StoredSnapshot(index, term, membership, data), bool(keeps), keep_from


def _replay_entries(state: GroupState, entries: list[StoredEntry]) -> None:
    stored = state.entries
    first = entries[0].index
    if stored and stored[0].index <= first <= stored[-1].index + 1:
        del stored[first - stored[0].index :]
        stored.extend(entries)
    else:
        # Nothing stored, or a gap left by records reclaim deleted: they were dead, and
        # everything live is contiguous with the newer entries.
        state.entries = entries
