"""A lean blocking AMQP 0-9-1 client for the pipeline, on Warren's sans-I/O codec.

Theory of operation:
1. pika turns every frame into callbacks and objects and hands the socket each frame on its
   own. The pipeline moves messages in bulk, so this client does large reads and writes on
   one socket instead: `receive` reads whatever arrived (up to 1 MiB, into one buffer kept
   for every read: `recv` would allocate the whole MiB each time) and parses every whole
   frame in one loop; a publisher writes a whole window of publishes as one buffer. The frame
   and method codec is `warren.amqp` (pure, no I/O); this module owns the socket.
2. Handshake (spec section 2.2.4): protocol header, `connection.start`/`start-ok` with
   PLAIN, `tune`/`tune-ok` (frame_max at most 128 KiB, the heartbeat the caller asks for
   unless the broker wants less), `open`/`open-ok`, then channel 1, the only one.
3. `call` sends a synchronous method and reads until its reply; deliveries, confirms and
   returns that arrive meanwhile go to the handlers like any others. A `channel.close` or
   `connection.close` from the broker raises `BrokerClosed` with its reply code and text.
4. Deliveries are parsed in bulk into columns (`Deliveries`, properties still raw: decoding
   them is the caller's business, `warren.spark.message` does it once per distinct byte
   string), which the owner takes after each `receive` (`take_delivered`). The common case,
   a run of basic.deliver frames each with its header and one body frame whole in the
   buffer, is parsed in one loop without a call per message (`take_deliveries`); anything
   else goes frame by frame. A returned message goes to `on_return`.
   Messages alike in all but their delivery tag, redelivered flag and body bytes (one
   queue's traffic: same exchange, routing key, properties and body size) are laid out
   alike, so after parsing one such message the decoder takes the run that follows it
   whole: it views the buffer as rows of the message's length (numpy), checks every row's
   other bytes against the first's, and takes the tags, flags and bodies of the rows that
   match column by column, with no Python step per message (`_alike_run`). A row that
   differs ends the run; it and what follows are parsed as before.
5. Threads: one thread reads (`receive`, then `take_delivered`); any thread may write (`send`
   holds a lock), so a reader's acknowledgements go out from Spark's thread while the
   consumer thread reads.
   The reading thread sends a heartbeat when nothing was written for half the interval.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar
from urllib.parse import unquote, urlsplit

import numpy as np

from warren.amqp.content import method_frame, parse_content_header
from warren.amqp.frames import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_METHOD,
    HEARTBEAT_FRAME,
    NEED_DATA,
    PROTOCOL_HEADER,
    FrameDecoder,
)
from warren.amqp.methods import (
    BasicAck,
    BasicNack,
    BasicReturn,
    ChannelClose,
    ChannelCloseOk,
    ChannelOpen,
    ChannelOpenOk,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionOpenOk,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
    ConnectionTuneOk,
    Method,
    decode_method,
)
from warren.amqp.table import encode_table
from warren.spark.message import Deliveries

CHANNEL: Final = 1
FRAME_MAX: Final = 131_072
READ_BYTES: Final = 1 << 20
CONNECT_TIMEOUT_S: Final = 30.0
_DELIVER_ID: Final = b"\x00\x3c\x00\x3c"
_TAG_AND_BIT = struct.Struct(">QB")
_FRAME_START = struct.Struct(">BHI")
_BODY_SIZE = struct.Struct(">Q")
_TAG = np.dtype(">u8")
RUN_MIN: Final = 16  # messages whole in the buffer worth viewing as rows (rule 4)

M = TypeVar("M", bound=Method)
# (reply code and text, exchange, routing key, raw properties, body)
ReturnHandler = Callable[[str, str, str, bytes, bytes], None]


class BrokerClosed(ConnectionError):
    """The broker closed the channel or the connection: its reply code and text."""

    def __init__(self, what: str, method: ChannelClose | ConnectionClose) -> None:
        self.reply_code = method.reply_code
        super().__init__(f"broker closed the {what}: {method.reply_code} {method.reply_text}")


@dataclasses.dataclass(frozen=True)
class Address:
    host: str
    port: int
    tls: bool
    user: str
    password: str
    vhost: str

    @classmethod
    def parse(cls, uri: str) -> Address:
        """`amqp[s]://user:pass@host:port/vhost` as RabbitMQ's URI spec reads it."""
        parts = urlsplit(uri)
        tls = parts.scheme == "amqps"
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        return cls(
            host=parts.hostname or "localhost",
            port=parts.port or (5671 if tls else 5672),
            tls=tls,
            user=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            vhost=unquote(path) if parts.path else "/",
        )


