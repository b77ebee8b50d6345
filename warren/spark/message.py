"""One AMQP message as one Spark row, both ways.

Theory of operation:
1. `SCHEMA` is the row a reader produces: the body, where the message came from, the
   AMQP 0-9-1 basic properties (spec section 1.8, class basic), `headers` as a map of strings,
   `x_death` as typed structs (RabbitMQ's dead-lettering doc, "Dead-Lettered Messages") and
   the `queue` it was read from.
2. `record_batch` turns delivered messages (`Deliveries`: the consumer parses them into
   columns, properties still raw bytes) straight into one Arrow record batch, column by
   column. Properties are decoded once per distinct byte string in the batch
   (`property_values`) into a small table, whose columns Arrow repeats row by row by index
   (`take`): no Python object is made per message for them (building the 14 property
   columns from Python values for every row took 2.2 us of CPU per message alike in their
   properties, this takes 0.4 us). When the batch holds one distinct string (one queue's
   traffic, the common case), each column is that value repeated, built from buffers
   (`_constant`; a column of nulls is `pa.nulls`): `take` cost about 0.1 us a row for each
   of the 17 such columns, nulls included. Header values that are not strings become JSON
   (`{"a": 1}`, `5`, `true`); timestamps become aware UTC datetimes so no local time zone
   leaks in. Columns are made from buffers (`_column`): bodies joined with their offsets,
   strings, integers and flags through numpy, a column of nothing as nulls. `pa.array` on
   Python values makes pyarrow import pandas first (0.3-0.5 s of the planner's CPU in every
   query's first micro-batch, where it delayed the batch); only values buffers cannot carry
   simply (header maps, `x_death`, timestamps) still go through it, and then pay it.
3. `outgoing_of` turns a row (any subset of `SCHEMA`'s columns, `body` required) into what a
   publisher sends, properties encoded. Header values are sent as strings: the map type
   cannot say which were numbers, so types other than strings do not survive a round trip,
   except `x-death`, which is rebuilt from the typed `x_death` column with RabbitMQ's wire
   types (`count` a long, `time` a timestamp) so a replayed message keeps its history. An
   optional `cc` column (array of strings) becomes the `CC` header (RabbitMQ's
   sender-selected distribution). A row without a `delivery_mode` is sent with the writer's
   default (persistent unless told otherwise).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from warren.amqp.content import decode_properties, shortstr
from warren.amqp.table import Typed, encode_table

_FLAGS = struct.Struct(">H")
_LONGLONG = struct.Struct(">Q")

X_DEATH_TYPE = (
    "array<struct<queue: string, reason: string, count: bigint, exchange: string, "
    "routing_keys: array<string>, time: timestamp, original_expiration: string>>"
)

SCHEMA = (
    "body binary, exchange string, routing_key string, redelivered boolean, "
    "content_type string, content_encoding string, delivery_mode int, priority int, "
    "correlation_id string, reply_to string, expiration string, message_id string, "
    "timestamp timestamp, type string, user_id string, app_id string, "
    f"headers map<string, string>, x_death {X_DEATH_TYPE}, queue string"
)

PERSISTENT, TRANSIENT = 2, 1  # delivery modes


def _json_default(value: object) -> object:
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__} in a header")


def _from_spark(moment: datetime.datetime) -> datetime.datetime:
    """Timestamps from Spark in UTC: Arrow hands them over aware, in the session's time zone;
    a naive one (a row built by hand) is taken as local time."""
    return moment.astimezone(datetime.UTC)


def header_text(value: object) -> str:
    """A header value as the `headers` map shows it: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return json.dumps(value, default=_json_default, sort_keys=True)


def _x_death(headers: Mapping[str, Any]) -> list[tuple[Any, ...]] | None:
    deaths = headers.get("x-death")
    if not isinstance(deaths, list):
        return None
    rows = []
    for death in deaths:
        if not isinstance(death, Mapping):
            continue
        time = death.get("time")
        rows.append(
            (
                death.get("queue"),
                death.get("reason"),
                death.get("count"),
                death.get("exchange"),
                list(death.get("routing-keys") or []),
                time if isinstance(time, datetime.datetime) else None,
                death.get("original-expiration"),
            )
        )
    return rows


def property_values(raw: bytes) -> tuple[Any, ...]:
    """Raw basic properties as the values of `SCHEMA`'s columns `content_type` to `x_death`."""
    properties = decode_properties(raw)
    headers = properties.headers or {}
    timestamp = properties.timestamp
    return (
        properties.content_type,
        properties.content_encoding,
        properties.delivery_mode,
        properties.priority,
        properties.correlation_id,
        properties.reply_to,
        properties.expiration,
        properties.message_id,
        None if timestamp is None else datetime.datetime.fromtimestamp(timestamp, datetime.UTC),
        properties.type,
        properties.user_id,
        properties.app_id,
        {key: header_text(value) for key, value in headers.items()},
        _x_death(headers),
    )


MESSAGE_ID = 7  # the index of `message_id` in `property_values`


