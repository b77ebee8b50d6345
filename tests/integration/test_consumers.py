"""basic.consume and friends: prefetch (per consumer and global), priorities, no-ack,
server-made consumer tags, cancel, and the broker cancelling a consumer.

Messages are published with confirms (so they are in the queue) before a consumer starts,
unless a test says otherwise; counts of deliveries are taken after the expected number has
arrived plus a short settle, so a broker that over-delivers is caught.
"""

from __future__ import annotations

import re
import struct

SETTLE_S = 0.2


class Deliveries:
    """Records what each consumer on a channel received: label → [(body, tag, redelivered)]."""

    def __init__(self, channel) -> None:
        self.channel = channel
        self.by_consumer: dict[str, list[tuple[str, int, bool]]] = {}

    def consume(self, label: str, queue: str, **kw) -> str:
        got = self.by_consumer.setdefault(label, [])

        def on_message(channel, method, props, body) -> None:
            got.append((body.decode(), method.delivery_tag, method.redelivered))

        return self.channel.basic_consume(queue, on_message, **kw)

    def bodies(self) -> dict[str, list[str]]:
        return {label: [d[0] for d in got] for label, got in self.by_consumer.items()}

    def total(self) -> int:
        return sum(len(got) for got in self.by_consumer.values())


def consume_until(amqp, connection, deliveries: Deliveries, count: int) -> dict[str, list[str]]:
    """Wait for `count` deliveries in all, then a little longer; the bodies per consumer."""
    amqp.pump(connection, lambda: deliveries.total() >= count)
    amqp.settle(connection, SETTLE_S)
    return deliveries.bodies()


# -- prefetch ---------------------------------------------------------------------------------


def test_prefetch_per_consumer(amqp):
    queue = amqp.queue("q")
    amqp.fill(queue, 10)
    connection = amqp.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2)  # global=False: a limit for each new consumer
    deliveries = Deliveries(channel)
    deliveries.consume("first", queue)
    deliveries.consume("second", queue)
    got = consume_until(amqp, connection, deliveries, 4)
    assert got == {"first": ["m1", "m2"], "second": ["m3", "m4"]}


def test_prefetch_global_is_shared_by_the_channel(amqp):
    queue = amqp.queue("q")
    amqp.fill(queue, 10)
    connection = amqp.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=3, global_qos=True)
    deliveries = Deliveries(channel)
    deliveries.consume("first", queue)
    deliveries.consume("second", queue)
    got = consume_until(amqp, connection, deliveries, 3)
    assert got == {"first": ["m1", "m2", "m3"], "second": []}


def test_prefetch_global_is_shared_by_the_channels_queues(amqp):
    queues = [amqp.queue(name) for name in ("a", "b", "c", "d")]  # on both workers, if two
    for queue in queues:
        amqp.fill(queue, 5)
    connection = amqp.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=3, global_qos=True)
    deliveries = Deliveries(channel)
    for queue in queues:
        deliveries.consume(queue, queue)
    got = consume_until(amqp, connection, deliveries, 3)
    assert sum(len(bodies) for bodies in got.values()) == 3
    for count in range(4, 21):  # each ack lets exactly one more through
        newest = max(tag for got in deliveries.by_consumer.values() for _, tag, _ in got)
        channel.basic_ack(newest - 2)  # the oldest of the three unacked
        assert (
            sum(
                len(bodies)
                for bodies in consume_until(amqp, connection, deliveries, count).values()
            )
            == count
        )
    assert consume_until(amqp, connection, deliveries, 20) == {
        queue: ["m1", "m2", "m3", "m4", "m5"] for queue in queues
    }


def test_ack_gives_credit_back(amqp):
    queue = amqp.queue("q")
    amqp.fill(queue, 3)
    connection = amqp.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1)
    deliveries = Deliveries(channel)
    deliveries.consume("only", queue)
    assert consume_until(amqp, connection, deliveries, 1) == {"only": ["m1"]}
    channel.basic_ack(deliveries.by_consumer["only"][0][1])
    assert consume_until(amqp, connection, deliveries, 2) == {"only": ["m1", "m2"]}


def test_prefetch_zero_is_unlimited(amqp):
    queue = amqp.queue("q")
    bodies = amqp.fill(queue, 5)
    connection = amqp.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=0)
    deliveries = Deliveries(channel)
    deliveries.consume("only", queue)
    assert consume_until(amqp, connection, deliveries, 5) == {"only": bodies}


def test_no_ack_consumer_ignores_prefetch_and_leaves_nothing_unacked(amqp):
    queue = amqp.queue("q")
    bodies = amqp.fill(queue, 5)
    connection = amqp.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1)
    deliveries = Deliveries(channel)
    deliveries.consume("only", queue, auto_ack=True)
    assert consume_until(amqp, connection, deliveries, 5) == {"only": bodies}
    channel.close()  # nothing to requeue
    assert amqp.passive_count(amqp.channel(), queue) == (0, 0)


