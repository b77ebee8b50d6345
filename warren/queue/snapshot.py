"""A queue machine as bytes, for a replicated queue's Raft snapshots.

Theory of operation:
1. `dumps(machine)` and `loads(data)` are the only ways a snapshot is written and read.
   A quorum queue of a million messages is snapshotted whole, on the event loop, so the
   entries go as columns: one packed array per field (msg_id, message, size, deadline,
   priority level, delivery count, live), in the order of the structure that holds them,
   and the structures as runs of those columns. A million entries take about 34 MB.
2. Layout, format 1: the byte ``FORMAT`` (0x01), then one MessagePack array written by
   msgspec from `_Snapshot` (array-like Structs: fields in declared order, no names).
   A column is MessagePack bin holding the array's items little-endian (`_COLUMNS`: q
   int64, I uint32, B uint8; no deadline is -1). Messages that are ints (a quorum
   queue's Raft indexes) are such a column; a machine restored from a snapshot of
   machine version 1 may still hold whole messages: then the column is a list whose
   items are ints or ``[exchange, routing_key, properties, body]`` (the names as str, or
   as bin, the bytes that came, when they are not UTF-8: `content.packed_name`; a
   snapshot written before, all str, reads as it did). Consumer, channel
   and sender keys are ``[node, incarnation, number]`` (a string in tests of the
   machine alone). Replies remembered per sender (`Sequenced`) are nil, a bool, an int,
   or tagged arrays (`_Rejected` 1, `_Got` 2 with the entry as a one-row set of
   columns, `_Refused` 3 with the error's fields, `warren.errors.error_fields`).
   `QueueSettings` is a map of its fields, enums by value.
3. Every entry is held by exactly one of: a priority level's ready deque or returned
   heap, the unacked map, the held dead letters. The deadline heap refers to entries held
   elsewhere, or to entries gone (stale tuples, skipped when they come up): it is written
   as (deadline, msg_id) columns and its entries are found again by msg_id; a gone one
   comes back as a dead placeholder, which `QueueMachine` skips as it skips the original.
   A dead (killed) entry left in a ready deque and also held for dead-lettering comes
   back as two objects: the deque skips its copy, as it skipped the original.
4. Snapshots of earlier releases are pickles (they open with 0x80): machine version 1
   pickled the machine itself, version 2 a tuple of these columns. `loads` reads them
   through `warren.legacy`; the next snapshot is written in the current format.
"""

from __future__ import annotations

import sys
from array import array
from collections import OrderedDict, deque
from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import fields
from typing import Any, Final, TypeAlias, cast

import msgspec

from warren import legacy
from warren.amqp.content import Message, packed_name, unpacked_name
from warren.errors import ErrorFields, SoftError, error_fields, error_from_fields
from warren.model.settings import QueueSettings
from warren.queue.machine import (
    Checkout,
    DeadLetter,
    Entry,
    Got,
    QueueMachine,
    Refused,
    Rejected,
    _Consumer,
    _Level,
    _Sender,
)

FORMAT: Final = 0x01  # point 2
_NO_DEADLINE: Final = -1
_SWAP: Final = sys.byteorder != "little"  # columns are little-endian (point 2)
Key: TypeAlias = str | tuple[str, str, int]


class _Message(msgspec.Struct, array_like=True):
    # str, or bytes for a name that is not UTF-8 (point 2; msgspec takes no str | bytes)
    exchange: Any
    routing_key: Any
    properties: bytes
    body: bytes


class _Columns(msgspec.Struct, array_like=True):
    msg_id: bytes
    message: bytes | list[int | _Message]
    size_bytes: bytes
    expires_at_ms: bytes
    level: bytes
    delivery_count: bytes
    live: bytes


# the array type of each column, by `_Columns` field (which is the `Entry` attribute)
_COLUMNS: Final = {
    "msg_id": "q",
    "message": "q",
    "size_bytes": "I",
    "expires_at_ms": "q",
    "level": "B",
    "delivery_count": "I",
    "live": "B",
}


class _Rejected(msgspec.Struct, array_like=True, tag=1):
    pass


class _Got(msgspec.Struct, array_like=True, tag=2):
    entry: _Columns
    remaining: int


