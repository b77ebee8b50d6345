"""The durability driver on a real data directory, without sockets: what is logged, group
commit, what waiters hear, a failed sync, and a restart on the same directory."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from warren.amqp.content import BasicProperties, Message, encode_properties
from warren.queue import Configure, Enqueue, Get, Got, Purge, Settle
from warren.runtime.admin import typed_arguments
from warren.runtime.broker import Broker
from warren.runtime.config import Config
from warren.runtime.durability import Durability
from warren.runtime.queues.classic import ClassicHost
from warren.runtime.queues.host import ACCEPTED
from warren.runtime.queues.paging import PRESSURE_RESIDENT_MESSAGES, PageSlot
from warren.runtime.recovery import recover
from warren.storage.log import LogFailed
from warren.storage.pages import PageRef

PERSISTENT = encode_properties(BasicProperties(delivery_mode=2))
TRANSIENT = encode_properties(BasicProperties(delivery_mode=1))


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


class Node:
    """A broker with its durable state opened on `data_dir`, as the server builds it."""

    def __init__(self, data_dir: Path, **config: Any) -> None:
        self.broker = Broker(Config(data_dir=data_dir, **config))
        self.failures = 0
        segment_max_bytes = self.broker.config.log_segment_max_bytes
        recovered = recover(self.broker, data_dir, self._failed, segment_max_bytes)
        recovered.carry_out()
        self.durability: Durability = recovered.durability

    def _failed(self) -> None:
        self.failures += 1

    def declare(self, name: str, durable: bool = True, **arguments: Any) -> ClassicHost:
        record, created = self.broker.vhosts["/"].declare_queue(
            name,
            owner=None,
            passive=False,
            durable=durable,
            exclusive=False,
            auto_delete=False,
            arguments=typed_arguments(arguments),
        )
        assert created
        host = self.broker.declare_queue(record)
        assert isinstance(host, ClassicHost)
        return host

    def host(self, name: str) -> ClassicHost:
        host = self.broker.queue("/", name)
        assert isinstance(host, ClassicHost)
        return host

    @property
    def records(self) -> int:
        return self.durability.log.next_sequence - 1

    async def synced(self) -> None:
        """Until everything appended so far is durable."""
        for _ in range(1000):
            if self.durability.caught_up:
                return
            await asyncio.sleep(0.001)
        raise AssertionError("the log was not synced")


def publish(host: ClassicHost, body: bytes, properties: bytes = PERSISTENT) -> int:
    """As a channel publishes; the message's id."""
    msg_id = host.machine.next_msg_id
    assert host.publish(Enqueue(Message("", host.name, properties, body), len(body))) is ACCEPTED
    return msg_id


def test_only_persistent_messages_in_durable_queues_are_logged(tmp_path: Path) -> None:
    async def test() -> None:
        node = Node(tmp_path)
        durable, transient = node.declare("durable"), node.declare("transient", durable=False)
        before = node.records
        publish(durable, b"t", TRANSIENT)
        publish(transient, b"p", PERSISTENT)
        assert node.records == before
        publish(durable, b"p", PERSISTENT)
        assert node.records == before + 1
        await node.durability.close()

    run(test)


def test_one_sync_per_loop_turn_and_waiters_hear_the_durable_sequence(tmp_path: Path) -> None:
    heard: list[int] = []

    class Waiter:
        def durable_reached(self, durable_sequence: int) -> bool:
            heard.append(durable_sequence)
            return durable_sequence < last

    async def test() -> None:
        nonlocal last
        node = Node(tmp_path)
        host = node.declare("q")
        await node.synced()
        syncs = node.durability.syncs
        for index in range(5):
            publish(host, b"m%d" % index)
        last = node.records
        node.durability.wait(Waiter())
        await node.synced()
        assert node.durability.syncs == syncs + 1  # five appends, one group commit
        assert heard == [last]
        await node.durability.close()

    last = 0
    run(test)


def test_first_deliveries_are_one_record_per_queue_per_batch(tmp_path: Path) -> None:
    async def test() -> None:
        node = Node(tmp_path)
        host = node.declare("q")
        for index in range(4):
            publish(host, b"m%d" % index)
        await node.synced()
        before = node.records
        got = [host.execute(Get(no_ack=False)) for _ in range(3)]
        assert all(isinstance(reply, Got) for reply in got)
        await node.synced()
        assert node.records == before + 1
        await node.durability.close()

    run(test)


