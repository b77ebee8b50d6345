"""Publisher confirms (`warren.runtime.confirms`) and tx.commit-ok
(`warren.runtime.transactions`) held for the log, released in order (no sockets)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from warren.amqp import methods as m
from warren.errors import SoftError
from warren.queue import Settle
from warren.runtime.broker import Broker
from warren.runtime.channel import Channel
from warren.runtime.config import Config
from warren.runtime.confirms import Confirms
from warren.runtime.stats import MessageStats
from warren.runtime.transactions import CommitWait, Reply


class FakeLog:
    def __init__(self) -> None:
        self.next_sequence = 1
        self.durable_sequence = 0
        self.unsealed_from = 1


class FakeDurability:
    def __init__(self) -> None:
        self.log = FakeLog()
        self.waiters: list[Any] = []
        self.deferred = 0  # records of settlements not appended yet

    def wait(self, waiter: Any) -> None:
        self.waiters.append(waiter)

    def forget(self, waiter: Any) -> None:
        while waiter in self.waiters:
            self.waiters.remove(waiter)

    def write_deferred(self) -> None:
        """Settlements are collected, and appended only here (as `Durability` does)."""
        self.log.next_sequence += self.deferred
        self.deferred = 0


class Publisher:
    """What a channel gives its confirms: a flush request counter and a send list."""

    def __init__(self) -> None:
        self.durability = FakeDurability()
        self.flushes = 0
        self.sent: list[m.Method] = []
        self.stats = MessageStats()
        self.confirms = Confirms(
            self.durability,  # type: ignore[arg-type]
            self.flush_later,
            self.sent.append,
            self.stats,
        )

    def flush_later(self) -> None:
        self.flushes += 1

    def persistent(self, log_sequence: int, batch_of_its_own: bool = True) -> None:
        """A publish that appended record `log_sequence`; unless told otherwise, every record
        before it was sealed into an earlier batch, so it is made durable by a sync of its own."""
        if batch_of_its_own:
            self.durability.log.unsealed_from = log_sequence
        self.confirms.published(False, None, log_sequence)

    def transient(self) -> None:
        self.confirms.published(False, None, 0)

    def rejected(self) -> None:
        self.confirms.published(True, None, 0)

    def durable(self, sequence: int) -> bool:
        """The log synced up to `sequence`; a waiter that answers False is dropped, as
        `Durability` does."""
        self.durability.log.durable_sequence = sequence
        waits = self.confirms.durable_reached(sequence)
        if not waits:
            self.durability.forget(self.confirms)
        return waits


def confirms(methods: list[m.Method]) -> list[tuple[str, int, bool]]:
    return [(type(x).__name__, x.delivery_tag, x.multiple) for x in methods]  # type: ignore[attr-defined]


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_confirms_wait_for_the_log_and_keep_publish_order() -> None:
    publisher = Publisher()
    publisher.persistent(10)  # 1
    publisher.transient()  # 2
    publisher.rejected()  # 3
    publisher.persistent(12)  # 4
    publisher.transient()  # 5
    assert publisher.confirms.pending() == []  # 1 is not durable: nothing after it goes either
    assert publisher.sent == []  # not even the nack
    assert publisher.durability.waiters == [publisher.confirms]  # once for both held
    assert publisher.confirms.unconfirmed == 5

    assert publisher.durable(10) is True  # 4 still waits
    assert confirms(publisher.confirms.pending()) == [
        ("BasicAck", 2, True),
        ("BasicNack", 3, False),
    ]
    assert publisher.durable(12) is False
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 5, True)]
    assert publisher.confirms.pending() == []
    assert publisher.stats.confirm == 5
    assert publisher.confirms.unconfirmed == 0


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_confirms_wait_on_the_log_again_once_it_let_them_go() -> None:
    publisher = Publisher()
    publisher.persistent(10)
    publisher.persistent(11)
    assert publisher.durability.waiters == [publisher.confirms]
    assert publisher.durable(11) is False  # dropped as a waiter
    assert publisher.durability.waiters == []
    publisher.persistent(12)
    assert publisher.durability.waiters == [publisher.confirms]
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 2, True)]
    assert publisher.durable(12) is False
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 3, False)]


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_a_run_of_publishes_in_one_unsealed_batch_shares_one_held_entry() -> None:
    publisher = Publisher()
    publisher.persistent(10)  # 1: the batch from 10 on is not sealed yet
    publisher.persistent(11, batch_of_its_own=False)  # 2
    publisher.persistent(12, batch_of_its_own=False)  # 3
    assert len(publisher.confirms._held) == 1
    assert publisher.durable(11) is True  # cannot happen with one batch, and must not ack 3
    assert publisher.confirms.pending() == []
    assert publisher.durable(12) is False
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 3, True)]


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_a_run_split_by_a_seal_or_another_publish_keeps_its_own_entries() -> None:
    publisher = Publisher()
    publisher.persistent(10)  # 1
    publisher.persistent(11)  # 2: 10 was sealed meanwhile, 11 starts the next batch
    publisher.transient()  # 3
    publisher.persistent(12, batch_of_its_own=False)  # 4: not right after 2's tag
    assert len(publisher.confirms._held) == 3
    assert publisher.durable(10) is True
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 1, False)]
    assert publisher.durable(11) is True
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 3, True)]
    assert publisher.durable(12) is False
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 4, False)]


def test_without_held_confirms_the_fast_path_acks_at_once() -> None:
    publisher = Publisher()
    publisher.transient()
    publisher.transient()
    assert publisher.flushes == 2
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 2, True)]
    publisher.transient()
    publisher.rejected()  # nothing held: 3's ack and 4's nack go at once, no flush needed
    assert confirms(publisher.sent) == [("BasicAck", 3, False), ("BasicNack", 4, False)]
    assert publisher.confirms.pending() == []


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_a_record_already_durable_is_not_held() -> None:
    publisher = Publisher()
    publisher.durability.log.durable_sequence = 7
    publisher.persistent(7)
    assert publisher.durability.waiters == []
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 1, False)]


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_a_replicated_publish_waits_for_every_quorum_queue() -> None:
    async def scenario() -> None:
        publisher = Publisher()
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        publisher.confirms.published(False, [first, second], 0)  # 1: two queues elsewhere
        publisher.transient()  # 2
        assert publisher.confirms.pending() == []
        first.set_result(True)
        await asyncio.sleep(0)
        assert publisher.confirms.pending() == []  # the second queue has not committed yet
        second.set_result(True)
        await asyncio.sleep(0)
        assert publisher.flushes >= 2
        assert confirms(publisher.confirms.pending()) == [("BasicAck", 2, True)]

    asyncio.run(scenario())


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
@pytest.mark.parametrize("outcome", ["refused", "failed", "cancelled"])
def test_a_replicated_publish_any_queue_refused_is_nacked_in_order(outcome: str) -> None:
    async def scenario() -> None:
        publisher = Publisher()
        loop = asyncio.get_running_loop()
        refused, committed = loop.create_future(), loop.create_future()
        publisher.transient()  # 1
        publisher.confirms.published(False, [refused, committed], 0)  # 2
        publisher.transient()  # 3
        committed.set_result(True)
        if outcome == "refused":
            refused.set_result(False)
        elif outcome == "failed":
            refused.set_exception(TimeoutError("no leader in time"))
        else:
            refused.cancel()
        await asyncio.sleep(0)
        assert confirms(publisher.confirms.pending()) == [
            ("BasicAck", 1, False),
            ("BasicNack", 2, False),
            ("BasicAck", 3, False),
        ]

    asyncio.run(scenario())


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_a_replicated_publish_that_also_logged_waits_for_both() -> None:
    async def scenario() -> None:
        publisher = Publisher()
        committed = asyncio.get_running_loop().create_future()
        publisher.confirms.published(False, [committed], 4)  # a queue elsewhere, and one here
        committed.set_result(True)
        await asyncio.sleep(0)
        assert publisher.confirms.pending() == []  # committed, but the log is not durable
        assert publisher.durable(4) is False
        assert confirms(publisher.confirms.pending()) == [("BasicAck", 1, False)]

    asyncio.run(scenario())


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_after_close_a_late_commit_asks_for_no_flush() -> None:
    async def scenario() -> None:
        publisher = Publisher()
        committed = asyncio.get_running_loop().create_future()
        publisher.persistent(3)
        publisher.confirms.published(False, [committed], 0)
        flushes = publisher.flushes
        publisher.confirms.close()
        assert publisher.durability.waiters == []
        committed.set_result(True)
        await asyncio.sleep(0)
        assert publisher.confirms.durable_reached(3) is False
        assert publisher.flushes == flushes  # the channel number may belong to another channel

    asyncio.run(scenario())


QUORUM_A, QUORUM_B = object(), object()  # two quorum queues' hosts, as keys


def quorum(publisher: Publisher, *hosts: object, refused: bool = False, log: int = 0) -> int:
    """A publish routed to quorum queues `hosts` (a channel's `expect` calls); its tag."""
    for host in hosts:
        publisher.confirms.expect(host)
    publisher.confirms.published(refused, None, log)
    return publisher.confirms.publish_seq


def test_quorum_publishes_are_released_by_one_call_per_batch_as_one_ack() -> None:
    publisher = Publisher()
    for _ in range(5):
        quorum(publisher, QUORUM_A)
    assert publisher.confirms.pending() == []
    publisher.confirms.replicated(QUORUM_A, 3, None)  # the first batch: 1..3
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 3, True)]
    publisher.confirms.replicated(QUORUM_A, 5, None)
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 5, True)]
    assert publisher.confirms.unconfirmed == 0
    assert publisher.stats.confirm == 5