@dataclasses.dataclass(slots=True)
class Deliveries:
    """Delivered messages column by column, in arrival order, their properties still raw:
    what a consumer parses (`warren.spark.wire`) and a record batch is made of (rule 2)."""

    queues: list[str] = dataclasses.field(default_factory=list)  # the consumer tag
    delivery_tags: list[int] = dataclasses.field(default_factory=list)
    redelivered: list[bool] = dataclasses.field(default_factory=list)
    exchanges: list[str] = dataclasses.field(default_factory=list)
    routing_keys: list[str] = dataclasses.field(default_factory=list)
    properties: list[bytes] = dataclasses.field(default_factory=list)
    bodies: list[bytes] = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.delivery_tags)

    def columns(self) -> tuple[list[Any], ...]:
        return (
            self.queues,
            self.delivery_tags,
            self.redelivered,
            self.exchanges,
            self.routing_keys,
            self.properties,
            self.bodies,
        )

    def append(
        self,
        queue: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        properties: bytes,
        body: bytes,
    ) -> None:
        fields = (queue, delivery_tag, redelivered, exchange, routing_key, properties, body)
        for column, value in zip(self.columns(), fields, strict=True):
            column.append(value)

    def extend(self, other: Deliveries) -> None:
        for column, more in zip(self.columns(), other.columns(), strict=True):
            column.extend(more)

    def sliced(self, start: int, stop: int) -> Deliveries:
        return Deliveries(*(column[start:stop] for column in self.columns()))


_OFFSET_MAX = (1 << 31) - 1  # binary and string arrays have 32-bit offsets


def _buffers(kind: pa.DataType, count: int, *buffers: Any) -> pa.Array:
    return pa.Array.from_buffers(kind, count, [None, *(pa.py_buffer(buffer) for buffer in buffers)])


