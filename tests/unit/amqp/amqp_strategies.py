"""Hypothesis strategies and byte builders shared by the tests of `warren.amqp`.

Values drawn here are the ones the codec promises to round-trip exactly: field values of
the types `encode_table` picks a tag for, method fields drawn from each method's `SPEC`,
and whole frame streams a well-behaved client could send.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import math

from hypothesis import strategies as st

from warren.amqp.connection import NEED_DATA, Event, ServerConnection
from warren.amqp.content import BasicProperties
from warren.amqp.frames import FRAME_BODY, FRAME_HEADER, FRAME_METHOD, PROTOCOL_HEADER, build_frame
from warren.amqp.methods import (
    METHODS,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTuneOk,
    Method,
    encode_method,
)
from warren.amqp.table import Typed, encode_table

# --- field values ------------------------------------------------------------------------

TIMESTAMP_MAX_S = 253402300799  # 9999-12-31T23:59:59Z, the last second `datetime` can hold

# At most 12 characters of at most 4 bytes each: always within a shortstr's 255 bytes.
keys = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)
texts = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20)
# Long strings decode to str when they are UTF-8, so only invalid UTF-8 stays bytes.
invalid_utf8 = st.binary(max_size=20).map(lambda raw: b"\xff" + raw)
decimals = st.builds(
    lambda raw, places: decimal.Decimal(raw).scaleb(-places),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 255),
)
timestamps = st.integers(0, TIMESTAMP_MAX_S).map(
    lambda seconds: datetime.datetime.fromtimestamp(seconds, datetime.UTC)
)
plain_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    texts,
    invalid_utf8,
    decimals,
    timestamps,
)
plain_values = st.recursive(
    plain_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=8,
)
plain_tables = st.dictionaries(keys, plain_values, max_size=6)


def _ints(bits: int, signed: bool) -> st.SearchStrategy[int]:
    if signed:
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return st.integers(0, 2**bits - 1)


# One strategy per RabbitMQ tag, drawing values that decode back to themselves.
TYPED_VALUES: dict[str, st.SearchStrategy[object]] = {
    "S": texts | invalid_utf8,
    "I": _ints(32, signed=True),
    "i": _ints(32, signed=False),
    "l": _ints(64, signed=True),
    "b": _ints(8, signed=True),
    "B": _ints(8, signed=False),
    "s": _ints(16, signed=True),
    "u": _ints(16, signed=False),
    "t": st.booleans(),
    "F": plain_tables,
    "A": st.lists(plain_values, max_size=4),
    "T": timestamps,
    "d": st.floats(allow_nan=False),
    "f": st.floats(allow_nan=False, width=32),
    "D": decimals,
    "V": st.none(),
    "x": st.binary(max_size=20),
}
typed_values = st.sampled_from(sorted(TYPED_VALUES)).flatmap(
    lambda tag: TYPED_VALUES[tag].map(lambda value: Typed(tag, value))
)


def same(left: object, right: object) -> bool:
    """Equality that also compares types (``True == 1`` and ``0.0 == -0.0`` do not count)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, Typed):
        assert isinstance(right, Typed)
        return left.tag == right.tag and same(left.value, right.value)
    if isinstance(left, dict):
        assert isinstance(right, dict)
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        assert isinstance(right, list)
        return len(left) == len(right) and all(map(same, left, right))
    if isinstance(left, float):
        assert isinstance(right, float)
        return left == right and math.copysign(1, left) == math.copysign(1, right)
    if isinstance(left, decimal.Decimal):
        assert isinstance(right, decimal.Decimal)
        return left.as_tuple() == right.as_tuple()
    return left == right


# --- methods -----------------------------------------------------------------------------

# any bytes: the names of a message (basic.publish, deliver), which RabbitMQ passes on
shortstrs = st.binary(max_size=255).map(lambda raw: raw.decode("utf-8", "surrogateescape"))
# every other shortstr must be UTF-8
text_shortstrs = st.text(st.characters(blacklist_categories=("Cs",))).filter(
    lambda text: len(text.encode()) <= 255
)
FIELDS: dict[str, st.SearchStrategy[object]] = {
    "octet": _ints(8, signed=False),
    "short": _ints(16, signed=False),
    "long": _ints(32, signed=False),
    "longlong": _ints(64, signed=False),
    "bit": st.booleans(),
    "shortstr": shortstrs,
    "longstr": st.binary(max_size=300),
    # The table codec keeps method tables as the raw bytes it read.
    "table": plain_tables.map(encode_table),
}


def methods_of(cls: type[Method]) -> st.SearchStrategy[Method]:
    names = shortstrs if cls.HAS_CONTENT else text_shortstrs
    fields = st.tuples(*(names if kind == "shortstr" else FIELDS[kind] for kind in cls.SPEC))
    return fields.map(lambda values: cls(*values))


all_methods = st.sampled_from(sorted(METHODS.values(), key=lambda c: (c.CLASS_ID, c.METHOD_ID)))
any_method = all_methods.flatmap(methods_of)

# --- properties --------------------------------------------------------------------------


def _optional(strategy: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.none() | strategy


properties = st.builds(
    BasicProperties,
    content_type=_optional(shortstrs),
    content_encoding=_optional(shortstrs),
    headers=_optional(plain_tables),
    delivery_mode=_optional(_ints(8, signed=False)),
    priority=_optional(_ints(8, signed=False)),
    correlation_id=_optional(shortstrs),
    reply_to=_optional(shortstrs),
    expiration=_optional(shortstrs),
    message_id=_optional(shortstrs),
    timestamp=_optional(_ints(64, signed=False)),
    type=_optional(shortstrs),
    user_id=_optional(shortstrs),
    app_id=_optional(shortstrs),
    cluster_id=_optional(shortstrs),
)

# --- frames and conversations ------------------------------------------------------------


def method_frame(channel: int, method: Method) -> bytes:
    return build_frame(FRAME_METHOD, channel, encode_method(method))


def header_frame(channel: int, body_size: int, properties_raw: bytes = b"\x00\x00") -> bytes:
    payload = (60).to_bytes(2, "big") + b"\x00\x00" + body_size.to_bytes(8, "big")
    return build_frame(FRAME_HEADER, channel, payload + properties_raw)


def body_frame(channel: int, body: bytes) -> bytes:
    return build_frame(FRAME_BODY, channel, body)


HANDSHAKE = (
    PROTOCOL_HEADER
    + method_frame(0, ConnectionStartOk(mechanism="PLAIN", response=b"\x00guest\x00guest"))
    + method_frame(0, ConnectionTuneOk(2047, 131072, 60))
    + method_frame(0, ConnectionOpen("/"))
)


def drain(connection: ServerConnection, limit: int = 10_000) -> list[Event]:
    """Every event the connection has buffered; fails on a loop that never settles."""
    events: list[Event] = []
    for _ in range(limit):
        event = connection.next_event()
        if event is NEED_DATA:
            return events
        events.append(event)
    raise AssertionError(f"no NEED_DATA after {limit} events")


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    """Split `data` at the given offsets (any order, any values; clipped to the data)."""
    points = sorted({min(max(cut, 0), len(data)) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]
