"""Throughput of the `amqp` data source in Spark local mode, and of its AMQP parts alone.

    .venv/bin/python -m bench.spark_throughput --url amqp://guest:guest@127.0.0.1:5672/%2F

Four measurements on one queue, 128-byte bodies, persistent messages in a durable queue:
1. publish alone: `ConfirmedPublisher` (the writer's AMQP part, confirm window as given)
   without Spark; the ceiling for the writer.
2. Spark write: `spark.range(n)` → `df.write.format("amqp")`, wall time of `save()`, after a
   1,000-row warm-up write (JVM code generation, Python worker start) that is reported apart.
3. consume alone: the reader's `Consumer` thread taking every message, no Spark.
4. Spark stream read: `readStream.format("amqp")` → `noop` sink with Trigger.AvailableNow;
   the wall time, and Spark's own split (`durationMs`) summed over the micro-batches:
   `latestOffset` is the time the reader spends taking messages from its consumer,
   `queryPlanning` + `addBatch` is Spark turning the rows into a batch and running it,
   `walCommit` + `commitOffsets` are Spark's checkpoint writes. `spark_read_in_batches` counts
   only the time inside micro-batches (`triggerExecution`), without the query's start.
Prints one table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from typing import Any

import pika
from pyspark.sql import functions as F

from warren.spark import build_session
from warren.spark.message import Outgoing
from warren.spark.options import ReadOptions, WriteOptions
from warren.spark.reader import Consumer
from warren.spark.writer import ConfirmedPublisher

BODY_BYTES = 128


def declare(url: str, queue: str) -> None:
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.queue_delete(queue)
        channel.queue_declare(queue, durable=True)


def publish_alone(url: str, queue: str, count: int, window: int) -> float:
    properties = pika.BasicProperties(delivery_mode=2)
    messages = (Outgoing("", queue, b"x" * BODY_BYTES, properties) for _ in range(count))
    options = WriteOptions(url, None, None, window, True, 30)
    started = time.perf_counter()
    ConfirmedPublisher(options, messages).publish_all()
    return count / (time.perf_counter() - started)


def consume_alone(url: str, queue: str, count: int) -> float:
    consumer = Consumer(ReadOptions(url, queue, 10_000, 500, 20_000, 30))
    started = time.perf_counter()
    taken = 0
    last_tag = 0
    while taken < count:
        deliveries = consumer.take(10_000, 1.0)
        taken += len(deliveries)
        if deliveries:
            last_tag = deliveries[-1][0]
            consumer.ack_up_to(last_tag)
    elapsed = time.perf_counter() - started
    consumer.stop()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    parser.add_argument("--queue", default="bench.spark")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--confirm-window", type=int, default=1_000)
    args = parser.parse_args()
    n = args.messages
    results: dict[str, Any] = {"messages": n, "body_bytes": BODY_BYTES}

    declare(args.url, args.queue)
    results["publish_alone_msg_s"] = publish_alone(args.url, args.queue, n, args.confirm_window)
    results["consume_alone_msg_s"] = consume_alone(args.url, args.queue, n)

    spark = build_session("local[2]", app_name="warren-bench", shuffle_partitions=2)
    rows = spark.range(n).select(
        F.lit(b"x" * BODY_BYTES).alias("body"), F.lit(2).alias("delivery_mode")
    )
    rows = rows.coalesce(1).cache()
    rows.count()

    def write(frame: Any) -> float:
        started = time.perf_counter()
        frame.write.format("amqp").option("uri", args.url).option("routingKey", args.queue).option(
            "confirmWindow", args.confirm_window
        ).mode("append").save()
        return time.perf_counter() - started

    results["spark_write_warmup_s"] = write(rows.limit(1_000))
    results["spark_write_msg_s"] = n / write(rows)
    n += 1_000

    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        query = (
            spark.readStream.format("amqp")
            .option("uri", args.url)
            .option("queue", args.queue)
            .option("batchSize", args.batch_size)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        results["spark_read_msg_s"] = n / (time.perf_counter() - started)
    split: Counter[str] = Counter()
    for progress in query.recentProgress:
        split.update(progress["durationMs"])
    results["spark_read_split_ms"] = dict(split)
    results["spark_read_batches"] = len(query.recentProgress)
    results["spark_read_in_batches_msg_s"] = n / (split["triggerExecution"] / 1000)
    spark.stop()

    names = ("publish_alone", "spark_write", "consume_alone", "spark_read", "spark_read_in_batches")
    for name in names:
        print(f"{name:>22}: {results[name + '_msg_s']:>9,.0f} msg/s")
    print("spark read, ms by phase:", dict(sorted(split.items())))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
