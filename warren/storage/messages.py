"""The records a durable classic queue writes to the log, and the fold that recovers queues.

Theory of operation:
1. A durable classic queue writes five kinds of record (see `journal.py` for when):
   `Enqueued` (a persistent message arrived, with everything needed to rebuild it),
   `Delivered` (messages went to a consumer or basic.get for the first time, so that after a
   restart they come back with ``redelivered`` set), `Settled` (messages are gone: acked,
   dropped, expired or dead-lettered), `Purged` (queue.purge: everything enqueued so far is
   gone except the listed unacked messages, which RabbitMQ keeps), `QueueDeleted`.
2. Encoding is `struct`, little-endian, no pickle or JSON: byte 0 is the family (``C`` for
   classic queue records, so that other subsystems can share the node's log), byte 1 the
   record format version, byte 2 the kind. Strings are UTF-8 with ``surrogateescape`` (as
   the AMQP codec decodes shortstrs), so any byte string survives. An `Enqueued` keeps the
   exchange and routing key as the two shortstrs that end basic.deliver, so the broker can
   hand over ``Message.route`` as it is (`encode_enqueued`). `decode` accepts any bytes: it
   returns a record or raises `RecordFormatError`, nothing else.
3. `recover` folds (sequence number, payload) pairs in log order into the live messages of
   every queue, in msg_id order. Its meaning, per queue key, for any sequence of records:
   - `QueueDeleted` forgets everything of that key before it (a key may be reused).
   - A *kill* of a msg_id is a `Settled` naming it, or a `Purged` not keeping it.
   - A message is live if an `Enqueued` for it comes after its last kill. Its fields and
     `sequence` are those of the last such `Enqueued` (a compaction copy, when the original
     survived a crash in the middle of compaction, is the same message again).
   - It is redelivered if a `Delivered` names it after its last kill — before or after the
     `Enqueued`, because compaction may move an `Enqueued` past its `Delivered`.
   Records of other families are skipped; an undecodable classic queue record is an error
   (`on_undecodable` may choose to skip it instead).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "FAMILY",
    "RECORD_VERSION",
    "Contents",
    "Delivered",
    "Enqueued",
    "Purged",
    "QueueDeleted",
    "QueueRecord",
    "RecordFormatError",
    "RecoveredMessage",
    "Settled",
    "decode",
    "decode_contents",
    "encode",
    "encode_delivered",
    "encode_enqueued",
    "encode_settled",
    "is_queue_record",
    "recover",
]

FAMILY: Final = 0x43  # "C": classic queue records
RECORD_VERSION: Final = 1

_KIND_ENQUEUED: Final = 1
_KIND_SETTLED: Final = 2
_KIND_DELIVERED: Final = 3
_KIND_PURGED: Final = 4
_KIND_QUEUE_DELETED: Final = 5

_PREFIX: Final = struct.Struct("<BBBH")  # family, version, kind, queue key length
# msg_id, enqueued_at_ms, expires_at_ms, has_expiry, priority, properties length; then the
# route (exchange and routing key as two AMQP shortstrs, as basic.deliver ends), the
# properties, and the body, which is the rest of the record
_ENQUEUED: Final = struct.Struct("<QqqBBI")
_COUNT: Final = struct.Struct("<I")
_MSG_ID_MAX: Final = 2**64 - 1
_MSG_IDS_MAX: Final = 2**32 - 1
_TEXT: Final = "surrogateescape"


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


QueueRecord = Enqueued | Settled | Delivered | Purged | QueueDeleted


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
def _key(kind: int, queue_key: str) -> bytes:
    raw = queue_key.encode("utf-8", _TEXT)
    if len(raw) > 0xFFFF:
        raise ValueError(f"queue key of {len(raw)} bytes is longer than 65535")
    return _PREFIX.pack(FAMILY, RECORD_VERSION, kind, len(raw)) + raw


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
    route = encode_route(record.exchange, record.routing_key)
    return encode_enqueued(
        record.queue_key,
        record.msg_id,
        record.enqueued_at_ms,
        record.expires_at_ms,
        record.priority,
        route,
        record.properties_raw,
        record.body,
    )


@functools.lru_cache(maxsize=4096)
def _enqueued_key(queue_key: str) -> bytes:
    """An `Enqueued` record's start for one queue: the same bytes for all its messages."""
    return _key(_KIND_ENQUEUED, queue_key)


