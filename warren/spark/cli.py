"""`warren-pipeline`: the pipeline's Spark jobs from the command line.

Every command first checks that the broker of `--uri` answers (a TCP connection, so a
broker that is down is one line, not a Spark start and its traces), then builds one
SparkSession (`--master`, local mode by default), runs its job from `warren.spark.jobs` and
shows progress on stderr while Spark works; results go to stdout. Ctrl-C stops the job and
says how far it got. Exit status: 0 done, 1 the job failed or the broker is unreachable,
2 bad usage or no Java, 130 stopped by Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote, urlsplit

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from rich.console import Console
from rich.table import Table

from warren.spark.jobs import (
    DEDUPLICATION_WINDOW,
    ReplayTarget,
    Source,
    land,
    parse_since,
    replay,
    replay_plan,
    summary,
)
from warren.spark.report import print_table, totals_by_reason, write_report
from warren.spark.session import JavaMissingError, build_session
from warren.spark.wire import Address

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
URI_ENV = "WARREN_AMQP_URI"
MANAGEMENT_URL_ENV = "WARREN_MANAGEMENT_URL"
MANAGEMENT_PORT = 15672
UNSAFE_IN_PATH = re.compile(r"[^\w.-]")
POLL_S = 1  # StreamingQuery.awaitTermination takes whole seconds
FINISH_S = 60  # how long Ctrl-C waits for the batch under way (`watch`)
CONNECT_TIMEOUT_S = 5.0
INTERRUPTED = 130  # the shell's status for a command stopped by SIGINT


class Interrupted(Exception):
    """Ctrl-C stopped a streaming job after `rows` messages."""

    def __init__(self, what: str, rows: int) -> None:
        super().__init__(f"{what}: stopped by Ctrl-C after {rows} messages")


def check_broker(uri: str) -> str | None:
    """None if the broker of `uri` accepts a connection, else the one line saying it does not."""
    parts = urlsplit(uri)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        return (
            f"no broker at {host}:{port} ({reason}): start one (make run), or point"
            f" --uri or {URI_ENV} at yours"
        )
    return None


def watch(query: StreamingQuery, console: Console, what: str) -> int:
    """Show rows and batches while `query` runs; the number of rows it read. Ctrl-C lets the
    batch under way end (at most `FINISH_S`), stops the query and raises `Interrupted`:
    PySpark's own handler would raise inside a call to the JVM, which py4j reports with
    tracebacks. A batch's sink commits before Spark reports its progress, so stopping at once
    could leave landed rows uncounted."""
    rows_by_batch: dict[int, int] = {}
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: interrupted.set())
    try:
        with console.status(f"{what}: starting Spark") as status:
            while not query.awaitTermination(POLL_S):
                if interrupted.is_set():
                    status.update(f"{what}: stopping after the batch under way")
                    finishing = time.monotonic() + FINISH_S
                    while query.status["isTriggerActive"] and time.monotonic() < finishing:
                        query.awaitTermination(POLL_S)
                    # the next batch is cut short on purpose: not Spark's errors to log
                    SparkSession.active().sparkContext.setLogLevel("OFF")
                    query.stop()
                    break
                for progress in query.recentProgress:
                    rows_by_batch[progress["batchId"]] = progress["numInputRows"]
                rows = sum(rows_by_batch.values())
                status.update(f"{what}: {rows} messages in {len(rows_by_batch)} batches")
    finally:
        signal.signal(signal.SIGINT, previous)
    for progress in query.recentProgress:
        rows_by_batch[progress["batchId"]] = progress["numInputRows"]
    if interrupted.is_set():
        raise Interrupted(what, sum(rows_by_batch.values()))
    return sum(rows_by_batch.values())


def default_management_url(uri: str) -> str:
    """The management API beside the broker of `uri`: its host, port 15672, its credentials."""
    address = Address.parse(uri)
    credentials = f"{quote(address.user, safe='')}:{quote(address.password, safe='')}"
    return f"http://{credentials}@{address.host}:{MANAGEMENT_PORT}"


def _source(args: argparse.Namespace) -> Source:
    if args.queue_pattern is None:
        return Source(uri=args.uri, queue=args.queue, batch_size=args.batch_size)
    management_url = args.management_url or default_management_url(args.uri)
    return Source(
        uri=args.uri,
        batch_size=args.batch_size,
        queue_pattern=args.queue_pattern,
        management_url=management_url,
    )


def command_land(spark: SparkSession, args: argparse.Namespace, console: Console) -> int:
    source = _source(args)
    query = land(
        spark,
        source,
        Path(args.out),
        file_format=args.format,
        checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        available_now=args.available_now,
        deduplication_window=args.dedup_window,
    )
    rows = watch(query, console, f"landing {source.name} into {args.out}")
    console.print(f"landed {rows} messages from {source.name!r} into {args.out}")
    return 0


def command_dlq_report(spark: SparkSession, args: argparse.Namespace, console: Console) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source = _source(args)
    messages_path = out / "dead_letters"
    since = parse_since(args.since, datetime.datetime.now(datetime.UTC)) if args.since else None
    if args.drain:
        query = land(spark, source, messages_path, available_now=True, deduplication_window=None)
        watch(query, console, f"draining {source.name}")
    else:
        with console.status(f"peeking at {source.name}"):
            source.peek(spark).write.mode("overwrite").parquet(str(messages_path))
    with console.status("summarising"):
        dead_letters = spark.read.parquet(str(messages_path))
        summarised = summary(dead_letters, args.window, since)
        summarised.write.mode("overwrite").parquet(str(out / "summary"))
        rows = [row.asDict() for row in summarised.collect()]
    title = f"Dead letters in {source.name}"
    print_table(Console(), rows, title)
    page = write_report(out, rows, title)
    totals = ", ".join(f"{reason} {count}" for reason, count in totals_by_reason(rows).items())
    console.print(f"{sum(row['count'] for row in rows)} dead letters ({totals}); report: {page}")
    return 0


def _print_targets(console: Console, counts: Counter[tuple[bool, str, str]], title: str) -> None:
    table = Table(title=title)
    for column in ("action", "exchange", "routing_key", "messages"):
        table.add_column(column)
    for (replayed, exchange, routing_key), count in sorted(counts.items()):
        action = "replay" if replayed else "back to the queue"
        table.add_row(action, exchange, routing_key, str(count))
    console.print(table)


def _count_targets(plan: DataFrame) -> Counter[tuple[bool, str, str]]:
    counts: Counter[tuple[bool, str, str]] = Counter()
    for row in plan.groupBy("replayed", "exchange", "routing_key").count().collect():
        counts[(row["replayed"], row["exchange"], row["routing_key"])] += row["count"]
    return counts


def command_dlq_replay(spark: SparkSession, args: argparse.Namespace, console: Console) -> int:
    source = _source(args)
    target = ReplayTarget(args.to_exchange, args.to_routing_key)
    if args.dry_run:
        with console.status(f"planning a replay of {source.name}"):
            plan = replay_plan(source.peek(spark), target, args.filter)
            counts = _count_targets(plan)
        _print_targets(Console(), counts, f"dry run: what a replay of {source.name} would do")
        return 0
    named = args.queue or "pattern-" + UNSAFE_IN_PATH.sub("_", args.queue_pattern)
    checkpoint = Path(args.checkpoint or Path(".warren-pipeline") / f"replay-{named}")
    totals: Counter[tuple[bool, str, str]] = Counter()

    def on_batch(_batch_id: int, batch: DataFrame) -> None:
        totals.update(_count_targets(batch))

    query = replay(spark, source, target, args.filter, checkpoint, on_batch)
    watch(query, console, f"replaying {source.name}")
    _print_targets(Console(), totals, f"replayed from {source.name}")
    return 0


def _queue_arguments(command: argparse.ArgumentParser, what: str) -> None:
    queues = command.add_mutually_exclusive_group(required=True)
    queues.add_argument("--queue", help=f"{what} (several: separated by commas)")
    queues.add_argument(
        "--queue-pattern",
        help="instead of --queue: every queue of the vhost whose whole name matches this "
        "regular expression (listed through --management-url when the job starts)",
    )


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="warren-pipeline", description=__doc__.splitlines()[0])
    root.add_argument(
        "--uri",
        default=os.environ.get(URI_ENV, DEFAULT_URI),
        # argparse expands % in help texts, and the default vhost is %2F
        help=f"AMQP URI of the broker (env {URI_ENV}; default {DEFAULT_URI})".replace("%", "%%"),
    )
    root.add_argument(
        "--management-url",
        default=os.environ.get(MANAGEMENT_URL_ENV),
        help=f"management HTTP API that lists the queues of a --queue-pattern (env "
        f"{MANAGEMENT_URL_ENV}; default: the --uri's host and credentials, port "
        f"{MANAGEMENT_PORT})",
    )
    root.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    root.add_argument(
        "--batch-size", type=int, default=10_000, help="messages per micro-batch at most"
    )
    commands = root.add_subparsers(dest="command", required=True)

    report = commands.add_parser("dlq-report", help="summarise a dead-letter queue")
    _queue_arguments(report, "the dead-letter queue")
    report.add_argument("--out", required=True, help="directory for Parquet, PNG and HTML")
    report.add_argument("--since", help="only dead letters since: ISO 8601 time or 30m, 2h, 7d")
    report.add_argument("--window", default="1 hour", help="time window (default '1 hour')")
    report.add_argument(
        "--drain",
        action="store_true",
        help="consume the dead letters (kept in OUT/dead_letters) instead of peeking",
    )
    report.set_defaults(run=command_dlq_report)

    replayer = commands.add_parser("dlq-replay", help="republish dead letters")
    _queue_arguments(replayer, "the dead-letter queue")
    replayer.add_argument("--filter", help="Spark SQL condition; others go back to the queue")
    replayer.add_argument("--to-exchange", help="publish here instead of the x-death origin")
    replayer.add_argument("--to-routing-key", help="with this routing key")
    replayer.add_argument("--checkpoint", help="where progress is kept, to resume a replay")
    replayer.add_argument("--dry-run", action="store_true", help="print what would be done")
    replayer.set_defaults(run=command_dlq_replay)

    lander = commands.add_parser("land", help="stream a queue into files")
    _queue_arguments(lander, "the queue to land")
    lander.add_argument("--out", required=True, help="output directory")
    lander.add_argument("--format", choices=("parquet", "json"), default="parquet")
    lander.add_argument("--checkpoint", help="default: OUT/_checkpoint")
    lander.add_argument(
        "--available-now", action="store_true", help="land what is there now, then stop"
    )
    lander.add_argument(
        "--dedup-window",
        default=DEDUPLICATION_WINDOW,
        help="drop a message whose message_id was landed within this Spark interval "
        f"(default '{DEDUPLICATION_WINDOW}')",
    )
    lander.set_defaults(run=command_land)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    console = Console(stderr=True)
    unreachable = check_broker(args.uri)
    if unreachable is not None:
        console.print(f"[red]warren-pipeline: {unreachable}[/red]", soft_wrap=True)
        return 1
    try:
        spark = build_session(args.master)
    except JavaMissingError as error:
        console.print(f"[red]warren-pipeline: {error}[/red]", soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        console.print("warren-pipeline: stopped by Ctrl-C while Spark started", soft_wrap=True)
        return INTERRUPTED
    try:
        status: int = args.run(spark, args, console)
    except (PySparkException, ValueError) as error:
        console.print(f"[red]warren-pipeline {args.command} failed: {error}[/red]", soft_wrap=True)
        return 1
    except Interrupted as stopped:
        console.print(f"warren-pipeline {args.command}: {stopped}", soft_wrap=True)
        return INTERRUPTED
    except KeyboardInterrupt:
        console.print(f"warren-pipeline {args.command}: stopped by Ctrl-C", soft_wrap=True)
        return INTERRUPTED
    return status


if __name__ == "__main__":
    sys.exit(main())
