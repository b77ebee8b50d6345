"""The values Raft nodes exchange and persist: entries, hard state, snapshots, messages.

Theory of operation:
1. Everything here is a frozen, slotted value. A node never mutates a value it has handed
   out in a `Ready`, so the driver may keep, persist or send it without copying.
2. Names follow the Raft paper (Ongaro and Ousterhout, "In Search of an Understandable
   Consensus Algorithm", figure 2): `term`, `index`, `commit`; a message's `index` and
   `log_term` are the paper's prevLogIndex/prevLogTerm for AppendEntries and
   lastLogIndex/lastLogTerm for RequestVote.
3. `HardState` is what must be on stable storage before a node sends anything that depends
   on it: currentTerm, votedFor and the commit index (the last one only saves replay work;
   safety does not depend on it).
4. A `Membership` is the set of voters and the set of learners (non-voters that receive the
   log). It travels in configuration entries, encoded by `Membership.encode`, and in
   snapshots. Node ids are ints; every iteration over ids is sorted, so no hash seed can
   change an output.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

NodeId = int
NO_NODE: Final = 0  # "nobody": no vote, no known leader. Real node ids are positive.


class EntryKind(enum.Enum):
    NORMAL = "normal"  # opaque bytes proposed by the application
    EMPTY = "empty"  # appended by a new leader so it can commit earlier terms' entries
    MEMBERSHIP = "membership"  # data is an encoded Membership that replaces the current one


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    kind: EntryKind = EntryKind.NORMAL
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class HardState:
    term: int = 0
    vote: NodeId = NO_NODE
    commit: int = 0


@dataclass(frozen=True, slots=True)
class Membership:
    voters: frozenset[NodeId] = frozenset()
    learners: frozenset[NodeId] = frozenset()

    def __post_init__(self) -> None:
        if self.voters & self.learners:
            raise ValueError(
                f"a node is both voter and learner: {sorted(self.voters & self.learners)}"
            )

    @property
    def members(self) -> tuple[NodeId, ...]:
        return tuple(sorted(self.voters | self.learners))

    def encode(self) -> bytes:
        voters = ",".join(str(node_id) for node_id in sorted(self.voters))
        learners = ",".join(str(node_id) for node_id in sorted(self.learners))
        return f"{voters};{learners}".encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> Membership:
        voters, _, learners = data.decode("ascii").partition(";")
        return cls(
            voters=frozenset(int(text) for text in voters.split(",") if text),
            learners=frozenset(int(text) for text in learners.split(",") if text),
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The application's state as of `index` (inclusive), and the membership then in force."""

    index: int
    term: int
    membership: Membership
    data: bytes = b""


class MessageType(enum.Enum):
    APPEND = "append"  # AppendEntries: index/log_term of the entry before `entries`, commit
    APPEND_RESPONSE = "append_response"  # index: last index matched, or the rejected index
    VOTE = "vote"  # RequestVote: index/log_term describe the candidate's last entry
    VOTE_RESPONSE = "vote_response"
    PRE_VOTE = "pre_vote"  # "would you vote for me at `term`?"; changes no one's term
    PRE_VOTE_RESPONSE = "pre_vote_response"
    HEARTBEAT = "heartbeat"  # commit is capped at the follower's match_index
    HEARTBEAT_RESPONSE = "heartbeat_response"
    SNAPSHOT = "snapshot"  # InstallSnapshot, whole (no chunks)
    TIMEOUT_NOW = "timeout_now"  # leadership transfer: "campaign now, skip pre-vote"


@dataclass(frozen=True, slots=True)
class Message:
    type: MessageType
    to: NodeId
    sender: NodeId
    term: int
    index: int = 0
    log_term: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    # On a rejected append: the follower's guess at the last index that may match, so the
    # leader can skip a whole term of mismatching entries per round trip (paper section 5.3).
    reject_hint: int = 0
    snapshot: Snapshot | None = None
    # Read-index requests ride on heartbeats; the response echoes it back.
    context: bytes = b""
    # A vote asked for by a leadership transfer: granted even to a node that heard from
    # its leader recently (the leader itself asked for the election).
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class ReadState:
    """A read-index answer: once `applied_index >= index`, reading the state is linearizable."""

    index: int
    context: bytes


@dataclass(frozen=True, slots=True)
class Ready:
    """What the node needs done, in this order (see `warren.raft.driver`):

    1. persist `snapshot` (if any), then `entries` (they replace any stored entries from
       `entries[0].index` on), then `hard_state` (if any) — and sync;
    2. only then send `messages`: they may promise what was just persisted;
    3. apply `snapshot` to the state machine, then `committed` entries in order, and serve
       `read_states` once the state machine has applied their index;
    4. call `node.advance(ready)`. No `step`, `tick` or `propose` between `ready()` and
       `advance()`.
    """

    hard_state: HardState | None = None
    entries: tuple[Entry, ...] = ()
    snapshot: Snapshot | None = None
    messages: tuple[Message, ...] = ()
    committed: tuple[Entry, ...] = ()
    read_states: tuple[ReadState, ...] = field(default=())

    def is_empty(self) -> bool:
        return (
            self.hard_state is None
            and not self.entries
            and self.snapshot is None
            and not self.messages
            and not self.committed
            and not self.read_states
        )