class _Refused(msgspec.Struct, array_like=True, tag=3):
    error: ErrorFields


_Reply: TypeAlias = bool | int | _Rejected | _Got | _Refused | None


class _ConsumerRecord(msgspec.Struct, array_like=True):
    consumer: Key
    channel: Key
    prefetch_count: int
    no_ack: bool
    priority: int
    in_flight: int


class _SenderRecord(msgspec.Struct, array_like=True):
    key: Key
    applied_to: int
    above: list[int]
    replies: dict[int, _Reply]
    last_ms: int


class _DeadLetters(msgspec.Struct, array_like=True):
    entries: _Columns
    reasons: list[tuple[str, bool]]  # reason, held


class _Snapshot(msgspec.Struct, array_like=True):
    name: str
    vhost: str
    settings: QueueSettings
    version: int
    next_msg_id: int
    ready_count: int
    ready_bytes: int
    unacked_bytes: int
    last_used_ms: int
    timer_at_ms: int | None
    exclusive_consumer: Key | None
    active_consumer: Key | None
    fetched_count: int
    dead_letter_count: int
    dead_letter_bytes: int
    levels: list[tuple[_Columns, _Columns]]  # ready, returned
    unacked: _Columns
    unacked_by: list[Key | None]
    waiting: _DeadLetters
    out: _DeadLetters
    deadline_at_ms: bytes
    deadline_msg_ids: bytes
    consumers: list[_ConsumerRecord]
    rings: list[tuple[int, list[Key]]]
    senders: list[_SenderRecord]
    fetched_by: dict[int, Key]


_FORMAT_BYTE: Final = bytes((FORMAT,))
_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(_Snapshot)
# machine fields `_Snapshot` writes under another form (the rest by the same name)
_RESHAPED: Final = frozenset(
    {
        "_levels",
        "_deadlines",
        "_unacked",
        "_consumers",
        "_rings",
        "_dead_letters_waiting",
        "_dead_letters_out",
        "_senders",
        "_fetched_by",
    }
)
_PLAIN: Final = tuple(f.name for f in fields(QueueMachine) if f.name not in _RESHAPED)


class SnapshotError(ValueError):
    """Bytes that are no queue snapshot of a known format."""


def dumps(machine: QueueMachine) -> bytes:
    unacked = list(machine._unacked.values())
    deadlines = machine._deadlines
    plain: dict[str, Any] = {name: getattr(machine, name) for name in _PLAIN}
    record = _Snapshot(
        **plain,
        levels=[(_columns(level.ready), _columns(level.returned)) for level in machine._levels],
        unacked=_columns([entry for entry, _ in unacked]),
        unacked_by=[cast("Key | None", consumer) for _, consumer in unacked],
        waiting=_dead_letter_record(machine._dead_letters_waiting),
        out=_dead_letter_record(machine._dead_letters_out.values()),
        deadline_at_ms=_packed("q", [d[0] for d in deadlines]),
        deadline_msg_ids=_packed("q", [d[1] for d in deadlines]),
        consumers=[
            _ConsumerRecord(
                cast("Key", c.consumer),
                cast("Key", c.channel),
                c.prefetch_count,
                c.no_ack,
                c.priority,
                c.in_flight,
            )
            for c in machine._consumers.values()
        ],
        rings=[(priority, cast("list[Key]", list(ring))) for priority, ring in machine._rings],
        senders=[
            _SenderRecord(
                cast("Key", key),
                sender.applied_to,
                sorted(sender.above),
                {seq: _reply_record(reply) for seq, reply in sender.replies.items()},
                sender.last_ms,
            )
            for key, sender in machine._senders.items()
        ],
        fetched_by=cast("dict[int, Key]", machine._fetched_by),
    )
    return _FORMAT_BYTE + _encoder.encode(record)


