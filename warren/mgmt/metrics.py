"""Prometheus text exposition at /metrics, with rabbitmq_prometheus 3.10.8's metric names.

Theory of operation:
1. Names and help texts are those of RabbitMQ's prometheus plugin (read from its 3.10.8
   collector): ``rabbitmq_queue_messages_ready``, ``rabbitmq_queue_messages_unacked``,
   ``rabbitmq_channel_messages_published_total``, … Only metrics Warren can fill
   truthfully are exposed; Erlang VM, Raft and I/O metrics are left out.
2. /metrics aggregates, as RabbitMQ's default endpoint does (one sample per metric, no
   labels); /metrics/per-object labels queue metrics with ``vhost`` and ``queue``.
3. Read at scrape time from the broker (counts) and the channels' counters (totals that
   include closed channels), so nothing is cached or stale. No credentials are needed,
   as on RabbitMQ's port 15692.
4. On a node of several workers, worker 0 answers for the node (`warren.mgmt.workers`):
   it asks every other worker for the same page and adds each sample up with the same
   sample of the others (`merged`): connections, channels, consumers, message totals and
   the processes' memory and descriptors are each worker's own, and a queue's counts are
   its holder's (the others' proxies of it count nothing). Only what every worker has
   whole is worker 0's alone: the queues (every worker knows them all), the descriptor
   limit, the identity (the node's name) and the build.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable

from aiohttp import web

from warren import __version__
from warren.mgmt.context import BROKER_KEY
from warren.mgmt.workers import texts_elsewhere
from warren.runtime import admin_live, alarms
from warren.runtime.admin import RABBITMQ_VERSION
from warren.runtime.broker import Broker

CONTENT_TYPE = "text/plain"
PREFIX = "rabbitmq_"
# on a node of several workers, worker 0's sample of these is the node's (module doc, 4)
WHOLE_ON_EVERY_WORKER = frozenset(("queues", "process_max_fds", "identity_info", "build_info"))

QUEUE_GAUGES = (
    ("queue_messages_ready", "Messages ready to be delivered to consumers", "ready"),
    (
        "queue_messages_unacked",
        "Messages delivered to consumers but not yet acknowledged",
        "unacked",
    ),
    ("queue_messages", "Sum of ready and unacknowledged messages - total queue depth", "total"),
    ("queue_messages_ready_bytes", "Size in bytes of ready messages", "ready_bytes"),
    (
        "queue_messages_unacked_bytes",
        "Size in bytes of all unacknowledged messages",
        "unacked_bytes",
    ),
    ("queue_messages_bytes", "Size in bytes of ready and unacknowledged messages", "bytes"),
    ("queue_consumers", "Consumers on a queue", "consumers"),
)
CHANNEL_COUNTERS = (
    (
        "channel_messages_published_total",
        "Total number of messages published into an exchange on a channel",
        "publish",
    ),
    (
        "channel_messages_confirmed_total",
        "Total number of messages published into an exchange and confirmed on the channel",
        "confirm",
    ),
    (
        "channel_messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to "
        "the publisher as unroutable",
        "return_unroutable",
    ),
    (
        "channel_messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped "
        "as unroutable",
        "drop_unroutable",
    ),
    (
        "channel_messages_delivered_ack_total",
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        "deliver",
    ),
    (
        "channel_messages_delivered_total",
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
        "deliver_no_ack",
    ),
    (
        "channel_messages_redelivered_total",
        "Total number of messages redelivered to consumers",
        "redeliver",
    ),
    (
        "channel_messages_acked_total",
        "Total number of messages acknowledged by consumers",
        "ack",
    ),
    (
        "channel_get_ack_total",
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
        "get",
    ),
    (
        "channel_get_total",
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
        "get_no_ack",
    ),
    (
        "channel_get_empty_total",
        "Total number of times basic.get operations fetched no message",
        "get_empty",
    ),
)


def _queue_values(broker: Broker) -> Iterable[tuple[str, str, dict[str, int]]]:
    for (vhost, name), host in sorted(broker.queues.items()):
        counters = host.machine.counters()
        yield (
            vhost,
            name,
            {
                "ready": counters.ready,
                "unacked": counters.unacked,
                "total": counters.ready + counters.unacked,
                "ready_bytes": counters.ready_bytes,
                "unacked_bytes": counters.unacked_bytes,
                "bytes": counters.ready_bytes + counters.unacked_bytes,
                "consumers": counters.consumers,
            },
        )


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines.append(f"# TYPE {PREFIX}{name} {kind}")
    lines.append(f"# HELP {PREFIX}{name} {help_text}")


def render(broker: Broker, *, per_object: bool) -> str:
    lines: list[str] = []
    connections = admin_live.connections(broker)
    channels = list(admin_live.channels(broker))
    queues = list(_queue_values(broker))
    gauges = (
        ("connections", "Connections currently open", len(connections)),
        ("channels", "Channels currently open", len(channels)),
        (
            "consumers",
            "Consumers currently connected",
            sum(len(ch.consumers) for ch in channels),
        ),
        ("queues", "Queues available", len(queues)),
    )
    for name, help_text, value in gauges:
        _family(lines, name, "gauge", help_text)
        lines.append(f"{PREFIX}{name} {value}")
    for name, help_text, key in QUEUE_GAUGES:
        _family(lines, name, "gauge", help_text)
        if per_object:
            for vhost, queue, values in queues:
                labels = f'vhost="{_label(vhost)}",queue="{_label(queue)}"'
                lines.append(f"{PREFIX}{name}{{{labels}}} {values[key]}")
        else:
            lines.append(f"{PREFIX}{name} {sum(values[key] for _v, _q, values in queues)}")
    if per_object:
        name = "queue_messages_published_total"
        _family(lines, name, "counter", "Total number of messages published to queues")
        for (vhost, queue), host in sorted(broker.queues.items()):
            labels = f'vhost="{_label(vhost)}",queue="{_label(queue)}"'
            lines.append(f"{PREFIX}{name}{{{labels}}} {host.stats.publish}")
    counts = admin_live.node_stats(broker).counts()
    for name, help_text, key in CHANNEL_COUNTERS:
        _family(lines, name, "counter", help_text)
        lines.append(f"{PREFIX}{name} {counts[key]}")
    _process(lines)
    _family(lines, "identity_info", "untyped", "RabbitMQ node & cluster identity info")
    node, cluster = _label(broker.node_name), _label(broker.cluster_name)
    lines.append(f'{PREFIX}identity_info{{rabbitmq_node="{node}",rabbitmq_cluster="{cluster}"}} 1')
    _family(lines, "build_info", "untyped", "RabbitMQ & Erlang/OTP version info")
    lines.append(
        f'{PREFIX}build_info{{rabbitmq_version="{RABBITMQ_VERSION}",'
        f'product_name="Warren",product_version="{__version__}"}} 1'
    )
    return "\n".join(lines) + "\n"


def _process(lines: list[str]) -> None:
    soft_fds, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        open_fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        open_fds = 0
    rss_bytes = alarms.resident_bytes()
    for name, help_text, value in (
        ("process_open_fds", "Open file descriptors", open_fds),
        ("process_max_fds", "Open file descriptors limit", soft_fds),
        ("process_resident_memory_bytes", "Memory used in bytes", rss_bytes),
    ):
        _family(lines, name, "gauge", help_text)
        lines.append(f"{PREFIX}{name} {value}")


def merged(mine: str, others: list[str]) -> str:
    """Worker 0's page with the other workers' samples added (module doc, 4)."""
    added: dict[str, int] = {}
    for text in others:
        for line in text.splitlines():
            if line and not line.startswith("#"):
                sample, _, value = line.rpartition(" ")
                added[sample] = added.get(sample, 0) + int(value)
    lines = []
    for line in mine.splitlines():
        if line and not line.startswith("#"):
            sample, _, value = line.rpartition(" ")
            if sample.partition("{")[0].removeprefix(PREFIX) not in WHOLE_ON_EVERY_WORKER:
                line = f"{sample} {int(value) + added.get(sample, 0)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


async def _page(request: web.Request, per_object: bool) -> web.Response:
    text = merged(
        render(request.app[BROKER_KEY], per_object=per_object), await texts_elsewhere(request)
    )
    return web.Response(text=text, content_type=CONTENT_TYPE, charset="utf-8")


async def serve(request: web.Request) -> web.Response:
    return await _page(request, per_object=False)


async def serve_per_object(request: web.Request) -> web.Response:
    return await _page(request, per_object=True)
