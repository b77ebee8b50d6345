"""QueueMachine, one command at a time: replies, effects and counters."""

from __future__ import annotations

from collections.abc import Hashable

from warren.errors import ReplyCode, SoftError
from warren.model.settings import Overflow, QueueSettings
from warren.queue import (
    EXPIRED,
    MAXLEN,
    REJECTED,
    REJECTED_REPLY,
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
)

NOW = Meta(now_ms=0)


def apply(queue: QueueMachine, command: Command, meta: Meta = NOW) -> tuple[object, list[Deliver]]:
    """Apply a command that may only deliver (and drop, which `drops` checks separately)."""
    reply, effects = queue.apply(meta, command)
    assert all(isinstance(effect, Deliver | Dropped) for effect in effects), effects
    return reply, [effect for effect in effects if isinstance(effect, Deliver)]


def drops(effects: list[object]) -> list[tuple[int, str]]:
    return [(e.entry.msg_id, e.reason) for e in effects if isinstance(e, Dropped)]


def deliveries(effects: list[Deliver]) -> list[tuple[Hashable, int]]:
    return [(e.consumer, e.entry.msg_id) for e in effects if isinstance(e, Deliver)]


def fill(queue: QueueMachine, count: int, size_bytes: int = 10) -> list[int]:
    ids = []
    for index in range(count):
        msg_id, _ = apply(queue, Enqueue(f"m{index}", size_bytes))
        assert isinstance(msg_id, int)
        ids.append(msg_id)
    return ids


def got_id(queue: QueueMachine, no_ack: bool = False) -> int | None:
    reply, effects = apply(queue, Get(no_ack=no_ack))
    assert effects == []
    if reply is None:
        return None
    assert isinstance(reply, Got)
    return reply.entry.msg_id


def counts(queue: QueueMachine) -> tuple[int, int, int]:
    return queue.ready_count, queue.unacked_count, queue.ready_bytes


# --- Enqueue -----------------------------------------------------------------------------


def test_enqueue_numbers_messages_and_counts_them() -> None:
    queue = QueueMachine("q")
    assert [apply(queue, Enqueue(name, size))[0] for name, size in [("a", 1), ("b", 20)]] == [1, 2]
    assert counts(queue) == (2, 0, 21)
    assert queue.next_msg_id == 3


def test_enqueue_with_an_idle_consumer_delivers_at_once() -> None:
    queue = QueueMachine("q")
    apply(queue, Checkout("A", "ch"))
    reply, effects = apply(queue, Enqueue("m", 5))
    assert deliveries(effects) == [("A", reply)]
    assert effects[0].entry.message == "m"
    assert effects[0].entry.delivery_count == 1 and not effects[0].entry.redelivered
    assert counts(queue) == (0, 1, 0)


def test_enqueue_behind_a_backlog_keeps_fifo() -> None:
    queue = QueueMachine("q")
    fill(queue, 2)
    apply(queue, Checkout("A", "ch", prefetch_count=1))
    _, effects = apply(queue, Enqueue("late", 1))
    assert effects == []
    apply(queue, Settle([1]))
    assert got_id(queue) == 3


# --- Checkout: FIFO, prefetch, no-ack, round robin, priority, exclusivity ----------------


def test_checkout_delivers_the_backlog_in_fifo_order() -> None:
    queue = QueueMachine("q")
    ids = fill(queue, 5)
    reply, effects = apply(queue, Checkout("A", "ch"))
    assert reply is None
    assert deliveries(effects) == [("A", msg_id) for msg_id in ids]
    assert counts(queue) == (0, 5, 0)


def test_prefetch_limits_unacked_deliveries() -> None:
    queue = QueueMachine("q")
    fill(queue, 5)
    _, effects = apply(queue, Checkout("A", "ch", prefetch_count=2))
    assert deliveries(effects) == [("A", 1), ("A", 2)]
    assert counts(queue) == (3, 2, 30)
    reply, effects = apply(queue, Settle([1]))
    assert reply == 1
    assert deliveries(effects) == [("A", 3)]
    _, effects = apply(queue, Settle([2, 3]))
    assert deliveries(effects) == [("A", 4), ("A", 5)]


