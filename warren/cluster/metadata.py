"""The metadata group's pure side: typed operations, their encoding, and the transition.

Theory of operation:
1. Every change the metadata log carries is one small frozen `msgspec.Struct` below, one
   class per operation, tagged with the name earlier releases dispatched it by
   (``put_policy``, ``bind``, ...). The runtime carries an operation out by its type
   (`warren.runtime.cluster.metadata`), never by a string.
2. A log entry and a snapshot are bytes in a versioned MessagePack encoding:

       entry:    FORMAT (1 byte, 0x01) . msgpack [sender, number, operation]
       snapshot: FORMAT (1 byte, 0x01) . msgpack [definitions, placements, transient, numbered,
                                                   configurations]

   where ``operation`` is an array ``[tag, field, ...]`` (the struct's fields in the
   order they are declared; the stored definitions inside it, dataclasses of
   `warren.storage.definitions`, are maps by field name), ``sender`` names one node's
   process and ``number`` counts its operations from 1 (point 4); ``definitions`` is the
   store's contents (`Definitions`, a map), ``placements`` the quorum queues' member lists
   ``[[vhost, name, group id, [member, ...]], ...]``, ``transient`` the operations that
   make again what the store does not keep (non-durable exchanges, classic queues and
   their bindings), ``numbered`` each sender's last number applied and ``configurations``
   each quorum queue group's member list tag (point 6; absent before it). A later format
   takes the next format byte; a reader keeps reading every earlier one. Structs as
   arrays measured smaller than as maps: a numbered ``bind`` entry takes 67 bytes, an
   ``exchange_declare`` 58, a ``put_policy`` 111 (their pickles: 109, 98 and 164).
3. Earlier releases wrote pickles (first byte 0x80, which no format byte takes): an entry
   ``(origin, name, arguments)`` or ``(origin, name, arguments, sender, number)``, a
   snapshot ``(definitions, placements, transient)`` with or without ``numbered``. They
   are read once through `warren.legacy.loads` and turned into these operations
   (`operation_of`); only the current format is written.
4. `apply(meta, entry, state)` is the machine's decision, as ra's ``apply(Meta, Cmd,
   State)``: it returns the next state and the effects the runtime carries out. The state
   is what the decision needs and nothing else: each sender's last number (a copy of an
   operation that a new leader committed again is skipped on every node) and the last
   index this node's store applied (an entry applied before the node restarted is not
   applied again). The definitions themselves stay in the live model and the store,
   which the runtime owns: the effect `Change` asks it to make one operation there, and
   its answer (the -ok, or the error the model refused it with) goes to the proposer;
   `Recorded` asks it to note the index in the store.
5. `restoring(snapshot)` lists, in dependency order, the operations that rebuild a
   snapshot's definitions on a node: the runtime carries them out as it does a `Change`.
6. A quorum queue's member list (`QueueMembers`) is recorded after a membership change,
   by whichever node ran it, so two changes' recordings can commit in either order. Each
   carries the index of the Raft configuration it was read from, and the state keeps the
   latest per group (the snapshot too, as ``configurations``): a list read from an older
   configuration than one applied already is skipped (recorded as applied, not made).
   The tag is a trailing field with a default, so entries and snapshots written before
   it read as untagged (0), and an untagged list applies in log order, as it always did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, get_args

import msgspec

from warren import legacy
from warren.storage.definitions import (
    BindingDefinition,
    Definitions,
    ExchangeDefinition,
    PermissionDefinition,
    PolicyDefinition,
    QueueDefinition,
    TopicPermissionDefinition,
    UserDefinition,
    VHostDefinition,
)

FORMAT: Final = 0x01
QUORUM: Final = "quorum"  # a QueueDefinition's type for a quorum queue


class MetadataFormatError(ValueError):
    """Bytes that are not a metadata entry or snapshot of any format this code reads."""


class _Op(msgspec.Struct, frozen=True, tag=True, array_like=True):
    """Base of the operations: tagged by class name; each sets its own tag."""


# --- channel and management API changes, made through the log (runtime doc, 2) --------------


class ExchangeDeclare(_Op, frozen=True, tag="exchange_declare"):
    vhost: str
    name: str
    exchange_type: str
    durable: bool
    auto_delete: bool
    internal: bool
    arguments: bytes  # an encoded field table


class ExchangeDelete(_Op, frozen=True, tag="exchange_delete"):
    vhost: str
    name: str
    if_unused: bool


class Bind(_Op, frozen=True, tag="bind"):
    vhost: str
    destination: str
    kind: str  # "queue" or "exchange"
    source: str
    routing_key: str
    arguments: bytes  # an encoded field table


class Unbind(_Op, frozen=True, tag="unbind"):
    vhost: str
    destination: str
    kind: str
    source: str
    routing_key: str
    arguments: bytes


class QueueDeclare(_Op, frozen=True, tag="queue_declare"):
    """A classic queue a channel declared: the first in the log for its name makes it."""

    queue: QueueDefinition
    home: str
    durable: bool


class QueueDelete(_Op, frozen=True, tag="queue_delete"):
    """A client's delete of a classic queue, proposed by its home."""

    vhost: str
    name: str
    home: str


