"""Live fuzzing of a running node: bad frames on many connections beside a good client.

While one well-behaved client publishes numbered persistent messages with confirms and
consumes them with acks, fuzzing connections send, each on its own socket:

- random bytes (before or after a valid protocol header);
- a valid handshake, channel open and publish, with random bytes flipped, cut or inserted;
- a valid handshake, then well-framed methods with random class/method ids and payloads,
  content headers and bodies out of place, oversized and heartbeat frames on channels;
- a valid handshake, then a conversation of well-formed methods with random fields on a
  few channels over a small shared pool of names (some not UTF-8, some the direct reply-to
  pseudo-queue): declares, deletes, consumes, gets, publishes, settlements with and without
  requeue, recovers, transactions, channel closes. Fuzzing connections share the pool, so
  one deletes the queues another consumes from and settles deliveries of.

Each fuzzing connection reads what the node answers until it closes the socket (or a short
timeout) and goes away; an INTERNAL_ERROR (541) close in what it read is counted. Meanwhile
a poller reads the management API's listings; every answer must be 200. The node must stay
up, and the good client must get back every message it had confirmed. Example, a long run:

    .venv/bin/python -m bench.fuzz_live --duration 600 --fuzzers 16

It starts its own node (`python -m warren`, free ports, node defaults) unless given `--url`.
Prints one summary line; exit status 1 if the node died or the good client lost anything.
The suite runs a short version (tests/integration/test_fuzz_live.py).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
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

import aiohttp
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
    internal_error_closes: int = 0  # channel or connection closes with 541 fuzzers read
    mgmt_requests: int = 0
    mgmt_failures: int = 0  # answers other than 200 (or no answer)

    @property
    def ok(self) -> bool:
        return (
            self.node_alive
            and self.lost == 0
            and self.confirmed > 0
            and not self.internal_errors
            and not self.internal_error_closes
            and not self.mgmt_failures
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


# names fuzzing conversations share: plain, not UTF-8, reserved, the reply-to pseudo-queue
NAMES = (
    b"fz.a",
    b"fz.b",
    b"fz.c",
    b"fz.\xff\xfe",
    b"",
    b"amq.rabbitmq.reply-to",
    b"amq.rabbitmq.reply-to.x",
    b"amq.fz",
)
TAGS = (b"t1", b"t2", b"", b"t\xff")
EXCHANGES = (b"", b"amq.fanout", b"amq.direct", b"fz.x", b"fz.\xff", b"nope")
# (class, method) of ack, reject, nack: a delivery tag, then their bits
SETTLEMENTS = ((60, 80), (60, 90), (60, 120))


def _name(rng: random.Random) -> bytes:
    return rng.choice(NAMES) if rng.random() < 0.9 else rng.randbytes(rng.randrange(1, 12))


def _arguments(rng: random.Random) -> bytes:
    choice = rng.random()
    if choice < 0.7:
        return table({})
    keys = ("x-max-length", "x-message-ttl", "x-expires", "x-queue-type", "x-priority")
    key = rng.choice(keys)
    value: object = rng.choice((0, 1, 5, -1, "classic", "quorum", "bogus"))
    if rng.random() < 0.5:  # expired messages go to another queue of the pool, with x-death
        dead_letters = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "fz.a"}
        return table({"x-message-ttl": rng.choice((0, 1)), **dead_letters})
    return table({key: value})


def conversation_frame(rng: random.Random) -> list[bytes]:
    """One well-formed method (with its content, for a publish) with random fields."""
    channel = rng.choice((1, 1, 2, 3))
    bits = bytes([rng.randrange(32)])
    kind = rng.randrange(16)
    if kind == 0:
        return [
            method_frame(
                channel, (50, 10), b"\x00\x00" + shortstr(_name(rng)) + bits + _arguments(rng)
            )
        ]
    if kind == 1:
        return [method_frame(channel, (50, 40), b"\x00\x00" + shortstr(_name(rng)) + bits)]
    if kind == 2:
        consume = b"\x00\x00" + shortstr(_name(rng)) + shortstr(rng.choice(TAGS)) + bits
        return [method_frame(channel, (60, 20), consume + _arguments(rng))]
    if kind == 3:
        return [method_frame(channel, (60, 30), shortstr(rng.choice(TAGS)) + b"\x00")]
    if kind == 4:
        return [method_frame(channel, (60, 70), b"\x00\x00" + shortstr(_name(rng)) + bits)]
    if kind in (5, 6):
        route = shortstr(rng.choice(EXCHANGES)) + shortstr(_name(rng))
        body = rng.randbytes(rng.randrange(0, 32))
        return [
            method_frame(channel, (60, 40), b"\x00\x00" + route + bytes([rng.randrange(4)])),
            frame(FRAME_HEADER, channel, struct.pack("!HHQH", 60, 0, len(body), 0)),
            frame(FRAME_BODY, channel, body),
        ]
    if kind in (7, 8):
        settle = rng.choice(SETTLEMENTS)
        tag = struct.pack("!Q", rng.randrange(0, 6))
        return [method_frame(channel, settle, tag + bytes([rng.randrange(4)]))]
    if kind == 9:
        return [
            method_frame(channel, rng.choice(((60, 110), (60, 100))), bytes([rng.randrange(2)]))
        ]
    if kind == 10:
        close = struct.pack("!H", 200) + shortstr(b"") + struct.pack("!HH", 0, 0)
        return [
            method_frame(channel, (20, 40), close),
            method_frame(channel, (20, 10), shortstr("")),
        ]
    if kind == 11:
        bind = b"\x00\x00" + shortstr(_name(rng)) + shortstr(rng.choice(EXCHANGES))
        return [method_frame(channel, (50, 20), bind + shortstr(_name(rng)) + bits + table({}))]
    if kind == 12:
        declare = (
            b"\x00\x00"
            + shortstr(rng.choice(EXCHANGES))
            + shortstr(rng.choice((b"direct", b"fanout", b"topic", b"headers", b"x-bogus")))
        )
        return [method_frame(channel, (40, 10), declare + bits + _arguments(rng))]
    if kind == 13:
        return [method_frame(channel, rng.choice(((90, 10), (90, 20), (90, 30), (85, 10))), bits)]
    if kind == 14:
        qos = struct.pack("!IHB", 0, rng.randrange(0, 4), rng.randrange(2))
        return [method_frame(channel, (60, 10), qos)]
    return [method_frame(channel, (50, 30), b"\x00\x00" + shortstr(_name(rng)) + bits)]


def conversation(rng: random.Random) -> list[bytes]:
    opens = [method_frame(channel, (20, 10), shortstr("")) for channel in (1, 2, 3)]
    methods = [chunk for _ in range(rng.randrange(5, 40)) for chunk in conversation_frame(rng)]
    if rng.random() < 0.2:  # a frame of it mutated
        index = rng.randrange(len(methods))
        methods[index] = mutate(methods[index], rng)
    return [PROTOCOL_HEADER, *handshake(), *opens, *methods]


def fuzz_case(rng: random.Random) -> list[bytes]:
    """The chunks one fuzzing connection writes."""
    style = rng.randrange(6)
    if style >= 4:
        return conversation(rng)
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
        received = bytearray()
        while (left := deadline - time.monotonic()) > 0:
            data = await asyncio.wait_for(reader.read(65536), left)
            if not data:
                report.closed_by_node += 1
                break
            received += data
            report.internal_error_closes += count_internal_errors(received)
    except (TimeoutError, OSError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


# connection.close and channel.close with reply code 541 (INTERNAL_ERROR)
_INTERNAL_ERROR_CLOSES = (b"\x00\x0a\x00\x32\x02\x1d", b"\x00\x14\x00\x28\x02\x1d")


def count_internal_errors(received: bytearray) -> int:
    """541 closes in what was read (consumed from the buffer once counted)."""
    found = 0
    for marker in _INTERNAL_ERROR_CLOSES:
        while (at := received.find(marker)) >= 0:
            found += 1
            del received[: at + len(marker)]
    return found


MGMT_LISTINGS = (
    "/api/overview",
    "/api/queues",
    "/api/exchanges",
    "/api/connections",
    "/api/channels",
    "/api/consumers",
    "/api/definitions",
)


async def mgmt_poller(base_url: str, report: Report, until: float) -> None:
    """Read the management API's listings in turn until the run ends; count non-200s."""
    parts = urlsplit(base_url)
    credentials = f"{parts.username or 'guest'}:{parts.password or 'guest'}".encode()
    headers = {"Authorization": "Basic " + base64.b64encode(credentials).decode()}
    root = f"{parts.scheme}://{parts.hostname}:{parts.port}"
    async with aiohttp.ClientSession(headers=headers) as session:
        index = 0
        while time.monotonic() < until:
            path = MGMT_LISTINGS[index % len(MGMT_LISTINGS)]
            index += 1
            report.mgmt_requests += 1
            try:
                async with session.get(root + path, timeout=aiohttp.ClientTimeout(10)) as answer:
                    await answer.read()
                    if answer.status != 200:
                        report.mgmt_failures += 1
                        print(f"{path}: {answer.status}", file=sys.stderr)
            except (aiohttp.ClientError, TimeoutError) as error:
                report.mgmt_failures += 1
                print(f"{path}: {error!r}", file=sys.stderr)
            await asyncio.sleep(0.2)


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


