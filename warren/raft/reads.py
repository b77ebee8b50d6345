"""Read-index requests a leader is confirming (dissertation section 6.4).

Theory of operation:
1. A read asked of a leader that has not yet committed an entry of its term waits
   (`wait_for_commit`): until then the leader's commit index may lag an older leader's.
2. Once it may, the read records the leader's commit index and waits for a heartbeat round
   carrying its context to be answered by a majority of voters (the leader counts itself).
   That proves no other leader had been elected when the read was recorded.
3. Reads are released in order: a majority answering a later read's heartbeat confirms
   every earlier read too. The answer, `ReadState(index, context)`, lets the application
   read once it has applied `index`.
4. Contexts identify reads and must be unique while in flight. Everything here is dropped
   when the node stops being leader; the caller retries.
"""

from __future__ import annotations

from collections.abc import Iterable

from warren.raft.messages import NodeId, ReadState
from warren.raft.progress import has_quorum


class ReadIndexQueue:
    __slots__ = ("_acks", "_pending", "_waiting_for_commit")

    def __init__(self) -> None:
        self._pending: list[ReadState] = []  # recorded, waiting for a heartbeat quorum
        self._acks: dict[bytes, set[NodeId]] = {}
        self._waiting_for_commit: list[bytes] = []

    @property
    def last_context(self) -> bytes:
        """The context to put on heartbeats: answering it confirms every pending read."""
        return self._pending[-1].context if self._pending else b""

    def wait_for_commit(self, context: bytes) -> None:
        self._waiting_for_commit.append(context)

    def take_waiting(self) -> list[bytes]:
        contexts, self._waiting_for_commit = self._waiting_for_commit, []
        return contexts

    def add(self, index: int, context: bytes, leader_id: NodeId) -> None:
        self._pending.append(ReadState(index, context))
        self._acks[context] = {leader_id}

    def acknowledge(self, context: bytes, sender: NodeId) -> bool:
        acks = self._acks.get(context)
        if acks is None:
            return False
        acks.add(sender)
        return True

    def release(self, voters: Iterable[NodeId]) -> list[ReadState]:
        voter_list = list(voters)
        released = 0
        for position, read in enumerate(self._pending):
            if has_quorum(voter_list, self._acks[read.context]):
                released = position + 1
        done = self._pending[:released]
        for read in done:
            del self._acks[read.context]
        del self._pending[:released]
        return done

    def clear(self) -> None:
        self._pending = []
        self._acks = {}
        self._waiting_for_commit = []
