"""Dead-lettering: republish a message the queue machine let go, through the DLX.

Theory of operation (RabbitMQ's dead-letter guide and rabbit_dead_letter.erl, 3.10):
1. The machine decides *that* a message dies and why (``rejected``, ``expired``,
   ``maxlen``, ``delivery_limit``); this module decides where it goes and how it looks.
2. The new message keeps body and properties, loses ``expiration`` (kept as
   ``original-expiration`` in the death record) and gets an ``x-death`` entry for
   (queue, reason): a repeat moves the entry to the front and increments its ``count``.
   ``x-first-death-queue``/``-reason``/``-exchange`` are set once. Field types are
   RabbitMQ's: count ``l``, time ``T``, strings ``S``, routing-keys ``A``.
3. Routing: to the dead-letter exchange with the dead-letter routing key if set (and then
   the ``CC`` header is dropped), else with the original routing keys (the publish key and
   the ``CC`` keys). A DLX that does not exist drops the message silently.
4. Cycles: unless the reason is ``rejected``, a target queue already in the message's
   x-death history is skipped when no death since it was a rejection (a fully automatic
   cycle, e.g. two queues expiring into each other).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from warren.amqp.content import Message, encode_properties
from warren.amqp.table import Typed
from warren.errors import AmqpError
from warren.queue import REJECTED, Enqueue, Entry
from warren.runtime.paging import resident

if TYPE_CHECKING:
    from warren.runtime.broker import QueueHost

log = logging.getLogger("warren.deadletter")


def dead_letter(host: QueueHost, entry: Entry, reason: str) -> None:
    settings = host.machine.settings
    exchange = settings.dead_letter_exchange
    if exchange is None:
        return
    message = resident(host, entry)
    record = host.record
    vhost = host.broker.vhosts.get(record.vhost)
    if vhost is None:
        return
    dead, routing_keys = _dead_message(
        message, reason, record.name, exchange, settings.dead_letter_routing_key
    )
    try:
        queues = vhost.route(exchange, routing_keys, dead.properties.headers)
    except AmqpError:
        log.debug("dead-letter exchange %r of queue %r is missing: dropped", exchange, record.name)
        return
    deaths = _deaths(dead.properties.headers)
    size = len(dead.body)
    for name in queues:
        if reason != REJECTED and _is_cycle(name, deaths):
            log.debug("dead-letter cycle through queue %r: message dropped", name)
            continue
        target = host.broker.queue(record.vhost, name)
        if target is not None:
            target.apply(Enqueue(dead, size, None, dead.properties.priority or 0))


def _dead_message(
    message: Message, reason: str, queue: str, exchange: str, routing_key: str | None
) -> tuple[Message, list[str]]:
    properties = message.properties
    headers: dict[str, Any] = dict(properties.headers or {})
    cc = headers.get("CC")
    original_keys = [message.routing_key] + (
        [k for k in cc if isinstance(k, str)] if isinstance(cc, list) else []
    )
    death: dict[str, Any] = {
        "count": Typed("l", 1),
        "reason": reason,
        "queue": queue,
        "time": Typed("T", int(time.time())),
        "exchange": message.exchange,
        "routing-keys": original_keys,
    }
    if properties.expiration is not None:
        death["original-expiration"] = properties.expiration
    headers["x-death"] = _record_death(headers.get("x-death"), death)
    for key, value in (("queue", queue), ("reason", reason), ("exchange", message.exchange)):
        headers.setdefault(f"x-first-death-{key}", value)
    if routing_key is not None:
        headers.pop("CC", None)
        routing_keys = [routing_key]
    else:
        routing_keys = original_keys
    dead_properties = replace(properties, headers=headers, expiration=None)
    dead = Message(exchange, routing_keys[0], encode_properties(dead_properties), message.body)
    return dead, routing_keys


def _record_death(previous: object, death: dict[str, Any]) -> list[dict[str, Any]]:
    """The new x-death array: the (queue, reason) entry first, its count incremented."""
    entries = (
        [_typed_death(d) for d in previous if isinstance(d, dict)]
        if isinstance(previous, list)
        else []
    )
    for index, entry in enumerate(entries):
        if entry.get("queue") == death["queue"] and entry.get("reason") == death["reason"]:
            count = entry["count"].value if isinstance(entry.get("count"), Typed) else 0
            entry["count"] = Typed("l", count + 1)
            del entries[index]
            return [entry, *entries]
    return [death, *entries]


def _typed_death(entry: dict[str, Any]) -> dict[str, Any]:
    """A decoded x-death entry with RabbitMQ's wire types restored for re-encoding."""
    typed = dict(entry)
    if isinstance(typed.get("count"), int):
        typed["count"] = Typed("l", typed["count"])
    if "time" in typed:
        typed["time"] = Typed("T", typed["time"])
    return typed


def _deaths(headers: object) -> list[dict[str, Any]]:
    deaths = headers.get("x-death") if isinstance(headers, dict) else None
    return [d for d in deaths if isinstance(d, dict)] if isinstance(deaths, list) else []


def _is_cycle(queue: str, deaths: list[dict[str, Any]]) -> bool:
    """rabbit_dead_letter:is_cycle/2: `queue` died before, with no rejection since."""
    for death in deaths:
        if death.get("reason") == REJECTED:
            return False
        if death.get("queue") == queue:
            return True
    return False
