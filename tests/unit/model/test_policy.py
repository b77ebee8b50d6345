"""Policies: matching, the operator merge and the effective settings a queue obeys.

The rules come from RabbitMQ 3.10.8 (rabbit_policy, rabbit_amqqueue_process,
rabbit_quorum_queue); the golden scenarios named below show them on a live broker.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from warren.amqp.table import Typed
from warren.model import QueueRecord
from warren.model.policy import (
    MIN_MERGED_KEYS,
    Policy,
    PolicyStore,
    effective_policy_definition,
    effective_settings,
    make_policy,
)
from warren.model.settings import Overflow, QueueSettings

QQ = {"x-queue-type": Typed("S", "quorum")}


def policy(
    name: str,
    definition: dict[str, Any],
    *,
    pattern: str = "^q",
    priority: int | float = 0,
    apply_to: str = "all",
    operator: bool = False,
) -> Policy:
    return make_policy(
        "/",
        name,
        pattern=pattern,
        definition=definition,
        priority=priority,
        apply_to=apply_to,
        operator=operator,
    )


def queue(name: str = "q", **arguments: Any) -> QueueRecord:
    typed = {}
    for key, value in arguments.items():
        key = "x-" + key.replace("_", "-")
        typed[key] = Typed("S", value) if isinstance(value, str) else Typed("I", value)
    return QueueRecord(name, "/", True, None, False, typed)


def quorum(name: str = "q", **arguments: Any) -> QueueRecord:
    record = queue(name, **arguments)
    record.arguments.update(QQ)
    return record


def store(*policies: Policy) -> PolicyStore:
    policies_store = PolicyStore()
    for item in policies:
        policies_store.put(item)
    return policies_store


# --- Matching ---


def test_highest_priority_wins_and_exchange_policies_are_ignored() -> None:
    # golden maxlen.policy_priority
    low = policy("low", {"max-length": 1, "message-ttl": 60000}, priority=1)
    high = policy("high", {"max-length": 3}, priority=2)
    exchanges = policy(
        "exch", {"alternate-exchange": "amq.fanout"}, priority=9, apply_to="exchanges"
    )
    assert store(low, high, exchanges).match_queue(queue()) is high


def test_equal_priorities_take_the_first_name() -> None:
    # RabbitMQ leaves this to the hash order of its parameter table; Warren is deterministic.
    b, a, c = (policy(name, {"max-length": 1}, priority=5) for name in "bac")
    assert store(b, a, c).match_queue(queue()) is a
    assert store(c, b, a).match_queue(queue()) is a


def test_pattern_is_a_search_over_the_name() -> None:
    rule = policy("p", {"max-length": 1}, pattern=r"one-meg")
    assert rule.applies_to_queue(queue("my.one-meg.queue"))
    assert not rule.applies_to_queue(queue("one-me"))
    anchored = policy("p", {"max-length": 1}, pattern="^one-meg$")
    assert not anchored.applies_to_queue(queue("my.one-meg"))


def test_a_policy_with_a_key_the_queue_type_refuses_does_not_apply() -> None:
    limit = policy("p", {"delivery-limit": 3})
    assert not limit.applies_to_queue(queue())
    assert limit.applies_to_queue(quorum())
    lazy = policy("p", {"queue-mode": "lazy", "max-length": 1})
    assert lazy.applies_to_queue(queue())
    assert not lazy.applies_to_queue(quorum())


def test_store_lists_by_priority_then_name_and_reports_creation() -> None:
    policies = store()
    assert policies.put(policy("b", {"max-length": 1}, priority=5))
    assert not policies.put(policy("b", {"max-length": 2}, priority=5))
    policies.put(policy("a", {"max-length": 1}, priority=5))
    policies.put(policy("d", {"max-length": 1}, priority=10))
    policies.put(policy("c", {"max-length": 1}, priority=1))
    assert [p.name for p in policies] == ["c", "a", "b", "d"]
    assert policies.get("b") is not None and policies.get("b").definition == {"max-length": 2}
    assert policies.remove("b") is not None and policies.remove("b") is None
    assert len(policies) == 3


def test_as_json_has_rabbitmq_shape_with_sorted_definition() -> None:
    rule = policy("p", {"message-ttl": 5, "max-length": 1}, apply_to="queues")
    assert rule.as_json() == {
        "vhost": "/",
        "name": "p",
        "pattern": "^q",
        "apply-to": "queues",
        "definition": {"max-length": 1, "message-ttl": 5},
        "priority": 0,
    }
    assert list(rule.definition) == ["max-length", "message-ttl"]


# --- effective_policy_definition ---


def test_operator_and_user_limits_merge_to_the_lower() -> None:
    # golden maxlen.operator_policy_min
    user = policy("user", {"max-length": 3, "dead-letter-exchange": "dlx"})
    operator = policy("op", {"max-length": 2, "message-ttl": 100}, operator=True)
    assert effective_policy_definition(user, operator) == {
        "dead-letter-exchange": "dlx",
        "max-length": 2,
        "message-ttl": 100,
    }
    assert effective_policy_definition(None, operator) == {"max-length": 2, "message-ttl": 100}
    assert effective_policy_definition(user, None) == {
        "dead-letter-exchange": "dlx",
        "max-length": 3,
    }
    assert effective_policy_definition(None, None) == {}


# --- effective_settings ---


def test_no_policy_leaves_the_arguments() -> None:
    assert effective_settings(queue(max_length=2), None, None) == QueueSettings(max_length=2)


def test_classic_limits_and_ttls_take_the_minimum() -> None:
    # golden maxlen.arg_lower_than_policy, maxlen.policy_lower_than_arg, ttl.policy_message_ttl_min
    five = policy("p", {"max-length": 5, "message-ttl": 200, "expires": 9000})
    settings = effective_settings(queue(max_length=2, message_ttl=60000, expires=1000), five, None)
    assert (settings.max_length, settings.message_ttl_ms, settings.expires_ms) == (2, 200, 1000)
    two = policy("p", {"max-length": 2, "max-length-bytes": 10})
    settings = effective_settings(queue(max_length=5, max_length_bytes=100), two, None)
    assert (settings.max_length, settings.max_length_bytes) == (2, 10)


def test_classic_dead_lettering_and_overflow_arguments_beat_the_policy() -> None:
    # golden dlx.argument_beats_policy
    rule = policy(
        "p",
        {
            "dead-letter-exchange": "from-policy",
            "dead-letter-routing-key": "policy-key",
            "overflow": "reject-publish",
        },
    )
    settings = effective_settings(
        queue(dead_letter_exchange="from-arg", overflow="drop-head"), rule, None
    )
    assert settings.dead_letter_exchange == "from-arg"
    assert settings.dead_letter_routing_key == "policy-key"  # each key resolves on its own
    assert settings.overflow is Overflow.DROP_HEAD
    assert effective_settings(queue(), rule, None).overflow is Overflow.REJECT_PUBLISH


def test_operator_policy_lowers_an_argument() -> None:
    # golden ttl.operator_policy_message_ttl
    operator = policy("op", {"message-ttl": 200}, operator=True)
    settings = effective_settings(queue(message_ttl=60000), None, operator)
    assert settings.message_ttl_ms == 200


def test_quorum_policy_wins_for_overflow_and_expires() -> None:
    rule = policy("p", {"overflow": "reject-publish", "expires": 9000, "delivery-limit": 1})
    settings = effective_settings(
        quorum(overflow="drop-head", expires=1000, delivery_limit=5), rule, None
    )
    assert settings.overflow is Overflow.REJECT_PUBLISH
    assert settings.expires_ms == 9000
    assert settings.delivery_limit == 1  # golden quorum.delivery_limit_policy: the lower


def test_quorum_reject_publish_dlx_from_a_policy_falls_back_to_drop_head() -> None:
    rule = policy("p", {"overflow": "reject-publish-dlx"})
    assert effective_settings(quorum(), rule, None).overflow is Overflow.DROP_HEAD
    assert effective_settings(queue(), rule, None).overflow is Overflow.REJECT_PUBLISH_DLX


def test_priority_and_single_active_consumer_come_from_arguments_only() -> None:
    record = queue(max_priority=5)
    record.arguments["x-single-active-consumer"] = Typed("t", True)
    settings = effective_settings(record, policy("p", {"max-length": 1}), None)
    assert (settings.max_priority, settings.single_active_consumer) == (5, True)


# --- Against a naive model ---

LIMIT_KEYS = ("max-length", "max-length-bytes", "message-ttl", "expires")
limits = st.dictionaries(st.sampled_from(LIMIT_KEYS), st.integers(1, 10_000), max_size=4)
FIELDS = {
    "max-length": "max_length",
    "max-length-bytes": "max_length_bytes",
    "message-ttl": "message_ttl_ms",
    "expires": "expires_ms",
}


def naive_classic(
    arguments: dict[str, int], user: dict[str, int], operator: dict[str, int]
) -> dict[str, int | None]:
    """Every limit is the lowest of whatever sets it: argument, policy, operator policy."""
    result: dict[str, int | None] = {}
    for key, field in FIELDS.items():
        values = [source[key] for source in (arguments, user, operator) if key in source]
        result[field] = min(values) if values else None
    return result


@given(arguments=limits, user=limits, operator=limits)
def test_classic_limits_are_the_minimum_of_all_sources(
    arguments: dict[str, int], user: dict[str, int], operator: dict[str, int]
) -> None:
    record = queue(**{key.replace("-", "_"): value for key, value in arguments.items()})
    user_policy = policy("u", user) if user else None
    operator_policy = policy("o", operator, operator=True) if operator else None
    settings = effective_settings(record, user_policy, operator_policy)
    expected = naive_classic(arguments, user, operator)
    assert {field: getattr(settings, field) for field in FIELDS.values()} == expected
    merged = effective_policy_definition(user_policy, operator_policy)
    for key in set(user) | set(operator):
        assert key in MIN_MERGED_KEYS
        assert merged[key] == min(v for v in (user.get(key), operator.get(key)) if v is not None)