def loads(data: bytes) -> QueueMachine:
    if data[:1] != _FORMAT_BYTE:
        if legacy.is_pickle(data):
            return _legacy(legacy.loads(data))
        raise SnapshotError(f"queue snapshot of unknown format 0x{data[0]:02x}")
    try:
        record = _decoder.decode(memoryview(data)[1:])
    except msgspec.DecodeError as error:
        raise SnapshotError(f"malformed queue snapshot: {error}") from error
    machine = QueueMachine(**{name: getattr(record, name) for name in _PLAIN})
    _place(
        machine,
        [(_entries(ready), _entries(returned)) for ready, returned in record.levels],
        zip(_entries(record.unacked), record.unacked_by, strict=True),
        _dead_letters(_entries(record.waiting.entries), record.waiting.reasons),
        _dead_letters(_entries(record.out.entries), record.out.reasons),
        (_unpacked("q", record.deadline_at_ms), _unpacked("q", record.deadline_msg_ids)),
    )
    for c in record.consumers:
        checkout = Checkout(c.consumer, c.channel, c.prefetch_count, c.no_ack, priority=c.priority)
        consumer = _Consumer(checkout)
        consumer.in_flight = c.in_flight
        machine._consumers[c.consumer] = consumer
    machine._rings = [(priority, deque[Hashable](ring)) for priority, ring in record.rings]
    for s in record.senders:
        sender = machine._senders[s.key] = _Sender(s.last_ms)
        sender.applied_to, sender.above = s.applied_to, set(s.above)
        sender.replies = OrderedDict((seq, _reply(reply)) for seq, reply in s.replies.items())
    machine._fetched_by = dict[int, Hashable](record.fetched_by)
    return machine


# --- columns -------------------------------------------------------------------------------


def _packed(typecode: str, values: Iterable[int]) -> bytes:
    column = array(typecode, values)
    if _SWAP:
        column.byteswap()
    return column.tobytes()


def _unpacked(typecode: str, data: bytes) -> array[int]:
    column = _column(typecode, data)
    if _SWAP:
        column.byteswap()
    return column


def _columns(held: Iterable[Entry]) -> _Columns:
    # one pass over the structure: a ready queue makes its plain messages' entries as it
    # goes, so the seven columns read a list rather than the queue seven times
    entries = list(held)
    messages = [entry.message for entry in entries]
    return _Columns(
        _packed("q", [entry.msg_id for entry in entries]),
        _packed("q", cast("list[int]", messages))
        if all(type(message) is int for message in messages)
        else [_message_record(message) for message in messages],
        _packed("I", [entry.size_bytes for entry in entries]),
        _packed(
            "q",
            [
                _NO_DEADLINE if entry.expires_at_ms is None else entry.expires_at_ms
                for entry in entries
            ],
        ),
        _packed("B", [entry.level for entry in entries]),
        _packed("I", [entry.delivery_count for entry in entries]),
        _packed("B", [entry.live for entry in entries]),
    )


def _message_record(message: object) -> int | _Message:
    if type(message) is int:
        return message
    if type(message) is Message:
        exchange, routing_key = packed_name(message.exchange), packed_name(message.routing_key)
        return _Message(exchange, routing_key, message.properties_raw, message.body)
    raise TypeError(f"a queue snapshot holds Raft indexes or messages, not {message!r}")


def _entries(columns: _Columns) -> list[Entry]:
    messages = columns.message
    return _rows(
        [
            _unpacked(typecode, getattr(columns, name))
            if name != "message" or type(messages) is bytes
            else [
                Message(
                    unpacked_name(m.exchange), unpacked_name(m.routing_key), m.properties, m.body
                )
                if type(m) is _Message
                else m
                for m in messages
            ]
            for name, typecode in _COLUMNS.items()
        ]
    )


def _rows(columns: list[Sequence[Any]]) -> list[Entry]:
    """Entries from their columns' values, in `_COLUMNS` order."""
    result = []
    for msg_id, message, size, deadline, level, delivery_count, live in zip(*columns, strict=True):
        expires_at_ms = None if deadline == _NO_DEADLINE else deadline
        entry = Entry(msg_id, message, size, expires_at_ms, level)
        entry.delivery_count = delivery_count
        entry.live = bool(live)
        result.append(entry)
    return result


def _dead_letter_record(dead_letters: Collection[DeadLetter]) -> _DeadLetters:
    return _DeadLetters(
        _columns([dead.entry for dead in dead_letters]),
        [(dead.reason, dead.held) for dead in dead_letters],
    )


