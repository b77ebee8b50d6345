"""A quorum queue's host on a node without a replica (`warren.runtime.cluster.quorum`),
against a fake cluster side: settles that must reach the leader, and `Handed`."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Hashable
from typing import cast

import pytest

from warren.amqp.content import Message
from warren.cluster import queue_entries
from warren.model import QueueRecord
from warren.model.policy import Policy, effective_settings
from warren.model.settings import QueueSettings
from warren.queue import Cancel, Checkout, Command, Enqueue, Entry, Sequenced, Settle
from warren.runtime.cluster import quorum
from warren.runtime.cluster.peers import PeerUnavailable
from warren.runtime.cluster.quorum import QuorumHost, QuorumNode
from warren.runtime.cluster.raft_host import EntryMeta
from warren.runtime.queues.host import REPLICATING, QueueHost

NODE = "rabbit@b"


class _Broker:
    def policies_of(self, record: QueueRecord) -> tuple[Policy | None, Policy | None]:
        return None, None

    def settings_of(
        self, record: QueueRecord, user: Policy | None, operator: Policy | None
    ) -> QueueSettings:
        return effective_settings(record, user, operator, 100)


class _Remote:
    numbers = itertools.count(1)
    sent = 0  # publishes forwarded to another node's or worker's leader

    def consumer_key(self) -> tuple[str, str, int]:
        return NODE, "life-1", next(self.numbers)


class _Cluster:
    """A node that holds no replica: commands go to the leader, and never come back, or
    (`failing`) fail at once, as they do when no leader answers in time."""

    name = NODE
    incarnation = "life-1"
    broker = _Broker()
    remote = _Remote()

    def __init__(self) -> None:
        self.failing = 0
        self.sent: list[Command] = []

    def submit(self, group_id: str, data: bytes) -> asyncio.Future[object]:
        batch = queue_entries.decode(data)
        self.sent.extend(numbered.command for numbered in batch if type(numbered) is Sequenced)
        future = asyncio.get_running_loop().create_future()
        if self.failing:
            self.failing -= 1
            future.set_exception(PeerUnavailable("rabbit@a", "no answer in time"))
        else:
            future.set_result([None] * len(batch))
        return future

    def forget_queue(self, host: QuorumHost) -> None:
        pass


class _Channel:
    def __init__(self) -> None:
        self.got: list[int] = []

    def credit(self) -> int | None:
        return None

    def blocked(self) -> bool:
        return False

    def deliver(self, consumer_tag: str, entry: Entry, host: QueueHost) -> None:
        self.got.append(entry.msg_id)

    def queue_deleted(self, consumer_tag: str) -> None:
        raise AssertionError("not cancelled")


def _host() -> tuple[QuorumHost, _Cluster]:
    """A replica-less host of a queue whose one replica is on rabbit@a."""
    cluster = _Cluster()
    record = QueueRecord("host-q", "/", True, None, False, {})
    return QuorumHost(cast(QuorumNode, cluster), record, "qq-host", ["rabbit@a"]), cluster


def test_no_ack_deliveries_from_the_leader_are_not_remembered() -> None:
    async def scenario() -> tuple[list[int], bool]:
        host, _cluster = _host()
        channel = _Channel()
        host.subscribe(channel, "ctag", Checkout("ctag", "channel", 10, no_ack=True), limited=False)
        (key,) = host._consumers
        for msg_id in range(1, 1001):
            entry = Entry(msg_id, Message("", "handed-q", b"", b"body"), 4, None, 0)
            host.delivered(key, entry, msg_id, "rabbit@a")
        return channel.got, bool(host.handed)

    got, remembered = asyncio.run(scenario())
    assert got == list(range(1, 1001))
    assert not remembered  # nothing settles a no-ack delivery: it would stay for good


def test_a_settle_that_reached_no_leader_is_sent_again_until_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quorum, "RESEND_DELAY_S", 0.01)

    async def scenario() -> list[Command]:
        host, cluster = _host()
        cluster.failing = 2  # the ack, and its first copy, find no leader
        host.settle(Settle([7]))
        for _ in range(50):
            await asyncio.sleep(0.01)
        return cluster.sent

    sent = asyncio.run(scenario())
    assert sent == [Settle([7])] * 3  # applied the third time, then no more


def test_a_stopped_host_sends_nothing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quorum, "RESEND_DELAY_S", 0.01)

    async def scenario() -> list[Command]:
        host, cluster = _host()
        cluster.failing = 1_000
        host.settle(Settle([7]))
        host.stop()  # the queue deleted, or the node stopping
        for _ in range(20):
            await asyncio.sleep(0.01)
        return cluster.sent

    assert asyncio.run(scenario()) == [Settle([7])]


def test_a_consumer_removed_with_requeue_returns_what_it_holds() -> None:
    # basic.cancel leaves the consumer's messages checked out to it, as rabbit_fifo's
    # cancel does (its channel acks or returns them); `requeue` (the consumer's process is
    # gone) returns them with the cancel, as rabbit_fifo's down does.
    async def scenario() -> tuple[list[Hashable], list[Command]]:
        host, cluster = _host()
        for tag in ("cancelled", "gone"):
            host.subscribe(_Channel(), tag, Checkout(tag, "channel", 10), limited=False)
        keys = list(host._consumers)
        host.unsubscribe("cancelled")
        host.unsubscribe("gone", requeue=True)
        await asyncio.sleep(0)  # a turn's commands are proposed once it ends, as one entry
        return keys, cluster.sent[2:]

    (cancelled, gone), sent = asyncio.run(scenario())
    assert sent == [Cancel(cancelled, requeue=False), Cancel(gone, requeue=True)]


class _Waiting(_Cluster):
    """Submits that end when the test says (`answered`)."""

    def __init__(self) -> None:
        super().__init__()
        self.submitted: list[asyncio.Future[object]] = []

    def submit(self, group_id: str, data: bytes) -> asyncio.Future[object]:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.submitted.append(future)
        return future


class _Publisher:
    """A channel as a quorum host tells it of its publishes (`Publisher`)."""

    def __init__(self) -> None:
        self.told: list[tuple[int, int, list[int] | None]] = []

    def replicated(self, host: QueueHost, upto: int, count: int, refused: list[int] | None) -> None:
        self.told.append((upto, count, refused))


def _publish(host: QuorumHost, publisher: _Publisher, tag: int) -> None:
    enqueue = Enqueue(Message("", "host-q", b"", b"body"), 4)
    assert host.publish(enqueue, publisher, tag) is REPLICATING


def test_publishes_are_told_once_per_batch_and_batches_in_the_order_sent() -> None:
    async def scenario() -> list[list[tuple[int, int, list[int] | None]]]:
        cluster = _Waiting()
        record = QueueRecord("host-q", "/", True, None, False, {})
        host = QuorumHost(cast(QuorumNode, cluster), record, "qq-host", ["rabbit@a"])
        first, second = _Publisher(), _Publisher()
        for tag in (1, 2, 3):  # one turn: one batch, both channels in it
            _publish(host, first, tag)
            _publish(host, second, tag)
        await asyncio.sleep(0)
        _publish(host, first, 4)  # the next turn: a second batch
        await asyncio.sleep(0)
        one, two = cluster.submitted
        seen = []
        two.set_result([True])  # the second batch ends first: it waits for the first
        await asyncio.sleep(0)
        seen.append(list(first.told))
        one.set_result([True, True, False, True, True, True])  # first's 2 refused
        await asyncio.sleep(0)
        seen.extend([first.told, second.told])
        return seen

    waited, first, second = asyncio.run(scenario())
    assert waited == []
    assert first == [(3, 3, [2]), (4, 1, None)]
    assert second == [(3, 3, None)]


def test_publishes_of_a_batch_that_failed_are_all_refused() -> None:
    async def scenario() -> list[tuple[int, int, list[int] | None]]:
        host, cluster = _host()
        cluster.failing = 1
        publisher = _Publisher()
        _publish(host, publisher, 1)
        _publish(host, publisher, 2)
        for _ in range(3):
            await asyncio.sleep(0)
        return publisher.told

    assert asyncio.run(scenario()) == [(2, 2, [1, 2])]


class _Cancelled(_Channel):
    def __init__(self) -> None:
        super().__init__()
        self.cancelled: list[str] = []

    def queue_deleted(self, consumer_tag: str) -> None:
        self.cancelled.append(consumer_tag)


def test_a_consumer_the_leader_cancels_leaves_nothing_handed() -> None:
    # The leader cancels a consumer of a node it took for gone; the node's replica applies
    # the cancel and tells the channel. What was handed to that consumer is forgotten with
    # it (no settle of it will come), as when the node has no replica, and so is its
    # channel's key (the channel forgets the consumer: no basic.cancel of it will come).
    async def scenario() -> tuple[list[str], bool]:
        host, _cluster = _host()
        channel = _Cancelled()
        host.subscribe(channel, "ctag", Checkout("ctag", "channel", 10), limited=False)
        (key,) = host._consumers
        assert host.handed.fresh(key, 7)
        reap = queue_entries.encode(("rabbit@a", "life-9", 1), [(1, Cancel(key, requeue=True))])
        host.apply_entry(EntryMeta(index=5, term=1, time_ms=0), reap)
        return channel.cancelled, bool(host.handed) or bool(host._wire_keys)

    cancelled, remembered = asyncio.run(scenario())
    assert cancelled == ["ctag"]
    assert not remembered
