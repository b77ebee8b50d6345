"""What a publish's properties do, when a publisher sends the same property bytes again.

The broker reads a publish's property bytes once and remembers what they ask of the next
publish with the same bytes (`warren.runtime.channel._SETTLED`). These tests publish each
set of properties several times and check that every copy gets what the first one got:
its priority, its expiration, its CC and BCC routing, its user-id check. They pass
against RabbitMQ as they do against Warren.
"""

from __future__ import annotations

import pika
import pytest

COPIES = 3


def test_priority_of_repeated_properties_orders_every_copy(amqp):
    channel = amqp.channel()
    queue = amqp.queue("prio", channel, arguments={"x-max-priority": 10})
    for n in range(COPIES):
        amqp.publish(channel, queue, f"low{n}", priority=1, content_type="text/plain")
        amqp.publish(channel, queue, f"high{n}", priority=7, content_type="text/plain")
    expected = [f"high{n}" for n in range(COPIES)] + [f"low{n}" for n in range(COPIES)]
    assert amqp.bodies(channel, queue) == expected


def test_expiration_of_repeated_properties_expires_every_copy(amqp):
    channel = amqp.channel()
    queue = amqp.queue("ttl", channel)
    for n in range(COPIES):
        amqp.publish(channel, queue, f"gone{n}", expiration="0", delivery_mode=2)
        amqp.publish(channel, queue, f"kept{n}", delivery_mode=2)
    assert amqp.bodies(channel, queue) == [f"kept{n}" for n in range(COPIES)]


def test_cc_and_bcc_of_repeated_properties_route_every_copy(amqp):
    channel = amqp.channel()
    main, cc, bcc = (amqp.queue(name, channel) for name in ("main", "cc", "bcc"))
    for n in range(COPIES):
        amqp.publish(channel, main, f"m{n}", headers={"CC": [cc], "BCC": [bcc]})
    bodies = [f"m{n}" for n in range(COPIES)]
    for n in range(COPIES):  # the CC'd copy keeps CC and loses BCC
        _method, properties, body = channel.basic_get(cc, auto_ack=True)
        assert (body, properties.headers) == (bodies[n].encode(), {"CC": [cc]})
    assert [amqp.bodies(channel, queue) for queue in (main, cc, bcc)] == [bodies, [], bodies]


def test_a_wrong_user_id_is_refused_on_every_copy(amqp):
    queue = amqp.queue("user")
    for _ in range(COPIES):
        channel = amqp.channel()
        amqp.publish(channel, queue, "x", user_id="someone-else")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            amqp.sync(channel)
        assert closed.value.reply_code == 406
    channel = amqp.channel()
    assert amqp.passive_count(channel, queue)[0] == 0
