"""Publisher confirms (the `confirms.*` golden scenarios and more) and transactions.

With pika's blocking channel in confirm mode every publish waits for its confirm: it returns
on basic.ack, raises NackError on basic.nack and UnroutableError when a basic.return came
first. `outcome` turns that into the golden files' `"ack"` / `"nack"` / `"returned"`.
"""

from __future__ import annotations

import struct

import pika.exceptions
import pytest

REJECT_AT_ONE = {"x-max-length": 1, "x-overflow": "reject-publish"}


def outcome(amqp, channel, routing_key, body, exchange="", mandatory=False) -> dict:
    """One confirmed publish, as `{"confirm": ...}` plus the returns for `"returned"`."""
    try:
        amqp.publish(channel, routing_key, body, exchange=exchange, mandatory=mandatory)
    except pika.exceptions.NackError:
        return {"confirm": "nack"}
    except pika.exceptions.UnroutableError as unroutable:
        returns = [_returned(r.method, r.body) for r in unroutable.messages]
        return {"confirm": "returned", "returns": returns}
    return {"confirm": "ack"}


def _returned(method, body: bytes) -> dict:
    return {
        "reply_code": method.reply_code,
        "reply_text": method.reply_text,
        "exchange": method.exchange,
        "routing_key": method.routing_key,
        "body": body.decode(),
    }


def confirms(amqp, channel, routing_key, bodies, exchange="") -> list[str]:
    return [amqp.confirm(channel, routing_key, body, exchange) for body in bodies]


def test_basic_acks(amqp, golden):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True)
    channel.confirm_delivery()
    observed = {
        "confirms": confirms(amqp, channel, queue, ["m1", "m2", "m3"]),
        "queue": amqp.bodies(channel, queue),
    }
    assert observed == golden("confirms.basic_acks")


def test_quorum_acks(amqp, golden):
    channel = amqp.channel()
    queue = amqp.queue("qq", channel, durable=True, arguments={"x-queue-type": "quorum"})
    channel.confirm_delivery()
    observed = {
        "confirms": confirms(amqp, channel, queue, ["m1", "m2", "m3"]),
        "queue": amqp.bodies(channel, queue),
    }
    assert observed == golden("confirms.quorum_acks")


def test_confirm_then_tx(amqp, golden):
    channel = amqp.channel()
    channel.confirm_delivery()
    observed = {"tx_select": amqp.attempt(channel.tx_select)}
    assert observed == golden("confirms.confirm_then_tx")


def test_tx_then_confirm(amqp):
    channel = amqp.channel()
    channel.tx_select()
    assert amqp.attempt(channel.confirm_delivery) == {
        "closed": "channel",
        "code": 406,
        "text": "PRECONDITION_FAILED - cannot switch from tx to confirm mode",
    }


def test_mandatory_full_queue(amqp, golden):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True, arguments=REJECT_AT_ONE)
    channel.confirm_delivery()
    observed = {
        "first": outcome(amqp, channel, queue, "m1", mandatory=True),
        "second": outcome(amqp, channel, queue, "m2", mandatory=True),
    }
    assert observed == golden("confirms.mandatory_full_queue")


def test_max_length_zero_reject_with_consumer(amqp, golden):
    consumer = amqp.connect()
    channel = consumer.channel()
    arguments = {"x-max-length": 0, "x-overflow": "reject-publish"}
    queue = amqp.queue("q", channel, durable=True, arguments=arguments)
    got: list[str] = []
    channel.basic_consume(queue, lambda ch, m, p, body: got.append(body.decode()), auto_ack=True)
    publisher = amqp.channel()
    publisher.confirm_delivery()
    result = amqp.confirm(publisher, queue, "m1")
    amqp.settle(consumer, 0.3)
    observed = {"confirm": result, "consumed": got}
    assert observed == golden("confirms.max_length_zero_reject_with_consumer")


def _fanout_to(amqp, channel, *queues: str) -> str:
    exchange = amqp.exchange("fan", "fanout", channel)
    for queue in queues:
        channel.queue_bind(queue, exchange)
    return exchange


def test_two_queues_both_full(amqp, golden):
    channel = amqp.channel()
    a = amqp.queue("a", channel, durable=True, arguments=REJECT_AT_ONE)
    b = amqp.queue("b", channel, durable=True, arguments=REJECT_AT_ONE)
    exchange = _fanout_to(amqp, channel, a, b)
    channel.confirm_delivery()
    observed = {
        "confirms": confirms(amqp, channel, "", ["m1", "m2"], exchange=exchange),
        "a": amqp.bodies(channel, a),
        "b": amqp.bodies(channel, b),
    }
    assert observed == golden("confirms.two_queues_both_full")


