"""basic.get, ack / nack / reject (multiple, requeue), basic.recover, and delivery tags.

A classic queue puts a requeued message back at its original position, and it comes back
with redelivered=True.
"""

from __future__ import annotations

import pytest


def queue_with(amqp, channel, count: int) -> str:
    """A queue holding m1..m<count>, published with confirms."""
    queue = amqp.queue("q", channel)
    amqp.fill(queue, count)
    return queue


def get_tags(channel, queue: str, count: int) -> list[int]:
    """basic.get `count` messages without acking; their delivery tags."""
    return [channel.basic_get(queue)[0].delivery_tag for _ in range(count)]


def closed_with_unknown_tag(tag: int) -> dict:
    text = f"PRECONDITION_FAILED - unknown delivery tag {tag}"
    return {"closed": "channel", "code": 406, "text": text}


# -- basic.get --------------------------------------------------------------------------------


def test_get_ok_and_get_empty(amqp):
    channel = amqp.channel()
    queue = queue_with(amqp, channel, 2)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    fields = (method.exchange, method.routing_key, method.redelivered, method.message_count)
    assert (body, fields) == (b"m1", ("", queue, False, 1))
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.message_count) == (b"m2", 0)
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)


def test_get_keeps_properties(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    properties = {
        "content_type": "text/plain",
        "headers": {"k": "v", "n": 7},
        "delivery_mode": 2,
        "priority": 3,
        "correlation_id": "c",
        "reply_to": "r",
        "message_id": "id",
        "timestamp": 1_700_000_000,
        "type": "t",
        "app_id": "a",
    }
    amqp.publish(channel, queue, "m1", **properties)
    _, props, _ = channel.basic_get(queue, auto_ack=True)
    assert {key: getattr(props, key) for key in properties} == properties


def test_delivery_tags_count_up_per_channel(amqp):
    channel = amqp.channel()
    queue = queue_with(amqp, channel, 3)
    assert get_tags(channel, queue, 2) == [1, 2]
    other = amqp.channel()
    assert get_tags(other, queue, 1) == [1]


# -- ack --------------------------------------------------------------------------------------


def test_ack_multiple(amqp):
    channel = amqp.channel()
    queue = queue_with(amqp, channel, 3)
    tags = get_tags(channel, queue, 3)
    channel.basic_ack(tags[1], multiple=True)  # m1 and m2
    channel.close()
    assert amqp.drain(amqp.channel(), queue) == [("m3", True)]


def test_ack_zero_multiple_acks_everything(amqp):
    channel = amqp.channel()
    queue = queue_with(amqp, channel, 3)
    get_tags(channel, queue, 2)
    channel.basic_ack(0, multiple=True)
    channel.close()
    assert amqp.drain(amqp.channel(), queue) == [("m3", False)]


def test_ack_twice(amqp):
    channel = amqp.channel()
    queue = queue_with(amqp, channel, 1)
    (tag,) = get_tags(channel, queue, 1)
    channel.basic_ack(tag)
    channel.basic_ack(tag)
    assert amqp.attempt(lambda: amqp.sync(channel)) == closed_with_unknown_tag(tag)


def test_ack_on_another_channel(amqp):
    connection = amqp.connect()
    channel, other = connection.channel(), connection.channel()
    queue = queue_with(amqp, channel, 1)
    (tag,) = get_tags(channel, queue, 1)
    other.basic_ack(tag)
    assert amqp.attempt(lambda: amqp.sync(other)) == closed_with_unknown_tag(tag)
    channel.close()
    assert amqp.drain(connection.channel(), queue) == [("m1", True)]


# -- nack and reject --------------------------------------------------------------------------


def test_reject_requeue_goes_back_to_its_original_position(amqp):
    channel = amqp.channel()
    queue = queue_with(amqp, channel, 5)
    tags = get_tags(channel, queue, 3)
    channel.basic_reject(tags[2], requeue=True)  # m3
    channel.basic_reject(tags[0], requeue=True)  # m1
    assert amqp.drain(channel, queue) == [("m1", True), ("m3", True), ("m4", False), ("m5", False)]


def test_nack_multiple_requeue(amqp):
    channel = amqp.channel()
    queue = queue_with(amqp, channel, 4)
    tags = get_tags(channel, queue, 3)
    channel.basic_nack(tags[1], multiple=True, requeue=True)  # m1 and m2; m3 stays unacked
    assert amqp.drain(channel, queue) == [("m1", True), ("m2", True), ("m4", False)]


@pytest.mark.parametrize("settle", ["reject", "nack", "nack-multiple"])
def test_without_requeue_the_message_is_dropped(amqp, settle):
    channel = amqp.channel()
    queue = queue_with(amqp, channel, 3)
    tags = get_tags(channel, queue, 2)
    if settle == "reject":
        channel.basic_reject(tags[0], requeue=False)
        channel.basic_reject(tags[1], requeue=False)
    elif settle == "nack":
        channel.basic_nack(tags[0], requeue=False)
        channel.basic_nack(tags[1], requeue=False)
    else:
        channel.basic_nack(tags[1], multiple=True, requeue=False)
    channel.close()
    assert amqp.drain(amqp.channel(), queue) == [("m3", False)]


# -- recover ----------------------------------------------------------------------------------


def test_recover_requeue_redelivers_unacked(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    queue = queue_with(amqp, channel, 2)
    got: list[tuple[str, bool, int]] = []
    channel.basic_consume(
        queue,
        lambda ch, method, props, body: got.append(
            (body.decode(), method.redelivered, method.delivery_tag)
        ),
    )
    amqp.pump(connection, lambda: len(got) == 2)
    channel.basic_recover(requeue=True)
    amqp.pump(connection, lambda: len(got) == 4)
    assert got == [("m1", False, 1), ("m2", False, 2), ("m1", True, 3), ("m2", True, 4)]


def test_recover_without_requeue_is_not_implemented(amqp):
    channel = amqp.channel()
    queue = queue_with(amqp, channel, 1)
    get_tags(channel, queue, 1)
    assert amqp.attempt(lambda: channel.basic_recover(requeue=False)) == {
        "closed": "connection",
        "code": 540,
        "text": "NOT_IMPLEMENTED - requeue=false",
    }
