"""Live fuzzing of a running node: bad frames on many connections beside a good client.

While one well-behaved client publishes numbered persistent messages with confirms and
consumes them with acks, fuzzing connections send, each on its own socket:

- random bytes (before or after a valid protocol header);
- a valid handshake, channel open and publish, with random bytes flipped, cut or inserted;
- a valid handshake, then well-framed methods with random class/method ids and payloads,
  content headers and bodies out of place, oversized and heartbeat frames on channels.

Each fuzzing connection reads what the node answers until it closes the socket (or a short
timeout) and goes away. The node must stay up, and the good client must get back every
message it had confirmed. Example, a long run:

    .venv/bin/python -m bench.fuzz_live --duration 600 --fuzzers 16

It starts its own node (`python -m warren`, free ports, node defaults) unless given `--url`.
Prints one summary line; exit status 1 if the node died or the good client lost anything.
The suite runs a short version (tests/integration/test_fuzz_live.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import struct
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiormq
from pamqp.commands import Basic

from bench.soak_durability import Node
from bench.wire import PROTOCOL_HEADER, frame, longstr, method_frame, shortstr, table

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
READ_TIMEOUT_S = 0.5
GOOD_QUEUE = "fuzz.good"
BACKLOG_MAX = 2_000  # messages the good client may have published and not yet consumed
DRAIN_IDLE_S = 5.0  # at the end: how long the consumer may make no progress
SEGMENT_MAX_BYTES_DEFAULT = 64 * 1024 * 1024
RESIDENT_MESSAGES_MAX_DEFAULT = 16384


@dataclass
class Report:
    seconds: float = 0.0
    connections: int = 0
    frames: int = 0
    bytes_sent: int = 0
    closed_by_node: int = 0
    confirmed: int = 0
    consumed: int = 0
    lost: int = 0
    node_alive: bool = True
    internal_errors: int = 0  # 541s the node logged (known when this script started it)

    @property
    def ok(self) -> bool:
        return (
            self.node_alive and self.lost == 0 and self.confirmed > 0 and not self.internal_errors
        )


def handshake() -> list[bytes]:
    """A client's side of a PLAIN login as guest, frame by frame (after the header)."""
    start_ok = table({}) + shortstr("PLAIN") + longstr(b"\x00guest\x00guest") + shortstr("en_US")
    return [
        method_frame(0, (10, 11), start_ok),
        method_frame(0, (10, 31), struct.pack("!HIH", 2047, 131072, 0)),
        method_frame(0, (10, 40), shortstr("/") + shortstr("") + b"\x00"),
    ]


def publish_frames(rng: random.Random) -> list[bytes]:
    body = rng.randbytes(rng.randrange(0, 64))
    return [
        method_frame(1, (20, 10), shortstr("")),
        method_frame(1, (60, 40), b"\x00\x00" + shortstr("") + shortstr(GOOD_QUEUE) + b"\x00"),
        frame(FRAME_HEADER, 1, struct.pack("!HHQH", 60, 0, len(body), 0)),
        frame(FRAME_BODY, 1, body),
    ]


def mutate(data: bytes, rng: random.Random) -> bytes:
    buffer = bytearray(data)
    for _ in range(rng.randrange(1, 6)):
        choice = rng.random()
        position = rng.randrange(len(buffer) + 1)
        if choice < 0.5 and buffer:
            buffer[min(position, len(buffer) - 1)] = rng.randrange(256)
        elif choice < 0.7:
            buffer[position:position] = rng.randbytes(rng.randrange(1, 16))
        elif choice < 0.9:
            del buffer[position : position + rng.randrange(1, 16)]
        else:
            buffer = buffer[:position]
    return bytes(buffer)


def random_frame(rng: random.Random) -> bytes:
    kind = rng.choice((FRAME_METHOD, FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT, 9))
    channel = rng.choice((0, 1, 1, 2, rng.randrange(65536)))
    if kind == FRAME_METHOD:
        class_id = rng.choice((10, 20, 40, 50, 60, 85, 90, rng.randrange(65536)))
        payload = struct.pack("!HH", class_id, rng.randrange(0, 120)) + rng.randbytes(
            rng.randrange(0, 40)
        )
    else:
        payload = rng.randbytes(rng.randrange(0, 40))
    return frame(kind, channel, payload)


