"""A queue machine's snapshot form (`warren.queue.snapshot`); the queue model test also
snapshots and restores its machine as one of its random steps."""

from __future__ import annotations

import pickle

from warren.queue import Checkout, Enqueue, Meta, QueueMachine, snapshot


def test_raft_indexes_come_back_as_they_were_and_delivery_goes_on_in_order() -> None:
    machine = QueueMachine("q")
    for index in range(10, 20):
        machine.apply(Meta(0), Enqueue(index, 128, ttl_ms=1000 if index % 2 else None))
    machine.apply(Meta(1), Checkout("c", "ch", prefetch_count=3))
    restored = snapshot.loads(snapshot.dumps(machine))
    assert [e.message for e in restored.held_entries()] == [
        e.message for e in machine.held_entries()
    ]
    assert restored.unacked_msg_ids() == machine.unacked_msg_ids() == [1, 2, 3]
    assert restored.timer_at_ms == machine.timer_at_ms
    _reply, later = restored.apply(Meta(2000), Checkout("d", "ch2", prefetch_count=10))
    assert [type(e).__name__ for e in later].count("Deliver") == 3  # 4..9, odd ones expired


def test_a_snapshot_of_machine_version_1_is_the_machine_pickled() -> None:
    machine = QueueMachine("q")
    machine.apply(Meta(0), Enqueue("a message", 9))
    restored = snapshot.loads(pickle.dumps(machine, pickle.HIGHEST_PROTOCOL))
    assert [e.message for e in restored.held_entries()] == ["a message"]
