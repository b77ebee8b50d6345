"""Every `maxlen.*` golden scenario, replayed and compared with RabbitMQ 3.10.8's recording.

Each test performs the steps of one scenario with this test's own names, records the same
observations under the same keys, renames its prefix to the golden one and compares the
whole record. Queues are durable, as in the recording. Counts are read on the publishing
channel (RabbitMQ orders them after that channel's publishes); management columns through
`mgmt.stats`, which waits for RabbitMQ's to settle. Policies need the management API.
"""

from __future__ import annotations

import pytest

DROP_HEAD_AT_TWO = {"x-max-length": 2}
REJECT_AT_TWO = {"x-max-length": 2, "x-overflow": "reject-publish"}


def numbered(count: int) -> list[str]:
    return [f"m{n}" for n in range(1, count + 1)]


def publish_all(amqp, channel, queue: str, bodies: list[str]) -> None:
    """Publish to the default exchange, then a round trip so that errors show up."""
    for body in bodies:
        amqp.publish(channel, queue, body)
    amqp.sync(channel)


def confirms(amqp, channel, queue: str, bodies: list[str]) -> list[str]:
    return [amqp.confirm(channel, queue, body) for body in bodies]


def test_arg_lower_than_policy(amqp, mgmt, golden):
    channel = amqp.channel()
    mgmt.set_policy("p", "q$", {"max-length": 5})
    queue = amqp.queue("q", channel, durable=True, arguments={"x-max-length": 2})
    publish_all(amqp, channel, queue, numbered(6))
    observed = {"queue_info": mgmt.queue_info(queue), "drained": amqp.bodies(channel, queue)}
    scenario = "maxlen.arg_lower_than_policy"
    assert mgmt.normalise(observed, scenario) == golden(scenario)


def test_both_limits(amqp, mgmt, golden):
    channel = amqp.channel()
    arguments = {"x-max-length": 3, "x-max-length-bytes": 6}
    queue = amqp.queue("q", channel, durable=True, arguments=arguments)
    publish_all(amqp, channel, queue, ["a", "b", "c", "d"])  # the count limit bites
    after_count_limit = amqp.passive(channel, queue)
    publish_all(amqp, channel, queue, ["eeee"])  # then the bytes: c, d, eeee is 6 bytes
    observed = {
        "after_count_limit": after_count_limit,
        "stats": mgmt.stats(queue),
        "drained": amqp.bodies(channel, queue),
    }
    assert observed == golden("maxlen.both_limits")


def test_bytes_oversize_message(amqp, golden):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True, arguments={"x-max-length-bytes": 5})
    publish_all(amqp, channel, queue, ["0123456789"])
    after_big = amqp.passive(channel, queue)
    publish_all(amqp, channel, queue, ["abc"])
    observed = {
        "after_big": after_big,
        "after_small": amqp.passive(channel, queue),
        "drained": amqp.bodies(channel, queue),
    }
    assert observed == golden("maxlen.bytes_oversize_message")


def test_drop_head_count(amqp, mgmt, golden):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True, arguments={"x-max-length": 3})
    publish_all(amqp, channel, queue, numbered(5))
    observed = {
        "passive": amqp.passive(channel, queue),
        "stats": mgmt.stats(queue, mgmt.STATS_FIELDS + mgmt.QUEUE_INFO_FIELDS),
        "drained": amqp.drain_records(channel, queue),
    }
    scenario = "maxlen.drop_head_count"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_invalid_args(amqp, golden):
    connection = amqp.connect()
    cases = {
        "max_length_negative": {"x-max-length": -1},
        "max_length_string": {"x-max-length": "10"},
        "max_length_bytes_negative": {"x-max-length-bytes": -5},
        "overflow_unknown": {"x-overflow": "drop-tail"},
        "overflow_int": {"x-overflow": 1},
    }
    observed = {
        "declares": {
            case: amqp.declare_counts(
                connection.channel(), amqp.name(case), durable=True, arguments=arguments
            )
            for case, arguments in cases.items()
        }
    }
    scenario = "maxlen.invalid_args"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_operator_policy_min(amqp, mgmt, golden):
    channel = amqp.channel()
    user = mgmt.set_policy("user", "q$", {"max-length": 3})
    operator = mgmt.set_policy("op", "q$", {"max-length": 2}, operator=True)
    user_policy = mgmt.get_policy(user)
    operator_policy = mgmt.get_policy(operator, operator=True)
    queue = amqp.queue("q", channel, durable=True)
    publish_all(amqp, channel, queue, numbered(5))
    observed = {
        "user_policy": user_policy,
        "operator_policy": operator_policy,
        "queue_info": mgmt.queue_info(queue),
        "drained": amqp.bodies(channel, queue),
    }
    scenario = "maxlen.operator_policy_min"
    assert mgmt.normalise(observed, scenario) == golden(scenario)


def test_policy_applied_later(amqp, mgmt, golden):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True)
    publish_all(amqp, channel, queue, numbered(5))
    policy = mgmt.set_policy("p", "q$", {"max-length": 2})
    passive_after_policy = amqp.await_count(channel, queue, 2, timeout_s=2.0)
    mgmt.clear_policy(policy)
    amqp.eventually(lambda: mgmt.queue_info(queue)["policy"] is None, timeout_s=2.0)
    publish_all(amqp, channel, queue, ["n1", "n2", "n3"])
    observed = {
        "passive_after_policy": passive_after_policy,
        "passive_after_clear": amqp.passive(channel, queue),
        "drained": amqp.bodies(channel, queue),
    }
    assert observed == golden("maxlen.policy_applied_later")


