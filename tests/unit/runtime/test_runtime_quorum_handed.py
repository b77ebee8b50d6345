"""`Handed` on a node without a replica of a quorum queue: what the leader sent to its
consumers, kept only while it may be sent again (`warren.runtime.cluster.quorum`)."""

from __future__ import annotations

import asyncio
import itertools
from typing import cast

from warren.amqp.content import Message
from warren.model import QueueRecord
from warren.model.policy import Policy, effective_settings
from warren.model.settings import QueueSettings
from warren.queue import Checkout, Entry
from warren.runtime.cluster.quorum import QuorumHost, QuorumNode
from warren.runtime.queues.host import QueueHost

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

    def consumer_key(self) -> tuple[str, str, int]:
        return NODE, "life-1", next(self.numbers)


class _Cluster:
    """A node that holds no replica: commands go to the leader, and never come back."""

    name = NODE
    incarnation = "life-1"
    broker = _Broker()
    remote = _Remote()

    def submit(self, group_id: str, data: bytes) -> asyncio.Future[object]:
        return asyncio.get_running_loop().create_future()


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


def test_no_ack_deliveries_from_the_leader_are_not_remembered() -> None:
    async def scenario() -> tuple[list[int], bool]:
        record = QueueRecord("handed-q", "/", True, None, False, {})
        host = QuorumHost(cast(QuorumNode, _Cluster()), record, "qq-handed", ["rabbit@a"])
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
