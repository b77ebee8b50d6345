"""Every `dlx.*` golden scenario, replayed and compared with RabbitMQ 3.10.8's recording.

Each test performs the steps of one scenario with this test's own names, records the same
observations under the same keys, renames its prefix to the golden one and compares the
whole record (x-death `time` is `"<time>"`, see `golden_value`). Queues are durable, as in
the recording.

Timing: where the recording slept before reading a dead-letter queue, these tests poll for
the message for at most that long; where the point is that nothing arrives (purge, delete,
requeue, a dropped cycle) they wait the recorded time out, or a shorter time that still
covers several TTLs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pika.data
import pytest

DEAD_LETTER_WAIT_S = 0.3  # what the recording waited after a reject before reading the DLQ


def dead_letter_setup(amqp, channel, dlx_type="fanout", bind_key="", **arguments):
    """q dead-letters to exchange `dlx` (fanout unless told), which feeds `dlq`."""
    dlx = amqp.exchange("dlx", dlx_type, channel)
    dlq = amqp.queue("dlq", channel, durable=True)
    channel.queue_bind(dlq, dlx, routing_key=bind_key)
    arguments = {"x-dead-letter-exchange": dlx, **arguments}
    queue = amqp.queue("q", channel, durable=True, arguments=arguments)
    return queue, dlq, dlx


def publish_all(amqp, channel, queue: str, bodies: list[str]) -> None:
    for body in bodies:
        amqp.publish(channel, queue, body)
    amqp.sync(channel)


def reject_first(amqp, channel, queue: str, requeue: bool = False) -> None:
    """basic.get one message and reject it."""
    _record, tag = amqp.get_record(channel, queue, ack=False)
    channel.basic_reject(tag, requeue=requeue)
    amqp.sync(channel)


@contextlib.contextmanager
def typed_headers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While active, pika decodes every field value as `{"$type": tag, "value": ...}`.

    pika's table and array decoders call the module's `decode_value` for every item, so
    wrapping it tags nested values too (AMQP 0-9-1 section 4.2.5.5, field types).
    """
    decode_value = pika.data.decode_value

    def tagged(encoded: bytes, offset: int):
        value, end = decode_value(encoded, offset)
        return {"$type": encoded[offset : offset + 1].decode(), "value": value}, end

    with monkeypatch.context() as patch:
        patch.setattr(pika.data, "decode_value", tagged)
        yield


def test_argument_beats_policy(amqp, mgmt, golden):
    channel = amqp.channel()
    dead_letter_queues = {}
    for kind in ("arg", "pol"):
        exchange = amqp.exchange(f"dlx_{kind}", "fanout", channel)
        dead_letter_queues[kind] = amqp.queue(f"dlq_{kind}", channel, durable=True)
        channel.queue_bind(dead_letter_queues[kind], exchange)
    mgmt.set_policy("p", "q$", {"dead-letter-exchange": f"{amqp.prefix}.dlx_pol"})
    arguments = {"x-dead-letter-exchange": f"{amqp.prefix}.dlx_arg"}
    queue = amqp.queue("q", channel, durable=True, arguments=arguments)
    publish_all(amqp, channel, queue, ["m1"])
    reject_first(amqp, channel, queue)
    amqp.await_count(channel, dead_letter_queues["arg"], 1, timeout_s=DEAD_LETTER_WAIT_S)
    observed = {
        "dlq_arg": amqp.bodies(channel, dead_letter_queues["arg"]),
        "dlq_policy": amqp.bodies(channel, dead_letter_queues["pol"]),
    }
    assert observed == golden("dlx.argument_beats_policy")


