"""The records a durable classic queue writes to the log, and the fold that recovers queues.

Theory of operation:
1. A durable classic queue writes six kinds of record (see `journal.py` for when):
   `Enqueued` (a persistent message arrived, with everything needed to rebuild it),
   `EnqueuedRun` (several that arrived one after the other for one queue, in one record:
   written as a log span, each message taking one of its sequence numbers, in order),
   `Delivered` (messages went to a consumer or basic.get for the first time, so that after a
   restart they come back with ``redelivered`` set), `Settled` (messages are gone: acked,
   dropped, expired or dead-lettered), `Purged` (queue.purge: everything enqueued so far is
   gone except the listed unacked messages, which RabbitMQ keeps), `QueueDeleted`.
2. Encoding is `struct`, little-endian, no pickle or JSON: byte 0 is the family (``C`` for
   classic queue records, so that other subsystems can share the node's log), byte 1 the
   record format version, byte 2 the kind: version 1 has the first five kinds, version 2
   (`RUN_RECORD_VERSION`) adds `EnqueuedRun`, which only it may carry; a reader from
   before refuses it by its version. Strings are UTF-8 with ``surrogateescape`` (as
   the AMQP codec decodes shortstrs), so any byte string survives. An `Enqueued` keeps the
   exchange and routing key as the two shortstrs that end basic.deliver, so the broker can
   hand over ``Message.route`` as it is (`encode_run_entry`). An `EnqueuedRun` is the queue
   key once, then per message the fields of an `Enqueued` with the body's length, the
   route, the properties and the body (`encode_run_start`, `encode_run_entry`). `decode`
   accepts any bytes: it returns a record or raises `RecordFormatError`, nothing else.
3. `recover` folds (sequence number, payload) pairs in log order into the live messages of
   every queue, in msg_id order. Its meaning, per queue key, for any sequence of records:
   - `QueueDeleted` forgets everything of that key before it (a key may be reused).
   - A *kill* of a msg_id is a `Settled` naming it, or a `Purged` not keeping it.
   - A message is live if an `Enqueued` for it comes after its last kill. Its fields and
     `sequence` are those of the last such `Enqueued` (a compaction copy, when the original
     survived a crash in the middle of compaction, is the same message again).
   - It is redelivered if a `Delivered` names it after its last kill — before or after the
     `Enqueued`, because compaction may move an `Enqueued` past its `Delivered`.
   An `EnqueuedRun` at sequence number S is its messages' `Enqueued` records at S, S+1 …
   Records of other families are skipped; an undecodable classic queue record is an error
   (`on_undecodable` may choose to skip it instead).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

__all__ = [
    "FAMILY",
    "RECORD_VERSION",
    "Contents",
    "Delivered",
    "Enqueued",
    "EnqueuedRun",
    "Purged",
    "QueueDeleted",
    "QueueRecord",
    "RecordFormatError",
    "RecoveredMessage",
    "Settled",
    "decode",
    "decode_contents",
    "decode_messages",
    "encode",
    "encode_delivered",
    "encode_run_entry",
    "encode_run_start",
    "encode_settled",
    "is_queue_record",
    "recover",
]

FAMILY: Final = 0x43  # "C": classic queue records
RECORD_VERSION: Final = 1
RUN_RECORD_VERSION: Final = 2  # the version that added `EnqueuedRun`

_KIND_ENQUEUED: Final = 1
_KIND_SETTLED: Final = 2
_KIND_DELIVERED: Final = 3
_KIND_PURGED: Final = 4
_KIND_QUEUE_DELETED: Final = 5
_KIND_ENQUEUED_RUN: Final = 6

_PREFIX: Final = struct.Struct("<BBBH")  # family, version, kind, queue key length
# msg_id, enqueued_at_ms, expires_at_ms, has_expiry, priority, properties length; then the
# route (exchange and routing key as two AMQP shortstrs, as basic.deliver ends), the
# properties, and the body, which is the rest of the record
_ENQUEUED: Final = struct.Struct("<QqqBBI")
# an `EnqueuedRun`'s message: an `Enqueued`'s fields and the body's length, then the route,
# the properties and the body
_RUN_ENTRY: Final = struct.Struct("<QqqBBII")
_COUNT: Final = struct.Struct("<I")
_MSG_ID_MAX: Final = 2**64 - 1
_MSG_IDS_MAX: Final = 2**32 - 1
_TEXT: Final = "surrogateescape"
_T = TypeVar("_T")


class RecordFormatError(ValueError):
    """Bytes that are not a valid classic queue record."""


@dataclass(frozen=True, slots=True)
class Enqueued:
    queue_key: str
    msg_id: int
    enqueued_at_ms: int
    expires_at_ms: int | None
    priority: int
    exchange: str
    routing_key: str
    properties_raw: bytes
    body: bytes


@dataclass(frozen=True, slots=True)
class EnqueuedRun:
    """Messages of one queue that arrived one after the other, in one record."""

    queue_key: str
    messages: tuple[Enqueued, ...]


@dataclass(frozen=True, slots=True)
class Settled:
    """Acked, dropped, expired or dead-lettered: the messages are gone."""

    queue_key: str
    msg_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Delivered:
    """Handed to a consumer (or basic.get) for the first time."""

    queue_key: str
    msg_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Purged:
    """Every message enqueued before this is gone, except `kept_msg_ids` (unacked ones)."""

    queue_key: str
    kept_msg_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueDeleted:
    queue_key: str


QueueRecord = Enqueued | EnqueuedRun | Settled | Delivered | Purged | QueueDeleted


@dataclass(frozen=True, slots=True)
class RecoveredMessage:
    message: Enqueued  # without route, properties and body when recovered without contents
    redelivered: bool
    sequence: int  # the log record that holds it now
    body_size_bytes: int

    @property
    def msg_id(self) -> int:
        return self.message.msg_id


# --- encoding ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _key(kind: int, queue_key: str, version: int = RECORD_VERSION) -> bytes:
    raw = queue_key.encode("utf-8", _TEXT)
    if len(raw) > 0xFFFF:
        raise ValueError(f"queue key of {len(raw)} bytes is longer than 65535")
    return _PREFIX.pack(FAMILY, version, kind, len(raw)) + raw


def _ids(msg_ids: Sequence[int]) -> bytes:
    count = len(msg_ids)
    if count > _MSG_IDS_MAX:
        raise ValueError("too many msg_ids in one record")
    try:
        return struct.pack(f"<I{count}Q", count, *msg_ids)
    except struct.error as error:
        raise ValueError(f"msg_id out of range: {error}") from None


def encode_settled(queue_key: str, msg_ids: Sequence[int]) -> bytes:
    """`encode(Settled(queue_key, msg_ids))` without building the record."""
    return _key(_KIND_SETTLED, queue_key) + _ids(msg_ids)


def encode_delivered(queue_key: str, msg_ids: Sequence[int]) -> bytes:
    """`encode(Delivered(queue_key, msg_ids))` without building the record."""
    return _key(_KIND_DELIVERED, queue_key) + _ids(msg_ids)


def _shortstr(text: str, what: str) -> bytes:
    raw = text.encode("utf-8", _TEXT)
    if len(raw) > 255:
        raise ValueError(f"{what} of {len(raw)} bytes is longer than 255")
    return bytes((len(raw),)) + raw


def encode(record: QueueRecord) -> bytes:
    """The record's bytes. Raises ValueError for values out of the format's range."""
    if type(record) is Enqueued:
        return _encode_enqueued(record)
    if type(record) is EnqueuedRun:
        return encode_run_start(record.queue_key) + b"".join(
            encode_run_entry(
                message.msg_id,
                message.enqueued_at_ms,
                message.expires_at_ms,
                message.priority,
                encode_route(message.exchange, message.routing_key),
                message.properties_raw,
                message.body,
            )
            for message in record.messages
        )
    if type(record) is Settled:
        return encode_settled(record.queue_key, record.msg_ids)
    if type(record) is Delivered:
        return encode_delivered(record.queue_key, record.msg_ids)
    if type(record) is Purged:
        return _key(_KIND_PURGED, record.queue_key) + _ids(record.kept_msg_ids)
    if type(record) is QueueDeleted:
        return _key(_KIND_QUEUE_DELETED, record.queue_key)
    raise TypeError(f"not a queue record: {record!r}")


def encode_route(exchange: str, routing_key: str) -> bytes:
    """An `Enqueued` record's route: the exchange and routing key as two shortstrs."""
    return _shortstr(exchange, "exchange name") + _shortstr(routing_key, "routing key")


