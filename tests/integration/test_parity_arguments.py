"""Edge cases a comparison with RabbitMQ 3.10.8 covered: passive declares of unusual names,
quorum queue argument values RabbitMQ accepts, and the 406 texts of consumer arguments.

Every expectation here was recorded from RabbitMQ 3.10.8 on the wire (pika, one action per
channel); the texts are asserted as RabbitMQ words them.
"""

from __future__ import annotations

import pytest

NOT_FOUND_QUEUE = "NOT_FOUND - no queue '{}' in vhost '/'"
NOT_FOUND_EXCHANGE = "NOT_FOUND - no exchange '{}' in vhost '/'"
LONG = "p" * 255


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("", NOT_FOUND_QUEUE.format("")),
        ("amq.foo", NOT_FOUND_QUEUE.format("amq.foo")),
        ("amq.direct", NOT_FOUND_QUEUE.format("amq.direct")),  # an exchange's name
        ("amq.default", NOT_FOUND_QUEUE.format("amq.default")),
        ("amq.gen-xyz", NOT_FOUND_QUEUE.format("amq.gen-xyz")),
    ],
)
def test_passive_queue_declare_of_edge_names(amqp, name, text):
    observed = amqp.attempt(lambda: amqp.channel().queue_declare(name, passive=True))
    assert observed == {"closed": "channel", "code": 404, "text": text}


@pytest.mark.parametrize(
    ("name", "observed"),
    [
        ("amq.direct", {"ok": True}),
        ("amq.rabbitmq.trace", {"ok": True}),
        (
            "amq.nope",
            {"closed": "channel", "code": 404, "text": NOT_FOUND_EXCHANGE.format("amq.nope")},
        ),
        (
            "amq.default",
            {"closed": "channel", "code": 404, "text": NOT_FOUND_EXCHANGE.format("amq.default")},
        ),
        (
            "amq.rabbitmq.event",
            {
                "closed": "channel",
                "code": 404,
                "text": NOT_FOUND_EXCHANGE.format("amq.rabbitmq.event"),
            },
        ),
        (
            "",
            {
                "closed": "channel",
                "code": 403,
                "text": "ACCESS_REFUSED - operation not permitted on the default exchange",
            },
        ),
    ],
)
def test_passive_exchange_declare_of_edge_names(amqp, name, observed):
    def declare() -> None:
        amqp.channel().exchange_declare(name, passive=True)

    assert amqp.attempt(declare) == observed


@pytest.mark.parametrize("kind", ["queue", "exchange"])
def test_passive_declare_of_a_255_byte_name(amqp, kind):
    channel = amqp.channel()
    if kind == "queue":
        observed = amqp.attempt(lambda: channel.queue_declare(LONG, passive=True))
        text = NOT_FOUND_QUEUE.format(LONG)
    else:
        observed = amqp.attempt(lambda: channel.exchange_declare(LONG, passive=True))
        text = NOT_FOUND_EXCHANGE.format(LONG)
    assert observed["code"] == 404
    assert observed["text"] == text.encode()[:252].decode() + "..."


def test_passive_declare_names_the_other_kind(amqp):
    queue, exchange = amqp.queue("q"), amqp.exchange("x")
    channel = amqp.channel()
    assert amqp.attempt(lambda: channel.exchange_declare(queue, passive=True)) == {
        "closed": "channel",
        "code": 404,
        "text": NOT_FOUND_EXCHANGE.format(queue),
    }
    channel = amqp.channel()
    assert amqp.attempt(lambda: channel.queue_declare(exchange, passive=True)) == {
        "closed": "channel",
        "code": 404,
        "text": NOT_FOUND_QUEUE.format(exchange),
    }


QQ = {"x-queue-type": "quorum"}


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-delivery-limit": -1},
        {"x-delivery-limit": "str"},
        {"x-overflow": "reject-publish-dlx"},
        {"x-overflow": "reject-publish-dlx", "x-dead-letter-strategy": "at-least-once"},
    ],
    ids=[
        "delivery-limit-negative",
        "delivery-limit-string",
        "reject-publish-dlx",
        "reject-publish-dlx-at-least-once",
    ],
)
def test_quorum_queue_accepts_what_rabbitmq_accepts(amqp, arguments):
    observed = amqp.attempt(
        lambda: amqp.channel().queue_declare(
            amqp.name("qq"), durable=True, arguments={**QQ, **arguments}
        )
    )
    assert observed == {"ok": True}


@pytest.mark.parametrize(
    ("limit", "left"), [(-1, []), ("str", ["m"])], ids=["negative-drops", "string-no-limit"]
)
def test_quorum_delivery_limit_of_odd_values(amqp, limit, left):
    """A negative limit drops a message at its first return, as 0 does; a limit that is not
    an integer never applies (Erlang orders numbers below binaries)."""
    connection = amqp.connect()
    channel = connection.channel()
    queue = amqp.name("qq")
    channel.queue_declare(queue, durable=True, arguments={**QQ, "x-delivery-limit": limit})
    amqp.publish(channel, queue, "m")
    for _ in range(3):
        amqp.settle(connection, 0.3)  # a quorum queue takes a nack asynchronously
        method, _, _ = channel.basic_get(queue)
        if method is not None:
            channel.basic_nack(method.delivery_tag, requeue=True)
    amqp.settle(connection, 0.3)
    assert amqp.bodies(channel, queue) == left


CONSUMER_ARGUMENT_CASES = [
    ("x-priority", "str", '"expected integer, got longstr"'),
    ("x-priority", True, '"expected integer, got bool"'),
    ("x-priority", {"a": 1}, '"expected integer, got table"'),
    ("x-priority", [1], '"expected integer, got array"'),
    ("x-cancel-on-ha-failover", "str", "{unacceptable_type,longstr}"),
    ("x-cancel-on-ha-failover", -1, "{unacceptable_type,signedint}"),
    ("x-cancel-on-ha-failover", 2**40, "{unacceptable_type,long}"),
    ("x-cancel-on-ha-failover", [1], "{unacceptable_type,array}"),
]


@pytest.mark.parametrize(("key", "value", "reason"), CONSUMER_ARGUMENT_CASES)
def test_consumer_argument_of_the_wrong_type(amqp, key, value, reason):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    observed = amqp.attempt(
        lambda: channel.basic_consume(queue, lambda *a: None, arguments={key: value})
    )
    text = f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{queue}' in vhost '/': {reason}"
    assert observed == {"closed": "channel", "code": 406, "text": text}


@pytest.mark.parametrize("value", ["first", -1, 0, True])
def test_stream_offset_on_a_classic_queue(amqp, value):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    observed = amqp.attempt(
        lambda: channel.basic_consume(queue, lambda *a: None, arguments={"x-stream-offset": value})
    )
    text = (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue '{queue}' in vhost '/'"
        " of queue type rabbit_classic_queue"
    )
    assert observed == {"closed": "channel", "code": 406, "text": text}


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-priority": -1},
        {"x-priority": 2**40},
        {"x-cancel-on-ha-failover": True},
        {"x-other": "a"},
    ],
)
def test_consumer_arguments_rabbitmq_accepts(amqp, arguments):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    tag = channel.basic_consume(queue, lambda *a: None, arguments=arguments)
    assert channel.basic_cancel(tag) == []