def test_a_restart_restores_messages_with_ids_and_delivery_marks(tmp_path: Path) -> None:
    async def first() -> None:
        node = Node(tmp_path)
        host = node.declare("q")
        ids = [publish(host, b"m%d" % index) for index in range(3)]
        publish(host, b"not logged", TRANSIENT)
        reply = host.execute(Get(no_ack=False))
        assert isinstance(reply, Got) and reply.entry.msg_id == ids[0]
        host.execute(Settle([ids[0]]))
        reply = host.execute(Get(no_ack=False))  # delivered, never acked
        assert isinstance(reply, Got)
        await node.durability.close()

    async def second() -> None:
        node = Node(tmp_path)
        host = node.host("q")
        found = []
        while isinstance(reply := host.execute(Get(no_ack=True)), Got):
            found.append((reply.entry.msg_id, reply.entry.message.body, reply.entry.redelivered))
        assert found == [(2, b"m1", True), (3, b"m2", False)]
        assert publish(host, b"new") == 4  # after the highest id recovered
        await node.durability.close()

    run(first)
    run(second)


def test_what_expired_while_down_is_dead_lettered_when_recovery_is_carried_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`recover` holds the dead-lettering of what expired while the node was down, so a
    node of several workers (or in a cluster) carries it out once it knows every queue."""
    dlx = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}

    async def first() -> None:
        node = Node(tmp_path)
        node.declare("dead")
        publish(node.declare("expiring", **dlx, **{"x-message-ttl": 60_000}), b"expired")
        await node.synced()
        await node.durability.close()

    async def second() -> None:
        broker = Broker(Config(data_dir=tmp_path))
        recovered = recover(broker, tmp_path)
        dead, expiring = broker.queue("/", "dead"), broker.queue("/", "expiring")
        assert dead is not None and expiring is not None
        assert (dead.machine.ready_count, expiring.machine.ready_count) == (0, 0)
        recovered.carry_out()
        reply = dead.execute(Get(no_ack=True))
        assert isinstance(reply, Got) and reply.entry.message.body == b"expired"
        await recovered.durability.close()

    run(first)
    later = time.time() + 120  # the node was down for two minutes
    monkeypatch.setattr(time, "time", lambda: later)  # the clock queues read (compiled too)
    run(second)


@pytest.mark.interpreted  # compiled, the Log's methods cannot be replaced
def test_a_failed_sync_stops_the_node(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def test() -> None:
        node = Node(tmp_path)
        host = node.declare("q")
        await node.synced()

        def broken(batch: object) -> int:
            raise LogFailed("disk on fire")

        node.durability.log.sync_batch = broken  # type: ignore[method-assign]
        publish(host, b"lost")
        for _ in range(1000):
            if node.failures:
                break
            await asyncio.sleep(0.001)
        assert (node.failures, node.durability.failed) == (1, True)
        await node.durability.close()

    with caplog.at_level(logging.CRITICAL, logger="warren.durability"):
        run(test)
    assert any(
        "disk on fire" in r.getMessage() for r in caplog.records if r.levelname == "CRITICAL"
    )


def paged_out(host: ClassicHost) -> int:
    """How many of the queue's ready messages have their body in the log only."""
    return sum(
        1
        for level in host.machine._levels
        for entry in (*level.ready, *level.returned)
        if entry.live and isinstance(entry.message, PageSlot) and entry.message.message is None
    )


def test_acks_of_a_loop_turn_are_one_settled_record_per_queue_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    async def first() -> None:
        node = Node(tmp_path)
        host = node.declare("q")
        for index in range(6):
            publish(host, b"m%d" % index)
        taken = []
        for _ in range(6):
            reply = host.execute(Get(no_ack=False))
            assert isinstance(reply, Got)
            taken.append(reply.entry.msg_id)
        await node.synced()
        before = node.records
        for msg_id in taken[:4]:  # one basic.ack each, in one loop turn
            host.execute(Settle([msg_id]))
        assert node.records == before  # collected until the batch is sealed
        await node.synced()
        assert node.records == before + 1  # one Settled record for the four
        await node.durability.close()

    async def second() -> None:
        node = Node(tmp_path)
        host = node.host("q")
        bodies = []
        while isinstance(reply := host.execute(Get(no_ack=True)), Got):
            assert reply.entry.redelivered
            bodies.append(reply.entry.message.body)
        assert bodies == [b"m4", b"m5"]
        await node.durability.close()

    run(first)
    run(second)


def test_a_long_queue_keeps_its_tail_in_the_log_and_hands_out_every_body(
    tmp_path: Path,
) -> None:
    async def test() -> None:
        node = Node(tmp_path, queue_resident_messages_max=10)
        host = node.declare("q")
        bodies = [b"body %d " % index * (index % 5 + 1) for index in range(40)]
        for body in bodies[:30]:
            publish(host, body)
        publish(host, b"transient stays in memory", TRANSIENT)
        assert paged_out(host) == 20  # at once: their records wait in the log's buffer
        assert node.durability.log.durable_sequence == 0
        got = []
        for _ in range(15):  # the head, then bodies read back from the log's buffer
            reply = host.execute(Get(no_ack=True))
            assert isinstance(reply, Got)
            got.append(reply.entry.message.body)
        await node.synced()
        assert paged_out(host) == 15
        for body in bodies[30:]:  # the queue is still long: these go to the log too
            publish(host, body)
        await node.synced()
        while isinstance(reply := host.execute(Get(no_ack=False)), Got):
            got.append(reply.entry.message.body)
            host.execute(Settle([reply.entry.msg_id]))
        assert got == [*bodies[:30], b"transient stays in memory", *bodies[30:]]
        await node.durability.close()

    run(test)