def test_cc_bcc(amqp, golden):
    channel = amqp.channel()
    source = amqp.exchange("src", "direct", channel)
    queue, dlq, _dlx = dead_letter_setup(amqp, channel)
    for key in ("k1", "k2", "k3"):
        channel.queue_bind(queue, source, routing_key=key)
    amqp.publish(channel, "k1", "m1", exchange=source, headers={"CC": ["k2"], "BCC": ["k3"]})
    amqp.sync(channel)
    delivered, tag = amqp.get_record(channel, queue, ack=False)
    extra_copies = amqp.passive(channel, queue)
    channel.basic_reject(tag, requeue=False)
    amqp.sync(channel)
    amqp.await_count(channel, dlq, 1, timeout_s=DEAD_LETTER_WAIT_S)
    observed = {
        "delivered": delivered,
        "extra_copies": extra_copies,
        "dead_lettered": amqp.drain_records(channel, dlq),
    }
    scenario = "dlx.cc_bcc"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_dead_letter_routing_key(amqp, golden):
    channel = amqp.channel()
    source = amqp.exchange("src", "direct", channel)
    queue, dlq, _dlx = dead_letter_setup(
        amqp, channel, "direct", "dead", **{"x-dead-letter-routing-key": "dead"}
    )
    channel.queue_bind(queue, source, routing_key="orig")
    amqp.publish(channel, "orig", "m1", exchange=source)
    amqp.sync(channel)
    reject_first(amqp, channel, queue)
    amqp.await_count(channel, dlq, 1, timeout_s=DEAD_LETTER_WAIT_S)
    observed = {"dead_lettered": amqp.drain_records(channel, dlq)}
    scenario = "dlx.dead_letter_routing_key"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_default_exchange(amqp, golden):
    channel = amqp.channel()
    dlq = amqp.queue("dlq", channel, durable=True)
    arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
    queue = amqp.queue("q", channel, durable=True, arguments=arguments)
    publish_all(amqp, channel, queue, ["m1"])
    reject_first(amqp, channel, queue)
    amqp.await_count(channel, dlq, 1, timeout_s=DEAD_LETTER_WAIT_S)
    observed = {"dead_lettered": amqp.drain_records(channel, dlq)}
    scenario = "dlx.default_exchange"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_fanout_to_two(amqp, golden):
    channel = amqp.channel()
    queue, dlq, dlx = dead_letter_setup(amqp, channel)
    dlq2 = amqp.queue("dlq2", channel, durable=True)
    channel.queue_bind(dlq2, dlx)
    publish_all(amqp, channel, queue, ["m1"])
    _record, tag = amqp.get_record(channel, queue, ack=False)
    channel.basic_nack(tag, requeue=False)
    amqp.sync(channel)
    amqp.await_count(channel, dlq2, 1, timeout_s=DEAD_LETTER_WAIT_S)
    observed = {"dlq": amqp.bodies(channel, dlq), "dlq2": amqp.bodies(channel, dlq2)}
    assert observed == golden("dlx.fanout_to_two")


def test_invalid_args(amqp, golden):
    connection = amqp.connect()
    cases = {
        "routing_key_without_exchange": {"x-dead-letter-routing-key": "k"},
        "exchange_int": {"x-dead-letter-exchange": 5},
        "routing_key_int": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": 5},
        "strategy_on_classic": {"x-dead-letter-strategy": "at-least-once"},
    }
    observed = {
        "declares": {
            case: amqp.declare_counts(
                connection.channel(), amqp.name(case), durable=True, arguments=arguments
            )
            for case, arguments in cases.items()
        }
    }
    scenario = "dlx.invalid_args"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_nack_multiple(amqp, golden):
    connection = amqp.connect()
    channel = connection.channel()
    queue, dlq, _dlx = dead_letter_setup(amqp, channel)
    publish_all(amqp, channel, queue, ["m1", "m2", "m3"])
    channel.basic_qos(prefetch_count=10)
    tags: list[int] = []
    consumer_tag = channel.basic_consume(queue, lambda ch, m, p, b: tags.append(m.delivery_tag))
    amqp.pump(connection, lambda: len(tags) == 3, timeout_s=0.5)
    channel.basic_cancel(consumer_tag)
    channel.basic_nack(tags[-1], multiple=True, requeue=False)
    amqp.sync(channel)
    amqp.await_count(channel, dlq, 3, timeout_s=DEAD_LETTER_WAIT_S)
    observed = {
        "delivered_count": len(tags),
        "dead_lettered": [record["body"] for record in amqp.drain_records(channel, dlq)],
    }
    assert observed == golden("dlx.nack_multiple")


def test_policy(amqp, mgmt, golden):
    channel = amqp.channel()
    dlx = amqp.exchange("dlx", "direct", channel)
    dlq = amqp.queue("dlq", channel, durable=True)
    channel.queue_bind(dlq, dlx, routing_key="via-policy")
    definition = {"dead-letter-exchange": dlx, "dead-letter-routing-key": "via-policy"}
    mgmt.set_policy("p", "q$", definition)
    queue = amqp.queue("q", channel, durable=True)
    publish_all(amqp, channel, queue, ["m1"])
    reject_first(amqp, channel, queue)
    amqp.await_count(channel, dlq, 1, timeout_s=DEAD_LETTER_WAIT_S)
    observed = {"dead_lettered": amqp.drain_records(channel, dlq)}
    scenario = "dlx.policy"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_purge_and_delete_no_dead_letter(amqp, golden):
    channel = amqp.channel()
    queue, dlq, _dlx = dead_letter_setup(amqp, channel)
    publish_all(amqp, channel, queue, ["m1", "m2"])
    purged = channel.queue_purge(queue).method.message_count
    publish_all(amqp, channel, queue, ["m3"])
    deleted = channel.queue_delete(queue).method.message_count
    time.sleep(DEAD_LETTER_WAIT_S)  # nothing may arrive
    observed = {"purged": purged, "deleted": deleted, "dlq": amqp.passive(channel, dlq)}
    assert observed == golden("dlx.purge_and_delete_no_dead_letter")