def test_no_ack_consumer_ignores_prefetch_and_holds_nothing() -> None:
    queue = QueueMachine("q")
    fill(queue, 4)
    _, effects = apply(queue, Checkout("A", "ch", prefetch_count=1, no_ack=True))
    assert deliveries(effects) == [("A", 1), ("A", 2), ("A", 3), ("A", 4)]
    assert counts(queue) == (0, 0, 0)
    assert apply(queue, Settle([1, 2]))[0] == 0


def test_consumers_of_equal_priority_take_turns() -> None:
    queue = QueueMachine("q")
    apply(queue, Checkout("A", "ch"))
    apply(queue, Checkout("B", "ch"))
    apply(queue, Checkout("C", "ch"))
    taken = [deliveries(apply(queue, Enqueue(i, 1))[1])[0][0] for i in range(6)]
    assert taken == ["A", "B", "C", "A", "B", "C"]


def test_round_robin_skips_consumers_without_credit() -> None:
    queue = QueueMachine("q")
    apply(queue, Checkout("A", "ch", prefetch_count=1))
    apply(queue, Checkout("B", "ch"))
    taken = [deliveries(apply(queue, Enqueue(i, 1))[1])[0][0] for i in range(4)]
    assert taken == ["A", "B", "B", "B"]


def test_backlog_is_shared_round_robin() -> None:
    queue = QueueMachine("q")
    apply(queue, Checkout("A", "ch", prefetch_count=1))
    apply(queue, Checkout("B", "ch", prefetch_count=1))
    fill(queue, 4)  # A takes 1 at once, B takes 2, two stay ready
    assert counts(queue)[:2] == (2, 2)
    _, effects = apply(queue, Settle([1, 2]))
    assert sorted(deliveries(effects)) == [("A", 3), ("B", 4)]


def test_higher_priority_consumer_is_served_first_while_it_has_credit() -> None:
    queue = QueueMachine("q")
    apply(queue, Checkout("low", "ch"))
    apply(queue, Checkout("high", "ch", prefetch_count=2, priority=10))
    taken = [deliveries(apply(queue, Enqueue(i, 1))[1])[0] for i in range(4)]
    assert taken == [("high", 1), ("high", 2), ("low", 3), ("low", 4)]
    apply(queue, Settle([1]))  # high has credit again
    _, effects = apply(queue, Enqueue("x", 1))
    assert deliveries(effects) == [("high", 5)]


def test_freed_backlog_goes_to_the_higher_priority_first() -> None:
    queue = QueueMachine("q")
    apply(queue, Checkout("low", "ch", prefetch_count=1))
    apply(queue, Checkout("high", "ch", prefetch_count=1, priority=5))
    fill(queue, 4)  # 1 to high, 2 to low, 3 and 4 wait
    _, effects = apply(queue, Settle([2, 1]))
    assert deliveries(effects) == [("high", 3), ("low", 4)]


def test_negative_priority_consumer_gets_what_others_cannot_take() -> None:
    queue = QueueMachine("q")
    fill(queue, 3)
    apply(queue, Checkout("high", "ch", prefetch_count=1))
    _, effects = apply(queue, Checkout("low", "ch", prefetch_count=5, priority=-1))
    assert deliveries(effects) == [("low", 2), ("low", 3)]


def test_exclusive_consumer_is_refused_when_others_consume() -> None:
    queue = QueueMachine("q", vhost="v")
    apply(queue, Checkout("A", "ch"))
    reply, effects = apply(queue, Checkout("B", "ch", exclusive=True))
    assert isinstance(reply, Refused) and effects == []
    assert isinstance(reply.error, SoftError)
    assert reply.error.code == ReplyCode.ACCESS_REFUSED
    assert reply.error.text == "ACCESS_REFUSED - queue 'q' in vhost 'v' in exclusive use"
    assert queue.consumers() == ["A"]


def test_exclusive_consumer_keeps_others_out_until_cancelled() -> None:
    queue = QueueMachine("q")
    assert apply(queue, Checkout("X", "ch", exclusive=True))[0] is None
    reply, _ = apply(queue, Checkout("B", "ch"))
    assert isinstance(reply, Refused)
    assert reply.error.code == ReplyCode.ACCESS_REFUSED
    assert queue.consumer_count == 1
    apply(queue, Cancel("X"))
    assert apply(queue, Checkout("B", "ch"))[0] is None


