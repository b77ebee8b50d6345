"""The queue state machine: one queue's messages and consumers, as a pure function.

Theory of operation (after rabbit_fifo: ``apply(Meta, Command, State) -> {State, Reply,
Effects}``):
1. `QueueMachine.apply(meta, command)` is the only way to change a queue. It returns
   ``(reply, effects)``: the reply answers the caller; effects are what the runtime must do
   (`Deliver` a message, `DeadLetter` one, report one gone without a dead-letter exchange
   with `Dropped` when the caller follows such departures (`meta.drops_followed`), arm a
   timer with `SetTimer`, delete the queue on `QueueExpired`).
   `meta.now_ms` is the only clock; a timer comes back as a `Tick`.
2. `apply` is total: it never raises on a command; a command the queue refuses gets a
   `Refused` reply carrying the AMQP error, a publish it refuses gets `Rejected`.
3. Every message gets a `msg_id` from a counter when it is enqueued; ids only grow, so they
   are also the queue's order. A message is *ready*, *unacked* (delivered or fetched and
   not yet settled) or gone. Only ready messages count against length limits.
4. Ready messages live per priority level (one level unless ``x-max-priority``) in
   `ready` (never delivered, in id order) and `returned` (handed back, a heap by id).
   Everything returned is older than everything never delivered, because deliveries take
   the oldest message first; so a returned message keeps its original place, as classic
   queues in RabbitMQ do (and quorum queues with a delivery limit: the head). With
   `settings.requeue_at_back` (quorum queues without a delivery limit) it goes to the
   back of `ready` instead, which is then in queue order rather than msg_id order.
   Messages that expire in the middle are marked dead and skipped when they reach the
   head (their counts are taken off at once). A `ReadyQueue` keeps the plain messages
   (never delivered, no deadline, a replicated queue's Raft index for a message) as
   columns rather than `Entry` objects, about 24 bytes each instead of 160: a long quorum
   queue is mostly such messages. It hands out a new `Entry` for them when asked.
5. TTL: a message's deadline is fixed at enqueue (the lower of the queue's message TTL and
   the message's own expiration) and kept across requeues. Unlike RabbitMQ, which looks
   at the head only, Warren removes (or dead-letters) a message when its deadline passes
   wherever it is in the queue; consumers never see an expired message. A TTL of 0 lets a
   message through only if a consumer can take it at once.
6. Consumers are served round robin within the highest consumer priority (`x-priority`)
   that has credit. A consumer's credit is its prefetch count minus its unacked messages
   (unbounded for prefetch 0 and no-ack consumers); a channel-wide prefetch spans queues,
   so the runtime passes such channels' remaining credit in `meta.channel_credit`, and
   channels whose socket is full in `meta.blocked_channels`. With
   single active consumer only one consumer receives; the next takes over when it goes.
7. Commands, replies and effects are values. The ones built for every message (`Meta`,
   `Enqueue`, `Deliver`, `DeadLetter`) are not ``frozen`` only because a frozen dataclass
   costs four times as much to construct; nothing mutates them.
8. A message leaves the queue in one of these ways only: settled (`Settle`, or a delivery or
   `Get` without ack, which the caller sees), purged (`Purge`), or through an effect:
   `DeadLetter` when the queue has a dead-letter exchange, else `Dropped`, with the reason
   (``rejected``, ``expired``, ``maxlen``, ``delivery_limit``). So a caller that keeps a
   copy of the messages (the durable classic queue's journal, a scratch page) can follow
   every departure. A caller that keeps none says so with ``meta.drops_followed=False``
   and gets no `Dropped` effects (W7, a publish into a full drop-head queue, would make
   one per publish only for the runtime to pass over it).
   With at-least-once dead-lettering (`settings.dead_letter_strategy`) a dead-lettered
   message stays *held*: its `DeadLetter` has ``held=True`` and it leaves only when
   `SettleDeadLetter` says the target queues took it (or, `Dropped`, when the strategy
   changes). At most `settings.dead_letter_prefetch` held messages are out as effects at
   once; the rest wait in order. Held messages count against the length limits (the
   guide: so that the queue refuses publishes while it cannot get rid of them), not as
   ready. The runtime resends `dead_letters_in_flight()` when it (re)starts sending.
9. `delivery_count` counts deliveries and fetches; RabbitMQ's ``x-delivery-count`` (and
   the delivery limit) count the returns before this delivery, which is one less. An
   unsettled `Get` counts as a consumer with `settings.fetch_counts_as_consumer`.
10. `Restore` rebuilds a queue from what a journal kept: messages with their original
   msg_id, absolute deadline (a TTL keeps counting across a restart), priority and whether
   they were delivered before (so that the next delivery is marked redelivered).
11. Commands and state carry versions (`MACHINE_VERSION`, `Command.VERSION`) because the
    same machine is later applied from a replicated log, where old entries keep their
    meaning. A state pickled by an older version is completed with the defaults of the
    fields added since (`__setstate__`).
12. A replicated queue's senders number their commands (`Sequenced`, after rabbit_fifo's
    enqueuer sequence numbers): a command sent again to a new leader after its first copy
    had already committed is applied once; the copy gets the first one's reply while it
    is among the sender's latest `SEQUENCED_REPLIES_KEPT`. The machine remembers per
    sender the number up to which it applied everything and the applied numbers above it
    (a gap closes when its command arrives, or is given up once `SEQUENCED_GAP_MAX`
    numbers wait above it: its sender failed it). A sender silent for
    `SEQUENCED_SENDER_IDLE_MS` by the commands' own clock is forgotten.

Invariants (tests/unit/queue checks them after every step): ready_count and ready_bytes
equal the live entries in the ready structures; a message is in at most one of
ready/unacked; deliveries follow msg_id order among ready messages of one priority.
"""