def _dead_letters(entries: list[Entry], reasons: list[tuple[str, bool]]) -> list[DeadLetter]:
    return [
        DeadLetter(entry, reason, held)
        for entry, (reason, held) in zip(entries, reasons, strict=True)
    ]


def _place(
    machine: QueueMachine,
    levels: list[tuple[list[Entry], list[Entry]]],
    unacked: Iterable[tuple[Entry, Hashable | None]],
    waiting: list[DeadLetter],
    out: list[DeadLetter],
    deadlines: tuple[Sequence[int], Sequence[int]],
) -> None:
    """The machine's structures of entries, from the entries each holds (points 1, 3)."""
    machine._levels = []
    for ready, returned in levels:
        level = _Level()
        level.ready = deque(ready)
        level.returned = returned
        machine._levels.append(level)
    machine._unacked = {entry.msg_id: (entry, consumer) for entry, consumer in unacked}
    machine._dead_letters_waiting = deque(waiting)
    machine._dead_letters_out = {dead.entry.msg_id: dead for dead in out}
    machine._deadlines = _deadlines(machine, *deadlines)


def _deadlines(
    machine: QueueMachine, at_ms: Sequence[int], msg_ids: Sequence[int]
) -> list[tuple[int, int, Entry]]:
    """The deadline heap again, in the same order, with the entries held (point 3)."""
    if not at_ms:
        return []
    held: dict[int, Entry] = {}
    for level in machine._levels:
        for entry in (*level.ready, *level.returned):
            if entry.live and entry.expires_at_ms is not None:
                held[entry.msg_id] = entry
    for entry, _consumer in machine._unacked.values():
        if entry.expires_at_ms is not None:
            held[entry.msg_id] = entry
    heap = []
    for deadline, msg_id in zip(at_ms, msg_ids, strict=True):
        found = held.get(msg_id)
        if found is None:  # gone: skipped when it comes up, as the original was
            found = Entry(msg_id, None, 0, deadline, 0)
            found.live = False
        heap.append((deadline, msg_id, found))
    return heap


def _column(typecode: str, data: object) -> array[int]:
    values = array(typecode)
    values.frombytes(data)  # type: ignore[arg-type]
    return values


# --- replies remembered per sender -----------------------------------------------------------


def _reply_record(reply: object) -> _Reply:
    kind = type(reply)
    if reply is None or kind is bool or kind is int:
        return cast("_Reply", reply)
    if kind is Rejected:
        return _Rejected()
    if kind is Got:
        got = cast("Got", reply)
        return _Got(_columns([got.entry]), got.remaining)
    if kind is Refused:
        return _Refused(error_fields(cast("Refused", reply).error))
    raise TypeError(f"a queue machine's reply {reply!r} has no snapshot form")


def _reply(record: _Reply) -> object:
    kind = type(record)
    if kind is _Rejected:
        return Rejected()
    if kind is _Got:
        got = cast("_Got", record)
        return Got(_entries(got.entry)[0], got.remaining)
    if kind is _Refused:
        error = error_from_fields(cast("_Refused", record).error)
        assert isinstance(error, SoftError), "a queue machine refuses with channel errors"
        return Refused(error)
    return record


# --- what earlier releases wrote (point 4) ---------------------------------------------------


def _legacy(loaded: object) -> QueueMachine:
    if isinstance(loaded, QueueMachine):
        return loaded  # machine version 1: the machine itself
    _version, state = cast("tuple[int, tuple[Any, ...]]", loaded)
    plain, levels, unacked, waiting, out, deadlines = state
    machine = QueueMachine(**plain)
    _place(
        machine,
        [(_legacy_entries(ready), _legacy_entries(returned)) for ready, returned in levels],
        zip(_legacy_entries(unacked[0]), unacked[1], strict=True),
        _dead_letters(_legacy_entries(waiting[0]), waiting[1]),
        _dead_letters(_legacy_entries(out[0]), out[1]),
        deadlines,  # two arrays
    )
    return machine


def _legacy_entries(columns: list[object]) -> list[Entry]:
    """Version 2's columns: arrays pickled as buffers in the machine's byte order, the
    messages a list when not all ints."""
    return _rows(
        [
            column if isinstance(column, list) else _column(typecode, column)
            for typecode, column in zip(_COLUMNS.values(), columns, strict=True)
        ]
    )