def fuzz_case(rng: random.Random) -> list[bytes]:
    """The chunks one fuzzing connection writes."""
    style = rng.randrange(4)
    if style == 0:
        head = PROTOCOL_HEADER if rng.random() < 0.5 else b""
        return [head + rng.randbytes(rng.randrange(1, 200))]
    valid = [PROTOCOL_HEADER, *handshake(), *publish_frames(rng)]
    if style == 1:
        return [mutate(b"".join(valid), rng)]
    if style == 2:
        index = rng.randrange(1, len(valid))
        return [*valid[:index], mutate(valid[index], rng)]
    return [*valid[:4], *(random_frame(rng) for _ in range(rng.randrange(1, 20)))]


async def fuzz_connection(host: str, port: int, rng: random.Random, report: Report) -> None:
    chunks = fuzz_case(rng)
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return
    report.connections += 1
    try:
        for chunk in chunks:
            writer.write(chunk)
            report.frames += 1
            report.bytes_sent += len(chunk)
        await writer.drain()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            data = await asyncio.wait_for(reader.read(65536), left)
            if not data:
                report.closed_by_node += 1
                break
    except (TimeoutError, OSError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def fuzzer(host: str, port: int, rng: random.Random, report: Report, until: float) -> None:
    while time.monotonic() < until:
        await fuzz_connection(host, port, rng, report)


async def good_client(url: str, report: Report, until: float) -> None:
    """Publish numbered persistent messages with confirms; consume them with acks."""
    connection = await aiormq.connect(url)
    publisher = await connection.channel(publisher_confirms=True)
    consumer = await connection.channel()
    await publisher.queue_declare(GOOD_QUEUE, durable=True)
    await publisher.queue_purge(GOOD_QUEUE)
    confirmed: set[int] = set()
    consumed: set[int] = set()

    async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
        # fuzzers publish to this queue too: their bodies are not numbers, and are acked
        if message.body.isdigit():
            consumed.add(int(message.body))
        await message.channel.basic_ack(message.delivery.delivery_tag)

    await consumer.basic_qos(prefetch_count=100)
    await consumer.basic_consume(GOOD_QUEUE, on_message)
    number = 0
    properties = aiormq.spec.Basic.Properties(delivery_mode=2)
    publish = publisher.basic_publish
    while time.monotonic() < until:
        if number - len(consumed) > BACKLOG_MAX:  # keep the queue short: wait for the consumer
            await asyncio.sleep(0.05)
            continue
        batch = range(number, number + 50)
        number += 50
        confirms = await asyncio.gather(
            *(publish(b"%d" % n, routing_key=GOOD_QUEUE, properties=properties) for n in batch)
        )
        acked = zip(batch, confirms, strict=True)
        confirmed.update(n for n, confirm in acked if isinstance(confirm, Basic.Ack))
    # the consumer catches up; give up only when it stops making progress
    seen = -1
    while not confirmed <= consumed and len(consumed) > seen:
        seen = len(consumed)
        await asyncio.sleep(DRAIN_IDLE_S)
    await connection.close()
    report.confirmed, report.consumed = len(confirmed), len(confirmed & consumed)
    report.lost = len(confirmed - consumed)


async def run(url: str, duration_s: float, fuzzers: int, seed: int) -> Report:
    """Fuzz the node at `url` for `duration_s` beside one good client."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5672
    report = Report()
    started = time.monotonic()
    until = started + duration_s
    rngs = [random.Random(f"{seed}:{index}") for index in range(fuzzers)]
    await asyncio.gather(
        good_client(url, report, until), *(fuzzer(host, port, rng, report, until) for rng in rngs)
    )
    report.seconds = round(time.monotonic() - started, 1)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running node (default: start one)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    parser.add_argument("--fuzzers", type=int, default=8, help="concurrent fuzzing connections")
    parser.add_argument("--seed", type=int, default=None, help="random seed (printed)")
    args = parser.parse_args()
    logging.getLogger("aiormq").setLevel(logging.CRITICAL)
    # a fuzzing socket the node closed while we still write to it is expected, not news
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    with contextlib.ExitStack() as stack:
        node = None
        url = args.url
        if url is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="warren-fuzz-")))
            node = Node(root / "data", SEGMENT_MAX_BYTES_DEFAULT, RESIDENT_MESSAGES_MAX_DEFAULT)
            node.start()
            stack.callback(node.stop)
            url = node.url
        report = asyncio.run(run(url, args.duration, args.fuzzers, seed))
        if node is not None and node.process is not None:
            report.node_alive = node.process.poll() is None
            node_log = node.data_dir.parent / f"{node.data_dir.name}.{node.starts}.log"
            report.internal_errors = node_log.read_text(errors="replace").count("internal error")
    print(json.dumps({"seed": seed, **asdict(report), "ok": report.ok}))
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
