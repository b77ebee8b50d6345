"""The AMQP 0-9-1 method table: one slotted class per method, encoded from its spec types.

Theory of operation:
1. Methods are slotted value classes, mutable: a frozen dataclass costs four times as much
   to construct, and basic.publish is built for every message. Each method class names its
   spec field types in `SPEC` (``"short shortstr bit bit"``) in the order of its annotated
   fields; `@method(class_id, method_id, spec)` makes the class (an `__init__` taking the
   fields in that order, defaults from the class body, `__slots__`, `__match_args__`) and
   registers it in `METHODS` by ``(class_id, method_id)``. Field names are the spec's names.
2. `@method` is not `dataclasses.dataclass`, on purpose: every process that speaks AMQP
   imports this table, each Spark worker of the pipeline included, and dataclass spent
   30-180 ms making these 64 classes (three generated functions each, compiled one by one,
   and a signature for a docstring). `@method` compiles one `__init__` per distinct list of
   field names and shares `__repr__` and `__eq__` (dataclass's, field by field) from
   `Method`; `typing.dataclass_transform` tells type checkers what `__init__` takes.
3. `decode_method(payload)` reads a method frame's payload into an instance;
   `encode_method(m)` writes one back. Consecutive ``bit`` fields share an octet, as the
   spec's packing rule says (section 4.2.5.2).
4. Fields that do not parse (cut short, or followed by octets) raise `HardError` 501
   ``FRAME_ERROR - cannot decode <<...>>`` naming the method, and a frame too short for
   the ids 501 ``unknown_frame``, in RabbitMQ's words; an unknown class/method pair drops
   the connection as RabbitMQ does.
5. Names: RabbitMQ refuses a shortstr that is not UTF-8 (501 ``Malformed UTF-8 in
   shortstr``) in every method but those that carry content (basic.publish, and what the
   server sends of a message), whose exchange and routing key are bytes it passes on. So
   only those may hold names that are not UTF-8 (as lone surrogates, `surrogateescape`);
   queue, exchange and consumer names are always valid text.
6. The hottest methods have unrolled codecs next to their users (basic.publish in
   `connection`, basic.deliver in `content`); this table is the reference they match.
"""

from __future__ import annotations

import functools
import inspect
import struct
import types
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, cast, dataclass_transform

from warren.amqp.frames import FRAME_METHOD, framing_error
from warren.amqp.table import FieldTable, TableError, encode_table, read_table
from warren.errors import HardError, ReplyCode, SilentHardError, frame_error

_SHORT = struct.Struct(">H")
_LONG = struct.Struct(">I")
_LONGLONG = struct.Struct(">Q")
_METHOD_ID = struct.Struct(">HH")


class Method:
    """Base of every method; subclasses are made by `@method` (rule 1)."""

    __slots__ = ()
    CLASS_ID: ClassVar[int]
    METHOD_ID: ClassVar[int]
    SPEC: ClassVar[tuple[str, ...]]
    FIELDS: ClassVar[tuple[str, ...]]  # the field names, in the order of `SPEC`
    NAME: ClassVar[str]
    HAS_CONTENT: ClassVar[bool] = False

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{type(self).__qualname__}({values})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.FIELDS)


METHODS: dict[tuple[int, int], type[Method]] = {}
M = TypeVar("M", bound=type[Method])


@dataclass_transform()
def method(class_id: int, method_id: int, spec: str, *, content: bool = False) -> Callable[[M], M]:
    def register(cls: M) -> M:
        names = tuple(inspect.get_annotations(cls))
        namespace = {
            key: value
            for key, value in cls.__dict__.items()
            if key not in names and key not in ("__dict__", "__weakref__")
        }
        namespace.update(
            __slots__=names,
            __match_args__=names,
            __init__=types.FunctionType(
                _init_code(names), {}, "__init__", tuple(cls.__dict__[name] for name in names)
            ),
            CLASS_ID=class_id,
            METHOD_ID=method_id,
            SPEC=tuple(spec.split()),
            FIELDS=names,
            HAS_CONTENT=content,
            NAME=_spec_name(cls.__name__),
        )
        made = cast("M", type(cls.__name__, cls.__bases__, namespace))
        assert len(made.SPEC) == len(names), made
        METHODS[class_id, method_id] = made
        return made

    return register


@functools.cache
def _init_code(names: tuple[str, ...]) -> types.CodeType:
    """An `__init__` setting `names` from its arguments in that order (rule 2)."""
    assignments = "".join(f"    self.{name} = {name}\n" for name in names) or "    pass\n"
    made: dict[str, Any] = {}
    exec(f"def __init__(self, {', '.join(names)}):\n{assignments}", made)
    code: types.CodeType = made["__init__"].__code__
    return code


