"""`ReadyQueue`: plain ready messages (a Raft index for a message, never delivered, no
deadline) kept as columns, other entries as objects, in one order."""

from __future__ import annotations

import gc
import tracemalloc

from warren.queue import Enqueue, Meta, QueueMachine, snapshot
from warren.queue.machine import PACKED_RUN_MAX, Entry, ReadyQueue


def fields(entry: Entry) -> tuple[object, ...]:
    return (
        entry.msg_id,
        entry.message,
        entry.size_bytes,
        entry.expires_at_ms,
        entry.level,
        entry.delivery_count,
        entry.live,
    )


def entries() -> list[Entry]:
    plain = [Entry(n, 100 + n, n, None, 2) for n in range(1, 4)]
    returned = Entry(4, 104, 4, None, 2)
    returned.delivery_count = 1
    expiring = Entry(5, 105, 5, 99, 2)
    classic = Entry(6, b"a body", 6, None, 2)
    later = [Entry(n, 100 + n, n, None, 2) for n in range(7, 9)]
    return [*plain, returned, expiring, classic, *later]


def test_entries_come_back_in_order_with_their_fields_objects_as_they_were() -> None:
    given = entries()
    ready = ReadyQueue(given)
    assert len(ready) == 8 and 5 in [e.msg_id for e in ready] and given[6] in ready
    assert [fields(e) for e in ready] == [fields(e) for e in given]  # twice: nothing taken
    assert [fields(e) for e in ready] == [fields(e) for e in given]
    taken = [ready.popleft() for _ in range(len(given))]
    assert [fields(e) for e in taken] == [fields(e) for e in given]
    assert taken[4] is given[4]  # an entry with a deadline is killed in place: the same one
    assert not ready and list(ready) == []


def test_long_runs_of_plain_messages_split_and_drain() -> None:
    count = 2 * PACKED_RUN_MAX + 10
    ready = ReadyQueue(Entry(n, n, 128, None, 0) for n in range(count))
    for n in range(PACKED_RUN_MAX + 5):
        assert ready.popleft().msg_id == n
    assert [e.msg_id for e in ready] == list(range(PACKED_RUN_MAX + 5, count))
    assert len(ready) == count - PACKED_RUN_MAX - 5


def test_a_quorum_queue_holds_about_24_bytes_per_ready_message_and_snapshots_them() -> None:
    machine = QueueMachine("q")
    count = 20_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(count):
            machine.apply(Meta(now_ms=n, index=1_000_000 + n), Enqueue(None, 128))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held / count < 40  # 160 B as one Entry object and two ints each
    restored = snapshot.loads(snapshot.dumps(machine))
    assert [e.message for e in restored.held_entries()] == list(range(1_000_000, 1_020_000))
    assert restored.counters() == machine.counters()
