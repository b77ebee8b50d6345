"""Durability soak: SIGKILL a Warren node again and again under confirmed persistent load.

A publisher sends persistent messages round robin to durable queues with publisher
confirms (a window of unconfirmed ones); optionally a consumer acks the messages of the
first queues as they come (the others pile up, so log segments end up partly live and
the journal compacts them).
At random moments the node is killed with SIGKILL and started again on the same data
directory; the clients reconnect. With `--workers N` the node runs N worker processes
(issue 19): `--kill node` kills the whole node (its supervisor, whose workers die with
it), `--kill worker` one worker at random, which the node restarts while the other
carries on. After the last kill a consumer drains every queue.
Every body carries its queue's sequence number and a CRC-32, so the end result says:

- lost: confirmed messages that never arrived (must be 0);
- corrupt: bodies whose checksum fails (must be 0);
- out of order: first arrivals in a queue not in publish order (must be 0);
- duplicates: arrivals of a message already seen (allowed: delivery is at least once);
  of them, copies: arrivals not flagged redelivered, so the broker had enqueued the
  message twice (a quorum queue should have none: it drops a resent command).

Self-contained: it starts the node itself (`python -m warren`, free local ports) and uses
aiormq. Bounded: --kills, --max-interval and --timeout cap the run. Exit status 1 if
anything was lost, corrupt or out of order. Example:

    .venv/bin/python -m bench.soak_durability --kills 20 --consume 1 --segment-max-bytes 1048576
    .venv/bin/python -m bench.soak_durability --kills 10 --workers 2 --kill worker

The default `--resident-max 100` makes the node page most queued bodies out to its log, so
deliveries after a while read them back from there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import logging
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import aiormq
from pamqp.commands import Basic

from warren.runtime.ports import unused_port

HEAD = struct.Struct(">QI")  # sequence number in its queue, CRC-32 of the rest
START_TIMEOUT_S = 30.0
STARTED_LINE = " started, data in "  # warren.server's line once a node (or worker) serves


@dataclass
class Node:
    """One Warren process on a data directory."""

    data_dir: Path
    segment_max_bytes: int
    resident_messages_max: int
    workers: int = 1
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    management_port: int = 0
    starts: int = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.{self.starts}.log"

    def started(self) -> int:
        """How many times this run's workers (or its one process) logged their start."""
        return self.log_path.read_text(errors="replace").count(STARTED_LINE)

    def start(self) -> None:
        self.port = unused_port()
        self.starts += 1
        log_path = self.log_path
        command = [sys.executable, "-m", "warren", "--port", str(self.port)]
        self.management_port = unused_port()
        command += ["--management-port", str(self.management_port)]
        command += ["--data-dir", str(self.data_dir)]
        command += ["--bind", "127.0.0.1"]
        command += ["--log-segment-max-bytes", str(self.segment_max_bytes)]
        command += ["--queue-resident-messages-max", str(self.resident_messages_max)]
        command += ["--workers", str(self.workers)]
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        timeout_s = START_TIMEOUT_S * self.workers  # each worker is a whole node's start
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"warren exited with {self.process.returncode}, see {log_path}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                if self.started() >= self.workers:  # every worker serves
                    return
            time.sleep(0.05)
        self.kill()
        raise SystemExit(f"warren did not listen within {timeout_s} s, see {log_path}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index` and wait until the node has started it again."""
        started = self.started()
        lock = self.data_dir / "workers" / str(index) / "node.lock"
        os.kill(int(lock.read_text()), signal.SIGKILL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.started() <= started:
            if time.monotonic() > deadline:
                raise SystemExit(f"worker {index} did not start again, see {self.log_path}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Tally:
    """What the clients saw, per queue."""

    published: dict[str, int] = field(default_factory=dict)  # next sequence number - 1
    confirmed: dict[str, set[int]] = field(default_factory=dict)
    arrivals: dict[str, list[int]] = field(default_factory=dict)
    corrupt: int = 0
    # messages whose first arrival was flagged redelivered: the broker had handed them out
    # before (to a consumer that went away), and a requeued message may come after later
    # ones, as RabbitMQ's ordering guarantee allows
    requeued: dict[str, set[int]] = field(default_factory=dict)
    seen: dict[str, set[int]] = field(default_factory=dict)
    copies: int = 0  # duplicates not flagged redelivered: enqueued twice

    def arrived(self, queue: str, body: bytes, redelivered: bool = False) -> None:
        sequence, crc = HEAD.unpack_from(body)
        if zlib.crc32(body[HEAD.size :]) != crc:
            self.corrupt += 1
            return
        seen = self.seen.setdefault(queue, set())
        if sequence not in seen:
            if redelivered:
                self.requeued.setdefault(queue, set()).add(sequence)
        elif not redelivered:
            self.copies += 1
        seen.add(sequence)
        self.arrivals[queue].append(sequence)


def body_for(rng: random.Random, sequence: int, size_min: int, size_max: int) -> bytes:
    payload = rng.randbytes(rng.randint(size_min, size_max))
    return HEAD.pack(sequence, zlib.crc32(payload)) + payload


PERSISTENT = aiormq.spec.Basic.Properties(delivery_mode=2)


def add_publisher_arguments(parser: argparse.ArgumentParser) -> None:
    """The settings `publish` reads of its `args`."""
    parser.add_argument("--window", type=int, default=100, help="unconfirmed publishes")
    parser.add_argument("--size-min", type=int, default=0, help="payload bytes, default 0")
    parser.add_argument("--size-max", type=int, default=512, help="payload bytes, default 512")


async def publish(
    url: str,
    queues: list[str],
    tally: Tally,
    rng: random.Random,
    args: argparse.Namespace,
    arguments: dict[str, str] | None = None,
) -> None:
    """Publish until the connection breaks (the node was killed) or the task is cancelled."""
    connection = await asyncio.wait_for(aiormq.connect(url), 10)
    try:
        channel = await connection.channel(publisher_confirms=True)
        for queue in queues:
            await channel.queue_declare(queue, durable=True, arguments=arguments)
        window = asyncio.Semaphore(args.window)
        in_flight: set[asyncio.Task[None]] = set()
        index = 0
        while not connection.is_closed:
            await window.acquire()
            queue = queues[index % len(queues)]
            index += 1
            sequence = tally.published[queue] + 1
            tally.published[queue] = sequence
            body = body_for(rng, sequence, args.size_min, args.size_max)
            task = asyncio.create_task(confirm_one(channel, window, tally, queue, sequence, body))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 1)


async def confirm_one(channel, window, tally: Tally, queue: str, sequence: int, body: bytes):
    try:
        confirmation = await channel.basic_publish(body, routing_key=queue, properties=PERSISTENT)
        if isinstance(confirmation, Basic.Ack):
            tally.confirmed[queue].add(sequence)
    except (Exception, asyncio.CancelledError):
        pass  # unconfirmed: it may or may not arrive
    finally:
        window.release()


async def consume(
    url: str,
    queues: list[str],
    tally: Tally,
    prefetch: int,
    arguments: dict[str, str] | None = None,
) -> None:
    """Consume and ack everything until cancelled or the connection breaks."""
    connection = await asyncio.wait_for(aiormq.connect(url), 10)
    try:
        channel = await connection.channel()
        await channel.basic_qos(prefetch_count=prefetch)
        for queue in queues:
            await channel.queue_declare(queue, durable=True, arguments=arguments)

            async def on_message(message, queue: str = queue) -> None:
                tally.arrived(queue, message.body, bool(message.delivery.redelivered))
                await message.channel.basic_ack(message.delivery.delivery_tag)

            await channel.basic_consume(queue, on_message)
        await connection.closing
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 1)


async def run_phase(
    node: Node, queues: list[str], tally: Tally, rng: random.Random, args: argparse.Namespace
) -> float:
    """Load the node, kill it (or a worker) after a random interval; return the interval."""
    interval = rng.uniform(args.min_interval, args.max_interval)
    tasks = [asyncio.create_task(publish(node.url, queues, tally, rng, args))]
    if args.consume:
        consumed = queues[: args.consume]
        tasks.append(asyncio.create_task(consume(node.url, consumed, tally, args.prefetch)))
    await asyncio.sleep(interval)
    if args.kill == "worker":
        kill = functools.partial(node.kill_worker, rng.randrange(node.workers))
    else:
        kill = node.kill
    await asyncio.get_running_loop().run_in_executor(None, kill)
    await asyncio.sleep(0.2)  # let the clients see the socket close
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return interval


async def drain(url: str, queues: list[str], tally: Tally, idle_s: float) -> None:
    """Consume until every queue is empty and nothing arrived for `idle_s`."""
    connection = await asyncio.wait_for(aiormq.connect(url), 10)
    try:
        channel = await connection.channel()
        await channel.basic_qos(prefetch_count=1000)
        last = [time.monotonic()]
        for queue in queues:

            async def on_message(message, queue: str = queue) -> None:
                tally.arrived(queue, message.body, bool(message.delivery.redelivered))
                last[0] = time.monotonic()
                await message.channel.basic_ack(message.delivery.delivery_tag)

            await channel.basic_consume(queue, on_message)
        while True:
            await asyncio.sleep(0.2)
            ready = 0
            for queue in queues:
                declared = await channel.queue_declare(queue, durable=True, passive=True)
                ready += declared.message_count or 0
            if not ready and time.monotonic() - last[0] > idle_s:
                return
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 1)