async def run(
    url: str, duration_s: float, fuzzers: int, seed: int, mgmt_url: str | None = None
) -> Report:
    """Fuzz the node at `url` for `duration_s` beside one good client (and a poller of the
    management API at `mgmt_url`, if given)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5672
    report = Report()
    started = time.monotonic()
    until = started + duration_s
    rngs = [random.Random(f"{seed}:{index}") for index in range(fuzzers)]
    poller = [mgmt_poller(mgmt_url, report, until)] if mgmt_url else []
    await asyncio.gather(
        good_client(url, report, until),
        *(fuzzer(host, port, rng, report, until) for rng in rngs),
        *poller,
    )
    report.seconds = round(time.monotonic() - started, 1)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running node (default: start one)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    parser.add_argument("--fuzzers", type=int, default=8, help="concurrent fuzzing connections")
    parser.add_argument("--seed", type=int, default=None, help="random seed (printed)")
    parser.add_argument(
        "--mgmt-url",
        help="the management API of --url, as http://user:pass@host:port (default: the "
        "started node's; none with --url alone)",
    )
    args = parser.parse_args()
    logging.getLogger("aiormq").setLevel(logging.CRITICAL)
    # a fuzzing socket the node closed while we still write to it is expected, not news
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    with contextlib.ExitStack() as stack:
        node = None
        url, mgmt_url = args.url, args.mgmt_url
        if url is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="warren-fuzz-")))
            node = Node(root / "data", SEGMENT_MAX_BYTES_DEFAULT, RESIDENT_MESSAGES_MAX_DEFAULT)
            node.start()
            stack.callback(node.stop)
            url = node.url
            mgmt_url = f"http://guest:guest@127.0.0.1:{node.management_port}"
        report = asyncio.run(run(url, args.duration, args.fuzzers, seed, mgmt_url))
        if node is not None and node.process is not None:
            report.node_alive = node.process.poll() is None
            node_log = node.data_dir.parent / f"{node.data_dir.name}.{node.starts}.log"
            report.internal_errors = node_log.read_text(errors="replace").count("internal error")
    print(json.dumps({"seed": seed, **asdict(report), "ok": report.ok}))
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