def _column(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
    """`values` as an Arrow array of `kind`, from buffers where the values allow (rule 2),
    else through `pa.array`."""
    count, missing = len(values), values.count(None)
    if missing == count:
        return pa.nulls(count, kind)
    if missing:
        return pa.array(values, type=kind)
    return _present(values, kind)


def _present(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
    """`_column` of values none of which is None (a delivery's body and flag always are:
    looking for None costs 0.1 us a row)."""
    count = len(values)
    if kind in (pa.binary(), pa.string()):
        data = values if kind == pa.binary() else [value.encode() for value in values]
        offsets = np.zeros(count + 1, np.int64)
        np.cumsum(np.fromiter(map(len, data), np.int64, count), out=offsets[1:])
        if offsets[-1] <= _OFFSET_MAX:
            return _buffers(kind, count, offsets.astype(np.int32), b"".join(data))
    elif kind == pa.int32():
        return _buffers(kind, count, np.array(values, np.int32))
    elif kind == pa.bool_():
        return _buffers(kind, count, np.packbits(np.array(values, bool), bitorder="little"))
    elif isinstance(kind, pa.MapType) and not any(values):  # every map empty
        offsets = _buffers(pa.int32(), count + 1, np.zeros(count + 1, np.int32))
        return pa.MapArray.from_arrays(
            offsets, pa.nulls(0, kind.key_type), pa.nulls(0, kind.item_type), type=kind
        )
    return pa.array(values, type=kind)


def _by_distinct(values: Sequence[Any]) -> tuple[list[Any], pa.Array | None]:
    """The distinct values, in order of first appearance, and each value's index in them
    (as an Arrow int32 array, for `take`); None instead of the indexes when there is one."""
    if values.count(values[0]) == len(values):  # the common case, at C speed
        return [values[0]], None
    distinct = list(dict.fromkeys(values))
    index = {value: at for at, value in enumerate(distinct)}
    rows = np.fromiter(map(index.__getitem__, values), np.int32, len(values))
    return distinct, _buffers(pa.int32(), len(values), rows)


def _constant(value: Any, kind: pa.DataType, count: int) -> pa.Array:
    """`count` rows of one value, from buffers where the value allows (rule 2): `take` by
    index costs about 0.1 us a row even for nulls, for each of a batch's 17 such columns."""
    if value is None:
        return pa.nulls(count, kind)
    if kind in (pa.binary(), pa.string()):
        data = value if kind == pa.binary() else value.encode()
        if len(data) * count <= _OFFSET_MAX:
            offsets = np.arange(count + 1, dtype=np.int32) * np.int32(len(data))
            return _buffers(kind, count, offsets, data * count)
    elif kind == pa.int32():
        return _buffers(kind, count, np.full(count, value, np.int32))
    elif isinstance(kind, pa.MapType) and not value:
        return _present([value] * count, kind)
    return _column([value], kind).take(_buffers(pa.int32(), count, np.zeros(count, np.int32)))


def _by_index(
    distinct: list[Any], rows: pa.Array | None, kind: pa.DataType, count: int
) -> pa.Array:
    """The `count` rows whose row i is `distinct[rows[i]]` (what `_by_distinct` returned)."""
    if rows is None:
        return _constant(distinct[0], kind, count)
    if distinct.count(None) == len(distinct):
        return pa.nulls(count, kind)
    return _column(distinct, kind).take(rows)


def _repeated(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
    """A column of few distinct values (an exchange, a routing key, a queue): those, taken
    by index."""
    return _by_index(*_by_distinct(values), kind, len(values))


def record_batch(messages: Deliveries, schema: pa.Schema) -> pa.RecordBatch:
    """Delivered messages as one record batch with `schema` (`SCHEMA` in Arrow's types)."""
    if not messages:
        return pa.RecordBatch.from_arrays(
            [pa.nulls(0, field.type) for field in schema], schema=schema
        )
    # rule 2: each distinct property string becomes a row of a small table, taken by index
    distinct, rows = _by_distinct(messages.properties)
    property_fields = list(schema)[4:-1]
    decoded = zip(*[property_values(raw) for raw in distinct], strict=True)
    properties = [
        _by_index(list(values), rows, field.type, len(messages))
        for values, field in zip(decoded, property_fields, strict=True)
    ]
    arrays = [
        _present(messages.bodies, schema.field("body").type),
        _repeated(messages.exchanges, pa.string()),
        _repeated(messages.routing_keys, pa.string()),
        _present(messages.redelivered, pa.bool_()),
        *properties,
        _repeated(messages.queues, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclasses.dataclass(frozen=True, slots=True)
class Outgoing:
    """What one publish sends."""

    exchange: str
    routing_key: str
    body: bytes
    properties: bytes  # encoded (flags and list)
    message_id: str | None  # for error messages


def _death_table(death: Mapping[str, Any]) -> dict[str, Any]:
    count = death["count"]
    table: dict[str, Any] = {
        "queue": death["queue"],
        "reason": death["reason"],
        "count": None if count is None else Typed("l", count),
        "exchange": death["exchange"],
        "routing-keys": list(death["routing_keys"] or []),
    }
    if death["time"] is not None:
        table["time"] = Typed("T", _from_spark(death["time"]))
    if death["original_expiration"] is not None:
        table["original-expiration"] = death["original_expiration"]
    return {key: value for key, value in table.items() if value is not None}


def _headers(row: Mapping[str, Any]) -> dict[str, Any] | None:
    headers: dict[str, Any] = dict(row.get("headers") or {})
    # The map holds x-death as JSON text; only the typed column can rebuild it.
    headers.pop("x-death", None)
    deaths: Sequence[Mapping[str, Any]] | None = row.get("x_death")
    if deaths:
        headers["x-death"] = [_death_table(death) for death in deaths]
    if row.get("cc"):
        headers["CC"] = list(row["cc"])
    return headers or None


def _body(body: object) -> bytes:
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    raise ValueError(f"column 'body' must be binary or string, got {type(body).__name__}")


def _timestamp(moment: datetime.datetime) -> bytes:
    return _LONGLONG.pack(int(_from_spark(moment).timestamp()))


def _octet(value: int) -> bytes:
    return bytes((value,))


# The basic properties a row's columns hold, in the spec's order, with their flag bits and
# encoders (`warren.amqp.content` has the same order for `BasicProperties`; encoding straight
# from the row skips building one and is about twice as fast, which the writer needs).
_ENCODED: tuple[tuple[str, int, Callable[[Any], bytes]], ...] = (
    ("content_type", 1 << 15, shortstr),
    ("content_encoding", 1 << 14, shortstr),
    ("headers", 1 << 13, encode_table),
    ("delivery_mode", 1 << 12, _octet),
    ("priority", 1 << 11, _octet),
    ("correlation_id", 1 << 10, shortstr),
    ("reply_to", 1 << 9, shortstr),
    ("expiration", 1 << 8, shortstr),
    ("message_id", 1 << 7, shortstr),
    ("timestamp", 1 << 6, _timestamp),
    ("type", 1 << 5, shortstr),
    ("user_id", 1 << 4, shortstr),
    ("app_id", 1 << 3, shortstr),
)


def outgoing_of(
    row: Mapping[str, Any],
    exchange: str | None,
    routing_key: str | None,
    delivery_mode: int = PERSISTENT,
) -> Outgoing:
    """The publish for one row; `exchange`/`routing_key` (options) win over the columns, and
    `delivery_mode` applies to a row without one of its own."""
    values = dict(row)
    values["headers"] = _headers(row)
    if values.get("delivery_mode") is None:
        values["delivery_mode"] = delivery_mode
    flags, parts = 0, []
    for name, flag, encode in _ENCODED:
        value = values.get(name)
        if value is not None:
            flags |= flag
            parts.append(encode(value))
    return Outgoing(
        exchange=exchange if exchange is not None else row.get("exchange") or "",
        routing_key=routing_key if routing_key is not None else row.get("routing_key") or "",
        body=_body(row.get("body")),
        properties=_FLAGS.pack(flags) + b"".join(parts),
        message_id=values.get("message_id"),
    )


def body_preview(body: bytes, limit: int = 40) -> str:
    """A short printable form of a body for error messages and reports."""
    text = body[:limit].decode("utf-8", errors="replace")
    if len(body) > limit:
        text += "..."
    return text if text.isprintable() else base64.b64encode(body[:limit]).decode()
