"""Any node serves any queue: classic queues used from nodes other than their home, and a
quorum queue's consumers on nodes that hold no replica of it (real processes, real
clients; `warren.runtime.cluster.remote`)."""

from __future__ import annotations

import contextlib
import struct
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pika
import pika.exceptions
import pytest

from tests.cluster.conftest import AVAILABLE_WITHIN_S, NAMES, QUORUM, connect, revived
from tests.integration.conftest import (
    FRAME_METHOD,
    RawAmqp,
    frame_bytes,
    method_payload,
    shortstr,
)
from warren.amqp.table import encode_table
from warren.testing.cluster import LocalCluster

T = TypeVar("T")
Channel = Any  # pika's BlockingChannel


def until(check: Callable[[], object], what: str) -> None:
    """Wait (bounded) for `check` to be true; OSError counts as not yet."""
    deadline = time.monotonic() + AVAILABLE_WITHIN_S
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{what} within {AVAILABLE_WITHIN_S} s")


def eventually(connection: pika.BlockingConnection, action: Callable[[Channel], T]) -> T:
    """`action` on a fresh channel, again until the broker stops refusing, returning or
    nacking it: definitions reach the other nodes a moment after they are made, and a
    node that starts reaches a queue's home a moment after it listens."""
    deadline = time.monotonic() + AVAILABLE_WITHIN_S
    while True:
        channel = connection.channel()
        try:
            return action(channel)
        except (
            pika.exceptions.ChannelClosedByBroker,
            pika.exceptions.UnroutableError,
            pika.exceptions.NackError,
        ):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def known(cluster: LocalCluster, nodes: list[str], queue: str) -> None:
    for node in nodes:
        until(lambda node=node: cluster.queue(node, queue), f"{queue} never reached {node}")


def unacked_after(channel: Channel, queue: str) -> list[tuple[int, bytes]]:
    """Consume without acking until nothing more comes: what the prefetch let through."""
    held = []
    for method, _props, body in channel.consume(queue, inactivity_timeout=0.5):
        if method is None:
            break
        held.append((method.delivery_tag, body))
    return held


def acked_until_idle(channel: Channel, queue: str) -> list[bytes]:
    """Consume with acks until nothing more comes."""
    got = []
    for method, _props, body in channel.consume(queue, inactivity_timeout=1.0):
        if method is None:
            break
        got.append(body)
        channel.basic_ack(method.delivery_tag)
    channel.cancel()
    return got


def test_a_classic_queue_is_used_from_every_node(cluster: LocalCluster, name: str) -> None:
    connection = connect(cluster, "warren-a")
    channel = connection.channel()
    channel.exchange_declare(f"{name}.x", "direct", durable=True)
    channel.queue_declare(name, durable=True)
    channel.queue_bind(name, f"{name}.x", "k")
    connection.close()
    known(cluster, ["warren-b", "warren-c"], name)
    assert cluster.queue("warren-c", name)["node"] == "warren-a"  # its home
    until(
        lambda: (
            cluster.api("warren-b", f"/api/queues/%2F/{name}/bindings")[-1]["routing_key"] == "k"
        ),
        "the binding never reached warren-b",
    )

    # on b: publish with confirms through the bound exchange, consume with acks and prefetch
    connection = connect(cluster, "warren-b")
    channel = connection.channel()
    channel.confirm_delivery()
    bodies = [b"m%d" % i for i in range(30)]
    for body in bodies:
        channel.basic_publish(f"{name}.x", "k", body, pika.BasicProperties(delivery_mode=2))
    channel.basic_qos(prefetch_count=4)
    first = unacked_after(channel, name)
    assert [body for _tag, body in first] == bodies[:4]  # the prefetch holds
    channel.basic_ack(first[-1][0], multiple=True)
    assert [body for _tag, body in first] + acked_until_idle(channel, name) == bodies
    assert channel.queue_declare(name, durable=True).method.message_count == 0
    connection.close()

    # on c: get, purge, delete
    connection = connect(cluster, "warren-c")
    channel = connection.channel()
    for body in (b"one", b"two", b"three"):
        channel.basic_publish("", name, body)
    method, _props, body = channel.basic_get(name)
    assert body == b"one" and method.message_count == 2
    channel.basic_ack(method.delivery_tag)
    assert channel.queue_purge(name).method.message_count == 2
    assert channel.queue_delete(name).method.message_count == 0
    connection.close()
    until(lambda: name not in {q["name"] for q in cluster.api("warren-a", "/api/queues")}, "gone")


