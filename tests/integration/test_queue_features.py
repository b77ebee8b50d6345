"""Queue features the golden files leave out, checked against RabbitMQ and then Warren.

Covered: message priorities (`x-max-priority`), single active consumer, exclusive consumers
from other connections, per-message TTL together with a queue TTL, dead-lettering on
`maxlen` (drop-head and reject-publish-dlx, with publisher confirms), a publish routed to a
full and a free queue, the `x-expires` countdown restarting when the last consumer goes,
`x-queue-mode`, and dead-lettered messages keeping their delivery mode.

Expected values come from the guides in the shared seeds folder (length limits, TTL, DLX)
and from RabbitMQ 3.10.8 itself: every test here passes against it.
"""

from __future__ import annotations

import time

import pytest


def publish_all(amqp, channel, queue: str, bodies: list[str], **properties) -> None:
    for body in bodies:
        amqp.publish(channel, queue, body, **properties)
    amqp.sync(channel)


def dead_letter_to(dlq: str, **arguments) -> dict:
    """Queue arguments that dead-letter through the default exchange to `dlq`."""
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, **arguments}


def death_of(record: dict) -> tuple:
    """(reason, queue, count) of a dead-lettered message's only x-death entry."""
    [death] = record["props"]["headers"]["x-death"]
    return death["reason"], death["queue"], death["count"]


class Collector:
    """A consumer callback that keeps the bodies it is given (and acks if asked)."""

    def __init__(self, ack: bool = True) -> None:
        self.bodies: list[str] = []
        self.redelivered: list[bool] = []
        self.ack = ack

    def __call__(self, channel, method, properties, body) -> None:
        self.bodies.append(body.decode())
        self.redelivered.append(method.redelivered)
        if self.ack:
            channel.basic_ack(method.delivery_tag)


# -- priorities ------------------------------------------------------------------------------

PUBLISHED_PRIORITIES = [
    ("a1", 1),
    ("b1", 3),
    ("none", None),
    ("a2", 1),
    ("c9", 9),
    ("d5", 5),
    ("b2", 3),
    ("c7", 7),
]
# Highest first, FIFO within one priority; 9 and 7 count as the maximum 5 (and sort with d5
# in publish order); no priority is 0. The property itself is delivered as published.
PRIORITY_ORDER = [
    ("c9", 9),
    ("d5", 5),
    ("c7", 7),
    ("b1", 3),
    ("b2", 3),
    ("a1", 1),
    ("a2", 1),
    ("none", None),
]


def test_priority_get_order(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, arguments={"x-max-priority": 5})
    channel.confirm_delivery()
    for body, priority in PUBLISHED_PRIORITIES:
        amqp.publish(channel, queue, body, priority=priority)
    got = []
    for _ in PUBLISHED_PRIORITIES:
        record, _tag = amqp.get_record(channel, queue)
        got.append((record["body"], record["props"].get("priority")))
    assert got == PRIORITY_ORDER
    assert amqp.get_record(channel, queue) == (None, None)


def test_priority_consumer_order(amqp):
    # A consumer that is busy (prefetch 1, one message held) gets the backlog by priority.
    connection = amqp.connect()
    channel = connection.channel()
    queue = amqp.queue("q", channel, arguments={"x-max-priority": 5})
    channel.basic_qos(prefetch_count=1)
    collector = Collector(ack=False)
    channel.basic_consume(queue, collector)
    publisher = amqp.channel()
    publisher.confirm_delivery()
    amqp.publish(publisher, queue, "first")
    amqp.pump(connection, lambda: collector.bodies == ["first"])
    for body, priority in PUBLISHED_PRIORITIES:
        amqp.publish(publisher, queue, body, priority=priority)
    for expected in range(2, len(PUBLISHED_PRIORITIES) + 2):
        channel.basic_ack(0, multiple=True)
        amqp.pump(connection, lambda n=expected: len(collector.bodies) == n)
    channel.basic_ack(0, multiple=True)
    assert collector.bodies == ["first"] + [body for body, _priority in PRIORITY_ORDER]


def test_priority_requeue_keeps_its_place(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, arguments={"x-max-priority": 5})
    channel.confirm_delivery()
    for body, priority in [("high", 5), ("low1", 1), ("low2", 1)]:
        amqp.publish(channel, queue, body, priority=priority)
    held, tag = amqp.get_record(channel, queue, ack=False)
    amqp.publish(channel, queue, "mid", priority=3)
    channel.basic_nack(tag, requeue=True)
    assert held["body"] == "high"
    assert amqp.drain(channel, queue) == [
        ("high", True),
        ("mid", False),
        ("low1", False),
        ("low2", False),
    ]


