"""A three-node cluster: replicated definitions, quorum queues across nodes, and faults.

Every test runs against real `warren` processes (`LocalCluster`); faults are SIGKILL and a
partition made by cutting the TCP proxies between nodes. The rule checked under faults is
the issue's: every confirmed message is consumed at least once, intact, and the first
arrivals keep the publisher's order."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from operator import methodcaller

import aiormq
import pika
import pika.exceptions
import pytest
from pamqp.commands import Basic
from pika.adapters.blocking_connection import BlockingChannel

from tests.cluster.conftest import (
    AVAILABLE_WITHIN_S,
    NAMES,
    QUORUM,
    connect,
    declare,
    drain,
    publish,
    revived,
    until,
)
from tests.integration import quorum_cancel_scenario
from warren.testing.cluster import LocalCluster

TOTAL = 800  # messages the publisher of the leader-kill test confirms


def test_definitions_reach_every_node(cluster: LocalCluster, name: str) -> None:
    connection = connect(cluster, "warren-a")
    channel = connection.channel()
    channel.exchange_declare(f"{name}.x", "topic", durable=True)
    channel.queue_declare(name, durable=True, arguments=QUORUM)
    channel.queue_bind(name, f"{name}.x", "orders.#")
    connection.close()
    deadline = time.monotonic() + 5
    for node in NAMES[1:]:
        while True:
            try:
                info = cluster.queue(node, name)
                bindings = cluster.api(node, f"/api/queues/%2F/{name}/bindings")
                break
            except OSError:
                assert time.monotonic() < deadline, f"{name} never reached {node}"
                time.sleep(0.1)
        assert info["type"] == "quorum"
        assert sorted(info["members"]) == NAMES
        assert any(b["source"] == f"{name}.x" and b["routing_key"] == "orders.#" for b in bindings)


def test_one_definition_changed_on_two_nodes_at_once_ends_the_same_everywhere(
    cluster: LocalCluster, name: str
) -> None:
    # Every node applies both nodes' changes in log order; whatever the interleaving, every
    # node must end with the change that is last in the log.
    path = f"/api/policies/%2F/{name}"

    def change(node: str) -> None:
        for priority in range(40):
            body = {"pattern": f"^{node}-{priority}$", "definition": {"max-length": priority}}
            cluster.api(node, path, "PUT", body)

    writers = [threading.Thread(target=change, args=(node,)) for node in NAMES[:2]]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()

    def patterns() -> set[str]:
        return {cluster.api(node, path)["pattern"] for node in NAMES}

    assert len(until(patterns, lambda found: len(found) == 1)) == 1
    cluster.api("warren-a", path, "DELETE")


def test_one_exchange_declared_two_ways_on_two_nodes_at_once_is_the_first_everywhere(
    cluster: LocalCluster, name: str
) -> None:
    """As in RabbitMQ: the declare first in the log makes the exchange on every node, the
    other client gets 406 PRECONDITION_FAILED (inequivalent type), whichever node it used."""
    for round_ in range(10):
        exchange, durable = f"{name}-{round_}.x", round_ % 2 == 0
        answers = _declare_at_once(
            cluster,
            [
                (node, methodcaller("exchange_declare", exchange, kind, durable=durable), kind)
                for node, kind in (("warren-a", "direct"), ("warren-b", "fanout"))
            ],
        )
        assert sorted(answers.values()) == [200, 406], answers
        winner = "direct" if answers["direct"] == 200 else "fanout"
        path = f"/api/exchanges/%2F/{exchange}"
        assert {cluster.api(node, path)["type"] for node in NAMES} == {winner}
        cluster.api("warren-c", path, "DELETE")


def _declare_at_once(
    cluster: LocalCluster,
    declares: list[tuple[str, Callable[[BlockingChannel], object], str]],
) -> dict[str, int]:
    """Each ``(node, declare, key)`` on a connection of its own, in a thread of its own,
    all let go at once: 200 for a -ok under `key`, else the close code."""
    answers: dict[str, int] = {}
    ready = threading.Barrier(len(declares))

    def declare_on(node: str, declare: Callable[[BlockingChannel], object], key: str) -> None:
        connection = connect(cluster, node)
        try:
            channel = connection.channel()
            ready.wait()
            declare(channel)
            answers[key] = 200
        except pika.exceptions.ChannelClosedByBroker as closed:
            answers[key] = closed.reply_code
        finally:
            with contextlib.suppress(pika.exceptions.AMQPError):
                connection.close()

    writers = [threading.Thread(target=declare_on, args=args) for args in declares]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    return answers


def test_one_classic_queue_declared_on_two_nodes_at_once_is_the_first_everywhere(
    cluster: LocalCluster, name: str
) -> None:
    """As in RabbitMQ: the declare first in the log makes the queue, with its home on the
    node that declared it, and every node has that one queue; the other client gets -ok for
    that same queue if its declare is equivalent, else 406 PRECONDITION_FAILED."""
    for round_ in range(10):
        queue, equivalent = f"{name}-{round_}", round_ % 2 == 0
        answers = _declare_at_once(
            cluster,
            [
                (node, methodcaller("queue_declare", queue, durable=durable), node)
                for node, durable in (("warren-a", True), ("warren-b", equivalent))
            ],
        )
        if equivalent:
            assert answers == {"warren-a": 200, "warren-b": 200}, answers
        else:
            assert sorted(answers.values()) == [200, 406], answers
        path = f"/api/queues/%2F/{queue}"
        seen = {
            (cluster.api(node, path)["node"], cluster.api(node, path)["durable"]) for node in NAMES
        }
        assert len(seen) == 1, seen
        ((home, durable),) = seen
        assert home in ("warren-a", "warren-b")
        if not equivalent:  # the winner's queue: its home answered -ok
            assert answers[home] == 200 and durable == (home == "warren-a")
        cluster.api("warren-c", path, "DELETE")


def test_publish_on_one_node_consume_on_another(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)
    bodies = [f"m{i}".encode() for i in range(300)]
    publish(cluster, "warren-b", name, bodies)
    assert drain(cluster, "warren-c", name, len(bodies)) == bodies


def test_a_cancelled_consumer_keeps_its_messages_until_its_channel_closes(
    cluster: LocalCluster, name: str
) -> None:
    """What RabbitMQ's quorum queues do (`quorum_cancel_scenario`, which passes against
    RabbitMQ), with the consumer on one node and the publisher and the next consumer on
    another."""
    urls = cluster.nodes["warren-b"].url, cluster.nodes["warren-c"].url
    assert quorum_cancel_scenario.cancel_then_close(*urls, name) == quorum_cancel_scenario.EXPECTED


def test_basic_get_and_purge_through_a_follower(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)
    publish(cluster, "warren-a", name, [b"one", b"two", b"three"])
    connection = connect(cluster, "warren-c")
    channel = connection.channel()
    method, _props, body = channel.basic_get(name)
    assert body == b"one" and method.message_count == 2
    channel.basic_ack(method.delivery_tag)
    assert channel.queue_purge(name).method.message_count == 2
    connection.close()


def test_a_get_on_a_killed_node_is_redelivered(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)  # client-local: warren-a leads, warren-c follows
    publish(cluster, "warren-a", name, [b"fetched"])
    connection = connect(cluster, "warren-c")
    method, _props, body = connection.channel().basic_get(name)  # not acked
    assert body == b"fetched" and not method.redelivered
    with revived(cluster):
        cluster.kill("warren-c")
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            connection.close()
        consumer = connect(cluster, "warren-b")
        channel = consumer.channel()
        deliveries = channel.consume(name, inactivity_timeout=AVAILABLE_WITHIN_S)
        method, _props, body = next(deliveries)
        assert body == b"fetched" and method.redelivered
        channel.basic_ack(method.delivery_tag)
        channel.cancel()
        consumer.close()


def test_confirm_waits_for_a_majority(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)
    leader = cluster.leader_of(name)
    followers = [node for node in NAMES if node != leader]

    async def scenario() -> None:
        connection = await aiormq.connect(cluster.nodes[leader].url)
        channel = await connection.channel()
        await channel.confirm_delivery()
        for follower in followers:
            cluster.isolate(follower)
        confirmation = asyncio.ensure_future(channel.basic_publish(b"held", routing_key=name))
        # the leader alone cannot commit: no confirm while it is cut off
        done, _ = await asyncio.wait([confirmation], timeout=1.5)
        assert not done
        cluster.heal()
        assert isinstance(await asyncio.wait_for(confirmation, 15), Basic.Ack)
        await connection.close()

    with revived(cluster):
        asyncio.run(scenario())
    assert drain(cluster, followers[0], name, 1) == [b"held"]


def test_leader_killed_under_load(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)
    leader = cluster.leader_of(name)
    others = [node for node in NAMES if node != leader]
    confirmed: list[int] = []
    arrived: list[int] = []
    stop = threading.Event()

    def publisher() -> None:
        sequence = 0
        node_index = 0
        while not stop.is_set() and sequence < TOTAL:
            try:  # a nack or a channel error leaves the connection open: `with` closes it
                with connect(cluster, others[node_index % 2]) as connection:
                    channel = connection.channel()
                    channel.confirm_delivery()
                    while not stop.is_set() and sequence < TOTAL:
                        channel.basic_publish(
                            "", name, str(sequence).encode(), pika.BasicProperties(delivery_mode=2)
                        )
                        confirmed.append(sequence)
                        sequence += 1
            except (pika.exceptions.AMQPError, OSError):
                node_index += 1  # republish the unconfirmed one, on the other node
                time.sleep(0.2)

    def consumer() -> None:
        while not stop.is_set():
            try:
                with connect(cluster, others[1]) as connection:
                    channel = connection.channel()
                    channel.basic_qos(prefetch_count=50)
                    for method, _props, body in channel.consume(name, inactivity_timeout=0.2):
                        if stop.is_set():
                            break
                        if method is not None:
                            arrived.append(int(body))
                            channel.basic_ack(method.delivery_tag)
            except (pika.exceptions.AMQPError, OSError):
                time.sleep(0.2)

    threads = [threading.Thread(target=publisher), threading.Thread(target=consumer)]
    for thread in threads:
        thread.start()
    with revived(cluster):
        deadline = time.monotonic() + 30
        while len(confirmed) < TOTAL // 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.kill(leader)
        killed_at = time.monotonic()
        before = len(confirmed)
        while len(confirmed) <= before + 50 and time.monotonic() - killed_at < 30:
            time.sleep(0.05)
        unavailable_s = time.monotonic() - killed_at
        assert len(confirmed) > before, "publishing never resumed after the leader was killed"
        cluster.start(leader)
        deadline = time.monotonic() + 60
        while len(confirmed) < TOTAL and time.monotonic() < deadline:
            time.sleep(0.1)
        deadline = time.monotonic() + 30
        while not set(confirmed) <= set(arrived) and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        for thread in threads:
            thread.join(30)
    lost = set(confirmed) - set(arrived)
    assert not lost, f"{len(lost)} confirmed messages never arrived"
    first: list[int] = []
    seen: set[int] = set()
    for sequence in arrived:
        if sequence not in seen:
            seen.add(sequence)
            first.append(sequence)
    assert first == sorted(first), "first arrivals out of publish order"
    assert unavailable_s < AVAILABLE_WITHIN_S


def test_follower_restarts_and_catches_up(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)
    leader = cluster.leader_of(name)
    follower = next(node for node in NAMES if node != leader)
    with revived(cluster):
        cluster.kill(follower)
        publish(cluster, leader, name, [b"x%d" % i for i in range(200)])
        cluster.start(follower)
        deadline = time.monotonic() + AVAILABLE_WITHIN_S
        while time.monotonic() < deadline:
            try:
                if cluster.queue(follower, name)["messages"] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        assert cluster.queue(follower, name)["messages"] == 200


@pytest.mark.parametrize("cut", ["leader", "follower"])
def test_partitioned_node_rejoins(cluster: LocalCluster, name: str, cut: str) -> None:
    declare(cluster, "warren-a", name)
    leader = cluster.leader_of(name)
    victim = leader if cut == "leader" else next(n for n in NAMES if n != leader)
    majority = [node for node in NAMES if node != victim]
    with revived(cluster):
        cluster.isolate(victim)
        started = time.monotonic()
        publish(cluster, majority[0], name, [b"during"])
        assert time.monotonic() - started < AVAILABLE_WITHIN_S
        cluster.heal()
    publish(cluster, victim, name, [b"after"])
    assert drain(cluster, majority[1], name, 2) == [b"during", b"after"]


def test_leader_locator(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-b", name)  # client-local, the default: the declaring node
    assert cluster.leader_of(name) == "warren-b"
    led = dict.fromkeys(NAMES, 0)
    for queue in cluster.api("warren-a", "/api/queues"):
        if queue.get("type") == "quorum" and queue.get("leader") in led:
            led[queue["leader"]] += 1
    fewest = min(NAMES, key=lambda node: (led[node], node != "warren-a", node))
    declare(cluster, "warren-a", f"{name}-b", **{"x-queue-leader-locator": "balanced"})
    assert cluster.leader_of(f"{name}-b") == fewest


def test_pipelined_publisher_is_slowed_not_stopped(cluster: LocalCluster, name: str) -> None:
    # 2,000 publishes with up to 500 unconfirmed, far over the nodes' soft limit of 8: the
    # connection is not read while over it, and every publish is still confirmed.
    declare(cluster, "warren-a", name)

    async def scenario() -> int:
        connection = await aiormq.connect(cluster.nodes["warren-b"].url)
        channel = await connection.channel()
        await channel.confirm_delivery()
        window = asyncio.Semaphore(500)

        async def one(index: int) -> bool:
            async with window:
                reply = await channel.basic_publish(b"%d" % index, routing_key=name)
                return isinstance(reply, Basic.Ack)

        acks = await asyncio.gather(*(one(index) for index in range(2000)))
        await connection.close()
        return sum(acks)

    assert asyncio.run(scenario()) == 2000
    assert len(drain(cluster, "warren-c", name, 2000)) == 2000


def test_a_channel_mixing_queues_confirms_each_publish_once_every_queue_has_it(
    cluster: LocalCluster, name: str
) -> None:
    # One confirming channel on warren-a publishes, pipelined, to a fanout exchange bound
    # to two quorum queues (leaders on a and b) and a classic queue whose home is warren-c,
    # to one of the quorum queues alone, and to a full reject-publish quorum queue: every
    # publish gets one answer, an ack only once every queue it went to has it, a nack
    # where the full queue refused it.
    declare(cluster, "warren-a", f"{name}-1")
    declare(cluster, "warren-b", f"{name}-2")
    declare(
        cluster, "warren-a", f"{name}-full", **{"x-max-length": 2, "x-overflow": "reject-publish"}
    )
    home = connect(cluster, "warren-c")
    try:
        channel = home.channel()
        channel.queue_declare(f"{name}-classic", durable=True)
        channel.exchange_declare(f"{name}-fan", "fanout", durable=True)
        for queue in (f"{name}-1", f"{name}-2", f"{name}-classic"):
            channel.queue_bind(queue, f"{name}-fan")
    finally:
        home.close()

    async def scenario() -> list[str]:
        connection = await aiormq.connect(cluster.nodes["warren-a"].url)
        channel = await connection.channel()
        await channel.confirm_delivery()
        window = asyncio.Semaphore(100)
        persistent = aiormq.spec.Basic.Properties(delivery_mode=2)

        async def one(index: int) -> str:
            exchange, key = [(f"{name}-fan", ""), ("", f"{name}-1"), ("", f"{name}-full")][
                index % 3
            ]
            async with window:
                try:
                    reply = await channel.basic_publish(
                        b"%d" % index, exchange=exchange, routing_key=key, properties=persistent
                    )
                except aiormq.exceptions.DeliveryError as nacked:
                    reply = nacked.frame
                return type(reply).__name__

        replies = await asyncio.gather(*(one(index) for index in range(300)))
        await connection.close()
        return replies

    replies = asyncio.run(scenario())
    assert replies[0::3] == ["Ack"] * 100
    assert replies[1::3] == ["Ack"] * 100
    assert replies[2::3] == ["Ack"] * 2 + ["Nack"] * 98
    assert len(drain(cluster, "warren-b", f"{name}-1", 200)) == 200
    assert len(drain(cluster, "warren-c", f"{name}-2", 100)) == 100
    assert len(drain(cluster, "warren-a", f"{name}-classic", 100)) == 100
    assert len(drain(cluster, "warren-b", f"{name}-full", 2)) == 2


def test_at_least_once_dead_letters_reach_a_quorum_queue(cluster: LocalCluster, name: str) -> None:
    # The source holds each rejected message until the quorum DLQ has committed it.
    declare(cluster, "warren-b", f"{name}.dlq")
    declare(
        cluster,
        "warren-a",
        name,
        **{
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": f"{name}.dlq",
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        },
    )
    bodies = [b"d%d" % i for i in range(20)]
    publish(cluster, "warren-a", name, bodies)
    connection = connect(cluster, "warren-c")
    channel = connection.channel()
    for _ in bodies:
        method, _props, _body = channel.basic_get(name)
        channel.basic_reject(method.delivery_tag, requeue=False)
    connection.close()
    assert drain(cluster, "warren-b", f"{name}.dlq", len(bodies)) == bodies
    deadline = time.monotonic() + AVAILABLE_WITHIN_S
    while cluster.queue("warren-a", name).get("messages_dlx") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster.queue("warren-a", name).get("messages_dlx") == 0
