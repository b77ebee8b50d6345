"""Node-to-node messages: one small msgspec type per request and reply, dispatched by type.

Theory of operation:
1. Requests a node answers itself (`NodeRequest`): `Status`, `NodeDetails`, `GroupStatus`,
   `Campaign`, `AppliedThrough` (the metadata group's barrier), `ReplyLive` (is a direct
   reply-to address of this node's live), and `Forward`, which asks a node to pass a
   leader request on to whichever node leads.
2. Requests for a Raft group's leader (`LeaderRequest`, `ClusterNode.leader_call`):
   `Propose` (a batch of commands), `AddMember`, `RemoveMember`, `Transfer`, `Counts`,
   `Consumers`. A node answers `Led` with the value when it leads the group, else
   `Redirect` with the leader it knows (or None). Each proposal of a batch is answered in
   order by its entry's reply as an `Outcome`, or `RETRY` when the leader lost it before
   it committed: the proposer sends it and the rest of the batch again.
3. A classic queue's home and the nodes that use it exchange `Call`s, each carrying one
   `QueueRequest` (`QueueCommand`, `QueueCounts`, `QueueCounters`, `Consume`,
   `CancelConsumer`, `DeleteQueue`) and a call number (0: no answer wanted), answered by
   `CallReply` or `CallError`; a home (or a quorum leader) sends `Delivery` and
   `ConsumerCancelled` to a consumer's node, and a node whose link came up sends
   `Definitions`. A publish to a direct reply-to address of another node goes to that
   node as a `Reply`. `RaftTraffic` carries a round's Raft messages.
4. Every request names the type of its reply as its generic parameter
   (`NodeRequest[R]`, `QueueRequest[R]`); `reply_type` reads it (a leader request's reply is
   `Led[R] | Redirect`). The answering side encodes its reply on its own, the asking side
   decodes it with that type (`frames.answer_value`, `call_value`), so no decoder needs
   a union of every reply, and a caller gets a typed answer, not a tuple to pick apart.
5. Live objects that are no wire types (a `Got` and its entry, a queue's `Refused`, an
   `AmqpError`) cross as records: `to_wire` on the sending side, `from_wire` on the
   receiving side; everything else is a msgspec type already.

Wire format: every class here is a frozen `msgspec.Struct` encoded as a MessagePack array,
the first element its integer tag (below, by family: 1-9 messages, 10-29 node and leader
requests, 30-39 queue requests, 40-49 replies), then its fields in the order declared.
Changing a class changes the protocol: the handshake's `MAGIC` in `peers` (WARREN-PEERS/8
for this set) says which version a node speaks, and a node of another version is refused
before any frame is decoded. The frame around them is `warren.runtime.cluster.frames`.
"""

from __future__ import annotations

import functools
from typing import Any, Final, Generic, TypeAlias, TypeVar, cast, get_args, get_origin

import msgspec

from warren.cluster.metadata import Operation
from warren.cluster.queue_entries import CommandRecord, MessageRecord, message, message_record
from warren.errors import AmqpError, ErrorFields, SoftError, error_fields, error_from_fields
from warren.queue import Counters, Entry, Got, Refused

R = TypeVar("R")
ConsumerKey: TypeAlias = tuple[str, str, int]  # node, the node process's incarnation, number


class _Wire(msgspec.Struct, frozen=True, array_like=True):
    """Base of every type on the link: frozen, an array, tagged by each subclass."""


# --- replies that are records of live objects (point 5) --------------------------------------


class EntryRecord(_Wire, frozen=True):
    """A message a queue hands to another node, as it is when sent."""

    msg_id: int
    message: MessageRecord
    size_bytes: int
    level: int
    delivery_count: int

    @classmethod
    def of(cls, entry: Entry) -> EntryRecord:
        held = message_record(message(entry.message))
        return cls(entry.msg_id, held, entry.size_bytes, entry.level, entry.delivery_count)

    def entry(self) -> Entry:
        entry = Entry(self.msg_id, message(self.message), self.size_bytes, None, self.level)
        entry.delivery_count = self.delivery_count
        return entry


class GotRecord(_Wire, frozen=True, tag=40):
    entry: EntryRecord
    remaining: int


class RefusedRecord(_Wire, frozen=True, tag=41):
    """A queue's `Refused` (an exclusive consumer's checkout)."""

    error: ErrorFields


class ErrorRecord(_Wire, frozen=True, tag=42):
    """An `AmqpError` given as a value (a metadata operation the model refused)."""

    error: ErrorFields


class Retry(_Wire, frozen=True, tag=43):
    """A proposal the leader lost before it committed."""


RETRY: Final = Retry()


class Applied(_Wire, frozen=True, tag=44):
    """What an applied metadata operation answers its proposer: its log index, for the
    barrier, and the operation's own result (`to_wire`)."""

    index: int
    value: Outcome


