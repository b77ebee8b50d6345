"""The pipeline's Spark jobs: land a queue into files, summarise a dead-letter queue, replay it.

Theory of operation:
1. Every job reads through the `amqp` data source, so it inherits its guarantees: a streaming
   read acknowledges a message only after Spark committed the batch that holds it, and a
   batch read (`peek`) removes nothing.
2. A dead letter's origin is the first entry of its `x-death` header: RabbitMQ keeps the most
   recent death first, so it names the queue that dead-lettered the message here, why
   (`expired`, `rejected`, `maxlen`, `delivery_limit`), and the exchange and routing keys it was
   published with.
3. Replay publishes a matching dead letter to that exchange with its first routing key and the
   others as `CC` (so it is routed as it was first published) or to a chosen target, keeping
   body, properties and headers (`x-death` included, so its history stays). A dead letter that
   does not match the filter, or has no `x-death` and no target, is published back to the
   dead-letter queue it was read from (its `queue` column): every message read is published
   somewhere before it is acknowledged, so nothing is lost.
4. `land` drops a message whose `message_id` it landed within the last deduplication window
   (a redelivery after a crash, a publisher's retry). Spark's `dropDuplicatesWithinWatermark`
   keeps each id in its state until the watermark, taken on the time a message was landed
   (the micro-batch's `current_timestamp()`, so no row is ever late), is a window past it:
   the state holds the ids of one to two windows of traffic, not of all time. Messages
   without a `message_id` get a `uuid()` key instead, so none of them is dropped. It is one
   branch of the plan, so Spark counts every message once in `numInputRows`.
5. A stateful query (the de-duplication) normally runs one more micro-batch without data
   after the last one, to move the watermark on and drop expired state. A `land` under
   `Trigger.AvailableNow` stops right after it, and the next run's first batch drops that
   state anyway, so it starts without those batches: a second or two of a short job.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

SUMMARY_KEYS = ("queue", "reason", "exchange", "routing_key")
RELATIVE_SINCE = re.compile(r"^(\d+)([smhd])$")
SECONDS_PER_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEDUPLICATION_WINDOW = "1 hour"
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
LANDED_AT, NO_ID_KEY = "_warren_landed_at", "_warren_no_id_key"  # dropped before writing


@dataclasses.dataclass(frozen=True)
class Source:
    """Where messages come from: a broker and a queue (or several, separated by commas), or
    every queue whose name matches `queue_pattern` (listed through the management API at
    `management_url`), read by `partitions` consumers and tasks (None: as many as Spark runs
    tasks at once)."""

    uri: str
    queue: str = ""
    batch_size: int = 10_000
    max_wait_ms: int = 500
    partitions: int | None = None
    queue_pattern: str | None = None
    management_url: str | None = None

    @property
    def name(self) -> str:
        """What the source reads, for messages: the queues, or the pattern between slashes."""
        return self.queue if self.queue_pattern is None else f"/{self.queue_pattern}/"

    def options(self, spark: SparkSession) -> dict[str, str]:
        partitions = self.partitions or spark.sparkContext.defaultParallelism
        queues = {"queue": self.queue}
        if self.queue_pattern is not None:
            queues = {
                "queuePattern": self.queue_pattern,
                "managementUrl": self.management_url or "",
            }
        return {
            "uri": self.uri,
            **queues,
            "maxMessagesPerTrigger": str(self.batch_size),
            "maxWaitMs": str(self.max_wait_ms),
            "numPartitions": str(partitions),
        }

    def peek(self, spark: SparkSession) -> DataFrame:
        return spark.read.format("amqp").options(**self.options(spark)).load()

    def stream(self, spark: SparkSession) -> DataFrame:
        return spark.readStream.format("amqp").options(**self.options(spark)).load()


def deduplicated(messages: DataFrame, window: str = DEDUPLICATION_WINDOW) -> DataFrame:
    """Messages with a `message_id` once per id within `window` (a Spark interval such as
    '10 minutes'); messages without one all kept (rule 4)."""
    keyed = messages.withColumns(
        {
            LANDED_AT: F.current_timestamp(),
            NO_ID_KEY: F.when(F.col("message_id").isNull(), F.uuid()),
        }
    )
    return (
        keyed.withWatermark(LANDED_AT, window)
        .dropDuplicatesWithinWatermark(["message_id", NO_ID_KEY])
        .drop(LANDED_AT, NO_ID_KEY)
    )


def land(
    spark: SparkSession,
    source: Source,
    out: Path,
    file_format: str = "parquet",
    checkpoint: Path | None = None,
    available_now: bool = False,
    deduplication_window: str | None = DEDUPLICATION_WINDOW,
) -> StreamingQuery:
    """Start a streaming query that writes `source`'s messages into files under `out`,
    deduplicated within `deduplication_window` (None: every message is written)."""
    messages = source.stream(spark)
    if deduplication_window is not None:
        messages = deduplicated(messages, deduplication_window)
    writer = (
        messages.writeStream.format(file_format)
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint or out / "_checkpoint"))
    )
    if not available_now:
        return writer.start()
    # rule 5: a query takes its own copy of the session's settings when it starts
    previous = spark.conf.get(NO_DATA_BATCHES, None)
    spark.conf.set(NO_DATA_BATCHES, "false")
    try:
        return writer.trigger(availableNow=True).start()
    finally:
        if previous is None:
            spark.conf.unset(NO_DATA_BATCHES)
        else:
            spark.conf.set(NO_DATA_BATCHES, previous)


def parse_since(text: str, now: datetime.datetime) -> datetime.datetime:
    """`--since`: an ISO 8601 time (UTC unless it says otherwise) or an age like 30m, 2h, 7d."""
    relative = RELATIVE_SINCE.match(text)
    if relative:
        seconds = int(relative.group(1)) * SECONDS_PER_UNIT[relative.group(2)]
        return now - datetime.timedelta(seconds=seconds)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--since must be an ISO 8601 time or an age like 30m, 2h, 7d; got {text!r}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def origins(dead_letters: DataFrame) -> DataFrame:
    """One row per dead letter: where it died (rule 2), when, and the message itself."""
    death = F.col("x_death")[0]
    return dead_letters.select(
        death["queue"].alias("queue"),
        death["reason"].alias("reason"),
        death["exchange"].alias("exchange"),
        F.array_join(death["routing_keys"], ",").alias("routing_key"),
        death["time"].alias("time"),
        "message_id",
    )


def summary(
    dead_letters: DataFrame, window: str = "1 hour", since: datetime.datetime | None = None
) -> DataFrame:
    """Dead letters counted by origin queue, reason, exchange, routing keys and time window."""
    rows = origins(dead_letters)
    if since is not None:
        rows = rows.where(F.col("time") >= F.lit(since))
    return (
        rows.groupBy(*SUMMARY_KEYS, F.window("time", window).alias("window"))
        .count()
        .select(
            *SUMMARY_KEYS,
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "count",
        )
        .orderBy(*SUMMARY_KEYS, "window_start")
    )


@dataclasses.dataclass(frozen=True)
class ReplayTarget:
    """Where replayed messages go: their origin (both None) or a chosen exchange/routing key."""

    exchange: str | None = None
    routing_key: str | None = None


def replay_plan(
    dead_letters: DataFrame, target: ReplayTarget, filter_expression: str | None
) -> DataFrame:
    """The rows to publish for `dead_letters`, with where each goes (rule 3).

    Adds `replayed` (false for rows going back to the queue they were read from) and sets
    `exchange`, `routing_key` and `cc` for the writer.
    """
    death = F.col("x_death")[0]
    keys = death["routing_keys"]
    matches: Column = F.expr(filter_expression) if filter_expression else F.lit(True)
    has_target = death.isNotNull() | F.lit(target.exchange is not None)
    replayed = F.coalesce(matches & has_target, F.lit(False))
    exchange = F.lit(target.exchange) if target.exchange is not None else death["exchange"]
    if target.routing_key is not None:
        routing_key, cc = F.lit(target.routing_key), F.lit(None).cast("array<string>")
    else:
        routing_key = F.coalesce(keys[0], F.lit(""))
        cc = F.when(F.size(keys) > 1, F.slice(keys, 2, F.size(keys)))
    return dead_letters.withColumn("replayed", replayed).withColumns(
        {
            "exchange": F.when(F.col("replayed"), exchange).otherwise(F.lit("")),
            "routing_key": F.when(F.col("replayed"), routing_key).otherwise(F.col("queue")),
            "cc": F.when(F.col("replayed"), cc),
        }
    )


ReplayProgress = Callable[[int, DataFrame], None]


def replay(
    spark: SparkSession,
    source: Source,
    target: ReplayTarget,
    filter_expression: str | None,
    checkpoint: Path,
    on_batch: ReplayProgress,
) -> StreamingQuery:
    """Republish every dead letter now in `source` (Trigger.AvailableNow); see rule 3.

    Each micro-batch is published with confirms before Spark commits it, and only then are
    its source messages acknowledged; `on_batch(batch_id, batch)` sees each published batch.
    """
    plan = replay_plan(source.stream(spark), target, filter_expression)

    def publish(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            batch.write.format("amqp").option("uri", source.uri).mode("append").save()
            on_batch(batch_id, batch)
        finally:
            batch.unpersist()

    return (
        plan.writeStream.foreachBatch(publish)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
