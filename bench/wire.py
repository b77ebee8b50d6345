"""The hand-rolled AMQP 0-9-1 client wire layer shared by every load-generator process.

Owns frame and method encoding, field tables, the client handshake (PLAIN, heartbeat 0,
frame_max/channel_max echoed from connection.tune), a frame-splitting asyncio protocol with
fast-path hooks for the hot frames (deliver, content header/body, confirms), synchronous
RPCs on channel 1 and the pre-encoded publish template. No client library is involved: a
publish is a memcpy of the template, a delivery a few `struct.unpack_from` calls, and a run
of deliveries laid out alike one numpy comparison for the lot (`DeliveryLayout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast
from urllib.parse import unquote, urlparse

import numpy as np

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
CHANNEL = 1
DEFAULT_FRAME_MAX = 131072
HANDSHAKE_TIMEOUT_S = 30.0

CONNECTION_START, CONNECTION_START_OK = (10, 10), (10, 11)
CONNECTION_TUNE, CONNECTION_TUNE_OK = (10, 30), (10, 31)
CONNECTION_OPEN, CONNECTION_OPEN_OK = (10, 40), (10, 41)
CONNECTION_CLOSE, CONNECTION_CLOSE_OK = (10, 50), (10, 51)
CHANNEL_OPEN, CHANNEL_OPEN_OK = (20, 10), (20, 11)
CHANNEL_CLOSE, CHANNEL_CLOSE_OK = (20, 40), (20, 41)
QUEUE_DECLARE, QUEUE_DECLARE_OK = (50, 10), (50, 11)
QUEUE_DELETE, QUEUE_DELETE_OK = (50, 40), (50, 41)
BASIC_QOS, BASIC_QOS_OK = (60, 10), (60, 11)
BASIC_CONSUME, BASIC_CONSUME_OK = (60, 20), (60, 21)
BASIC_CANCEL = (60, 30)
BASIC_PUBLISH, BASIC_DELIVER = (60, 40), (60, 60)
BASIC_ACK, BASIC_NACK = (60, 80), (60, 120)
CONFIRM_SELECT, CONFIRM_SELECT_OK = (85, 10), (85, 11)

FRAME_HEAD = struct.Struct("!BHI")
METHOD_ID = struct.Struct("!HH")
U64 = struct.Struct("!Q")
_ACK_FRAME = struct.Struct("!BHIHHQBB")

FastHandler = Callable[[bytearray, int, int], None]
RUN_MIN = 4  # fewer whole messages alike than this are read frame by frame (numpy's fixed cost)
_STAMPS = np.dtype(">i8")


class AmqpError(Exception):
    """The broker closed the channel or connection (reply code and text), or the link broke."""

    def __init__(self, text: str, code: int = 0) -> None:
        super().__init__(f"{code} {text}" if code else text)
        self.code = code


# ---------------------------------------------------------------------------- encoding


def shortstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    if len(raw) > 255:
        raise ValueError(f"shortstr too long: {len(raw)} bytes")
    return bytes([len(raw)]) + raw


def longstr(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack("!I", len(raw)) + raw


def field_value(value: object) -> bytes:
    if isinstance(value, bool):
        return b"t" + bytes([value])
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return b"I" + struct.pack("!i", value)
        return b"l" + struct.pack("!q", value)
    if isinstance(value, str | bytes):
        return b"S" + longstr(value)
    if isinstance(value, dict):
        return b"F" + table(value)
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def table(values: dict[str, object]) -> bytes:
    body = b"".join(shortstr(k) + field_value(v) for k, v in values.items())
    return longstr(body)


def bits(*flags: bool) -> bytes:
    return bytes([sum(1 << i for i, flag in enumerate(flags) if flag)])


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return FRAME_HEAD.pack(frame_type, channel, len(payload)) + payload + bytes([FRAME_END])


def method_frame(channel: int, method: tuple[int, int], args: bytes = b"") -> bytes:
    return frame(FRAME_METHOD, channel, METHOD_ID.pack(*method) + args)


def ack_frame(delivery_tag: int, multiple: bool) -> bytes:
    """basic.ack on channel 1, packed in one call (the consumer's hot path)."""
    return _ACK_FRAME.pack(FRAME_METHOD, CHANNEL, 13, 60, 80, delivery_tag, multiple, FRAME_END)


@dataclass(frozen=True)
class PublishTemplate:
    """basic.publish + content header + body frames for one message, encoded once.

    `stamp_offset` is where the body starts inside `frames`: the first 8 body bytes carry the
    send timestamp (big-endian nanoseconds of `time.monotonic_ns`).
    """

    frames: bytes
    stamp_offset: int


def publish_template(
    routing_key: str, size: int, persistent: bool, frame_max: int, exchange: str = ""
) -> PublishTemplate:
    if size < U64.size:
        raise ValueError("message size must be at least 8 bytes (the send timestamp)")
    args = struct.pack("!H", 0) + shortstr(exchange) + shortstr(routing_key) + bits(False, False)
    method = method_frame(CHANNEL, BASIC_PUBLISH, args)
    flags, props = (0x1000, b"\x02") if persistent else (0, b"")  # delivery-mode = 2
    header = frame(FRAME_HEADER, CHANNEL, struct.pack("!HHQH", 60, 0, size, flags) + props)
    chunk = (frame_max or DEFAULT_FRAME_MAX) - 8
    body = bytes(size)
    bodies = b"".join(
        frame(FRAME_BODY, CHANNEL, body[i : i + chunk]) for i in range(0, size, chunk)
    )
    stamp = len(method) + len(header) + FRAME_HEAD.size
    return PublishTemplate(method + header + bodies, stamp)


class DeliveryLayout:
    """The layout of one consumer's deliveries, to read a run of them at once.

    A consumer of one queue gets messages that differ only in their delivery tag, their
    redelivered octet and their body; the load generator's bodies differ only in their first
    8 bytes (the send stamp), so every delivery (deliver, header and one body frame) has the
    bytes of the first one read frame by frame but for those 17. `take` views the whole
    messages that follow in the buffer as rows (numpy), checks every row's other bytes against
    the first message's, and counts the rows that match up to the first that does not, with
    no Python step per message. The views are gone when it returns (the buffer is resized).
    """

    def __init__(self, message: bytes, tag_at: int, stamp_at: int) -> None:
        self.length = len(message)
        self.tag_at = tag_at
        self.stamp_at = stamp_at
        self._template = np.frombuffer(message, np.uint8)
        self._head = message[:tag_at]  # a cheap look at the next message before numpy's
        self._fixed = np.ones(len(message), dtype=bool)
        self._fixed[tag_at : tag_at + 9] = False  # the tag and the redelivered octet
        self._fixed[stamp_at : stamp_at + U64.size] = False

    def take(self, buf: bytearray, at: int, stamps: bool) -> tuple[int, np.ndarray | None]:
        """How many messages from `at` on are laid out alike (0 below `RUN_MIN`), and their
        send stamps (native int64 nanoseconds) if `stamps`."""
        whole = (len(buf) - at) // self.length
        if whole < RUN_MIN or buf[at : at + self.tag_at] != self._head:
            return 0, None
        rows = np.frombuffer(buf, np.uint8, whole * self.length, at).reshape(whole, self.length)
        differ = ((rows != self._template) & self._fixed).any(axis=1)
        count = int(differ.argmax()) if differ.any() else whole
        if count < RUN_MIN:
            return 0, None
        if not stamps:
            return count, None
        span = rows[:count, self.stamp_at : self.stamp_at + U64.size]
        return count, span.copy().view(_STAMPS).ravel().astype(np.int64)


# ---------------------------------------------------------------------------- URL


@dataclass(frozen=True)
class BrokerUrl:
    host: str
    port: int
    user: str
    password: str
    vhost: str

    @classmethod
    def parse(cls, url: str) -> BrokerUrl:
        parts = urlparse(url)
        if parts.scheme != "amqp":
            raise ValueError(f"only amqp:// URLs are supported, got {url!r}")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5672,
            user=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            vhost=unquote(path) if path else "/",
        )


