"""A quorum queue's Raft entries: the queue commands its replicas apply, as versioned bytes.

Theory of operation:
1. What a quorum queue proposes is a batch of `Sequenced` queue commands (`warren.queue`)
   of one sender (node, the node process's incarnation, host number): the commands its
   host sent in one turn of the event loop, each with its number, a publish with its whole
   `Message` (exchange, routing key, raw properties, body). One entry for many commands
   is one Raft append, one WAL record and one acknowledgement per follower for all of
   them. `encode` writes a batch, `decode` reads an entry of any format back as the
   list of commands it holds, in order. The Raft host puts its stamp (the leader's clock)
   before these bytes (`warren.runtime.cluster.raft_host`, point 8); what is described
   here follows it.
2. Layout, version 2 (``BATCH``, 0x02, what this release writes): the format byte, then
   one MessagePack array, written by msgspec from the array-like Structs below (fields in
   the order they are declared, no names)::

       [sender [node, incarnation, number], [seq, ...], [command, ...]]

   the n-th command with the n-th number. A command is ``[kind, field, ...]`` where
   ``kind`` tags it (`_KINDS`: 1 Enqueue, 2 Checkout, 3 Cancel, 4 Settle, 5 Return,
   6 Discard, 7 Get, 8 SettleDeadLetter, 9 Purge, 10 Touch, 11 Tick, 12 Configure) and
   the fields are the command's, in its dataclass's order. An Enqueue's message is
   ``[exchange, routing_key, properties, body]`` (properties and body as MessagePack bin,
   the bytes the publisher sent; the exchange and routing key as str, or as bin, the
   bytes that came, when they are not UTF-8: AMQP allows any bytes there, and the
   broker holds such a name with lone surrogates, `surrogateescape`, which a MessagePack
   str cannot carry); consumer keys (`Checkout`, `Cancel`, `Get.holder`) are
   ``[node, incarnation, number]``; `Configure`'s settings are a map of
   `QueueSettings`' fields (enums by value). A 128-byte publish adds about 170 bytes.
3. Version 1 (``FORMAT``, 0x01, written by the release before) held one command:
   ``[sender, seq, command]``; it is still read, as a batch of one. A later layout gets
   the next format byte; a reader knows every one it ever wrote. Bytes opening with
   pickle's PROTO opcode (0x80) were written by Warren 0.3 or earlier (a pickled
   `Sequenced`, or before stamps a pickled ``(time, command)``): `decode` hands them to
   `warren.legacy`, once, when such a log is applied after an upgrade.
4. Records are decoded into today's objects (`from_record`): the machine applies
   dataclasses. A publish's message stays the decoded `MessageRecord` until something
   hands it out (`message`): a replica keeps the bodies of recent publishes at hand,
   and most of them (all, on a node without consumers) are never read from there. A
   proposer that still holds the commands it encoded skips decoding them altogether
   (`QuorumHost.apply_entry`): only the sender and the numbers are read.
5. A queue machine keeps, in place of a message, where its publish is: the entry's Raft
   index and the command's slot in the entry, as one int (`position`: the slot above
   bit 48, so slot 0 is the index itself, which is what a version 1 entry's publish and
   the machines and snapshots of the release before hold).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Final, TypeAlias, TypeVar

import msgspec

from warren import legacy
from warren.amqp.content import Message, packed_name, unpacked_name
from warren.model.settings import QueueSettings
from warren.queue import (
    Cancel,
    Checkout,
    Command,
    Configure,
    Discard,
    Enqueue,
    Get,
    Purge,
    Return,
    Sequenced,
    Settle,
    SettleDeadLetter,
    Tick,
    Touch,
)

FORMAT: Final = 0x01  # one command (point 3), read only
BATCH: Final = 0x02  # a batch of commands (point 2), written
BATCH_MAX: Final = 4096  # commands in one entry at most; a slot fits in 15 bits
_SLOT_SHIFT: Final = 48  # point 5
_INDEX_MASK: Final = (1 << _SLOT_SHIFT) - 1
Key: TypeAlias = tuple[str, str, int]  # a sender or consumer key: node, incarnation, number
_R = TypeVar("_R")


class MessageRecord(msgspec.Struct, array_like=True):
    """A publish's message as its entry holds it, made a `Message` when read (point 4)."""

    # str, or bytes for a name that is not UTF-8 (point 2; msgspec takes no str | bytes)
    exchange: Any
    routing_key: Any
    properties: bytes
    body: bytes


