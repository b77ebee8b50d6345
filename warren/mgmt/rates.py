"""Rates per second and sample history from counters sampled over time (RabbitMQ's
``*_details: {"rate", "samples", "avg_rate", "avg"}``).

Theory of operation:
1. The hot path only bumps integers (`warren.runtime.stats`, the connections' byte
   counts). Once a second `sample_broker` records the counters of the node, of each vhost,
   connection and channel and the message counts of each queue, with the monotonic time,
   in a short ring per key.
2. A rate is the change between the value now and the oldest sample at most
   `WINDOW_S` old, divided by the time between them: live within a second or so, smooth
   over five (RabbitMQ's default sample interval). A key with no sample yet has rate 0.0.
3. Every `HISTORY_INCR_S` of wall-clock time (RabbitMQ's ``collect_statistics_interval``)
   the round also keeps a key's counts in its history, `HISTORY_AGE_S` long, stamped with
   the start of that interval. A request with RabbitMQ's range parameters
   (``lengths_age``/``lengths_incr`` for queue lengths, ``msg_rates_age``/``msg_rates_incr``
   for message counters, ``data_rates_age``/``data_rates_incr`` for connection bytes) gets
   ``age / incr + 1`` samples per statistic, newest first, each the last value kept at or
   before its timestamp (0 before the key's history began, the oldest kept value before
   what is kept), so a chart is full the moment a page opens. The newest timestamp is that
   of the latest round's interval, which every key has a sample for. `RateView` is the rates as
   one request asks for them.
4. Keys not seen in a sampling round are forgotten (a closed channel, a deleted queue).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from warren.runtime import admin_live
from warren.runtime.broker import Broker
from warren.runtime.connection import AmqpConnection
from warren.runtime.stats import MessageStats

log = logging.getLogger("warren.mgmt.rates")

INTERVAL_S = 1.0
WINDOW_S = 5.0
SAMPLES_KEPT = int(WINDOW_S / INTERVAL_S) + 2
HISTORY_INCR_S = 5
HISTORY_AGE_S = 60
HISTORY_KEPT = HISTORY_AGE_S // HISTORY_INCR_S + 1
MAX_SAMPLES = 1000  # per statistic in one reply: a bound on what a query can ask for

Counts = Mapping[str, int]
Sample = tuple[int, Counts]  # (wall-clock ms, counts)

# Which range parameters ask for the samples of a key, by the key's first element.
FAMILIES = {
    "node": "msg_rates",
    "vhost": "msg_rates",
    "channel": "msg_rates",
    "queue-stats": "msg_rates",
    "totals": "lengths",
    "vhost-totals": "lengths",
    "queue": "lengths",
    "connection": "data_rates",
}


class RangeError(ValueError):
    """RabbitMQ's 400 for an age or increment that cannot give samples."""


@dataclasses.dataclass(frozen=True)
class Range:
    age_s: int
    incr_s: int


def ranges(query: Mapping[str, str]) -> dict[str, Range]:
    """The sample ranges a query asks for, by family; a family whose age or increment is
    missing or not a number is not asked for (as RabbitMQ ignores it)."""
    found = {}
    for family in sorted(set(FAMILIES.values())):  # the same refusal whatever the order
        try:
            age, incr = int(query[family + "_age"]), int(query[family + "_incr"])
        except (KeyError, ValueError):
            continue
        if age < 0 or incr <= 0 or age // incr >= MAX_SAMPLES:
            raise RangeError(f"Invalid range parameters: age {age}, incr {incr}")
        found[family] = Range(age, incr)
    return found


