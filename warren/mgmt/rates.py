"""Rates per second from counters sampled over time (RabbitMQ's ``*_details: {"rate"}``).

Theory of operation:
1. The hot path only bumps integers (`warren.runtime.stats`). Once a second
   `sample_broker` records the counters of the node, of each vhost, of each channel and
   the message counts of each queue, with the monotonic time, in a short ring per key.
2. A rate is the change between the value now and the oldest sample at most
   `WINDOW_S` old, divided by the time between them: live within a second or so, smooth
   over five (RabbitMQ's default sample interval). A key with no sample yet has rate 0.0.
3. Keys not seen in a sampling round are forgotten (a closed channel, a deleted queue).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from warren.runtime import admin_live
from warren.runtime.broker import Broker
from warren.runtime.stats import MessageStats

log = logging.getLogger("warren.mgmt.rates")

INTERVAL_S = 1.0
WINDOW_S = 5.0
SAMPLES_KEPT = int(WINDOW_S / INTERVAL_S) + 2

Counts = Mapping[str, int]


class Rates:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._history: dict[Hashable, deque[tuple[float, Counts]]] = {}

    def observe(self, key: Hashable, counts: Counts, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        ring = self._history.get(key)
        if ring is None:
            # a new object (channel, queue) starts from nothing: what it counted before its
            # first sample happened since the previous sampling round
            ring = self._history[key] = deque(maxlen=SAMPLES_KEPT)
            ring.append((now - INTERVAL_S, dict.fromkeys(counts, 0)))
        ring.append((now, dict(counts)))

    def keep_only(self, keys: set[Hashable]) -> None:
        for key in [key for key in self._history if key not in keys]:
            del self._history[key]

    def rates(self, key: Hashable, counts: Counts, now: float | None = None) -> dict[str, float]:
        now = self.clock() if now is None else now
        ring = self._history.get(key)
        base: tuple[float, Counts] | None = None
        if ring:
            for sampled_at, sampled in ring:
                if now - sampled_at <= WINDOW_S + INTERVAL_S / 2 and now - sampled_at > 0:
                    base = (sampled_at, sampled)
                    break
        if base is None:
            return dict.fromkeys(counts, 0.0)
        elapsed_s = now - base[0]
        return {
            name: round(max(0.0, (value - base[1].get(name, value)) / elapsed_s), 1)
            for name, value in counts.items()
        }

    def with_details(self, key: Hashable, counts: Counts) -> dict[str, Any]:
        """``{name: count, name_details: {"rate": r}}`` in RabbitMQ's order."""
        rates = self.rates(key, counts)
        out: dict[str, Any] = {}
        for name in sorted(counts):
            out[name] = counts[name]
            out[name + "_details"] = {"rate": rates[name]}
        return out


def queue_counts(broker: Broker, vhost: str, name: str) -> dict[str, int]:
    host = broker.queue(vhost, name)
    if host is None:
        return {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
    ready, unacked = host.machine.ready_count, host.machine.unacked_count
    return {
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
    }


QUEUE_STATS = (
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "redeliver",
    "ack",
    "deliver_get",
)


def queue_message_stats(stats: MessageStats) -> dict[str, int]:
    """The ``message_stats`` keys RabbitMQ shows for a queue: ``publish`` once something
    was published to it, the delivery keys once something was delivered or fetched."""
    counts = stats.counts()
    shown = {"publish": counts["publish"]} if counts["publish"] else {}
    delivery = QUEUE_STATS[1:]
    if any(counts[key] for key in delivery):
        shown.update((key, counts[key]) for key in delivery)
    return shown


def totals_counts(broker: Broker, vhost: str | None = None) -> dict[str, int]:
    totals = {"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}
    for (queue_vhost, _name), host in list(broker.queues.items()):
        if vhost is not None and queue_vhost != vhost:
            continue
        ready, unacked = host.machine.ready_count, host.machine.unacked_count
        totals["messages"] += ready + unacked
        totals["messages_ready"] += ready
        totals["messages_unacknowledged"] += unacked
    return totals


def sample_broker(broker: Broker, rates: Rates) -> None:
    """One sampling round; see the module docstring."""
    now = rates.clock()
    seen: set[Hashable] = set()

    def observe(key: Hashable, counts: Counts) -> None:
        rates.observe(key, counts, now)
        seen.add(key)

    observe(("node",), admin_live.node_stats(broker).counts())
    observe(("totals",), totals_counts(broker))
    for vhost in list(broker.vhosts):
        observe(("vhost", vhost), admin_live.vhost_stats(broker, vhost).counts())
        observe(("vhost-totals", vhost), totals_counts(broker, vhost))
    for channel in admin_live.channels(broker):
        observe(("channel", id(channel)), channel.stats.counts())
    for (vhost, name), host in list(broker.queues.items()):
        observe(("queue", vhost, name), queue_counts(broker, vhost, name))
        observe(("queue-stats", vhost, name), queue_message_stats(host.stats))
    rates.keep_only(seen)


async def run_sampler(broker: Broker, rates: Rates) -> None:
    while True:
        try:
            sample_broker(broker, rates)
        except Exception:  # a bug here must not stop the sampling, nor the node
            log.exception("sampling the broker's counters failed")
        await asyncio.sleep(INTERVAL_S)
