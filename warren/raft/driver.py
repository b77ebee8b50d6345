"""The one place that turns a node's `Ready` into effects, in the order Raft needs.

Theory of operation:
1. `run_ready(node, storage, transport, state_machine)` drains one `Ready`:
   persist (snapshot, entries, hard state) → `storage.sync()` → send messages → restore
   the snapshot and apply committed entries → serve read states → `node.advance`.
   Persisting first is what makes a vote or an acknowledgement a promise: a message may
   claim something only once it survives a crash (figure 2, "Persistent state ... updated
   on stable storage before responding to RPCs").
2. Sending before applying keeps the state machine off the replication path; applying
   after persisting means a node never applies an entry it could forget in a crash.
3. The ports are `Protocol`s so the simulator (`warren.testing.sim`) and the runtime use
   the same function: `Storage` later maps onto `warren.storage`'s segmented log.
4. If `storage.sync()` raises (a crash, a full disk), nothing was sent and the node was not
   advanced: the caller must throw the node away and rebuild it from storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from warren.raft.messages import Entry, HardState, Message, ReadState, Snapshot
from warren.raft.node import RaftNode


class Storage(Protocol):
    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Keep `snapshot` in place of every stored entry up to its index.

        Stored entries after it stay only if the stored entry at `snapshot.index` has
        `snapshot.term` (a local compaction); otherwise the log diverged from the leader's
        and every stored entry goes (InstallSnapshot receiver rules 6 and 7)."""

    def append_entries(self, entries: Sequence[Entry]) -> None:
        """Store entries; any stored entry at or after `entries[0].index` is replaced."""

    def save_hard_state(self, hard_state: HardState) -> None: ...

    def sync(self) -> None:
        """Return only when everything written so far survives a crash."""


class Transport(Protocol):
    def send(self, message: Message) -> None:
        """Best effort: a message may be lost, delayed, duplicated or reordered."""


class StateMachine(Protocol):
    def restore(self, snapshot: Snapshot) -> None: ...

    def apply(self, entry: Entry) -> None:
        """Apply one committed entry (EMPTY and MEMBERSHIP entries included, in order)."""

    def read(self, read_state: ReadState) -> None:
        """Serve a linearizable read; called once the entry at read_state.index is applied."""


def run_ready(
    node: RaftNode, storage: Storage, transport: Transport, state_machine: StateMachine
) -> bool:
    """Do one `Ready`'s work; False if there was nothing to do."""
    if not node.has_ready():
        return False
    ready = node.ready()
    if ready.snapshot is not None:
        storage.save_snapshot(ready.snapshot)
    if ready.entries:
        storage.append_entries(ready.entries)
    if ready.hard_state is not None:
        storage.save_hard_state(ready.hard_state)
    if ready.snapshot is not None or ready.entries or ready.hard_state is not None:
        storage.sync()
    for message in ready.messages:
        transport.send(message)
    if ready.snapshot is not None:
        state_machine.restore(ready.snapshot)
    for entry in ready.committed:
        state_machine.apply(entry)
    for read_state in ready.read_states:
        # Read states come from a commit index the leader already had, which this node has
        # applied by now or applies in this same batch.
        state_machine.read(read_state)
    node.advance(ready)
    return True


def compact(node: RaftNode, storage: Storage, index: int, data: bytes) -> Snapshot:
    """Replace the log up to applied `index` by the application's snapshot `data`."""
    snapshot = node.compact(index, data)
    storage.save_snapshot(snapshot)
    storage.sync()
    return snapshot
