"""A client connection handed from one worker process to another, as a versioned message.

Theory of operation:
1. A worker hands a connection over only while it is *quiet* (`quiet`): open, every reply
   written, no message half-received, nothing held here (no consumer, unacknowledged
   delivery, exclusive queue, publish, pending confirm or transaction content), and not
   TLS (its session keys live in this process). Then its whole state is what `capture`
   reads: the negotiated limits and heartbeat, the user, vhost, client properties and
   capabilities, each open channel's prefetch, confirm and tx modes and last declared
   queue, and the bytes received and not yet read (the event that caused the move,
   re-encoded as it came, first).
2. `encode` writes that state as ``MAGIC``, a version octet and the state as msgspec
   MessagePack (the client properties inside as an AMQP field table, so every field type
   survives); `decode` refuses another version. The message travels in a memfd beside
   the socket (`warren.runtime.workers.worker`).
3. The receiving worker's connection (`taken_over`) replays what the client negotiated
   through the connection's own handlers (tune-ok, connection.open, channel.open,
   basic.qos, confirm.select, tx.select) with their replies discarded, so the same checks
   apply (a vhost deleted meanwhile closes the connection as connection.open would), then
   reads the unread bytes as if they had just arrived, ahead of anything the socket
   brings, and handles them from the next loop turn on (as many per turn as any read:
   a backlog past that pauses the socket, which it can only once the loop reads it).
   The client sees one unbroken connection.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

import msgspec

from warren.amqp import methods as m
from warren.amqp.connection import Content, MethodReceived
from warren.amqp.content import content_frames, method_frame
from warren.amqp.methods import encode_method
from warren.amqp.table import decode_table, encode_table
from warren.errors import HardError
from warren.runtime.connection import AmqpConnection
from warren.runtime.transactions import Transaction

if TYPE_CHECKING:
    from warren.runtime.broker import Broker

MAGIC = b"WHND"
VERSION = 2  # 1: a JSON head, then the field table and the unread bytes


class ChannelState(msgspec.Struct, frozen=True, array_like=True):
    number: int
    prefetch_count: int
    global_prefetch: int
    confirm: bool
    transactional: bool
    last_queue: str


class ConnectionState(msgspec.Struct, frozen=True, array_like=True):
    user: str
    vhost: str
    auth_mechanism: str
    client_properties: bytes  # an encoded AMQP field table (module doc, 2)
    cancel_notify: bool
    blocked_capability: bool
    failure_close: bool
    frame_max: int
    channel_max: int
    heartbeat: int
    connected_at_ms: int
    moves: int  # hand-overs so far, this one included
    channels: tuple[ChannelState, ...]
    unread: bytes


def quiet(connection: AmqpConnection) -> bool:
    """Whether the connection's whole state is what `capture` carries (module doc, 1);
    writes what it has to send first."""
    transport = connection.transport
    if (
        transport is None
        or transport.is_closing()
        or transport.get_extra_info("ssl_object") is not None
        or not connection.protocol.settled()
        or connection.exclusive_queues
        or connection.published
        or connection.blocked
        or connection._suspended
        or connection._authenticating
        or connection._flow_held
    ):
        return False
    for channel in connection.channels.values():
        transaction = channel.transaction
        if (
            channel.consumers
            or channel.unacked
            or channel.replicating
            or channel.reply_token is not None
            or (channel.confirms is not None and channel.confirms.publish_seq)
            or (transaction is not None and (transaction.publishes or transaction.settlements))
        ):
            return False
    connection.flush()
    return transport.get_write_buffer_size() == 0


def capture(connection: AmqpConnection, event: object, moves: int) -> ConnectionState:
    """The state of a `quiet` connection, with `event` (just read) to be read again."""
    protocol = connection.protocol
    return ConnectionState(
        user=connection.user,
        vhost=connection.vhost.name,
        auth_mechanism=connection.auth_mechanism,
        client_properties=encode_table(connection.client_properties),
        cancel_notify=connection.cancel_notify,
        blocked_capability=connection._blocked_capability,
        failure_close=connection._failure_close,
        frame_max=protocol.frame_max,
        channel_max=protocol.channel_max,
        heartbeat=connection.heartbeat_s,
        connected_at_ms=connection.connected_at_ms,
        moves=moves,
        channels=tuple(
            ChannelState(
                channel.number,
                channel.prefetch_count,
                channel.global_prefetch,
                channel.confirms is not None,
                channel.transaction is not None,
                channel.last_queue,
            )
            for channel in connection.channels.values()
        ),
        unread=_frames(event, protocol.frame_max) + protocol.unread(),
    )


def _frames(event: object, frame_max: int) -> bytes:
    """An event read from the client, as the frames it came in."""
    if type(event) is Content:
        payload = encode_method(event.method)
        return content_frames(event.channel, payload, event.properties_raw, event.body, frame_max)
    assert type(event) is MethodReceived
    return method_frame(event.channel, event.method)


_decoder: Final = msgspec.msgpack.Decoder(ConnectionState)


def encode(state: ConnectionState) -> bytes:
    return MAGIC + bytes((VERSION,)) + msgspec.msgpack.encode(state)


def decode(data: bytes) -> ConnectionState:
    """Raises ValueError for anything but an `encode`d state of this version."""
    if len(data) < len(MAGIC) + 1:
        raise ValueError("hand-over message too short")
    if data[: len(MAGIC)] != MAGIC:
        raise ValueError(f"not a hand-over message: it starts {data[: len(MAGIC)]!r}")
    version = data[len(MAGIC)]
    if version != VERSION:
        raise ValueError(f"hand-over message of version {version}: expected {VERSION}")
    return _decoder.decode(data[len(MAGIC) + 1 :])  # msgspec.DecodeError is a ValueError


def taken_over(broker: Broker, state: ConnectionState) -> AmqpConnection:
    """A connection another worker negotiated and handed over (module doc, 3)."""
    return AmqpConnection(broker, functools.partial(_resume, state))


def _resume(state: ConnectionState, connection: AmqpConnection) -> None:
    """Once the socket is here: replay what the client negotiated (module doc, 3)."""
    connection.user = state.user
    connection.client_properties = decode_table(state.client_properties)
    connection.auth_mechanism = state.auth_mechanism
    connection.cancel_notify = state.cancel_notify
    connection._blocked_capability = state.blocked_capability
    connection._failure_close = state.failure_close
    connection.connected_at_ms = state.connected_at_ms
    try:
        connection._tune_ok(m.ConnectionTuneOk(state.channel_max, state.frame_max, state.heartbeat))
        connection._open(m.ConnectionOpen(state.vhost, "", False))
    except HardError as error:
        connection._out.clear()
        connection.protocol.resume([])
        connection.close_with(error)
        return
    connection.protocol.resume([channel.number for channel in state.channels])
    for taken in state.channels:
        connection._on_channel_method(taken.number, m.ChannelOpen(""))
        channel = connection.channels[taken.number]
        channel.handle(m.BasicQos(0, taken.prefetch_count, False))
        channel.handle(m.BasicQos(0, taken.global_prefetch, True))
        if taken.confirm:
            channel.handle(m.ConfirmSelect(True))
        if taken.transactional:
            channel.transaction = Transaction()
        channel.last_queue = taken.last_queue
    connection._out.clear()  # the replies the client had from the worker that negotiated
    # Read first, handled in the next turn: the loop starts reading the socket only
    # once this returns, and would undo a pause for a long backlog made here.
    connection.protocol.receive_data(state.unread)
    connection.loop.call_soon(connection._handle_events)
