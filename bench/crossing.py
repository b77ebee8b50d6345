"""Messages that cross the workers of one node, from two source trees side by side (issue 19).

    python -m bench.crossing BEFORE_TREE AFTER_TREE [--reps 3] [--count 50000]

Owns one comparison of what a crossing message costs:
1. One node of 2 workers per tree (`brokers.start_warren`), both running for the whole
   comparison, so the trees' runs alternate (and take turns to go first) on one machine.
2. Every message crosses workers once: two queues declared on two connections land on
   the two workers (a new named queue goes to the worker homing the fewest); the
   producer's first publish goes to the *near* queue, which hands its connection to that
   queue's worker and binds it there, and every message after goes to the *far* queue;
   the consumer of the far queue is handed to its worker, so deliveries do not cross.
   The workers' own count (`scaling.crossed`) is read around each run to show it.
3. Throughput: `--count` messages of 128 bytes with at most `--window` in flight
   (published, not yet delivered); the node's CPU (supervisor and workers) per message,
   the part of it in the kernel (system time: the sockets' share), the node's write
   system calls per message (to clients and between workers: how well writes batch), and
   the messages a second. Latency: `--rate` messages a second for `--seconds`, each
   stamped with its send time; the consumer's p50 and p99.
Producer and consumer share this process's event loop (`bench.wire`'s client).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import brokers, scaling, stats
from bench.brokers import Broker
from bench.wire import BASIC_DELIVER, U64, Connection, connect, publish_template

SIZE = 128
BATCH = 100  # messages a write in the throughput run
TICK_S = 0.01  # the latency run's pacing


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.crossing", description=__doc__)
    p.add_argument("trees", nargs=2, type=Path, help="the source trees, before and after")
    p.add_argument("--reps", type=int, default=3, help="runs per tree")
    p.add_argument("--count", type=int, default=50_000, help="messages of a throughput run")
    p.add_argument("--window", type=int, default=2_000, help="messages in flight at most")
    p.add_argument("--rate", type=int, default=1_000, help="msg/s of a latency run")
    p.add_argument("--seconds", type=float, default=3.0, help="length of a latency run")
    p.add_argument("--python", default="", help="the interpreter to run both trees with")
    return p.parse_args(argv)


class Consumer(Connection):
    """Counts deliveries and keeps each one's latency (its body starts with the send time)."""

    def __init__(self) -> None:
        super().__init__()
        self.delivered = 0
        self.latencies_ns: list[int] = []
        self.arrived = asyncio.Event()
        self._stamp_next = False
        self.fast_methods = {BASIC_DELIVER: self._on_deliver}

    def _on_deliver(self, buf: bytearray, start: int, end: int) -> None:
        self.delivered += 1
        self._stamp_next = True

    def on_body(self, buf: bytearray, start: int, end: int) -> None:
        if self._stamp_next:
            self._stamp_next = False
            self.latencies_ns.append(self.received_ns - U64.unpack_from(buf, start)[0])

    def on_chunk_end(self) -> None:
        self.arrived.set()


@dataclass
class Pair:
    """The producer, bound to the near queue's worker, and the far queue's consumer."""

    producer: Connection
    consumer: Consumer
    far: str

    def publish(self, count: int) -> None:
        template = publish_template(self.far, SIZE, False, self.producer.frame_max)
        frames, at = template.frames, template.stamp_offset
        stamp = U64.pack(time.monotonic_ns())
        one = frames[:at] + stamp + frames[at + U64.size :]
        self.producer.send(one * count)

    async def delivered(self, total: int) -> None:
        while self.consumer.delivered < total:
            self.consumer.arrived.clear()
            await self.consumer.arrived.wait()
            self.consumer.check()


async def _pair(url: str) -> tuple[Pair, list[Connection], str, str]:
    near, far = (f"bench-crossing-{name}-{uuid.uuid4().hex[:8]}" for name in ("near", "far"))
    declarers = [await connect(url, Connection) for _ in range(2)]
    for conn, queue in zip(declarers, (near, far), strict=True):
        await conn.declare_queue(queue, False, {})
    producer = await connect(url, Connection)
    producer.send(publish_template(near, SIZE, False, producer.frame_max).frames)
    consumer = await connect(url, Consumer)
    await consumer.consume(far, no_ack=True)
    return Pair(producer, consumer, far), declarers, near, far


