"""Throughput of the `amqp` data source in Spark local mode, side by side with plain pika.

    .venv/bin/python -m bench.spark_throughput                  # a Warren it starts, and RabbitMQ
    .venv/bin/python -m bench.spark_throughput --brokers warren --messages 50000

For each broker in turn (a Warren node it starts on free ports, the RabbitMQ of
`RABBITMQ_URL` or 127.0.0.1:5672), on one durable queue, 128-byte persistent messages:
1. pika publish: one plain pika client (`SelectConnection`) publishing with confirms, at most
   `--confirm-window` unconfirmed; the writer's yardstick.
2. pika consume: one plain pika client (`BlockingConnection`) consuming the queue empty,
   prefetch 20,000, one `basic.ack` with `multiple` per 1,000 messages; the reader's yardstick.
3. Spark write: `spark.range(n)` in Spark's default parallelism → `df.write.format("amqp")`
   (the writer's default confirm window unless `--spark-confirm-window`), wall time of
   `save()`, after two 1,000-row writes in as many partitions, reported apart: the first
   starts every task's Python worker (`spark_write_warmup_s`), the second is a write's fixed
   cost once they run (`spark_write_job_s`). For both publishers the broker's share of one
   core over the publishing is printed (`*_broker_core`, from /proc; RabbitMQ's when it runs
   here): near 1.0 the broker is the limit, not its client.
4. Spark read: `readStream.format("amqp")` → `noop` sink with Trigger.AvailableNow, the
   queue's n messages; `spark_read` is the wall time from `start()` (so with the query's
   start), `spark_read_in_batches` only the time inside micro-batches (`triggerExecution`),
   and Spark's own split (`durationMs`) is printed. `spark_read_first_s` is the time from
   `start()` to the end of the first micro-batch; `maxWaitMs` is 10 s, so a broker that
   stalls does not end the read early (the pika consumer, too, waits for every message).
   As for the publishers, the broker's share of a core is printed for both consumers
   (`pika_consume_broker_core`, `spark_read_broker_core`).
   Before it, a warm-up read of the 1,000 messages the warm-up write left pays what only a
   session's first streaming query pays (JVM classes and code generation, the Python worker
   that plans a Python source's reads, started once and then reused); its wall time and
   start are reported apart (`spark_read_warmup_*`). The measured query still counts its own
   start: its planner process, its consumers' connections, its first micro-batch. The start
   is split into the time before the first trigger and after the last one ended (the
   query's stop: its consumers close, its planner process ends).
`build_session` (the JVM and the SparkContext) is timed once, before everything else.
Spark's Python processes import from bytecode cached in a temporary directory, as from an
installed package, even where `PYTHONDONTWRITEBYTECODE` is set (`with_bytecode`).
Ratios are each Spark figure over its pika yardstick, of the same broker in the same run.
Prints one table per broker (with the machine's 1-minute load average before and after it)
and one JSON line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile
import time
from collections import Counter
from typing import Any

import pika
import pika.channel
import pika.frame
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench import stats
from bench.brokers import Broker, find_rabbitmq, start_warren
from warren.spark import build_session

BODY_BYTES = 128
PREFETCH = 20_000
ACK_EVERY = 1_000
WARM_UP_ROWS = 1_000  # messages written and read once before the measured write and read
# Trigger.AvailableNow ends a read when the queue stays quiet this long. The default (500 ms)
# ended a read of RabbitMQ at load 15 after 68,450 of 200,000 messages (a stall after a
# batch's acknowledgement); the pika consumer waits for every message, so the read does too.
QUIET_MS = 10_000


def declare(url: str, queue: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.queue_delete(queue)
        channel.queue_declare(queue, durable=True)


def pika_publish(url: str, queue: str, count: int, window: int) -> float:
    """Yardstick 1: msg/s."""
    body, properties = b"x" * BODY_BYTES, pika.BasicProperties(delivery_mode=2)
    sent = confirmed = 0

    def fill(channel: pika.channel.Channel) -> None:
        nonlocal sent
        while sent < count and sent - confirmed < window:
            channel.basic_publish("", queue, body, properties)
            sent += 1

    def on_confirm(frame: pika.frame.Method[Any]) -> None:
        nonlocal confirmed
        confirmed = max(confirmed, frame.method.delivery_tag)
        if confirmed >= count:
            connection.close()
        else:
            fill(channel_of[0])

    channel_of: list[pika.channel.Channel] = []

    def on_channel(channel: pika.channel.Channel) -> None:
        channel_of.append(channel)
        channel.confirm_delivery(on_confirm, callback=lambda _frame: fill(channel))

    started = time.perf_counter()
    connection = pika.SelectConnection(
        pika.URLParameters(url),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_close_callback=lambda c, _error: c.ioloop.stop(),
    )
    connection.ioloop.start()
    elapsed = time.perf_counter() - started
    connection.ioloop.close()  # its waker's socket pair
    return count / elapsed


def pika_consume(url: str, queue: str, count: int) -> float:
    """Yardstick 2: msg/s."""
    received = 0
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=PREFETCH)

        def on_message(ch: Any, method: Any, _properties: Any, _body: bytes) -> None:
            nonlocal received
            received += 1
            if received % ACK_EVERY == 0 or received == count:
                ch.basic_ack(method.delivery_tag, multiple=True)

        started = time.perf_counter()
        channel.basic_consume(queue, on_message)
        while received < count:
            connection.process_data_events(time_limit=1)
        elapsed = time.perf_counter() - started
    return count / elapsed


class BrokerCpu:
    """The share of one core the broker's processes used inside the `with` (None when its
    PID is unknown): at 1.0 the broker is the limit, not its client."""

    def __init__(self, broker: Broker) -> None:
        self._pid = broker.pid
        self.share: float | None = None

    def __enter__(self) -> BrokerCpu:
        self._started = time.perf_counter(), stats.tree_cpu_seconds(self._pid)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._pid:
            wall, cpu = self._started
            self.share = (stats.tree_cpu_seconds(self._pid) - cpu) / (time.perf_counter() - wall)


def spark_write(frame: DataFrame, url: str, queue: str, window: int | None) -> float:
    """Seconds to write `frame` to `queue` (with the writer's default window if None)."""
    started = time.perf_counter()
    writer = frame.write.format("amqp").option("uri", url).option("routingKey", queue)
    if window is not None:
        writer = writer.option("confirmWindow", window)
    writer.mode("append").save()
    return time.perf_counter() - started


def _trigger_started(progress: dict[str, Any]) -> float:
    """The wall-clock time a trigger started, from its progress entry's UTC timestamp."""
    moment = datetime.datetime.strptime(progress["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.replace(tzinfo=datetime.UTC).timestamp()


def spark_read(spark: SparkSession, url: str, queue: str, count: int, batch: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as checkpoint:
        started_at, started = time.time(), time.perf_counter()
        query = (
            spark.readStream.format("amqp")
            .option("uri", url)
            .option("queue", queue)
            .option("maxMessagesPerTrigger", batch)
            .option("numPartitions", spark.sparkContext.defaultParallelism)
            .option("maxWaitMs", QUIET_MS)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
    progress = query.recentProgress
    split: Counter[str] = Counter()
    for entry in progress:
        split.update(entry["durationMs"])
    read = sum(entry["numInputRows"] for entry in progress)
    assert read == count, f"the query read {read} of {count} messages"
    first = progress[0]["durationMs"]["triggerExecution"] / 1000 if progress else 0.0
    # the start's parts: before the first trigger, and after the last one ended (the query's
    # stop: the source's consumers close, the planner process ends)
    before_first = _trigger_started(progress[0]) - started_at if progress else elapsed
    last_ended = (
        _trigger_started(progress[-1]) + progress[-1]["durationMs"]["triggerExecution"] / 1000
        if progress
        else started_at
    )
    return {
        "spark_read_msg_s": count / elapsed,
        "spark_read_in_batches_msg_s": count / (split["triggerExecution"] / 1000),
        "spark_read_start_s": elapsed - split["triggerExecution"] / 1000,
        "spark_read_first_s": elapsed - split["triggerExecution"] / 1000 + first,
        "spark_read_before_first_s": before_first,
        "spark_read_after_last_s": started_at + elapsed - last_ended,
        "spark_read_batches": len(progress),
        "spark_read_split_ms": dict(sorted(split.items())),
        "spark_read_add_batch_ms": [entry["durationMs"].get("addBatch") for entry in progress],
    }


def measure(spark: SparkSession, broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    url, queue, n = broker.url, args.queue, args.messages
    results: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    declare(url, queue)
    with BrokerCpu(broker) as busy:
        results["pika_publish_msg_s"] = pika_publish(url, queue, n, args.confirm_window)
    results["pika_publish_broker_core"] = busy.share
    with BrokerCpu(broker) as busy:
        results["pika_consume_msg_s"] = pika_consume(url, queue, n)
    results["pika_consume_broker_core"] = busy.share

    parallelism = spark.sparkContext.defaultParallelism
    rows = spark.range(0, n, 1, parallelism).select(F.lit(b"x" * BODY_BYTES).alias("body"))
    rows = rows.cache()
    rows.count()
    # the same parallelism as the timed write, so every task's Python worker is started
    warm = spark.range(0, WARM_UP_ROWS, 1, parallelism).select(F.lit(b"x").alias("body"))
    results["spark_write_warmup_s"] = spark_write(warm, url, queue, args.spark_confirm_window)
    results["spark_write_job_s"] = spark_write(warm, url, queue, args.spark_confirm_window)
    warm_up = spark_read(spark, url, queue, 2 * WARM_UP_ROWS, args.batch_size)
    results["spark_read_warmup_s"] = 2 * WARM_UP_ROWS / warm_up["spark_read_msg_s"]
    results["spark_read_warmup_start_s"] = warm_up["spark_read_start_s"]
    declare(url, queue)
    with BrokerCpu(broker) as busy:
        elapsed = spark_write(rows, url, queue, args.spark_confirm_window)
    results["spark_write_msg_s"] = n / elapsed
    results["spark_write_broker_core"] = busy.share
    rows.unpersist()
    with BrokerCpu(broker) as busy:
        results.update(spark_read(spark, url, queue, n, args.batch_size))
    results["spark_read_broker_core"] = busy.share
    results["read_ratio"] = results["spark_read_msg_s"] / results["pika_consume_msg_s"]
    results["read_in_batches_ratio"] = (
        results["spark_read_in_batches_msg_s"] / results["pika_consume_msg_s"]
    )
    results["write_ratio"] = results["spark_write_msg_s"] / results["pika_publish_msg_s"]
    results["load_after"] = os.getloadavg()[0]
    return results


def with_bytecode(cache_dir: str) -> None:
    """Spark's Python processes (each query's source planner, the tasks' workers) inherit
    this process's environment: have them import from bytecode cached in `cache_dir`, as an
    installed package does, even where the environment says not to write any
    (`PYTHONDONTWRITEBYTECODE`, as in a checkout used for development). The warm-up write and
    read compile it; without this every query's planner compiles `warren.spark` from source
    (about 0.05-0.1 s of its start on a quiet machine), which no user's install does."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = cache_dir


def brokers(names: list[str], warren_python: str) -> list[Broker]:
    found = []
    for name in names:
        if name == "warren":
            broker, why = start_warren(python=warren_python)
        else:
            broker, why = find_rabbitmq()
        if broker is None:
            raise SystemExit(why)
        found.append(broker)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="warren,rabbitmq")
    parser.add_argument("--queue", default="bench.spark")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=50_000)
    parser.add_argument("--confirm-window", type=int, default=1_000, help="pika's")
    parser.add_argument("--spark-confirm-window", type=int, help="default: the writer's")
    parser.add_argument(
        "--warren-python",
        default="",
        help="run Warren as installed for this interpreter (`make bench`'s .venv-bench holds "
        "the compiled release build), not from this checkout",
    )
    args = parser.parse_args()
    started = brokers(args.brokers.split(","), args.warren_python)
    bytecode = tempfile.TemporaryDirectory(prefix="warren-bench-bytecode-")
    with_bytecode(bytecode.name)
    session_started = time.perf_counter()
    spark = build_session("local[2]", app_name="warren-bench", shuffle_partitions=2)
    report: dict[str, Any] = {"messages": args.messages, "body_bytes": BODY_BYTES}
    report["session_start_s"] = time.perf_counter() - session_started
    print(f"build_session: {report['session_start_s']:.1f} s")
    try:
        for broker in started:
            results = measure(spark, broker, args)
            report[broker.name] = results | {"build": broker.build}
            built = f", {broker.build}" if broker.build else ""
            print(
                f"--- {broker.name}{built} ({broker.url}), {args.messages:,} messages, load average"
                f" {results['load_before']:.1f} before, {results['load_after']:.1f} after"
            )
            for name in ("pika_publish", "spark_write", "pika_consume"):
                print(f"{name:>22}: {results[name + '_msg_s']:>9,.0f} msg/s")
            for name in ("spark_read", "spark_read_in_batches"):
                print(f"{name:>22}: {results[name + '_msg_s']:>9,.0f} msg/s")
            print(
                f"ratios: write {results['write_ratio']:.2f}x, read {results['read_ratio']:.2f}x,"
                f" read in batches {results['read_in_batches_ratio']:.2f}x; query start "
                f"{results['spark_read_start_s']:.2f} s ({results['spark_read_before_first_s']:.2f}"
                f" before the first trigger, {results['spark_read_after_last_s']:.2f} after the"
                f" last), first batch done after {results['spark_read_first_s']:.2f} s"
            )
            print(
                f"write: broker's share of a core {results['pika_publish_broker_core'] or 0:.2f}"
                f" under pika, {results['spark_write_broker_core'] or 0:.2f} under Spark; a"
                f" first write took {results['spark_write_warmup_s']:.1f} s, a warm 1,000-row"
                f" one {results['spark_write_job_s']:.2f} s"
            )
            print(
                f"read: broker's share of a core {results['pika_consume_broker_core'] or 0:.2f}"
                f" under pika, {results['spark_read_broker_core'] or 0:.2f} under Spark"
            )
            print(
                f"warm-up read (reported apart): {results['spark_read_warmup_s']:.1f} s, of"
                f" which query start {results['spark_read_warmup_start_s']:.1f} s"
            )
            print("spark read, ms by phase:", results["spark_read_split_ms"])
            print("spark read, addBatch ms by batch:", results["spark_read_add_batch_ms"])
    finally:
        spark.stop()
        for broker in started:
            broker.stop()
        bytecode.cleanup()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