def test_refused_checkout_changes_nothing() -> None:
    queue = QueueMachine("q")
    fill(queue, 2)
    apply(queue, Checkout("X", "ch", prefetch_count=1, exclusive=True))
    reply, effects = apply(queue, Checkout("B", "ch"))
    assert isinstance(reply, Refused) and effects == []
    assert counts(queue) == (1, 1, 10)
    apply(queue, Settle([1]))
    assert queue.unacked_count == 1  # message 2 went to X, not to the refused B


# --- channel credit (basic.qos global) ---------------------------------------------------


def test_channel_credit_limits_deliveries() -> None:
    queue = QueueMachine("q")
    fill(queue, 5)
    _, effects = apply(queue, Checkout("A", "c1"), Meta(0, {"c1": 2}))
    assert deliveries(effects) == [("A", 1), ("A", 2)]
    _, effects = apply(queue, Dispatch(), Meta(0, {"c1": 0}))
    assert effects == []
    _, effects = apply(queue, Dispatch(), Meta(0, {"c1": 1}))
    assert deliveries(effects) == [("A", 3)]


def test_channel_credit_is_shared_by_the_channels_consumers() -> None:
    queue = QueueMachine("q")
    fill(queue, 6)
    limited = Meta(0, {"c1": 3})
    apply(queue, Checkout("A", "c1", prefetch_count=10), Meta(0, {"c1": 0}))
    _, effects = apply(queue, Checkout("B", "c1", prefetch_count=10), limited)
    assert len(effects) == 3
    assert counts(queue)[:2] == (3, 3)


def test_channel_credit_binds_only_the_channels_named() -> None:
    queue = QueueMachine("q")
    fill(queue, 3)
    apply(queue, Checkout("A", "c1"), Meta(0, {"c1": 0}))
    _, effects = apply(queue, Checkout("B", "c2"), Meta(0, {"c1": 0}))
    assert deliveries(effects) == [("B", 1), ("B", 2), ("B", 3)]


def test_channel_credit_applies_to_direct_delivery() -> None:
    queue = QueueMachine("q")
    apply(queue, Checkout("A", "c1"))
    _, effects = apply(queue, Enqueue("m", 1), Meta(0, {"c1": 0}))
    assert effects == []
    assert queue.ready_count == 1


def test_dispatch_with_nothing_to_do() -> None:
    queue = QueueMachine("q")
    assert apply(queue, Dispatch()) == (None, [])
    fill(queue, 1)
    assert apply(queue, Dispatch()) == (None, [])


# --- Cancel ------------------------------------------------------------------------------


def test_cancel_stops_deliveries_and_keeps_unacked() -> None:
    queue = QueueMachine("q")
    apply(queue, Checkout("A", "ch", prefetch_count=1))
    fill(queue, 1)
    assert apply(queue, Cancel("A")) == (True, [])
    assert apply(queue, Cancel("A")) == (False, [])
    assert apply(queue, Enqueue("m", 1))[1] == []
    assert counts(queue)[:2] == (1, 1)
    assert apply(queue, Settle([1]))[0] == 1
    assert queue.consumer_count == 0


def test_messages_of_a_cancelled_consumer_go_to_the_next_when_returned() -> None:
    queue = QueueMachine("q")
    apply(queue, Checkout("A", "ch"))
    fill(queue, 2)
    apply(queue, Cancel("A"))
    apply(queue, Checkout("B", "ch", prefetch_count=1))
    _, effects = apply(queue, Return([2, 1]))
    assert deliveries(effects) == [("B", 1)]
    assert effects[0].entry.redelivered


# --- Settle, Return, Discard -------------------------------------------------------------


def test_settle_counts_only_unacked_messages() -> None:
    queue = QueueMachine("q")
    fill(queue, 3)
    assert got_id(queue) == 1
    assert apply(queue, Settle([1, 1, 2, 99])) == (1, [])  # 2 is ready, 99 never existed
    assert counts(queue) == (2, 0, 20)