from __future__ import annotations

import heapq
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from itertools import repeat
from typing import Any, ClassVar, Final, TypeAlias

from warren.errors import SoftError, access_refused, describe_queue
from warren.model.settings import DEFAULT_SETTINGS, DeadLetterStrategy, Overflow, QueueSettings

# 2: `Sequenced` senders, `Cancel.requeue`, `Get.holder`; a quorum queue's entries hold
# the Raft index of their message (`Entry.message`)
MACHINE_VERSION: Final = 2
# Deliveries one command may hand out. A no-ack consumer has no credit limit, so without a
# bound one command could move a whole backlog into a socket buffer at once; the runtime
# asks for more (`Dispatch`) as the consumer's socket drains.
DISPATCH_BATCH_MAX: Final = 256

EXPIRED: Final = "expired"
REJECTED: Final = "rejected"
MAXLEN: Final = "maxlen"
DELIVERY_LIMIT: Final = "delivery_limit"

# What the caller keeps of a message (its `Message`, or a quorum queue's Raft index): the
# machine never looks inside. Fields say `Opaque`, not `object`: a mypyc-compiled dataclass
# resolves its field types by name in this module, where `object` is not one.
Opaque: TypeAlias = object


@dataclass(frozen=True, slots=True)
class Counters:
    """What a queue holds, as operators see it (the management API, metrics, warrenctl)."""

    ready: int = 0
    unacked: int = 0
    ready_bytes: int = 0
    unacked_bytes: int = 0
    consumers: int = 0


@dataclass(slots=True, init=False)
class Meta:
    """What the runtime knows at the moment it applies a command.

    Made once per command: its `__init__` is written out (`init=False`) because mypyc
    compiles a method of the class but not the one `dataclass` generates at import, which
    would run as interpreted bytecode for every publish and delivery (issue 19); so for
    `Enqueue`, `Deliver`, `warren.amqp.connection.Content` and
    `warren.amqp.content.BasicProperties`."""

    now_ms: int  # a replicated command's: the leader's, stamped when the command reached it
    # remaining channel-wide prefetch (basic.qos global) of channels that have one; it
    # limits deliveries that need an ack only, as RabbitMQ's limiter does
    channel_credit: Mapping[Hashable, int] | None = None
    # channels that can take no delivery at all now (their socket's buffer is full)
    blocked_channels: Collection[Hashable] = ()
    # a replicated (quorum) queue's command: the Raft index of its entry, which an
    # `Enqueue` keeps in place of the message (the body stays in the log); None: local
    index: int | None = None
    # whether the caller follows messages that leave without a dead-letter exchange
    # (`Dropped`, point 8): False for a queue whose messages are all in memory and in no
    # journal, which has nothing to do when one goes
    drops_followed: bool = True

    def __init__(
        self,
        now_ms: int,
        channel_credit: Mapping[Hashable, int] | None = None,
        blocked_channels: Collection[Hashable] = (),
        index: int | None = None,
        drops_followed: bool = True,
    ) -> None:
        self.now_ms = now_ms
        self.channel_credit = channel_credit
        self.blocked_channels = blocked_channels
        self.index = index
        self.drops_followed = drops_followed


class Entry:
    """One message held by the queue; `message` is opaque to the machine."""

    __slots__ = (
        "delivery_count",
        "expires_at_ms",
        "level",
        "live",
        "message",
        "msg_id",
        "size_bytes",
    )

    def __init__(
        self, msg_id: int, message: object, size_bytes: int, expires_at_ms: int | None, level: int
    ) -> None:
        self.msg_id = msg_id
        self.message = message
        self.size_bytes = size_bytes
        self.expires_at_ms = expires_at_ms
        self.level = level
        self.delivery_count = 0
        # True while the message waits in the ready structures: False once it left them
        # (delivered, fetched, dropped) or expired in place, so that a stale deadline for it
        # is skipped; a returned message is live again.
        self.live = True

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 1

    def __lt__(self, other: Entry) -> bool:
        return self.msg_id < other.msg_id

    def __reduce__(self) -> tuple[Callable[..., Entry], tuple[object, ...]]:
        # a replicated queue's snapshot pickles every entry: a plain tuple of the fields
        # takes half the time and half the bytes of the default for slotted objects
        fields = (self.msg_id, self.message, self.size_bytes, self.expires_at_ms, self.level)
        return _entry, (*fields, self.delivery_count, self.live)


def _entry(
    msg_id: int,
    message: object,
    size_bytes: int,
    expires_at_ms: int | None,
    level: int,
    delivery_count: int,
    live: bool,
) -> Entry:
    entry = Entry(msg_id, message, size_bytes, expires_at_ms, level)
    entry.delivery_count = delivery_count
    entry.live = live
    return entry


def set_fields(value: Any, state: list[object]) -> None:
    """Unpickle a slotted dataclass from its fields' values in order (the dataclass
    default's state): one pickled by an older version lacks the fields added since,
    which take their defaults (point 11)."""
    for index, f in enumerate(fields(value)):
        if index < len(state):
            item = state[index]
        elif f.default_factory is not MISSING:
            item = f.default_factory()
        else:
            item = f.default
        object.__setattr__(value, f.name, item)