# -- single active consumer ------------------------------------------------------------------


def test_single_active_consumer_takes_over_on_cancel(amqp):
    first_connection, second_connection = amqp.connect(), amqp.connect()
    first, second = first_connection.channel(), second_connection.channel()
    queue = amqp.queue("q", first, arguments={"x-single-active-consumer": True})
    first_got, second_got = Collector(), Collector()
    first_tag = first.basic_consume(queue, first_got)
    second.basic_consume(queue, second_got)
    connections = [first_connection, second_connection]
    publisher = amqp.channel()
    publisher.confirm_delivery()
    publish_all(amqp, publisher, queue, ["m1", "m2", "m3"])
    amqp.pump(connections, lambda: len(first_got.bodies) == 3)
    amqp.settle(second_connection, 0.2)
    assert (first_got.bodies, second_got.bodies) == (["m1", "m2", "m3"], [])
    assert amqp.passive_count(publisher, queue) == (0, 2)

    first.basic_cancel(first_tag)
    publish_all(amqp, publisher, queue, ["m4", "m5"])
    amqp.pump(connections, lambda: len(second_got.bodies) == 2)
    amqp.settle(first_connection, 0.2)
    assert (first_got.bodies, second_got.bodies) == (["m1", "m2", "m3"], ["m4", "m5"])


def test_single_active_consumer_unacked_go_to_the_next_when_its_channel_closes(amqp):
    first_connection, second_connection = amqp.connect(), amqp.connect()
    first, second = first_connection.channel(), second_connection.channel()
    queue = amqp.queue("q", first, arguments={"x-single-active-consumer": True})
    first_got, second_got = Collector(ack=False), Collector()
    first.basic_consume(queue, first_got)
    second.basic_consume(queue, second_got)
    publisher = amqp.channel()
    publisher.confirm_delivery()
    publish_all(amqp, publisher, queue, ["m1", "m2"])
    amqp.pump(first_connection, lambda: len(first_got.bodies) == 2)
    first.close()  # both unacked: back to the queue, in order, for the new active consumer
    amqp.pump(second_connection, lambda: len(second_got.bodies) == 2)
    assert second_got.bodies == ["m1", "m2"]
    assert second_got.redelivered == [True, True]


# -- exclusive consumers ---------------------------------------------------------------------


def test_exclusive_consumer_refuses_consumers_on_other_connections(amqp):
    owner, other = amqp.connect(), amqp.connect()
    queue = amqp.queue("q", owner.channel())
    owner_channel = owner.channel()
    tag = owner_channel.basic_consume(queue, lambda *_: None, exclusive=True)
    in_use = {
        "closed": "channel",
        "code": 403,
        "text": f"ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use",
    }
    assert amqp.attempt_on(other, lambda ch: ch.basic_consume(queue, lambda *_: None)) == in_use
    assert (
        amqp.attempt_on(other, lambda ch: ch.basic_consume(queue, lambda *_: None, exclusive=True))
        == in_use
    )
    owner_channel.basic_cancel(tag)
    # Once the exclusive consumer is gone, anyone may consume again.
    assert amqp.attempt_on(other, lambda ch: ch.basic_consume(queue, lambda *_: None)) == {
        "ok": True
    }