def test_a_publish_to_two_quorum_queues_waits_for_both() -> None:
    publisher = Publisher()
    quorum(publisher, QUORUM_A)  # 1
    quorum(publisher, QUORUM_A, QUORUM_B)  # 2: routed to both
    quorum(publisher, QUORUM_B)  # 3
    publisher.transient()  # 4
    publisher.confirms.replicated(QUORUM_B, 3, None)
    assert publisher.confirms.pending() == []  # A owes 1 and 2
    publisher.confirms.replicated(QUORUM_A, 1, None)
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 1, False)]
    publisher.confirms.replicated(QUORUM_A, 2, None)
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 4, True)]


def test_a_quorum_refusal_is_nacked_after_what_came_before() -> None:
    publisher = Publisher()
    quorum(publisher, QUORUM_A)  # 1
    quorum(publisher, QUORUM_A, QUORUM_B)  # 2: both refuse it
    quorum(publisher, QUORUM_B)  # 3
    publisher.rejected()  # 4: a classic queue said no at once, while 1..3 wait
    assert publisher.sent == []  # not before 1..3
    publisher.confirms.replicated(QUORUM_B, 3, [2])
    assert publisher.confirms.pending() == []
    publisher.confirms.replicated(QUORUM_A, 2, [2])
    assert confirms(publisher.confirms.pending()) == [
        ("BasicAck", 1, False),
        ("BasicNack", 2, False),  # once, though two queues refused it
        ("BasicAck", 3, False),
        ("BasicNack", 4, False),
    ]
    assert publisher.confirms.unconfirmed == 0


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_a_quorum_publish_that_also_logged_waits_for_the_log() -> None:
    publisher = Publisher()
    quorum(publisher, QUORUM_A, log=4)  # a quorum queue and a durable classic queue
    publisher.confirms.replicated(QUORUM_A, 1, None)
    assert publisher.confirms.pending() == []  # committed, but the log is not durable
    assert publisher.durable(4) is False
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 1, False)]