def _split_deliver(payload: bytes | bytearray, at: int) -> tuple[str, int, bool, str, str]:
    """basic.deliver's fields after its class and method ids at `at`, unrolled (it comes once
    per message)."""
    end = at + 1 + payload[at]
    consumer_tag = payload[at + 1 : end].decode()
    delivery_tag, redelivered = _TAG_AND_BIT.unpack_from(payload, end)
    start = end + 9
    end = start + 1 + payload[start]
    exchange = payload[start + 1 : end].decode()
    routing_key = payload[end + 1 : end + 1 + payload[end]].decode()
    return consumer_tag, delivery_tag, bool(redelivered), exchange, routing_key


def take_deliveries(decoder: FrameDecoder, into: Deliveries) -> None:
    """The fast path for the common delivery (rule 4): every basic.deliver at the head of
    the decoder's buffer that is whole with its header and one body frame (or none, for an
    empty body), one after the other: consume them and append their fields, raw properties
    and body to `into`. Stops, consuming nothing more, at anything else (another frame,
    frames still arriving, a frame that is not as the spec says), which `next_frame` then
    reads with all its checks."""
    buffer, start = decoder.window()
    available = len(buffer)
    frame_start, body_size_of = _FRAME_START.unpack_from, _BODY_SIZE.unpack_from
    queues, tags, redelivered, exchanges, keys, properties, bodies = into.columns()
    view = memoryview(buffer)
    try:
        while available - start >= 12 and buffer[start + 7 : start + 11] == _DELIVER_ID:
            frame_type, _channel, size = frame_start(buffer, start)
            end = start + 7 + size
            if frame_type != FRAME_METHOD or end >= available or buffer[end] != FRAME_END:
                break
            header = end + 1
            if available - header < 22:
                break
            frame_type, _channel, size = frame_start(buffer, header)
            header_end = header + 7 + size
            if (
                frame_type != FRAME_HEADER
                or header_end >= available
                or buffer[header_end] != FRAME_END
            ):
                break
            (body_size,) = body_size_of(buffer, header + 11)
            body_start = header_end + 1
            if body_size == 0:
                body, after = b"", body_start
            else:
                if available - body_start < 8:
                    break
                frame_type, _channel, size = frame_start(buffer, body_start)
                after = body_start + 8 + size
                if frame_type != FRAME_BODY or size != body_size or after > available:
                    break
                if buffer[after - 1] != FRAME_END:
                    break
                body = bytes(view[body_start + 7 : after - 1])
            queue, tag, bit, exchange, routing_key = _split_deliver(buffer, start + 11)
            raw = bytes(view[header + 19 : header_end])
            run = _alike_run(view, start, after, start + 12 + buffer[start + 11], body_start)
            if run is None:
                tags.append(tag)
                redelivered.append(bit)
                bodies.append(body)
                count = 1
            else:
                run_tags, run_redelivered, run_bodies = run
                tags.extend(run_tags)
                redelivered.extend(run_redelivered)
                bodies.extend(run_bodies)
                count = len(run_tags)
            queues.extend([queue] * count)
            exchanges.extend([exchange] * count)
            keys.extend([routing_key] * count)
            properties.extend([raw] * count)
            start += (after - start) * count
    finally:
        view.release()
    decoder.advance_to(start)


def _alike_run(
    view: memoryview, first: int, after: int, tag_at: int, body_at: int
) -> tuple[list[int], list[bool], list[bytes]] | None:
    """The delivery tags, redelivered flags and bodies of the run of messages alike the one
    parsed at `first`..`after` (it included), its tag at `tag_at`, its body frame at
    `body_at` (rule 4); None when fewer than `RUN_MIN` could follow or the next is not
    alike (the caller then takes the one message)."""
    length = after - first
    rows_whole = (len(view) - first) // length
    if rows_whole < RUN_MIN:
        return None
    tag, flag = tag_at - first, tag_at + 8 - first
    body, body_end = body_at - first + 7, after - first - 1  # the body frame's payload
    if body > body_end:  # an empty body: no body frame
        body = body_end = length
    # the bytes that must repeat: everything but the tag, the redelivered octet, the body
    same = ((0, tag), (flag + 1, body), (body_end, length))
    second = first + length
    if any(view[first + a : first + b] != view[second + a : second + b] for a, b in same):
        return None  # a cheap look at the next message first: no numpy for a mixed stream
    rows = np.frombuffer(view, np.uint8, rows_whole * length, first).reshape(rows_whole, length)
    alike = np.ones(rows_whole, dtype=bool)
    for a, b in same:
        alike &= (rows[:, a:b] == rows[0, a:b]).all(axis=1)
    count = rows_whole if alike.all() else int(alike.argmin())  # the first that differs
    rows = rows[:count]
    tags = np.ascontiguousarray(rows[:, tag:flag]).view(_TAG).ravel().tolist()
    redelivered = (rows[:, flag] != 0).tolist()
    size = body_end - body
    blob = rows[:, body:body_end].tobytes()
    bodies = [blob[at : at + size] for at in range(0, len(blob), size)] if size else [b""] * count
    del rows  # the buffer grows again only once no array views it
    return tags, redelivered, bodies


