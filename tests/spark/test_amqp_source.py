"""The `amqp` data source end to end: Spark in local mode against the test broker.

These are behaviour tests over AMQP only, so they also pass against a real RabbitMQ
(`WARREN_TEST_URL`). Message counts follow issue #6: 10,000 messages streamed into Parquet and
10,000 rows written and read back.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from rich.console import Console

from warren.spark.cli import watch
from warren.spark.jobs import Source, land
from warren.spark.session import CHECKPOINT_FILE_MANAGER, CHECKPOINT_FILE_MANAGER_KEY

MESSAGES = 10_000
DUPLICATES = 100  # published again, later, with the same message ids
pytestmark = pytest.mark.timeout(600)  # Spark on a busy 2-core machine is slow, not hung


def test_stream_lands_every_message_once_and_empties_the_queue(spark: SparkSession, amqp, tmp_path):
    queue = amqp.queue("q")
    ids = amqp.publish(queue, MESSAGES)
    amqp.publish(queue, DUPLICATES)
    query = land(spark, Source(amqp.url, queue), tmp_path / "out", available_now=True)
    progress = watch(query, Console(file=io.StringIO()), "landing")
    assert progress == MESSAGES + DUPLICATES  # what the CLI shows: every message read, once
    assert all(batch["numInputRows"] for batch in query.recentProgress)  # none without data
    landed = spark.read.parquet(str(tmp_path / "out"))
    assert landed.count() == MESSAGES
    assert {row.message_id for row in landed.select("message_id").collect()} == set(ids)
    assert amqp.ready(queue) == 0


def test_write_then_read_back(spark: SparkSession, amqp):
    queue = amqp.queue("q")
    rows = spark.range(MESSAGES).select(
        F.format_string("w-%d", "id").alias("message_id"),
        F.lpad(F.col("id").cast("string"), 128, ".").cast("binary").alias("body"),
        F.lit(queue).alias("routing_key"),
        F.lit(2).alias("delivery_mode"),
        F.create_map(F.lit("row"), F.col("id").cast("string")).alias("headers"),
    )
    rows.write.format("amqp").option("uri", amqp.url).option("confirmWindow", 500).mode(
        "append"
    ).save()
    assert amqp.ready(queue) == MESSAGES

    read = Source(amqp.url, queue).peek(spark).cache()
    assert read.count() == MESSAGES
    row = read.where("message_id = 'w-7'").first()
    assert row is not None
    assert (row.body.decode().lstrip("."), row.delivery_mode, row.headers) == ("7", 2, {"row": "7"})
    assert read.select("message_id").distinct().count() == MESSAGES
    assert amqp.ready(queue) == MESSAGES  # a batch read only peeks
    read.unpersist()


def test_unroutable_rows_fail_the_write_and_are_named(spark: SparkSession, amqp):
    exchange = amqp.exchange("nowhere")
    rows = spark.createDataFrame([("lost-1", b"x")], "message_id string, body binary")
    writer = rows.write.format("amqp").option("uri", amqp.url).option("exchange", exchange)
    expected = r"1 of 1 published messages were not delivered.*312 NO_ROUTE message_id='lost-1'"
    with pytest.raises(PySparkException, match=expected):
        writer.option("routingKey", "none").mode("append").save()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("batchSize", "0", "option 'batchSize' must be at least 1, got 0"),
        ("MAXWAITMS", "soon", "option 'maxWaitMs' must be an integer, got 'soon'"),
        ("bogus", "1", "unknown read option(s) bogus"),
    ],
)
def test_bad_options_fail_at_start_with_the_option_named(
    spark: SparkSession, amqp, option, value, message
):
    reader = spark.readStream.format("amqp").option("uri", amqp.url).option("queue", "q")
    with pytest.raises(PySparkException, match=re.escape(message)):
        reader.option(option, value).load()


def test_stream_write_moves_a_queue_into_another(spark: SparkSession, amqp, tmp_path):
    source, target = amqp.queue("from"), amqp.queue("to")
    ids = amqp.publish(source, 100)
    moved = (
        Source(amqp.url, source)
        .stream(spark)
        .writeStream.format("amqp")
        .option("uri", amqp.url)
        .option("routingKey", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    moved.awaitTermination()
    assert (amqp.ready(source), amqp.ready(target)) == (0, len(ids))


def test_nacked_rows_fail_the_write_and_are_named(spark: SparkSession, amqp):
    full = amqp.queue("full", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    rows = spark.createDataFrame(
        [("kept", b"x"), ("refused", b"y")], "message_id string, body binary"
    )
    writer = rows.coalesce(1).write.format("amqp").option("uri", amqp.url)
    expected = r"1 of 2 published messages were not delivered.* nacked message_id='refused'"
    with pytest.raises(PySparkException, match=expected):
        writer.option("routingKey", full).option("confirmWindow", 1).mode("append").save()
    assert amqp.ready(full) == 1


def test_stream_reads_several_queues_in_parallel_partitions(spark: SparkSession, amqp, tmp_path):
    first, second = amqp.queue("a"), amqp.queue("b")
    ids = amqp.publish(first, 300, id_prefix="a") + amqp.publish(second, 200, id_prefix="b")
    source = Source(amqp.url, f"{first},{second}", batch_size=100, partitions=3)
    out = tmp_path / "out"
    query = land(spark, source, out, available_now=True, deduplication_window=None)
    query.awaitTermination()
    landed = spark.read.parquet(str(out))
    by_queue = {row.queue: row["count"] for row in landed.groupBy("queue").count().collect()}
    assert by_queue == {first: 300, second: 200}
    assert sorted(row.message_id for row in landed.select("message_id").collect()) == sorted(ids)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(list(out.glob("part-*"))) == 3 * len(batches)  # three tasks carried each batch
    assert (amqp.ready(first), amqp.ready(second)) == (0, 0)


def test_batch_read_peeks_at_several_queues_in_parallel_partitions(spark: SparkSession, amqp):
    first, second = amqp.queue("a"), amqp.queue("b")
    ids = amqp.publish(first, 300, id_prefix="a") + amqp.publish(second, 200, id_prefix="b")
    read = Source(amqp.url, f"{first},{second}", partitions=3).peek(spark).cache()
    by_queue = {row.queue: row["count"] for row in read.groupBy("queue").count().collect()}
    assert by_queue == {first: 300, second: 200}
    assert sorted(row.message_id for row in read.select("message_id").collect()) == sorted(ids)
    sizes = read.rdd.glom().map(len).collect()  # three tasks carry the read, each a third
    assert sorted(sizes) == [166, 167, 167]
    assert (amqp.ready(first), amqp.ready(second)) == (300, 200)


def test_a_queue_pattern_reads_every_queue_whose_name_matches(
    spark: SparkSession, amqp, management: tuple[str, str, str]
):
    first, second, other = amqp.queue("p.a"), amqp.queue("p.b"), amqp.queue("p.b.not")
    for queue, count in ((first, 30), (second, 20), (other, 10)):
        amqp.publish(queue, count)
    base, user, password = management
    parts = urlsplit(base)
    management_url = f"{parts.scheme}://{user}:{password}@{parts.netloc}{parts.path}"
    pattern = re.escape(f"{amqp.prefix}.p.") + "[ab]"
    read = (
        spark.read.format("amqp")
        .options(uri=amqp.url, queuePattern=pattern, managementUrl=management_url)
        .load()
    )
    by_queue = {row.queue: row["count"] for row in read.groupBy("queue").count().collect()}
    assert by_queue == {first: 30, second: 20}
    nothing = pattern + "x"
    with pytest.raises(Exception, match="no queue in vhost '/' matches queuePattern"):
        spark.read.format("amqp").options(
            uri=amqp.url, queuePattern=nothing, managementUrl=management_url
        ).load().count()


def test_a_missing_queue_fails_the_query_with_the_brokers_words(
    spark: SparkSession, amqp, tmp_path
):
    missing = f"{amqp.prefix}.missing"
    query = (
        spark.readStream.format("amqp")
        .options(uri=amqp.url, queue=missing, numPartitions="2")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(PySparkException, match=f"404 NOT_FOUND - no queue '{re.escape(missing)}'"):
        query.awaitTermination()


def _patient_read(
    spark: SparkSession, uri: str, queue: str, tmp_path: Path, available_now: bool
) -> StreamingQuery:
    """A streaming read of `queue` into the `noop` sink: batches of up to 1,000 messages,
    20 s to fill one."""
    writer = (
        spark.readStream.format("amqp")
        .option("uri", uri)
        .option("queue", queue)
        .option("maxMessagesPerTrigger", 1_000)
        .option("maxWaitMs", 20_000)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
    )
    return (writer.trigger(availableNow=True) if available_now else writer).start()


def test_a_first_micro_batch_hands_out_what_arrived_without_waiting_to_fill(
    spark: SparkSession, amqp, tmp_path
):
    """Reader rule 7: room for 1,000 messages and 20 s to fill them, 5 in the queue: the
    query's first batch takes the 5 without waiting the 20 s out."""
    queue = amqp.queue("q")
    amqp.publish(queue, 5)
    query = _patient_read(spark, amqp.url, queue, tmp_path, available_now=False)
    try:
        while not query.recentProgress:
            assert query.exception() is None
            time.sleep(0.2)
    finally:
        query.stop()
    first = query.recentProgress[0]
    assert first["numInputRows"] == 5
    assert first["durationMs"]["latestOffset"] < 10_000