class Outcomes(_Wire, frozen=True, tag=47):
    """The replies of a batched entry's commands, in order (`warren.cluster.queue_entries`
    format 2): a list cannot stand in a union beside the tagged records."""

    values: list[Outcome]


# an entry's reply as it crosses the link: a publish's bool, basic.get's `Got` or None,
# purge's count, a settlement's count, a metadata operation's `Applied`, a batch's replies
Outcome: TypeAlias = (
    bool | int | Retry | GotRecord | RefusedRecord | ErrorRecord | Applied | Outcomes | None
)


def to_wire(value: object) -> object:
    """`value` as a record if it is a live object with one (point 5), else itself."""
    kind = type(value)
    if kind is Got:
        got = cast("Got", value)
        return GotRecord(EntryRecord.of(got.entry), got.remaining)
    if kind is Refused:
        return RefusedRecord(error_fields(cast("Refused", value).error))
    if isinstance(value, AmqpError):
        return ErrorRecord(error_fields(value))
    if kind is list:
        replies = [to_wire(one) for one in cast("list[object]", value)]
        return Outcomes(cast("list[Outcome]", replies))
    return value


def from_wire(value: object) -> object:
    """What `to_wire` made a record of, live again; anything else as it is."""
    kind = type(value)
    if kind is GotRecord:
        got = cast("GotRecord", value)
        return Got(got.entry.entry(), got.remaining)
    if kind is RefusedRecord:
        return Refused(cast("SoftError", error_from_fields(cast("RefusedRecord", value).error)))
    if kind is ErrorRecord:
        return error_from_fields(cast("ErrorRecord", value).error)
    if kind is Outcomes:
        return [from_wire(one) for one in cast("Outcomes", value).values]
    return value


# --- what a node answers itself --------------------------------------------------------------


class NodeRequest(_Wire, Generic[R], frozen=True):
    """A request whose answer is an `R`."""


class Status(NodeRequest[dict[str, Any]], frozen=True, tag=10):
    """The node's cluster status (`ClusterNode.status`)."""


class NodeDetails(NodeRequest[dict[str, Any] | None], frozen=True, tag=11):
    """The node as the management API shows it (`ClusterNode.describe`; None: unknown)."""


class GroupStatus(NodeRequest[dict[str, Any] | None], frozen=True, tag=12):
    group_id: str


class AppliedThrough(NodeRequest[bool], frozen=True, tag=13):
    """Answered once this node's metadata group applied `index` (False: not in time)."""

    index: int


class ReplyLive(NodeRequest[bool], frozen=True, tag=16):
    """Whether this node's channel of a direct reply-to `token` still consumes from it."""

    token: str


class Campaign(NodeRequest[None], frozen=True, tag=14):
    """The leader locator chose this node to lead a new queue's group."""

    group_id: str


# --- what a group's leader answers ------------------------------------------------------------


class LeaderRequest(NodeRequest[R], frozen=True):
    group_id: str


class Propose(LeaderRequest[list[Outcome]], frozen=True, tag=20):
    commands: tuple[bytes, ...]


class Configuration(_Wire, frozen=True, tag=48):
    """A group's members (voters and learners) as its leader has them, and the index of
    the Raft configuration they are (`RaftNode.membership_index`): a recorded member list
    carries it, so that an older list recorded late does not replace a newer one."""

    members: list[str]
    index: int


class AddMember(LeaderRequest[Configuration], frozen=True, tag=21):
    """A replica (or, with its address, a node joining the metadata group)."""

    node: str
    host: str | None = None
    port: int | None = None


class RemoveMember(LeaderRequest[Configuration], frozen=True, tag=22):
    node: str


class Transfer(LeaderRequest[bool], frozen=True, tag=23):
    node: str


class Counts(LeaderRequest[tuple[int, int]], frozen=True, tag=24):
    """A quorum queue's declare-ok counts, from its leader."""


class Consumers(LeaderRequest[list[ConsumerKey]], frozen=True, tag=25):
    """A quorum queue's consumers as its leader has them."""


class LeaderCounters(LeaderRequest[Counters], frozen=True, tag=26):
    """A quorum queue's counts as its leader has them (the management API of a node that
    holds no replica, as RabbitMQ shows a quorum queue's leader's metrics everywhere)."""


GroupRequest: TypeAlias = (
    Propose | AddMember | RemoveMember | Transfer | Counts | Consumers | LeaderCounters
)


class Forward(NodeRequest[R], frozen=True, tag=15):
    """From a node that does not know the leader (joining): pass it on; the answer is
    the leader request's value."""

    request: GroupRequest


class Led(_Wire, Generic[R], frozen=True, tag=45):
    """The leader's answer."""

    value: R


class Redirect(_Wire, frozen=True, tag=46):
    """Not the leader: ask `leader` (None: unknown)."""

    leader: str | None


