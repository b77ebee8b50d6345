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
5. At-least-once (a quorum queue's ``dead-letter-strategy``, RabbitMQ's
   rabbit_fifo_dlx_worker): the machine holds the message (`DeadLetter.held`) and the
   queue's `DeadLetterWorker` sends it. The worker remembers which target queues took it,
   so a retry goes only to the others; once every target has it, and the log is durable
   as far as their records, it tells the machine (`SettleDeadLetter`, batched per loop
   turn). A message that routes nowhere (no exchange, no binding, the queue gone) or that
   a target refuses (its length limit) stays held and is sent again every
   `RETRY_INTERVAL_S`, so a target may see it twice, as the guide warns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from warren.amqp.content import Message, encode_properties
from warren.amqp.table import Typed
from warren.errors import AmqpError
from warren.queue import REJECTED, DeadLetter, Enqueue, Entry, SettleDeadLetter
from warren.runtime.queues.host import Pending, Refused
from warren.runtime.queues.paging import resident

if TYPE_CHECKING:
    from warren.runtime.queues.host import QueueHost

log = logging.getLogger("warren.deadletter")

# how often a held message that some target did not take is sent again
RETRY_INTERVAL_S: Final = 1.0


def dead_letter(
    host: QueueHost,
    entry: Entry,
    reason: str,
    taken: set[str] | None = None,
    replicating: list[tuple[str, asyncio.Future[bool]]] | None = None,
) -> bool:
    """Publish the dead copy of `entry` to the queues it routes to, except those in `taken`
    (which gains the ones that take it now). True when every queue it routes to has it;
    False when it routes nowhere, a queue refused it, or a replicated (quorum) queue in a
    cluster has yet to commit it: those are in `taken` already and their outcomes are
    added to `replicating`."""
    settings = host.machine.settings
    exchange = settings.dead_letter_exchange
    if exchange is None:
        return False
    message = resident(host, entry)
    record = host.record
    vhost = host.broker.vhosts.get(record.vhost)
    if vhost is None:
        return False
    dead, routing_keys = _dead_message(
        message, reason, record.name, exchange, settings.dead_letter_routing_key
    )
    try:
        queues = vhost.route(exchange, routing_keys, dead.properties.headers)
    except AmqpError:
        log.debug("dead-letter exchange %r of queue %r is missing", exchange, record.name)
        return False
    deaths = _deaths(dead.properties.headers)
    size = len(dead.body)
    complete = bool(queues)
    for name in queues:
        if taken is not None and name in taken:
            continue
        if reason != REJECTED and _is_cycle(name, deaths):
            log.debug("dead-letter cycle through queue %r: message dropped", name)
            continue
        target = host.broker.queue(record.vhost, name)
        enqueue = Enqueue(dead, size, None, dead.properties.priority or 0)
        outcome = target.publish(enqueue) if target is not None else None
        if outcome is None or type(outcome) is Refused:
            complete = False
        elif taken is not None:
            taken.add(name)
            if replicating is not None and type(outcome) is Pending:
                replicating.append((name, outcome.future))
                complete = False
    return complete


class DeadLetterWorker:
    """Sends one queue's held dead-lettered messages and settles them (see point 5)."""

    __slots__ = ("_awaiting", "_complete", "_logged", "_retry", "_settle", "_taken", "host")

    def __init__(self, host: QueueHost) -> None:
        self.host = host
        self._taken: dict[int, set[str]] = {}  # msg_id -> target queues that have it
        self._complete: set[int] = set()  # every target has it: waiting for the log or a turn
        self._logged: list[tuple[int, int]] = []  # (log sequence, msg_id), in log order
        self._settle: list[int] = []  # settled on the next loop turn
        self._retry: asyncio.TimerHandle | None = None
        self._awaiting: set[int] = set()  # waiting for quorum targets to commit it

    def send(self, dead: DeadLetter) -> None:
        msg_id = dead.entry.msg_id
        if msg_id in self._awaiting:
            return
        durability = self.host.broker.durability
        logged_from = durability.log.next_sequence if durability is not None else 0
        taken = self._taken.setdefault(msg_id, set())
        replicating: list[tuple[str, asyncio.Future[bool]]] = []
        complete = dead_letter(self.host, dead.entry, dead.reason, taken, replicating)
        if durability is not None and durability.log.next_sequence != logged_from:
            self._logged.append((durability.log.next_sequence - 1, msg_id))
            durability.wait(self)
        if replicating:  # quorum targets: sent again (to those that failed) once they answer
            self._awaiting.add(msg_id)
            outcomes = asyncio.gather(*(outcome for _, outcome in replicating))
            outcomes.add_done_callback(lambda _done: self._committed(dead, replicating))
            return
        if not complete:
            self._retry_later()
            return
        del self._taken[msg_id]
        self._complete.add(msg_id)
        if not any(logged_id == msg_id for _, logged_id in self._logged):
            self._settle_soon(msg_id)

    def _committed(
        self, dead: DeadLetter, replicating: list[tuple[str, asyncio.Future[bool]]]
    ) -> None:
        """The quorum targets of a held message answered: those that did not take it lose
        their place in `taken`, and the message goes out again (to them only)."""
        msg_id = dead.entry.msg_id
        self._awaiting.discard(msg_id)
        taken = self._taken.get(msg_id)
        if taken is None:
            return  # settled or dropped meanwhile
        if all(held.entry.msg_id != msg_id for held in self.host.machine.dead_letters_in_flight()):
            del self._taken[msg_id]  # settled meanwhile (by an earlier leader's worker)
            return
        for name, outcome in replicating:
            if outcome.cancelled() or outcome.exception() or not outcome.result():
                taken.discard(name)
        if self.host.broker.queue(self.host.record.vhost, self.host.name) is self.host:
            self.send(dead)

    def durable_reached(self, durable_sequence: int) -> bool:
        """The log is durable up to `durable_sequence`: settle what only waited for that."""
        logged = self._logged
        done = 0
        while done < len(logged) and logged[done][0] <= durable_sequence:
            done += 1
        released, self._logged = logged[:done], logged[done:]
        waiting = {msg_id for _, msg_id in self._logged}
        for _, msg_id in released:
            if msg_id in self._complete and msg_id not in waiting:
                self._settle_soon(msg_id)
        return bool(self._logged)

    def _settle_soon(self, msg_id: int) -> None:
        if not self._settle:
            asyncio.get_running_loop().call_soon(self._flush)
        self._settle.append(msg_id)

    def _flush(self) -> None:
        msg_ids, self._settle = self._settle, []
        self._complete.difference_update(msg_ids)
        if self.host.broker.queue(self.host.record.vhost, self.host.name) is self.host:
            self.host.settle(SettleDeadLetter(msg_ids))

    def _retry_later(self) -> None:
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(RETRY_INTERVAL_S, self._resend)

    def _resend(self) -> None:
        """Send again what is held, out and not yet taken by every target."""
        self._retry = None
        in_flight = self.host.machine.dead_letters_in_flight()
        held = {dead.entry.msg_id for dead in in_flight}
        self._taken = {msg_id: taken for msg_id, taken in self._taken.items() if msg_id in held}
        for dead in in_flight:
            if dead.entry.msg_id not in self._complete:
                self.send(dead)

    def stop(self) -> None:
        """The queue went, or its replica stopped leading: what this worker was sending is
        the next leader's to send (a target's answer that comes later sends nothing)."""
        self._taken.clear()
        self._awaiting.clear()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        durability = self.host.broker.durability
        if durability is not None:
            durability.forget(self)


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