def test_returned_message_takes_its_original_place() -> None:
    queue = QueueMachine("q")
    fill(queue, 4)
    assert [got_id(queue), got_id(queue)] == [1, 2]
    assert apply(queue, Return([1])) == (None, [])
    assert counts(queue) == (3, 1, 30)
    reply, _ = apply(queue, Get())
    assert isinstance(reply, Got)
    assert (reply.entry.msg_id, reply.entry.delivery_count, reply.entry.redelivered) == (1, 2, True)
    assert reply.remaining == 2
    assert [got_id(queue), got_id(queue), got_id(queue)] == [3, 4, None]


def test_returned_messages_come_back_in_id_order() -> None:
    queue = QueueMachine("q")
    fill(queue, 5)
    taken = [got_id(queue) for _ in range(4)]
    apply(queue, Return([4, 2, 3]))
    apply(queue, Return([1]))
    assert taken == [1, 2, 3, 4]
    assert [got_id(queue, no_ack=True) for _ in range(6)] == [1, 2, 3, 4, 5, None]


def test_returned_message_is_redelivered_before_newer_ones() -> None:
    queue = QueueMachine("q")
    fill(queue, 3)
    apply(queue, Checkout("A", "ch", prefetch_count=1))
    _, effects = apply(queue, Return([1]))
    assert deliveries(effects) == [("A", 1)]
    assert effects[0].entry.delivery_count == 2
    _, effects = apply(queue, Settle([1]))
    assert deliveries(effects) == [("A", 2)]
    assert not effects[0].entry.redelivered


def test_delivery_count_grows_with_every_delivery() -> None:
    queue = QueueMachine("q")
    fill(queue, 1)
    apply(queue, Checkout("A", "ch"))
    for expected in range(2, 6):
        _, effects = apply(queue, Return([1]))
        assert effects[0].entry.delivery_count == expected


def test_return_of_unknown_ids_changes_nothing() -> None:
    queue = QueueMachine("q")
    fill(queue, 2)
    assert apply(queue, Return([1, 7])) == (None, [])
    assert counts(queue) == (2, 0, 20)


def test_discard_drops_without_requeue_and_frees_credit() -> None:
    queue = QueueMachine("q")
    fill(queue, 3)
    apply(queue, Checkout("A", "ch", prefetch_count=1))
    reply, effects = queue.apply(NOW, Discard([1, 1, 3]))
    assert reply == 1
    assert drops(effects) == [(1, REJECTED)]  # no dead-letter exchange: reported as dropped
    assert deliveries(effects) == [("A", 2)]  # type: ignore[arg-type]
    assert counts(queue) == (1, 1, 10)
    apply(queue, Cancel("A"))
    apply(queue, Return([2]))
    assert [got_id(queue, no_ack=True) for _ in range(3)] == [2, 3, None]


# --- Get and Purge -----------------------------------------------------------------------


def test_get_on_an_empty_queue() -> None:
    assert apply(QueueMachine("q"), Get()) == (None, [])


def test_get_reports_the_remaining_count() -> None:
    queue = QueueMachine("q")
    fill(queue, 3)
    reply, _ = apply(queue, Get(no_ack=True))
    assert isinstance(reply, Got)
    assert (reply.entry.msg_id, reply.remaining, reply.entry.message) == (1, 2, "m0")
    assert counts(queue) == (2, 0, 20)


def test_get_with_ack_holds_the_message_until_settled() -> None:
    queue = QueueMachine("q")
    fill(queue, 1)
    assert got_id(queue) == 1
    assert counts(queue) == (0, 1, 0)
    assert apply(queue, Settle([1]))[0] == 1
    assert counts(queue) == (0, 0, 0)


def test_purge_drops_ready_messages_only() -> None:
    queue = QueueMachine("q")
    fill(queue, 5)
    got_id(queue)
    got_id(queue)
    apply(queue, Return([2]))
    assert apply(queue, Purge()) == (4, [])
    assert counts(queue) == (0, 1, 0)
    assert got_id(queue) is None
    apply(queue, Return([1]))
    assert [got_id(queue, no_ack=True), got_id(queue)] == [1, None]
    assert apply(queue, Purge()) == (0, [])