def test_long_queues_read_back_in_runs_across_segments_and_settled_holes(tmp_path: Path) -> None:
    """Two long queues published side by side fill several log segments; one is drained
    (the other's records, never asked for, are holes in every block read), then the other,
    after a restart: every body comes back, in order, read back a block at a time."""
    segment_max_bytes = 8192
    bodies = {
        name: [b"%s %d " % (name.encode(), i) * (i % 4 + 1) for i in range(300)] for name in "ab"
    }

    async def first() -> None:
        node = Node(
            tmp_path, queue_resident_messages_max=5, log_segment_max_bytes=segment_max_bytes
        )
        hosts = {name: node.declare(name) for name in "ab"}
        for index in range(300):
            for name, host in hosts.items():
                publish(host, bodies[name][index])
        await node.synced()
        assert len(node.durability.log.segments()) > 5
        got = []
        while isinstance(reply := hosts["a"].execute(Get(no_ack=False)), Got):
            got.append(reply.entry.message.body)
            hosts["a"].execute(Settle([reply.entry.msg_id]))
        assert got == bodies["a"]
        await node.durability.close()

    async def second() -> None:
        node = Node(
            tmp_path, queue_resident_messages_max=5, log_segment_max_bytes=segment_max_bytes
        )
        host = node.host("b")
        assert paged_out(host) == 300
        got = []
        while isinstance(reply := host.execute(Get(no_ack=True)), Got):
            got.append(reply.entry.message.body)
        assert got == bodies["b"]
        await node.durability.close()

    run(first)
    run(second)


def test_recovered_messages_come_back_without_bodies_and_read_them_when_handed_out(
    tmp_path: Path,
) -> None:
    async def first() -> None:
        node = Node(tmp_path)
        host = node.declare("q")
        for index in range(5):
            publish(host, b"m%d" % index)
        await node.durability.close()

    async def second() -> None:
        node = Node(tmp_path)
        host = node.host("q")
        assert paged_out(host) == 5
        reply = host.execute(Get(no_ack=True))
        assert isinstance(reply, Got) and reply.entry.message.body == b"m0"
        assert paged_out(host) == 4
        await node.durability.close()

    run(first)
    run(second)


def scratch_paged(host: ClassicHost) -> int:
    return sum(1 for entry in host.machine.ready_entries() if isinstance(entry.message, PageRef))


def test_only_queues_that_keep_a_copy_of_a_message_follow_its_drop(tmp_path: Path) -> None:
    """A transient queue asks its machine for no `Dropped` effects (nothing to free when a
    message goes); a durable queue's journal and a paged queue's scratch pages need them."""

    async def test() -> None:
        node = Node(tmp_path)
        durable, transient = node.declare("durable"), node.declare("transient", durable=False)
        assert durable.meta().drops_followed
        assert not transient.meta().drops_followed
        transient.scratch_paged = True
        assert transient.meta().drops_followed
        await node.durability.close()

    run(test)


def test_under_memory_pressure_any_queue_pages_out_and_frees_every_page(tmp_path: Path) -> None:
    async def test() -> None:
        node = Node(tmp_path)
        node.broker.memory_pressure = True
        pages = node.durability.pages
        host = node.declare("transient", durable=False)
        bodies = [b"m%03d" % index for index in range(PRESSURE_RESIDENT_MESSAGES + 100)]
        for body in bodies:
            publish(host, body, TRANSIENT)
        assert scratch_paged(host) == pages.live_pages == 100
        got = []
        while isinstance(reply := host.execute(Get(no_ack=True)), Got):
            got.append(reply.entry.message.body)
        assert got == bodies and pages.live_pages == 0
        for body in bodies:  # purged, dropped over a new length limit, deleted with the queue
            publish(host, body, TRANSIENT)
        host.execute(Purge())
        assert pages.live_pages == 0
        for body in bodies:
            publish(host, body, TRANSIENT)
        host.execute(Configure(replace(host.machine.settings, max_length=10)))
        assert pages.live_pages == scratch_paged(host) == 10  # the newest ten stay, paged
        for body in bodies:
            publish(host, body, TRANSIENT)
        node.broker.delete_queue(node.broker.vhosts["/"], "transient")
        assert pages.live_pages == 0
        await node.durability.close()

    run(test)