class _Enqueue(msgspec.Struct, array_like=True, tag=1):
    message: MessageRecord
    size_bytes: int
    ttl_ms: int | None
    priority: int


class _Checkout(msgspec.Struct, array_like=True, tag=2):
    consumer: Key
    channel: Key
    prefetch_count: int
    no_ack: bool
    exclusive: bool
    priority: int


class _Cancel(msgspec.Struct, array_like=True, tag=3):
    consumer: Key
    requeue: bool


class _Settle(msgspec.Struct, array_like=True, tag=4):
    msg_ids: list[int]


class _Return(msgspec.Struct, array_like=True, tag=5):
    msg_ids: list[int]


class _Discard(msgspec.Struct, array_like=True, tag=6):
    msg_ids: list[int]


class _Get(msgspec.Struct, array_like=True, tag=7):
    no_ack: bool
    holder: Key | None


class _SettleDeadLetter(msgspec.Struct, array_like=True, tag=8):
    msg_ids: list[int]


class _Purge(msgspec.Struct, array_like=True, tag=9):
    pass


class _Touch(msgspec.Struct, array_like=True, tag=10):
    pass


class _Tick(msgspec.Struct, array_like=True, tag=11):
    pass


class _Configure(msgspec.Struct, array_like=True, tag=12):
    settings: QueueSettings


CommandRecord: TypeAlias = (
    _Enqueue
    | _Checkout
    | _Cancel
    | _Settle
    | _Return
    | _Discard
    | _Get
    | _SettleDeadLetter
    | _Purge
    | _Touch
    | _Tick
    | _Configure
)


class _Sequenced(msgspec.Struct, array_like=True):
    """Version 1: one command (point 3)."""

    sender: Key
    seq: int
    command: CommandRecord


class _Batch(msgspec.Struct, array_like=True):
    """Version 2: the commands of one sender (point 2)."""

    sender: Key
    seqs: list[int]
    commands: list[CommandRecord]


class _BatchHead(msgspec.Struct, array_like=True):
    """A version 2 entry with its commands left undecoded (point 4)."""

    sender: Key
    seqs: list[int]
    commands: msgspec.Raw


# each command's record, and back; fields match by name and order (point 2)
_KINDS: Final[dict[type[Command], type[CommandRecord]]] = {
    Enqueue: _Enqueue,
    Checkout: _Checkout,
    Cancel: _Cancel,
    Settle: _Settle,
    Return: _Return,
    Discard: _Discard,
    Get: _Get,
    SettleDeadLetter: _SettleDeadLetter,
    Purge: _Purge,
    Touch: _Touch,
    Tick: _Tick,
    Configure: _Configure,
}
_COMMANDS: Final = {record: command for command, record in _KINDS.items()}
_FIELDS: Final = {command: tuple(f.name for f in fields(command)) for command in _KINDS}  # type: ignore[arg-type]
_BATCH_BYTE: Final = bytes((BATCH,))
_encoder: Final = msgspec.msgpack.Encoder()
_one_decoder: Final = msgspec.msgpack.Decoder(_Sequenced)
_batch_decoder: Final = msgspec.msgpack.Decoder(_Batch)
_head_decoder: Final = msgspec.msgpack.Decoder(_BatchHead)


class EntryError(ValueError):
    """Bytes that are no quorum queue entry of a known format."""