def _encode_enqueued(record: Enqueued) -> bytes:
    try:
        fixed = _ENQUEUED.pack(
            record.msg_id,
            record.enqueued_at_ms,
            0 if record.expires_at_ms is None else record.expires_at_ms,
            record.expires_at_ms is not None,
            record.priority,
            len(record.properties_raw),
        )
    except struct.error as error:
        raise ValueError(f"enqueued record out of range: {error}") from None
    route = encode_route(record.exchange, record.routing_key)
    return b"".join(
        (_enqueued_key(record.queue_key), fixed, route, record.properties_raw, record.body)
    )


@functools.lru_cache(maxsize=4096)
def _enqueued_key(queue_key: str) -> bytes:
    """An `Enqueued` record's start for one queue: the same bytes for all its messages."""
    return _key(_KIND_ENQUEUED, queue_key)


def _check_route(route: bytes) -> None:
    try:  # two shortstrs and nothing else
        exchange_length = route[0]
        two_shortstrs = len(route) == 2 + exchange_length + route[1 + exchange_length]
    except IndexError:
        two_shortstrs = False
    if not two_shortstrs:
        raise ValueError("route is not two shortstrs")


@functools.lru_cache(maxsize=4096)
def encode_run_start(queue_key: str) -> bytes:
    """An `EnqueuedRun` record's start for one queue, which its messages follow."""
    return _key(_KIND_ENQUEUED_RUN, queue_key, RUN_RECORD_VERSION)


