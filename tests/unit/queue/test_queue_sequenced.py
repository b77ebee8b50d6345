"""Numbered commands (`Sequenced`): a command sent again after its first copy was applied
has its effects once, and the copy answers as the first one did."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

from warren.queue import Enqueue, Get, Got, Meta, QueueMachine, Sequenced
from warren.queue.machine import (
    SEQUENCED_GAP_MAX,
    SEQUENCED_REPLIES_KEPT,
    SEQUENCED_SENDER_IDLE_MS,
)

NOW = Meta(now_ms=0)


def publish(queue: QueueMachine, sender: str, seq: int, meta: Meta = NOW) -> object:
    reply, _effects = queue.apply(meta, Sequenced(sender, seq, Enqueue(f"{sender}{seq}", 1)))
    return reply


def bodies(queue: QueueMachine) -> list[object]:
    found = []
    while True:
        reply, _effects = queue.apply(NOW, Get(no_ack=True))
        if reply is None:
            return found
        assert isinstance(reply, Got)
        found.append(reply.entry.message)


def test_a_copy_is_applied_once_and_answers_as_the_first():
    queue = QueueMachine("q")
    first = [publish(queue, "a", seq) for seq in (1, 2, 3)]
    again = [publish(queue, "a", seq) for seq in (2, 3)]
    assert again == first[1:]
    assert publish(queue, "b", 1) != first[0]  # another sender counts on its own
    assert bodies(queue) == ["a1", "a2", "a3", "b1"]


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
    assert bodies(queue) == ["a1", "a3", "a4", "a2", "a5"]
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
    assert sorted(bodies(queue)) == sorted(f"a{seq}" for seq in set(arrivals))


def test_a_state_pickled_before_senders_existed_is_completed():
    queue = QueueMachine("q")
    publish(queue, "a", 1)
    old = queue.__getstate__()[:-1]  # version 1 had no `_senders`, its last field now
    restored = QueueMachine.__new__(QueueMachine)
    restored.__setstate__(old)
    assert restored._senders == {} and restored.ready_count == 1
    assert pickle.loads(pickle.dumps(queue))._senders["a"].applied_to == 1