def report(tally: Tally, queues: list[str], kills: int, faults: str = "kills") -> bool:
    """Print the result; True if nothing was lost, corrupt or out of order."""
    ok = tally.corrupt == 0
    totals = {"published": 0, "confirmed": 0, "arrived": 0, "lost": 0, "dup": 0, "disorder": 0}
    for queue in queues:
        arrivals = tally.arrivals[queue]
        first = list(dict.fromkeys(arrivals))
        requeued = tally.requeued.get(queue, set())
        in_order = [sequence for sequence in first if sequence not in requeued]
        lost = tally.confirmed[queue] - set(first)
        disorder = sum(1 for a, b in itertools.pairwise(in_order) if b < a)
        totals["published"] += tally.published[queue]
        totals["confirmed"] += len(tally.confirmed[queue])
        totals["arrived"] += len(first)
        totals["lost"] += len(lost)
        totals["dup"] += len(arrivals) - len(first)
        totals["disorder"] += disorder
        if lost:
            print(f"  {queue}: lost {len(lost)} confirmed, first ones {sorted(lost)[:10]}")
        if disorder:
            print(f"  {queue}: {disorder} first arrivals out of order")
        if requeued:
            print(f"  {queue}: {len(requeued)} first arrived redelivered (order not checked)")
        ok = ok and not lost and not disorder
    print(
        f"{faults} {kills}, published {totals['published']}, confirmed {totals['confirmed']},"
        f" arrived {totals['arrived']}, lost {totals['lost']}, corrupt {tally.corrupt},"
        f" duplicates {totals['dup']} (copies {tally.copies}), out of order {totals['disorder']}"
    )
    return ok