def _spec_name(class_name: str) -> str:
    """``BasicConsumeOk`` → ``basic.consume-ok`` (for error texts)."""
    words: list[str] = []
    for char in class_name:
        if char.isupper():
            words.append(char.lower())
        else:
            words[-1] += char
    return words[0] + "." + "-".join(words[1:])


# --- connection (class 10) -------------------------------------------------------------


@method(10, 10, "octet octet table longstr longstr")
class ConnectionStart(Method):
    version_major: int = 0
    version_minor: int = 9
    server_properties: FieldTable | bytes = b"\x00\x00\x00\x00"
    mechanisms: bytes = b"PLAIN AMQPLAIN"
    locales: bytes = b"en_US"


@method(10, 11, "table shortstr longstr shortstr")
class ConnectionStartOk(Method):
    client_properties: bytes = b"\x00\x00\x00\x00"
    mechanism: str = "PLAIN"
    response: bytes = b""
    locale: str = "en_US"


@method(10, 20, "longstr")
class ConnectionSecure(Method):
    challenge: bytes = b""


@method(10, 21, "longstr")
class ConnectionSecureOk(Method):
    response: bytes = b""


@method(10, 30, "short long short")
class ConnectionTune(Method):
    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0


@method(10, 31, "short long short")
class ConnectionTuneOk(Method):
    channel_max: int = 0
    frame_max: int = 0
    heartbeat: int = 0


@method(10, 40, "shortstr shortstr bit")
class ConnectionOpen(Method):
    virtual_host: str = "/"
    capabilities: str = ""
    insist: bool = False


@method(10, 41, "shortstr")
class ConnectionOpenOk(Method):
    known_hosts: str = ""


@method(10, 50, "short shortstr short short")
class ConnectionClose(Method):
    reply_code: int = 200
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0


@method(10, 51, "")
class ConnectionCloseOk(Method):
    pass


@method(10, 60, "shortstr")
class ConnectionBlocked(Method):
    reason: str = ""


@method(10, 61, "")
class ConnectionUnblocked(Method):
    pass


@method(10, 70, "longstr shortstr")
class ConnectionUpdateSecret(Method):
    new_secret: bytes = b""
    reason: str = ""


@method(10, 71, "")
class ConnectionUpdateSecretOk(Method):
    pass


# --- channel (class 20) ----------------------------------------------------------------


@method(20, 10, "shortstr")
class ChannelOpen(Method):
    out_of_band: str = ""


@method(20, 11, "longstr")
class ChannelOpenOk(Method):
    channel_id: bytes = b""


@method(20, 20, "bit")
class ChannelFlow(Method):
    active: bool = True


@method(20, 21, "bit")
class ChannelFlowOk(Method):
    active: bool = True


@method(20, 40, "short shortstr short short")
class ChannelClose(Method):
    reply_code: int = 200
    reply_text: str = ""
    class_id: int = 0
    method_id: int = 0


@method(20, 41, "")
class ChannelCloseOk(Method):
    pass


# --- exchange (class 40) ---------------------------------------------------------------


@method(40, 10, "short shortstr shortstr bit bit bit bit bit table")
class ExchangeDeclare(Method):
    ticket: int = 0
    exchange: str = ""
    type: str = "direct"
    passive: bool = False
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    nowait: bool = False
    arguments: bytes = b"\x00\x00\x00\x00"


@method(40, 11, "")
class ExchangeDeclareOk(Method):
    pass


@method(40, 20, "short shortstr bit bit")
class ExchangeDelete(Method):
    ticket: int = 0
    exchange: str = ""
    if_unused: bool = False
    nowait: bool = False


@method(40, 21, "")
class ExchangeDeleteOk(Method):
    pass


@method(40, 30, "short shortstr shortstr shortstr bit table")
class ExchangeBind(Method):
    ticket: int = 0
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    nowait: bool = False
    arguments: bytes = b"\x00\x00\x00\x00"


@method(40, 31, "")
class ExchangeBindOk(Method):
    pass


@method(40, 40, "short shortstr shortstr shortstr bit table")
class ExchangeUnbind(Method):
    ticket: int = 0
    destination: str = ""
    source: str = ""
    routing_key: str = ""
    nowait: bool = False
    arguments: bytes = b"\x00\x00\x00\x00"


@method(40, 51, "")
class ExchangeUnbindOk(Method):
    pass


# --- queue (class 50) ------------------------------------------------------------------


@method(50, 10, "short shortstr bit bit bit bit bit table")
class QueueDeclare(Method):
    ticket: int = 0
    queue: str = ""
    passive: bool = False
    durable: bool = False
    exclusive: bool = False
    auto_delete: bool = False
    nowait: bool = False
    arguments: bytes = b"\x00\x00\x00\x00"