def test_two_queues_one_rejects(amqp, golden):
    channel = amqp.channel()
    full = amqp.queue("full", channel, durable=True, arguments=REJECT_AT_ONE)
    normal = amqp.queue("normal", channel, durable=True)
    exchange = _fanout_to(amqp, channel, full, normal)
    channel.confirm_delivery()
    observed = {
        "prefill": amqp.confirm(channel, full, "pre"),
        "fanout_publish": amqp.confirm(channel, "", "m1", exchange=exchange),
        "channel_open": channel.is_open,
        "full_queue": amqp.bodies(channel, full),
        "normal_queue": amqp.bodies(channel, normal),
    }
    assert observed == golden("confirms.two_queues_one_rejects")


def test_unroutable(amqp, golden):
    channel = amqp.channel()
    channel.confirm_delivery()
    nobody = f"{amqp.prefix}.nobody"
    observed = {
        "mandatory": outcome(amqp, channel, nobody, "m1", exchange="amq.direct", mandatory=True),
        "not_mandatory": outcome(amqp, channel, nobody, "m2", exchange="amq.direct"),
        "channel_open": channel.is_open,
    }
    assert amqp.normalise(observed, "confirms.unroutable") == golden("confirms.unroutable")


def test_unroutable_no_confirm_return(amqp, golden):
    connection = amqp.connect()
    channel = connection.channel()
    returns: list[dict] = []
    channel.add_on_return_callback(
        lambda ch, method, p, body: returns.append(_returned(method, body))
    )
    amqp.publish(channel, f"{amqp.prefix}.nobody", "m1", mandatory=True)
    amqp.pump(connection, lambda: bool(returns))
    amqp.settle(connection, 0.2)
    scenario = "confirms.unroutable_no_confirm_return"
    assert amqp.normalise({"returns": returns}, scenario) == golden(scenario)


def test_acks_with_multiple_cover_every_publish_once(amqp, raw_amqp):
    # On a raw socket the acks' `multiple` flags are visible. RabbitMQ confirms a burst of
    # publishes with some basic.ack(multiple=True); every tag is confirmed exactly once.
    queue = amqp.queue("q")
    raw = raw_amqp()
    raw.open_channel(1)
    raw.send_method(1, 85, 10, b"\x00")  # confirm.select, nowait=false
    raw.expect_method(1, (85, 11))
    count = 200
    raw.send(b"".join(raw.publish_frames(1, "", queue, b"m") for _ in range(count)))
    confirmed: list[int] = []
    multiple_acks = 0
    while len(confirmed) < count:
        frame = raw.expect_method(1, (60, 80))  # basic.ack, never a nack
        tag, multiple = struct.unpack(">Q?", frame.payload[4:13])
        newly = list(range(len(confirmed) + 1, tag + 1)) if multiple else [tag]
        assert newly and newly[0] == len(confirmed) + 1, (tag, multiple, len(confirmed))
        confirmed += newly
        multiple_acks += multiple
    assert confirmed == list(range(1, count + 1))
    assert multiple_acks > 0
    assert amqp.passive_count(amqp.channel(), queue) == (count, 0)


# -- transactions ----------------------------------------------------------------------------


def test_tx_publish_invisible_until_commit(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    observer = amqp.channel()
    channel.tx_select()
    amqp.publish(channel, queue, "m1")
    amqp.publish(channel, queue, "m2")
    amqp.sync(channel)
    assert amqp.passive_count(observer, queue) == (0, 0)
    channel.tx_commit()
    assert amqp.bodies(observer, queue) == ["m1", "m2"]


def test_tx_rollback_discards_publishes(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    channel.tx_select()
    amqp.publish(channel, queue, "dropped")
    channel.tx_rollback()
    amqp.publish(channel, queue, "kept")
    channel.tx_commit()
    assert amqp.bodies(amqp.channel(), queue) == ["kept"]


def _tx_ack_then(amqp, finish: str) -> list[tuple[str, bool]]:
    """Get m1 and m2, ack m1 inside a transaction, `finish` it, close: what is left."""
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    for body in ("m1", "m2"):
        amqp.publish(channel, queue, body)
    channel.tx_select()
    first, _, _ = channel.basic_get(queue)
    channel.basic_get(queue)
    channel.basic_ack(first.delivery_tag)
    getattr(channel, finish)()
    channel.close()  # the unacked messages go back to the queue
    return amqp.drain(amqp.channel(), queue)


def test_tx_ack_applies_on_commit(amqp):
    assert _tx_ack_then(amqp, "tx_commit") == [("m2", True)]


def test_tx_ack_discarded_on_rollback(amqp):
    assert _tx_ack_then(amqp, "tx_rollback") == [("m1", True), ("m2", True)]


@pytest.mark.parametrize("method", ["tx_commit", "tx_rollback"])
def test_tx_method_without_select(amqp, method):
    channel = amqp.channel()
    assert amqp.attempt(getattr(channel, method)) == {
        "closed": "channel",
        "code": 406,
        "text": "PRECONDITION_FAILED - channel is not transactional",
    }
