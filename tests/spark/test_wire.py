"""The pipeline's AMQP client against a scripted broker on a socket pair: deliveries are the
same whether their frames arrive in one read or in pieces (the fast path and the frame-by-frame
one), across several body frames and with an empty body."""

from __future__ import annotations

import socket

from warren.amqp.content import Message, deliver_frames, method_frame, shortstr
from warren.amqp.methods import ChannelOpenOk, ConnectionOpenOk, ConnectionStart, ConnectionTune
from warren.spark.message import Deliveries
from warren.spark.wire import Client

PROPERTIES = b"\x10\x00\x02"  # delivery-mode 2
BODIES = [b"one", b"", b"x" * 10_000]  # the last in three body frames of at most 4,088 bytes


def connected() -> tuple[socket.socket, Client]:
    broker, client_end = socket.socketpair()
    replies = [ConnectionStart(), ConnectionTune(0, 131_072, 0), ConnectionOpenOk()]
    broker.sendall(b"".join(method_frame(0, reply) for reply in replies))
    broker.sendall(method_frame(1, ChannelOpenOk()))
    return broker, Client("amqp://guest:guest@broker/%2F", 0, connected=client_end)


def test_deliveries_read_whole_or_in_pieces_are_the_same():
    broker, client = connected()
    client.delivered = Deliveries()
    got: list[tuple[object, ...]] = []
    data = b"".join(
        deliver_frames(
            1, shortstr("ctag"), tag, tag == 2, Message("ex", "rk", PROPERTIES, body), 4096
        )
        for tag, body in enumerate(BODIES, 1)
    )
    broker.sendall(data)
    while len(got) < len(BODIES):
        assert client.receive(5)
        got += zip(*client.take_delivered().columns(), strict=True)
    for start in range(0, len(data), 5):
        broker.sendall(data[start : start + 5])
        assert client.receive(5)
        got += zip(*client.take_delivered().columns(), strict=True)
    expected = [
        ("ctag", tag, tag == 2, "ex", "rk", PROPERTIES, body) for tag, body in enumerate(BODIES, 1)
    ]
    assert got == expected + expected
    broker.close()
    client.close()  # the broker is gone: only the socket is closed