def test_a_definition_is_routable_everywhere_once_its_ok_came(
    cluster: LocalCluster, name: str
) -> None:
    """As in RabbitMQ, a definition's -ok comes once the cluster has it: a publish with
    mandatory through either other node at once is routed (not returned as unroutable),
    for a classic queue, an exchange bound to it, and a quorum queue."""
    declaring = connect(cluster, "warren-a")
    publishing = [connect(cluster, node) for node in ("warren-b", "warren-c")]
    on_a = declaring.channel()
    others = [connection.channel() for connection in publishing]
    for channel in others:
        channel.confirm_delivery()  # a returned publish raises UnroutableError
    for round_ in range(5):
        queue, exchange, replicated = f"{name}-{round_}", f"{name}-{round_}.x", f"{name}-{round_}.q"
        on_a.queue_declare(queue)
        for on in others:
            on.basic_publish("", queue, b"direct", mandatory=True)
        on_a.exchange_declare(exchange, "direct", durable=False)
        on_a.queue_bind(queue, exchange, "k")
        for on in others:
            on.basic_publish(exchange, "k", b"bound", mandatory=True)
        on_a.queue_declare(replicated, durable=True, arguments=QUORUM)
        for on in others:
            on.basic_publish("", replicated, b"replicated", mandatory=True)
        on_a.queue_delete(replicated)
        assert on_a.queue_declare(queue, passive=True).method.message_count == 4
    declaring.close()
    for connection in publishing:
        connection.close()


def test_a_classic_queue_deleted_is_gone_everywhere_once_its_ok_came(
    cluster: LocalCluster, name: str
) -> None:
    """As in RabbitMQ, a queue.delete's -ok comes once the cluster has the delete: a
    passive declare through a third node at once finds no queue, whether the delete went
    through the queue's home or through another node."""
    declaring = connect(cluster, "warren-a")
    on_a = declaring.channel()
    for round_ in range(10):
        queue = f"{name}-{round_}"
        on_a.queue_declare(queue, durable=round_ % 2 == 0)
        on_a.basic_publish("", queue, b"m")
        deleting, checking = ("warren-a", "warren-b") if round_ < 5 else ("warren-b", "warren-c")
        connection = connect(cluster, deleting)
        assert connection.channel().queue_delete(queue).method.message_count == 1
        connection.close()
        connection = connect(cluster, checking)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            connection.channel().queue_declare(queue, passive=True)
        assert closed.value.reply_code == 404
        connection.close()
    declaring.close()


def test_replies_keep_the_order_of_pipelined_methods(cluster: LocalCluster, name: str) -> None:
    """A quorum queue's declare waits twice (for the metadata log, then for its leader's
    counts); a basic.get sent right behind it on the same channel is answered after the
    declare-ok, not before."""
    raw = RawAmqp(cluster.nodes["warren-b"].url)
    try:
        raw.handshake()
        raw.open_channel(1)
        declare = struct.pack(">H", 0) + shortstr(name) + bytes([0b10])  # durable
        declare += encode_table({"x-queue-type": "quorum"})
        get = struct.pack(">H", 0) + shortstr(name) + b"\x01"  # no-ack
        raw.send(  # in one write, so that the node reads both at once
            frame_bytes(FRAME_METHOD, 1, method_payload(50, 10, declare))
            + frame_bytes(FRAME_METHOD, 1, method_payload(60, 70, get))
        )
        assert raw.read_frame().method == (50, 11)  # queue.declare-ok
        assert raw.read_frame().method == (60, 72)  # basic.get-empty
    finally:
        raw.close()


def test_a_non_durable_exchange_routes_on_every_node(cluster: LocalCluster, name: str) -> None:
    connection = connect(cluster, "warren-b")
    connection.channel().exchange_declare(f"{name}.fan", "fanout", durable=False)
    connection.close()
    connection = connect(cluster, "warren-a")
    connection.channel().queue_declare(name)

    def bound(fresh: Channel) -> Channel:
        fresh.queue_bind(name, f"{name}.fan")  # once the exchange reached warren-a
        return fresh

    channel = eventually(connection, bound)
    channel.basic_publish(f"{name}.fan", "", b"fanned")
    _method, _props, body = channel.basic_get(name, auto_ack=True)
    assert body == b"fanned"
    connection.close()


def test_an_exclusive_queue_is_locked_for_other_nodes(cluster: LocalCluster, name: str) -> None:
    owner = connect(cluster, "warren-a")
    owner.channel().queue_declare(name, exclusive=True)
    known(cluster, ["warren-b"], name)
    connection = connect(cluster, "warren-b")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        connection.channel().basic_get(name)
    assert refused.value.reply_code == 405
    assert "RESOURCE_LOCKED" in refused.value.reply_text
    owner.close()  # the queue goes with its connection, on every node
    until(lambda: name not in {q["name"] for q in cluster.api("warren-b", "/api/queues")}, "gone")
    connection.close()