def encode(sender: Key, commands: list[tuple[int, Command]]) -> bytes:
    """The commands of `sender`, each with its number, as one entry's bytes (point 2)."""
    return _BATCH_BYTE + _encoder.encode(
        _Batch(sender, [seq for seq, _ in commands], [to_record(c) for _, c in commands])
    )


def to_record(command: Command) -> CommandRecord:
    kind = type(command)
    if kind is Enqueue:
        assert isinstance(command, Enqueue)
        return _Enqueue(
            message_record(command.message), command.size_bytes, command.ttl_ms, command.priority
        )
    record = _KINDS[kind]
    return record(*(getattr(command, name) for name in _FIELDS[kind]))


def decode(
    data: bytes | memoryview, sender: Key | None = None, sent: dict[int, Command] | None = None
) -> list[object]:
    """The `Sequenced` commands an entry's bytes hold, in order, or what `warren.legacy`
    reads from an earlier release's (point 3). The commands of `sender` (the host
    decoding) are taken from `sent` (its commands by number) while it holds all of them,
    not decoded (point 4)."""
    kind = data[0]
    if kind == BATCH and sent and sender is not None:
        head = _decode(_head_decoder, data)
        seqs = head.seqs
        if head.sender == sender and all(seq in sent for seq in seqs):
            return [Sequenced(sender, seq, sent.pop(seq)) for seq in seqs]
    if kind == BATCH:
        batch = _decode(_batch_decoder, data)
        if len(batch.seqs) != len(batch.commands):
            raise EntryError("malformed quorum queue entry: a number for every command expected")
        return [
            Sequenced(batch.sender, seq, from_record(command))
            for seq, command in zip(batch.seqs, batch.commands, strict=True)
        ]
    if kind == FORMAT:
        one = _decode(_one_decoder, data)
        return [Sequenced(one.sender, one.seq, from_record(one.command))]
    if legacy.is_pickle(data):
        return [legacy.loads(data)]
    raise EntryError(f"quorum queue entry of unknown format 0x{kind:02x}")


def batched(data: bytes | memoryview) -> bool:
    """Whether the entry is a batch (its proposer is answered a list, one per command)
    rather than one command of version 1 or an earlier release."""
    return data[0] == BATCH


def _decode(decoder: msgspec.msgpack.Decoder[_R], data: bytes | memoryview) -> _R:
    try:
        return decoder.decode(memoryview(data)[1:])
    except msgspec.DecodeError as error:
        raise EntryError(f"malformed quorum queue entry: {error}") from error


def position(index: int, slot: int) -> int:
    """Where a publish is: its entry's Raft index and its slot in the entry (point 5)."""
    return index | slot << _SLOT_SHIFT


def index_of(held: int) -> int:
    """The Raft index of the entry at `position` `held`."""
    return held & _INDEX_MASK


def slot_of(held: int) -> int:
    """The command's slot in the entry at `position` `held`."""
    return held >> _SLOT_SHIFT


def from_record(record: CommandRecord) -> Command:
    """The queue command a record holds (point 4); a publish's message stays a
    `MessageRecord` (the queue machine does not look at it)."""
    if type(record) is _Enqueue:
        return Enqueue(record.message, record.size_bytes, record.ttl_ms, record.priority)
    return _COMMANDS[type(record)](*(getattr(record, name) for name in record.__struct_fields__))


def message_record(message: object) -> MessageRecord:
    """A whole `Message` as an entry (or a peer link's frame) holds it."""
    assert type(message) is Message, "a quorum queue is sent whole messages"
    return MessageRecord(
        packed_name(message.exchange),
        packed_name(message.routing_key),
        message.properties_raw,
        message.body,
    )


def message(held: object) -> Message:
    """The `Message` of an Enqueue this module decoded (or an earlier release pickled)."""
    if type(held) is MessageRecord:
        return Message(
            unpacked_name(held.exchange),
            unpacked_name(held.routing_key),
            held.properties,
            held.body,
        )
    assert type(held) is Message, "a quorum queue is sent whole messages"
    return held
