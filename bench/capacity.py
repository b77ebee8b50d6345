"""Offline capacity of the load generator's hot paths (`python -m bench.capacity`).

Owns a broker-less self-check: how many 128-byte messages per second of one core the
producer's batch stamping and the consumer's frame parsing (deliver + header + body, latency
recording, multiple-acks) can handle. Compare with a broker's rate to see the headroom.
"""

from __future__ import annotations

import json
import struct
import time

from bench.wire import (
    BASIC_DELIVER,
    CHANNEL,
    FRAME_BODY,
    FRAME_HEADER,
    bits,
    frame,
    method_frame,
    publish_template,
    shortstr,
)
from bench.workers import Batch, ConsumerConnection

SIZE, BATCH, MESSAGES = 128, 500, 200_000


class _NullTransport:
    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def deliveries(count: int) -> bytes:
    """`count` basic.deliver + header + body frame triples as a broker would send them."""
    header = frame(FRAME_HEADER, CHANNEL, struct.pack("!HHQH", 60, 0, SIZE, 0))
    body = frame(FRAME_BODY, CHANNEL, struct.pack("!Q", time.monotonic_ns()) + bytes(SIZE - 8))
    out = bytearray()
    for tag in range(1, count + 1):
        args = shortstr("amq.ctag-bench") + struct.pack("!Q", tag) + bits(False)
        out += method_frame(CHANNEL, BASIC_DELIVER, args + shortstr("") + shortstr("q"))
        out += header + body
    return bytes(out)


def consumer_rate(chunk: int = 65536) -> float:
    stream = deliveries(MESSAGES)
    conn = ConsumerConnection([0] * 5, ack_every=500)
    conn.transport = _NullTransport()  # type: ignore[assignment]
    conn.measuring = True
    started = time.process_time()
    for offset in range(0, len(stream), chunk):
        conn.data_received(stream[offset : offset + chunk])
        conn.fold_latencies()
    assert conn.delivered == MESSAGES, conn.delivered
    return MESSAGES / (time.process_time() - started)


def producer_rate() -> float:
    batch = Batch(publish_template("q", SIZE, False, 131072), BATCH)
    started = time.process_time()
    for _ in range(MESSAGES // BATCH):
        batch.stamped(BATCH)
    return MESSAGES / (time.process_time() - started)


def main() -> None:
    result = {"size": SIZE, "producer_msgs_per_cpu_s": round(producer_rate())}
    result["consumer_msgs_per_cpu_s"] = round(consumer_rate())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