# --- TTL bookkeeping: a message that left the queue cannot expire from it ----------------

WITH_DLX = QueueSettings(dead_letter_exchange="dlx")


def dead_letters(effects: list[object]) -> list[tuple[int, str]]:
    return [(e.entry.msg_id, e.reason) for e in effects if isinstance(e, DeadLetter)]


def test_message_delivered_without_ack_does_not_expire_later() -> None:
    # Shrunk from the TTL model: ready_count went to -1 at the Tick.
    queue = QueueMachine("q", settings=WITH_DLX)
    queue.apply(Meta(0), Enqueue("m", 10, ttl_ms=1))
    _, effects = queue.apply(Meta(0), Checkout("A", "ch", no_ack=True))
    assert [type(e) for e in effects if not isinstance(e, SetTimer)] == [Deliver]
    _, effects = queue.apply(Meta(1), Tick())
    assert dead_letters(effects) == []
    assert counts(queue) == (0, 0, 0)


def test_message_fetched_and_settled_does_not_expire_later() -> None:
    queue = QueueMachine("q", settings=WITH_DLX)
    queue.apply(Meta(0), Enqueue("m", 10, ttl_ms=5))
    assert isinstance(queue.apply(Meta(1), Get())[0], Got)
    queue.apply(Meta(2), Settle([1]))
    _, effects = queue.apply(Meta(10), Tick())
    assert dead_letters(effects) == []
    assert counts(queue) == (0, 0, 0)


def test_message_expired_at_dispatch_is_dead_lettered_once() -> None:
    queue = QueueMachine("q", settings=WITH_DLX)
    queue.apply(Meta(0), Enqueue("m", 10, ttl_ms=5))
    _, effects = queue.apply(Meta(10), Checkout("A", "ch"))
    assert dead_letters(effects) == [(1, EXPIRED)]
    _, effects = queue.apply(Meta(10), Tick())
    assert dead_letters(effects) == []
    assert counts(queue) == (0, 0, 0)


def test_message_dropped_from_the_head_does_not_expire_later() -> None:
    settings = QueueSettings(dead_letter_exchange="dlx", max_length=1)
    queue = QueueMachine("q", settings=settings)
    queue.apply(Meta(0), Enqueue("old", 10, ttl_ms=5))
    _, effects = queue.apply(Meta(0), Enqueue("new", 20))
    assert dead_letters(effects) == [(1, MAXLEN)]
    _, effects = queue.apply(Meta(10), Tick())
    assert dead_letters(effects) == []
    assert counts(queue) == (1, 0, 20)


# --- Dropped: every departure without a dead-letter exchange is reported -----------------


def test_messages_leaving_without_a_dlx_are_reported_as_dropped() -> None:
    queue = QueueMachine("q", settings=QueueSettings(max_length=1))
    queue.apply(Meta(0), Enqueue("old", 10, ttl_ms=50))
    _, effects = queue.apply(Meta(0), Enqueue("new", 20, ttl_ms=5))
    assert drops(effects) == [(1, MAXLEN)]
    _, effects = queue.apply(Meta(10), Tick())
    assert drops(effects) == [(2, EXPIRED)]
    assert counts(queue) == (0, 0, 0)


def test_a_caller_that_follows_no_drops_gets_no_dropped_effects() -> None:
    unfollowed = Meta(0, drops_followed=False)
    queue = QueueMachine("q", settings=QueueSettings(max_length=1))
    queue.apply(unfollowed, Enqueue("old", 10, ttl_ms=50))
    _, effects = queue.apply(unfollowed, Enqueue("new", 20, ttl_ms=5))
    assert effects == [SetTimer(5)]  # `old` went over the length limit, unreported
    _, effects = queue.apply(Meta(10, drops_followed=False), Tick())
    assert effects == []  # `new` expired, unreported
    assert counts(queue) == (0, 0, 0)
    with_dlx = QueueMachine("q", settings=QueueSettings(dead_letter_exchange="dlx", max_length=1))
    with_dlx.apply(unfollowed, Enqueue("old", 10))
    _, effects = with_dlx.apply(unfollowed, Enqueue("new", 20))
    assert dead_letters(effects) == [(1, MAXLEN)]  # dead-lettering is not a drop


