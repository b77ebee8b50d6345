"""AMQP 0-9-1 frames: split a byte stream into frames, and build frames.

Theory of operation (spec section 4.2.3, "General Frame Format"):
1. A frame is ``type:octet channel:short size:long payload frame-end`` where frame-end is
   0xCE. `FrameDecoder.feed` takes whatever bytes arrived; `next_frame` returns one frame
   as ``(type, channel, payload)`` or `NEED_DATA` when the buffer holds no whole frame.
2. Every frame's end octet is checked, heartbeats included. A bad end octet, an unknown
   frame type or a frame larger than the negotiated frame_max raises `HardError` 501
   FRAME_ERROR: the connection cannot be resynchronised after that, so the decoder is
   `broken` from then on and drops whatever else arrives (one error, one close).
3. The decoder never blocks and never raises on partial input.
4. Before the handshake the peer must send the protocol header; `read_protocol_header`
   consumes it and reports whether it is the one we speak.
5. Frames are read from an immutable `bytes` buffer, so that a frame's payload (a
   publish's method, properties and body) is one slice, not a `bytearray` slice copied
   again into `bytes`. Bytes fed while the next frame is incomplete wait in `_pending`
   (a `bytearray`, appended in amortised constant time) until they complete it
   (`_wanted`, set when a read found it incomplete), and only then join the buffer: a
   frame arriving in many small reads is copied once, not once per read.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Container
from typing import Final

from warren.errors import HardError, frame_error

FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
FRAME_END_BYTE: Final = b"\xce"
FRAME_OVERHEAD: Final = 8  # 7 bytes of header, 1 of frame-end
FRAME_MIN_SIZE: Final = 4096  # spec: frame_max may never be negotiated below this

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"

_FRAME_HEADER = struct.Struct(">BHI")
_CONTENT_START = struct.Struct(">BHIHHQ")  # a frame header, then a content header's start
_METHOD_START = struct.Struct(">BHII")  # a frame header, then a method's class and method ids
_BASIC_PUBLISH: Final = 0x003C0028
_BASIC_CLASS_ID: Final = 60
_KNOWN_TYPES = frozenset((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT))


class NeedData(enum.Enum):
    """Sentinel: the buffer holds no whole frame yet."""

    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA

Frame = tuple[int, int, bytes]


class ProtocolHeader(enum.Enum):
    """What the first eight bytes of a connection were."""

    INCOMPLETE = "incomplete"
    OK = "ok"
    WRONG = "wrong"


class FrameDecoder:
    """Incremental frame splitter over a growing buffer."""

    __slots__ = ("_buffer", "_offset", "_pending", "_wanted", "broken", "frame_max")

    def __init__(self, frame_max: int) -> None:
        self._buffer = b""
        self._offset = 0
        self._pending = bytearray()  # point 5: fed, not yet joined to `_buffer`
        self._wanted = 0  # the unread bytes the next frame needs whole (0: any)
        self.frame_max = frame_max
        self.broken = False

    def feed(self, data: bytes) -> None:
        if self.broken:
            return
        pending = self._pending
        unread = len(self._buffer) - self._offset
        if unread + len(pending) + len(data) < self._wanted:
            pending += data  # the next frame is still incomplete: nothing new to read
            return
        if pending:
            pending += data
            data = bytes(pending)
            pending.clear()
        # bytes as they came are taken as they are (`bytes` of a bytes is no copy)
        self._buffer = self._buffer[self._offset :] + data if unread else bytes(data)
        self._offset = 0
        self._wanted = 0

    @property
    def buffered(self) -> int:
        return len(self._buffer) - self._offset + len(self._pending)

    def unread(self) -> bytes:
        """The bytes fed and not yet read as frames."""
        return self._buffer[self._offset :] + self._pending

    def read_protocol_header(self) -> ProtocolHeader:
        if self.buffered < len(PROTOCOL_HEADER):
            return ProtocolHeader.INCOMPLETE
        start = self._offset
        header = self._buffer[start : start + len(PROTOCOL_HEADER)]
        self._offset += len(PROTOCOL_HEADER)
        return ProtocolHeader.OK if header == PROTOCOL_HEADER else ProtocolHeader.WRONG

    def next_frame(self) -> Frame | NeedData:
        buffer = self._buffer
        start = self._offset
        if len(buffer) - start < 7:
            self._wanted = 7
            return NEED_DATA
        frame_type, channel, size = _FRAME_HEADER.unpack_from(buffer, start)
        if frame_type not in _KNOWN_TYPES:
            raise self._break(frame_error(f"illegal frame type {frame_type}"))
        if size > self.frame_max:
            # RabbitMQ allows 8 octets of slack and names frame_max - 8 as the limit.
            limit = self.frame_max - FRAME_OVERHEAD
            raise self._break(framing_error(frame_type, b"", f"{{frame_too_large,{size},{limit}}}"))
        end = start + 7 + size
        if len(buffer) <= end:
            self._wanted = end + 1 - start
            return NEED_DATA
        if buffer[end] != FRAME_END:
            payload = buffer[start + 7 : end]
            marker = f"{{invalid_frame_end_marker,{buffer[end]}}}"
            raise self._break(framing_error(frame_type, payload, marker))
        self._offset = end + 1
        return frame_type, channel, buffer[start + 7 : end]

    def _break(self, error: HardError) -> HardError:
        """The stream cannot be resynchronised: drop what is buffered and all that comes.
        (Each raise site calls this rather than one handler around `next_frame`, which
        would cost a call per frame.)"""
        self.broken = True
        self._buffer = b""
        self._pending.clear()
        self._offset = 0
        return error

    def take_publish(self, channels: Container[int]) -> tuple[int, bytes, bytes, bytes] | None:
        """Fast path for the frames a broker reads most: if a basic.publish on one of
        `channels`, its content header and its single body frame (or none, for an empty
        body) are whole at the head of the buffer, consume them and return ``(channel,
        method_payload, properties_raw, body)``; otherwise consume nothing and return None,
        and `next_frame` reads the frames one by one (with all checks) instead."""
        buffer = self._buffer
        start = self._offset
        if len(buffer) - start < 11:
            return None
        frame_type, channel, size, method_id = _METHOD_START.unpack_from(buffer, start)
        end = start + 7 + size
        if (
            method_id != _BASIC_PUBLISH
            or frame_type != FRAME_METHOD
            or size < 4
            or size > self.frame_max
            or end >= len(buffer)
            or buffer[end] != FRAME_END
            or channel not in channels
        ):
            return None
        content = self._content_at(end + 1, channel)
        if content is None:
            return None
        self._offset, header_end, body = content
        properties_start = end + 1 + 7 + 12  # after the content header's prefix
        return channel, buffer[start + 7 : end], buffer[properties_start:header_end], body

    def take_content(self, channel: int) -> tuple[bytes, bytes] | None:
        """Fast path after basic.publish: if its content header and single body frame (or
        none, for an empty body) are whole in the buffer, consume them and return
        ``(header_payload, body)``; otherwise consume nothing and return None, and the
        frames are read one by one (with all checks) instead."""
        start = self._offset
        content = self._content_at(start, channel)
        if content is None:
            return None
        self._offset, header_end, body = content
        return self._buffer[start + 7 : header_end], body

    def _content_at(self, start: int, channel: int) -> tuple[int, int, bytes] | None:
        """The content header frame of basic at `start` on `channel` and its single body
        frame, if both are whole and well formed: ``(offset after them, offset where the
        header's payload ends, body)``."""
        buffer = self._buffer
        if len(buffer) - start < 22:
            return None
        # the frame's header, then the content header's class id, weight and body size
        frame_type, frame_channel, size, class_id, _weight, body_size = _CONTENT_START.unpack_from(
            buffer, start
        )
        end = start + 7 + size
        if (
            frame_type != FRAME_HEADER
            or frame_channel != channel
            or class_id != _BASIC_CLASS_ID
            or size < 14
            or size > self.frame_max
            or end >= len(buffer)
            or buffer[end] != FRAME_END
        ):
            return None
        if body_size == 0:
            return end + 1, end, b""
        body_start = end + 1
        if len(buffer) - body_start < 8:
            return None
        frame_type, frame_channel, size = _FRAME_HEADER.unpack_from(buffer, body_start)
        body_end = body_start + 7 + size
        if (
            frame_type != FRAME_BODY
            or frame_channel != channel
            or size != body_size
            or size > self.frame_max
            or body_end >= len(buffer)
            or buffer[body_end] != FRAME_END
        ):
            return None
        return body_end + 1, end, buffer[body_start + 7 : body_end]

    def window(self) -> tuple[bytes, int]:
        """The buffer and how far into it reading has come, for a caller's own fast path
        over whole frames (the Spark reader's deliveries), which says where it stopped with
        `advance_to`. A subclass would do, but not of the release build's compiled class."""
        return self._buffer, self._offset

    def advance_to(self, offset: int) -> None:
        """Frames up to `offset` of `window`'s buffer were read by the caller."""
        self._offset = offset

    def compact(self) -> None:
        """Drop consumed bytes; call once per read, not per frame."""
        if self._offset:
            self._buffer = self._buffer[self._offset :]
            self._offset = 0


def framing_error(frame_type: int, payload: bytes, reason: str) -> HardError:
    """501 in RabbitMQ's words: ``type 1, all octets = <<0,20,0,10,0>>: {reason}``."""
    return frame_error(f"type {frame_type}, all octets = {erlang_binary(payload)}: {reason}")


def erlang_binary(data: bytes) -> str:
    """A binary as Erlang's ``~p`` prints it: ``<<"text">>`` when printable, else octets."""
    if data and all(32 <= octet < 127 for octet in data):
        text = data.decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return "<<" + ",".join(str(octet) for octet in data) + ">>"


def build_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HEADER.pack(frame_type, channel, len(payload)) + payload + FRAME_END_BYTE
