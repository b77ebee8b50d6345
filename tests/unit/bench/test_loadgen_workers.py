"""The load generator's hot paths in bulk: the consumer reads runs of alike deliveries at
once (bench.wire's DeliveryLayout) and counts, acks and times every message as frame by
frame; the producer stamps a batch in one assignment and leaves the rest of each message be."""

from __future__ import annotations

import struct

import pytest

from bench import wire
from bench.wire import (
    BASIC_DELIVER,
    CHANNEL,
    FRAME_BODY,
    FRAME_HEADER,
    U64,
    bits,
    frame,
    method_frame,
    publish_template,
    shortstr,
)
from bench.workers import CONSUMED, Batch, ConsumerConnection

ARRIVAL_NS = 10**12


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False


def delivery(
    tag: int, stamp: int, size: int = 128, key: str = "q", redelivered: bool = False
) -> bytes:
    args = shortstr("amq.ctag-test") + struct.pack("!Q", tag) + bits(redelivered)
    deliver = method_frame(CHANNEL, BASIC_DELIVER, args + shortstr("") + shortstr(key))
    header = frame(FRAME_HEADER, CHANNEL, struct.pack("!HHQH", 60, 0, size, 0))
    body = struct.pack("!Q", stamp) + bytes(size - 8)
    return deliver + header + frame(FRAME_BODY, CHANNEL, body)


def consume(stream: bytes, chunk: int, monkeypatch: pytest.MonkeyPatch) -> ConsumerConnection:
    monkeypatch.setattr("bench.wire.time.monotonic_ns", lambda: ARRIVAL_NS)
    conn = ConsumerConnection([0] * 5, ack_every=0)
    conn.transport = Transport()  # type: ignore[assignment]
    conn.measuring = True
    for offset in range(0, len(stream), chunk):
        conn.data_received(stream[offset : offset + chunk])
    return conn


# the chunk sizes cut messages anywhere: within a frame, between frames, rows of a run
@pytest.mark.parametrize("chunk", [1, 97, 233, 1000, 4096, 1 << 20])
def test_every_delivery_is_counted_and_timed_whatever_the_chunks(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = [delivery(tag, stamp=ARRIVAL_NS - tag) for tag in range(1, 201)]
    # not alike the run before them: redelivered (still alike), another routing key, a
    # larger body, then the first layout again
    messages[50] = delivery(51, ARRIVAL_NS - 51, redelivered=True)
    messages[100] = delivery(101, ARRIVAL_NS - 101, key="other")
    messages[150:153] = [delivery(tag, ARRIVAL_NS - tag, size=300) for tag in (151, 152, 153)]
    conn = consume(b"".join(messages), chunk, monkeypatch)
    assert conn.delivered == 200
    assert conn.counters[CONSUMED] == 200
    assert conn._last_tag == 200
    assert sorted(conn._latencies) == list(range(1, 201))


def test_a_run_is_read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = b"".join(delivery(tag, ARRIVAL_NS - tag) for tag in range(1, 1001))
    conn = consume(stream, len(stream), monkeypatch)
    assert conn._layout is not None and conn._layout.length * 1000 == len(stream)
    assert conn.delivered == 1000
    assert list(conn._latencies) == list(range(1, 1001))


def test_manual_acks_name_the_last_tag_of_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.wire.time.monotonic_ns", lambda: ARRIVAL_NS)
    conn = ConsumerConnection([0] * 5, ack_every=500)
    transport = Transport()
    conn.transport = transport  # type: ignore[assignment]
    conn.data_received(b"".join(delivery(tag, ARRIVAL_NS) for tag in range(1, 601)))
    assert transport.written == [wire.ack_frame(600, True)]
    assert conn._latencies.tolist() == []  # not measuring: nothing timed


def test_a_batch_is_stamped_with_the_time_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    template = publish_template("q", 128, persistent=True, frame_max=131072)
    batch = Batch(template, 500)
    length = len(template.frames)
    for now in (ARRIVAL_NS, ARRIVAL_NS + 1):
        monkeypatch.setattr("bench.workers.time.monotonic_ns", lambda now=now: now)
        out = batch.stamped(300)
        assert len(out) == 300 * length
        stamp = U64.pack(now)
        expected = template.frames[: template.stamp_offset] + stamp
        expected += template.frames[template.stamp_offset + U64.size :]
        assert out == expected * 300
