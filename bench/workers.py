"""The producer and consumer processes of the load generator.

Owns what runs inside one worker OS process: its spec, the live counters it shares with the
coordinator (a small shared-memory array per worker plus one shared phase word), the
publish loop (pre-encoded batches, timestamp patching, drain, confirm window, optional fixed
rate or message count) and the consuming side (deliver parsing, multiple-acks, latency).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import struct
import time
import traceback
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.stats import LatencyHistogram
from bench.wire import (
    BASIC_ACK,
    BASIC_DELIVER,
    BASIC_NACK,
    FRAME_HEAD,
    METHOD_ID,
    U64,
    Connection,
    DeliveryLayout,
    PublishTemplate,
    ack_frame,
    connect,
    publish_template,
)

# Phases of a run, written by the coordinator into the shared phase word.
WAIT, RUN, MEASURE, STOP = 0, 1, 2, 3
# Worker statuses and the layout of each worker's shared counter array.
STARTING, READY, DONE, FAILED = 0, 1, 2, 3
STATUS, PUBLISHED, CONFIRMED, NACKED, CONSUMED = range(5)
COUNTER_FIELDS = 5
# How often a worker looks at the phase word and, consuming, flushes acks and folds latencies.
# Every wake-up costs CPU (some 100 us on a loaded 2-core machine, cache cold after the
# switch), which at 100 a second was a tenth of a core across W4's 8 workers; a phase is seen
# at most this late, which moves only where the latency window starts and ends.
POLL_S = 0.1
MIN_SLEEP_S = 0.001  # shorter sleeps round to zero in the event loop and would spin
_ACK_ARGS = struct.Struct("!QB")
# mallopt(3) parameters and values for `keep_freed_memory`: M_TRIM_THRESHOLD, M_TOP_PAD and
# M_MMAP_THRESHOLD (32 MB, glibc's largest on 64-bit)
MALLOC_KEEP = ((-1, 256 << 20), (-2, 16 << 20), (-3, 32 << 20))


@dataclass(frozen=True)
class WorkerSpec:
    role: str  # "producer" | "consumer"
    index: int
    url: str
    queue: str
    size: int = 128
    persistent: bool = False
    confirm: int = 0  # max unconfirmed publishes; 0 = no publisher confirms
    rate: float = 0.0  # msgs/s for this producer; 0 = as fast as possible
    count: int = 0  # messages for this producer to publish; 0 = until told to stop
    batch: int = 500  # messages per socket write
    manual_ack: bool = False
    prefetch: int = 1000


# ---------------------------------------------------------------------------- producer


class ProducerConnection(Connection):
    """Counts publisher confirms (basic.ack / basic.nack, honouring `multiple`) into the shared
    counters once per read."""

    def __init__(self, counters: Any) -> None:
        super().__init__()
        self.counters = counters
        self.confirmed = 0
        self.nacked = 0
        self.window_open = asyncio.Event()
        self._floor = 0  # every tag <= floor is settled
        self._singles: set[int] = set()  # settled tags above the floor
        self.fast_methods = {BASIC_ACK: self._on_ack, BASIC_NACK: self._on_nack}

    def settled(self) -> int:
        return self.confirmed + self.nacked

    def _on_ack(self, buf: bytearray, start: int, end: int) -> None:
        tag, flags = _ACK_ARGS.unpack_from(buf, start)
        self.confirmed += self._settle(tag, bool(flags & 1))
        self.window_open.set()

    def _on_nack(self, buf: bytearray, start: int, end: int) -> None:
        tag, flags = _ACK_ARGS.unpack_from(buf, start)
        self.nacked += self._settle(tag, bool(flags & 1))
        self.window_open.set()

    def _settle(self, tag: int, multiple: bool) -> int:
        """How many publishes this confirm settles that were not settled before."""
        if tag <= self._floor or tag in self._singles:
            return 0
        if multiple:
            below = {t for t in self._singles if t <= tag}
            self._singles -= below
            settled = tag - self._floor - len(below)
            self._floor = tag
            return settled
        self._singles.add(tag)
        while self._floor + 1 in self._singles:
            self._floor += 1
            self._singles.remove(self._floor)
        return 1

    def on_chunk_end(self) -> None:
        self.counters[CONFIRMED], self.counters[NACKED] = self.confirmed, self.nacked

    def on_fail(self) -> None:
        self.window_open.set()


class Batch:
    """`size` copies of the publish template in one buffer; stamping patches 8 bytes each,
    all of them in one numpy assignment (the stamps are a column of the messages' rows)."""

    def __init__(self, template: PublishTemplate, size: int) -> None:
        self.message_bytes = len(template.frames)
        self.buffer = bytearray(template.frames * size)
        rows = np.frombuffer(self.buffer, np.uint8).reshape(size, self.message_bytes)
        self._stamps = rows[:, template.stamp_offset : template.stamp_offset + U64.size]

    def stamped(self, count: int) -> bytes:
        """The first `count` messages with the current time as their send timestamp."""
        self._stamps[:count] = np.frombuffer(U64.pack(time.monotonic_ns()), np.uint8)
        return bytes(memoryview(self.buffer)[: count * self.message_bytes])


class Pacer:
    """Hands out messages at a fixed rate (unlimited when rate is 0)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.sent = 0
        self.start = time.monotonic()

    async def take(self, wanted: int) -> int:
        if not self.rate:
            return wanted
        while True:
            due = int((time.monotonic() - self.start) * self.rate) - self.sent
            if due > 0:
                granted = min(wanted, due)
                self.sent += granted
                return granted
            next_at = self.start + (self.sent + 1) / self.rate
            await asyncio.sleep(max(MIN_SLEEP_S, next_at - time.monotonic()))


async def _open_window(conn: ProducerConnection, spec: WorkerSpec, published: int) -> int:
    """How many more publishes the confirm window allows; waits briefly when it is full."""
    if not spec.confirm:
        return spec.batch
    room = spec.confirm - (published - conn.settled())
    if room <= 0:
        await _next_confirm(conn)
    return min(room, spec.batch)


async def _next_confirm(conn: ProducerConnection) -> None:
    """Wait until a confirm arrives (or 0.1 s pass, so the caller can re-check the phase)."""
    conn.window_open.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(conn.window_open.wait(), 0.1)
    conn.check()


async def _publish(conn: ProducerConnection, spec: WorkerSpec, counters: Any, phase: Any) -> None:
    template = publish_template(spec.queue, spec.size, spec.persistent, conn.frame_max)
    batch = Batch(template, spec.batch)
    assert conn.transport is not None
    conn.transport.set_write_buffer_limits(high=max(4 * len(batch.buffer), 1 << 20))
    pacer, published = Pacer(spec.rate), 0
    while phase.value < STOP and not (spec.count and published >= spec.count):
        wanted = await _open_window(conn, spec, published)
        if spec.count:
            wanted = min(wanted, spec.count - published)
        if wanted <= 0:
            continue
        count = await pacer.take(wanted)
        conn.send(batch.stamped(count))
        published += count
        counters[PUBLISHED] = published
        await conn.drain()
        await asyncio.sleep(0)
    while spec.confirm and conn.settled() < published and phase.value < STOP:
        await _next_confirm(conn)


async def run_producer(spec: WorkerSpec, counters: Any, phase: Any) -> dict[str, Any]:
    conn = await connect(spec.url, functools.partial(ProducerConnection, counters))
    if spec.confirm:
        await conn.confirm_select()
    counters[STATUS] = READY
    await _wait_phase(phase, RUN)
    await _publish(conn, spec, counters, phase)
    counters[STATUS] = DONE
    await _wait_phase(phase, STOP)
    await conn.close()
    return {}


# ---------------------------------------------------------------------------- consumer


class ConsumerConnection(Connection):
    """Counts deliveries, acks with multiple=true every `ack_every`, measures latency."""

    def __init__(self, counters: Any, ack_every: int) -> None:
        super().__init__()
        self.delivered = 0
        self.ack_every = ack_every  # 0 = auto-ack (no-ack consumer)
        self.measuring = False
        self.histogram = LatencyHistogram()
        self._latencies = array("q")  # ns, folded into the histogram by `fold_latencies`
        self.counters = counters
        self._last_tag = 0
        self._acked_tag = 0
        self._acked_count = 0
        self._stamp_next = False
        # the layout of a delivery, learnt from the first one read whole in one chunk: where
        # its deliver frame started in this chunk (-1: not in it) and its body's size
        self._layout: DeliveryLayout | None = None
        self._deliver_at = -1
        self._body_size = 0
        self.fast_methods = {BASIC_DELIVER: self._on_deliver}

    def _on_deliver(self, buf: bytearray, start: int, end: int) -> None:
        self._last_tag = U64.unpack_from(buf, start + 1 + buf[start])[0]
        self.delivered += 1
        self._stamp_next = True
        self._deliver_at = start - FRAME_HEAD.size - METHOD_ID.size

    def on_header(self, buf: bytearray, start: int, end: int) -> None:
        self._body_size = U64.unpack_from(buf, start + 4)[0]  # after class id and weight

    def on_body(self, buf: bytearray, start: int, end: int) -> int:
        if not self._stamp_next:
            return end + 1  # a later body frame of a message larger than frame_max
        self._stamp_next = False
        if self.measuring:
            self._latencies.append(self.received_ns - U64.unpack_from(buf, start)[0])
        if self._layout is None:
            if self._deliver_at < 0 or end - start != self._body_size:
                return end + 1  # not whole in this chunk, or in several body frames
            first = self._deliver_at
            args_at = FRAME_HEAD.size + METHOD_ID.size  # the consumer tag's length octet
            tag_at = args_at + 1 + buf[first + args_at]
            self._layout = DeliveryLayout(bytes(buf[first : end + 1]), tag_at, start - first)
        return self._take_run(buf, end + 1)

    def _take_run(self, buf: bytearray, at: int) -> int:
        """Read the run of deliveries laid out alike at `at`; where reading goes on."""
        layout = self._layout
        assert layout is not None
        count, stamps = layout.take(buf, at, self.measuring)
        if not count:
            return at
        end = at + count * layout.length
        self._last_tag = U64.unpack_from(buf, end - layout.length + layout.tag_at)[0]
        self.delivered += count
        if stamps is not None:
            self._latencies.frombytes((self.received_ns - stamps).tobytes())
        return end

    def on_chunk_end(self) -> None:
        self._deliver_at = -1
        if self.ack_every and self.delivered - self._acked_count >= self.ack_every:
            self.flush_acks()
        self.counters[CONSUMED] = self.delivered

    def fold_latencies(self) -> None:
        self.histogram.record_many_ns(self._latencies)
        self._latencies = array("q")

    def flush_acks(self) -> None:
        if self.ack_every and self._last_tag > self._acked_tag:
            self.send(ack_frame(self._last_tag, True))
            self._acked_tag, self._acked_count = self._last_tag, self.delivered


async def run_consumer(spec: WorkerSpec, counters: Any, phase: Any) -> dict[str, Any]:
    ack_every = max(1, spec.prefetch // 2) if spec.manual_ack else 0
    conn = await connect(spec.url, functools.partial(ConsumerConnection, counters, ack_every))
    await conn.qos(spec.prefetch)
    await conn.consume(spec.queue, no_ack=not spec.manual_ack)
    counters[STATUS] = READY
    while phase.value < STOP:
        conn.check()
        conn.measuring = phase.value == MEASURE
        conn.flush_acks()
        conn.fold_latencies()
        await asyncio.sleep(POLL_S)
    conn.measuring = False
    conn.flush_acks()
    conn.fold_latencies()
    await conn.close()
    return {"latency": conn.histogram.to_sparse(), "latency_total_us": conn.histogram.total_us}


# ---------------------------------------------------------------------------- process entry


async def _wait_phase(phase: Any, wanted: int) -> None:
    while phase.value < wanted:
        await asyncio.sleep(POLL_S)


def _event_loop_runner() -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep what is freed for the next allocation (False: not glibc).

    Every chunk a worker reads or writes (tens to hundreds of KB: the socket read, the
    consumer's numpy rows, a producer's stamped batch) is a block as large as glibc's mmap
    threshold or one that frees the top of the heap, so by default each is mapped and
    unmapped, or the heap grown and trimmed, around every use: fresh pages, a page fault and
    a zeroed page each 4 KB (0.2 faults a message consumed in W4, a quarter of a consumer's
    CPU). Raising the thresholds keeps those pages mapped and warm; a worker's heap stays at
    its high-water mark, a few MB."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(param, value) == 1 for param, value in MALLOC_KEEP)


def worker_main(spec: WorkerSpec, counters: Any, phase: Any, results: Any) -> None:
    """Process target: run one producer or consumer, then post its result dict."""
    keep_freed_memory()
    role = run_producer if spec.role == "producer" else run_consumer
    result: dict[str, Any] = {"role": spec.role, "index": spec.index}
    try:
        result.update(_event_loop_runner()(role(spec, counters, phase)))
    except Exception as exc:  # reported to the coordinator, which fails the run
        counters[STATUS] = FAILED
        result["error"] = f"{spec.role} {spec.index}: {type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
    results.put(result)