async def soak(args: argparse.Namespace, data_dir: Path) -> bool:
    rng = random.Random(args.seed)
    queues = [f"soak-{index}" for index in range(args.queues)]
    tally = Tally(
        published=dict.fromkeys(queues, 0),
        confirmed={queue: set() for queue in queues},
        arrivals={queue: [] for queue in queues},
    )
    node = Node(data_dir, args.segment_max_bytes, args.resident_max, args.workers)
    node.start()
    try:
        for kill in range(1, args.kills + 1):
            interval = await run_phase(node, queues, tally, rng, args)
            confirmed = sum(len(c) for c in tally.confirmed.values())
            print(f"kill {kill}/{args.kills} after {interval:.2f} s: {confirmed} confirmed so far")
            if args.kill == "node":
                node.start()
        await drain(node.url, queues, tally, idle_s=1.0)
    finally:
        node.stop()
    segments = sorted(p.name for p in data_dir.glob("**/log/*.wal"))
    print(f"log segments left: {len(segments)} ({', '.join(segments[-3:])})")
    return report(tally, queues, args.kills)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs (default 10)")
    parser.add_argument("--min-interval", type=float, default=0.5, help="seconds, default 0.5")
    parser.add_argument("--max-interval", type=float, default=3.0, help="seconds, default 3")
    parser.add_argument("--queues", type=int, default=2, help="durable queues (default 2)")
    add_publisher_arguments(parser)
    parser.add_argument(
        "--consume", type=int, default=0, help="queues a consumer drains during the run"
    )
    parser.add_argument("--prefetch", type=int, default=200, help="of that consumer")
    parser.add_argument(
        "--segment-max-bytes", type=int, default=4 * 1024 * 1024, help="log segment size"
    )
    parser.add_argument(
        "--resident-max",
        type=int,
        default=100,
        help="ready messages a queue keeps in memory before bodies are read from the log",
    )
    parser.add_argument("--workers", type=int, default=1, help="of the node (default 1)")
    parser.add_argument(
        "--kill", choices=("node", "worker"), default="node", help="what a kill kills"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (printed)")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temporary one")
    parser.add_argument("--timeout", type=float, default=900.0, help="whole run, seconds")
    args = parser.parse_args()
    if args.kill == "worker" and args.workers < 2:
        parser.error("--kill worker needs --workers 2 or more")
    # aiormq logs every connection the kill breaks, with a traceback: expected here
    logging.getLogger("aiormq").setLevel(logging.CRITICAL)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    print(f"seed {args.seed}")
    with contextlib.ExitStack() as stack:
        if args.data_dir is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="warren-soak-")))
            data_dir = root / "data"
        else:
            data_dir = args.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        ok = asyncio.run(asyncio.wait_for(soak(args, data_dir), args.timeout))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