@pytest.mark.interpreted  # compiled, Confirms takes only the real Log
def test_a_logged_publish_waits_behind_a_quorum_publish() -> None:
    publisher = Publisher()
    quorum(publisher, QUORUM_A)  # 1
    publisher.persistent(2)  # 2
    assert publisher.durable(2) is False
    assert publisher.confirms.pending() == []  # 2 is durable, 1 not committed
    publisher.confirms.replicated(QUORUM_A, 1, None)
    assert confirms(publisher.confirms.pending()) == [("BasicAck", 2, True)]


def test_after_close_a_quorum_answer_asks_for_no_flush() -> None:
    publisher = Publisher()
    quorum(publisher, QUORUM_A)
    flushes = publisher.flushes
    publisher.confirms.close()
    publisher.confirms.replicated(QUORUM_A, 1, None)
    assert publisher.flushes == flushes  # the channel number may belong to another channel


@pytest.mark.interpreted  # compiled, the channel takes only the real Durability
def test_confirm_mode_and_tx_mode_exclude_each_other() -> None:
    channel, _connection, _durability = transaction_channel()
    channel._confirm_select(m.ConfirmSelect())
    assert channel.confirms is not None
    with pytest.raises(SoftError, match="cannot switch from confirm to tx mode"):
        channel._tx_select(m.TxSelect())
    channel, _connection, _durability = transaction_channel()
    channel._tx_select(m.TxSelect())
    with pytest.raises(SoftError, match="cannot switch from tx to confirm mode"):
        channel._confirm_select(m.ConfirmSelect())