async def _measure(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    pair, declarers, near, far = await _pair(broker.url)
    await asyncio.sleep(0.5)  # the hand-overs settle
    crossed = scaling.crossed(broker)
    cpu, started = stats.tree_cpu_seconds(broker.pid), time.monotonic()
    system, writes = stats.tree_system_seconds(broker.pid), stats.tree_write_calls(broker.pid)
    sent = 0
    while sent < args.count:
        wanted = min(BATCH, args.count - sent, args.window - (sent - pair.consumer.delivered))
        if wanted > 0:
            pair.publish(wanted)
            sent += wanted
            await pair.producer.drain()
            await asyncio.sleep(0)
        else:
            await pair.delivered(sent - args.window + BATCH)
    await pair.delivered(args.count)
    elapsed = time.monotonic() - started
    cpu_us = (stats.tree_cpu_seconds(broker.pid) - cpu) / args.count * 1e6
    system_us = (stats.tree_system_seconds(broker.pid) - system) / args.count * 1e6
    writes = stats.tree_write_calls(broker.pid) - writes
    after = scaling.crossed(broker)
    pair.consumer.latencies_ns.clear()
    total = pair.consumer.delivered
    ticks = int(args.seconds / TICK_S)
    per_tick = max(1, round(args.rate * TICK_S))
    start = time.monotonic()
    for tick in range(ticks):
        pair.publish(per_tick)
        await asyncio.sleep(max(0.0, start + (tick + 1) * TICK_S - time.monotonic()))
    await pair.delivered(total + ticks * per_tick)
    latencies = sorted(pair.consumer.latencies_ns)
    for conn in (pair.producer, pair.consumer):
        await conn.close()
    for conn, queue in zip(declarers, (near, far), strict=True):
        await conn.delete_queue(queue)
        await conn.close()
    return {
        "msg_per_s": args.count / elapsed,
        "cpu_us_per_msg": cpu_us,
        "system_us_per_msg": system_us,
        "writes_per_msg": writes / args.count,
        "crossings_per_msg": None if crossed is None or after is None else (after - crossed) / sent,
        "p50_ms": latencies[len(latencies) // 2] / 1e6,
        "p99_ms": latencies[int(len(latencies) * 0.99)] / 1e6,
    }


FIGURES = (
    ("node CPU us/msg", "cpu_us_per_msg", "{:.1f}"),
    ("of it in the kernel, us/msg", "system_us_per_msg", "{:.1f}"),
    ("node's write calls per message", "writes_per_msg", "{:.4f}"),
    ("msg/s", "msg_per_s", "{:,.0f}"),
    ("crossings per message", "crossings_per_msg", "{:.2f}"),
    ("latency p50 ms (fixed rate)", "p50_ms", "{:.2f}"),
    ("latency p99 ms (fixed rate)", "p99_ms", "{:.2f}"),
)


def table(records: dict[str, list[dict[str, Any]]]) -> str:
    names = list(records)
    rows = ["| | " + " | ".join(names) + " | median after / before |", "|---|---|---|---|"]
    for label, key, shown in FIGURES:
        values = [[r[key] for r in records[name] if r[key] is not None] for name in names]
        medians = [statistics.median(v) if v else None for v in values]
        ratio = f"{medians[1] / medians[0]:.2f}x" if medians[0] and medians[1] else "-"
        runs = [", ".join(shown.format(v) for v in each) for each in values]
        rows.append(f"| {label} | " + " | ".join(runs) + f" | {ratio} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = ["before", "after"]
    targets: list[Broker] = []
    try:
        for name, tree in zip(names, args.trees, strict=True):
            broker, why = brokers.start_warren(
                tree=str(tree.resolve()), workers=2, name=name, python=args.python
            )
            if broker is None:
                print(why, file=sys.stderr)
                return 1
            targets.append(broker)
        time.sleep(2.0)  # both workers of both nodes up
        records: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for rep in range(args.reps):
            order = targets if rep % 2 == 0 else targets[::-1]
            for broker in order:
                record = asyncio.run(_measure(broker, args))
                records[broker.name].append(record)
                shown = ", ".join(f"{key} {value:.3g}" for key, value in record.items() if value)
                print(f"{broker.name} rep {rep}: {shown}", flush=True)
    finally:
        for broker in targets:
            broker.stop()
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