@method(50, 11, "shortstr long long")
class QueueDeclareOk(Method):
    queue: str = ""
    message_count: int = 0
    consumer_count: int = 0


@method(50, 20, "short shortstr shortstr shortstr bit table")
class QueueBind(Method):
    ticket: int = 0
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    nowait: bool = False
    arguments: bytes = b"\x00\x00\x00\x00"


@method(50, 21, "")
class QueueBindOk(Method):
    pass


@method(50, 30, "short shortstr bit")
class QueuePurge(Method):
    ticket: int = 0
    queue: str = ""
    nowait: bool = False


@method(50, 31, "long")
class QueuePurgeOk(Method):
    message_count: int = 0


@method(50, 40, "short shortstr bit bit bit")
class QueueDelete(Method):
    ticket: int = 0
    queue: str = ""
    if_unused: bool = False
    if_empty: bool = False
    nowait: bool = False


@method(50, 41, "long")
class QueueDeleteOk(Method):
    message_count: int = 0


@method(50, 50, "short shortstr shortstr shortstr table")
class QueueUnbind(Method):
    ticket: int = 0
    queue: str = ""
    exchange: str = ""
    routing_key: str = ""
    arguments: bytes = b"\x00\x00\x00\x00"


@method(50, 51, "")
class QueueUnbindOk(Method):
    pass


# --- basic (class 60) ------------------------------------------------------------------


@method(60, 10, "long short bit")
class BasicQos(Method):
    prefetch_size: int = 0
    prefetch_count: int = 0
    global_: bool = False


@method(60, 11, "")
class BasicQosOk(Method):
    pass


@method(60, 20, "short shortstr shortstr bit bit bit bit table")
class BasicConsume(Method):
    ticket: int = 0
    queue: str = ""
    consumer_tag: str = ""
    no_local: bool = False
    no_ack: bool = False
    exclusive: bool = False
    nowait: bool = False
    arguments: bytes = b"\x00\x00\x00\x00"


@method(60, 21, "shortstr")
class BasicConsumeOk(Method):
    consumer_tag: str = ""


@method(60, 30, "shortstr bit")
class BasicCancel(Method):
    consumer_tag: str = ""
    nowait: bool = False


@method(60, 31, "shortstr")
class BasicCancelOk(Method):
    consumer_tag: str = ""


@method(60, 40, "short shortstr shortstr bit bit", content=True)
class BasicPublish(Method):
    ticket: int = 0
    exchange: str = ""
    routing_key: str = ""
    mandatory: bool = False
    immediate: bool = False


@method(60, 50, "short shortstr shortstr shortstr", content=True)
class BasicReturn(Method):
    reply_code: int = 0
    reply_text: str = ""
    exchange: str = ""
    routing_key: str = ""


@method(60, 60, "shortstr longlong bit shortstr shortstr", content=True)
class BasicDeliver(Method):
    consumer_tag: str = ""
    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""


@method(60, 70, "short shortstr bit")
class BasicGet(Method):
    ticket: int = 0
    queue: str = ""
    no_ack: bool = False


@method(60, 71, "longlong bit shortstr shortstr long", content=True)
class BasicGetOk(Method):
    delivery_tag: int = 0
    redelivered: bool = False
    exchange: str = ""
    routing_key: str = ""
    message_count: int = 0


@method(60, 72, "shortstr")
class BasicGetEmpty(Method):
    cluster_id: str = ""


@method(60, 80, "longlong bit")
class BasicAck(Method):
    delivery_tag: int = 0
    multiple: bool = False


@method(60, 90, "longlong bit")
class BasicReject(Method):
    delivery_tag: int = 0
    requeue: bool = True


@method(60, 100, "bit")
class BasicRecoverAsync(Method):
    requeue: bool = False


@method(60, 110, "bit")
class BasicRecover(Method):
    requeue: bool = False


@method(60, 111, "")
class BasicRecoverOk(Method):
    pass


@method(60, 120, "longlong bit bit")
class BasicNack(Method):
    delivery_tag: int = 0
    multiple: bool = False
    requeue: bool = True


# --- tx (class 90) and confirm (class 85) ----------------------------------------------


@method(90, 10, "")
class TxSelect(Method):
    pass


@method(90, 11, "")
class TxSelectOk(Method):
    pass


@method(90, 20, "")
class TxCommit(Method):
    pass


@method(90, 21, "")
class TxCommitOk(Method):
    pass


@method(90, 30, "")
class TxRollback(Method):
    pass


@method(90, 31, "")
class TxRollbackOk(Method):
    pass


@method(85, 10, "bit")
class ConfirmSelect(Method):
    nowait: bool = False


@method(85, 11, "")
class ConfirmSelectOk(Method):
    pass


