"""A quorum queue's Raft entries: the queue commands its replicas apply, as versioned bytes.

Theory of operation:
1. What a quorum queue proposes is a `Sequenced` queue command (`warren.queue`): who sent
   it (node, the node process's incarnation, host number), its number, and the command,
   for a publish the whole `Message` (exchange, routing key, raw properties, body).
   `encode` writes it as one record, `decode` reads it back as the same objects. The
   Raft host puts its stamp (the leader's clock) before these bytes
   (`warren.runtime.cluster.raft_host`, point 8); what is described here follows it.
2. Layout, version 1: the byte ``FORMAT`` (0x01), then one MessagePack array, written by
   msgspec from the array-like Structs below (fields in the order they are declared,
   no names)::

       [sender [node, incarnation, number], seq, command [kind, field, ...]]

   where ``kind`` tags the command (`_KINDS`: 1 Enqueue, 2 Checkout, 3 Cancel, 4 Settle,
   5 Return, 6 Discard, 7 Get, 8 SettleDeadLetter, 9 Purge, 10 Touch, 11 Tick,
   12 Configure) and the fields are the command's, in its dataclass's order. An
   Enqueue's message is ``[exchange, routing_key, properties, body]`` (properties and body
   as MessagePack bin, the bytes the publisher sent); consumer keys (`Checkout`,
   `Cancel`, `Get.holder`) are ``[node, incarnation, number]``; `Configure`'s settings
   are a map of `QueueSettings`' fields (enums by value). A 128-byte publish is an entry
   of about 180 bytes.
3. A later layout gets the next format byte; a reader knows every one it ever wrote.
   Bytes opening with pickle's PROTO opcode (0x80) were written by Warren 0.3 or earlier
   (a pickled `Sequenced`, or before stamps a pickled ``(time, command)``): `decode`
   hands them to `warren.legacy`, once, when such a log is applied after an upgrade.
4. Records are decoded into today's objects (`from_record`): the machine applies
   dataclasses. A publish's message stays the decoded `MessageRecord` until something
   hands it out (`message`): a replica keeps the bodies of recent publishes at hand,
   and most of them (all, on a node without consumers) are never read from there. A
   proposer that still holds the command it encoded skips decoding altogether
   (`QuorumHost.apply_entry`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Final, TypeAlias

import msgspec

from warren import legacy
from warren.amqp.content import Message
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

FORMAT: Final = 0x01  # point 2
Key: TypeAlias = tuple[str, str, int]  # a sender or consumer key: node, incarnation, number


class MessageRecord(msgspec.Struct, array_like=True):
    """A publish's message as its entry holds it, made a `Message` when read (point 4)."""

    exchange: str
    routing_key: str
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
    sender: Key
    seq: int
    command: CommandRecord


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
_FORMAT_BYTE: Final = bytes((FORMAT,))
_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(_Sequenced)


class EntryError(ValueError):
    """Bytes that are no quorum queue entry of a known format."""


def encode(numbered: Sequenced) -> bytes:
    """`numbered` as an entry's bytes (point 2)."""
    return _FORMAT_BYTE + _encoder.encode(
        _Sequenced(numbered.sender, numbered.seq, to_record(numbered.command))  # type: ignore[arg-type]
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
) -> object:
    """The `Sequenced` command an entry's bytes hold, or what `warren.legacy` reads from an
    earlier release's (point 3). The commands of `sender` (the host decoding) are taken
    from `sent` (its commands by number) while it holds them, not decoded (point 4)."""
    if data[0] != FORMAT:
        if legacy.is_pickle(data):
            return legacy.loads(data)
        raise EntryError(f"quorum queue entry of unknown format 0x{data[0]:02x}")
    try:
        record = _decoder.decode(memoryview(data)[1:])
    except msgspec.DecodeError as error:
        raise EntryError(f"malformed quorum queue entry: {error}") from error
    command = sent.pop(record.seq, None) if sent and record.sender == sender else None
    if command is None:
        command = from_record(record.command)
    return Sequenced(record.sender, record.seq, command)


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
        message.exchange, message.routing_key, message.properties_raw, message.body
    )


def message(held: object) -> Message:
    """The `Message` of an Enqueue this module decoded (or an earlier release pickled)."""
    if type(held) is MessageRecord:
        return Message(held.exchange, held.routing_key, held.properties, held.body)
    assert type(held) is Message, "a quorum queue is sent whole messages"
    return held