def test_prefetch_size_is_not_implemented(amqp):
    channel = amqp.channel()
    assert amqp.attempt(lambda: channel.basic_qos(prefetch_size=10)) == {
        "closed": "connection",
        "code": 540,
        "text": "NOT_IMPLEMENTED - prefetch_size!=0 (10)",
    }


# -- priorities -------------------------------------------------------------------------------


def test_higher_priority_consumer_first_while_it_has_credit(amqp):
    queue = amqp.queue("q")
    connection = amqp.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2)
    deliveries = Deliveries(channel)
    deliveries.consume("low", queue, arguments={"x-priority": 1})
    deliveries.consume("high", queue, arguments={"x-priority": 10})
    amqp.fill(queue, 6)
    got = consume_until(amqp, connection, deliveries, 4)
    assert got == {"low": ["m3", "m4"], "high": ["m1", "m2"]}
    channel.basic_ack(deliveries.by_consumer["high"][0][1])
    got = consume_until(amqp, connection, deliveries, 5)
    assert got == {"low": ["m3", "m4"], "high": ["m1", "m2", "m5"]}


# -- consumer tags, cancel, redelivery --------------------------------------------------------


def test_server_generates_consumer_tag(amqp, raw_amqp):
    queue = amqp.queue("q")
    amqp.fill(queue, 1)
    raw = raw_amqp()
    raw.open_channel(1)
    consume = struct.pack(">H", 0) + raw.shortstr(queue) + raw.shortstr("") + b"\x02"
    raw.send_method(1, 60, 20, consume + struct.pack(">I", 0))  # no-ack, empty tag
    ok = raw.expect_method(1, (60, 21)).payload
    tag = ok[5 : 5 + ok[4]].decode()
    assert re.fullmatch(r"amq\.ctag-[A-Za-z0-9_-]{22}", tag), tag
    deliver = raw.expect_method(1, (60, 60)).payload
    assert deliver[5 : 5 + deliver[4]].decode() == tag


def test_cancel_stops_deliveries_and_keeps_unacked(amqp):
    queue = amqp.queue("q")
    amqp.fill(queue, 1)
    connection = amqp.connect()
    channel = connection.channel()
    deliveries = Deliveries(channel)
    tag = deliveries.consume("only", queue)
    assert consume_until(amqp, connection, deliveries, 1) == {"only": ["m1"]}
    assert channel.basic_cancel(tag) == []  # pika hands back undispatched messages
    amqp.fill(queue, 1)
    amqp.settle(connection, SETTLE_S)
    assert deliveries.bodies() == {"only": ["m1"]}
    channel.basic_ack(deliveries.by_consumer["only"][0][1])  # still allowed after cancel
    assert amqp.bodies(channel, queue) == ["m1"]  # the second m1; the first one was acked


def test_consumer_count(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    queue = amqp.queue("q", channel)
    tags = [channel.basic_consume(queue, lambda *_: None) for _ in range(3)]
    assert amqp.passive_count(connection.channel(), queue) == (0, 3)
    channel.basic_cancel(tags[0])
    assert amqp.passive_count(connection.channel(), queue) == (0, 2)


def test_closing_the_channel_requeues_unacked_in_order(amqp):
    queue = amqp.queue("q")
    amqp.fill(queue, 5)
    connection = amqp.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=3)
    deliveries = Deliveries(channel)
    deliveries.consume("only", queue)
    consume_until(amqp, connection, deliveries, 3)
    channel.basic_ack(deliveries.by_consumer["only"][1][1])  # m2, which lets m4 come
    assert consume_until(amqp, connection, deliveries, 4) == {"only": ["m1", "m2", "m3", "m4"]}
    channel.close()
    assert amqp.drain(amqp.channel(), queue) == [
        ("m1", True),
        ("m3", True),
        ("m4", True),
        ("m5", False),
    ]


def test_consume_from_missing_queue(amqp):
    channel = amqp.channel()
    missing = amqp.name("missing")
    result = amqp.attempt(lambda: channel.basic_consume(missing, lambda *_: None))
    text = f"NOT_FOUND - no queue '{missing}' in vhost '/'"
    assert result == {"closed": "channel", "code": 404, "text": text}


def test_deleting_the_queue_cancels_its_consumers(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    queue = amqp.queue("q", channel)
    cancelled: list[str] = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = channel.basic_consume(queue, lambda *_: None)
    amqp.channel().queue_delete(queue)  # from another connection
    amqp.pump(connection, lambda: bool(cancelled))
    assert cancelled == [tag]
    assert channel.is_open  # a cancel notification is not a channel error
    amqp.sync(channel)