# --- commands ------------------------------------------------------------------------------


class Command:
    __slots__ = ()
    VERSION: ClassVar[int] = 1


@dataclass(slots=True, init=False)  # its __init__ written out: `Meta`'s docstring
class Enqueue(Command):
    message: Opaque
    size_bytes: int
    ttl_ms: int | None = None  # the message's own expiration property
    priority: int = 0

    def __init__(
        self, message: Opaque, size_bytes: int, ttl_ms: int | None = None, priority: int = 0
    ) -> None:
        self.message = message
        self.size_bytes = size_bytes
        self.ttl_ms = ttl_ms
        self.priority = priority


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
    """Remove a consumer; its unacked messages stay unacked until settled or returned,
    unless `requeue`: then they are returned at once (the consumer's process is gone, as
    rabbit_fifo's ``down`` does for a replicated queue's consumer on a lost node). With
    `requeue`, `consumer` may also name a `Get` holder: what it fetched is returned."""

    consumer: Hashable
    requeue: bool = False

    def __setstate__(self, state: list[object]) -> None:
        set_fields(self, state)  # `requeue` came with MACHINE_VERSION 2


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
    """Reject messages without requeue: they are dead-lettered (reason ``rejected``)."""

    msg_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class Get(Command):
    """basic.get: take the oldest ready message, if any. `holder` names who holds it until
    it is settled (a quorum queue's node process), for `Cancel(holder, requeue=True)`."""

    no_ack: bool = False
    holder: Hashable | None = None

    def __setstate__(self, state: list[object]) -> None:
        set_fields(self, state)  # `holder` came with MACHINE_VERSION 2


@dataclass(frozen=True, slots=True)
class SettleDeadLetter(Command):
    """At-least-once dead-lettering: the target queues took these held messages."""

    msg_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class Purge(Command):
    pass


@dataclass(frozen=True, slots=True)
class Touch(Command):
    """The queue was used (redeclared): restart its `x-expires` countdown."""


@dataclass(frozen=True, slots=True)
class Restored:
    """One message of `Restore`: what the durable journal kept of it."""

    msg_id: int
    message: Opaque
    size_bytes: int
    expires_at_ms: int | None = None  # absolute, fixed when it was first enqueued
    priority: int = 0
    redelivered: bool = False  # delivered before the restart: the next delivery says so


@dataclass(frozen=True, slots=True)
class Restore(Command):
    """Messages recovered from disk, in msg_id order, become ready again.

    Ids at or below the highest the queue has handed out are skipped (so `apply` stays
    total and ids stay unique and ordered); `next_msg_id` moves past the highest restored.
    Due messages expire at once, and a drop-head length limit applies, as after `Configure`.
    """

    messages: Sequence[Restored]


@dataclass(frozen=True, slots=True)
class Dispatch(Command):
    """Try to deliver again: a channel-wide prefetch window opened elsewhere."""


@dataclass(frozen=True, slots=True)
class Tick(Command):
    """A timer the machine asked for (`SetTimer`) is due."""


@dataclass(frozen=True, slots=True)
class Configure(Command):
    """New effective settings (a policy changed); limits apply to what is queued at once."""

    settings: QueueSettings


@dataclass(frozen=True, slots=True)
class Sequenced(Command):
    """`command`, numbered `seq` (from 1, one more each time) by its `sender`: applied once
    however many copies of it arrive (point 12)."""

    sender: Hashable
    seq: int
    command: Command


# --- replies and effects -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refused:
    error: SoftError


@dataclass(frozen=True, slots=True)
class Rejected:
    """A publish the queue refused (overflow reject-publish): the publisher gets a nack."""


@dataclass(frozen=True, slots=True)
class Got:
    entry: Entry
    remaining: int


@dataclass(slots=True, init=False)  # its __init__ written out: `Meta`'s docstring
class Deliver:
    consumer: Hashable
    entry: Entry

    def __init__(self, consumer: Hashable, entry: Entry) -> None:
        self.consumer = consumer
        self.entry = entry


@dataclass(slots=True)
class DeadLetter:
    entry: Entry
    reason: str
    # at-least-once: the queue holds the message until `SettleDeadLetter` names it
    held: bool = False


@dataclass(slots=True)
class Dropped:
    """A message left without a dead-letter exchange to go to (reason as in `DeadLetter`)."""

    entry: Entry
    reason: str


@dataclass(frozen=True, slots=True)
class SetTimer:
    at_ms: int


@dataclass(frozen=True, slots=True)
class QueueExpired:
    """The queue was unused for its `x-expires`: the runtime deletes it."""


REJECTED_REPLY: Final = Rejected()
SEQUENCED_REPLIES_KEPT: Final = 1024  # twice a forwarded batch (`ClusterNode`'s _Forwarder)
SEQUENCED_GAP_MAX: Final = 4096
SEQUENCED_SENDER_IDLE_MS: Final = 15 * 60 * 1000
Effect = Deliver | DeadLetter | Dropped | SetTimer | QueueExpired
Reply = object
Effects = list[Effect]