class PutVHost(_Op, frozen=True, tag="put_vhost"):
    vhost: VHostDefinition


class DeleteVHost(_Op, frozen=True, tag="delete_vhost"):
    name: str


class PutUser(_Op, frozen=True, tag="put_user"):
    user: UserDefinition


class DeleteUser(_Op, frozen=True, tag="delete_user"):
    name: str


class PutPermission(_Op, frozen=True, tag="put_permission"):
    permission: PermissionDefinition


class DeletePermission(_Op, frozen=True, tag="delete_permission"):
    user: str
    vhost: str


class PutTopicPermission(_Op, frozen=True, tag="put_topic_permission"):
    permission: TopicPermissionDefinition


class DeleteTopicPermissions(_Op, frozen=True, tag="delete_topic_permissions"):
    user: str
    vhost: str
    exchange: str | None  # None: every exchange's


class PutGlobalParameter(_Op, frozen=True, tag="put_global_parameter"):
    name: str
    value: Any  # a JSON value


class PutPolicy(_Op, frozen=True, tag="put_policy"):
    policy: PolicyDefinition


class DeletePolicy(_Op, frozen=True, tag="delete_policy"):
    vhost: str
    name: str


class PutOperatorPolicy(_Op, frozen=True, tag="put_operator_policy"):
    policy: PolicyDefinition


class DeleteOperatorPolicy(_Op, frozen=True, tag="delete_operator_policy"):
    vhost: str
    name: str


# --- what the store keeps, and what it does not (runtime doc, 4) -----------------------------


class PutExchange(_Op, frozen=True, tag="put_exchange"):
    exchange: ExchangeDefinition


class DeleteExchange(_Op, frozen=True, tag="delete_exchange"):
    vhost: str
    name: str


class TransientExchange(_Op, frozen=True, tag="transient_exchange"):
    """A non-durable exchange (the store does not keep it)."""

    vhost: str
    name: str
    exchange_type: str
    auto_delete: bool
    internal: bool
    arguments: bytes


class PutBinding(_Op, frozen=True, tag="put_binding"):
    binding: BindingDefinition


class DeleteBinding(_Op, frozen=True, tag="delete_binding"):
    binding: BindingDefinition


class ClassicQueue(_Op, frozen=True, tag="classic_queue"):
    """A classic queue made on its home: the other nodes make a proxy of it."""

    queue: QueueDefinition
    home: str
    durable: bool
    exclusive: bool


class DeleteClassicQueue(_Op, frozen=True, tag="delete_classic_queue"):
    vhost: str
    name: str
    home: str


# --- quorum queues and the cluster itself (origin "") ---------------------------------------


class PutQueue(_Op, frozen=True, tag="put_queue"):
    """A quorum queue's declare: the first in the log for its name creates it."""

    queue: QueueDefinition
    placement: tuple[str, list[str]] | None  # (group id, members); None from a snapshot


