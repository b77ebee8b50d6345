"""The hand-over between workers: what one worker encodes the other decodes, a message of
another version (or none at all) is refused, not misread, and a connection taken over with
a backlog keeps the socket's backpressure."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
import uvloop

from warren.amqp import methods as m
from warren.amqp.content import content_frames
from warren.amqp.methods import encode_method
from warren.amqp.table import encode_table
from warren.runtime.broker import Broker
from warren.runtime.config import Config
from warren.runtime.connection import EVENTS_PER_TURN_MAX
from warren.runtime.workers.handover import (
    MAGIC,
    VERSION,
    ChannelState,
    ConnectionState,
    decode,
    encode,
    taken_over,
)


def _state(**changes: object) -> ConnectionState:
    fields: dict[str, object] = {
        "user": "guest",
        "vhost": "/",
        "auth_mechanism": "PLAIN",
        "client_properties": encode_table(
            {"product": "pika", "capabilities": {"publisher_confirms": True}}
        ),
        "cancel_notify": True,
        "blocked_capability": False,
        "failure_close": True,
        "frame_max": 131072,
        "channel_max": 2047,
        "heartbeat": 60,
        "connected_at_ms": 1_790_000_000_000,
        "moves": 1,
        "channels": (
            ChannelState(1, 100, 0, True, False, "orders"),
            ChannelState(2, 0, 50, False, True, ""),
        ),
        "unread": b"\x01\x00\x01\x00\x00\x00\x05hello\xce",
    }
    fields.update(changes)
    return ConnectionState(**fields)  # type: ignore[arg-type]


def test_a_state_comes_back_as_it_was_encoded() -> None:
    state = _state()
    assert decode(encode(state)) == state


def test_unread_bytes_of_any_size_and_content_come_back() -> None:
    state = _state(unread=bytes(range(256)) * 4096, channels=())
    assert decode(encode(state)) == state


def test_another_version_is_refused() -> None:
    data = encode(_state())
    newer = MAGIC + bytes([VERSION + 1]) + data[len(MAGIC) + 1 :]
    with pytest.raises(ValueError, match=f"version {VERSION + 1}: expected {VERSION}"):
        decode(newer)


@pytest.mark.parametrize(
    ("data", "why"),
    [(b"", "too short"), (MAGIC, "too short"), (b"XXXX\x01" + bytes(8), "not a hand-over")],
)
def test_what_is_not_a_hand_over_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode(data)


def test_a_backlog_taken_over_is_not_read_past_while_it_waits(tmp_path: Path) -> None:
    """More unread events than one loop turn handles: the socket is paused while they
    wait, so the client gets TCP's backpressure. (uvloop starts reading a socket only
    after `connection_made`, undoing a pause made in it: a backlog handled there left the
    socket read without bound, and the client publishing unthrottled.)"""
    publish = content_frames(
        1, encode_method(m.BasicPublish(0, "", "nowhere")), b"\x00\x00", b"x", 131072
    )
    state = _state(
        channels=(ChannelState(1, 0, 0, False, False, ""),),
        unread=publish * (3 * EVENTS_PER_TURN_MAX),
    )
    read_while_waiting: list[bool] = []

    async def scenario() -> None:
        broker = Broker(Config(data_dir=tmp_path))
        taken = taken_over(broker, state)
        receive = taken.data_received

        def data_received(data: bytes) -> None:
            read_while_waiting.append(taken._throttled)
            receive(data)

        taken.data_received = data_received  # type: ignore[method-assign]
        ours, client = socket.socketpair()
        client.sendall(publish * 10)  # in the socket before the worker reads it
        await asyncio.get_running_loop().connect_accepted_socket(lambda: taken, ours)
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert taken.protocol.unread() == b""  # the backlog and the rest were all handled
        taken.transport.abort()  # type: ignore[union-attr]
        client.close()

    uvloop.run(scenario())
    assert read_while_waiting and not any(read_while_waiting)
