"""Message content: basic properties, the content header frame, and frames out.

Theory of operation (spec section 4.2.6, "Content Framing"):
1. A message with content travels as one method frame, one content header frame
   (``class_id weight body_size property_flags property_list``) and zero or more body
   frames, each at most frame_max - 8 bytes of body.
2. Properties stay as the raw bytes the publisher sent (``flags + list``) until someone
   needs a field: a message is delivered with exactly the bytes it was published with
   unless the broker changed a property (CC/BCC, x-death). `decode_properties` reads them
   into `BasicProperties`; `encode_properties` writes them back.
3. Builders here return ready-to-write bytes. `deliver_frames` is the hot one: a
   message carries its exchange and routing key pre-encoded (`Message.route`);
   `confirm_frame` packs a publisher confirm in one go, which the method table's generic
   `encode_method` does field by field, interpreted (its classes are not ones mypyc builds).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Final

from warren.amqp.frames import (
    FRAME_BODY,
    FRAME_END,
    FRAME_END_BYTE,
    FRAME_HEADER,
    FRAME_METHOD,
    build_frame,
)
from warren.amqp.methods import BasicAck, BasicNack, Method, encode_method
from warren.amqp.table import FieldTable, TableError, encode_table, read_table
from warren.errors import syntax_error

BASIC_CLASS_ID: Final = 60
_HEADER_PREFIX = struct.Struct(">HHQ")
_SHORT = struct.Struct(">H")
_LONGLONG = struct.Struct(">Q")
_FRAME_START = struct.Struct(">BHI")
_HEADER_START = struct.Struct(">BBHIHHQ")  # a frame's end, a content header frame's start
_BODY_START = struct.Struct(">BBHI")  # a frame's end, a body frame's start


@dataclass(slots=True, init=False)  # its __init__ written out: `warren.queue.Meta`'s docstring
class BasicProperties:
    """The fourteen basic properties, in spec order; None means absent."""

    content_type: str | None = None
    content_encoding: str | None = None
    headers: FieldTable | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None

    def __init__(
        self,
        content_type: str | None = None,
        content_encoding: str | None = None,
        headers: FieldTable | None = None,
        delivery_mode: int | None = None,
        priority: int | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        expiration: str | None = None,
        message_id: str | None = None,
        timestamp: int | None = None,
        type: str | None = None,
        user_id: str | None = None,
        app_id: str | None = None,
        cluster_id: str | None = None,
    ) -> None:
        self.content_type = content_type
        self.content_encoding = content_encoding
        self.headers = headers
        self.delivery_mode = delivery_mode
        self.priority = priority
        self.correlation_id = correlation_id
        self.reply_to = reply_to
        self.expiration = expiration
        self.message_id = message_id
        self.timestamp = timestamp
        self.type = type
        self.user_id = user_id
        self.app_id = app_id
        self.cluster_id = cluster_id


_KINDS: Final = (
    "shortstr",
    "shortstr",
    "table",
    "octet",
    "octet",
    "shortstr",
    "shortstr",
    "shortstr",
    "shortstr",
    "longlong",
    "shortstr",
    "shortstr",
    "shortstr",
    "shortstr",
)
_NAMES: Final = tuple(f.name for f in fields(BasicProperties))
HEADERS_FLAG: Final = 1 << 13
EXPIRATION_FLAG: Final = 1 << 8
DELIVERY_MODE_FLAG: Final = 1 << 12
PRIORITY_FLAG: Final = 1 << 11
REPLY_TO_FLAG: Final = 1 << 9
USER_ID_FLAG: Final = 1 << 4
EMPTY_PROPERTIES: Final = b"\x00\x00"
_UNDEFINED_FLAGS: Final = 0b11


def parse_content_header(payload: bytes) -> tuple[int, int, bytes]:
    """Return ``(class_id, body_size, properties_raw)`` of a content header frame."""
    if len(payload) < 14:
        raise syntax_error("content header frame too short")
    class_id, _weight, body_size = _HEADER_PREFIX.unpack_from(payload)
    return class_id, body_size, payload[12:]


def decode_properties(raw: bytes) -> BasicProperties:
    try:
        return _decode_properties(raw)
    except (struct.error, IndexError, TableError) as error:
        raise syntax_error(f"malformed content header properties: {error}") from error


# Per flag word, the properties it announces as (index, kind) pairs, so that decoding
# visits only those (a publisher sets two or three of the fourteen). Bounded: at most 2**14
# flag words pass the undefined-bits check, and a broker meets a handful.
_PLANS: dict[int, tuple[tuple[int, str], ...]] = {}
_EMPTY_TABLE: Final = b"\x00\x00\x00\x00"


def _plan(flags: int) -> tuple[tuple[int, str], ...]:
    plan = tuple((i, kind) for i, kind in enumerate(_KINDS) if flags & (1 << (15 - i)))
    _PLANS[flags] = plan
    return plan


def _decode_properties(raw: bytes) -> BasicProperties:
    (flags,) = _SHORT.unpack_from(raw, 0)
    if flags & _UNDEFINED_FLAGS:
        # basic's 14 properties fit one flag word: bit 0 would announce another (clients
        # such as pamqp then read one), bit 1 is nobody's; a consumer must not get either
        raise IndexError(f"property flags 0x{flags:04x} set bits basic does not define")
    plan = _PLANS.get(flags)
    if plan is None:
        plan = _plan(flags)
    offset = 2
    values: list[object] = [None] * len(_KINDS)
    for index, kind in plan:
        if kind == "shortstr":
            end = offset + 1 + raw[offset]
            if end > len(raw):
                raise IndexError("short string beyond header")
            values[index] = raw[offset + 1 : end].decode("utf-8", "surrogateescape")
            offset = end
        elif kind == "octet":
            values[index] = raw[offset]
            offset += 1
        elif kind == "longlong":
            values[index] = _LONGLONG.unpack_from(raw, offset)[0]
            offset += 8
        elif raw[offset : offset + 4] == _EMPTY_TABLE:  # what most clients send
            values[index] = {}
            offset += 4
        else:
            values[index], offset = read_table(memoryview(raw), offset)
    if offset != len(raw):
        raise IndexError(f"{len(raw) - offset} bytes after the last property")
    return BasicProperties(*values)  # type: ignore[arg-type]


def encode_properties(properties: BasicProperties) -> bytes:
    flags = 0
    parts: list[bytes] = []
    for index, (name, kind) in enumerate(zip(_NAMES, _KINDS, strict=True)):
        value = getattr(properties, name)
        if value is None:
            continue
        flags |= 1 << (15 - index)
        if kind == "shortstr":
            data = value.encode("utf-8", "surrogateescape")
            parts.append(bytes((len(data),)) + data)
        elif kind == "octet":
            parts.append(bytes((value,)))
        elif kind == "longlong":
            parts.append(_LONGLONG.pack(value))
        else:
            parts.append(encode_table(value))
    return _SHORT.pack(flags) + b"".join(parts)


def property_flags(raw: bytes) -> int:
    return int(_SHORT.unpack_from(raw)[0])


_CONTENT_TYPE_FLAG: Final = 1 << 15
_CONTENT_ENCODING_FLAG: Final = 1 << 14
_LONG_PREFIX: Final = struct.Struct(">I")


PERSISTENT: Final = 2  # the delivery-mode of a persistent message


def delivery_mode(raw: bytes) -> int | None:
    """The delivery-mode property of raw properties, without decoding the others.

    It is the fourth property: only content-type, content-encoding and the headers table
    come before it, and each of those says its own length. None when absent or when the
    bytes end early (`decode_properties` is the one that reports malformed properties).
    """
    if len(raw) < 3:
        return None
    flags = (raw[0] << 8) | raw[1]
    if not flags & DELIVERY_MODE_FLAG:
        return None
    offset = 2
    try:
        if flags & _CONTENT_TYPE_FLAG:
            offset += 1 + raw[offset]
        if flags & _CONTENT_ENCODING_FLAG:
            offset += 1 + raw[offset]
        if flags & HEADERS_FLAG:
            offset += 4 + _LONG_PREFIX.unpack_from(raw, offset)[0]
        return raw[offset]
    except (IndexError, struct.error):
        return None


def method_frame(channel: int, method: Method) -> bytes:
    return build_frame(FRAME_METHOD, channel, encode_method(method))


# a method frame's start, basic.ack's (or basic.nack's) ids, tag and flags, the frame's end
_CONFIRM = struct.Struct(">BHIHHQBB")
_CONFIRM_SIZE: Final = _CONFIRM.size - 8  # the payload: the frame's start and end are 8
_BASIC: Final = BasicAck.CLASS_ID
_BASIC_ACK: Final = BasicAck.METHOD_ID
_BASIC_NACK: Final = BasicNack.METHOD_ID


def confirm_frame(channel: int, confirm: Method) -> bytes:
    """A publisher confirm: a basic.ack, or a basic.nack (flags multiple, then requeue)."""
    if type(confirm) is BasicAck:
        method, flags = _BASIC_ACK, int(confirm.multiple)
    else:
        assert type(confirm) is BasicNack
        method, flags = _BASIC_NACK, int(confirm.multiple) | int(confirm.requeue) << 1
    return _CONFIRM.pack(
        FRAME_METHOD, channel, _CONFIRM_SIZE, _BASIC, method, confirm.delivery_tag, flags, FRAME_END
    )


def content_frames(
    channel: int, method_payload: bytes, properties_raw: bytes, body: bytes, frame_max: int
) -> bytes:
    """Method, content header and body frames of one message, as one bytes object."""
    size = len(body)
    # the method frame's end octet, then the header frame's start and the header's prefix
    header = _HEADER_START.pack(
        FRAME_END, FRAME_HEADER, channel, 12 + len(properties_raw), BASIC_CLASS_ID, 0, size
    )
    method = _FRAME_START.pack(FRAME_METHOD, channel, len(method_payload))
    chunk = frame_max - 8
    if size <= chunk:  # one body frame, or none: the commonest message in one join
        if not size:
            return b"".join((method, method_payload, header, properties_raw, FRAME_END_BYTE))
        body_start = _BODY_START.pack(FRAME_END, FRAME_BODY, channel, size)
        parts = (method, method_payload, header, properties_raw, body_start, body, FRAME_END_BYTE)
        return b"".join(parts)
    pieces = [method, method_payload, header, properties_raw, FRAME_END_BYTE]
    for start in range(0, size, chunk):
        piece = body[start : start + chunk]
        pieces += (_FRAME_START.pack(FRAME_BODY, channel, len(piece)), piece, FRAME_END_BYTE)
    return b"".join(pieces)


def body_frame(channel: int, body: bytes) -> bytes:
    return build_frame(FRAME_BODY, channel, body)


def shortstr(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogateescape")
    return bytes((len(raw),)) + raw


class Message:
    """A published message as the broker keeps it: routing data, raw properties, body."""

    __slots__ = ("_properties", "body", "exchange", "properties_raw", "route", "routing_key")

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        properties_raw: bytes,
        body: bytes,
        route: bytes | None = None,
        properties: BasicProperties | None = None,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties_raw = properties_raw
        self.body = body
        # exchange and routing key as the two shortstrs that end basic.deliver/get-ok/return;
        # a publish hands over the bytes it arrived with
        self.route = route if route is not None else shortstr(exchange) + shortstr(routing_key)
        # `properties_raw` decoded, if the caller has it already (they are equal)
        self._properties = properties

    def __reduce__(self) -> tuple[type[Message], tuple[str, str, bytes, bytes, bytes]]:
        # a replicated queue pickles every message it is sent: its fields as a tuple are a
        # third of the bytes and time of the default for slotted objects (no decoded
        # properties, no slot names)
        return Message, (
            self.exchange,
            self.routing_key,
            self.properties_raw,
            self.body,
            self.route,
        )

    @property
    def properties(self) -> BasicProperties:
        if self._properties is None:
            self._properties = decode_properties(self.properties_raw)
        return self._properties

    @property
    def persistent(self) -> bool:
        """Delivery mode 2: from the properties if the publish decoded them, else read from
        the raw bytes without decoding them."""
        properties = self._properties
        if properties is None:
            return delivery_mode(self.properties_raw) == PERSISTENT
        return properties.delivery_mode == PERSISTENT


def packed_name(name: str) -> str | bytes:
    """A message's exchange or routing key as a MessagePack record holds it (a quorum
    queue's entry, its snapshot, a peer link's frame): the str, or the bytes that came when
    it is not UTF-8. AMQP allows any bytes there and the broker holds such a name with lone
    surrogates (`surrogateescape`), which a MessagePack str cannot carry."""
    if name.isascii():
        return name
    try:
        name.encode()
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape")
    return name


def unpacked_name(held: object) -> str:
    """The name `packed_name` gave, as the broker holds it."""
    if type(held) is str:
        return held
    if type(held) is bytes:
        return held.decode("utf-8", "surrogateescape")
    raise ValueError(f"a message's exchange or routing key is {held!r}")


_DELIVER_ID: Final = b"\x00\x3c\x00\x3c"
_GET_OK_ID: Final = b"\x00\x3c\x00\x47"
_TAG_AND_BIT = struct.Struct(">QB")
_LONG = struct.Struct(">I")


def deliver_frames(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    message: Message,
    frame_max: int,
) -> bytes:
    """basic.deliver with its content; `consumer_tag` is already a shortstr."""
    payload = (
        _DELIVER_ID + consumer_tag + _TAG_AND_BIT.pack(delivery_tag, redelivered) + message.route
    )
    return content_frames(channel, payload, message.properties_raw, message.body, frame_max)


def get_ok_frames(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    message: Message,
    remaining: int,
    frame_max: int,
) -> bytes:
    payload = (
        _GET_OK_ID
        + _TAG_AND_BIT.pack(delivery_tag, redelivered)
        + message.route
        + _LONG.pack(remaining)
    )
    return content_frames(channel, payload, message.properties_raw, message.body, frame_max)