class DeleteQueue(_Op, frozen=True, tag="delete_queue"):
    vhost: str
    name: str
    group_id: str | None = None  # this very queue, not one declared again since


class QueueMembers(_Op, frozen=True, tag="queue_members"):
    """A quorum queue's member list, tagged with the index of the Raft configuration it
    was read from (`RaftNode.membership_index`); 0 in entries written before lists were
    tagged (point 6)."""

    vhost: str
    name: str
    group_id: str
    members: list[str]
    configuration: int = 0


class NodeAddress(_Op, frozen=True, tag="node_address"):
    node: str
    host: str
    port: int


class NodeForgotten(_Op, frozen=True, tag="node_forgotten"):
    node: str


Operation = (
    ExchangeDeclare
    | ExchangeDelete
    | Bind
    | Unbind
    | QueueDeclare
    | QueueDelete
    | PutVHost
    | DeleteVHost
    | PutUser
    | DeleteUser
    | PutPermission
    | DeletePermission
    | PutTopicPermission
    | DeleteTopicPermissions
    | PutGlobalParameter
    | PutPolicy
    | DeletePolicy
    | PutOperatorPolicy
    | DeleteOperatorPolicy
    | PutExchange
    | DeleteExchange
    | TransientExchange
    | PutBinding
    | DeleteBinding
    | ClassicQueue
    | DeleteClassicQueue
    | PutQueue
    | DeleteQueue
    | QueueMembers
    | NodeAddress
    | NodeForgotten
)
OPERATIONS: Final[dict[str, type[Operation]]] = {
    str(cls.__struct_config__.tag): cls for cls in get_args(Operation)
}


def operation_of(name: str, arguments: tuple[Any, ...]) -> Operation:
    """The operation an earlier release named by its method and positional arguments;
    ``exchange_declare`` had its flags in one tuple."""
    if name == "exchange_declare" and len(arguments) == 5:
        vhost, exchange, exchange_type, (durable, auto_delete, internal), raw = arguments
        return ExchangeDeclare(vhost, exchange, exchange_type, durable, auto_delete, internal, raw)
    try:
        cls = OPERATIONS[name]
    except KeyError:
        raise MetadataFormatError(f"no metadata operation {name!r}") from None
    return cls(*arguments)


# --- the log and the snapshot ----------------------------------------------------------------


class Entry(msgspec.Struct, frozen=True, array_like=True):
    """One entry of the metadata log: an operation and who sent it. `sender` is empty (and
    `number` 0) for an entry written before operations were numbered."""

    sender: str
    number: int
    operation: Operation


class Snapshot(msgspec.Struct, frozen=True, array_like=True):
    definitions: Definitions
    placements: list[tuple[str, str, str, list[str]]]  # vhost, name, group id, members
    transient: list[Operation]
    numbered: dict[str, int]
    configurations: dict[str, int] = {}  # group id -> its list's tag (point 6)


_ENTRY_DECODER: Final = msgspec.msgpack.Decoder(Entry)
_SNAPSHOT_DECODER: Final = msgspec.msgpack.Decoder(Snapshot)
_ENCODER: Final = msgspec.msgpack.Encoder()


def encode_entry(entry: Entry) -> bytes:
    return bytes((FORMAT,)) + _ENCODER.encode(entry)


def encode_snapshot(snapshot: Snapshot) -> bytes:
    return bytes((FORMAT,)) + _ENCODER.encode(snapshot)


def decode_entry(data: bytes) -> Entry:
    if data[:1] == bytes((FORMAT,)):
        try:
            return _ENTRY_DECODER.decode(memoryview(data)[1:])
        except msgspec.DecodeError as error:
            raise MetadataFormatError(f"unreadable metadata entry: {error}") from error
    return _legacy_entry(_legacy(data))


