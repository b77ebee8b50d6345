"""Publisher confirms and tx.commit-ok held for the log, released in order (no sockets)."""

from __future__ import annotations

from typing import Any

from warren.amqp import methods as m
from warren.queue import Settle
from warren.runtime.broker import Broker
from warren.runtime.channel import Channel
from warren.runtime.config import Config


class FakeLog:
    def __init__(self) -> None:
        self.next_sequence = 1
        self.durable_sequence = 0


class FakeDurability:
    def __init__(self) -> None:
        self.log = FakeLog()
        self.waiters: list[Any] = []

    def wait(self, waiter: Any) -> None:
        self.waiters.append(waiter)

    def forget(self, waiter: Any) -> None:
        self.waiters.remove(waiter)


class FakeConnection:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.vhost = broker.vhosts["/"]
        self.sent: list[Any] = []
        self.confirm_requests = 0

    def send_method(self, channel: int, method: m.Method) -> None:
        self.sent.append(method)

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def confirm_later(self, channel: Channel) -> None:
        self.confirm_requests += 1


def confirm_channel() -> tuple[Channel, FakeConnection, FakeDurability]:
    broker = Broker(Config())
    durability = FakeDurability()
    broker.durability = durability  # type: ignore[assignment]
    connection = FakeConnection(broker)
    channel = Channel(connection, 1)  # type: ignore[arg-type]
    channel.confirm = True
    return channel, connection, durability


def persistent(channel: Channel, log_sequence: int) -> None:
    channel.publish_seq += 1
    channel._hold(log_sequence)


def transient(channel: Channel) -> None:
    channel.publish_seq += 1
    channel.connection.confirm_later(channel)


def rejected(channel: Channel) -> None:
    channel.publish_seq += 1
    channel._nack_latest()


def confirms(methods: list[m.Method]) -> list[tuple[str, int, bool]]:
    return [(type(x).__name__, x.delivery_tag, x.multiple) for x in methods]  # type: ignore[attr-defined]


def test_confirms_wait_for_the_log_and_keep_publish_order() -> None:
    channel, connection, durability = confirm_channel()
    persistent(channel, 10)  # 1
    transient(channel)  # 2
    rejected(channel)  # 3
    persistent(channel, 12)  # 4
    transient(channel)  # 5
    assert channel.pending_confirms() == []  # 1 is not durable: nothing after it goes either
    assert connection.sent == []  # not even the nack
    assert durability.waiters == [channel, channel]

    durability.log.durable_sequence = 10
    assert channel.durable_reached(10) is True  # 4 still waits
    assert confirms(channel.pending_confirms()) == [("BasicAck", 2, True), ("BasicNack", 3, False)]

    durability.log.durable_sequence = 12
    assert channel.durable_reached(12) is False
    assert confirms(channel.pending_confirms()) == [("BasicAck", 5, True)]
    assert channel.pending_confirms() == []


def test_without_held_confirms_the_fast_path_acks_at_once() -> None:
    channel, connection, _durability = confirm_channel()
    transient(channel)
    transient(channel)
    assert confirms(channel.pending_confirms()) == [("BasicAck", 2, True)]
    rejected(channel)
    assert confirms(connection.sent) == [("BasicNack", 3, False)]


def test_a_record_already_durable_is_not_held() -> None:
    channel, _connection, durability = confirm_channel()
    durability.log.durable_sequence = 7
    persistent(channel, 7)
    assert durability.waiters == []
    assert confirms(channel.pending_confirms()) == [("BasicAck", 1, False)]


def test_replies_after_a_waiting_commit_ok_keep_their_order() -> None:
    channel, connection, durability = confirm_channel()
    channel.confirm = False
    channel._tx_select(m.TxSelect())
    connection.sent.clear()
    assert channel.transaction is not None
    channel.transaction.settlements.append((Settle, []))

    def settlement_that_logs(command: type, taken: list[tuple[int, Any]]) -> None:
        durability.log.next_sequence += 2  # as acks of persistent messages would

    channel._apply_settlement = settlement_that_logs  # type: ignore[method-assign]
    channel._tx_commit(m.TxCommit())
    channel.send(m.BasicQosOk())
    channel._send_frames(b"get-ok frames")
    assert connection.sent == []
    assert durability.waiters == [channel]
    assert channel.durable_reached(1) is True
    assert connection.sent == []
    assert channel.durable_reached(2) is False
    assert [x if isinstance(x, bytes) else type(x).__name__ for x in connection.sent] == [
        "TxCommitOk",
        "BasicQosOk",
        b"get-ok frames",
    ]
    channel.send(m.TxRollbackOk())
    assert type(connection.sent[-1]) is m.TxRollbackOk


def test_a_commit_that_logged_nothing_answers_at_once() -> None:
    channel, connection, durability = confirm_channel()
    channel.confirm = False
    channel._tx_select(m.TxSelect())
    channel._tx_commit(m.TxCommit())
    assert [type(x).__name__ for x in connection.sent] == ["TxSelectOk", "TxCommitOk"]
    assert durability.waiters == []