class _Sender:
    """What the machine remembers of one sender of `Sequenced` commands."""

    __slots__ = ("above", "applied_to", "last_ms", "replies")

    def __init__(self, now_ms: int) -> None:
        self.applied_to = 0  # every number up to this one was applied
        self.above: set[int] = set()  # applied numbers above `applied_to`
        # the latest ones, oldest first (an OrderedDict: a dict's oldest key is found by
        # scanning past every one deleted before it)
        self.replies: OrderedDict[int, Reply] = OrderedDict()
        self.last_ms = now_ms

    def applied(self, seq: int) -> bool:
        return seq <= self.applied_to or seq in self.above

    def record(self, seq: int, reply: Reply) -> None:
        replies = self.replies
        replies[seq] = reply
        if len(replies) > SEQUENCED_REPLIES_KEPT:
            replies.popitem(last=False)
        above = self.above
        if seq == self.applied_to + 1 and not above:  # the usual case: the next one
            self.applied_to = seq
            return
        above.add(seq)
        if len(above) > SEQUENCED_GAP_MAX:
            self.applied_to = min(above) - 1  # the sender gave up what is missing
        while self.applied_to + 1 in above:
            self.applied_to += 1
            above.remove(self.applied_to)


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


# Plain ready messages per `_Packed` run (its columns grow to this, then a new run starts)
PACKED_RUN_MAX: Final = 4096


class _Packed:
    """A run of consecutive plain ready messages of one level, as columns; `start` is the
    first not yet taken."""

    __slots__ = ("ids", "indexes", "sizes", "start")

    def __init__(self) -> None:
        self.ids = array("q")
        self.indexes = array("q")
        self.sizes = array("q")
        self.start = 0


class ReadyQueue(Collection[Entry]):
    """The never-returned ready messages of one level, oldest first (point 4): `Entry`
    objects, and runs of plain messages kept as columns. The entries it hands out for
    plain ones are new objects each time: nothing else refers to a plain message while it
    is ready (only messages with a deadline are killed in place, and those stay objects)."""

    __slots__ = ("_items", "_length", "level")

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self._items: deque[Entry | _Packed] = deque()
        self._length = 0
        self.level = 0  # of the plain messages: every entry of a level's queue has its level
        for entry in entries:
            self.append(entry)

    def __len__(self) -> int:
        return self._length

    def __contains__(self, entry: object) -> bool:
        return isinstance(entry, Entry) and any(e.msg_id == entry.msg_id for e in self)

    def append(self, entry: Entry) -> None:
        self._length += 1
        index = entry.message
        if (
            type(index) is not int
            or entry.expires_at_ms is not None
            or entry.delivery_count
            or not entry.live
        ):
            self._items.append(entry)
            return
        items = self._items
        run = items[-1] if items else None
        if type(run) is not _Packed or len(run.ids) >= PACKED_RUN_MAX:
            run = _Packed()
            items.append(run)
        run.ids.append(entry.msg_id)
        run.indexes.append(index)
        run.sizes.append(entry.size_bytes)
        self.level = entry.level

    def popleft(self) -> Entry:
        items = self._items
        head = items[0]
        self._length -= 1
        if isinstance(head, Entry):
            items.popleft()
            return head
        start = head.start
        entry = Entry(head.ids[start], head.indexes[start], head.sizes[start], None, self.level)
        if start + 1 == len(head.ids):
            items.popleft()
        else:
            head.start = start + 1
        return entry

    def __iter__(self) -> Iterator[Entry]:
        level = self.level
        for item in self._items:
            if isinstance(item, Entry):
                yield item
                continue
            start = item.start
            ids, indexes, sizes = item.ids[start:], item.indexes[start:], item.sizes[start:]
            yield from map(Entry, ids, indexes, sizes, repeat(None), repeat(level))


class _Level:
    """The ready messages of one priority."""

    __slots__ = ("_ready", "returned")

    def __init__(self) -> None:
        self._ready = ReadyQueue()
        self.returned: list[Entry] = []

    @property
    def ready(self) -> ReadyQueue:
        return self._ready

    @ready.setter
    def ready(self, entries: Iterable[Entry]) -> None:
        """Any entries in order (a snapshot's, an older version's deque)."""
        self._ready = entries if type(entries) is ReadyQueue else ReadyQueue(entries)

    def pop(self) -> Entry | None:
        """The oldest live message, or None; dead ones met on the way are dropped."""
        returned, ready = self.returned, self._ready
        while returned:
            entry = heapq.heappop(returned)
            if entry.live:
                return entry
        while ready:
            entry = ready.popleft()
            if entry.live:
                return entry
        return None


