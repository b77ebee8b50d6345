"""queue.declare / bind / purge / delete: flags, lifecycles, counts and argument errors.

`errors.*` golden replays (test_errors_golden.py) cover re-declare mismatches, exclusive
access from other connections and delete if-unused / if-empty texts.
"""

from __future__ import annotations

import re

SERVER_NAMED = re.compile(r"amq\.gen-[A-Za-z0-9_-]{22}")


def queue_exists(amqp, queue: str) -> bool:
    """A passive declare on a connection of its own (exclusive queues answer 405 there)."""
    result = amqp.attempt(lambda: amqp.channel().queue_declare(queue, passive=True))
    assert result.get("ok") or result.get("code") in (404, 405), result
    return result.get("code") != 404


def queue_goes_away(amqp, queue: str) -> None:
    """The queue is deleted, at once or shortly after (deletion may trail the reply)."""
    amqp.eventually(lambda: not queue_exists(amqp, queue))


def test_declare_ok_counts_ready_messages_and_consumers(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    queue = amqp.queue("q", channel)
    channel.confirm_delivery()
    for body in ("m1", "m2", "m3", "m4"):
        amqp.publish(channel, queue, body)
    channel.basic_get(queue)  # an unacked message is not counted
    ok = connection.channel().queue_declare(queue).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (queue, 3, 0)
    delivered = []
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=2)
    consumer.basic_consume(queue, lambda ch, method, props, body: delivered.append(body))
    amqp.pump(connection, lambda: len(delivered) == 2)
    ok = connection.channel().queue_declare(queue).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (queue, 1, 1)


def test_passive_declare_counts(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    channel.confirm_delivery()
    for body in ("m1", "m2"):
        amqp.publish(channel, queue, body)
    assert amqp.passive_count(channel, queue) == (2, 0)


def test_server_named_queue(amqp):
    channel = amqp.channel()
    first = channel.queue_declare("", exclusive=True).method.queue
    second = channel.queue_declare("", exclusive=True).method.queue
    assert SERVER_NAMED.fullmatch(first) and SERVER_NAMED.fullmatch(second)
    assert first != second
    amqp.publish(channel, first, "m1")
    assert amqp.bodies(channel, first) == ["m1"]


def test_passive_declare_of_empty_name(amqp):
    channel = amqp.channel()
    result = amqp.attempt(lambda: channel.queue_declare("", passive=True))
    assert result == {
        "closed": "channel",
        "code": 404,
        "text": "NOT_FOUND - no queue '' in vhost '/'",
    }


def test_durable_queue_declare(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True)
    assert amqp.declare_counts(amqp.channel(), queue, durable=True) == {
        "ok": True,
        "message_count": 0,
        "consumer_count": 0,
    }


def test_exclusive_queue_is_deleted_with_its_connection(amqp):
    owner = amqp.connect()
    queue = amqp.queue("q", owner.channel(), exclusive=True)
    assert queue_exists(amqp, queue)
    owner.close()
    queue_goes_away(amqp, queue)


def test_exclusive_queue_survives_its_channel(amqp):
    owner = amqp.connect()
    channel = owner.channel()
    queue = amqp.queue("q", channel, exclusive=True)
    channel.close()
    assert amqp.passive_count(owner.channel(), queue) == (0, 0)


def test_auto_delete_queue_never_consumed_stays(amqp):
    connection = amqp.connect()
    queue = amqp.queue("q", connection.channel(), auto_delete=True)
    connection.close()
    assert queue_exists(amqp, queue)


def test_auto_delete_queue_goes_when_last_consumer_cancels(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, auto_delete=True)
    first = channel.basic_consume(queue, lambda *_: None)
    second = channel.basic_consume(queue, lambda *_: None)
    channel.basic_cancel(first)
    assert queue_exists(amqp, queue)
    channel.basic_cancel(second)
    queue_goes_away(amqp, queue)


def test_auto_delete_queue_goes_when_consumer_channel_closes(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, auto_delete=True)
    channel.basic_consume(queue, lambda *_: None)
    channel.close()
    queue_goes_away(amqp, queue)


def test_purge_returns_ready_count_and_keeps_unacked(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    for body in ("m1", "m2", "m3", "m4"):
        amqp.publish(channel, queue, body)
    unacked, _, _ = channel.basic_get(queue)
    assert channel.queue_purge(queue).method.message_count == 3
    assert channel.queue_purge(queue).method.message_count == 0
    channel.basic_nack(unacked.delivery_tag, requeue=True)
    assert amqp.bodies(channel, queue) == ["m1"]


def test_purge_missing_queue(amqp):
    channel = amqp.channel()
    missing = amqp.name("missing")
    result = amqp.attempt(lambda: channel.queue_purge(missing))
    text = f"NOT_FOUND - no queue '{missing}' in vhost '/'"
    assert result == {"closed": "channel", "code": 404, "text": text}


def test_delete_returns_ready_count(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    for body in ("m1", "m2", "m3"):
        amqp.publish(channel, queue, body)
    unacked, _, _ = channel.basic_get(queue)
    assert channel.queue_delete(queue).method.message_count == 2
    queue_goes_away(amqp, queue)
    channel.basic_ack(unacked.delivery_tag)  # acking a message of a deleted queue is fine
    amqp.sync(channel)


def test_delete_if_empty_and_if_unused_when_allowed(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    assert channel.queue_delete(queue, if_unused=True, if_empty=True).method.message_count == 0
    queue_goes_away(amqp, queue)


def test_bind_and_unbind(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    channel.queue_bind(queue, "amq.direct", queue)
    amqp.publish(channel, queue, "bound", exchange="amq.direct")
    channel.queue_unbind(queue, "amq.direct", queue)
    amqp.publish(channel, queue, "unbound", exchange="amq.direct")
    assert amqp.bodies(channel, queue) == ["bound"]


def test_deleting_a_queue_removes_its_bindings(amqp):
    channel = amqp.channel()
    exchange = amqp.exchange("x", "fanout", channel)
    queue = amqp.queue("q", channel)
    channel.queue_bind(queue, exchange)
    channel.queue_delete(queue)
    channel.queue_declare(queue)
    amqp.publish(channel, "", "m1", exchange=exchange)
    assert amqp.bodies(channel, queue) == []


def test_unsupported_queue_type(amqp):
    channel = amqp.channel()
    queue = amqp.name("q")
    result = amqp.attempt(lambda: channel.queue_declare(queue, arguments={"x-queue-type": "nope"}))
    text = (
        f"PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue '{queue}' in vhost '/':"
        " \"unsupported queue type 'nope'\""
    )
    assert result == {"closed": "channel", "code": 406, "text": text}


def test_negative_max_length(amqp):
    channel = amqp.channel()
    queue = amqp.name("q")
    result = amqp.attempt(lambda: channel.queue_declare(queue, arguments={"x-max-length": -1}))
    text = (
        f"PRECONDITION_FAILED - invalid arg 'x-max-length' for queue '{queue}' in vhost '/':"
        " {value_negative,-1}"
    )
    assert result == {"closed": "channel", "code": 406, "text": text}
