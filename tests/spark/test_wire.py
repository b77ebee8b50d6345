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


def test_runs_of_alike_deliveries_are_taken_whole_and_end_where_one_differs():
    """Rule 4's rows: a run of messages alike but for tag, redelivered and body bytes is
    taken as a block; a message with another routing key, body size or properties (or a
    consumer tag) ends it, and the next run starts after it."""
    broker, client = connected()
    client.delivered = Deliveries()
    sent = []
    for tag in range(1, 121):
        routing_key = "other" if tag == 50 else "rk"
        body = f"{tag:08}".encode() * (3 if tag == 80 else 2)  # tag 80: a longer body
        properties = b"\x18\x00\x02\x05" if tag == 100 else PROPERTIES  # + priority 5
        consumer_tag = "ctag2" if tag == 110 else "ctag"
        sent.append((consumer_tag, tag, tag % 7 == 0, "ex", routing_key, properties, body))
    data = b"".join(
        deliver_frames(1, shortstr(ctag), tag, bit, Message(ex, rk, raw, body), 4096)
        for ctag, tag, bit, ex, rk, raw, body in sent
    )
    got: list[tuple[object, ...]] = []
    for chunks in ([data], [data[:1000], data[1000:]]):  # whole, then split inside a run
        for chunk in chunks:
            broker.sendall(chunk)
            assert client.receive(5)
            got += zip(*client.take_delivered().columns(), strict=True)
        while len(got) % len(sent):  # what one read did not hold
            assert client.receive(5)
            got += zip(*client.take_delivered().columns(), strict=True)
    assert got == sent + sent
    broker.close()
    client.close()
