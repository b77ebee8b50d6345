"""A classic queue's home in a cluster (`ClusterHome`, the part its `ClassicHost` asks): the
queue's delete goes through the metadata log, its timer does nothing while that delete is on
its way, and a delete the log did not take is asked for again a little later."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from warren.model import QueueRecord
from warren.runtime.admin import typed_arguments
from warren.runtime.broker import Broker
from warren.runtime.cluster import node
from warren.runtime.cluster.node import ClusterHome
from warren.runtime.config import Config
from warren.runtime.queues.classic import ClassicHost
from warren.runtime.queues.host import QueueHost


class Log:
    """The part of `ClusterNode` a home asks: its queue's delete through the metadata log,
    which the test answers."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.applying = False
        self.deletes: list[asyncio.Future[object]] = []

    def logged_delete(self, host: QueueHost) -> asyncio.Future[object]:
        self.deletes.append(asyncio.get_running_loop().create_future())
        return self.deletes[-1]


class Homes:
    """The broker's `HostFactory`: every classic queue's host with a home in `log`."""

    def __init__(self, broker: Broker, log: Log) -> None:
        self.broker = broker
        self.log = log

    def make(self, record: QueueRecord) -> ClassicHost:
        return ClassicHost(self.broker, record, ClusterHome(cast("Any", self.log)))

    def replicated_declare(self, record: QueueRecord) -> None:
        return None


async def until(condition: Any) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached")


def test_an_expired_queue_asks_the_log_once_and_again_when_the_log_did_not_take_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(node, "RECHECK_S", 0.05)

    async def test() -> None:
        broker = Broker(Config())
        log = Log(broker)
        broker.hosts = Homes(broker, log)
        record, _ = broker.vhosts["/"].declare_queue(
            "expiring",
            owner=None,
            passive=False,
            durable=False,
            exclusive=False,
            auto_delete=False,
            arguments=typed_arguments({"x-expires": 20}),
        )
        host = broker.declare_queue(record)
        assert isinstance(host, ClassicHost)
        await until(lambda: log.deletes)
        host.on_timer()  # the timer firing while the delete is on its way asks no second one
        await asyncio.sleep(0.1)
        assert len(log.deletes) == 1 and broker.queue("/", "expiring") is host

        log.deletes[0].set_exception(TimeoutError("no leader"))  # the log did not take it
        await until(lambda: len(log.deletes) == 2)  # asked again after RECHECK_S
        assert broker.queue("/", "expiring") is host

    asyncio.run(asyncio.wait_for(test(), 10))