def encode_enqueued(
    queue_key: str,
    msg_id: int,
    enqueued_at_ms: int,
    expires_at_ms: int | None,
    priority: int,
    route: bytes,
    properties_raw: bytes,
    body: bytes,
) -> bytes:
    """An `Enqueued` record from the fields the broker holds, without building one.

    `route` is the exchange and routing key as two AMQP shortstrs (``Message.route``).
    """
    try:  # two shortstrs and nothing else
        exchange_length = route[0]
        two_shortstrs = len(route) == 2 + exchange_length + route[1 + exchange_length]
    except IndexError:
        two_shortstrs = False
    if not two_shortstrs:
        raise ValueError("route is not two shortstrs")
    try:
        fixed = _ENQUEUED.pack(
            msg_id,
            enqueued_at_ms,
            0 if expires_at_ms is None else expires_at_ms,
            expires_at_ms is not None,
            priority,
            len(properties_raw),
        )
    except struct.error as error:
        raise ValueError(f"enqueued record out of range: {error}") from None
    return b"".join((_enqueued_key(queue_key), fixed, route, properties_raw, body))


# --- decoding ------------------------------------------------------------------------------


def is_queue_record(payload: bytes) -> bool:
    """Whether a log record belongs to the classic queue family (it may still be invalid)."""
    return len(payload) > 0 and payload[0] == FAMILY


def decode(payload: bytes) -> QueueRecord:
    """The record in `payload`; `RecordFormatError` if it is not a valid one."""
    return _decode(payload, True)[0]


def _decode(payload: bytes, contents: bool) -> tuple[QueueRecord, int]:
    """The record and, for an `Enqueued`, its body size. Without `contents` an `Enqueued`
    comes back without route, properties and body (what recovery can leave in the log)."""
    if len(payload) < _PREFIX.size:
        raise RecordFormatError(f"record of {len(payload)} bytes is too short")
    family, version, kind, key_length = _PREFIX.unpack_from(payload, 0)
    if family != FAMILY:
        raise RecordFormatError(f"record family {family} is not a classic queue record")
    if version != RECORD_VERSION:
        raise RecordFormatError(f"record version {version} is not supported")
    offset = _PREFIX.size + key_length
    if offset > len(payload):
        raise RecordFormatError("queue key runs past the end of the record")
    queue_key = bytes(payload[_PREFIX.size : offset]).decode("utf-8", _TEXT)
    if kind == _KIND_ENQUEUED:
        return _decode_enqueued(payload, offset, queue_key, contents)
    if kind == _KIND_QUEUE_DELETED:
        if offset != len(payload):
            raise RecordFormatError("trailing bytes after a queue-deleted record")
        return QueueDeleted(queue_key), 0
    if kind in (_KIND_SETTLED, _KIND_DELIVERED, _KIND_PURGED):
        msg_ids = _decode_ids(payload, offset)
        if kind == _KIND_SETTLED:
            return Settled(queue_key, msg_ids), 0
        if kind == _KIND_DELIVERED:
            return Delivered(queue_key, msg_ids), 0
        return Purged(queue_key, msg_ids), 0
    raise RecordFormatError(f"unknown record kind {kind}")


def _decode_ids(payload: bytes, offset: int) -> tuple[int, ...]:
    if offset + _COUNT.size > len(payload):
        raise RecordFormatError("msg_id count runs past the end of the record")
    (count,) = _COUNT.unpack_from(payload, offset)
    offset += _COUNT.size
    if offset + 8 * count != len(payload):
        raise RecordFormatError(f"{count} msg_ids do not fill the rest of the record")
    return struct.unpack_from(f"<{count}Q", payload, offset)


