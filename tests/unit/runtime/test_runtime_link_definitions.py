"""What a node does with another node's list of its own classic queues, sent when their
link comes up (`warren.runtime.cluster.remote`, module doc 6): it makes the queues it
misses and drops proxies of queues the other no longer has, except those whose declare
or delete it applied from the metadata log after the index the list was taken at."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from tests.unit.runtime.cluster_fixtures import cluster_node
from warren.amqp.table import encode_table
from warren.cluster.metadata import ClassicQueue, Operation, QueueDeclare, QueueDelete
from warren.runtime.cluster.calls import Definitions
from warren.runtime.cluster.metadata import logged
from warren.runtime.cluster.raft_host import EntryMeta
from warren.runtime.recovery import recover
from warren.storage.definitions import QueueDefinition

NODES = ["a", "b", "c"]


class _Node:
    """Node c of a, b, c, applying metadata entries as the log brings them."""

    def __init__(self, tmp_path: Path) -> None:
        self.cluster = cluster_node(tmp_path, "c", NODES)
        self.durability = recover(self.cluster.broker, tmp_path).durability
        self.cluster.attach(self.durability)
        self._index = itertools.count(1)
        self._number = itertools.count(1)

    def log(self, operation: Operation) -> int:
        index = next(self._index)
        data = logged(operation, "a/1", next(self._number))
        self.cluster.metadata.apply(EntryMeta(index, 1, None), data)
        return index

    def hears_from_a(self, queues: list[str], applied: int) -> None:
        listed: list[Operation] = [ClassicQueue(_definition(q), "a", False, False) for q in queues]
        self.cluster.remote._received("a", Definitions(listed, applied))

    async def close(self) -> None:
        await self.durability.close()

    def queues(self) -> set[str]:
        return {name for _vhost, name in self.cluster.broker.queues}


def _definition(name: str) -> QueueDefinition:
    return QueueDefinition("/", name, durable=False, arguments=encode_table({}))


def test_a_list_taken_before_a_delete_the_log_brought_makes_no_queue_again(
    tmp_path: Path,
) -> None:
    """Healed from a partition, a's link to c can come up after the log's delete of a's
    queue reached c through b, with a's list taken before a applied that delete."""

    async def run() -> None:
        node = _Node(tmp_path)
        declared = node.log(QueueDeclare(_definition("gone"), "a", False))
        node.log(QueueDelete("/", "gone", "a"))
        assert "gone" not in node.queues()
        node.hears_from_a(["gone"], applied=declared)
        assert "gone" not in node.queues()
        await node.close()

    asyncio.run(run())


def test_a_list_taken_before_a_declare_the_log_brought_keeps_the_queue(tmp_path: Path) -> None:
    async def run() -> None:
        node = _Node(tmp_path)
        before = node.log(QueueDeclare(_definition("old"), "a", False))
        node.log(QueueDeclare(_definition("new"), "a", False))
        node.log(QueueDeclare(_definition("newer"), "a", False))
        node.hears_from_a(["old"], applied=before)
        assert {"old", "new", "newer"} <= node.queues()
        await node.close()

    asyncio.run(run())


def test_a_list_as_new_as_the_log_makes_and_drops_queues(tmp_path: Path) -> None:
    """A restarted a lost its non-durable queues: c drops its proxies of them, and makes
    those it does not know."""

    async def run() -> None:
        node = _Node(tmp_path)
        node.log(QueueDeclare(_definition("transient"), "a", False))
        applied = node.log(QueueDeclare(_definition("durable"), "a", True))
        node.hears_from_a(["durable", "missed"], applied=applied)
        assert {"durable", "missed"} <= node.queues()
        assert "transient" not in node.queues()
        await node.close()

    asyncio.run(run())