def test_a_publish_refused_for_length_is_not_reported() -> None:
    settings = QueueSettings(max_length=0, overflow=Overflow.REJECT_PUBLISH_DLX)
    queue = QueueMachine("q", settings=settings)
    reply, effects = queue.apply(NOW, Enqueue("m", 1))
    assert reply is REJECTED_REPLY
    assert effects == []


def test_with_a_dlx_nothing_is_reported_as_dropped() -> None:
    queue = QueueMachine("q", settings=QueueSettings(dead_letter_exchange="dlx", max_length=1))
    fill_effects = [queue.apply(NOW, Enqueue(f"m{i}", 1))[1] for i in range(3)]
    assert [drops(effects) for effects in fill_effects] == [[], [], []]


def test_unacked_msg_ids_are_what_a_purge_keeps() -> None:
    queue = QueueMachine("q")
    fill(queue, 4)
    got_id(queue)
    got_id(queue, no_ack=True)
    got_id(queue)
    assert queue.unacked_msg_ids() == [1, 3]
    apply(queue, Purge())
    assert queue.unacked_msg_ids() == [1, 3]


# --- Restore: messages a journal kept come back with their ids, deadlines, marks ---------


def restored(msg_id: int, **fields: object) -> Restored:
    return Restored(msg_id, f"m{msg_id}", 10, **fields)  # type: ignore[arg-type]


def test_restore_keeps_ids_and_order_and_moves_the_counter() -> None:
    queue = QueueMachine("q")
    reply, effects = queue.apply(NOW, Restore([restored(3), restored(7), restored(9)]))
    assert (reply, effects) == (3, [])
    assert counts(queue) == (3, 0, 30)
    assert queue.next_msg_id == 10
    assert apply(queue, Enqueue("new", 1))[0] == 10
    assert [got_id(queue, no_ack=True) for _ in range(5)] == [3, 7, 9, 10, None]


def test_restored_delivered_message_is_redelivered() -> None:
    queue = QueueMachine("q")
    queue.apply(NOW, Restore([restored(1, redelivered=True), restored(2)]))
    _, effects = apply(queue, Checkout("A", "ch"))
    assert [(e.entry.msg_id, e.entry.redelivered) for e in effects] == [(1, True), (2, False)]


def test_restore_skips_ids_the_queue_already_handed_out() -> None:
    queue = QueueMachine("q")
    fill(queue, 2)
    reply, _ = queue.apply(NOW, Restore([restored(2), restored(5)]))
    assert reply == 1
    assert [got_id(queue, no_ack=True) for _ in range(4)] == [1, 2, 5, None]
    assert queue.apply(NOW, Restore([restored(5)]))[0] == 0


def test_restore_keeps_absolute_deadlines_and_expires_what_is_due() -> None:
    queue = QueueMachine("q", settings=WITH_DLX)
    reply, effects = queue.apply(
        Meta(100), Restore([restored(1, expires_at_ms=90), restored(2, expires_at_ms=150)])
    )
    assert reply == 2
    assert dead_letters(effects) == [(1, EXPIRED)]
    assert queue.timer_at_ms == 150
    _, effects = queue.apply(Meta(150), Tick())
    assert dead_letters(effects) == [(2, EXPIRED)]
    assert counts(queue) == (0, 0, 0)


def test_restore_puts_messages_on_their_priority_levels() -> None:
    queue = QueueMachine("q", settings=QueueSettings(max_priority=2))
    queue.apply(NOW, Restore([restored(1, priority=0), restored(2, priority=9), restored(3)]))
    assert [got_id(queue, no_ack=True) for _ in range(4)] == [2, 1, 3, None]


def test_restore_applies_a_drop_head_limit() -> None:
    queue = QueueMachine("q", settings=QueueSettings(max_length=2))
    reply, effects = queue.apply(NOW, Restore([restored(1), restored(2), restored(3)]))
    assert reply == 3
    assert drops(effects) == [(1, MAXLEN)]
    assert counts(queue) == (2, 0, 20)
