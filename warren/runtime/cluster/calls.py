"""Node-to-node messages: one small frozen class per request and reply, dispatched by type.

Theory of operation:
1. Requests a node answers itself (`NodeRequest`): `Status`, `NodeDetails`, `GroupStatus`,
   `Campaign`, `AppliedThrough` (the metadata group's barrier), `ReplyLive` (is a direct
   reply-to address of this node's live), and `Forward`, which asks a node to pass a
   leader request on to whichever node leads.
2. Requests for a Raft group's leader (`LeaderRequest`, `ClusterNode.leader_call`):
   `Propose` (a batch of commands), `AddMember`, `RemoveMember`, `Transfer`, `Counts`,
   `Consumers`. A node answers `Led` with the value when it leads the group, else
   `Redirect` with the leader it knows (or None). Each proposal of a batch is answered in
   order by its entry's reply, or `RETRY` when the leader lost it before it committed: the
   proposer sends it and the rest of the batch again.
3. A classic queue's home and the nodes that use it exchange `Call`s, each carrying one
   `QueueRequest` (`QueueCommand`, `QueueCounts`, `QueueCounters`, `Consume`, `CancelConsumer`,
   `DeleteQueue`) and a call number (0: no answer wanted), answered by `CallReply` or
   `CallError`; a home (or a quorum leader) sends `Delivery` and `ConsumerCancelled` to a
   consumer's node, and a node whose link came up sends `Definitions`. A publish to a
   direct reply-to address of another node goes to that node as a `Reply`.
4. Every class names the type of its reply (`NodeRequest[R]`), so a caller gets a typed
   answer from one cast at the link, not a tuple to pick apart.

Wire format: the peer link's frames (`warren.runtime.cluster.frames`) are still pickles
of these classes, so these classes *are* the wire format: changing one changes the
protocol, and the handshake's `MAGIC` (WARREN-PEERS/6 for this set) says which version a
node speaks; a node of another version is refused before any frame is decoded. (Raft's
messages already travel as versioned bytes, `warren.cluster.raft_codec`; these classes
as explicit msgspec types are the rest of issue #20.)
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from warren.amqp.content import Message
from warren.cluster.metadata import Operation
from warren.queue import Command, Entry

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class NodeRequest(Generic[R]):
    """A request whose answer is an `R`."""


# --- what a node answers itself --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Status(NodeRequest[dict[str, Any]]):
    """The node's cluster status (`ClusterNode.status`)."""


@dataclass(frozen=True, slots=True)
class NodeDetails(NodeRequest["dict[str, Any] | None"]):
    """The node as the management API shows it (`ClusterNode.describe`; None: unknown)."""


@dataclass(frozen=True, slots=True)
class GroupStatus(NodeRequest["dict[str, object] | None"]):
    group_id: str


@dataclass(frozen=True, slots=True)
class AppliedThrough(NodeRequest[bool]):
    """Answered once this node's metadata group applied `index` (False: not in time)."""

    index: int


@dataclass(frozen=True, slots=True)
class ReplyLive(NodeRequest[bool]):
    """Whether this node's channel of a direct reply-to `token` still consumes from it."""

    token: str


@dataclass(frozen=True, slots=True)
class Campaign(NodeRequest[None]):
    """The leader locator chose this node to lead a new queue's group."""

    group_id: str


# --- what a group's leader answers ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderRequest(NodeRequest[R]):
    group_id: str


@dataclass(frozen=True, slots=True)
class Propose(LeaderRequest[list[object]]):
    commands: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class AddMember(LeaderRequest[list[str]]):
    """A replica (or, with its address, a node joining the metadata group)."""

    node: str
    host: str | None = None
    port: int | None = None


@dataclass(frozen=True, slots=True)
class RemoveMember(LeaderRequest[list[str]]):
    node: str


@dataclass(frozen=True, slots=True)
class Transfer(LeaderRequest[bool]):
    node: str


@dataclass(frozen=True, slots=True)
class Counts(LeaderRequest[tuple[int, int]]):
    """A quorum queue's declare-ok counts, from its leader."""


@dataclass(frozen=True, slots=True)
class Consumers(LeaderRequest[list[Hashable]]):
    """A quorum queue's consumers as its leader has them."""


@dataclass(frozen=True, slots=True)
class Forward(NodeRequest[R]):
    """From a node that does not know the leader (joining): pass it on."""

    request: LeaderRequest[R]


@dataclass(frozen=True, slots=True)
class Led(Generic[R]):
    """The leader's answer."""

    value: R


@dataclass(frozen=True, slots=True)
class Redirect:
    """Not the leader: ask `leader` (None: unknown)."""

    leader: str | None


@dataclass(frozen=True, slots=True)
class Retry:
    """A proposal the leader lost before it committed."""


RETRY: Final = Retry()


# --- classic queues across nodes, quorum deliveries to nodes without a replica ------------


@dataclass(frozen=True, slots=True)
class QueueRequest:
    vhost: str
    name: str


@dataclass(frozen=True, slots=True)
class QueueCommand(QueueRequest):
    """A publish, get, purge or settlement; answered with the host's outcome value."""

    command: Command


@dataclass(frozen=True, slots=True)
class QueueCounts(QueueRequest):
    pass


@dataclass(frozen=True, slots=True)
class QueueCounters(QueueRequest):
    """The counts the management API shows of a queue of another node (remote.py, 7)."""


@dataclass(frozen=True, slots=True)
class Consume(QueueRequest):
    key: Hashable
    prefetch_count: int
    no_ack: bool
    exclusive: bool
    priority: int


@dataclass(frozen=True, slots=True)
class CancelConsumer(QueueRequest):
    key: Hashable
    waiting: list[int]  # handed to the node, never to its client: they go back


@dataclass(frozen=True, slots=True)
class DeleteQueue(QueueRequest):
    if_unused: bool
    if_empty: bool


@dataclass(frozen=True, slots=True)
class Call:
    number: int  # 0: one way
    request: QueueRequest


@dataclass(frozen=True, slots=True)
class CallReply:
    number: int
    value: object


@dataclass(frozen=True, slots=True)
class CallError:
    number: int
    code: int
    detail: str


@dataclass(frozen=True, slots=True)
class Delivery:
    vhost: str
    name: str
    key: Hashable
    entry: Entry
    index: int  # a quorum leader's log index; 0 from a classic home


@dataclass(frozen=True, slots=True)
class ConsumerCancelled:
    vhost: str
    name: str
    key: Hashable


@dataclass(frozen=True, slots=True)
class Reply:
    """A message published to a direct reply-to address of the receiving node."""

    token: str
    message: Message


@dataclass(frozen=True, slots=True)
class Definitions:
    """A node's own classic queues, non-durable exchanges and bindings, as operations."""

    operations: list[Operation]
