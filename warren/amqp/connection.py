"""The server side of one AMQP 0-9-1 connection, without I/O.

Theory of operation (after h11: bytes in, events out, bytes out):
1. `receive_data(bytes)` buffers what the socket read; `next_event()` returns the next
   `Event` or `NEED_DATA`. Every protocol violation raises `HardError` with the reply code
   RabbitMQ uses; the caller sends `connection.close` and stops reading.
2. Handshake order is a table: the protocol header, then ``connection.start-ok``,
   ``connection.tune-ok``, ``connection.open``, each only in its state; nothing else is
   accepted before the connection is open.
3. Channels: a method on a channel that is not open is 504 CHANNEL_ERROR, except
   ``channel.open``. After the server closes a channel (`close_channel`) every frame on it
   is dropped until the client's ``channel.close-ok`` (or ``channel.close``) arrives,
   as the spec requires (section 2.3.7).
4. Content assembly: a method that carries content (``basic.publish``) is followed by one
   content header and body frames up to the header's body size; anything else on that
   channel in between is 505 UNEXPECTED_FRAME. A whole message is one `Content` event.
5. Frame sizes: frames are limited by frame_max as advertised, then as negotiated.
6. A ``basic.publish`` payload is decoded once per connection (up to
   `PUBLISHES_KEPT` distinct payloads): a publisher repeats its exchange, routing key
   and flags, and every `Content` with the same payload shares one `BasicPublish`, which
   nothing mutates.

It never touches sockets, clocks or the broker: the runtime decides what a method means.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from warren.amqp.content import BASIC_CLASS_ID, parse_content_header
from warren.amqp.frames import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_MIN_SIZE,
    NEED_DATA,
    FrameDecoder,
    NeedData,
    ProtocolHeader,
    erlang_binary,
)
from warren.amqp.methods import (
    BasicPublish,
    ChannelClose,
    ChannelCloseOk,
    ChannelOpen,
    ConnectionClose,
    ConnectionCloseOk,
    ConnectionOpen,
    ConnectionStartOk,
    ConnectionTuneOk,
    ConnectionUpdateSecret,
    Method,
    cannot_decode,
    decode_method,
)
from warren.errors import (
    HardError,
    channel_error,
    command_invalid,
    frame_error,
    not_allowed,
    unexpected_frame,
)

DEFAULT_FRAME_MAX: Final = 131072
DEFAULT_CHANNEL_MAX: Final = 2047
_CLOSE_IDS: Final = (b"\x00\x0a\x00\x32", b"\x00\x0a\x00\x33")  # connection.close, close-ok
_PUBLISH_ID: Final = b"\x00\x3c\x00\x28"
PUBLISHES_KEPT: Final = 256  # decoded basic.publish payloads a connection remembers


class State(enum.Enum):
    AWAITING_HEADER = "awaiting protocol header"
    AWAITING_START_OK = "awaiting connection.start-ok"
    AWAITING_TUNE_OK = "awaiting connection.tune-ok"
    AWAITING_OPEN = "awaiting connection.open"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_HANDSHAKE: Final[dict[State, tuple[type[Method], State]]] = {
    State.AWAITING_START_OK: (ConnectionStartOk, State.AWAITING_TUNE_OK),
    State.AWAITING_TUNE_OK: (ConnectionTuneOk, State.AWAITING_OPEN),
    State.AWAITING_OPEN: (ConnectionOpen, State.OPEN),
}


@dataclass(frozen=True, slots=True)
class ProtocolHeaderReceived:
    """The first eight bytes arrived; `ok` is False for a protocol we do not speak."""

    ok: bool


@dataclass(frozen=True, slots=True)
class MethodReceived:
    channel: int
    method: Method


@dataclass(slots=True, init=False)  # its __init__ written out: `warren.queue.Meta`'s docstring
class Content:
    """A whole published message: its method, raw properties and body."""

    channel: int
    method: BasicPublish
    properties_raw: bytes
    body: bytes
    route: bytes = b""  # the publish's exchange and routing key shortstrs, as received

    def __init__(
        self,
        channel: int,
        method: BasicPublish,
        properties_raw: bytes,
        body: bytes,
        route: bytes = b"",
    ) -> None:
        self.channel = channel
        self.method = method
        self.properties_raw = properties_raw
        self.body = body
        self.route = route


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


Event = ProtocolHeaderReceived | MethodReceived | Content | Heartbeat
HEARTBEAT: Final = Heartbeat()


class _Assembly:
    """A message whose header or body frames are still arriving."""

    __slots__ = ("body_size", "chunks", "method", "properties_raw", "received", "route")

    def __init__(self, method: BasicPublish, route: bytes) -> None:
        self.method = method
        self.route = route
        self.body_size = -1
        self.properties_raw = b""
        self.chunks: list[bytes] = []
        self.received = 0


class ServerConnection:
    """Protocol state of one client connection, seen from the broker."""

    def __init__(
        self, frame_max: int = DEFAULT_FRAME_MAX, channel_max: int = DEFAULT_CHANNEL_MAX
    ) -> None:
        self.state = State.AWAITING_HEADER
        self.frame_max = frame_max
        self.channel_max = channel_max
        self._decoder = FrameDecoder(frame_max)
        self.open_channels: set[int] = set()
        self._closing_channels: set[int] = set()
        self._assembling: dict[int, _Assembly] = {}
        self._publishes: dict[bytes, tuple[BasicPublish, bytes]] = {}  # point 6

    # --- input ---------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        if self.state is not State.CLOSED:  # after the close handshake input is discarded
            self._decoder.feed(data)

    def next_event(self) -> Event | NeedData:
        decoder = self._decoder
        while True:
            state = self.state
            if state is State.OPEN:
                # a whole publish on an open channel in one step, without the checks of
                # `_on_frame` (no channel is assembling, so none expects a content frame)
                publish = None if self._assembling else decoder.take_publish(self.open_channels)
                if publish is not None:
                    channel, payload, properties_raw, body = publish
                    decoded = self._publishes.get(payload)
                    if decoded is None:
                        decoded = self._remember_publish(payload)
                    return Content(channel, decoded[0], properties_raw, body, decoded[1])
            elif state is State.AWAITING_HEADER:
                header = self._decoder.read_protocol_header()
                if header is ProtocolHeader.INCOMPLETE:
                    return NEED_DATA
                ok = header is ProtocolHeader.OK
                self.state = State.AWAITING_START_OK if ok else State.CLOSED
                return ProtocolHeaderReceived(ok)
            elif state is State.CLOSED:
                return NEED_DATA
            frame = decoder.next_frame()
            if frame is NEED_DATA:
                decoder.compact()
                return NEED_DATA
            event = self._on_frame(*frame)
            if event is not None:
                return event

    def _on_frame(self, frame_type: int, channel: int, payload: bytes) -> Event | None:
        if frame_type == FRAME_HEARTBEAT:
            if channel != 0:
                raise frame_error(f"heartbeat frame on non-zero channel {channel}")
            return HEARTBEAT
        if self.state is State.CLOSING:
            # After our connection.close only close/close-ok matter (spec, connection.close);
            # a client caught mid-publish still sends other methods, headers and bodies.
            if channel == 0 and frame_type == FRAME_METHOD and payload[:4] in _CLOSE_IDS:
                return self._on_handshake_method(channel, decode_method(payload))
            return None
        if channel in self._closing_channels:
            return self._on_closing_channel(frame_type, channel, payload)
        assembly = self._assembling.get(channel)
        if assembly is not None:
            return self._on_content_frame(frame_type, channel, payload, assembly)
        # a publish on an open channel first, without the checks below: a channel is open
        # only once the connection is (and the closing state was handled above)
        if (
            frame_type == FRAME_METHOD
            and payload[:4] == _PUBLISH_ID
            and channel in self.open_channels
        ):
            publish, route = self._publishes.get(payload) or self._remember_publish(payload)
            content = self._decoder.take_content(channel)
            if content is not None:
                return Content(channel, publish, content[0][12:], content[1], route)
            self._assembling[channel] = _Assembly(publish, route)
            return None
        if frame_type != FRAME_METHOD or (channel and self.state is State.AWAITING_OPEN):
            # before connection.open RabbitMQ reads channel 0 only, and quotes anything else
            if channel == 0 or frame_type == FRAME_METHOD:
                raise unexpected_frame(f"type {frame_type}, all octets = {erlang_binary(payload)}")
            raise unexpected_frame("expected method frame, got non method frame instead")
        method = decode_method(payload)
        if self.state is not State.OPEN:
            return self._on_handshake_method(channel, method)
        return self._on_method(channel, method)

    def _remember_publish(self, payload: bytes) -> tuple[BasicPublish, bytes]:
        """A basic.publish payload not decoded before, decoded and remembered (point 6)."""
        decoded = _decode_publish(payload)
        if len(self._publishes) >= PUBLISHES_KEPT:
            self._publishes.clear()
        self._publishes[payload] = decoded
        return decoded

    def _on_handshake_method(self, channel: int, method: Method) -> Event:
        if isinstance(method, ConnectionClose | ConnectionCloseOk) and channel == 0:
            self.state = State.CLOSED
            return MethodReceived(channel, method)
        expected, next_state = _HANDSHAKE[self.state]
        if self.state is State.AWAITING_OPEN and not isinstance(method, expected):
            raise _unexpected_in("opening", method)
        if channel != 0 or not isinstance(method, expected):
            raise command_invalid(
                f"expected '{expected.NAME.replace('-', '_')}', got '{method.NAME}'"
            ).at(method.CLASS_ID, method.METHOD_ID)
        self.state = next_state
        return MethodReceived(channel, method)

    def _on_method(self, channel: int, method: Method) -> Event:
        if channel == 0:
            # what an open connection takes on channel 0, as RabbitMQ's reader in `running`
            if not isinstance(method, ConnectionClose | ConnectionCloseOk | ConnectionUpdateSecret):
                raise _unexpected_in("running", method)
            if isinstance(method, ConnectionClose | ConnectionCloseOk):
                self.state = State.CLOSED
            return MethodReceived(channel, method)
        if isinstance(method, ChannelOpen):
            self._open_channel(channel, method)
        elif channel not in self.open_channels:
            raise channel_error("expected 'channel.open'").at(method.CLASS_ID, method.METHOD_ID)
        elif method.CLASS_ID == 10:  # a channel process has no connection methods
            raise command_invalid("unimplemented method").at(method.CLASS_ID, method.METHOD_ID)
        elif isinstance(method, ChannelClose):
            self.open_channels.discard(channel)
        elif method.HAS_CONTENT:
            raise unexpected_frame(f"method '{method.NAME}' carries content only from server")
        return MethodReceived(channel, method)

    def _open_channel(self, channel: int, method: ChannelOpen) -> None:
        if channel in self.open_channels:
            raise channel_error("second 'channel.open' seen").at(20, 10)
        # channel_max bounds how many channels are open (any number may be used), and a
        # channel the server closed counts until the client's close-ok, as in RabbitMQ
        opened = len(self.open_channels) + len(self._closing_channels)
        if self.channel_max and opened >= self.channel_max:
            raise not_allowed(
                f"number of channels opened ({opened}) has reached the negotiated "
                f"channel_max ({self.channel_max})"
            )
        self.open_channels.add(channel)

    def _on_closing_channel(self, frame_type: int, channel: int, payload: bytes) -> Event | None:
        if frame_type != FRAME_METHOD:
            return None
        if payload[:4] in (b"\x00\x14\x00\x29", b"\x00\x14\x00\x28"):
            method = decode_method(payload)
            self._closing_channels.discard(channel)
            if isinstance(method, ChannelClose):
                # Both sides closed at once: answer it, and the channel is gone.
                return MethodReceived(channel, method)
            assert isinstance(method, ChannelCloseOk)
            return MethodReceived(channel, method)
        return None

    def _on_content_frame(
        self, frame_type: int, channel: int, payload: bytes, assembly: _Assembly
    ) -> Event | None:
        if assembly.body_size < 0:
            if frame_type != FRAME_HEADER:
                raise unexpected_frame(
                    "expected content header for class 60, got non content header frame instead"
                ).at(60, 40)
            class_id, body_size, properties_raw = parse_content_header(payload)
            if class_id != BASIC_CLASS_ID:
                raise unexpected_frame(
                    f"expected content header for class 60, got one for class {class_id} instead"
                ).at(60, 40)
            assembly.body_size = body_size
            assembly.properties_raw = properties_raw
        elif frame_type != FRAME_BODY:
            raise unexpected_frame("expected content body, got non content body frame instead").at(
                60, 40
            )
        else:
            assembly.chunks.append(payload)
            assembly.received += len(payload)
            if assembly.received > assembly.body_size:
                raise frame_error(
                    f"content body larger than declared: {assembly.received} > {assembly.body_size}"
                )
        if assembly.received < assembly.body_size:
            return None
        del self._assembling[channel]
        chunks = assembly.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return Content(channel, assembly.method, assembly.properties_raw, body, assembly.route)

    # --- the server's side of the conversation -----------------------------------------

    def tune(self, frame_max: int, channel_max: int) -> None:
        """Apply the limits the client agreed to in ``connection.tune-ok``: each within the
        minimum and the server's value, 0 ("no limit") only when the server has none, as
        RabbitMQ's reader checks them."""
        _negotiated("frame_max", frame_max, FRAME_MIN_SIZE, self.frame_max)
        _negotiated("channel_max", channel_max, 1, self.channel_max)
        if frame_max:
            self.frame_max = frame_max
            self._decoder.frame_max = frame_max
        if channel_max:
            self.channel_max = channel_max

    # --- a connection that moves to another process (`warren.runtime.workers`) ---------------

    def settled(self) -> bool:
        """Open, with no message half-received and no channel the server closed: all the
        state left is the negotiated limits, the open channels and the unread bytes."""
        return self.state is State.OPEN and not self._assembling and not self._closing_channels

    def unread(self) -> bytes:
        """What was received and not yet read as events."""
        return self._decoder.unread()

    def resume(self, channels: list[int]) -> None:
        """Take over an open connection that another process negotiated (`settled` there),
        its limits applied with `tune`."""
        self.state = State.OPEN
        self.open_channels = set(channels)

    def close_channel(self, channel: int) -> None:
        """The server sent ``channel.close``: drop frames on it until the client answers."""
        self.open_channels.discard(channel)
        self._assembling.pop(channel, None)
        self._closing_channels.add(channel)

    def forget_channel(self, channel: int) -> None:
        """The client closed the channel and we answered ``close-ok``."""
        self.open_channels.discard(channel)
        self._assembling.pop(channel, None)

    def close(self) -> None:
        """The server sent ``connection.close``: only close/close-ok are read from now on."""
        self.state = State.CLOSING
        self.open_channels.clear()  # so that a publish no longer starts a content assembly
        self._assembling.clear()