def decode_snapshot(data: bytes) -> Snapshot:
    if data[:1] == bytes((FORMAT,)):
        try:
            return _SNAPSHOT_DECODER.decode(memoryview(data)[1:])
        except msgspec.DecodeError as error:
            raise MetadataFormatError(f"unreadable metadata snapshot: {error}") from error
    loaded = _legacy(data)
    definitions, placements, transient = loaded[:3]
    return Snapshot(
        definitions,
        [
            (vhost, name, group, list(members))
            for (vhost, name), (group, members) in placements.items()
        ],
        [operation_of(name, tuple(arguments)) for name, arguments in transient],
        dict(loaded[3]) if len(loaded) > 3 else {},  # numbered from 0.3 on
    )


def _legacy(data: bytes) -> Any:
    if not legacy.is_pickle(data):
        raise MetadataFormatError(f"metadata record of unknown format {data[:1].hex()}")
    return legacy.loads(data)


def _legacy_entry(loaded: Any) -> Entry:
    if len(loaded) == 3:
        _origin, name, arguments = loaded
        return Entry("", 0, operation_of(name, tuple(arguments)))
    _origin, name, arguments, sender, number = loaded
    return Entry(sender, number, operation_of(name, tuple(arguments)))


# --- the transition --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Meta:
    """Where an entry stands in the log (as ra's meta: index and term)."""

    index: int
    term: int


@dataclasses.dataclass(frozen=True, slots=True)
class State:
    stored: int  # the last index the node's store applied (0: none)
    numbered: Mapping[str, int]  # sender -> its last number applied
    # group id -> the configuration tag of its last member list applied (point 6)
    configurations: Mapping[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """Effect: make the operation on the live model and in the store; answer with what it
    gave."""

    operation: Operation


@dataclasses.dataclass(frozen=True, slots=True)
class Recorded:
    """Effect: the store notes `index` as the last it applied."""

    index: int


Effect = Change | Recorded


def apply(meta: Meta, entry: Entry, state: State) -> tuple[State, list[Effect]]:
    """The next state and the effects of an entry committed at `meta` (module doc, 4)."""
    numbered, configurations = state.numbered, state.configurations
    again = False
    if entry.sender:
        last = numbered.get(entry.sender, 0)
        again = entry.number <= last
        if not again:
            numbered = {**numbered, entry.sender: entry.number}
    operation = entry.operation
    older = False
    if not again and isinstance(operation, QueueMembers) and operation.configuration:
        older = operation.configuration < configurations.get(operation.group_id, 0)
        if not older:
            configurations = {**configurations, operation.group_id: operation.configuration}
    if again or meta.index <= state.stored:
        # a copy, or applied before a restart
        return State(state.stored, numbered, configurations), []
    if older:  # a list read before the one applied already (point 6)
        return State(meta.index, numbered, configurations), [Recorded(meta.index)]
    return State(meta.index, numbered, configurations), [Change(operation), Recorded(meta.index)]


def restoring(snapshot: Snapshot) -> list[Operation]:
    """The operations that rebuild a snapshot's definitions, dependencies first: vhosts,
    users and their permissions, parameters and policies, exchanges, quorum queues (with
    their member lists), bindings, then what the store does not keep."""
    stored = snapshot.definitions
    placements = {
        (vhost, name): (group, members) for vhost, name, group, members in snapshot.placements
    }
    operations: list[Operation] = [
        *(PutVHost(vhost) for vhost in stored.vhosts),
        *(PutUser(user) for user in stored.users),
        *(PutPermission(permission) for permission in stored.permissions),
        *(PutTopicPermission(permission) for permission in stored.topic_permissions),
        *(PutGlobalParameter(name, value) for name, value in stored.global_parameters.items()),
        *(PutPolicy(policy) for policy in stored.policies),
        *(PutOperatorPolicy(policy) for policy in stored.operator_policies),
        *(PutExchange(exchange) for exchange in stored.exchanges),
        *(
            PutQueue(queue, placements.get((queue.vhost, queue.name)))
            for queue in stored.queues
            if queue.type == QUORUM
        ),
        *(PutBinding(binding) for binding in stored.bindings),
    ]
    return [*operations, *snapshot.transient]