@dataclass(slots=True)
class QueueMachine:
    """The state of one queue. Identity (`name`, `vhost`) is used in error texts only."""

    name: str
    vhost: str = "/"
    settings: QueueSettings = DEFAULT_SETTINGS
    version: int = MACHINE_VERSION
    next_msg_id: int = 1
    ready_count: int = 0
    ready_bytes: int = 0
    unacked_bytes: int = 0
    last_used_ms: int = 0
    timer_at_ms: int | None = None
    _levels: list[_Level] = field(default_factory=lambda: [_Level()])
    _deadlines: list[tuple[int, int, Entry]] = field(default_factory=list)
    _unacked: dict[int, tuple[Entry, Hashable | None]] = field(default_factory=dict)
    _consumers: dict[Hashable, _Consumer] = field(default_factory=dict)
    # consumer keys by priority, highest first; each deque rotates for round robin
    _rings: list[tuple[int, deque[Hashable]]] = field(default_factory=list)
    exclusive_consumer: Hashable | None = None
    active_consumer: Hashable | None = None  # with single active consumer
    fetched_count: int = 0  # unsettled basic.get deliveries
    # at-least-once dead-lettering: held messages waiting to go out, and those out
    dead_letter_count: int = 0
    dead_letter_bytes: int = 0
    _dead_letters_waiting: deque[DeadLetter] = field(default_factory=deque)
    _dead_letters_out: dict[int, DeadLetter] = field(default_factory=dict)
    _senders: dict[Hashable, _Sender] = field(default_factory=dict)  # of `Sequenced`
    _fetched_by: dict[int, Hashable] = field(default_factory=dict)  # msg_id -> Get.holder

    def __post_init__(self) -> None:
        self._levels = [_Level() for _ in range((self.settings.max_priority or 0) + 1)]

    def __setstate__(self, state: list[object]) -> None:
        # a machine pickled by machine version 1 (`warren.legacy` reads it): the fields'
        # values in order, without those added since
        set_fields(self, state)
        self.version = MACHINE_VERSION

    # --- queries ---------------------------------------------------------------------------

    def counters(self) -> Counters:
        return Counters(
            self.ready_count,
            self.unacked_count,
            self.ready_bytes,
            self.unacked_bytes,
            self.consumer_count,
        )

    @property
    def unacked_count(self) -> int:
        return len(self._unacked)

    @property
    def consumer_count(self) -> int:
        if self.settings.fetch_counts_as_consumer:
            return len(self._consumers) + self.fetched_count
        return len(self._consumers)

    def consumers(self) -> list[Hashable]:
        return list(self._consumers)

    def holders(self) -> list[Hashable]:
        """The `Get` holders with fetched messages not yet settled, in the order they took
        the first of them."""
        return list(dict.fromkeys(self._fetched_by.values()))

    def unacked_msg_ids(self) -> list[int]:
        """The msg_ids delivered or fetched and not yet settled (what a purge keeps)."""
        return sorted(self._unacked)

    def dead_letters_in_flight(self) -> list[DeadLetter]:
        """The held dead-lettered messages out as effects and not yet settled, oldest first:
        what a runtime that (re)starts sending them must send again."""
        return list(self._dead_letters_out.values())

    def checked_out(self, consumer: Hashable) -> list[int]:
        """The msg_ids delivered to `consumer`, or fetched by it as a `Get` holder, and not
        yet settled, in id order."""
        delivered = [entry.msg_id for entry in self.checked_out_entries(consumer)]
        fetched = [msg_id for msg_id, key in self._fetched_by.items() if key == consumer]
        return sorted(delivered + fetched)

    def checked_out_entries(self, consumer: Hashable) -> list[Entry]:
        """The entries delivered to `consumer` and not yet settled, in id order (what a
        runtime hands a consumer again)."""
        return sorted(entry for entry, key in self._unacked.values() if key == consumer)

    def ready_entries(self) -> Iterator[Entry]:
        """The ready messages, in no particular order (what a purge or a delete drops)."""
        for level in self._levels:
            for entry in (*level.returned, *level.ready):
                if entry.live:
                    yield entry

    def held_entries(self) -> Iterator[Entry]:
        """Every message the queue holds: ready, unacked, and held for dead-lettering."""
        yield from self.ready_entries()
        for entry, _consumer in self._unacked.values():
            yield entry
        for dead in (*self._dead_letters_out.values(), *self._dead_letters_waiting):
            yield dead.entry

    def message_deadline(self, now_ms: int, ttl_ms: int | None) -> int | None:
        """The absolute deadline `Enqueue` gives a message with expiration `ttl_ms` now."""
        ttl = self.settings.message_ttl_ms
        if ttl_ms is not None and (ttl is None or ttl_ms < ttl):
            ttl = ttl_ms
        return None if ttl is None else now_ms + ttl

    # --- the transition function ---------------------------------------------------------

    def apply(self, meta: Meta, command: Command) -> tuple[Reply, Effects]:
        effects: Effects = []
        reply = _HANDLERS[type(command)](self, meta, command, effects)
        if self._deadlines or self.settings.expires_ms is not None:
            self._schedule(meta, effects)
        return reply, effects

    def _sequenced(self, meta: Meta, command: Sequenced, effects: Effects) -> Reply:
        senders = self._senders
        sender = senders.get(command.sender)
        if sender is None:
            idle = meta.now_ms - SEQUENCED_SENDER_IDLE_MS
            for gone in [key for key, known in senders.items() if known.last_ms < idle]:
                del senders[gone]
            sender = senders[command.sender] = _Sender(meta.now_ms)
        sender.last_ms = max(sender.last_ms, meta.now_ms)
        if sender.applied(command.seq):
            return sender.replies.get(command.seq)
        inner = command.command
        reply = _HANDLERS[type(inner)](self, meta, inner, effects)
        sender.record(command.seq, reply)
        return reply

    def _enqueue(self, meta: Meta, command: Enqueue, effects: Effects) -> Reply:
        settings = self.settings
        size = command.size_bytes
        if settings.overflow is not Overflow.DROP_HEAD and self._full_for(size):
            if (
                settings.overflow is Overflow.REJECT_PUBLISH_DLX
                and settings.dead_letter_exchange is not None
            ):
                # never enqueued, so nothing to report without a dead-letter exchange
                message = command.message if meta.index is None else meta.index
                entry = Entry(self._take_id(), message, size, None, 0)
                effects.append(DeadLetter(entry, MAXLEN))
            return REJECTED_REPLY
        # every publish comes here: `message_deadline`, `_take_id` and `_push_ready` inline
        ttl_ms = command.ttl_ms
        if ttl_ms is None and settings.message_ttl_ms is None:
            deadline = None
        else:
            deadline = self.message_deadline(meta.now_ms, ttl_ms)
        msg_id = self.next_msg_id
        self.next_msg_id = msg_id + 1
        message = command.message if meta.index is None else meta.index
        entry = Entry(msg_id, message, size, deadline, 0)
        levels = self._levels
        if len(levels) > 1:
            entry.level = min(command.priority, len(levels) - 1)
        consumers = self._consumers
        if consumers and not self.ready_count:
            consumer = self._next_consumer(meta.channel_credit, meta.blocked_channels)
            if consumer is not None:
                effects.append(self._hand_over(entry, consumer))
                return msg_id
        levels[entry.level]._ready.append(entry)
        self.ready_count += 1
        self.ready_bytes += size
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, msg_id, entry))
        if consumers:
            self._dispatch(meta, effects)
        if settings.max_length is not None or settings.max_length_bytes is not None:
            self._drop_head_over_limit(meta, effects)
        if deadline is not None and deadline <= meta.now_ms:
            self._expire(meta, effects)
        return msg_id

    def _take_id(self) -> int:
        msg_id = self.next_msg_id
        self.next_msg_id = msg_id + 1
        return msg_id

    @property
    def _levels_count(self) -> int:
        return len(self._levels)

    def _full_for(self, size: int) -> bool:
        settings = self.settings
        count = self.ready_count + self.dead_letter_count
        if settings.max_length is not None and count >= settings.max_length:
            return True
        limit = settings.max_length_bytes
        return limit is not None and self.ready_bytes + self.dead_letter_bytes + size > limit

    def _drop_head_over_limit(self, meta: Meta, effects: Effects) -> None:
        """Drop the oldest ready messages while the queue is over its length or byte limit
        (the test inline: W7 makes it once or twice per publish)."""
        settings = self.settings
        max_length, max_length_bytes = settings.max_length, settings.max_length_bytes
        reported = settings.dead_letter_exchange is not None or meta.drops_followed
        while (max_length is not None and self.ready_count > max_length) or (
            max_length_bytes is not None and self.ready_bytes > max_length_bytes
        ):
            entry = self._pop_ready()
            assert entry is not None
            if reported:  # else `_dead_letter` would do nothing (W7: a drop per publish)
                self._dead_letter(meta, entry, MAXLEN, effects)

    def _push_ready(self, entry: Entry) -> None:
        self._levels[entry.level]._ready.append(entry)  # not the property: every message
        self.ready_count += 1
        self.ready_bytes += entry.size_bytes

    def _checkout(self, meta: Meta, command: Checkout, effects: Effects) -> Reply:
        if command.consumer in self._consumers:  # keep apply total: a repeat changes nothing
            return None
        if self.exclusive_consumer is not None or (command.exclusive and self._consumers):
            in_use = f"{describe_queue(self.name, self.vhost)} in exclusive use"
            return Refused(access_refused(in_use))
        if command.exclusive:
            self.exclusive_consumer = command.consumer
        self._consumers[command.consumer] = _Consumer(command)
        self._ring_for(command.priority).append(command.consumer)
        if self.settings.single_active_consumer and self.active_consumer is None:
            self.active_consumer = command.consumer
        self.last_used_ms = meta.now_ms
        self._dispatch(meta, effects)
        return None

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

    def _cancel(self, meta: Meta, command: Cancel, effects: Effects) -> Reply:
        consumer = self._consumers.pop(command.consumer, None)
        if consumer is not None:
            if self.exclusive_consumer == command.consumer:
                self.exclusive_consumer = None
            for index, (_level, ring) in enumerate(self._rings):
                if command.consumer in ring:
                    ring.remove(command.consumer)
                    if not ring:
                        del self._rings[index]
                    break
            if self.active_consumer == command.consumer:
                self.active_consumer = self._rings[0][1][0] if self._rings else None
                waits = self.settings.handover_after_returns and consumer.in_flight > 0
                if not waits or command.requeue:
                    self._dispatch(meta, effects)
            self.last_used_ms = meta.now_ms
        held = self.checked_out(command.consumer) if command.requeue else []
        if held:  # once the consumer is gone, so that none of them goes back to it
            self._return(meta, Return(held), effects)
        return consumer is not None

    def _settle(self, meta: Meta, command: Settle, effects: Effects) -> Reply:
        freed = self._release(command.msg_ids)
        if self.ready_count:
            self._dispatch(meta, effects)
        return len(freed)

    def _discard(self, meta: Meta, command: Discard, effects: Effects) -> Reply:
        freed = self._release(command.msg_ids)
        for entry in freed:
            self._dead_letter(meta, entry, REJECTED, effects)
        if self.ready_count:
            self._dispatch(meta, effects)
        return len(freed)

    def _return(self, meta: Meta, command: Return, effects: Effects) -> Reply:
        limit = self.settings.delivery_limit
        now = meta.now_ms
        for entry in self._release(command.msg_ids):
            if entry.expires_at_ms is not None and entry.expires_at_ms <= now:
                self._dead_letter(meta, entry, EXPIRED, effects)
            elif limit is not None and entry.delivery_count > limit:
                self._dead_letter(meta, entry, DELIVERY_LIMIT, effects)
            else:
                entry.live = True
                if self.settings.requeue_at_back:
                    self._levels[entry.level].ready.append(entry)
                else:
                    heapq.heappush(self._levels[entry.level].returned, entry)
                self.ready_count += 1
                self.ready_bytes += entry.size_bytes
                if entry.expires_at_ms is not None:
                    heapq.heappush(self._deadlines, (entry.expires_at_ms, entry.msg_id, entry))
        self._dispatch(meta, effects)
        if self.settings.overflow is Overflow.DROP_HEAD:
            self._drop_head_over_limit(meta, effects)
        return None

    def _release(self, msg_ids: Sequence[int]) -> list[Entry]:
        released: list[Entry] = []
        unacked = self._unacked
        consumers = self._consumers
        for msg_id in msg_ids:
            held = unacked.pop(msg_id, None)
            if held is None:
                continue
            entry, consumer_key = held
            self.unacked_bytes -= entry.size_bytes
            if consumer_key is None:
                self.fetched_count -= 1
                self._fetched_by.pop(msg_id, None)
            else:
                consumer = consumers.get(consumer_key)
                if consumer is not None:
                    consumer.in_flight -= 1
            released.append(entry)
        return released

    def _get(self, meta: Meta, command: Get, effects: Effects) -> Reply:
        self.last_used_ms = meta.now_ms
        self._expire(meta, effects)
        entry = self._pop_ready()
        if entry is None:
            return None
        entry.delivery_count += 1
        if not command.no_ack:
            self._unacked[entry.msg_id] = (entry, None)
            self.unacked_bytes += entry.size_bytes
            self.fetched_count += 1
            if command.holder is not None:
                self._fetched_by[entry.msg_id] = command.holder
        return Got(entry, self.ready_count)

    def _purge(self, meta: Meta, command: Purge, effects: Effects) -> Reply:
        count = self.ready_count
        self._levels = [_Level() for _ in self._levels]
        self._deadlines = [d for d in self._deadlines if d[2].msg_id in self._unacked]
        heapq.heapify(self._deadlines)
        self.ready_count = 0
        self.ready_bytes = 0
        return count

    def _restore(self, meta: Meta, command: Restore, effects: Effects) -> Reply:
        restored = 0
        top = self._levels_count - 1
        for item in command.messages:
            if item.msg_id < self.next_msg_id:
                continue
            self.next_msg_id = item.msg_id + 1
            level = min(max(item.priority, 0), top)
            entry = Entry(item.msg_id, item.message, item.size_bytes, item.expires_at_ms, level)
            entry.delivery_count = 1 if item.redelivered else 0
            self._push_ready(entry)
            if entry.expires_at_ms is not None:
                heapq.heappush(self._deadlines, (entry.expires_at_ms, entry.msg_id, entry))
            restored += 1
        self._expire(meta, effects)
        if self.settings.overflow is Overflow.DROP_HEAD:
            self._drop_head_over_limit(meta, effects)
        self._dispatch(meta, effects)
        return restored

    def _touch(self, meta: Meta, command: Touch, effects: Effects) -> Reply:
        self.last_used_ms = meta.now_ms
        return None

    def _dispatch_command(self, meta: Meta, command: Dispatch, effects: Effects) -> Reply:
        self._dispatch(meta, effects)
        return None

    def _tick(self, meta: Meta, command: Tick, effects: Effects) -> Reply:
        self.timer_at_ms = None
        self._expire(meta, effects)
        expires = self.settings.expires_ms
        idle = not self._consumers
        if expires is not None and idle and meta.now_ms >= self.last_used_ms + expires:
            effects.append(QueueExpired())
        return None

    def _configure(self, meta: Meta, command: Configure, effects: Effects) -> Reply:
        old = self.settings
        self.settings = command.settings
        if (command.settings.max_priority or 0) != (old.max_priority or 0):
            self._relevel()
        if self.settings.overflow is Overflow.DROP_HEAD:
            self._drop_head_over_limit(meta, effects)
        if self.settings.expires_ms != old.expires_ms:
            self.timer_at_ms = None
        if self.settings.dead_letter_strategy is not DeadLetterStrategy.AT_LEAST_ONCE:
            self._drop_held(effects)  # the guide: what no target took yet is dropped
        else:
            self._send_dead_letters(effects)
        return None

    def _settle_dead_letter(self, meta: Meta, command: SettleDeadLetter, effects: Effects) -> Reply:
        out = self._dead_letters_out
        settled = 0
        for msg_id in command.msg_ids:
            dead = out.pop(msg_id, None)
            if dead is not None:
                self.dead_letter_count -= 1
                self.dead_letter_bytes -= dead.entry.size_bytes
                settled += 1
        self._send_dead_letters(effects)
        return settled

    def _relevel(self) -> None:
        entries: list[Entry] = []
        for level in self._levels:
            entries.extend(e for e in level.returned if e.live)
            entries.extend(e for e in level.ready if e.live)
        self._levels = [_Level() for _ in range((self.settings.max_priority or 0) + 1)]
        top = len(self._levels) - 1
        for entry in sorted(entries):
            entry.level = min(entry.level, top)
            self._levels[entry.level].ready.append(entry)

    # --- expiry ----------------------------------------------------------------------------

    def _expire(self, meta: Meta, effects: Effects) -> None:
        deadlines = self._deadlines
        now = meta.now_ms
        while deadlines and deadlines[0][0] <= now:
            _, _, entry = heapq.heappop(deadlines)
            if not entry.live or entry.msg_id in self._unacked:
                continue
            self._kill(entry)
            self._dead_letter(meta, entry, EXPIRED, effects)

    def _kill(self, entry: Entry) -> None:
        """Take a ready message out where it stands; `_Level.pop` skips it later."""
        entry.live = False
        self.ready_count -= 1
        self.ready_bytes -= entry.size_bytes

    def _schedule(self, meta: Meta, effects: Effects) -> None:
        """Ask for a `Tick` at the next deadline or queue expiry, if not already asked."""
        deadlines = self._deadlines
        while deadlines and (not deadlines[0][2].live or deadlines[0][2].msg_id in self._unacked):
            heapq.heappop(deadlines)
        due = deadlines[0][0] if deadlines else None
        expires = self.settings.expires_ms
        if expires is not None and not self._consumers:
            queue_due = self.last_used_ms + expires
            due = queue_due if due is None else min(due, queue_due)
        if due is not None and (self.timer_at_ms is None or due < self.timer_at_ms):
            self.timer_at_ms = due
            effects.append(SetTimer(due))

    def _dead_letter(self, meta: Meta, entry: Entry, reason: str, effects: Effects) -> None:
        settings = self.settings
        if settings.dead_letter_exchange is None:
            if meta.drops_followed:
                effects.append(Dropped(entry, reason))
        elif settings.dead_letter_strategy is DeadLetterStrategy.AT_LEAST_ONCE:
            self._dead_letters_waiting.append(DeadLetter(entry, reason, held=True))
            self.dead_letter_count += 1
            self.dead_letter_bytes += entry.size_bytes
            self._send_dead_letters(effects)
        else:
            effects.append(DeadLetter(entry, reason))

    def _send_dead_letters(self, effects: Effects) -> None:
        waiting, out = self._dead_letters_waiting, self._dead_letters_out
        prefetch = self.settings.dead_letter_prefetch
        while waiting and len(out) < prefetch:
            dead = waiting.popleft()
            out[dead.entry.msg_id] = dead
            effects.append(dead)

    def _drop_held(self, effects: Effects) -> None:
        for dead in (*self._dead_letters_out.values(), *self._dead_letters_waiting):
            effects.append(Dropped(dead.entry, dead.reason))
        self._dead_letters_out.clear()
        self._dead_letters_waiting.clear()
        self.dead_letter_count = 0
        self.dead_letter_bytes = 0

    # --- delivery --------------------------------------------------------------------------

    def _dispatch(self, meta: Meta, effects: Effects) -> None:
        if not self.ready_count or not self._consumers:
            return
        credit = dict(meta.channel_credit) if meta.channel_credit else None
        blocked = meta.blocked_channels
        now = meta.now_ms
        for _ in range(DISPATCH_BATCH_MAX):
            if not self.ready_count:
                break
            consumer = self._next_consumer(credit, blocked)
            if consumer is None:
                break
            entry = self._pop_ready()
            assert entry is not None
            if entry.expires_at_ms is not None and entry.expires_at_ms < now:
                self._dead_letter(meta, entry, EXPIRED, effects)
                continue
            effects.append(self._hand_over(entry, consumer))
            if credit is not None and not consumer.no_ack and consumer.channel in credit:
                credit[consumer.channel] -= 1

    def _hand_over(self, entry: Entry, consumer: _Consumer) -> Deliver:
        entry.delivery_count += 1
        if not consumer.no_ack:
            consumer.in_flight += 1
            self._unacked[entry.msg_id] = (entry, consumer.consumer)
            self.unacked_bytes += entry.size_bytes
        return Deliver(consumer.consumer, entry)

    def _next_consumer(
        self, credit: Mapping[Hashable, int] | None, blocked: Collection[Hashable]
    ) -> _Consumer | None:
        consumers = self._consumers
        if self.active_consumer is not None:
            active = consumers[self.active_consumer]
            return active if self._can_take(active, credit, blocked) else None
        for _level, ring in self._rings:
            for _ in range(len(ring)):
                key = ring[0]
                ring.rotate(-1)
                consumer = consumers[key]
                if (consumer.no_ack and not blocked) or self._can_take(consumer, credit, blocked):
                    return consumer  # (a no-ack consumer on an unblocked node: no call)
        return None

    @staticmethod
    def _can_take(
        consumer: _Consumer, credit: Mapping[Hashable, int] | None, blocked: Collection[Hashable]
    ) -> bool:
        if not consumer.has_credit() or (blocked and consumer.channel in blocked):
            return False
        return credit is None or consumer.no_ack or credit.get(consumer.channel, 1) > 0

    def _pop_ready(self) -> Entry | None:
        for level in reversed(self._levels):
            entry = level.pop()
            if entry is not None:
                entry.live = False  # it leaves the queue's ready messages: it cannot expire
                self.ready_count -= 1
                self.ready_bytes -= entry.size_bytes
                return entry
        return None


_Handler = Callable[[QueueMachine, Meta, Any, Effects], Reply]
_HANDLERS: dict[type[Command], _Handler] = {
    Enqueue: QueueMachine._enqueue,
    Checkout: QueueMachine._checkout,
    Cancel: QueueMachine._cancel,
    Settle: QueueMachine._settle,
    Return: QueueMachine._return,
    Discard: QueueMachine._discard,
    Get: QueueMachine._get,
    Purge: QueueMachine._purge,
    Restore: QueueMachine._restore,
    Touch: QueueMachine._touch,
    Dispatch: QueueMachine._dispatch_command,
    Tick: QueueMachine._tick,
    Configure: QueueMachine._configure,
    SettleDeadLetter: QueueMachine._settle_dead_letter,
    Sequenced: QueueMachine._sequenced,
}