def _enqueued_layout(
    payload: bytes, offset: int
) -> tuple[int, int, int | None, int, int, int, int]:
    """An `Enqueued` record's fixed fields from `offset` (where its queue key ends), and
    where its parts end: (msg_id, enqueued_at_ms, expires_at_ms, priority, exchange_end,
    routing_key_end, properties_end); its route starts at ``offset + _ENQUEUED.size``, its
    body at properties_end. `RecordFormatError` if they do not fit the record."""
    end = len(payload)
    if offset + _ENQUEUED.size + 2 > end:
        raise RecordFormatError("enqueued record is too short")
    msg_id, enqueued_at_ms, expires_at_ms, has_expiry, priority, properties_length = (
        _ENQUEUED.unpack_from(payload, offset)
    )
    if has_expiry > 1 or (not has_expiry and expires_at_ms != 0):
        raise RecordFormatError("enqueued record has an invalid expiry flag")
    exchange_start = offset + _ENQUEUED.size + 1
    exchange_end = exchange_start + payload[exchange_start - 1]
    if exchange_end >= end:
        raise RecordFormatError("enqueued record fields run past its end")
    routing_key_end = exchange_end + 1 + payload[exchange_end]
    properties_end = routing_key_end + properties_length
    if properties_end > end:
        raise RecordFormatError("enqueued record fields run past its end")
    expiry = expires_at_ms if has_expiry else None
    return msg_id, enqueued_at_ms, expiry, priority, exchange_end, routing_key_end, properties_end


def _decode_enqueued(
    payload: bytes, offset: int, queue_key: str, contents: bool
) -> tuple[Enqueued, int]:
    layout = _enqueued_layout(payload, offset)
    msg_id, enqueued_at_ms, expires_at_ms, priority = layout[:4]
    exchange_end, routing_key_end, properties_end = layout[4:]
    exchange_start = offset + _ENQUEUED.size + 1
    size = len(payload) - properties_end
    if not contents:
        fields = (msg_id, enqueued_at_ms, expires_at_ms, priority)
        return Enqueued(queue_key, *fields, "", "", b"", b""), size
    record = Enqueued(
        queue_key=queue_key,
        msg_id=msg_id,
        enqueued_at_ms=enqueued_at_ms,
        expires_at_ms=expires_at_ms,
        priority=priority,
        exchange=bytes(payload[exchange_start:exchange_end]).decode("utf-8", _TEXT),
        routing_key=bytes(payload[exchange_end + 1 : routing_key_end]).decode("utf-8", _TEXT),
        properties_raw=bytes(payload[routing_key_end:properties_end]),
        body=bytes(payload[properties_end:]),
    )
    return record, size


# exchange, routing key, properties, body, route: a message read back from its record, in the
# order `warren.amqp.content.Message` takes them
Contents = tuple[str, str, bytes, bytes, bytes]


def decode_contents(payload: bytes, queue_key: str, msg_id: int) -> Contents:
    """The message in `payload`, which must be the `Enqueued` record of `msg_id` in
    `queue_key` (`RecordFormatError` if it is not, or is not valid).

    What reading a paged-out message back needs, and no more (`decode` makes the whole
    record): the record's start is compared as bytes rather than decoded, and the route is
    handed over as it is stored, its names decoded once per distinct route.
    """
    key = _enqueued_key(queue_key)
    if not payload.startswith(key):
        raise RecordFormatError(f"log record is not an enqueued record of {queue_key!r}")
    found, _, _, _, _, routing_key_end, properties_end = _enqueued_layout(payload, len(key))
    if found != msg_id:
        raise RecordFormatError(f"log record is message {found}, not {msg_id}")
    route_start = len(key) + _ENQUEUED.size
    route = payload[route_start:routing_key_end]
    exchange, routing_key = _route_names(route)
    return (
        exchange,
        routing_key,
        payload[routing_key_end:properties_end],
        payload[properties_end:],
        route,
    )


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
            record, size = _decode(payload, contents)
        except RecordFormatError as error:
            if on_undecodable is None:
                raise RecordFormatError(f"log record {sequence}: {error}") from None
            on_undecodable(sequence, error)
            continue
        _fold(queues, sequence, record, size)
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
    else:
        kept = set(record.kept_msg_ids)
        for msg_id in [i for i in messages if i not in kept]:
            del messages[msg_id]
        queue.delivered_early &= kept