def test_available_now_stops_once_the_queue_it_found_is_read(spark: SparkSession, amqp, tmp_path):
    """Reader rule 6: 3,000 messages, batches of 1,000 and 20 s of patience: the batches fill
    from the target and the query stops when it has handed out all 3,000, without waiting
    for the queue to stay quiet. (It counted reads of the socket as messages, so the target
    seemed never reached: the last batch waited the 20 s out, and one more empty one.)"""
    queue = amqp.queue("q")
    amqp.publish(queue, 3_000)
    query = _patient_read(spark, amqp.url, queue, tmp_path, available_now=True)
    query.awaitTermination()
    batches = query.recentProgress
    assert sum(batch["numInputRows"] for batch in batches) == 3_000
    assert all(batch["numInputRows"] for batch in batches)  # none without data
    assert max(batch["durationMs"]["latestOffset"] for batch in batches) < 10_000


def test_a_query_restarted_from_its_checkpoint_carries_on_where_it_stopped(
    spark: SparkSession, amqp, tmp_path
):
    """Session rule 6: checkpoints go through Hadoop's FileSystem API (FileContext's rename
    forked `readlink` many times per micro-batch), and a restart still finds them: the
    second run starts after the first one's last batch and reads only what came since."""
    assert spark.conf.get(CHECKPOINT_FILE_MANAGER_KEY) == CHECKPOINT_FILE_MANAGER
    queue = amqp.queue("q")
    amqp.publish(queue, 1_500)
    first = _patient_read(spark, amqp.url, queue, tmp_path, available_now=True)
    first.awaitTermination()
    ran = [batch["batchId"] for batch in first.recentProgress]
    commits = tmp_path / "checkpoint" / "commits"
    assert sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit()) == ran
    amqp.publish(queue, 700)
    second = _patient_read(spark, amqp.url, queue, tmp_path, available_now=True)
    second.awaitTermination()
    assert second.recentProgress[0]["batchId"] == ran[-1] + 1
    assert sum(batch["numInputRows"] for batch in second.recentProgress) == 700
