"""`warren-pipeline` jobs end to end: land's bounded de-duplication, dlq-report (peeking and
draining), dlq-replay, and land across a SIGKILL and a stop.

Like the data-source tests these speak AMQP only and pass against a real RabbitMQ.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pyspark.sql import SparkSession

from tests.spark.conftest import assert_repeats_are_redelivered
from warren.spark import cli
from warren.spark.jobs import Source, land

pytestmark = [
    pytest.mark.timeout(900),  # Spark on a busy 2-core machine is slow, not hung
    pytest.mark.usefixtures("killable_lander"),  # starts up while the other tests run
]
WAIT_S = 300.0  # a Spark process starting on a loaded 2-core machine takes minutes
LANDED = 1_000
EXPIRED, REJECTED, DROPPED = 30, 20, 10


def wait_for(condition, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def consumers(amqp, queue: str) -> int:
    return int(amqp.channel.queue_declare(queue, passive=True).method.consumer_count)


def state_rows(query) -> set[int]:
    """The de-duplication state's sizes Spark reported, batch by batch."""
    progress = query.recentProgress
    return {operator["numRowsTotal"] for p in progress for operator in p["stateOperators"]}


def test_land_forgets_message_ids_a_window_after_landing_them(
    spark: SparkSession, amqp, tmp_path: Path
):
    queue = amqp.queue("q")
    first = amqp.publish(queue, 50, id_prefix="first")
    source = Source(amqp.url, queue)
    out = tmp_path / "out"
    query = land(spark, source, out, deduplication_window="1 second")
    try:
        wait_for(lambda: 50 in state_rows(query), "the first ids in the state")
        # An id expires once the watermark, the latest landing time less the window, passes
        # its own landing time plus the window; a batch starts up to maxWaitMs (0.5 s) early.
        time.sleep(2 + 0.5 + 0.5)
        later = amqp.publish(queue, 1, id_prefix="later")
        wait_for(lambda: 1 in state_rows(query), "the state to hold only the later id")
    finally:
        query.stop()
    landed = spark.read.parquet(str(out)).select("message_id").collect()
    assert sorted(row.message_id for row in landed) == sorted(first + later)


def fill_dead_letter_queue(amqp) -> tuple[str, str, dict[str, str]]:
    """A DLQ fed by three queues behind exchange `src`: one expires messages, one has them
    rejected, one drops them at max-length. Returns (dlq, src, queue name by routing key)."""
    dlx = amqp.exchange("dlx", "fanout")
    dlq = amqp.queue("dlq")
    amqp.channel.queue_bind(dlq, dlx)
    src = amqp.exchange("src")
    dead_letter = {"x-dead-letter-exchange": dlx}
    queues = {
        "exp": amqp.queue("expiring", **dead_letter, **{"x-message-ttl": 1}),
        "rej": amqp.queue("rejecting", **dead_letter),
        "max": amqp.queue("bounded", **dead_letter, **{"x-max-length": 1}),
    }
    for key, queue in queues.items():
        amqp.channel.queue_bind(queue, src, routing_key=key)
    amqp.publish("exp", EXPIRED, exchange=src, id_prefix="exp")
    amqp.publish("rej", REJECTED, exchange=src, id_prefix="rej")
    amqp.publish("max", DROPPED + 1, exchange=src, id_prefix="max")
    for _ in range(REJECTED):
        method, _properties, _body = amqp.channel.basic_get(queues["rej"])
        amqp.channel.basic_reject(method.delivery_tag, requeue=False)
    total = EXPIRED + REJECTED + DROPPED
    wait_for(lambda: amqp.ready(dlq) == total, f"{total} dead letters", timeout_s=10)
    return dlq, src, queues


def assert_report(spark: SparkSession, out: Path, src: str, queues: dict[str, str]) -> None:
    """The report under `out` counts every dead letter of `fill_dead_letter_queue` by reason."""
    summary = spark.read.parquet(str(out / "summary")).collect()
    by_reason = {(row.queue, row.reason, row.exchange, row.routing_key): 0 for row in summary}
    for row in summary:
        by_reason[(row.queue, row.reason, row.exchange, row.routing_key)] += row["count"]
    assert by_reason == {
        (queues["exp"], "expired", src, "exp"): EXPIRED,
        (queues["rej"], "rejected", src, "rej"): REJECTED,
        (queues["max"], "maxlen", src, "max"): DROPPED,
    }
    page = (out / "report.html").read_text()
    assert "data:image/png;base64," in page and "expired: 30" in page
    assert (out / "report.png").read_bytes().startswith(b"\x89PNG")
    total = EXPIRED + REJECTED + DROPPED
    assert spark.read.parquet(str(out / "dead_letters")).count() == total


def test_dlq_report_counts_each_reason_peeking_then_draining(
    spark: SparkSession, amqp, tmp_path: Path, capsys
):
    dlq, src, queues = fill_dead_letter_queue(amqp)
    command = ["--uri", amqp.url, "dlq-report", "--queue", dlq]

    assert cli.main([*command, "--out", str(tmp_path / "peeked")]) == 0
    assert_report(spark, tmp_path / "peeked", src, queues)
    assert "rejected" in capsys.readouterr().out
    assert amqp.ready(dlq) == EXPIRED + REJECTED + DROPPED  # a report peeks unless told to drain

    assert cli.main([*command, "--out", str(tmp_path / "drained"), "--drain"]) == 0
    assert_report(spark, tmp_path / "drained", src, queues)
    assert amqp.ready(dlq) == 0