def encode_run_entry(
    msg_id: int,
    enqueued_at_ms: int,
    expires_at_ms: int | None,
    priority: int,
    route: bytes,
    properties_raw: bytes,
    body: bytes,
) -> bytes:
    """One message of an `EnqueuedRun`, from the fields the broker holds, without building
    an `Enqueued`: `route` is the exchange and routing key as two AMQP shortstrs
    (``Message.route``)."""
    _check_route(route)
    try:
        fixed = _RUN_ENTRY.pack(
            msg_id,
            enqueued_at_ms,
            0 if expires_at_ms is None else expires_at_ms,
            expires_at_ms is not None,
            priority,
            len(properties_raw),
            len(body),
        )
    except struct.error as error:
        raise ValueError(f"enqueued record out of range: {error}") from None
    return b"".join((fixed, route, properties_raw, body))


# --- decoding ------------------------------------------------------------------------------


def is_queue_record(payload: bytes) -> bool:
    """Whether a log record belongs to the classic queue family (it may still be invalid)."""
    return len(payload) > 0 and payload[0] == FAMILY


def decode(payload: bytes) -> QueueRecord:
    """The record in `payload`; `RecordFormatError` if it is not a valid one."""
    return _decode(payload, True)[0]


def decode_messages(payload: bytes) -> tuple[Enqueued, ...]:
    """The messages of an `Enqueued` or `EnqueuedRun` record; `RecordFormatError` if it is
    another record or not a valid one."""
    record = decode(payload)
    if type(record) is Enqueued:
        return (record,)
    if type(record) is EnqueuedRun:
        return record.messages
    raise RecordFormatError(f"a {type(record).__name__} record holds no message")


def _decode(payload: bytes, contents: bool) -> tuple[QueueRecord, int]:
    """The record and, for an `Enqueued`, its body size. Without `contents` an `Enqueued`
    comes back without route, properties and body (what recovery can leave in the log)."""
    return _decode_fields(payload, *_decode_prefix(payload), contents)


def _decode_fields(
    payload: bytes, kind: int, offset: int, queue_key: str, contents: bool
) -> tuple[QueueRecord, int]:
    """`_decode` after the prefix."""
    if kind == _KIND_ENQUEUED:
        return _decode_enqueued(payload, offset, queue_key, contents)
    if kind == _KIND_ENQUEUED_RUN:
        messages = _decode_run(payload, offset, queue_key, contents)
        return EnqueuedRun(queue_key, tuple(message for message, _size in messages)), 0
    if kind == _KIND_QUEUE_DELETED:
        if offset != len(payload):
            raise RecordFormatError("trailing bytes after a queue-deleted record")
        return QueueDeleted(queue_key), 0
    msg_ids = _decode_ids(payload, offset)
    if kind == _KIND_SETTLED:
        return Settled(queue_key, msg_ids), 0
    if kind == _KIND_DELIVERED:
        return Delivered(queue_key, msg_ids), 0
    return Purged(queue_key, msg_ids), 0


