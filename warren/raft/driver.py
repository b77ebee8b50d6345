"""The one place that turns Raft nodes' `Ready`s into effects, in the order Raft needs.

Theory of operation:
1. A `Round` drives any number of groups (each a `Driven`: its node and its three ports)
   through one `Ready` each, in two phases so the caller can batch and sync as it likes:
   - `begin(groups)` takes `ready()` of every group that has one and persists its
     snapshot, entries and hard state through the group's `Storage` (writes only);
   - the caller then makes every write durable (`SyncedStorage.sync`, or one sync of a
     log all the groups share, on another thread while it does other work);
   - `finish()` sends every group's messages, then restores snapshots, applies committed
     entries, serves read states and advances every node (`send()` and `apply()` are the
     two halves, for a caller that flushes batched traffic in between).
   Persisting first is what makes a vote or an acknowledgement a promise: a message may
   claim something only once it survives a crash (figure 2, "Persistent state ... updated
   on stable storage before responding to RPCs").
2. Sending before applying keeps the state machine off the replication path; applying
   after persisting means a node never applies an entry it could forget in a crash.
3. `run_ready(node, storage, transport, state_machine)` is a round of one group with the
   sync inline: the simulator (`warren.testing.sim`) uses it; the runtime
   (`warren.runtime.cluster.raft_host`) runs `Round`s over all its groups on one WAL.
4. Between `begin` and `finish` no group of the round may take input (`step`, `tick`,
   `propose`): the core forbids it between `ready()` and `advance()`. A group that goes
   away meanwhile leaves the round with `drop`.
5. If the sync fails (a crash, a full disk), the caller must not call `finish`: nothing is
   sent, no node advances, and every node of the round is rebuilt from storage.
6. `send_early()`, between `begin` and the sync, sends what a leader may send before its
   writes are durable (its appends and heartbeats, `RaftNode.may_send_early`), so the
   followers write while the leader does; `send()` then sends the rest. Responses and
   vote requests always wait for the sync: they promise what was persisted.
7. `apply_early()`, likewise, applies the committed entries that an earlier round
   already made durable here (up to the log's `stable_index`; a Ready that restores a
   snapshot waits): what this round writes is only newer entries and the commit index,
   which nothing needs durable to apply what is committed (a restarted node learns the
   commit index again from the leader). So a commit costs no sync of its own before it
   is applied. `apply()` then applies the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar

from warren.raft.messages import (
    Entry,
    HardState,
    Message,
    MessageType,
    ReadState,
    Ready,
    Snapshot,
)
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


class SyncedStorage(Storage, Protocol):
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


class Driven(Protocol):
    """One group as a `Round` drives it."""

    @property
    def node(self) -> RaftNode: ...

    @property
    def storage(self) -> Storage: ...

    @property
    def transport(self) -> Transport: ...

    @property
    def state_machine(self) -> StateMachine: ...


G = TypeVar("G", bound=Driven)
# what a leader may send before its writes are durable (point 6)
_EARLY = frozenset({MessageType.APPEND, MessageType.HEARTBEAT})


class Round(Generic[G]):
    """One `Ready` of each of several groups, between `begin` and `finish` (point 1)."""

    __slots__ = ("_applied", "_early", "_readies", "wrote")

    def __init__(self, readies: list[tuple[G, Ready]], wrote: bool) -> None:
        self._readies = readies
        self.wrote = wrote  # something was persisted: the caller must sync before finish
        self._early: set[int] = set()  # ids of the Readies whose early messages went
        self._applied: dict[int, int] = {}  # id of a Ready: its entries applied early

    @property
    def groups(self) -> list[G]:
        return [group for group, _ready in self._readies]

    def drop(self, group: G) -> None:
        """Leave `group` out of `finish`: it is no longer hosted (point 4)."""
        self._readies = [(g, ready) for g, ready in self._readies if g is not group]

    def finish(self) -> None:
        self.send()
        self.apply()

    def send_early(self) -> None:
        """Before the sync: every leader's appends and heartbeats (point 6)."""
        for group, ready in self._readies:
            if ready.messages and group.node.may_send_early(ready):
                self._early.add(id(ready))
                transport = group.transport
                for message in ready.messages:
                    if message.type in _EARLY:
                        transport.send(message)

    def send(self) -> None:
        early = self._early
        for group, ready in self._readies:
            transport = group.transport
            if id(ready) in early:
                for message in ready.messages:
                    if message.type not in _EARLY:
                        transport.send(message)
            else:
                for message in ready.messages:
                    transport.send(message)

    def apply_early(self) -> None:
        """Before the sync: committed entries already durable here (point 7)."""
        for group, ready in self._readies:
            committed = ready.committed
            if not committed or ready.snapshot is not None:
                continue
            stable = group.node.log.stable_index
            state_machine = group.state_machine
            count = 0
            for entry in committed:
                if entry.index > stable:
                    break
                state_machine.apply(entry)
                count += 1
            if count:
                self._applied[id(ready)] = count

    def apply(self) -> None:
        applied = self._applied
        for group, ready in self._readies:
            state_machine = group.state_machine
            if ready.snapshot is not None:
                state_machine.restore(ready.snapshot)
            committed = ready.committed
            done = applied.get(id(ready), 0) if applied else 0
            for entry in committed[done:] if done else committed:
                state_machine.apply(entry)
            for read_state in ready.read_states:
                # Read states come from a commit index the leader already had, which this
                # node has applied by now or applies in this same batch.
                state_machine.read(read_state)
            group.node.advance(ready)


def begin(groups: Iterable[G]) -> Round[G]:
    """Take and persist the `Ready` of every group in `groups` that has one (point 1)."""
    readies: list[tuple[G, Ready]] = []
    wrote = False
    for group in groups:
        node = group.node
        if not node.has_ready():
            continue
        ready = node.ready()
        readies.append((group, ready))
        storage = group.storage
        if ready.snapshot is not None:
            storage.save_snapshot(ready.snapshot)
            wrote = True
        if ready.entries:
            storage.append_entries(ready.entries)
            wrote = True
        if ready.hard_state is not None:
            storage.save_hard_state(ready.hard_state)
            wrote = True
    return Round(readies, wrote)


class _One:
    __slots__ = ("node", "state_machine", "storage", "transport")

    def __init__(
        self, node: RaftNode, storage: Storage, transport: Transport, state_machine: StateMachine
    ) -> None:
        self.node = node
        self.storage = storage
        self.transport = transport
        self.state_machine = state_machine


def run_ready(
    node: RaftNode, storage: SyncedStorage, transport: Transport, state_machine: StateMachine
) -> bool:
    """Do one `Ready`'s work, syncing inline (point 3); False if there was nothing to do."""
    round_ = begin([_One(node, storage, transport, state_machine)])
    if not round_.groups:
        return False
    if round_.wrote:
        storage.sync()
    round_.finish()
    return True


def compact(node: RaftNode, storage: SyncedStorage, index: int, data: bytes) -> Snapshot:
    """Replace the log up to applied `index` by the application's snapshot `data`."""
    snapshot = node.compact(index, data)
    storage.save_snapshot(snapshot)
    storage.sync()
    return snapshot
