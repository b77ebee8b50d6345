"""Pure Raft: a node that takes messages, ticks and proposals and returns `Ready` batches.

See `warren.raft.node` for the theory of operation and docs/internals/raft.md for the API,
its invariants and how the simulator replays a seed. Standard library only; no I/O, no
clocks, no module-level randomness.
"""

from warren.raft.driver import (
    Driven,
    Round,
    StateMachine,
    Storage,
    SyncedStorage,
    Transport,
    begin,
    compact,
    run_ready,
)
from warren.raft.log import EntrySource, RaftLog, SafetyError
from warren.raft.messages import (
    NO_NODE,
    Entry,
    EntryKind,
    HardState,
    Membership,
    Message,
    MessageType,
    NodeId,
    ReadState,
    Ready,
    Snapshot,
)
from warren.raft.node import MembershipChange, RaftConfig, RaftNode, RandomSource, Role
from warren.raft.progress import Progress, ProgressState

__all__ = [
    "NO_NODE",
    "Driven",
    "Entry",
    "EntryKind",
    "EntrySource",
    "HardState",
    "Membership",
    "MembershipChange",
    "Message",
    "MessageType",
    "NodeId",
    "Progress",
    "ProgressState",
    "RaftConfig",
    "RaftLog",
    "RaftNode",
    "RandomSource",
    "ReadState",
    "Ready",
    "Role",
    "Round",
    "SafetyError",
    "Snapshot",
    "StateMachine",
    "Storage",
    "SyncedStorage",
    "Transport",
    "begin",
    "compact",
    "run_ready",
]
