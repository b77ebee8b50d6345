"""The streaming reader's inbox without Spark or a broker: consumers put a read's deliveries at
a time, and a micro-batch takes exactly as many as it asks for, in arrival order, splitting a
read where the batch ends."""

from __future__ import annotations

import time

from warren.spark.message import Deliveries
from warren.spark.reader import Inbox


def read(queue: str, tags: range) -> Deliveries:
    delivered = Deliveries()
    for tag in tags:
        delivered.append(queue, tag, False, "", queue, b"\x00\x00", b"%d" % tag)
    return delivered


def test_a_batch_takes_whole_reads_then_splits_the_next():
    inbox = Inbox()
    inbox.put(0, read("a", range(1, 4)))
    inbox.put(1, Deliveries())  # a read of heartbeats only: nothing to hand out
    inbox.put(1, read("b", range(1, 6)))
    assert len(inbox) == 8
    first = inbox.take(5, wait_s=0)
    assert [(index, part.delivery_tags) for index, part in first] == [(0, [1, 2, 3]), (1, [1, 2])]
    assert len(inbox) == 3
    rest = inbox.take(10, wait_s=0)
    assert [(index, part.delivery_tags, part.bodies) for index, part in rest] == [
        (1, [3, 4, 5], [b"3", b"4", b"5"])
    ]
    assert len(inbox) == 0
    assert inbox.take(1, wait_s=0) == []


def test_a_take_with_enough_returns_once_that_many_arrived():
    inbox = Inbox()
    inbox.put(0, read("a", range(1, 4)))
    started = time.monotonic()
    taken = inbox.take(100, wait_s=30, enough=1)  # a query's first batch (reader rule 7)
    assert time.monotonic() - started < 5
    assert [part.delivery_tags for _index, part in taken] == [[1, 2, 3]]