@dataclasses.dataclass(slots=True)
class _Assembly:
    """A delivered or returned message whose frames arrive in more than one read."""

    fields: tuple[Any, ...]  # of basic.deliver (5) or basic.return (3)
    properties: bytes = b""
    size: int = 0
    received: int = 0
    parts: list[bytes] = dataclasses.field(default_factory=list)


class Client:
    """One connection with one channel; see the module's rules."""

    def __init__(
        self,
        uri: str,
        heartbeat_s: int,
        name: str = "warren.spark",
        connected: socket.socket | None = None,
    ) -> None:
        """Connect to `uri` (or speak over `connected`, a socket already open to a broker)."""
        address = Address.parse(uri)
        self.delivered: Deliveries | None = None  # rule 4: set by a client that consumes
        self.on_confirm: Callable[[int, bool, bool], None] | None = None  # tag, multiple, ack
        self.on_return: ReturnHandler | None = None
        self._decoder = FrameDecoder(FRAME_MAX)
        self._read_into = memoryview(bytearray(READ_BYTES))  # rule 1: one buffer for every read
        self._replies: list[Method] = []
        self._content: _Assembly | None = None  # a message in several reads (rule 4)
        self._write_lock = threading.Lock()
        self._written_at = time.monotonic()
        self.closed: BrokerClosed | None = None
        self.heartbeat_s = 0  # until tuned
        self.frame_max = FRAME_MAX
        raw = connected or socket.create_connection((address.host, address.port), CONNECT_TIMEOUT_S)
        if connected is None:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if address.tls:
            import ssl  # only amqps: tens of milliseconds in every process that reads

            raw = ssl.create_default_context().wrap_socket(raw, server_hostname=address.host)
        self._socket = raw
        self._handshake(address, heartbeat_s, name)

    # -- rule 2 ------------------------------------------------------------------------

    def _handshake(self, address: Address, heartbeat_s: int, name: str) -> None:
        self.send(PROTOCOL_HEADER)
        self._await(ConnectionStart)
        properties = {
            "connection_name": name,
            "product": "warren.spark",
            "capabilities": {"publisher_confirms": True, "basic.nack": True},
        }
        response = f"\0{address.user}\0{address.password}".encode()
        self.send(method_frame(0, ConnectionStartOk(encode_table(properties), "PLAIN", response)))
        tune = self._await(ConnectionTune)
        frame_max = min(tune.frame_max or FRAME_MAX, FRAME_MAX)
        self.heartbeat_s = min(heartbeat_s, tune.heartbeat) if tune.heartbeat else heartbeat_s
        self._decoder.frame_max = frame_max
        self.frame_max = frame_max
        self.send(method_frame(0, ConnectionTuneOk(tune.channel_max, frame_max, self.heartbeat_s)))
        self.send(method_frame(0, ConnectionOpen(address.vhost)))
        self._await(ConnectionOpenOk)
        self.call(ChannelOpen(), ChannelOpenOk)

    # -- writing -----------------------------------------------------------------------

    def send(self, data: bytes | memoryview) -> None:
        with self._write_lock:
            self._socket.sendall(data)
            self._written_at = time.monotonic()

    def heartbeat_due(self) -> bool:
        interval = self.heartbeat_s / 2
        return bool(interval) and time.monotonic() - self._written_at >= interval

    # -- reading (rules 3 and 4) -------------------------------------------------------

    def call(self, request: Method, reply: type[M]) -> M:
        self.send(method_frame(CHANNEL, request))
        return self._await(reply)

    def _await(self, reply: type[M]) -> M:
        while True:
            for index, method in enumerate(self._replies):
                if isinstance(method, reply):
                    del self._replies[index]
                    return method
            if not self.receive(CONNECT_TIMEOUT_S):
                raise TimeoutError(f"no {reply.NAME} from the broker in {CONNECT_TIMEOUT_S}s")

    def receive(self, timeout_s: float) -> bool:
        """Read once (waiting up to `timeout_s`) and handle every whole frame; False when
        nothing arrived in time. Raises `BrokerClosed`, `ConnectionError`."""
        if self.heartbeat_due():
            self.send(HEARTBEAT_FRAME)
        self._socket.settimeout(timeout_s)
        try:
            count = self._socket.recv_into(self._read_into)
        except TimeoutError:
            return False
        if not count:
            raise ConnectionError("the broker closed the connection")
        decoder = self._decoder
        decoder.feed(self._read_into[:count].tobytes())
        delivered = self.delivered
        while True:
            if self._content is None and delivered is not None:
                take_deliveries(decoder, delivered)
            frame = decoder.next_frame()
            if frame is NEED_DATA:
                break
            frame_type, channel, payload = frame
            if frame_type == FRAME_METHOD:
                if payload.startswith(_DELIVER_ID):
                    self._start_content(_split_deliver(payload, 4))
                else:
                    self._on_method(channel, payload)
            elif frame_type == FRAME_HEADER:
                self._on_header(payload)
            elif frame_type == FRAME_BODY:
                self._on_body(payload)
        decoder.compact()
        return True

    def take_delivered(self) -> Deliveries:
        """The messages delivered since the last call (rule 4)."""
        assert self.delivered is not None, "this client does not consume"
        delivered, self.delivered = self.delivered, Deliveries()
        return delivered

    def _start_content(self, fields: tuple[Any, ...]) -> None:
        content = self._decoder.take_content(CHANNEL)
        if content is None:  # frames still on their way: assemble them one by one
            self._content = _Assembly(fields)
            return
        header, body = content
        _class_id, _size, properties = parse_content_header(header)
        self._deliver(fields, properties, body)

    def _on_header(self, payload: bytes) -> None:
        assert self._content is not None, "content header without a method"
        _class_id, self._content.size, self._content.properties = parse_content_header(payload)
        if self._content.size == 0:
            self._finish_content()

    def _on_body(self, payload: bytes) -> None:
        assert self._content is not None, "body frame without a header"
        self._content.parts.append(payload)
        self._content.received += len(payload)
        if self._content.received >= self._content.size:
            self._finish_content()

    def _finish_content(self) -> None:
        assert self._content is not None
        content, self._content = self._content, None
        self._deliver(content.fields, content.properties, b"".join(content.parts))

    def _deliver(self, fields: tuple[Any, ...], properties: bytes, body: bytes) -> None:
        if len(fields) == 3:  # basic.return's reason, exchange and routing key
            assert self.on_return is not None, "a message came back and nobody listens"
            reason, exchange, routing_key = fields
            self.on_return(reason, exchange, routing_key, properties, body)
            return
        assert self.delivered is not None, "a message arrived and nobody listens"
        queue, delivery_tag, redelivered, exchange, routing_key = fields
        self.delivered.append(
            queue, delivery_tag, redelivered, exchange, routing_key, properties, body
        )

    def _on_method(self, channel: int, payload: bytes) -> None:
        method = decode_method(payload)
        if isinstance(method, BasicAck | BasicNack):
            assert self.on_confirm is not None, "a confirm arrived and nobody listens"
            self.on_confirm(method.delivery_tag, method.multiple, isinstance(method, BasicAck))
        elif isinstance(method, BasicReturn):
            reason = f"{method.reply_code} {method.reply_text}"
            self._start_content((reason, method.exchange, method.routing_key))
        elif isinstance(method, ChannelClose):
            self.send(method_frame(CHANNEL, ChannelCloseOk()))
            self.closed = BrokerClosed("channel", method)
            raise self.closed
        elif isinstance(method, ConnectionClose):
            self.send(method_frame(0, ConnectionCloseOk()))
            self.closed = BrokerClosed("connection", method)
            raise self.closed
        else:
            self._replies.append(method)

    def close(self) -> None:
        """Close the connection politely when it is still open, then the socket."""
        try:
            if self.closed is None:
                self.send(method_frame(0, ConnectionClose(200, "Goodbye")))
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline and not any(
                    isinstance(method, ConnectionCloseOk) for method in self._replies
                ):
                    self.receive(0.1)
        except (OSError, BrokerClosed):
            pass
        finally:
            self._socket.close()
