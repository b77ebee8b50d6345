"""A record batch of rows to publish, encoded as one buffer of AMQP frames.

Theory of operation:
1. Rows alike in all but their body (their other columns equal and hashable) form a group and
   share one encoding of exchange, routing key and properties (`outgoing_of`); a row with a
   map or an array (`headers`, `x_death`, `cc`) is a group of its own. A DataFrame of bodies
   alone is one group.
2. A publish is a method frame, a content header frame and a body frame (spec section 4.2.6,
   "Content Framing"). For a row of group g whose body has n bytes, everything but the body is
   the same bytes: the head of (g, n). Heads are built once per distinct (g, n) (numpy's
   `unique` finds them), the bodies come out of Arrow's buffer as bytes in one call, and the
   buffer is one `join` of head, body and frame end for every row: no Python code runs per row
   of a group, so the writer's CPU per message is a small fraction of the broker's.
3. A body larger than a frame (`frame_max` - 8 bytes) is split into body frames by
   `content_frames`, row by row; an empty body has no body frame (its head ends the message).
4. `Publishes` keeps where each message starts in the buffer, so a publisher sends any run of
   messages as one slice (a window refill), and what each row was, to name one that was
   nacked or returned.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from warren.amqp.content import content_frames, shortstr
from warren.amqp.frames import FRAME_END_BYTE
from warren.spark.message import Outgoing, outgoing_of

_PUBLISH = b"\x00\x3c\x00\x28\x00\x00"  # basic.publish, ticket 0
_BODY_TYPES = (pa.binary(), pa.large_binary(), pa.string(), pa.large_string())


@dataclasses.dataclass(frozen=True, slots=True)
class Publishes:
    """`len(self)` publishes in `buffer`; message i is `buffer[starts[i]:starts[i + 1]]`."""

    buffer: bytes
    starts: npt.NDArray[np.int64]
    groups: list[Outgoing]  # rule 1, with empty bodies
    group_of: npt.NDArray[np.int64]  # each row's group
    bodies: list[bytes]

    def __len__(self) -> int:
        return len(self.bodies)

    def span(self, start: int, stop: int) -> memoryview:
        """Messages `start` to `stop` (excluded), ready to write."""
        return memoryview(self.buffer)[int(self.starts[start]) : int(self.starts[stop])]

    def message(self, index: int) -> Outgoing:
        alike = self.groups[int(self.group_of[index])]
        return dataclasses.replace(alike, body=self.bodies[index])


def encode_batch(
    batch: pa.RecordBatch,
    exchange: str | None,
    routing_key: str | None,
    delivery_mode: int,
    mandatory: bool,
    channel: int,
    frame_max: int,
) -> Publishes:
    """The publishes of `batch`'s rows, as `outgoing_of` makes each (see the rules)."""
    groups, group_of = _groups(batch, exchange, routing_key, delivery_mode)
    bodies, sizes = _bodies(batch)
    methods = [_method(group, mandatory) for group in groups]
    chunk = frame_max - 8  # the most body one frame holds
    # rule 2: one head per distinct (group, body size) among the bodies that fit a frame
    fits = sizes <= chunk
    keys = group_of * (chunk + 1) + np.where(fits, sizes, 0)
    distinct, inverse = np.unique(keys, return_inverse=True)
    heads = [
        _head(channel, methods[key // (chunk + 1)], groups[key // (chunk + 1)], key % (chunk + 1))
        for key in distinct.tolist()
    ]
    count = len(bodies)
    parts: list[bytes] = [b""] * (3 * count)
    parts[0::3] = np.array(heads, dtype=object)[inverse].tolist()
    parts[1::3] = bodies
    has_body_frame = sizes > 0
    parts[2::3] = [FRAME_END_BYTE] * count if has_body_frame.all() else _tails(has_body_frame)
    lengths = np.array([len(head) for head in heads], np.int64)[inverse] + sizes + has_body_frame
    for row in np.flatnonzero(~fits).tolist():  # rule 3
        group = int(group_of[row])
        whole = content_frames(
            channel, methods[group], groups[group].properties, bodies[row], frame_max
        )
        parts[3 * row : 3 * row + 3] = [whole, b"", b""]
        lengths[row] = len(whole)
    starts = np.zeros(count + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    return Publishes(b"".join(parts), starts, groups, group_of, bodies)


def _groups(
    batch: pa.RecordBatch, exchange: str | None, routing_key: str | None, delivery_mode: int
) -> tuple[list[Outgoing], npt.NDArray[np.int64]]:
    """The distinct encodings of the rows but for their body, and each row's (rule 1)."""
    names = [name for name in batch.schema.names if name != "body"]
    if not names:
        alike = outgoing_of({"body": b""}, exchange, routing_key, delivery_mode)
        return [alike], np.zeros(batch.num_rows, np.int64)
    groups: list[Outgoing] = []
    seen: dict[tuple[Any, ...], int] = {}
    group_of: list[int] = []
    columns = [batch.column(name).to_pylist() for name in names]
    for rest in zip(*columns, strict=True):
        try:
            group = seen.setdefault(rest, len(groups))
        except TypeError:  # a map or an array in the row: a group of its own
            group = len(groups)
        if group == len(groups):
            values = dict(zip(names, rest, strict=True))
            groups.append(
                outgoing_of({**values, "body": b""}, exchange, routing_key, delivery_mode)
            )
        group_of.append(group)
    return groups, np.array(group_of, np.int64)


def _bodies(batch: pa.RecordBatch) -> tuple[list[bytes], npt.NDArray[np.int64]]:
    """The `body` column as bytes, and each body's size."""
    if "body" not in batch.schema.names:
        raise ValueError("a row to publish needs a column 'body' (binary or string)")
    column = batch.column("body")
    if column.type not in _BODY_TYPES:
        raise ValueError(f"column 'body' must be binary or string, got {column.type}")
    if column.null_count:
        raise ValueError("column 'body' must be binary or string, got a null")
    large = column.type in (pa.large_binary(), pa.large_string())
    binary = column.view(pa.large_binary() if large else pa.binary())  # text as UTF-8 bytes
    # the sizes from the offsets themselves: pyarrow's `to_numpy` imports pandas (0.5 s of a
    # task's first batch)
    offset_type = np.dtype(np.int64 if large else np.int32)
    offsets = np.frombuffer(
        binary.buffers()[1],
        offset_type,
        count=len(binary) + 1,
        offset=binary.offset * offset_type.itemsize,
    )
    return binary.to_pylist(), np.diff(offsets).astype(np.int64)


def _method(alike: Outgoing, mandatory: bool) -> bytes:
    route = shortstr(alike.exchange) + shortstr(alike.routing_key)
    return _PUBLISH + route + (b"\x01" if mandatory else b"\x00")


def _head(channel: int, method: bytes, alike: Outgoing, size: int) -> bytes:
    """Every frame byte of a publish before its body of `size` bytes (rule 2): the frames
    `content_frames` makes of a body of that size, less the body and its frame end (all of
    them for an empty body, which has no body frame). `size` fits one frame."""
    frames = content_frames(channel, method, alike.properties, bytes(size), size + 8)
    return frames[: -(size + 1)] if size else frames


def _tails(has_body_frame: npt.NDArray[np.bool_]) -> list[bytes]:
    """The frame end after each body, none after an empty one (rule 3)."""
    return [FRAME_END_BYTE if has else b"" for has in has_body_frame.tolist()]