# ---------------------------------------------------------------------------- protocol


class Connection(asyncio.Protocol):
    """One AMQP connection with channel 1 open.

    Frames are split in `data_received`. Method frames whose (class, method) is in
    `fast_methods` go straight to their handler with the buffer and the argument span;
    content frames go to `on_header`/`on_body`; every other method is queued for `rpc`.
    A close from the broker or a lost socket fails the connection (`error`) and wakes all
    waiters, which then raise through `check()`.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.frame_max = DEFAULT_FRAME_MAX
        self.error: AmqpError | None = None
        self.received_ns = 0
        self.fast_methods: dict[tuple[int, int], FastHandler] = {}
        self._buf = bytearray()
        self._opened = False
        self._replies: asyncio.Queue[tuple[tuple[int, int], bytes] | None] = asyncio.Queue()
        self._writable = asyncio.Event()
        self._writable.set()

    # -- hooks for subclasses (defaults ignore content and chunk ends)
    def on_header(self, buf: bytearray, start: int, end: int) -> None:
        pass

    def on_body(self, buf: bytearray, start: int, end: int) -> int:
        """A body frame's payload `start`..`end`; returns where reading goes on: `end + 1`,
        or further when the hook read the frames that follow itself."""
        return end + 1

    def on_chunk_end(self) -> None:
        pass

    def on_fail(self) -> None:
        pass

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(AmqpError(f"connection lost: {exc}" if exc else "connection closed"))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        self.received_ns = time.monotonic_ns()  # arrival time of every frame in this chunk
        buf = self._buf
        buf += data
        if not self._opened and buf.startswith(b"AMQP"):
            self.fail(AmqpError(f"broker refused the protocol header: {bytes(buf[:8])!r}"))
            return
        pos, size_all = 0, len(buf)
        unpack = FRAME_HEAD.unpack_from
        while size_all - pos >= 8:
            frame_type, _, size = unpack(buf, pos)
            end = pos + 7 + size
            if end >= size_all:
                break
            if buf[end] != FRAME_END:
                self.fail(AmqpError(f"bad frame end at frame type {frame_type}"))
                return
            if frame_type == FRAME_BODY:
                pos = self.on_body(buf, pos + 7, end)
                continue
            if frame_type == FRAME_METHOD:
                self._method(buf, pos + 7, end)
            elif frame_type == FRAME_HEADER:
                self.on_header(buf, pos + 7, end)
            pos = end + 1
        del buf[:pos]
        self.on_chunk_end()

    def _method(self, buf: bytearray, start: int, end: int) -> None:
        key = METHOD_ID.unpack_from(buf, start)
        handler = self.fast_methods.get(key)
        if handler is not None:
            handler(buf, start + 4, end)
            return
        args = bytes(buf[start + 4 : end])
        if key in (CONNECTION_CLOSE, CHANNEL_CLOSE):
            self._closed_by_broker(key, args)
        elif key == BASIC_CANCEL:
            self.fail(AmqpError("consumer cancelled by the broker"))
        else:
            self._replies.put_nowait((key, args))

    def _closed_by_broker(self, key: tuple[int, int], args: bytes) -> None:
        code, text_len = struct.unpack_from("!HB", args)
        text = args[3 : 3 + text_len].decode(errors="replace")
        reply = CONNECTION_CLOSE_OK if key == CONNECTION_CLOSE else CHANNEL_CLOSE_OK
        self.send(method_frame(0 if key == CONNECTION_CLOSE else CHANNEL, reply))
        self.fail(AmqpError(text, code))

    # -- failure and flow
    def fail(self, error: AmqpError) -> None:
        if self.error is None:
            self.error = error
        self._writable.set()
        self._replies.put_nowait(None)
        self.on_fail()

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def drain(self) -> None:
        if not self._writable.is_set():
            await self._writable.wait()
        self.check()

    # -- synchronous methods on channel 1
    async def expect(self, method: tuple[int, int]) -> bytes:
        self.check()
        reply = await self._replies.get()
        if reply is None:
            self.check()
            raise AmqpError("connection failed")
        key, args = reply
        if key != method:
            raise AmqpError(f"expected method {method}, got {key}")
        return args

    async def rpc(self, method: tuple[int, int], args: bytes, reply: tuple[int, int]) -> bytes:
        self.send(method_frame(CHANNEL, method, args))
        return await self.expect(reply)

    async def handshake(self, url: BrokerUrl) -> None:
        self.send(PROTOCOL_HEADER)
        await self.expect(CONNECTION_START)
        client = table({"product": "warren-bench", "capabilities": {"publisher_confirms": True}})
        credentials = longstr(f"\0{url.user}\0{url.password}")
        start_ok = client + shortstr("PLAIN") + credentials + shortstr("en_US")
        self.send(method_frame(0, CONNECTION_START_OK, start_ok))
        channel_max, frame_max, _ = struct.unpack("!HIH", await self.expect(CONNECTION_TUNE))
        self.frame_max = frame_max or DEFAULT_FRAME_MAX
        tune_ok = struct.pack("!HIH", channel_max, frame_max, 0)
        self.send(method_frame(0, CONNECTION_TUNE_OK, tune_ok))
        self.send(method_frame(0, CONNECTION_OPEN, shortstr(url.vhost) + shortstr("") + b"\0"))
        await self.expect(CONNECTION_OPEN_OK)
        self._opened = True
        await self.rpc(CHANNEL_OPEN, shortstr(""), CHANNEL_OPEN_OK)

    async def declare_queue(self, name: str, durable: bool, arguments: dict[str, object]) -> None:
        args = struct.pack("!H", 0) + shortstr(name)
        args += bits(False, durable, False, False, False) + table(arguments)
        await self.rpc(QUEUE_DECLARE, args, QUEUE_DECLARE_OK)

    async def queue_depth(self, name: str) -> int:
        """The queue's ready messages, from a passive queue.declare's message-count."""
        args = struct.pack("!H", 0) + shortstr(name) + bits(True, False, False, False, False)
        reply = await self.rpc(QUEUE_DECLARE, args + table({}), QUEUE_DECLARE_OK)
        count: int = struct.unpack_from("!I", reply, 1 + reply[0])[0]
        return count

    async def delete_queue(self, name: str) -> None:
        args = struct.pack("!H", 0) + shortstr(name) + bits(False, False, False)
        await self.rpc(QUEUE_DELETE, args, QUEUE_DELETE_OK)

    async def qos(self, prefetch: int) -> None:
        await self.rpc(BASIC_QOS, struct.pack("!IHB", 0, prefetch, 0), BASIC_QOS_OK)

    async def consume(self, queue: str, no_ack: bool) -> None:
        args = struct.pack("!H", 0) + shortstr(queue) + shortstr("")
        args += bits(False, no_ack, False, False) + table({})
        await self.rpc(BASIC_CONSUME, args, BASIC_CONSUME_OK)

    async def confirm_select(self) -> None:
        await self.rpc(CONFIRM_SELECT, bits(False), CONFIRM_SELECT_OK)

    async def close(self, timeout: float = 5.0) -> None:
        """connection.close, wait (bounded) for close-ok, then drop the socket."""
        if self.error is None and self.transport is not None:
            args = struct.pack("!H", 200) + shortstr("bye") + struct.pack("!HH", 0, 0)
            self.send(method_frame(0, CONNECTION_CLOSE, args))
            with contextlib.suppress(TimeoutError, AmqpError):
                await asyncio.wait_for(self._await_close_ok(), timeout)
        if self.transport is not None:
            self.transport.close()

    async def _await_close_ok(self) -> None:
        while True:
            reply = await self._replies.get()
            if reply is None or reply[0] == CONNECTION_CLOSE_OK:
                return


ConnT = TypeVar("ConnT", bound=Connection)


async def connect(url: str, factory: Callable[[], ConnT]) -> ConnT:
    """Open a TCP connection, run the handshake and open channel 1."""
    broker = BrokerUrl.parse(url)
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(factory, broker.host, broker.port)
    try:
        await asyncio.wait_for(conn.handshake(broker), HANDSHAKE_TIMEOUT_S)
    except TimeoutError:
        if conn.transport is not None:
            conn.transport.close()
        where = f"{broker.host}:{broker.port}"
        raise AmqpError(f"no handshake from {where} within {HANDSHAKE_TIMEOUT_S} s") from None
    return conn
