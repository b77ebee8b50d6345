"""The queue machine with a quorum queue's settings: requeue position, fetches counted as
consumers, at-least-once dead-lettering (held messages, prefetch, settlement), and the
numbered commands a replicated queue's senders use (`Sequenced`)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from warren.amqp.table import Typed
from warren.model import QueueRecord
from warren.model.policy import effective_settings
from warren.model.settings import DeadLetterStrategy, Overflow, QueueSettings
from warren.queue import (
    DELIVERY_LIMIT,
    REJECTED,
    REJECTED_REPLY,
    Cancel,
    Checkout,
    Command,
    Configure,
    DeadLetter,
    Deliver,
    Discard,
    Dropped,
    Enqueue,
    Get,
    Got,
    Meta,
    QueueMachine,
    Return,
    Sequenced,
    Settle,
    SettleDeadLetter,
)
from warren.queue.machine import (
    SEQUENCED_GAP_MAX,
    SEQUENCED_REPLIES_KEPT,
    SEQUENCED_SENDER_IDLE_MS,
)

NOW = Meta(now_ms=0)


def quorum_settings(**arguments: object) -> QueueSettings:
    """What `effective_settings` gives a quorum queue with these arguments, no policy."""
    typed = {"x-queue-type": Typed("S", "quorum")}
    for key, value in arguments.items():
        typed[key] = Typed("S" if isinstance(value, str) else "l", value)
    record = QueueRecord("q", "/", True, None, False, typed)
    return effective_settings(record, None, None, dead_letter_prefetch=2)


AT_LEAST_ONCE = {
    "x-dead-letter-exchange": "dlx",
    "x-dead-letter-strategy": "at-least-once",
    "x-overflow": "reject-publish",
}


def machine(settings: QueueSettings) -> QueueMachine:
    return QueueMachine("q", settings=settings)


def enqueue(queue: QueueMachine, *bodies: str) -> list[int]:
    ids = []
    for body in bodies:
        reply, _effects = queue.apply(NOW, Enqueue(body, 1))
        assert isinstance(reply, int)
        ids.append(reply)
    return ids


def get(queue: QueueMachine) -> Got:
    reply, _effects = queue.apply(NOW, Get())
    assert isinstance(reply, Got)
    return reply


def bodies_in_order(queue: QueueMachine) -> list[object]:
    found = []
    while True:
        reply, _effects = queue.apply(NOW, Get(no_ack=True))
        if reply is None:
            return found
        assert isinstance(reply, Got)
        found.append(reply.entry.message)


def test_the_quorum_type_sets_its_behaviour():
    settings = quorum_settings()
    assert settings.requeue_at_back
    assert settings.delivery_count_header
    assert settings.fetch_counts_as_consumer
    assert not settings.global_qos
    assert not quorum_settings(**{"x-delivery-limit": 3}).requeue_at_back
    classic = effective_settings(QueueRecord("q", "/", True, None, False, {}), None, None)
    assert not classic.requeue_at_back and classic.global_qos


def test_at_least_once_needs_reject_publish_and_a_dead_letter_exchange():
    assert quorum_settings(**AT_LEAST_ONCE).dead_letter_strategy is DeadLetterStrategy.AT_LEAST_ONCE
    for missing in ("x-overflow", "x-dead-letter-exchange"):
        arguments = {k: v for k, v in AT_LEAST_ONCE.items() if k != missing}
        assert quorum_settings(**arguments).dead_letter_strategy is DeadLetterStrategy.AT_MOST_ONCE


def test_a_returned_message_goes_to_the_back_without_a_delivery_limit():
    queue = machine(quorum_settings())
    enqueue(queue, "m1", "m2", "m3")
    queue.apply(NOW, Return([get(queue).entry.msg_id]))
    assert bodies_in_order(queue) == ["m2", "m3", "m1"]


def test_a_returned_message_goes_to_the_head_with_a_delivery_limit():
    queue = machine(quorum_settings(**{"x-delivery-limit": 5}))
    enqueue(queue, "m1", "m2", "m3")
    queue.apply(NOW, Return([get(queue).entry.msg_id]))
    assert bodies_in_order(queue) == ["m1", "m2", "m3"]


def test_a_message_is_delivered_limit_plus_one_times():
    queue = machine(quorum_settings(**{"x-delivery-limit": 2}))
    enqueue(queue, "m1")
    counts = []
    for _ in range(3):
        got = get(queue)
        counts.append(got.entry.delivery_count - 1)  # what x-delivery-count says
        _reply, effects = queue.apply(NOW, Return([got.entry.msg_id]))
    assert counts == [0, 1, 2]
    assert [(type(e), e.reason) for e in effects] == [(Dropped, DELIVERY_LIMIT)]  # type: ignore[union-attr]


def test_a_consumer_gone_with_its_node_hands_its_messages_to_the_others():
    # Cancel(requeue=True): what a replicated queue's leader does for a consumer on a lost
    # node; everything it held goes to the remaining consumer, none back to it.
    queue = machine(quorum_settings())
    enqueue(queue, "m1", "m2", "m3")
    queue.apply(NOW, Checkout(consumer="lost", channel="lost", prefetch_count=2))
    assert queue.checked_out("lost") == [1, 2]
    queue.apply(NOW, Checkout(consumer="live", channel="live"))
    _reply, effects = queue.apply(NOW, Cancel("lost", requeue=True))
    delivered = [(e.consumer, e.entry.message) for e in effects if isinstance(e, Deliver)]
    assert delivered == [("live", "m1"), ("live", "m2")]
    assert queue.checked_out("lost") == [] and queue.consumer_count == 1


def test_what_a_lost_node_fetched_goes_back_to_the_queue():
    # Cancel(holder, requeue=True) for a Get holder: what a replicated queue's leader does
    # for basic.get on a lost node; what another holder fetched, or was settled, stays.
    queue = machine(quorum_settings())
    enqueue(queue, "m1", "m2", "m3")
    lost = [queue.apply(NOW, Get(holder="lost"))[0] for _ in range(2)]
    kept, _effects = queue.apply(NOW, Get(holder="live"))
    assert isinstance(kept, Got) and all(isinstance(got, Got) for got in lost)
    queue.apply(NOW, Settle([lost[1].entry.msg_id]))  # type: ignore[union-attr]
    assert queue.holders() == ["lost", "live"] and queue.checked_out("lost") == [1]
    queue.apply(NOW, Cancel("lost", requeue=True))
    assert queue.holders() == ["live"] and queue.consumer_count == 1
    again = get(queue)
    assert again.entry.message == "m1" and again.entry.redelivered
    assert queue.checked_out("live") == [3]


def test_each_unsettled_fetch_counts_as_a_consumer():
    queue = machine(quorum_settings())
    enqueue(queue, "m1", "m2")
    first, second = get(queue), get(queue)
    assert queue.consumer_count == 2
    queue.apply(NOW, Settle([first.entry.msg_id]))
    queue.apply(NOW, Return([second.entry.msg_id]))
    assert queue.consumer_count == 0


def test_a_classic_queue_counts_no_fetch_as_a_consumer():
    queue = machine(QueueSettings())
    enqueue(queue, "m1")
    get(queue)
    assert queue.consumer_count == 0


def discard_all(queue: QueueMachine) -> list[DeadLetter]:
    """Fetch and reject every ready message; the dead-letter effects that went out."""
    out: list[DeadLetter] = []
    while queue.ready_count:
        _reply, effects = queue.apply(NOW, Discard([get(queue).entry.msg_id]))
        out += [e for e in effects if isinstance(e, DeadLetter)]
    return out


def test_at_least_once_holds_dead_letters_up_to_the_prefetch_until_settled():
    queue = machine(quorum_settings(**AT_LEAST_ONCE))
    ids = enqueue(queue, "m1", "m2", "m3")
    out = discard_all(queue)
    assert [(d.entry.msg_id, d.reason, d.held) for d in out] == [
        (ids[0], REJECTED, True),
        (ids[1], REJECTED, True),
    ]
    assert (queue.dead_letter_count, queue.dead_letter_bytes) == (3, 3)
    assert [d.entry.msg_id for d in queue.dead_letters_in_flight()] == ids[:2]
    reply, effects = queue.apply(NOW, SettleDeadLetter([ids[1], 999]))
    assert reply == 1
    assert [(type(e), e.entry.msg_id) for e in effects] == [(DeadLetter, ids[2])]  # type: ignore[union-attr]
    assert [d.entry.msg_id for d in queue.dead_letters_in_flight()] == [ids[0], ids[2]]
    queue.apply(NOW, SettleDeadLetter([ids[0], ids[2]]))
    assert (queue.dead_letter_count, queue.dead_letter_bytes) == (0, 0)


def test_held_dead_letters_count_against_the_length_limit():
    queue = machine(quorum_settings(**AT_LEAST_ONCE, **{"x-max-length": 2}))
    enqueue(queue, "m1", "m2")
    discard_all(queue)
    reply, _effects = queue.apply(NOW, Enqueue("m3", 1))
    assert reply is REJECTED_REPLY
    queue.apply(NOW, SettleDeadLetter([d.entry.msg_id for d in queue.dead_letters_in_flight()]))
    reply, _effects = queue.apply(NOW, Enqueue("m3", 1))
    assert isinstance(reply, int)


def test_leaving_at_least_once_drops_what_is_held():
    settings = quorum_settings(**AT_LEAST_ONCE)
    queue = machine(settings)
    ids = enqueue(queue, "m1", "m2", "m3")
    discard_all(queue)
    drop_head = dataclasses.replace(
        settings, overflow=Overflow.DROP_HEAD, dead_letter_strategy=DeadLetterStrategy.AT_MOST_ONCE
    )
    _reply, effects = queue.apply(NOW, Configure(drop_head))
    assert [(type(e), e.entry.msg_id, e.reason) for e in effects] == [  # type: ignore[union-attr]
        (Dropped, msg_id, REJECTED) for msg_id in ids
    ]
    assert (queue.dead_letter_count, queue.dead_letters_in_flight()) == (0, [])


COMMANDS = st.one_of(
    st.tuples(st.just("enqueue")),
    st.tuples(st.just("get")),
    st.tuples(st.sampled_from(["settle", "return", "discard", "settle_dead"]), st.integers(0, 5)),
    st.tuples(st.just("strategy"), st.booleans()),
)


def run(log: list[tuple]) -> list[object]:
    """Fold a command log through a fresh at-least-once queue; every reply and effect, as
    plain values, and the invariants checked after each step."""
    base = quorum_settings(**AT_LEAST_ONCE, **{"x-max-length": 4})
    queue = machine(base)
    fetched: list[int] = []
    seen: list[object] = []
    for step in log:
        command: Command
        if step[0] == "enqueue":
            command = Enqueue(f"m{queue.next_msg_id}", 1)
        elif step[0] == "get":
            command = Get()
        elif step[0] == "strategy":
            strategy = (
                DeadLetterStrategy.AT_LEAST_ONCE if step[1] else DeadLetterStrategy.AT_MOST_ONCE
            )
            command = Configure(dataclasses.replace(base, dead_letter_strategy=strategy))
        elif step[0] == "settle_dead":
            out = [d.entry.msg_id for d in queue.dead_letters_in_flight()]
            command = SettleDeadLetter(out[: step[1]])
        else:
            taken, fetched = fetched[: step[1]], fetched[step[1] :]
            command = {"settle": Settle, "return": Return, "discard": Discard}[step[0]](taken)
        reply, effects = queue.apply(NOW, command)
        if isinstance(reply, Got):
            fetched.append(reply.entry.msg_id)
            reply = reply.entry.msg_id
        seen.append(
            (
                reply,
                [(type(e).__name__, getattr(e, "entry", None) and e.entry.msg_id) for e in effects],
            )
        )  # type: ignore[union-attr]
        out_count = len(queue.dead_letters_in_flight())
        assert out_count <= base.dead_letter_prefetch
        if isinstance(command, Enqueue) and isinstance(reply, int):  # returns may go over
            assert queue.ready_count + queue.dead_letter_count <= 4
        assert queue.dead_letter_count >= out_count
        assert queue.consumer_count == len(fetched)
    return seen


@given(st.lists(COMMANDS, max_size=40))
def test_the_same_log_gives_the_same_replies_and_effects(log):
    assert run(log) == run(log)


# --- numbered commands (`Sequenced`): a copy sent again is applied once, and answers as the
# first one did


def publish(queue: QueueMachine, sender: str, seq: int, meta: Meta = NOW) -> object:
    reply, _effects = queue.apply(meta, Sequenced(sender, seq, Enqueue(f"{sender}{seq}", 1)))
    return reply


def test_a_copy_is_applied_once_and_answers_as_the_first():
    queue = QueueMachine("q")
    first = [publish(queue, "a", seq) for seq in (1, 2, 3)]
    again = [publish(queue, "a", seq) for seq in (2, 3)]
    assert again == first[1:]
    assert publish(queue, "b", 1) != first[0]  # another sender counts on its own
    assert bodies_in_order(queue) == ["a1", "a2", "a3", "b1"]


def test_a_copy_of_a_get_hands_out_the_message_the_first_took():
    queue = QueueMachine("q")
    publish(queue, "p", 1)
    took, _ = queue.apply(NOW, Sequenced("c", 1, Get()))
    again, _ = queue.apply(NOW, Sequenced("c", 1, Get()))
    assert isinstance(took, Got) and again is took
    assert queue.unacked_count == 1


def test_numbers_may_arrive_out_of_order_and_the_gap_closes():
    queue = QueueMachine("q")
    for seq in (1, 3, 4, 2, 3, 4, 5):
        publish(queue, "a", seq)
    assert bodies_in_order(queue) == ["a1", "a3", "a4", "a2", "a5"]
    sender = queue._senders["a"]
    assert sender.applied_to == 5 and not sender.above


def test_a_gap_its_sender_gave_up_is_forgotten():
    queue = QueueMachine("q")
    for seq in range(2, SEQUENCED_GAP_MAX + 3):
        publish(queue, "a", seq)
    sender = queue._senders["a"]
    assert sender.applied_to == SEQUENCED_GAP_MAX + 2 and not sender.above
    assert len(sender.replies) == SEQUENCED_REPLIES_KEPT
    assert publish(queue, "a", 1) is None  # too late: taken as a copy, with no reply kept


def test_an_idle_sender_is_forgotten_when_another_arrives():
    queue = QueueMachine("q")
    publish(queue, "old", 1)
    publish(queue, "new", 1, Meta(now_ms=SEQUENCED_SENDER_IDLE_MS + 1))
    assert list(queue._senders) == ["new"]


@given(st.lists(st.integers(min_value=1, max_value=30), max_size=80))
def test_every_number_is_applied_exactly_once(arrivals: list[int]):
    queue = QueueMachine("q")
    for seq in arrivals:
        publish(queue, "a", seq)
    assert sorted(bodies_in_order(queue)) == sorted(f"a{seq}" for seq in set(arrivals))


def test_what_version_1_pickled_is_completed_with_the_fields_added_since():
    queue = QueueMachine("q")
    publish(queue, "a", 1)
    old = [getattr(queue, f.name) for f in dataclasses.fields(queue)][:-2]  # v1 ended before
    restored = QueueMachine.__new__(QueueMachine)
    restored.__setstate__(old)
    assert restored._senders == {} and restored._fetched_by == {} and restored.ready_count == 1
    get, cancel = Get.__new__(Get), Cancel.__new__(Cancel)
    get.__setstate__([True])
    cancel.__setstate__(["consumer"])
    assert (get, cancel) == (Get(no_ack=True), Cancel("consumer"))