# --- the codec -------------------------------------------------------------------------


def decode_method(payload: bytes) -> Method:
    """Decode a method frame's payload: class id, method id, then the fields."""
    if len(payload) < 4:
        raise framing_error(FRAME_METHOD, payload, "unknown_frame")
    class_id, method_id = _METHOD_ID.unpack_from(payload)
    cls = METHODS.get((class_id, method_id))
    if cls is None:
        raise SilentHardError(
            ReplyCode.NOT_IMPLEMENTED, f"{{unknown_method_id,{{{class_id},{method_id}}}}}"
        ).at(class_id, method_id)
    try:
        values, end = _decode_fields(cls.SPEC, payload, 4, cls.HAS_CONTENT)
    except UnicodeDecodeError as error:
        raise frame_error("Malformed UTF-8 in shortstr") from error
    except (struct.error, IndexError, TableError) as error:
        raise cannot_decode(cls, payload) from error
    if end != len(payload):  # cut short, or octets after the last field
        raise cannot_decode(cls, payload)
    return cls(*values)


def cannot_decode(cls: type[Method], payload: bytes) -> HardError:
    """RabbitMQ's words for fields that do not parse: the octets after the method id."""
    octets = ",".join(str(octet) for octet in payload[4:])
    error = frame_error(f"cannot decode <<{octets}>>")
    error.at(cls.CLASS_ID, cls.METHOD_ID)
    return error


def _decode_fields(
    spec: tuple[str, ...], payload: bytes, offset: int, names_as_bytes: bool
) -> tuple[list[Any], int]:
    text_errors = "surrogateescape" if names_as_bytes else "strict"
    values: list[Any] = []
    bit = 8
    bits = 0
    view = memoryview(payload)
    for kind in spec:
        if kind == "bit":
            if bit == 8:
                bits, bit, offset = payload[offset], 0, offset + 1
            values.append(bool(bits & (1 << bit)))
            bit += 1
            continue
        bit = 8
        if kind == "shortstr":
            size = payload[offset]
            end = offset + 1 + size
            if end > len(payload):
                raise IndexError("short string beyond frame")
            values.append(payload[offset + 1 : end].decode("utf-8", text_errors))
            offset = end
        elif kind == "longstr":
            (size,) = _LONG.unpack_from(payload, offset)
            end = offset + 4 + size
            if end > len(payload):
                raise IndexError("long string beyond frame")
            values.append(payload[offset + 4 : end])
            offset = end
        elif kind == "octet":
            values.append(payload[offset])
            offset += 1
        elif kind == "short":
            values.append(_SHORT.unpack_from(payload, offset)[0])
            offset += 2
        elif kind == "long":
            values.append(_LONG.unpack_from(payload, offset)[0])
            offset += 4
        elif kind == "longlong":
            values.append(_LONGLONG.unpack_from(payload, offset)[0])
            offset += 8
        elif kind == "table":
            start = offset
            _, offset = read_table(view, offset)
            values.append(bytes(payload[start:offset]))
        else:  # pragma: no cover - the table above is fixed
            raise AssertionError(kind)
    return values, offset


def encode_method(m: Method) -> bytes:
    """Encode a method as a method frame payload."""
    parts = [_METHOD_ID.pack(m.CLASS_ID, m.METHOD_ID)]
    bits = 0
    bit = -1
    for kind, value in zip(m.SPEC, _values(m), strict=True):
        if kind == "bit":
            if bit == -1:
                bits, bit = 0, 0
            elif bit == 8:
                parts.append(bytes((bits,)))
                bits, bit = 0, 0
            if value:
                bits |= 1 << bit
            bit += 1
            continue
        if bit != -1:
            parts.append(bytes((bits,)))
            bit = -1
        parts.append(_encode_field(kind, value))
    if bit != -1:
        parts.append(bytes((bits,)))
    return b"".join(parts)


def _values(m: Method) -> list[Any]:
    return [getattr(m, name) for name in m.FIELDS]


def _encode_field(kind: str, value: Any) -> bytes:
    if kind == "shortstr":
        raw: bytes = value.encode("utf-8", "surrogateescape")
        if len(raw) > 255:
            raise ValueError(f"short string longer than 255 bytes: {value[:32]!r}")
        return bytes((len(raw),)) + raw
    if kind == "longstr":
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return _LONG.pack(len(raw)) + raw
    if kind == "octet":
        return bytes((value,))
    if kind == "short":
        return _SHORT.pack(value)
    if kind == "long":
        return _LONG.pack(value)
    if kind == "longlong":
        return _LONGLONG.pack(value)
    if kind == "table":
        return bytes(value) if isinstance(value, bytes | bytearray) else encode_table(value)
    raise AssertionError(kind)  # pragma: no cover