def _decode_prefix(payload: bytes) -> tuple[int, int, str]:
    """A record's kind (one its version has), where its fields start, its queue key."""
    if len(payload) < _PREFIX.size:
        raise RecordFormatError(f"record of {len(payload)} bytes is too short")
    family, version, kind, key_length = _PREFIX.unpack_from(payload, 0)
    if family != FAMILY:
        raise RecordFormatError(f"record family {family} is not a classic queue record")
    if version not in (RECORD_VERSION, RUN_RECORD_VERSION):
        raise RecordFormatError(f"record version {version} is not supported")
    if (kind == _KIND_ENQUEUED_RUN) != (version == RUN_RECORD_VERSION):
        raise RecordFormatError(f"record kind {kind} is not one of version {version}")
    if not _KIND_ENQUEUED <= kind <= _KIND_ENQUEUED_RUN:
        raise RecordFormatError(f"unknown record kind {kind}")
    offset = _PREFIX.size + key_length
    if offset > len(payload):
        raise RecordFormatError("queue key runs past the end of the record")
    return kind, offset, bytes(payload[_PREFIX.size : offset]).decode("utf-8", _TEXT)


def _decode_ids(payload: bytes, offset: int) -> tuple[int, ...]:
    if offset + _COUNT.size > len(payload):
        raise RecordFormatError("msg_id count runs past the end of the record")
    (count,) = _COUNT.unpack_from(payload, offset)
    offset += _COUNT.size
    if offset + 8 * count != len(payload):
        raise RecordFormatError(f"{count} msg_ids do not fill the rest of the record")
    return struct.unpack_from(f"<{count}Q", payload, offset)


# A message's fixed fields: msg_id, enqueued_at_ms, expires_at_ms, has_expiry, priority
_Fields = tuple[int, int, int, int, int]
# what `_enqueued` and `_run` make of one message, and where it ends in the payload:
# (payload, fields, where its route starts, properties length, body size or -1)
_Make = Callable[[bytes, _Fields, int, int, int], tuple[_T, int]]


def _enqueued(payload: bytes, offset: int, make: _Make[_T]) -> _T:
    """An `Enqueued` record's message from `offset` (where its queue key ends), as `make`
    makes it."""
    if offset + _ENQUEUED.size + 2 > len(payload):
        raise RecordFormatError("enqueued record is too short")
    msg_id, enqueued_at_ms, expires_at_ms, has_expiry, priority, properties_length = (
        _ENQUEUED.unpack_from(payload, offset)
    )
    fields = (msg_id, enqueued_at_ms, expires_at_ms, has_expiry, priority)
    # the body is the rest of the record
    return make(payload, fields, offset + _ENQUEUED.size, properties_length, -1)[0]