def test_home_node_down(cluster: LocalCluster, name: str) -> None:
    connection = connect(cluster, "warren-a")
    connection.channel().queue_declare(name, durable=True)
    connection.close()
    known(cluster, ["warren-b"], name)
    consumer = connect(cluster, "warren-b")
    channel = consumer.channel()
    cancelled: list[str] = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = channel.basic_consume(name, lambda *_: None)
    with revived(cluster):
        cluster.kill("warren-a")
        deadline = time.monotonic() + AVAILABLE_WITHIN_S
        while not cancelled and time.monotonic() < deadline:
            consumer.process_data_events(time_limit=0.1)
        assert cancelled == [tag]  # consumer_cancel_notify
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            consumer.channel().queue_declare(name, durable=True)
        assert refused.value.reply_code == 404
        assert refused.value.reply_text == (
            f"NOT_FOUND - home node 'warren-a' of durable queue '{name}' in vhost '/' "
            "is down or inaccessible"
        )
        consumer.close()
    # back up: the queue is served from b again
    connection = connect(cluster, "warren-b")
    declared = eventually(connection, lambda fresh: fresh.queue_declare(name, passive=True))
    assert declared.method.message_count == 0
    connection.close()


def test_quorum_consumers_on_nodes_without_a_replica(cluster: LocalCluster, name: str) -> None:
    connection = connect(cluster, "warren-a")
    channel = connection.channel()
    channel.confirm_delivery()
    arguments = {**QUORUM, "x-quorum-initial-group-size": 1}
    channel.queue_declare(name, durable=True, arguments=arguments)
    bodies = [b"q%d" % i for i in range(60)]
    for body in bodies:
        channel.basic_publish("", name, body, pika.BasicProperties(delivery_mode=2))
    connection.close()
    known(cluster, ["warren-b", "warren-c"], name)
    assert cluster.queue("warren-b", name)["members"] == ["warren-a"]

    on_b = connect(cluster, "warren-b")
    b = on_b.channel()
    b.basic_qos(prefetch_count=3)
    held = unacked_after(b, name)
    assert len(held) == 3  # the prefetch holds for a consumer the leader serves remotely
    on_c = connect(cluster, "warren-c")
    c = on_c.channel()
    c.basic_qos(prefetch_count=10)
    got = [body for _tag, body in held] + acked_until_idle(c, name)
    b.basic_ack(held[-1][0], multiple=True)
    assert sorted(got) == sorted(bodies)  # every message once
    on_b.close()
    on_c.close()


def test_a_cut_off_consumer_node_gives_back_what_it_held(cluster: LocalCluster, name: str) -> None:
    connection = connect(cluster, "warren-a")
    channel = connection.channel()
    channel.queue_declare(name, durable=True)
    for index in range(5):
        channel.basic_publish("", name, b"h%d" % index)
    connection.close()
    known(cluster, ["warren-b", "warren-c"], name)
    holder = connect(cluster, "warren-b")
    channel = holder.channel()
    channel.basic_qos(prefetch_count=10)
    assert len(unacked_after(channel, name)) == 5
    with revived(cluster):
        cluster.isolate("warren-b")  # the home returns what b's consumer held
        connection = connect(cluster, "warren-c")
        again = []

        def fetched(fresh: Channel) -> bool:
            method, _props, body = fresh.basic_get(name, auto_ack=True)
            if method is not None:
                assert method.redelivered
                again.append(body)
            return len(again) == 5

        until(lambda: eventually(connection, fetched), "the held messages never came back")
        assert sorted(again) == [b"h%d" % index for index in range(5)]
        connection.close()
    with contextlib.suppress(pika.exceptions.AMQPError):
        holder.close()


def test_restarted_nodes_learn_again_what_they_missed(cluster: LocalCluster, name: str) -> None:
    # Records of other nodes' classic queues, non-durable exchanges and bindings are not
    # stored: a restarted node hears them again from their home when its link comes up.
    connection = connect(cluster, "warren-a")
    channel = connection.channel()
    channel.exchange_declare(f"{name}.x", "fanout", durable=False)
    channel.queue_declare(f"{name}.durable", durable=True)
    channel.queue_declare(f"{name}.transient", durable=False)
    channel.queue_bind(f"{name}.durable", f"{name}.x")
    connection.close()
    known(cluster, ["warren-b"], f"{name}.transient")
    with revived(cluster):
        cluster.kill("warren-b")
        cluster.start("warren-b")
        connection = connect(cluster, "warren-b")

        def routed(fresh: Channel) -> Any:
            fresh.confirm_delivery()
            fresh.basic_publish(f"{name}.x", "", b"after", mandatory=True)
            return fresh.basic_get(f"{name}.durable", auto_ack=True)

        assert eventually(connection, routed)[2] == b"after"
        connection.close()
        cluster.kill("warren-a")
        cluster.start("warren-a")  # its non-durable queue is gone, everywhere
    names = lambda: {queue["name"] for queue in cluster.api("warren-b", "/api/queues")}  # noqa: E731
    until(lambda: f"{name}.transient" not in names(), "the non-durable queue stayed")
    assert f"{name}.durable" in names()


