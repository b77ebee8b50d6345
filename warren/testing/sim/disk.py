"""The simulated disk: a write log where only synced writes are sure to survive a crash.

Theory of operation:
1. `SimDisk` implements `warren.raft.Storage`. Each write appends a record; `sync()` makes
   every record so far durable. The world may arm `fail_next_sync`: that sync crashes the
   node instead (raises `DiskCrash`) — the moment between writing and syncing is where
   storage bugs hide.
2. `crash(rng)` models a power cut: a random prefix of the unsynced records reaches the
   platter, and the last of those may be torn (half written). A torn record fails its
   checksum, so recovery stops there and discards it and everything after it.
3. `recover()` replays the surviving records into (hard state, snapshot, entries) and
   rewrites the log as one durable checkpoint, so later recoveries stay cheap.
4. Synced records are never lost or changed: the simulator models crashes, not media
   failure.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from warren.raft import Entry, HardState, Snapshot


class DiskCrash(Exception):
    """The node crashed inside a sync; its unsynced writes are in doubt."""


@dataclass(frozen=True, slots=True)
class _Record:
    hard_state: HardState | None = None
    snapshot: Snapshot | None = None
    entries: tuple[Entry, ...] = ()
    torn: bool = False


class SimDisk:
    def __init__(self) -> None:
        self._records: list[_Record] = []
        self._synced_count = 0
        self.fail_next_sync = False
        self.syncs = 0

    # warren.raft.Storage
    def save_snapshot(self, snapshot: Snapshot) -> None:
        self._records.append(_Record(snapshot=snapshot))

    def append_entries(self, entries: Sequence[Entry]) -> None:
        self._records.append(_Record(entries=tuple(entries)))

    def save_hard_state(self, hard_state: HardState) -> None:
        self._records.append(_Record(hard_state=hard_state))

    def sync(self) -> None:
        if self.fail_next_sync:
            self.fail_next_sync = False
            raise DiskCrash
        self.syncs += 1
        self._synced_count = len(self._records)

    def crash(self, rng: random.Random, tear_probability: float) -> None:
        unsynced = len(self._records) - self._synced_count
        kept = self._synced_count + rng.randint(0, unsynced)
        del self._records[kept:]
        if kept > self._synced_count and rng.random() < tear_probability:
            self._records[-1] = _Record(torn=True)

    def recover(self) -> tuple[HardState | None, Snapshot | None, list[Entry]]:
        hard_state: HardState | None = None
        snapshot: Snapshot | None = None
        entries: list[Entry] = []
        for record in self._records:
            if record.torn:
                break  # checksum mismatch: the tail after it is garbage
            if record.hard_state is not None:
                hard_state = record.hard_state
            if record.snapshot is not None:
                snapshot = record.snapshot
                entries = _after_snapshot(entries, snapshot)
            if record.entries:
                first = record.entries[0].index
                if entries and first <= entries[-1].index:
                    del entries[max(0, first - entries[0].index) :]
                entries.extend(record.entries)
        # recovery rewrites the log as one durable checkpoint
        self._records = [_Record(hard_state=hard_state, snapshot=snapshot, entries=tuple(entries))]
        self._synced_count = 1
        return hard_state, snapshot, entries


def _after_snapshot(entries: list[Entry], snapshot: Snapshot) -> list[Entry]:
    """Stored entries after `snapshot`, kept only if the log matches it at its index."""
    if not entries or not entries[0].index <= snapshot.index <= entries[-1].index:
        return []
    position = snapshot.index - entries[0].index
    if entries[position].term != snapshot.term:
        return []
    return entries[position + 1 :]