Request: TypeAlias = (
    Status
    | NodeDetails
    | GroupStatus
    | AppliedThrough
    | ReplyLive
    | Campaign
    | Forward[Any]
    | GroupRequest
)


# --- classic queues across nodes, quorum deliveries to nodes without a replica ------------


class QueueRequest(_Wire, Generic[R], frozen=True):
    vhost: str
    name: str


class QueueCommand(QueueRequest[Outcome], frozen=True, tag=30):
    """A publish, get, purge or settlement; answered with the host's outcome value."""

    command: CommandRecord


class QueueCounts(QueueRequest[tuple[int, int]], frozen=True, tag=31):
    pass


class QueueCounters(QueueRequest[Counters], frozen=True, tag=32):
    """The counts the management API shows of a queue of another node (remote.py, 7)."""


class Consume(QueueRequest[None], frozen=True, tag=33):
    key: ConsumerKey
    prefetch_count: int
    no_ack: bool
    exclusive: bool
    priority: int


class CancelConsumer(QueueRequest[None], frozen=True, tag=34):
    key: ConsumerKey
    waiting: list[int]  # handed to the node, never to its client: they go back


class DeleteQueue(QueueRequest[int], frozen=True, tag=35):
    if_unused: bool
    if_empty: bool


AnyQueueRequest: TypeAlias = (
    QueueCommand | QueueCounts | QueueCounters | Consume | CancelConsumer | DeleteQueue
)


# --- messages (`Peers.send`) -------------------------------------------------------------------


class RaftTraffic(_Wire, frozen=True, tag=1):
    """One round's Raft messages from one node to another, in order, as the versioned
    bytes of `warren.cluster.raft_codec`."""

    messages: bytes


class Call(_Wire, frozen=True, tag=2):
    number: int  # 0: one way
    request: AnyQueueRequest


class CallReply(_Wire, frozen=True, tag=3):
    number: int
    value: msgspec.Raw  # the request's reply type, encoded by `call_reply`


class CallError(_Wire, frozen=True, tag=4):
    number: int
    code: int
    detail: str


class Delivery(_Wire, frozen=True, tag=5):
    vhost: str
    name: str
    key: ConsumerKey
    entry: EntryRecord
    index: int  # a quorum leader's log index; 0 from a classic home


class ConsumerCancelled(_Wire, frozen=True, tag=6):
    vhost: str
    name: str
    key: ConsumerKey


class Reply(_Wire, frozen=True, tag=8):
    """A message published to a direct reply-to address of the receiving node."""

    token: str
    message: MessageRecord


class Definitions(_Wire, frozen=True, tag=7):
    """A node's own classic queues, non-durable exchanges and bindings, as operations, as
    they were when its metadata log was applied through `applied`."""

    operations: list[Operation]
    applied: int


PeerMessage: TypeAlias = (
    RaftTraffic | Call | CallReply | CallError | Delivery | ConsumerCancelled | Reply | Definitions
)


# --- replies by the request's type (point 4) ---------------------------------------------------

_ENCODER: Final = msgspec.msgpack.Encoder()


def reply_type(request: NodeRequest[Any] | QueueRequest[Any]) -> Any:
    """The type `request` is answered with."""
    return _reply_type(*_asked(request))


def reply_decoder(request: NodeRequest[Any] | QueueRequest[Any]) -> msgspec.msgpack.Decoder[Any]:
    """A decoder of `request`'s reply type (one per type: making one costs more than
    decoding a small reply)."""
    return _decoder(*_asked(request))


def _asked(request: NodeRequest[Any] | QueueRequest[Any]) -> tuple[type, bool]:
    """The request class whose reply comes back, and whether a leader's `Led` wraps it."""
    if type(request) is Forward:
        return type(request.request), False  # the leader's value itself
    kind = type(request)
    return kind, issubclass(kind, LeaderRequest)


@functools.cache
def _reply_type(kind: type, led: bool) -> Any:
    for base in getattr(kind, "__orig_bases__", ()):
        if get_origin(base) in (NodeRequest, LeaderRequest, QueueRequest):
            value = get_args(base)[0]
            return Led[value] | Redirect if led else value  # type: ignore[valid-type]
    raise TypeError(f"{kind.__name__} names no reply type")


@functools.cache
def _decoder(kind: type, led: bool) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(_reply_type(kind, led))


def call_reply(number: int, value: object) -> CallReply:
    """A home's answer to call `number` (raises if `value` is no wire type)."""
    return CallReply(number, msgspec.Raw(_ENCODER.encode(to_wire(value))))


def call_value(reply: CallReply, request: QueueRequest[Any]) -> object:
    """The live value of a home's answer to `request` (msgspec.ValidationError or
    DecodeError: not its reply type)."""
    return from_wire(reply_decoder(request).decode(reply.value))