class Rates:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.clock = clock
        self.wall_ms = wall_ms
        self.observed_ms: int | None = None  # the wall-clock time of the latest sample
        self._history: dict[Hashable, deque[tuple[float, Counts]]] = {}
        self._samples: dict[Hashable, deque[Sample]] = {}

    def observe(
        self, key: Hashable, counts: Counts, now: float | None = None, at_ms: int | None = None
    ) -> None:
        now = self.clock() if now is None else now
        at_ms = self.wall_ms() if at_ms is None else at_ms
        self.observed_ms = at_ms if self.observed_ms is None else max(self.observed_ms, at_ms)
        ring = self._history.get(key)
        if ring is None:
            # a new object (channel, queue) starts from nothing: what it counted before its
            # first sample happened since the previous sampling round
            ring = self._history[key] = deque(maxlen=SAMPLES_KEPT)
            ring.append((now - INTERVAL_S, dict.fromkeys(counts, 0)))
        ring.append((now, dict(counts)))
        kept = self._samples.setdefault(key, deque(maxlen=HISTORY_KEPT))
        slot_ms = at_ms - at_ms % (HISTORY_INCR_S * 1000)
        if not kept or kept[-1][0] < slot_ms:
            # an idle object's samples share one dict: thousands of quiet queues stay cheap
            same = kept and kept[-1][1] == counts
            kept.append((slot_ms, kept[-1][1] if same else dict(counts)))

    def keep_only(self, keys: set[Hashable]) -> None:
        for key in [key for key in self._history if key not in keys]:
            del self._history[key]
            self._samples.pop(key, None)

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

    def samples(
        self, key: Hashable, names: Iterable[str], asked: Range, now_ms: int
    ) -> dict[str, list[dict[str, int]]]:
        """Each statistic's samples over `asked` up to `now_ms`, newest first (see the
        module docstring)."""
        incr_ms = asked.incr_s * 1000
        newest_ms = now_ms // incr_ms * incr_ms
        times = [newest_ms - i * incr_ms for i in range(asked.age_s // asked.incr_s + 1)]
        kept = list(self._samples.get(key, ()))
        found = {}
        for name in names:
            points = []
            index = len(kept) - 1
            for at_ms in times:  # both newest first: one walk back through the history
                while index >= 0 and kept[index][0] > at_ms:
                    index -= 1
                if index >= 0:
                    value = kept[index][1].get(name, 0)
                else:  # before the history: nothing yet, or older than the history kept
                    value = kept[0][1].get(name, 0) if len(kept) == HISTORY_KEPT else 0
                points.append({"sample": value, "timestamp": at_ms})
            found[name] = points
        return found

    def view(self, query: Mapping[str, str]) -> RateView:
        """The rates as a request with `query` asks for them; raises `RangeError`."""
        return RateView(self, ranges(query))


class RateView:
    def __init__(self, rates: Rates, asked: Mapping[str, Range]) -> None:
        self.rates = rates
        self.asked = asked
        # One time for the whole reply, so its samples line up: that of the latest sampling
        # round, not the clock's, whose interval may have begun before the round kept it
        # (its newest sample would repeat the one before: a rate of 0 at every chart's end).
        observed = rates.observed_ms
        self.now_ms = rates.wall_ms() if observed is None else observed

    def _range(self, key: Hashable) -> Range | None:
        family = FAMILIES.get(key[0]) if isinstance(key, tuple) and key else None
        return self.asked.get(family) if family is not None else None

    def with_details(self, key: Hashable, counts: Counts) -> dict[str, Any]:
        """``{name: count, name_details: {"rate": r, …}}`` in RabbitMQ's order, with the
        samples when the request asked for this key's family."""
        return self.summed([key], [counts])

    def summed(self, keys: Sequence[Hashable], parts: Sequence[Counts]) -> dict[str, Any]:
        """Counts, rates and samples of several keys of one family added up."""
        counts: dict[str, int] = {}
        rates: dict[str, float] = {}
        series: dict[str, list[dict[str, int]]] = {}
        asked = self._range(keys[0]) if keys else None
        for key, part in zip(keys, parts, strict=True):
            for name, rate in self.rates.rates(key, part).items():
                counts[name] = counts.get(name, 0) + part[name]
                rates[name] = rates.get(name, 0.0) + rate
            if asked is None:
                continue
            for name, points in self.rates.samples(key, part, asked, self.now_ms).items():
                if name not in series:
                    series[name] = points
                    continue
                for total, point in zip(series[name], points, strict=True):
                    total["sample"] += point["sample"]
        out: dict[str, Any] = {}
        for name in sorted(counts):
            out[name] = counts[name]
            out[name + "_details"] = {"rate": round(rates[name], 1)}
            if asked is not None:
                out[name + "_details"].update(_averages(series[name], asked))
        return out


def _averages(points: list[dict[str, int]], asked: Range) -> dict[str, Any]:
    """RabbitMQ's ``samples`` with their ``avg_rate`` (change per second from the oldest
    to the newest) and ``avg`` (mean value)."""
    span_s = (len(points) - 1) * asked.incr_s
    change = points[0]["sample"] - points[-1]["sample"]
    return {
        "samples": points,
        "avg_rate": change / span_s if span_s else 0.0,
        "avg": sum(point["sample"] for point in points) / len(points),
    }


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


def connection_counts(connection: AmqpConnection) -> dict[str, int]:
    return {"recv_oct": connection.recv_oct, "send_oct": connection.send_oct}


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
    now, at_ms = rates.clock(), rates.wall_ms()
    seen: set[Hashable] = set()

    def observe(key: Hashable, counts: Counts) -> None:
        rates.observe(key, counts, now, at_ms)
        seen.add(key)

    observe(("node",), admin_live.node_stats(broker).counts())
    observe(("totals",), totals_counts(broker))
    for vhost in list(broker.vhosts):
        observe(("vhost", vhost), admin_live.vhost_stats(broker, vhost).counts())
        observe(("vhost-totals", vhost), totals_counts(broker, vhost))
    for connection in admin_live.connections(broker):
        observe(("connection", id(connection)), connection_counts(connection))
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
