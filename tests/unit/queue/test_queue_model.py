"""QueueMachine against a naive twin: random command logs, invariants after every step.

The twin is a sorted list of ready msg_ids, a dict of unacked ones and a dict of consumers.
It does not pick consumers itself; it checks each delivery the machine makes: the message
is the oldest ready one (returned messages come back before never-delivered ones because
they are older), the consumer may take it (prefetch, channel credit) and nobody of a higher
priority could have. After each command no ready message may be left while a consumer
could take it.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from warren.errors import ReplyCode
from warren.model.settings import QueueSettings
from warren.queue import (
    EXPIRED,
    REJECTED,
    Cancel,
    Checkout,
    Command,
    DeadLetter,
    Deliver,
    Discard,
    Dispatch,
    Dropped,
    Enqueue,
    Get,
    Got,
    Meta,
    Purge,
    QueueMachine,
    Refused,
    Restore,
    Restored,
    Return,
    SetTimer,
    Settle,
    Tick,
    snapshot,
)

CHANNELS = ("c1", "c2", "c3")
LIMITED_CHANNELS = ("c1", "c2")  # the only ones that get a channel-wide prefetch
# Whether a channel-wide prefetch binds no-ack consumers is left open (RabbitMQ's limiter
# does not count them): no-ack consumers consume on the channel that never has one.
NO_ACK_CHANNEL = "c3"


@dataclass
class ModelConsumer:
    channel: str
    prefetch_count: int
    no_ack: bool
    priority: int
    in_flight: int = 0

    def has_credit(self) -> bool:
        return self.no_ack or not self.prefetch_count or self.in_flight < self.prefetch_count


class QueueAgainstModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.queue = self.new_queue()
        self.rejecting: set[int] = set()
        self.ready: list[int] = []  # sorted msg_ids
        self.unacked: dict[int, Hashable | None] = {}  # msg_id -> consumer (None: basic.get)
        self.sizes: dict[int, int] = {}
        self.delivery_counts: dict[int, int] = {}
        self.consumers: dict[Hashable, ModelConsumer] = {}
        self.channel_of: dict[Hashable, str] = {}  # kept after cancel: unacked stay on it
        self.channel_limits: dict[str, int] = {}  # basic.qos global, per channel
        self.exclusive: Hashable | None = None
        self.next_id = 1
        self.next_consumer = 0
        self.now_ms = 0

    def new_queue(self) -> QueueMachine:
        return QueueMachine("q")

    # --- the runtime's side: channel credit --------------------------------------------

    def credit(self) -> dict[Hashable, int] | None:
        if not self.channel_limits:
            return None
        held = {channel: 0 for channel in self.channel_limits}
        for consumer in self.unacked.values():
            channel = self.channel_of.get(consumer) if consumer is not None else None
            if channel in held:
                held[channel] += 1
        return {channel: limit - held[channel] for channel, limit in self.channel_limits.items()}

    def apply(self, command: Command) -> object:
        credit = self.credit()
        reply, effects = self.queue.apply(Meta(self.now_ms, credit), command)
        running = dict(credit) if credit else {}
        for effect in effects:
            self.on_effect(effect, running)
        self.check_nothing_left_undelivered(running)
        return reply

    def on_effect(self, effect: object, running: dict[Hashable, int]) -> None:
        if isinstance(effect, Dropped):  # no dead-letter exchange: only discards drop here
            assert effect.reason == REJECTED, effect.reason
            assert effect.entry.msg_id in self.rejecting, f"{effect.entry.msg_id} dropped"
            self.rejecting.discard(effect.entry.msg_id)
            return
        assert isinstance(effect, Deliver), effect
        self.check_delivery(effect, running)

    def eligible(self, running: dict[Hashable, int]) -> list[Hashable]:
        return [
            key
            for key, consumer in self.consumers.items()
            if consumer.has_credit() and running.get(consumer.channel, 1) > 0
        ]

    def check_delivery(self, effect: Deliver, running: dict[Hashable, int]) -> None:
        msg_id = effect.entry.msg_id
        assert msg_id not in self.unacked, f"{msg_id} delivered while unacked"
        assert self.ready and msg_id == self.ready[0], (msg_id, self.ready[:5])
        eligible = self.eligible(running)
        assert effect.consumer in eligible, (effect.consumer, eligible)
        consumer = self.consumers[effect.consumer]
        top = max(self.consumers[key].priority for key in eligible)
        assert consumer.priority == top, "a consumer of higher priority had credit"
        self.take_ready(msg_id, effect.entry.delivery_count)
        if consumer.channel in running:
            running[consumer.channel] -= 1
        if not consumer.no_ack:
            consumer.in_flight += 1
            self.unacked[msg_id] = effect.consumer

    def take_ready(self, msg_id: int, delivery_count: int) -> None:
        self.ready.pop(0)
        self.delivery_counts[msg_id] += 1
        assert delivery_count == self.delivery_counts[msg_id]

    def check_nothing_left_undelivered(self, running: dict[Hashable, int]) -> None:
        if self.ready:
            assert not self.eligible(running), "ready messages left with a consumer free"

    def release(self, msg_ids: list[int]) -> list[int]:
        released = []
        for msg_id in msg_ids:
            if msg_id not in self.unacked:
                continue
            consumer = self.unacked.pop(msg_id)
            if consumer in self.consumers:
                self.consumers[consumer].in_flight -= 1
            released.append(msg_id)
        return released

    def expired(self, msg_id: int) -> bool:
        return False

    def some_ids(self, data: st.DataObject) -> list[int]:
        candidates = sorted(self.unacked) + self.ready[:2] + [self.next_id + 7]
        return data.draw(st.lists(st.sampled_from(candidates), max_size=4))

    # --- rules -----------------------------------------------------------------------------

    @rule(size=st.integers(0, 1000))
    def enqueue(self, size: int) -> None:
        command = self.enqueue_command(size)
        assert self.apply(command) == self.next_id - 1

    def enqueue_command(self, size: int, ttl_ms: int | None = None) -> Enqueue:
        msg_id = self.next_id
        self.next_id += 1
        self.sizes[msg_id] = size
        self.delivery_counts[msg_id] = 0
        self.ready.append(msg_id)
        return Enqueue(msg_id, size, ttl_ms=ttl_ms)  # a Raft index, as a quorum queue holds

    @rule(
        channel=st.sampled_from(CHANNELS),
        prefetch_count=st.integers(0, 3),
        no_ack=st.booleans(),
        exclusive=st.sampled_from([False, False, False, True]),
        priority=st.integers(0, 2),
    )
    def checkout(
        self, channel: str, prefetch_count: int, no_ack: bool, exclusive: bool, priority: int
    ) -> None:
        key = f"ctag-{self.next_consumer}"
        self.next_consumer += 1
        if no_ack:
            channel = NO_ACK_CHANNEL
        refused = self.exclusive is not None or (exclusive and bool(self.consumers))
        if not refused:
            self.consumers[key] = ModelConsumer(channel, prefetch_count, no_ack, priority)
            self.channel_of[key] = channel
            if exclusive:
                self.exclusive = key
        reply = self.apply(Checkout(key, channel, prefetch_count, no_ack, exclusive, priority))
        if refused:
            assert isinstance(reply, Refused)
            assert reply.error.code == ReplyCode.ACCESS_REFUSED
        else:
            assert reply is None

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.consumers)))
        del self.consumers[key]
        if self.exclusive == key:
            self.exclusive = None
        assert self.apply(Cancel(key)) is True

    @rule()
    def cancel_unknown(self) -> None:
        assert self.apply(Cancel("nobody")) is False

    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        ids = self.some_ids(data)
        released = self.release(ids)
        assert self.apply(Settle(ids)) == len(released)

    @rule(data=st.data())
    def discard(self, data: st.DataObject) -> None:
        ids = self.some_ids(data)
        released = self.release(ids)
        self.rejecting = set(released)
        assert self.apply(Discard(ids)) == len(released)
        assert not self.rejecting, "discarded without a DeadLetter or Dropped effect"

    @rule(data=st.data())
    def return_(self, data: st.DataObject) -> None:
        ids = self.some_ids(data)
        for msg_id in self.release(ids):
            bisect.insort(self.ready, msg_id)
        assert self.apply(Return(ids)) is None

    @rule(no_ack=st.booleans())
    def get(self, no_ack: bool) -> None:
        reply = self.apply(Get(no_ack))
        expected = self.ready[0] if self.ready else None  # after what Get expired first
        if expected is None:
            assert reply is None
            return
        assert isinstance(reply, Got)
        assert reply.entry.msg_id == expected
        self.take_ready(expected, reply.entry.delivery_count)
        assert reply.remaining == len(self.ready)
        if not no_ack:
            self.unacked[expected] = None

    @rule()
    def snapshot_and_restore(self) -> None:
        """A replica restored from a Raft snapshot goes on exactly as the model says."""
        self.queue = snapshot.loads(snapshot.dumps(self.queue))

    @rule()
    def purge(self) -> None:
        count = len(self.ready)
        self.ready.clear()
        assert self.apply(Purge()) == count

    @rule(channel=st.sampled_from(LIMITED_CHANNELS), limit=st.none() | st.integers(0, 4))
    def set_channel_prefetch(self, channel: str, limit: int | None) -> None:
        # basic.qos global: the runtime passes the channel's credit, then asks for a dispatch.
        if limit is None:
            self.channel_limits.pop(channel, None)
        else:
            self.channel_limits[channel] = limit
        assert self.apply(Dispatch()) is None

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def counters_match_the_model(self) -> None:
        assert self.queue.ready_count == len(self.ready)
        assert self.queue.unacked_count == len(self.unacked)
        assert self.queue.ready_bytes == sum(self.sizes[msg_id] for msg_id in self.ready)
        assert self.queue.consumer_count == len(self.consumers)
        assert sorted(self.queue.consumers(), key=str) == sorted(self.consumers, key=str)

    @invariant()
    def ready_and_unacked_are_disjoint(self) -> None:
        assert not set(self.ready) & set(self.unacked)
        assert len(set(self.ready)) == len(self.ready)

    @invariant()
    def in_flight_matches_unacked(self) -> None:
        for key, consumer in self.consumers.items():
            held = sum(1 for holder in self.unacked.values() if holder == key)
            assert consumer.in_flight == held

    def teardown(self) -> None:
        # Everything the model still holds comes back out, oldest first, exactly once.
        meta = Meta(self.now_ms)
        for key in list(self.consumers):
            self.queue.apply(meta, Cancel(key))
        self.queue.apply(meta, Return(sorted(self.unacked)))
        drained = []
        for _ in range(len(self.ready) + len(self.unacked) + 1):
            reply, _ = self.queue.apply(meta, Get(no_ack=True))
            if reply is None:
                break
            assert isinstance(reply, Got)
            drained.append(reply.entry.msg_id)
        held = self.ready + list(self.unacked)
        assert drained == sorted(msg_id for msg_id in held if not self.expired(msg_id))
        assert (self.queue.ready_count, self.queue.unacked_count, self.queue.ready_bytes) == (
            0,
            0,
            0,
        )


class QueueWithTtlAgainstModel(QueueAgainstModel):
    """The same, with message TTLs and a clock; every message the queue drops is visible as
    a `DeadLetter` effect (with a dead-letter exchange) or a `Dropped` one (without), which
    the model follows."""

    dead_letter_exchange: str | None = "dlx"

    def __init__(self) -> None:
        super().__init__()
        self.deadlines: dict[int, int | None] = {}

    def new_queue(self) -> QueueMachine:
        return QueueMachine(
            "q", settings=QueueSettings(dead_letter_exchange=self.dead_letter_exchange)
        )

    @rule(size=st.integers(0, 1000), ttl_ms=st.none() | st.integers(0, 30))
    def enqueue_with_ttl(self, size: int, ttl_ms: int | None) -> None:
        command = self.enqueue_command(size, ttl_ms)
        msg_id = self.next_id - 1
        self.deadlines[msg_id] = None if ttl_ms is None else self.now_ms + ttl_ms
        assert self.apply(command) == msg_id

    @rule(elapsed_ms=st.integers(0, 20))
    def tick(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        assert self.apply(Tick()) is None
        assert not [msg_id for msg_id in self.ready if self.expired(msg_id)], "due, not expired"

    def expired(self, msg_id: int) -> bool:
        deadline = self.deadlines.get(msg_id)
        return deadline is not None and deadline <= self.now_ms

    def on_effect(self, effect: object, running: dict[Hashable, int]) -> None:
        if isinstance(effect, SetTimer):
            return
        if isinstance(effect, Deliver):
            deadline = self.deadlines.get(effect.entry.msg_id)
            assert deadline is None or deadline >= self.now_ms, "expired message delivered"
            self.check_delivery(effect, running)
            return
        expected = Dropped if self.dead_letter_exchange is None else DeadLetter
        assert isinstance(effect, expected), effect
        msg_id = effect.entry.msg_id
        if effect.reason == REJECTED:
            assert msg_id in self.rejecting, f"{msg_id} dead-lettered as rejected"
            self.rejecting.discard(msg_id)
            return
        assert effect.reason == EXPIRED, effect.reason
        assert msg_id in self.ready, f"{msg_id} expired while not ready"
        assert self.expired(msg_id), f"{msg_id} expired before its deadline"
        self.ready.remove(msg_id)

    @invariant()
    def a_timer_is_armed_for_the_next_deadline(self) -> None:
        due = [d for d in (self.deadlines.get(msg_id) for msg_id in self.ready) if d is not None]
        if due:
            assert self.queue.timer_at_ms is not None and self.queue.timer_at_ms <= min(due)


class QueueWithTtlNoDlxAgainstModel(QueueWithTtlAgainstModel):
    """Without a dead-letter exchange the same departures come as `Dropped` effects."""

    dead_letter_exchange = None


class RestoredQueueAgainstModel(QueueWithTtlAgainstModel):
    """A queue that starts from `Restore` (as after a restart): ids with gaps, absolute
    deadlines some of which have passed, some messages delivered before the restart."""

    @initialize(
        items=st.lists(
            st.tuples(
                st.integers(1, 3),  # gap to the previous msg_id
                st.integers(0, 1000),  # size
                st.none() | st.integers(-20, 40),  # deadline relative to the restart
                st.booleans(),  # delivered before the restart
            ),
            max_size=8,
        )
    )
    def restore(self, items: list[tuple[int, int, int | None, bool]]) -> None:
        self.now_ms = 100
        restored = []
        msg_id = 0
        for gap, size, deadline, redelivered in items:
            msg_id += gap
            at_ms = None if deadline is None else self.now_ms + deadline
            restored.append(Restored(msg_id, msg_id, size, at_ms, 0, redelivered))
            self.sizes[msg_id] = size
            self.delivery_counts[msg_id] = int(redelivered)
            self.deadlines[msg_id] = at_ms
            self.ready.append(msg_id)
        self.next_id = msg_id + 1
        assert self.apply(Restore(restored)) == len(restored)
        assert self.queue.next_msg_id == self.next_id
        assert not [msg_id for msg_id in self.ready if self.expired(msg_id)], "due, not expired"


QueueAgainstModel.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
test_queue_against_model = QueueAgainstModel.TestCase
QueueWithTtlAgainstModel.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
test_queue_with_ttl_against_model = QueueWithTtlAgainstModel.TestCase
QueueWithTtlNoDlxAgainstModel.TestCase.settings = settings(
    max_examples=50, stateful_step_count=40, deadline=None
)
test_queue_with_ttl_without_dlx_against_model = QueueWithTtlNoDlxAgainstModel.TestCase
RestoredQueueAgainstModel.TestCase.settings = settings(
    max_examples=50, stateful_step_count=30, deadline=None
)
test_restored_queue_against_model = RestoredQueueAgainstModel.TestCase