def test_policy_lower_than_arg(amqp, mgmt, golden):
    channel = amqp.channel()
    mgmt.set_policy("p", "q$", {"max-length": 2})
    queue = amqp.queue("q", channel, durable=True, arguments={"x-max-length": 5})
    publish_all(amqp, channel, queue, numbered(6))
    observed = {"drained": amqp.bodies(channel, queue)}
    assert observed == golden("maxlen.policy_lower_than_arg")


def test_policy_overflow_reject(amqp, mgmt, golden):
    channel = amqp.channel()
    mgmt.set_policy("p", "q$", {"max-length": 1, "overflow": "reject-publish"})
    queue = amqp.queue("q", channel, durable=True)
    channel.confirm_delivery()
    observed = {
        "confirms": confirms(amqp, channel, queue, numbered(3)),
        "drained": amqp.bodies(channel, queue),
    }
    assert observed == golden("maxlen.policy_overflow_reject")


def test_policy_priority(amqp, mgmt, golden):
    channel = amqp.channel()
    low = mgmt.set_policy("low", "q$", {"max-length": 1, "message-ttl": 60000}, priority=1)
    high = mgmt.set_policy("high", "q$", {"max-length": 3}, priority=2)
    exchanges_only = mgmt.set_policy(
        "exch", "q$", {"alternate-exchange": "amq.fanout"}, priority=9, apply_to="exchanges"
    )
    policies = [mgmt.get_policy(name) for name in (low, high, exchanges_only)]
    queue = amqp.queue("q", channel, durable=True)
    publish_all(amqp, channel, queue, numbered(5))
    observed = {
        "policies": policies,
        "queue_info": mgmt.queue_info(queue),
        "drained": amqp.bodies(channel, queue),
    }
    scenario = "maxlen.policy_priority"
    assert mgmt.normalise(observed, scenario) == golden(scenario)


def test_reject_publish_bytes(amqp, golden):
    channel = amqp.channel()
    arguments = {"x-max-length-bytes": 8, "x-overflow": "reject-publish"}
    queue = amqp.queue("q", channel, durable=True, arguments=arguments)
    channel.confirm_delivery()
    observed = {
        "confirms": confirms(amqp, channel, queue, ["aaaa", "bbbb", "cccc", "d"]),
        "drained": amqp.bodies(channel, queue),
    }
    assert observed == golden("maxlen.reject_publish_bytes")


def test_reject_publish_confirm(amqp, mgmt, golden):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True, arguments=REJECT_AT_TWO)
    channel.confirm_delivery()
    observed = {
        "confirms": confirms(amqp, channel, queue, numbered(4)),
        "stats": mgmt.stats(queue),
        "drained": amqp.drain_records(channel, queue),
    }
    scenario = "maxlen.reject_publish_confirm"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_reject_publish_no_confirm(amqp, golden):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True, arguments=REJECT_AT_TWO)
    publish_all(amqp, channel, queue, numbered(4))
    observed = {"channel_open": channel.is_open, "drained": amqp.bodies(channel, queue)}
    assert observed == golden("maxlen.reject_publish_no_confirm")


def test_requeue_over_limit(amqp, golden):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True, arguments=DROP_HEAD_AT_TWO)
    publish_all(amqp, channel, queue, ["m1", "m2"])
    held, tag = amqp.get_record(channel, queue, ack=False)
    publish_all(amqp, channel, queue, ["m3"])
    channel.basic_nack(tag, requeue=True)  # m1 goes back to the head: 3 ready, one too many
    amqp.sync(channel)
    observed = {
        "held": held["body"],
        "passive_after_requeue": amqp.passive(channel, queue),
        "drained": amqp.drain_records(channel, queue),
    }
    scenario = "maxlen.requeue_over_limit"
    assert amqp.normalise(observed, scenario) == golden(scenario)


def test_unacked_not_counted(amqp, mgmt, golden):
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True, arguments=DROP_HEAD_AT_TWO)
    publish_all(amqp, channel, queue, ["m1", "m2"])
    held = [amqp.get_record(channel, queue, ack=False)[0]["body"] for _ in range(2)]
    publish_all(amqp, channel, queue, ["m3", "m4"])
    passive_after_m4 = amqp.passive(channel, queue)
    publish_all(amqp, channel, queue, ["m5"])
    observed = {
        "held_unacked": held,
        "passive_after_m4": passive_after_m4,
        "stats": mgmt.stats(queue),
        "ready_bodies": amqp.bodies(amqp.channel(), queue),
    }
    assert observed == golden("maxlen.unacked_not_counted")


@pytest.mark.parametrize("overflow", ["drop-head", "reject-publish"])
def test_zero_length(amqp, golden, overflow):
    # The recording uses the default (drop-head); with reject-publish nothing is kept either.
    channel = amqp.channel()
    arguments = {"x-max-length": 0, "x-overflow": overflow}
    queue = amqp.queue("q", channel, durable=True, arguments=arguments)
    publish_all(amqp, channel, queue, numbered(2))
    observed = {"passive": amqp.passive(channel, queue), "drained": amqp.bodies(channel, queue)}
    assert observed == golden("maxlen.zero_length")
