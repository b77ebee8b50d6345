"""The load generator's command line and coordinator (`python -m bench.loadgen`).

Owns one run: it declares the queues, starts one spawned OS process per consumer and then per
producer (see `bench.workers`), lets them warm up, measures a window (counter deltas, latency
histograms, CPU time of the worker processes and of the broker's process tree, broker RSS),
follows the run second by second (`Timeline`: rates, the queues' depth, the backlog, the
broker's CPU), stops everything, deletes the queues and prints ONE JSON line with every
option plus results.
With `--count` the run instead lasts until that many messages are published (and confirmed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing as mp
import os
import queue as queue_module
import sys
import threading
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bench import stats
from bench.wire import AmqpError, Connection, connect
from bench.workers import (
    CONFIRMED,
    CONSUMED,
    COUNTER_FIELDS,
    DONE,
    FAILED,
    MEASURE,
    NACKED,
    PUBLISHED,
    READY,
    RUN,
    STATUS,
    STOP,
    WAIT,
    WorkerSpec,
    worker_main,
)

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
READY_TIMEOUT_S = 30.0
POLL_S = 0.05
CHECK_S = 0.25  # how often a warm-up or measured window looks for a failed worker: rarely,
# as the coordinator's own CPU is the load generator's too (its wake-ups are not free)
TIMELINE_S = 1.0  # the run second by second (`Timeline`), taken on those wake-ups
PROBE_TIMEOUT_S = 5.0
T = TypeVar("T")


class RunFailed(Exception):
    """A worker failed or did not get ready; the run is reported with an `error`."""


# ---------------------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__)
    p.add_argument("--url", default=DEFAULT_URL)
    p.add_argument("--producers", type=int, default=1)
    p.add_argument("--consumers", type=int, default=1)
    p.add_argument("--queues", type=int, default=1)
    p.add_argument("--size", type=int, default=128, help="body bytes (>= 8)")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    p.add_argument("--queue-type", choices=["classic", "quorum"], default="classic")
    p.add_argument("--durable", action="store_true")
    p.add_argument("--persistent", action="store_true", help="delivery-mode 2")
    p.add_argument("--confirm", type=int, default=0, metavar="WINDOW", help="0 = no confirms")
    p.add_argument("--ack", choices=["auto", "manual"], default="auto")
    p.add_argument("--prefetch", type=int, default=1000)
    p.add_argument("--rate", type=float, default=0.0, help="total msgs/s, 0 = unlimited")
    p.add_argument("--count", type=int, default=0, help="total messages, then stop")
    p.add_argument("--max-length", type=int, default=0, help="x-max-length, 0 = none")
    p.add_argument("--overflow", default="drop-head", help="x-overflow with --max-length")
    p.add_argument("--batch", type=int, default=500, help="messages per socket write")
    p.add_argument("--broker-pid", type=int, default=0, help="for CPU and RSS accounting")
    p.add_argument(
        "--peer-pid",
        type=int,
        action="append",
        default=[],
        help="another node of the broker's cluster, for CPU accounting (repeatable)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="limit for --count runs")
    p.add_argument(
        "--memory-api",
        default="",
        help="RabbitMQ management URL (http://user:pass@host:15672) to also read VM memory",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="wait up to this many seconds for the broker's RSS to settle before reading it",
    )
    args = p.parse_args(argv)
    if args.size < 8:
        p.error("--size must be at least 8 (the body carries an 8-byte timestamp)")
    if args.queue_type == "quorum":
        args.durable = True  # quorum queues are always durable
    return args


# ---------------------------------------------------------------------------- queues


def queue_names(args: argparse.Namespace) -> list[str]:
    token = uuid.uuid4().hex[:8]
    return [f"bench-{token}-{i}" for i in range(args.queues)]


def queue_arguments(args: argparse.Namespace) -> dict[str, object]:
    arguments: dict[str, object] = {"x-queue-type": args.queue_type}
    if args.max_length:
        arguments["x-max-length"] = args.max_length
        arguments["x-overflow"] = args.overflow
    return arguments


async def declare_queues(args: argparse.Namespace, names: list[str]) -> None:
    conn = await connect(args.url, Connection)
    try:
        for name in names:
            await conn.declare_queue(name, args.durable, queue_arguments(args))
    finally:
        await conn.close()


async def delete_queues(url: str, names: list[str]) -> None:
    conn = await connect(url, Connection)
    try:
        for name in names:
            await conn.delete_queue(name)
    finally:
        await conn.close()


# ---------------------------------------------------------------------------- workers


@dataclass
class Worker:
    spec: WorkerSpec
    process: Any
    counters: Any

    @property
    def status(self) -> int:
        return int(self.counters[STATUS])


@dataclass
class Fleet:
    """The spawned worker processes of one run and what they share with the coordinator."""

    ctx: Any = field(default_factory=lambda: mp.get_context("spawn"))
    workers: list[Worker] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.phase = self.ctx.RawValue("i", WAIT)
        self.results = self.ctx.Queue()
        self.collected: list[dict[str, Any]] = []

    def start(self, spec: WorkerSpec) -> Worker:
        counters = self.ctx.RawArray("q", COUNTER_FIELDS)
        process = self.ctx.Process(
            target=worker_main, args=(spec, counters, self.phase, self.results), daemon=True
        )
        process.start()
        worker = Worker(spec, process, counters)
        self.workers.append(worker)
        return worker

    def role(self, role: str) -> list[Worker]:
        return [w for w in self.workers if w.spec.role == role]

    def total(self, index: int) -> int:
        return sum(int(w.counters[index]) for w in self.workers)

    def check(self) -> None:
        if any(w.status == FAILED or not w.process.is_alive() for w in self.workers):
            errors = [r["error"] for r in self.collect(1.0) if "error" in r]
            raise RunFailed("; ".join(errors) or "a worker process died")

    def wait_status(self, workers: list[Worker], status: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not all(w.status == status for w in workers):
            self.check()
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True

    def collect(self, timeout: float) -> list[dict[str, Any]]:
        """Result dicts posted so far, waiting up to `timeout` for the missing ones."""
        deadline = time.monotonic() + timeout
        while len(self.collected) < len(self.workers) and time.monotonic() < deadline:
            try:
                self.collected.append(self.results.get(timeout=POLL_S))
            except queue_module.Empty:
                if not any(w.process.is_alive() for w in self.workers):
                    break
        return self.collected

    def stop(self) -> list[dict[str, Any]]:
        self.phase.value = STOP
        results = self.collect(15.0)
        for w in self.workers:
            w.process.join(5.0)
            if w.process.is_alive():
                w.process.terminate()
        return results


def worker_specs(args: argparse.Namespace, names: list[str], role: str) -> list[WorkerSpec]:
    n = args.producers if role == "producer" else args.consumers
    common = {"url": args.url, "size": args.size, "batch": args.batch}
    return [
        WorkerSpec(
            role=role,
            index=i,
            queue=names[i % len(names)],
            persistent=args.persistent,
            confirm=args.confirm,
            rate=args.rate / n if args.rate else 0.0,
            count=_share(args.count, n, i),
            manual_ack=args.ack == "manual",
            prefetch=args.prefetch,
            **common,
        )
        for i in range(n)
    ]


def _share(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


# ---------------------------------------------------------------------------- measuring


@dataclass
class Snapshot:
    at: float
    counts: dict[str, int]
    worker_cpu: dict[int, float]
    own_cpu: float
    broker_cpu: float
    peer_cpu: list[float]
    machine_cpu: float

    @classmethod
    def take(cls, fleet: Fleet, broker_pid: int, peer_pids: list[int]) -> Snapshot:
        fields = {"published": PUBLISHED, "confirmed": CONFIRMED, "nacked": NACKED}
        fields["consumed"] = CONSUMED
        return cls(
            at=time.monotonic(),
            counts={name: fleet.total(index) for name, index in fields.items()},
            worker_cpu={w.process.pid: stats.cpu_seconds(w.process.pid) for w in fleet.workers},
            own_cpu=stats.cpu_seconds(os.getpid()),
            broker_cpu=stats.tree_cpu_seconds(broker_pid) if broker_pid else 0.0,
            peer_cpu=[stats.tree_cpu_seconds(pid) for pid in peer_pids],
            machine_cpu=stats.machine_busy_seconds(),
        )


def _per_message(cpu_s: float, messages: int) -> float | None:
    return round(1e6 * cpu_s / messages, 2) if messages else None


def window_results(
    a: Snapshot, b: Snapshot, broker_pid: int, roles: dict[int, str]
) -> dict[str, Any]:
    """Counts, rates and CPU over the window `a`..`b`; `roles` maps worker PIDs to roles."""
    elapsed = b.at - a.at
    out: dict[str, Any] = {"elapsed_s": round(elapsed, 3)}
    for name, end in b.counts.items():
        out[name] = end - a.counts[name]
        out[f"{name}_per_s"] = round(out[name] / elapsed, 1)
    per_worker = {pid: b.worker_cpu[pid] - a.worker_cpu[pid] for pid in b.worker_cpu}
    loadgen_cpu = sum(per_worker.values()) + b.own_cpu - a.own_cpu
    out["loadgen_cpu_s"] = round(loadgen_cpu, 2)
    out["loadgen_cpu_pct"] = round(100 * loadgen_cpu / elapsed, 1)
    out["loadgen_max_process_cpu_pct"] = round(
        100 * max(per_worker.values(), default=0) / elapsed, 1
    )
    # CPU per message: the whole load generator's per message consumed (published where
    # nothing consumes), each role's per message it handled
    out["loadgen_cpu_us_per_msg"] = _per_message(loadgen_cpu, out["consumed"] or out["published"])
    for role, handled in (("producer", "published"), ("consumer", "consumed")):
        cpu = sum(per_worker[pid] for pid in b.worker_cpu if roles.get(pid) == role)
        out[f"{role}_cpu_us_per_msg"] = _per_message(cpu, out[handled])
    broker_cpu = b.broker_cpu - a.broker_cpu
    if broker_pid:
        out["broker_cpu_s"] = round(broker_cpu, 2)
        out["broker_cpu_pct"] = round(100 * broker_cpu / elapsed, 1)
    peer_cpu = [end - start for start, end in zip(a.peer_cpu, b.peer_cpu, strict=True)]
    if peer_cpu:
        # every node, the measured one first: % of a core and CPU per published message
        nodes = [broker_cpu, *peer_cpu]
        out["node_cpu_pct"] = [round(100 * cpu / elapsed, 1) for cpu in nodes]
        messages = max(out["published"], 1)
        out["node_cpu_us_per_msg"] = [round(1e6 * cpu / messages, 1) for cpu in nodes]
        out["cluster_cpu_us_per_msg"] = round(1e6 * sum(nodes) / messages, 1)
    other = b.machine_cpu - a.machine_cpu - loadgen_cpu - broker_cpu - sum(peer_cpu)
    out["other_cpu_pct"] = round(max(0.0, 100 * other / elapsed), 1)
    return out


def latency_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    histogram = stats.LatencyHistogram()
    for result in results:
        if "latency" in result:
            histogram.merge_sparse(result["latency"], result["latency_total_us"])
    return histogram.summary_ms()


class DepthProbe:
    """The queues' ready messages, asked as any client would (a passive queue.declare's
    message-count, live on both brokers) on a connection of the coordinator's own, served by
    an event loop on a thread of its own: one round trip a queue a `TIMELINE_S`."""

    def __init__(self, url: str, names: list[str]) -> None:
        self.names = names
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.conn: Connection = self._call(connect(url, Connection))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(PROBE_TIMEOUT_S)

    def depth(self) -> int:
        return sum(self._call(self.conn.queue_depth(name)) for name in self.names)

    def close(self) -> None:
        with contextlib.suppress(AmqpError, OSError, TimeoutError):
            self._call(self.conn.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class Timeline:
    """The run second by second, warm-up included: what was published and consumed, the
    queues' depth (`DepthProbe`), the backlog (published and not yet consumed: the depth
    plus what is in flight in sockets and buffers) and the broker's CPU, so a run's rate can
    be seen to hold, climb or sag, and why."""

    def __init__(self, fleet: Fleet, broker_pid: int, probe: DepthProbe) -> None:
        self.fleet, self.broker_pid, self.probe = fleet, broker_pid, probe
        self.samples: list[tuple[float, int, int, float, int]] = []
        self.measured_from = 0.0  # when the measured window began, on the same clock
        self.due = 0.0

    def sample(self, closing: bool = False) -> None:
        now = time.monotonic()
        if now < self.due and not closing:
            return
        self.due = now + TIMELINE_S
        broker_cpu = stats.tree_cpu_seconds(self.broker_pid) if self.broker_pid else 0.0
        published, consumed = self.fleet.total(PUBLISHED), self.fleet.total(CONSUMED)
        self.samples.append((now, published, consumed, broker_cpu, self.probe.depth()))

    def results(self) -> dict[str, list[float]]:
        """Per interval: its end (seconds from the window's start; negative in the warm-up),
        the rates, the depth and backlog at its end and the broker's share of a core."""
        out: dict[str, list[float]] = {
            key: []
            for key in (
                "s",
                "published_per_s",
                "consumed_per_s",
                "depth",
                "backlog",
                "broker_cpu_pct",
            )
        }
        for (t0, p0, c0, b0, _), (t1, p1, c1, b1, depth) in itertools.pairwise(self.samples):
            out["s"].append(round(t1 - self.measured_from, 2))
            out["published_per_s"].append(round((p1 - p0) / (t1 - t0)))
            out["consumed_per_s"].append(round((c1 - c0) / (t1 - t0)))
            out["depth"].append(depth)
            out["backlog"].append(p1 - c1)
            out["broker_cpu_pct"].append(round(100 * (b1 - b0) / (t1 - t0), 1))
        return out


# ---------------------------------------------------------------------------- one run


def measure_duration(
    fleet: Fleet, args: argparse.Namespace, timeline: Timeline
) -> tuple[Snapshot, Snapshot]:
    fleet.phase.value = RUN
    _sleep_checking(fleet, args.warmup, timeline)
    first = Snapshot.take(fleet, args.broker_pid, args.peer_pid)
    timeline.measured_from = first.at
    fleet.phase.value = MEASURE
    _sleep_checking(fleet, args.duration, timeline)
    return first, Snapshot.take(fleet, args.broker_pid, args.peer_pid)


def measure_count(
    fleet: Fleet, args: argparse.Namespace, timeline: Timeline
) -> tuple[Snapshot, Snapshot]:
    first = Snapshot.take(fleet, args.broker_pid, args.peer_pid)
    timeline.measured_from = first.at
    fleet.phase.value = MEASURE
    if not fleet.wait_status(fleet.role("producer"), DONE, args.timeout):
        raise RunFailed(f"--count not reached within {args.timeout} s")
    return first, Snapshot.take(fleet, args.broker_pid, args.peer_pid)


def _sleep_checking(fleet: Fleet, seconds: float, timeline: Timeline) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        fleet.check()
        timeline.sample()
        time.sleep(min(CHECK_S, left))


def broker_memory(args: argparse.Namespace) -> dict[str, int]:
    """Broker RSS (settled, from /proc) and, with --memory-api, the Erlang VM's memory."""
    memory = {}
    if args.broker_pid:
        memory["rss"] = stats.settled_tree_rss(args.broker_pid, args.settle)
    if args.memory_api:
        memory["vm_mem"] = stats.rabbitmq_vm_memory(args.memory_api)
    return memory


def memory_results(before: dict[str, int], after: dict[str, int], count: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in before:
        out[f"broker_{kind}_before"], out[f"broker_{kind}_after"] = before[kind], after[kind]
        if count:
            out[f"{kind}_bytes_per_msg"] = round((after[kind] - before[kind]) / count, 1)
    return out


def drive(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    fleet = Fleet()
    try:
        for role in ("consumer", "producer"):
            started = [fleet.start(spec) for spec in worker_specs(args, names, role)]
            if not fleet.wait_status(started, READY, READY_TIMEOUT_S):
                raise RunFailed(f"{role}s not ready within {READY_TIMEOUT_S} s")
        memory_before = broker_memory(args)
        probe = DepthProbe(args.url, names)
        try:
            timeline = Timeline(fleet, args.broker_pid, probe)
            first, last = (measure_count if args.count else measure_duration)(fleet, args, timeline)
            timeline.sample(closing=True)
        finally:
            probe.close()
        memory_after = broker_memory(args)
    except BaseException:
        fleet.stop()
        raise
    roles = {w.process.pid: w.spec.role for w in fleet.workers}
    out = window_results(first, last, args.broker_pid, roles)
    results = fleet.stop()
    # warm-up and ramp-down included
    out["published_total"], out["consumed_total"] = fleet.total(PUBLISHED), fleet.total(CONSUMED)
    out["timeline"] = timeline.results()
    out.update(latency_results(results))
    out.update(memory_results(memory_before, memory_after, args.count))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One complete run: every option plus its results (or an `error`)."""
    record: dict[str, Any] = dict(vars(args), started_at=time.time(), cores=os.cpu_count())
    names = queue_names(args)
    try:
        asyncio.run(declare_queues(args, names))
    except (AmqpError, OSError) as exc:
        return dict(record, error=f"queue.declare failed: {exc}")
    try:
        record.update(drive(args, names))
    except (RunFailed, AmqpError, OSError, ValueError, KeyError) as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            asyncio.run(delete_queues(args.url, names))
        except (AmqpError, OSError) as exc:
            record.setdefault("warning", f"queue.delete failed: {exc}")
    return record


def main(argv: list[str] | None = None) -> int:
    record = run(parse_args(argv))
    print(json.dumps(record), flush=True)
    return 1 if "error" in record else 0


if __name__ == "__main__":
    sys.exit(main())
