"""The options of the `amqp` data source: names, defaults, validation.

Theory of operation:
1. Spark hands a data source its options as strings. `ReadOptions.parse` and
   `WriteOptions.parse` turn them into typed, checked values once, when the data source is
   built on the driver, so a bad option fails the query at `load()`/`save()`/`start()` with a
   message naming the option, not later inside a task.
2. Names are case-insensitive (`batchSize`, `batchsize` and `BATCHSIZE` are one option), as
   Spark's own sources treat them. An option this source does not know is an error, so a typo
   is not silently ignored; `path` and `checkpointLocation`, which Spark itself may pass, are
   let through.
3. Units are part of the names (`maxWaitMs`, `heartbeatS`), as in the rest of Warren.
4. `queue` names one queue or several, separated by commas; `queuePattern` instead takes
   every queue whose whole name matches a regular expression (as Kafka's `subscribePattern`),
   listed through the management HTTP API at `managementUrl` when the query starts
   (`warren.spark.management`). `maxMessagesPerTrigger` (as
   Kafka's `maxOffsetsPerTrigger`) bounds a micro-batch; `batchSize` is its older name.
   `numPartitions` is how many consumers read and how many Spark tasks carry a micro-batch;
   without it, as many as the machine has cores (the pipeline's jobs pass the parallelism of
   the running Spark).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import urlsplit

from warren.spark.message import PERSISTENT, TRANSIENT

SPARK_OWN_OPTIONS = frozenset({"path", "checkpointlocation"})
PREFETCH_MAX = 65_535  # basic.qos prefetch-count is a short
CONFIRM_WINDOW = 10_000  # a write task's default (WriteOptions)


class OptionError(ValueError):
    """An option of the `amqp` data source is missing, unknown or has a bad value."""


def _lowered(options: Mapping[str, str | None]) -> dict[str, str]:
    return {key.lower(): value for key, value in options.items() if value is not None}


def _check_known(options: Mapping[str, str], known: tuple[str, ...], kind: str) -> None:
    unknown = sorted(set(options) - {name.lower() for name in known} - SPARK_OWN_OPTIONS)
    if unknown:
        raise OptionError(
            f"unknown {kind} option(s) {', '.join(unknown)} for format 'amqp'; "
            f"known: {', '.join(known)}"
        )


def _uri(options: Mapping[str, str]) -> str:
    uri = options.get("uri", "")
    if urlsplit(uri).scheme not in ("amqp", "amqps"):
        raise OptionError(
            f"option 'uri' must be an AMQP URI such as amqp://guest:guest@127.0.0.1:5672/%2F, "
            f"got {uri!r}"
        )
    return uri


def _integer(
    options: Mapping[str, str], name: str, default: int, minimum: int, maximum: int | None = None
) -> int:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {text!r}") from None
    if value < minimum:
        raise OptionError(f"option '{name}' must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise OptionError(f"option '{name}' must be at most {maximum}, got {value}")
    return value


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {text!r}")
    return text.lower() == "true"


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How a reader consumes `queue`.

    A micro-batch closes when it holds `batch_size` messages or `max_wait_ms` has passed since
    the read began. `prefetch` bounds the unacknowledged messages on each consumer's channel
    (basic.qos); messages stay unacknowledged until Spark commits their batch, so it defaults
    to twice a consumer's share of a batch (at most 65,535, the largest prefetch AMQP can
    say); a smaller one makes batches smaller, never wrong.
    """

    uri: str
    queues: tuple[str, ...]  # empty until `queue_pattern` is resolved
    batch_size: int
    max_wait_ms: int
    prefetch: int
    heartbeat_s: int
    partitions: int
    queue_pattern: re.Pattern[str] | None = None
    management_url: str | None = None

    NAMES: ClassVar[tuple[str, ...]] = (
        "uri",
        "queue",
        "queuePattern",
        "managementUrl",
        "maxMessagesPerTrigger",
        "batchSize",
        "maxWaitMs",
        "prefetch",
        "heartbeatS",
        "numPartitions",
    )

    @classmethod
    def parse(cls, options: Mapping[str, str | None]) -> ReadOptions:
        lowered = _lowered(options)
        _check_known(lowered, cls.NAMES, "read")
        queues, pattern = _queues(lowered)
        if "batchsize" in lowered and "maxmessagespertrigger" in lowered:
            raise OptionError("give 'maxMessagesPerTrigger' or its old name 'batchSize', not both")
        batch_name = "batchSize" if "batchsize" in lowered else "maxMessagesPerTrigger"
        batch_size = _integer(lowered, batch_name, 10_000, 1)
        partitions = _integer(lowered, "numPartitions", os.cpu_count() or 1, 1)
        return cls(
            uri=_uri(lowered),
            queues=queues,
            batch_size=batch_size,
            max_wait_ms=_integer(lowered, "maxWaitMs", 500, 1),
            # room for one batch waiting for its commit while the next fills
            prefetch=_integer(
                lowered,
                "prefetch",
                min(2 * -(-batch_size // partitions), PREFETCH_MAX),
                1,
                PREFETCH_MAX,
            ),
            heartbeat_s=_integer(lowered, "heartbeatS", 30, 0),
            partitions=partitions,
            queue_pattern=pattern,
            management_url=_management_url(lowered) if pattern else None,
        )


def _queues(options: Mapping[str, str]) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    """The queues named by `queue`, or the compiled `queuePattern` (rule 4)."""
    if "queuepattern" in options:
        if "queue" in options:
            raise OptionError("give 'queue' or 'queuePattern', not both")
        try:
            return (), re.compile(options["queuepattern"])
        except re.error as error:
            message = f"option 'queuePattern' is not a regular expression: {error}"
            raise OptionError(message) from None
    queues = tuple(name.strip() for name in options.get("queue", "").split(","))
    if not all(queues):
        raise OptionError(
            "option 'queue' is required: the queue to read, or several separated by commas"
            " (or 'queuePattern' with 'managementUrl')"
        )
    return queues, None


def _management_url(options: Mapping[str, str]) -> str:
    url = options.get("managementurl", "")
    if urlsplit(url).scheme not in ("http", "https"):
        raise OptionError(
            "option 'queuePattern' needs 'managementUrl', the management HTTP API such as "
            f"http://guest:guest@127.0.0.1:15672, got {url!r}"
        )
    return url


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """Where and how a writer publishes.

    `exchange` and `routingKey`, when given, apply to every row and win over the row's
    `exchange`/`routing_key` columns (a frame read from one queue carries the exchange it came
    from; an explicit option is the more deliberate choice). `confirmWindow` is the number of
    published messages that may wait for their publisher confirm at once, per task: 10,000
    by default, enough that a task keeps publishing while the broker syncs a batch to disk
    before confirming it (see docs/pipeline.md, "Throughput"). `deliveryMode`
    (2, persistent, unless set to 1, transient) is sent with every row that has no
    `delivery_mode` of its own.
    """

    uri: str
    exchange: str | None
    routing_key: str | None
    confirm_window: int
    mandatory: bool
    heartbeat_s: int
    delivery_mode: int = PERSISTENT

    NAMES: ClassVar[tuple[str, ...]] = (
        "uri",
        "exchange",
        "routingKey",
        "confirmWindow",
        "mandatory",
        "heartbeatS",
        "deliveryMode",
    )

    @classmethod
    def parse(cls, options: Mapping[str, str | None]) -> WriteOptions:
        lowered = _lowered(options)
        _check_known(lowered, cls.NAMES, "write")
        return cls(
            uri=_uri(lowered),
            exchange=lowered.get("exchange"),
            routing_key=lowered.get("routingkey"),
            confirm_window=_integer(lowered, "confirmWindow", CONFIRM_WINDOW, 1),
            mandatory=_boolean(lowered, "mandatory", True),
            heartbeat_s=_integer(lowered, "heartbeatS", 30, 0),
            delivery_mode=_delivery_mode(lowered),
        )


def _delivery_mode(options: Mapping[str, str]) -> int:
    mode = _integer(options, "deliveryMode", PERSISTENT, TRANSIENT)
    if mode not in (TRANSIENT, PERSISTENT):
        raise OptionError(
            f"option 'deliveryMode' must be 1 (transient) or 2 (persistent), got {mode}"
        )
    return mode
