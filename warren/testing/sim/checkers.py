"""Safety checkers the simulator runs after every step, each one incremental.

Theory of operation (the properties of figure 3 of the Raft paper, checked on real nodes):
1. Election safety: at most one leader per term. `leaders_by_term` remembers the first
   leader seen for each term. Stronger, and earlier: a node never persists two different
   votes in one term, and a new leader must find a majority of its voters that have
   persisted a vote for it in its term (itself included) — a vote counted but never
   granted, or granted but never persisted, fails here even when no second leader
   happens to be elected.
2. Log matching: if two logs hold an entry with the same index and term, the logs are
   identical up to it. Checked by induction as entries are persisted: every (index, term)
   must always carry the same payload and follow the same previous term.
3. Leader completeness: a new leader's log holds every entry known committed.
4. State machine safety: every node applies the same entry at each index, so the first
   node to apply index i fixes `applied[i]` and every later apply (on any node, also after
   a crash and replay) must match it; a committed entry is never lost or changed.
5. Linearizable reads: a read index is at least every index applied anywhere before the
   read was asked for.
A violation raises `Violation` at once, with a message that names the step.
"""

from __future__ import annotations

import zlib

from warren.raft import NO_NODE, Entry, EntryKind, HardState, Membership, NodeId, RaftLog


class Violation(AssertionError):
    """A safety property failed."""


def chain_digest(digest: int, entry: Entry) -> int:
    """A running digest of the applied sequence: equal digests mean equal histories."""
    return zlib.crc32(entry.data, zlib.crc32(entry.kind.value.encode(), digest ^ entry.term))


class SafetyChecker:
    def __init__(self) -> None:
        self.leaders_by_term: dict[int, NodeId] = {}
        self.votes: dict[NodeId, dict[int, NodeId]] = {}  # node -> term -> persisted vote
        # (index, term) -> (kind, data, previous term): the log matching table
        self._seen: dict[tuple[int, int], tuple[EntryKind, bytes, int]] = {}
        # applied[i - 1] is the entry applied at index i; digests[i] the digest after i
        self.applied: list[Entry] = []
        self.digests: list[int] = [0]
        self.checks = 0

    def on_hard_state_synced(self, node_id: NodeId, hard_state: HardState) -> None:
        self.checks += 1
        if hard_state.vote == NO_NODE:
            return
        votes = self.votes.setdefault(node_id, {})
        vote = votes.setdefault(hard_state.term, hard_state.vote)
        if vote != hard_state.vote:
            raise Violation(
                f"node {node_id} voted for {vote} and then {hard_state.vote} in term "
                f"{hard_state.term}"
            )

    def on_leader(self, node_id: NodeId, term: int, log: RaftLog, membership: Membership) -> None:
        self.checks += 1
        leader = self.leaders_by_term.setdefault(term, node_id)
        if leader != node_id:
            raise Violation(f"two leaders in term {term}: {leader} and {node_id}")
        granted = [
            voter
            for voter in sorted(membership.voters)
            if self.votes.get(voter, {}).get(term) == node_id
        ]
        if len(granted) <= len(membership.voters) // 2:
            raise Violation(
                f"node {node_id} leads term {term} with persisted votes from {granted} only "
                f"(voters {sorted(membership.voters)})"
            )
        # Leader completeness, for what the new leader still holds as entries.
        for index in range(log.snapshot_index + 1, len(self.applied) + 1):
            entry = self.applied[index - 1]
            if log.term_at(index) != entry.term:
                raise Violation(
                    f"leader {node_id} of term {term} lacks committed entry {index} "
                    f"(term {entry.term}, has term {log.term_at(index)})"
                )
        if log.snapshot_index > len(self.applied):
            return
        if log.snapshot_index and log.snapshot_term != self.applied[log.snapshot_index - 1].term:
            raise Violation(f"leader {node_id}'s snapshot disagrees at {log.snapshot_index}")

    def on_persist(self, node_id: NodeId, prev_term: int, entries: tuple[Entry, ...]) -> None:
        self.checks += 1
        for entry in entries:
            key = (entry.index, entry.term)
            seen = self._seen.setdefault(key, (entry.kind, entry.data, prev_term))
            if seen != (entry.kind, entry.data, prev_term):
                raise Violation(
                    f"log matching: node {node_id} stores a different entry "
                    f"{entry.index}@{entry.term} (or a different predecessor term)"
                )
            prev_term = entry.term

    def on_apply(self, node_id: NodeId, entry: Entry) -> int:
        """Check one applied entry; the digest of the history up to it."""
        self.checks += 1
        index = entry.index
        if index <= len(self.applied):
            first = self.applied[index - 1]
            if first.term != entry.term or first.data != entry.data or first.kind != entry.kind:
                raise Violation(
                    f"node {node_id} applied {entry.index}@{entry.term} but "
                    f"{first.index}@{first.term} was applied there first"
                )
        elif index == len(self.applied) + 1:
            self.applied.append(entry)
            self.digests.append(chain_digest(self.digests[-1], entry))
        else:
            raise Violation(f"node {node_id} applied {index} with a gap after {len(self.applied)}")
        return self.digests[index]

    def on_restore(self, node_id: NodeId, index: int, digest: int) -> None:
        self.checks += 1
        if index >= len(self.digests) or self.digests[index] != digest:
            raise Violation(f"node {node_id} restored a snapshot at {index} unlike the history")

    def on_read(self, node_id: NodeId, read_index: int, applied_before: int, applied: int) -> None:
        self.checks += 1
        if read_index < applied_before:
            raise Violation(
                f"stale read on {node_id}: read index {read_index} but {applied_before} "
                "was applied before the read began"
            )
        if applied < read_index:
            raise Violation(f"read served on {node_id} at {applied} before its index {read_index}")