def _run(payload: bytes, offset: int, make: _Make[_T]) -> list[_T]:
    """An `EnqueuedRun`'s messages from `offset` (where its queue key ends), as `make`
    makes them."""
    end = len(payload)
    messages: list[_T] = []
    # Every message takes more than its fixed fields, so this bounds the loop.
    for _ in range(end // _RUN_ENTRY.size + 1):
        if offset == end:
            break
        if offset + _RUN_ENTRY.size + 2 > end:
            raise RecordFormatError("enqueued run record is too short")
        msg_id, enqueued_at_ms, expires_at_ms, has_expiry, priority, properties_length, size = (
            _RUN_ENTRY.unpack_from(payload, offset)
        )
        fields = (msg_id, enqueued_at_ms, expires_at_ms, has_expiry, priority)
        message, offset = make(payload, fields, offset + _RUN_ENTRY.size, properties_length, size)
        messages.append(message)
    if not messages:
        raise RecordFormatError("enqueued run record holds no message")
    return messages


def _bounds(
    payload: bytes, fields: _Fields, start: int, properties_length: int, size: int
) -> tuple[int, int, int]:
    """Where a message's route (from `start`), properties and body (of `size` bytes, -1:
    the rest of the payload) end; `RecordFormatError` if they do not fit the record or
    its expiry flag is not one."""
    _msg_id, _enqueued_at_ms, expires_at_ms, has_expiry, _priority = fields
    if has_expiry > 1 or (not has_expiry and expires_at_ms != 0):
        raise RecordFormatError("enqueued record has an invalid expiry flag")
    end = len(payload)
    exchange_end = start + 1 + payload[start]
    if exchange_end >= end:
        raise RecordFormatError("enqueued record fields run past its end")
    routing_key_end = exchange_end + 1 + payload[exchange_end]
    properties_end = routing_key_end + properties_length
    body_end = end if size < 0 else properties_end + size
    if properties_end > end or body_end > end:
        raise RecordFormatError("enqueued record fields run past its end")
    return routing_key_end, properties_end, body_end


def _decode_enqueued(
    payload: bytes, offset: int, queue_key: str, contents: bool
) -> tuple[Enqueued, int]:
    """An `Enqueued` record's message and its body size."""
    return _enqueued(payload, offset, _whole(queue_key, contents))


def _decode_run(
    payload: bytes, offset: int, queue_key: str, contents: bool
) -> list[tuple[Enqueued, int]]:
    """An `EnqueuedRun`'s messages, each with its body size."""
    return _run(payload, offset, _whole(queue_key, contents))


def _whole(queue_key: str, contents: bool) -> _Make[tuple[Enqueued, int]]:
    """Makes a message of `queue_key` whole (without route, properties and body unless
    `contents`), with its body size."""

    def make(
        payload: bytes, fields: _Fields, start: int, properties_length: int, size: int
    ) -> tuple[tuple[Enqueued, int], int]:
        routing_key_end, properties_end, body_end = _bounds(
            payload, fields, start, properties_length, size
        )
        msg_id, enqueued_at_ms, expires_at_ms, has_expiry, priority = fields
        expiry = expires_at_ms if has_expiry else None
        if not contents:
            message = Enqueued(
                queue_key, msg_id, enqueued_at_ms, expiry, priority, "", "", b"", b""
            )
            return (message, body_end - properties_end), body_end
        exchange, routing_key = _route_names(bytes(payload[start:routing_key_end]))
        message = Enqueued(
            queue_key=queue_key,
            msg_id=msg_id,
            enqueued_at_ms=enqueued_at_ms,
            expires_at_ms=expiry,
            priority=priority,
            exchange=exchange,
            routing_key=routing_key,
            properties_raw=bytes(payload[routing_key_end:properties_end]),
            body=bytes(payload[properties_end:body_end]),
        )
        return (message, body_end - properties_end), body_end

    return make


# exchange, routing key, properties, body, route: a message read back from its record, in the
# order `warren.amqp.content.Message` takes them
Contents = tuple[str, str, bytes, bytes, bytes]


def decode_contents(payload: bytes, queue_key: str) -> dict[int, Contents]:
    """The messages in `payload`, by msg_id, which must be an `Enqueued` or `EnqueuedRun`
    record of `queue_key` (`RecordFormatError` if it is not, or is not valid).

    What reading paged-out messages back needs, and no more (`decode_messages` makes whole
    records): the record's start is compared as bytes rather than decoded, and each route
    is handed over as it is stored, its names decoded once per distinct route.
    """
    key = _enqueued_key(queue_key)
    if payload.startswith(key):
        return dict((_enqueued(payload, len(key), _contents),))
    key = encode_run_start(queue_key)
    if payload.startswith(key):
        return dict(_run(payload, len(key), _contents))
    raise RecordFormatError(f"log record is not an enqueued record of {queue_key!r}")


def _contents(
    payload: bytes, fields: _Fields, start: int, properties_length: int, size: int
) -> tuple[tuple[int, Contents], int]:
    """A message's msg_id and `Contents` (a `_Make`)."""
    routing_key_end, properties_end, body_end = _bounds(
        payload, fields, start, properties_length, size
    )
    route = payload[start:routing_key_end]
    exchange, routing_key = _route_names(route)
    properties = payload[routing_key_end:properties_end]
    body = payload[properties_end:body_end]
    return (fields[0], (exchange, routing_key, properties, body, route)), body_end


@functools.lru_cache(maxsize=4096)
def _route_names(route: bytes) -> tuple[str, str]:
    """The exchange and routing key of a route (two shortstrs, checked by the caller)."""
    exchange_end = 1 + route[0]
    return (
        route[1:exchange_end].decode("utf-8", _TEXT),
        route[exchange_end + 1 :].decode("utf-8", _TEXT),
    )


# --- recovery ------------------------------------------------------------------------------


class _Live:
    __slots__ = ("body_size_bytes", "record", "redelivered", "sequence")

    def __init__(
        self, record: Enqueued, redelivered: bool, sequence: int, body_size_bytes: int
    ) -> None:
        self.record = record
        self.redelivered = redelivered
        self.sequence = sequence
        self.body_size_bytes = body_size_bytes


class _Queue:
    __slots__ = ("delivered_early", "messages")

    def __init__(self) -> None:
        self.messages: dict[int, _Live] = {}
        # Delivered marks seen before the message's Enqueued (moved later by compaction)
        self.delivered_early: set[int] = set()


def recover(
    records: Iterable[tuple[int, bytes]],
    on_undecodable: Callable[[int, RecordFormatError], None] | None = None,
    *,
    contents: bool = True,
) -> dict[str, list[RecoveredMessage]]:
    """Fold log records into the live messages of each queue (queues with none are left out).

    `records` are (sequence number, payload) in log order, as `Log.records` yields them.
    Without `contents` the recovered messages carry no route, properties or body (their
    body sizes are kept), so that a backlog larger than memory can be recovered and its
    messages read from the log later.
    """
    queues: dict[str, _Queue] = {}
    for sequence, payload in records:
        if not is_queue_record(payload):
            continue
        try:
            kind, offset, queue_key = _decode_prefix(payload)
            found: Sequence[tuple[QueueRecord, int]]
            if kind == _KIND_ENQUEUED_RUN:
                found = _decode_run(payload, offset, queue_key, contents)
            else:
                found = [_decode_fields(payload, kind, offset, queue_key, contents)]
        except RecordFormatError as error:
            if on_undecodable is None:
                raise RecordFormatError(f"log record {sequence}: {error}") from None
            on_undecodable(sequence, error)
            continue
        # a run's messages are the records at its sequence number and the ones after it
        for index, (record, size) in enumerate(found):
            _fold(queues, sequence + index, record, size)
    result: dict[str, list[RecoveredMessage]] = {}
    for queue_key in sorted(queues):
        messages = queues[queue_key].messages
        if messages:
            result[queue_key] = [
                RecoveredMessage(live.record, live.redelivered, live.sequence, live.body_size_bytes)
                for _, live in sorted(messages.items())
            ]
    return result


def _fold(queues: dict[str, _Queue], sequence: int, record: QueueRecord, size: int) -> None:
    """Fold one record in; `size` is an `Enqueued` record's body size."""
    if isinstance(record, QueueDeleted):
        queues.pop(record.queue_key, None)
        return
    queue = queues.get(record.queue_key)
    if queue is None:
        queue = queues[record.queue_key] = _Queue()
    messages = queue.messages
    if isinstance(record, Enqueued):
        early = record.msg_id in queue.delivered_early
        if early:
            queue.delivered_early.discard(record.msg_id)
        live = messages.get(record.msg_id)
        if live is None:
            messages[record.msg_id] = _Live(record, early, sequence, size)
        else:
            live.record = record
            live.redelivered = live.redelivered or early
            live.sequence = sequence
            live.body_size_bytes = size
    elif isinstance(record, Delivered):
        for msg_id in record.msg_ids:
            live = messages.get(msg_id)
            if live is None:
                queue.delivered_early.add(msg_id)
            else:
                live.redelivered = True
    elif isinstance(record, Settled):
        for msg_id in record.msg_ids:
            messages.pop(msg_id, None)
            queue.delivered_early.discard(msg_id)
    elif isinstance(record, Purged):
        kept = set(record.kept_msg_ids)
        for msg_id in [i for i in messages if i not in kept]:
            del messages[msg_id]
        queue.delivered_early &= kept