class FakeConnection:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.vhost = broker.vhosts["/"]
        self.sent: list[Any] = []

    def send_method(self, channel: int, method: m.Method) -> None:
        self.sent.append(method)

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def confirm_later(self, channel: Channel) -> None:
        pass


def transaction_channel() -> tuple[Channel, FakeConnection, FakeDurability]:
    broker = Broker(Config())
    durability = FakeDurability()
    broker.durability = durability  # type: ignore[assignment]
    connection = FakeConnection(broker)
    channel = Channel(connection, 1)  # type: ignore[arg-type]
    return channel, connection, durability


@pytest.mark.interpreted  # replaces a method of the channel, compiled in the release build
def test_replies_after_a_waiting_commit_ok_keep_their_order() -> None:
    channel, connection, durability = transaction_channel()
    channel._tx_select(m.TxSelect())
    connection.sent.clear()
    assert channel.transaction is not None
    channel.transaction.settlements.append((Settle, []))

    def settlement_that_logs(command: type, taken: list[tuple[int, Any]]) -> None:
        durability.deferred += 2  # as acks of persistent messages would, written later

    channel._apply_settlement = settlement_that_logs  # type: ignore[method-assign]
    channel._tx_commit(m.TxCommit())
    channel.send(m.BasicQosOk())
    channel._send_frames(b"get-ok frames")
    assert connection.sent == []
    [wait] = durability.waiters
    assert wait.durable_reached(1) is True
    assert connection.sent == []
    assert wait.durable_reached(2) is False
    assert [x if isinstance(x, bytes) else type(x).__name__ for x in connection.sent] == [
        "TxCommitOk",
        "BasicQosOk",
        b"get-ok frames",
    ]
    channel.send(m.TxRollbackOk())
    assert type(connection.sent[-1]) is m.TxRollbackOk


@pytest.mark.interpreted  # compiled, the channel takes only the real Durability
def test_a_commit_that_logged_nothing_answers_at_once() -> None:
    channel, connection, durability = transaction_channel()
    channel._tx_select(m.TxSelect())
    channel._tx_commit(m.TxCommit())
    assert [type(x).__name__ for x in connection.sent] == ["TxSelectOk", "TxCommitOk"]
    assert durability.waiters == []


def test_commit_oks_wait_each_for_its_own_sequence_and_replies_keep_order() -> None:
    durability = FakeDurability()
    written: list[Reply] = []
    wait = CommitWait(durability, written.append)  # type: ignore[arg-type]
    wait.commit_ok(3)
    wait.behind(m.BasicQosOk())
    wait.commit_ok(5)  # a second commit while the first one waits
    wait.behind(b"frames")
    assert wait.waiting
    assert wait.durable_reached(4) is True
    assert [type(x).__name__ for x in written] == ["TxCommitOk", "BasicQosOk"]
    assert wait.durable_reached(5) is False
    assert written[2:] == [m.TxCommitOk(), b"frames"]
    assert not wait.waiting


@pytest.mark.interpreted  # compiled, the channel takes only the real Durability
def test_a_rollback_gives_the_settled_tags_back_in_tag_order() -> None:
    channel, connection, _durability = transaction_channel()
    channel._tx_select(m.TxSelect())
    assert channel.transaction is not None
    channel.unacked = {2: "b"}  # type: ignore[dict-item]
    channel.transaction.settlements.append((Settle, [(3, "c")]))
    channel.transaction.settlements.append((Settle, [(1, "a")]))
    channel._tx_rollback(m.TxRollback())
    assert list(channel.unacked) == [1, 2, 3]
    assert channel.transaction is not None and channel.transaction.settlements == []
    assert type(connection.sent[-1]) is m.TxRollbackOk


@pytest.mark.interpreted  # replaces a method of the channel, compiled in the release build
def test_closing_while_a_commit_ok_waits_forgets_it() -> None:
    channel, _connection, durability = transaction_channel()
    channel._tx_select(m.TxSelect())
    assert channel.transaction is not None
    channel.transaction.settlements.append((Settle, []))

    def settlement_that_logs(command: type, taken: list[tuple[int, Any]]) -> None:
        durability.log.next_sequence += 1

    channel._apply_settlement = settlement_that_logs  # type: ignore[method-assign]
    channel._tx_commit(m.TxCommit())
    assert len(durability.waiters) == 1
    channel.close()
    assert durability.waiters == []
