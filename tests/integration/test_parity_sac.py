"""Single active consumer hand-over while the active consumer holds unacked messages.

Recorded from RabbitMQ 3.10.8: five messages, consumer A (prefetch 2) active, consumer B
(auto-ack) waiting. A classic queue hands over when A's messages come back (its channel
closes), and B gets the returned ones first; a quorum queue hands over at the cancel, and
returned messages go behind the ready ones. `*` marks a redelivery.
"""

from __future__ import annotations

import pytest

EXPECTED = {
    ("classic", "close"): "A:m1 A:m2 |closeA B:m1* B:m2* B:m3 B:m4 B:m5",
    ("classic", "nack-then-cancel"): (
        "A:m1 A:m2 A:m1* |cancelA |closeA B:m1* B:m2* B:m3 B:m4 B:m5"
    ),
    ("classic", "reject-then-close"): ("A:m1 A:m2 A:m1* A:m2* |closeA B:m1* B:m2* B:m3 B:m4 B:m5"),
    ("quorum", "close"): "A:m1 A:m2 |closeA B:m3 B:m4 B:m5 B:m1* B:m2*",
    ("quorum", "nack-then-cancel"): ("A:m1 A:m2 A:m3 |cancelA B:m4 B:m5 B:m1* |closeA B:m2* B:m3*"),
    ("quorum", "reject-then-close"): ("A:m1 A:m2 A:m3 A:m4 |closeA B:m5 B:m1* B:m2* B:m3* B:m4*"),
}


@pytest.mark.parametrize(
    ("queue_type", "variant"), EXPECTED, ids=[f"{kind}-{how}" for kind, how in EXPECTED]
)
def test_single_active_consumer_hand_over(amqp, queue_type, variant):
    connection = amqp.connect()
    channel = connection.channel()
    queue = amqp.name("sac")
    arguments = {"x-single-active-consumer": True, "x-queue-type": queue_type}
    channel.queue_declare(queue, durable=True, arguments=arguments)
    for number in range(1, 6):
        amqp.publish(channel, queue, f"m{number}")
    log: list[str] = []
    held = []

    def on_message(name: str):
        def record(_channel, method, _properties, body) -> None:
            if name == "A":
                held.append(method)
            log.append(f"{name}:{body.decode()}{'*' if method.redelivered else ''}")

        return record

    a = connection.channel()
    a.basic_qos(prefetch_count=2)
    b = connection.channel()
    a.basic_consume(queue, on_message("A"), consumer_tag="A")
    amqp.settle(connection, 0.3)
    b.basic_consume(queue, on_message("B"), consumer_tag="B", auto_ack=True)
    amqp.settle(connection, 0.3)
    if variant == "nack-then-cancel":
        a.basic_nack(held[0].delivery_tag, requeue=True)
        amqp.settle(connection, 0.3)
        log.append("|cancelA")
        a.basic_cancel("A")
        amqp.settle(connection, 0.3)
    elif variant == "reject-then-close":
        for method in held[:2]:
            a.basic_reject(method.delivery_tag, requeue=True)
            amqp.settle(connection, 0.3)
    log.append("|closeA")
    a.close()
    amqp.settle(connection, 0.4)
    assert " ".join(log) == EXPECTED[queue_type, variant]