def test_reject_requeue_false(amqp, golden):
    channel = amqp.channel()
    queue, dlq, _dlx = dead_letter_setup(amqp, channel)
    amqp.publish(channel, queue, "m1", headers={"app": "x"}, message_id="id-1")
    amqp.sync(channel)
    reject_first(amqp, channel, queue)
    amqp.await_count(channel, dlq, 1, timeout_s=DEAD_LETTER_WAIT_S)
    observed = {
        "queue": amqp.passive(channel, queue),
        "dead_lettered": amqp.drain_records(channel, dlq),
    }
    scenario = "dlx.reject_requeue_false"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_requeue_true_not_dead_lettered(amqp, golden):
    channel = amqp.channel()
    queue, dlq, _dlx = dead_letter_setup(amqp, channel)
    publish_all(amqp, channel, queue, ["m1"])
    reject_first(amqp, channel, queue, requeue=True)
    after_reject, tag = amqp.get_record(channel, queue, ack=False)
    channel.basic_nack(tag, requeue=True)
    after_nack, _tag = amqp.get_record(channel, queue, ack=True)
    time.sleep(DEAD_LETTER_WAIT_S)  # nothing may arrive
    observed = {
        "after_reject_requeue": after_reject,
        "after_nack_requeue": after_nack,
        "dlq": amqp.passive(channel, dlq),
    }
    scenario = "dlx.requeue_true_not_dead_lettered"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_self_cycle_expired_dropped(amqp, golden):
    # A broker that missed the cycle would re-enqueue the message every 100 ms, so at any
    # moment it would almost always count one; 0.5 s covers several rounds.
    channel = amqp.channel()
    arguments = {"x-dead-letter-exchange": "", "x-message-ttl": 100}
    queue = amqp.queue("q", channel, durable=True, arguments=arguments)
    publish_all(amqp, channel, queue, ["m1"])
    time.sleep(0.5)
    observed = {"queue": amqp.passive(channel, queue), "get": amqp.get_record(channel, queue)[0]}
    assert observed == golden("dlx.self_cycle_expired_dropped")


def test_two_queue_cycle_expire_only(amqp, golden):
    channel = amqp.channel()
    q1, q2 = amqp.name("q1"), amqp.name("q2")
    for queue, other in ((q1, q2), (q2, q1)):
        arguments = {
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": other,
            "x-message-ttl": 100,
        }
        channel.queue_declare(queue, durable=True, arguments=arguments)
    publish_all(amqp, channel, q1, ["m1"])
    time.sleep(0.8)  # q1 -> q2 after 100 ms, back to q1 after 200 ms: several rounds
    observed = {"q1": amqp.passive(channel, q1), "q2": amqp.passive(channel, q2)}
    assert observed == golden("dlx.two_queue_cycle_expire_only")


def test_two_queue_cycle_with_reject(amqp, golden):
    channel = amqp.channel()
    q1, q2 = amqp.name("q1"), amqp.name("q2")
    channel.queue_declare(
        q1,
        durable=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q2},
    )
    channel.queue_declare(
        q2,
        durable=True,
        arguments={
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": q1,
            "x-message-ttl": 100,
        },
    )
    publish_all(amqp, channel, q1, ["m1"])
    rounds = []
    for _ in range(2):
        delivery, tag = amqp.get_record(channel, q1, ack=False)
        rounds.append(delivery)
        channel.basic_reject(tag, requeue=False)  # to q2, which expires it back to q1
        amqp.sync(channel)
        amqp.await_count(channel, q1, 1, timeout_s=0.8)
    rounds.append(amqp.get_record(channel, q1, ack=True)[0])
    observed = {"q1_deliveries": rounds}
    scenario = "dlx.two_queue_cycle_with_reject"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_x_death_field_types(amqp, golden, monkeypatch):
    channel = amqp.channel()
    queue, dlq, _dlx = dead_letter_setup(amqp, channel)
    amqp.publish(channel, queue, "m1", expiration="100")
    amqp.sync(channel)
    amqp.await_count(channel, dlq, 1, timeout_s=0.8)
    with typed_headers(monkeypatch):
        method, properties, body = channel.basic_get(dlq, auto_ack=True)
    observed = {"headers": amqp.record(method, properties, body)["props"]["headers"]}
    scenario = "dlx.x_death_field_types"
    assert amqp.normalise(observed, scenario) == golden(scenario)
