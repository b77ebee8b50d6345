"""The queue state machine: one FIFO of messages with its consumers, as a pure function.

Theory of operation (after rabbit_fifo: ``apply(Meta, Command, State) -> {State, Reply,
Effects}``):
1. `QueueMachine.apply(meta, command)` is the only way to change a queue. It returns
   ``(reply, effects)``: the reply answers the caller, effects are what the runtime must
   do (deliver a message to a consumer). `meta.now_ms` is the only clock.
2. `apply` is total: it never raises on a command; a command the queue refuses gets an
   `Refused` reply carrying the AMQP error.
3. Every message gets a `msg_id` from a counter when it is enqueued; ids only grow, so they
   are also the queue's order. A message is *ready* (waiting), *unacked* (delivered to a
   consumer or fetched with basic.get and not yet settled) or gone.
4. Ready messages live in `_ready` (never delivered, in id order) and `_returned` (handed
   back with nack/reject/recover/channel close, a heap by id). Everything in `_returned`
   is older than everything in `_ready`, because deliveries always take the oldest
   message; so the oldest ready message is the head of `_returned`, else of `_ready`, and a
   returned message keeps its original place, as classic queues in RabbitMQ do.
5. Consumers are served round robin within the highest consumer priority (`x-priority`)
   that has credit. A consumer's credit is its prefetch count minus its unacked messages
   (unbounded for prefetch 0 and for no-ack consumers); a channel-wide prefetch
   (basic.qos global) spans queues, so the runtime passes each such channel's remaining
   credit in `meta.channel_credit`.
6. Commands and state carry versions (`MACHINE_VERSION`, `Command.VERSION`) because the
   same machine is later applied from a replicated log, where old entries must keep
   their meaning.

Invariants (checked by tests/unit/queue): ready_count == len(_ready) + len(_returned);
ready_bytes is the sum of their sizes; a message is in at most one of ready/unacked.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from warren.errors import SoftError, access_refused, describe_queue

MACHINE_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class Meta:
    """What the runtime knows at the moment it applies a command."""

    now_ms: int
    channel_credit: Mapping[Hashable, int] | None = None


class Entry:
    """One message held by the queue; `message` is opaque to the machine."""

    __slots__ = ("delivery_count", "message", "msg_id", "size_bytes")

    def __init__(self, msg_id: int, message: object, size_bytes: int) -> None:
        self.msg_id = msg_id
        self.message = message
        self.size_bytes = size_bytes
        self.delivery_count = 0

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 1

    def __lt__(self, other: Entry) -> bool:
        return self.msg_id < other.msg_id


# --- commands ------------------------------------------------------------------------------


class Command:
    __slots__ = ()
    VERSION: ClassVar[int] = 1


@dataclass(frozen=True, slots=True)
class Enqueue(Command):
    message: object
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Checkout(Command):
    """Add a consumer (basic.consume)."""

    consumer: Hashable
    channel: Hashable
    prefetch_count: int = 0
    no_ack: bool = False
    exclusive: bool = False
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Cancel(Command):
    """Remove a consumer; its unacked messages stay unacked until settled or returned."""

    consumer: Hashable


@dataclass(frozen=True, slots=True)
class Settle(Command):
    """Acknowledge messages: they are gone."""

    msg_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class Return(Command):
    """Hand messages back to the queue (nack/reject with requeue, recover, channel close)."""

    msg_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class Discard(Command):
    """Reject messages without requeue."""

    msg_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class Get(Command):
    """basic.get: take the oldest ready message, if any."""

    no_ack: bool = False


@dataclass(frozen=True, slots=True)
class Purge(Command):
    pass


@dataclass(frozen=True, slots=True)
class Dispatch(Command):
    """Try to deliver again: a channel-wide prefetch window opened elsewhere."""


@dataclass(frozen=True, slots=True)
class SetPrefetch(Command):
    consumer: Hashable
    prefetch_count: int


# --- replies and effects -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refused:
    error: SoftError


@dataclass(frozen=True, slots=True)
class Got:
    entry: Entry
    remaining: int


@dataclass(frozen=True, slots=True)
class Deliver:
    consumer: Hashable
    entry: Entry


Reply = object
Effects = list[Deliver]


class _Consumer:
    __slots__ = ("channel", "consumer", "in_flight", "no_ack", "prefetch_count", "priority")

    def __init__(self, command: Checkout) -> None:
        self.consumer = command.consumer
        self.channel = command.channel
        self.prefetch_count = command.prefetch_count
        self.no_ack = command.no_ack
        self.priority = command.priority
        self.in_flight = 0

    def has_credit(self) -> bool:
        return self.no_ack or not self.prefetch_count or self.in_flight < self.prefetch_count


@dataclass(slots=True)
class QueueMachine:
    """The state of one queue. Identity (`name`, `vhost`) is only used in error texts."""

    name: str
    vhost: str = "/"
    version: int = MACHINE_VERSION
    next_msg_id: int = 1
    ready_bytes: int = 0
    _ready: deque[Entry] = field(default_factory=deque)
    _returned: list[Entry] = field(default_factory=list)
    _unacked: dict[int, tuple[Entry, Hashable | None]] = field(default_factory=dict)
    _consumers: dict[Hashable, _Consumer] = field(default_factory=dict)
    # consumer keys by priority, highest first; each deque rotates for round robin
    _rings: list[tuple[int, deque[Hashable]]] = field(default_factory=list)
    exclusive_consumer: Hashable | None = None

    # --- queries ---------------------------------------------------------------------------

    @property
    def ready_count(self) -> int:
        return len(self._ready) + len(self._returned)

    @property
    def unacked_count(self) -> int:
        return len(self._unacked)

    @property
    def consumer_count(self) -> int:
        return len(self._consumers)

    def consumers(self) -> list[Hashable]:
        return list(self._consumers)

    # --- the transition function ---------------------------------------------------------

    def apply(self, meta: Meta, command: Command) -> tuple[Reply, Effects]:
        handler = _HANDLERS[type(command)]
        return handler(self, meta, command)

    def _enqueue(self, meta: Meta, command: Enqueue) -> tuple[Reply, Effects]:
        entry = Entry(self.next_msg_id, command.message, command.size_bytes)
        self.next_msg_id += 1
        if self._consumers:
            consumer = self._next_consumer(meta)
            if consumer is not None and not self._returned and not self._ready:
                return entry.msg_id, [self._hand_over(entry, consumer)]
        self._ready.append(entry)
        self.ready_bytes += entry.size_bytes
        return entry.msg_id, self._dispatch(meta) if self._consumers else []

    def _checkout(self, meta: Meta, command: Checkout) -> tuple[Reply, Effects]:
        if self.exclusive_consumer is not None or (command.exclusive and self._consumers):
            in_use = f"{describe_queue(self.name, self.vhost)} in exclusive use"
            return Refused(access_refused(in_use)), []
        if command.exclusive:
            self.exclusive_consumer = command.consumer
        self._consumers[command.consumer] = _Consumer(command)
        self._ring_for(command.priority).append(command.consumer)
        return None, self._dispatch(meta)

    def _ring_for(self, priority: int) -> deque[Hashable]:
        for index, (level, ring) in enumerate(self._rings):
            if level == priority:
                return ring
            if level < priority:
                ring = deque()
                self._rings.insert(index, (priority, ring))
                return ring
        ring = deque()
        self._rings.append((priority, ring))
        return ring

    def _cancel(self, meta: Meta, command: Cancel) -> tuple[Reply, Effects]:
        consumer = self._consumers.pop(command.consumer, None)
        if consumer is None:
            return False, []
        if self.exclusive_consumer == command.consumer:
            self.exclusive_consumer = None
        for index, (_level, ring) in enumerate(self._rings):
            if command.consumer in ring:
                ring.remove(command.consumer)
                if not ring:
                    del self._rings[index]
                break
        return True, []

    def _settle(self, meta: Meta, command: Settle) -> tuple[Reply, Effects]:
        freed = self._release(command.msg_ids)
        return len(freed), self._dispatch(meta) if self.ready_count else []

    def _discard(self, meta: Meta, command: Discard) -> tuple[Reply, Effects]:
        freed = self._release(command.msg_ids)
        return len(freed), self._dispatch(meta) if self.ready_count else []

    def _return(self, meta: Meta, command: Return) -> tuple[Reply, Effects]:
        for entry in self._release(command.msg_ids):
            heapq.heappush(self._returned, entry)
            self.ready_bytes += entry.size_bytes
        return None, self._dispatch(meta)

    def _release(self, msg_ids: Sequence[int]) -> list[Entry]:
        released: list[Entry] = []
        unacked = self._unacked
        consumers = self._consumers
        for msg_id in msg_ids:
            held = unacked.pop(msg_id, None)
            if held is None:
                continue
            entry, consumer_key = held
            if consumer_key is not None:
                consumer = consumers.get(consumer_key)
                if consumer is not None:
                    consumer.in_flight -= 1
            released.append(entry)
        return released

    def _get(self, meta: Meta, command: Get) -> tuple[Reply, Effects]:
        entry = self._pop_ready()
        if entry is None:
            return None, []
        entry.delivery_count += 1
        if not command.no_ack:
            self._unacked[entry.msg_id] = (entry, None)
        return Got(entry, self.ready_count), []

    def _purge(self, meta: Meta, command: Purge) -> tuple[Reply, Effects]:
        count = self.ready_count
        self._ready.clear()
        self._returned.clear()
        self.ready_bytes = 0
        return count, []

    def _dispatch_command(self, meta: Meta, command: Dispatch) -> tuple[Reply, Effects]:
        return None, self._dispatch(meta)

    def _set_prefetch(self, meta: Meta, command: SetPrefetch) -> tuple[Reply, Effects]:
        consumer = self._consumers.get(command.consumer)
        if consumer is not None:
            consumer.prefetch_count = command.prefetch_count
        return None, self._dispatch(meta)

    # --- delivery --------------------------------------------------------------------------

    def _dispatch(self, meta: Meta) -> Effects:
        effects: Effects = []
        credit = dict(meta.channel_credit) if meta.channel_credit else None
        while self._ready or self._returned:
            consumer = self._next_consumer(meta, credit)
            if consumer is None:
                break
            entry = self._pop_ready()
            assert entry is not None
            effects.append(self._hand_over(entry, consumer))
            if credit is not None and consumer.channel in credit:
                credit[consumer.channel] -= 1
        return effects

    def _hand_over(self, entry: Entry, consumer: _Consumer) -> Deliver:
        entry.delivery_count += 1
        if not consumer.no_ack:
            consumer.in_flight += 1
            self._unacked[entry.msg_id] = (entry, consumer.consumer)
        return Deliver(consumer.consumer, entry)

    def _next_consumer(
        self, meta: Meta, credit: dict[Hashable, int] | None = None
    ) -> _Consumer | None:
        if credit is None and meta.channel_credit:
            credit = dict(meta.channel_credit)
        consumers = self._consumers
        for _level, ring in self._rings:
            for _ in range(len(ring)):
                key = ring[0]
                ring.rotate(-1)
                consumer = consumers[key]
                if not consumer.has_credit():
                    continue
                if credit is not None and credit.get(consumer.channel, 1) <= 0:
                    continue
                return consumer
        return None

    def _pop_ready(self) -> Entry | None:
        if self._returned:
            entry = heapq.heappop(self._returned)
        elif self._ready:
            entry = self._ready.popleft()
        else:
            return None
        self.ready_bytes -= entry.size_bytes
        return entry


_HANDLERS: dict[type[Command], Callable[[QueueMachine, Meta, Any], tuple[Reply, Effects]]] = {
    Enqueue: QueueMachine._enqueue,
    Checkout: QueueMachine._checkout,
    Cancel: QueueMachine._cancel,
    Settle: QueueMachine._settle,
    Return: QueueMachine._return,
    Discard: QueueMachine._discard,
    Get: QueueMachine._get,
    Purge: QueueMachine._purge,
    Dispatch: QueueMachine._dispatch_command,
    SetPrefetch: QueueMachine._set_prefetch,
}