def _negotiated(field: str, value: int, minimum: int, server: int) -> None:
    if value and value < minimum:
        raise not_allowed(
            f"negotiated {field} = {value} is lower than the minimum allowed value ({minimum})"
        ).at(10, 31)
    if server and (value == 0 or value > server):
        raise not_allowed(
            f"negotiated {field} = {value} is higher than the maximum allowed value ({server})"
        ).at(10, 31)


def _unexpected_in(state: str, method: Method) -> HardError:
    """A method channel 0 does not take in this state (RabbitMQ's names: opening, running)."""
    error = channel_error(f"unexpected method in connection state {state}")
    error.at(method.CLASS_ID, method.METHOD_ID)
    return error


def _decode_publish(payload: bytes) -> tuple[BasicPublish, bytes]:
    """basic.publish, unrolled: it is the method of nearly every frame a broker reads.
    Also returns its exchange and routing key shortstrs, which deliveries reuse."""
    try:
        offset = 7 + payload[6]
        exchange = payload[7:offset].decode("utf-8", "surrogateescape")
        end = offset + 1 + payload[offset]
        routing_key = payload[offset + 1 : end].decode("utf-8", "surrogateescape")
        (bits,) = payload[end:]  # the last octet: a shorter or a longer payload is refused
    except (IndexError, ValueError) as error:
        raise cannot_decode(BasicPublish, payload) from error
    return BasicPublish(0, exchange, routing_key, bool(bits & 1), bool(bits & 2)), payload[6:end]