def test_exclusive_consumer_receives_everything(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    queue = amqp.queue("q", channel)
    collector = Collector()
    channel.basic_consume(queue, collector, exclusive=True)
    publisher = amqp.channel()
    publisher.confirm_delivery()
    publish_all(amqp, publisher, queue, ["m1", "m2", "m3"])
    amqp.pump(connection, lambda: len(collector.bodies) == 3)
    assert collector.bodies == ["m1", "m2", "m3"]
    assert amqp.passive_count(publisher, queue) == (0, 1)


# -- TTL -------------------------------------------------------------------------------------


def test_message_ttl_and_queue_ttl_the_lower_wins(amqp):
    # Queue TTL 500 ms; "short" asks for 100 ms (it wins), "long" for 60 s (the queue's
    # 500 ms wins), "plain" has no expiration. Dead-lettering shows when each one expired.
    channel = amqp.channel()
    dlq = amqp.queue("dlq", channel)
    arguments = dead_letter_to(dlq, **{"x-message-ttl": 500})
    queue = amqp.queue("q", channel, arguments=arguments)
    channel.confirm_delivery()
    published = time.monotonic()
    amqp.publish(channel, queue, "short", expiration="100")
    amqp.publish(channel, queue, "long", expiration="60000")
    amqp.publish(channel, queue, "plain")
    assert amqp.await_count(channel, dlq, 1, timeout_s=0.4)["message_count"] == 1
    assert amqp.passive_count(channel, queue) == (2, 0)
    assert time.monotonic() - published < 0.5
    assert amqp.await_count(channel, dlq, 3, timeout_s=1.0)["message_count"] == 3
    assert time.monotonic() - published >= 0.45
    dead = amqp.drain_records(channel, dlq)
    assert [record["body"] for record in dead] == ["short", "long", "plain"]
    expirations = [
        record["props"]["headers"]["x-death"][0].get("original-expiration") for record in dead
    ]
    assert expirations == ["100", "60000", None]
    assert all("expiration" not in record["props"] for record in dead)


def test_message_ttl_lower_than_queue_ttl_without_dead_lettering(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, arguments={"x-message-ttl": 60000})
    channel.confirm_delivery()
    amqp.publish(channel, queue, "short", expiration="100")
    assert amqp.await_count(channel, queue, 0, timeout_s=0.8)["message_count"] == 0
    assert amqp.get_record(channel, queue) == (None, None)


# -- dead-lettering on maxlen ----------------------------------------------------------------


def test_drop_head_dead_letters_the_oldest_with_reason_maxlen(amqp):
    channel = amqp.channel()
    dlq = amqp.queue("dlq", channel)
    queue = amqp.queue("q", channel, arguments=dead_letter_to(dlq, **{"x-max-length": 2}))
    channel.confirm_delivery()
    assert [amqp.confirm(channel, queue, body) for body in ["m1", "m2", "m3"]] == ["ack"] * 3
    assert amqp.await_count(channel, dlq, 1, timeout_s=0.3)["message_count"] == 1
    [dead] = amqp.drain_records(channel, dlq)
    assert (dead["body"], dead["routing_key"]) == ("m1", dlq)
    assert death_of(dead) == ("maxlen", queue, 1)
    assert dead["props"]["headers"]["x-first-death-reason"] == "maxlen"
    assert amqp.bodies(channel, queue) == ["m2", "m3"]


def test_reject_publish_dlx_nacks_and_dead_letters_the_refused_message(amqp):
    channel = amqp.channel()
    dlq = amqp.queue("dlq", channel)
    arguments = dead_letter_to(dlq, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    queue = amqp.queue("q", channel, arguments=arguments)
    channel.confirm_delivery()
    assert [amqp.confirm(channel, queue, body) for body in ["m1", "m2"]] == ["ack", "nack"]
    assert amqp.await_count(channel, dlq, 1, timeout_s=0.3)["message_count"] == 1
    [dead] = amqp.drain_records(channel, dlq)
    assert (dead["body"], dead["exchange"], dead["routing_key"]) == ("m2", "", dlq)
    assert death_of(dead) == ("maxlen", queue, 1)
    assert dead["props"]["headers"]["x-death"][0]["routing-keys"] == [queue]
    assert amqp.bodies(channel, queue) == ["m1"]


def test_reject_publish_dlx_without_confirms(amqp):
    channel = amqp.channel()
    dlq = amqp.queue("dlq", channel)
    arguments = dead_letter_to(dlq, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    queue = amqp.queue("q", channel, arguments=arguments)
    publish_all(amqp, channel, queue, ["m1", "m2", "m3"])
    assert channel.is_open
    amqp.await_count(channel, dlq, 2, timeout_s=0.3)
    assert amqp.bodies(channel, dlq) == ["m2", "m3"]
    assert amqp.bodies(channel, queue) == ["m1"]


@pytest.mark.parametrize("overflow", ["reject-publish", "reject-publish-dlx"])
def test_routed_to_a_full_and_a_free_queue(amqp, overflow):
    # The length-limit guide: "If a message is routed to multiple queues and rejected by at
    # least one of them, the channel will inform the publisher via basic.nack. The message
    # will still be published to all other queues which can enqueue it."
    channel = amqp.channel()
    dlq = amqp.queue("dlq", channel)
    limits = {"x-max-length-bytes": 4, "x-overflow": overflow}
    full = amqp.queue("full", channel, arguments=dead_letter_to(dlq, **limits))
    free = amqp.queue("free", channel)
    exchange = amqp.exchange("topic", "topic", channel)
    channel.queue_bind(full, exchange, routing_key="a.*")
    channel.queue_bind(free, exchange, routing_key="*.b")
    channel.confirm_delivery()
    outcomes = [
        amqp.confirm(channel, "a.b", body, exchange=exchange) for body in ["pre1", "m1", "m2"]
    ]
    assert outcomes == ["ack", "nack", "nack"]
    assert amqp.bodies(channel, full) == ["pre1"]
    assert amqp.bodies(channel, free) == ["pre1", "m1", "m2"]
    dead_lettered = ["m1", "m2"] if overflow == "reject-publish-dlx" else []
    amqp.await_count(channel, dlq, len(dead_lettered), timeout_s=0.3)
    assert amqp.bodies(channel, dlq) == dead_lettered


# -- x-expires -------------------------------------------------------------------------------


def test_expires_countdown_starts_when_the_last_consumer_goes(amqp, mgmt):
    # x-expires 500 ms: a consumer keeps the queue past its expiry; after the cancel the
    # queue lives another 500 ms (the countdown restarts), then goes.
    connection = amqp.connect()
    channel = connection.channel()
    queue = amqp.queue("q", channel, arguments={"x-expires": 500})
    tag = channel.basic_consume(queue, lambda *_: None)
    amqp.settle(connection, 0.8)
    assert mgmt.queue(queue) is not None
    channel.basic_cancel(tag)
    cancelled = time.monotonic()
    time.sleep(0.3)
    assert mgmt.queue(queue) is not None
    amqp.eventually(lambda: mgmt.queue(queue) is None, timeout_s=1.0)
    assert time.monotonic() - cancelled >= 0.45


def test_expires_consumer_on_another_connection_keeps_the_queue(amqp, mgmt):
    owner, consumer = amqp.connect(), amqp.connect()
    queue = amqp.queue("q", owner.channel(), arguments={"x-expires": 500})
    consumer.channel().basic_consume(queue, lambda *_: None)
    amqp.settle(consumer, 0.8)
    assert mgmt.queue(queue) is not None
    consumer.close()  # the consumer goes with its connection
    amqp.eventually(lambda: mgmt.queue(queue) is None, timeout_s=1.0)


# -- x-queue-mode ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["lazy", "default"])
def test_queue_mode_accepted(amqp, mode):
    channel = amqp.channel()
    arguments = {"x-queue-mode": mode}
    queue = amqp.name("q")
    assert amqp.declare_counts(channel, queue, arguments=arguments) == {
        "ok": True,
        "message_count": 0,
        "consumer_count": 0,
    }
    channel.confirm_delivery()  # RabbitMQ may count a lazy queue before it took them in
    publish_all(amqp, channel, queue, ["m1", "m2"])
    assert amqp.declare_counts(channel, queue, arguments=arguments) == {
        "ok": True,
        "message_count": 2,
        "consumer_count": 0,
    }
    assert amqp.bodies(channel, queue) == ["m1", "m2"]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("eager", "\"unsupported queue mode 'eager'\""), (5, "{unacceptable_type,signedint}")],
)
def test_queue_mode_invalid(amqp, mode, reason):
    queue = amqp.name("q")
    assert amqp.declare_counts(amqp.channel(), queue, arguments={"x-queue-mode": mode}) == {
        "closed": "channel",
        "code": 406,
        "text": f"PRECONDITION_FAILED - invalid arg 'x-queue-mode' for queue '{queue}'"
        f" in vhost '/': {reason}",
    }


# -- what dead-lettering keeps ---------------------------------------------------------------

DELIVERY_MODES = [("persistent", 2), ("transient", 1), ("unset", None)]


@pytest.mark.parametrize("reason", ["rejected", "expired", "maxlen"])
def test_dead_lettered_messages_keep_their_delivery_mode(amqp, reason):
    channel = amqp.channel()
    dlq = amqp.queue("dlq", channel, durable=True)
    arguments = dead_letter_to(dlq)
    if reason == "maxlen":
        arguments["x-max-length"] = 0
    queue = amqp.queue("q", channel, durable=True, arguments=arguments)
    channel.confirm_delivery()
    for body, mode in DELIVERY_MODES:
        expiration = "0" if reason == "expired" else None
        amqp.publish(channel, queue, body, delivery_mode=mode, expiration=expiration)
    if reason == "rejected":
        for _ in DELIVERY_MODES:
            _record, tag = amqp.get_record(channel, queue, ack=False)
            channel.basic_reject(tag, requeue=False)
    amqp.await_count(channel, dlq, len(DELIVERY_MODES), timeout_s=0.3)
    dead = amqp.drain_records(channel, dlq)
    assert [(r["body"], r["props"].get("delivery_mode")) for r in dead] == DELIVERY_MODES
    assert [death_of(r) for r in dead] == [(reason, queue, 1)] * len(DELIVERY_MODES)