def drain_ids(amqp, queue: str) -> list[str]:
    ids = []
    while True:
        method, properties, _body = amqp.channel.basic_get(queue, auto_ack=True)
        if method is None:
            return ids
        ids.append(properties.message_id)


def test_dlq_replay_moves_every_dead_letter_back_once(spark: SparkSession, amqp, tmp_path):
    dlq, src, queues = fill_dead_letter_queue(amqp)
    amqp.channel.basic_get(queues["max"], auto_ack=True)  # the one message max-length kept
    # The consumers are "fixed": the same queues, without the TTL and length limit.
    for key, queue in queues.items():
        amqp.channel.queue_delete(queue)
        amqp.channel.queue_declare(queue, durable=True)
        amqp.channel.queue_bind(queue, src, routing_key=key)
    checkpoint = tmp_path / "replay"

    dry_run = ["--uri", amqp.url, "dlq-replay", "--queue", dlq, "--dry-run"]
    assert cli.main(dry_run) == 0
    assert amqp.ready(dlq) == EXPIRED + REJECTED + DROPPED

    replay = ["--uri", amqp.url, "dlq-replay", "--queue", dlq, "--checkpoint", str(checkpoint)]
    assert cli.main(replay) == 0

    assert amqp.ready(dlq) == 0
    method, properties, _body = amqp.channel.basic_get(queues["rej"])
    assert method is not None
    death = properties.headers["x-death"][0]  # the history travels with the message
    assert (death["reason"], death["queue"], death["count"]) == ("rejected", queues["rej"], 1)
    amqp.channel.basic_nack(method.delivery_tag, requeue=True)
    replayed = {key: sorted(drain_ids(amqp, queue)) for key, queue in queues.items()}
    assert replayed == {
        "exp": sorted(f"exp-{n}" for n in range(EXPIRED)),
        "rej": sorted(f"rej-{n}" for n in range(REJECTED)),
        "max": sorted(f"max-{n}" for n in range(DROPPED)),
    }


def test_cli_reports_a_bad_since(amqp, tmp_path: Path, capsys):
    command = ["--uri", amqp.url, "dlq-report", "--queue", "q", "--out", str(tmp_path)]
    assert cli.main([*command, "--since", "soon"]) == 1
    assert "--since must be an ISO 8601 time" in capsys.readouterr().err


def test_land_takes_a_queue_pattern(
    spark: SparkSession, amqp, management: tuple[str, str, str], tmp_path: Path
):
    first, second, other = amqp.queue("p.a"), amqp.queue("p.b"), amqp.queue("p.b.not")
    ids = amqp.publish(first, 30, id_prefix="a") + amqp.publish(second, 20, id_prefix="b")
    amqp.publish(other, 10, id_prefix="other")
    base, user, password = management
    parts = urlsplit(base)
    management_url = f"{parts.scheme}://{user}:{password}@{parts.netloc}{parts.path}"
    pattern = re.escape(f"{amqp.prefix}.p.") + "[ab]"
    out = tmp_path / "out"
    command = ["--uri", amqp.url, "--management-url", management_url, "land"]
    command += ["--queue-pattern", pattern, "--out", str(out), "--available-now"]
    assert cli.main(command) == 0
    landed = spark.read.parquet(str(out)).select("message_id", "queue").collect()
    assert sorted(row.message_id for row in landed) == sorted(ids)
    assert {row.queue for row in landed} == {first, second}
    assert (amqp.ready(first), amqp.ready(second), amqp.ready(other)) == (0, 0, 10)


def test_land_survives_a_sigkill_and_a_stop(spark: SparkSession, killable_lander):
    """Last in the module: by now the process `killable_lander` started is up (conftest)."""
    lander, amqp, queue = killable_lander, killable_lander.amqp, killable_lander.queue
    ids = amqp.publish(queue, LANDED)

    # 1. `warren-pipeline land` in its own process (local[2]: two consumers, two tasks per
    # batch), killed with SIGKILL (JVM and workers too) once it has written two batches.
    wait_for(lambda: lander.batches_written() >= 2, "two batches in the process")
    assert consumers(amqp, queue) == 2  # N > 1: two consumers, each acknowledging its own
    lander.kill()
    wait_for(lambda: consumers(amqp, queue) == 0, "the killed consumer's connection to close")
    assert amqp.ready(queue) > 0  # what it had not acknowledged came back

    # 2. Restarted here from its checkpoint, stopped the polite way after a batch.
    source = Source(amqp.url, queue, batch_size=lander.batch_size)
    query = land(spark, source, lander.out, checkpoint=lander.checkpoint)
    wait_for(lambda: any(p["numInputRows"] for p in query.recentProgress), "a batch")
    query.stop()

    # 3. Restarted again and run until the queue is empty, in larger batches.
    rest = Source(amqp.url, queue)
    land(
        spark, rest, lander.out, checkpoint=lander.checkpoint, available_now=True
    ).awaitTermination()
    landed = spark.read.parquet(str(lander.out))
    assert {row.message_id for row in landed.select("message_id").collect()} == set(ids)
    assert landed.where("redelivered").count() > 0
    assert_repeats_are_redelivered(landed)
    assert amqp.ready(queue) == 0
