"""A hand-driven Raft cluster for unit tests and transcripts: nothing happens unless asked.

Theory of operation:
1. `Cluster` holds real `RaftNode`s, each with a `MemoryStorage` (every write is synced at
   once) and a `RecordingStateMachine`, and drives them with the real `run_ready`.
2. Messages a node sends wait in `pending`, in send order, until a test delivers them
   (`deliver`), drops them (`drop`) or lets everything settle (`stabilize`). Blocked links
   (`partition`, `isolate`) drop messages when they are delivered, not when sent.
3. `crash` discards a node's memory; `restart` rebuilds it from its storage, as the runtime
   will; `wipe` starts it again with empty storage and no membership but its term and
   vote, as the runtime makes a replica again on a node that was removed (delete_member,
   then add_member; `warren.runtime.cluster.raft_host`, point 10). Node
   randomness comes from `random.Random(node_id)`, so a test replays exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence

from warren.raft import (
    Entry,
    EntryKind,
    HardState,
    Membership,
    Message,
    NodeId,
    RaftConfig,
    RaftNode,
    ReadState,
    Snapshot,
    run_ready,
)

STABILIZE_ROUNDS_MAX = 10_000


class MemoryStorage:
    """`warren.raft.Storage` in memory; what a crash keeps."""

    def __init__(self) -> None:
        self.hard_state = HardState()
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []

    def save_snapshot(self, snapshot: Snapshot) -> None:
        kept = [e for e in self.entries if e.index > snapshot.index]
        at = [e for e in self.entries if e.index == snapshot.index]
        self.entries = kept if at and at[0].term == snapshot.term else []
        self.snapshot = snapshot

    def append_entries(self, entries: Sequence[Entry]) -> None:
        first = entries[0].index
        self.entries = [e for e in self.entries if e.index < first]
        self.entries.extend(entries)

    def save_hard_state(self, hard_state: HardState) -> None:
        self.hard_state = hard_state

    def sync(self) -> None:
        pass


class RecordingStateMachine:
    def __init__(self) -> None:
        self.applied: list[Entry] = []
        self.snapshot: Snapshot | None = None
        self.reads: list[ReadState] = []

    def restore(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.applied = []

    def apply(self, entry: Entry) -> None:
        self.applied.append(entry)

    def read(self, read_state: ReadState) -> None:
        self.reads.append(read_state)

    @property
    def data(self) -> list[bytes]:
        """Application payloads applied since the last restored snapshot."""
        return [e.data for e in self.applied if e.kind is EntryKind.NORMAL]


class _Outbox:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def send(self, message: Message) -> None:
        self.cluster.pending.append(message)


class Cluster:
    def __init__(
        self,
        voters: Iterable[NodeId],
        *,
        others: Iterable[NodeId] = (),
        pre_vote: bool = True,
        check_quorum: bool = True,
        election_ticks: int = 10,
        max_entries_per_append: int = 64,
        may_vote: Callable[[NodeId], bool] = lambda _node_id: True,
    ) -> None:
        self.membership = Membership(frozenset(voters))
        self.configs = {
            node_id: RaftConfig(
                node_id,
                election_ticks=election_ticks,
                pre_vote=pre_vote,
                check_quorum=check_quorum,
                max_entries_per_append=max_entries_per_append,
                may_vote=may_vote,
            )
            for node_id in sorted(set(voters) | set(others))
        }
        self.storage = {node_id: MemoryStorage() for node_id in self.configs}
        self.machines = {node_id: RecordingStateMachine() for node_id in self.configs}
        self.nodes: dict[NodeId, RaftNode] = {}
        self.pending: list[Message] = []
        self.blocked: set[tuple[NodeId, NodeId]] = set()
        self.delivered: list[Message] = []
        self._outbox = _Outbox(self)
        for node_id in self.configs:
            self.restart(node_id)

    # ----------------------------------------------------------------- nodes

    def restart(self, node_id: NodeId, *, bootstrap: bool = True) -> RaftNode:
        storage = self.storage[node_id]
        node = RaftNode(
            self.configs[node_id],
            random.Random(node_id),
            membership=(
                self.membership if bootstrap and node_id in self.membership.voters else None
            ),
            hard_state=storage.hard_state,
            snapshot=storage.snapshot,
            entries=storage.entries,
        )
        self.nodes[node_id] = node
        machine = RecordingStateMachine()
        if storage.snapshot is not None:
            machine.restore(storage.snapshot)
        self.machines[node_id] = machine
        self.run(node_id)
        return node

    def crash(self, node_id: NodeId) -> None:
        del self.nodes[node_id]
        self.pending = [m for m in self.pending if m.to != node_id]

    def wipe(self, node_id: NodeId) -> RaftNode:
        """The node loses its storage and starts again knowing nothing but its term and
        vote, as the runtime makes a replica again (point 3)."""
        kept = self.nodes[node_id].hard_state
        self.crash(node_id)
        self.storage[node_id] = MemoryStorage()
        self.storage[node_id].hard_state = HardState(kept.term, kept.vote)
        return self.restart(node_id, bootstrap=False)

    def run(self, node_id: NodeId) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            return
        storage, machine = self.storage[node_id], self.machines[node_id]
        while run_ready(node, storage, self._outbox, machine):
            pass

    def run_all(self) -> None:
        for node_id in sorted(self.nodes):
            self.run(node_id)

    def __getitem__(self, node_id: NodeId) -> RaftNode:
        return self.nodes[node_id]

    # ----------------------------------------------------------------- time and messages

    def tick(self, node_id: NodeId, ticks: int = 1) -> None:
        for _ in range(ticks):
            self.nodes[node_id].tick()
            self.run(node_id)

    def campaign(self, node_id: NodeId) -> None:
        self.nodes[node_id].campaign()
        self.run(node_id)

    def propose(self, node_id: NodeId, data: bytes) -> int | None:
        index = self.nodes[node_id].propose(data)
        self.run(node_id)
        return index

    def deliver_one(self, message: Message) -> bool:
        """Step one message into its receiver; False if the link is cut or it is down."""
        node = self.nodes.get(message.to)
        if node is None or (message.sender, message.to) in self.blocked:
            return False
        self.delivered.append(message)
        node.step(message)
        self.run(message.to)
        return True

    def deliver(self, *, sender: NodeId | None = None, to: NodeId | None = None) -> list[Message]:
        """Deliver the messages pending now (not those they cause) that match the filter."""
        chosen = [
            m
            for m in self.pending
            if (sender is None or m.sender == sender) and (to is None or m.to == to)
        ]
        chosen_ids = {id(m) for m in chosen}
        self.pending = [m for m in self.pending if id(m) not in chosen_ids]
        return [m for m in chosen if self.deliver_one(m)]

    def drop(self, *, sender: NodeId | None = None, to: NodeId | None = None) -> int:
        before = len(self.pending)
        self.pending = [
            m
            for m in self.pending
            if not ((sender is None or m.sender == sender) and (to is None or m.to == to))
        ]
        return before - len(self.pending)

    def stabilize(self) -> None:
        """Deliver until no message is pending."""
        for _ in range(STABILIZE_ROUNDS_MAX):
            if not self.pending:
                return
            self.deliver()
        raise AssertionError("cluster did not stabilize")

    def partition(self, *groups: Iterable[NodeId]) -> None:
        group_sets = [set(g) for g in groups]
        for a in group_sets:
            for b in group_sets:
                if a is not b:
                    self.blocked.update((x, y) for x in a for y in b)

    def isolate(self, node_id: NodeId) -> None:
        others = [n for n in self.configs if n != node_id]
        self.partition([node_id], others)

    def heal(self) -> None:
        self.blocked.clear()

    def elect(self, node_id: NodeId) -> RaftNode:
        """Make `node_id` leader: campaign, then let the cluster settle."""
        self.campaign(node_id)
        self.stabilize()
        return self.nodes[node_id]