def test_a_home_deletes_its_own_queues_through_the_log(cluster: LocalCluster, name: str) -> None:
    """What a classic queue's home deletes by itself (a queue that auto-deletes with its
    last consumer, one whose x-expires ran out) goes through the metadata log as a
    client's delete does: cut off from the others, the home keeps both queues (the log
    cannot take their deletes); healed, every node deletes them."""
    expiring, auto = f"{name}-expires", f"{name}-auto"
    home = connect(cluster, "warren-a")
    with revived(cluster):
        channel = home.channel()
        channel.queue_declare(expiring, arguments={"x-expires": 500})
        channel.queue_declare(auto, auto_delete=True)
        # neither goes while it has a consumer
        tags = [channel.basic_consume(queue, lambda *args: None) for queue in (expiring, auto)]
        known(cluster, NAMES[1:], expiring)
        known(cluster, NAMES[1:], auto)
        cluster.isolate("warren-a")
        for tag in tags:
            channel.basic_cancel(tag)
        time.sleep(2.0)  # four times x-expires
        for queue in (expiring, auto):
            assert cluster.queue("warren-a", queue)["name"] == queue
            assert cluster.queue("warren-b", queue)["name"] == queue
        cluster.heal()
        for node in NAMES:
            for queue in (expiring, auto):
                until(lambda node=node, queue=queue: _gone(cluster, node, queue), f"{queue} gone")
    with contextlib.suppress(pika.exceptions.AMQPError):
        home.close()


def _gone(cluster: LocalCluster, node: str, queue: str) -> bool:
    return queue not in {q["name"] for q in cluster.api(node, "/api/queues")}


def first_connection(cluster: LocalCluster, node: str) -> pika.BlockingConnection:
    """A connection to `node` as soon as it accepts one (it is starting)."""
    deadline = time.monotonic() + AVAILABLE_WITHIN_S
    while True:
        try:
            return connect(cluster, node)
        except pika.exceptions.AMQPConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def test_a_restarted_node_knows_other_homes_queues_once_it_listens(
    cluster: LocalCluster, name: str
) -> None:
    # As RabbitMQ waits for its tables before it boots: a node that restarts catches up
    # with the metadata log (bounded) before it listens, so a client that connects at
    # once finds the queues other nodes declared while it was down.
    with revived(cluster):
        cluster.kill("warren-b")
        connection = connect(cluster, "warren-a")
        channel = connection.channel()
        for index in range(20):
            channel.queue_declare(f"{name}.{index}", durable=index % 2 == 0)
        connection.close()
        cluster.launch("warren-b")
        connection = first_connection(cluster, "warren-b")
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare(f"{name}.19", passive=True)  # 404 while it had not heard
        channel.basic_publish("", f"{name}.18", b"at once", mandatory=True)
        method, _props, body = channel.basic_get(f"{name}.18", auto_ack=True)
        assert method is not None and body == b"at once"
        connection.close()


def test_a_worker_killed_alone_comes_back_with_its_queues(cluster: LocalCluster, name: str) -> None:
    # A node of several workers (issue 19): its supervisor restarts the worker, which
    # recovers its durable queues and rejoins the cluster as the same member; the other
    # nodes use its queues again. Nothing to kill on a node of one process.
    if cluster.workers == 1:
        pytest.skip("nodes of one process (WARREN_TEST_WORKERS=2 runs it)")
    queues = [f"{name}.{index}" for index in range(4)]
    connection = connect(cluster, "warren-a")
    channel = connection.channel()
    channel.confirm_delivery()
    for queue in queues:  # spread over warren-a's workers, the connection following them
        channel.queue_declare(queue, durable=True)
    for queue in queues:
        channel.basic_publish("", queue, b"kept", pika.BasicProperties(delivery_mode=2))
    connection.close()
    known(cluster, ["warren-b"], queues[-1])
    for index in range(cluster.workers):
        cluster.restart_worker("warren-a", index)  # then warren-b finds its queues in time
        reader = connect(cluster, "warren-b")
        counts = [
            eventually(reader, lambda fresh, q=queue: fresh.queue_declare(q, passive=True))
            for queue in queues
        ]
        reader.close()
        assert [count.method.message_count for count in counts] == [1] * len(queues)
    assert cluster.nodes["warren-a"].running
