"""Policies and operator policies: which one applies to a queue, and what the queue then obeys.

Theory of operation:
1. A `Policy` is a validated, immutable record (`make_policy` refuses what RabbitMQ refuses,
   with its texts, see `warren.model.policy_validation`). Each vhost keeps two
   `PolicyStore`s, one of user policies and one of operator policies; a store lists its
   policies by ascending priority, then name (the order of RabbitMQ's HTTP API).
2. At most one user policy and at most one operator policy apply to a queue: among those
   whose apply-to covers queues, whose pattern matches the queue's name (a search, not a
   full match) and whose definition holds no key the queue's type refuses (RabbitMQ's
   is_policy_applicable: a policy with ``delivery-limit`` never applies to a classic
   queue), the one with the highest priority. RabbitMQ breaks a tie by the hash order of
   its parameter table, which is arbitrary; Warren takes the first name in sorted order.
3. `effective_policy_definition` is what RabbitMQ shows as ``effective_policy_definition``:
   the two definitions merged key by key, the lower value where both set a numeric limit.
4. `effective_settings` is what the queue obeys: the queue's own ``x-`` arguments combined
   with that merged definition, key by key, with RabbitMQ's rule for the queue's type
   (`_RULES`): the minimum for limits and TTLs, the argument for dead-lettering, and for
   quorum queues the policy for ``overflow`` and ``expires``. Then the queue type's own
   behaviour (`_TYPE_BEHAVIOUR`): a quorum queue returns messages to the back unless it has
   a delivery limit, and dead-letters at least once only with ``reject-publish`` overflow
   and a dead-letter exchange (rabbit_quorum_queue:dead_letter_handler/2 falls back to
   at-most-once otherwise).
5. An exchange obeys one user policy too, chosen the same way among those whose apply-to
   covers exchanges; of its keys only ``alternate-exchange`` means anything to Warren, and
   the exchange's own argument wins over it (rabbit_policy:get_arg/3).
6. Pure: no I/O, clocks or randomness; output never depends on hash order.

Source: rabbit_policy.erl (match_all/2, merge_operator_definitions/2), rabbit_policies.erl
(merge_policy_value/3), rabbit_queue_type_util:args_policy_lookup/3,
rabbit_amqqueue_process:process_args_policy/1, rabbit_quorum_queue:ra_machine_config/1,
rabbit_{classic,quorum,stream}_queue:capabilities/0 (RabbitMQ 3.10.8).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Iterable, Iterator, Mapping

from warren.model.arguments import QueueType
from warren.model.policy_validation import (
    JsonValue,
    PolicyError,
    compile_pattern,
    validate_policy,
)
from warren.model.queue_record import QueueRecord
from warren.model.settings import (
    DEAD_LETTER_PREFETCH_DEFAULT,
    DeadLetterStrategy,
    Overflow,
    QueueSettings,
    settings_from_arguments,
)

__all__ = [
    "Policy",
    "PolicyError",
    "PolicyStore",
    "effective_policy_definition",
    "effective_settings",
    "make_policy",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    apply_to: str
    priority: int | float
    definition: Mapping[str, JsonValue]
    regex: re.Pattern[bytes] = dataclasses.field(compare=False, repr=False)

    def as_json(self) -> dict[str, JsonValue]:
        """The policy as RabbitMQ's HTTP API and list_policies show it."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(self.definition),
            "priority": self.priority,
        }

    def applies_to_queue(self, record: QueueRecord) -> bool:
        if self.apply_to not in ("queues", "all"):
            return False
        refused = UNSUPPORTED_POLICY_KEYS[record.queue_type]
        if any(key in refused for key in self.definition):
            return False
        return self.regex.search(record.name.encode("utf-8")) is not None

    def applies_to_exchange(self, name: str) -> bool:
        if self.apply_to not in ("exchanges", "all"):
            return False
        return self.regex.search(name.encode("utf-8")) is not None


def make_policy(
    vhost: str,
    name: str,
    *,
    pattern: object,
    definition: object,
    priority: object = 0,
    apply_to: object = "all",
    operator: bool = False,
) -> Policy:
    """A validated policy, or `PolicyError` with RabbitMQ's reasons."""
    reasons = validate_policy(pattern, definition, priority, apply_to, operator=operator)
    if reasons:
        raise PolicyError(reasons)
    assert isinstance(pattern, str) and isinstance(definition, dict)
    assert isinstance(priority, int | float) and isinstance(apply_to, str)
    return Policy(
        vhost,
        name,
        pattern,
        apply_to,
        priority,
        dict(sorted(definition.items())),
        compile_pattern(pattern),
    )


class PolicyStore:
    """The user policies, or the operator policies, of one vhost."""

    __slots__ = ("_policies",)

    def __init__(self) -> None:
        self._policies: dict[str, Policy] = {}

    def __len__(self) -> int:
        return len(self._policies)

    def __iter__(self) -> Iterator[Policy]:
        """Ascending priority, then name: RabbitMQ's HTTP API order."""
        return iter(sorted(self._policies.values(), key=lambda p: (p.priority, p.name)))

    def get(self, name: str) -> Policy | None:
        return self._policies.get(name)

    def put(self, policy: Policy) -> bool:
        """Add or replace; True when the policy is new."""
        created = policy.name not in self._policies
        self._policies[policy.name] = policy
        return created

    def remove(self, name: str) -> Policy | None:
        return self._policies.pop(name, None)

    def match_queue(self, record: QueueRecord) -> Policy | None:
        """The one policy of this store that applies to the queue, if any."""
        return _strongest(p for p in self._policies.values() if p.applies_to_queue(record))

    def match_exchange(self, name: str) -> Policy | None:
        """The one policy of this store that applies to the exchange, if any."""
        return _strongest(p for p in self._policies.values() if p.applies_to_exchange(name))


def _strongest(candidates: Iterable[Policy]) -> Policy | None:
    """The highest priority wins; between equals, the first name."""
    return min(candidates, key=lambda p: (-p.priority, p.name), default=None)


# Policy keys a queue type refuses (capabilities/0 unsupported_policies): a policy holding
# one of them does not apply to queues of that type at all.
UNSUPPORTED_POLICY_KEYS: Mapping[QueueType, frozenset[str]] = {
    QueueType.CLASSIC: frozenset(
        {
            "max-age",
            "stream-max-segment-size-bytes",
            "queue-leader-locator",
            "initial-cluster-size",
            "delivery-limit",
            "dead-letter-strategy",
        }
    ),
    QueueType.QUORUM: frozenset(
        {
            "max-priority",
            "queue-mode",
            "single-active-consumer",
            "ha-mode",
            "ha-params",
            "ha-sync-mode",
            "ha-promote-on-shutdown",
            "ha-promote-on-failure",
            "queue-master-locator",
            "max-age",
            "stream-max-segment-size-bytes",
            "initial-cluster-size",
        }
    ),
    QueueType.STREAM: frozenset(
        {
            "expires",
            "message-ttl",
            "dead-letter-exchange",
            "dead-letter-routing-key",
            "max-length",
            "max-in-memory-length",
            "max-in-memory-bytes",
            "max-priority",
            "overflow",
            "queue-mode",
            "single-active-consumer",
            "delivery-limit",
            "ha-mode",
            "ha-params",
            "ha-sync-mode",
            "ha-promote-on-shutdown",
            "ha-promote-on-failure",
            "queue-master-locator",
            "dead-letter-strategy",
        }
    ),
}

# Keys where an operator policy and a user policy combine to the lower value.
MIN_MERGED_KEYS = frozenset(
    {
        "message-ttl",
        "max-length",
        "max-length-bytes",
        "max-in-memory-length",
        "max-in-memory-bytes",
        "expires",
        "delivery-limit",
    }
)


def effective_policy_definition(
    user: Policy | None, operator: Policy | None
) -> dict[str, JsonValue]:
    """The merged definition RabbitMQ shows as ``effective_policy_definition``."""
    if user is None or operator is None:
        chosen = user or operator
        return {} if chosen is None else dict(chosen.definition)
    merged: dict[str, JsonValue] = {}
    for key in sorted(set(user.definition) | set(operator.definition)):
        merged[key] = _merge_value(key, user.definition.get(key), operator.definition.get(key))
    return merged


def _merge_value(key: str, value: JsonValue, operator_value: JsonValue) -> JsonValue:
    if operator_value is None:
        return value
    if value is None:
        return operator_value
    if key in MIN_MERGED_KEYS and isinstance(value, int) and isinstance(operator_value, int):
        return min(value, operator_value)
    return operator_value  # RabbitMQ: booleans take the operator's; nothing else reaches here


class Resolve(enum.Enum):
    """How a queue argument and the policy's value for the same key combine."""

    MINIMUM = "min"  # res_min / fun min/2
    ARGUMENT = "argument"  # res_arg / queueArgHasPrecedence
    POLICY = "policy"  # policyHasPrecedence


_CLASSIC_RULES: Mapping[str, tuple[str, Resolve]] = {
    "expires": ("expires_ms", Resolve.MINIMUM),
    "dead-letter-exchange": ("dead_letter_exchange", Resolve.ARGUMENT),
    "dead-letter-routing-key": ("dead_letter_routing_key", Resolve.ARGUMENT),
    "message-ttl": ("message_ttl_ms", Resolve.MINIMUM),
    "max-length": ("max_length", Resolve.MINIMUM),
    "max-length-bytes": ("max_length_bytes", Resolve.MINIMUM),
    "overflow": ("overflow", Resolve.ARGUMENT),
}
_QUORUM_RULES: Mapping[str, tuple[str, Resolve]] = {
    "max-length": ("max_length", Resolve.MINIMUM),
    "overflow": ("overflow", Resolve.POLICY),
    "max-length-bytes": ("max_length_bytes", Resolve.MINIMUM),
    "delivery-limit": ("delivery_limit", Resolve.MINIMUM),
    "expires": ("expires_ms", Resolve.POLICY),
    "message-ttl": ("message_ttl_ms", Resolve.MINIMUM),
    "dead-letter-exchange": ("dead_letter_exchange", Resolve.ARGUMENT),
    "dead-letter-routing-key": ("dead_letter_routing_key", Resolve.ARGUMENT),
    "dead-letter-strategy": ("dead_letter_strategy", Resolve.ARGUMENT),
}
_STREAM_RULES: Mapping[str, tuple[str, Resolve]] = {
    "max-length-bytes": ("max_length_bytes", Resolve.POLICY),
}
_RULES: Mapping[QueueType, Mapping[str, tuple[str, Resolve]]] = {
    QueueType.CLASSIC: _CLASSIC_RULES,
    QueueType.QUORUM: _QUORUM_RULES,
    QueueType.STREAM: _STREAM_RULES,
}


def effective_settings(
    record: QueueRecord,
    user: Policy | None,
    operator: Policy | None,
    dead_letter_prefetch: int = DEAD_LETTER_PREFETCH_DEFAULT,
) -> QueueSettings:
    """What the queue obeys, given the user and operator policy that apply to it and the
    node's prefetch for at-least-once dead-lettering."""
    settings = settings_from_arguments(record.arguments)
    definition = effective_policy_definition(user, operator)
    changes: dict[str, object] = {}
    for key, (field, resolve) in _RULES[record.queue_type].items():
        value = definition.get(key)
        if value is None:
            continue
        from_policy = _setting_value(field, value)
        current = getattr(settings, field)
        if f"x-{key}" not in record.arguments or current is None:
            changes[field] = from_policy
        elif resolve is Resolve.MINIMUM:
            changes[field] = min(current, from_policy)
        elif resolve is Resolve.POLICY:
            changes[field] = from_policy
    changes["dead_letter_prefetch"] = dead_letter_prefetch
    merged = dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
    return _TYPE_BEHAVIOUR[record.queue_type](merged)


def _classic_behaviour(settings: QueueSettings) -> QueueSettings:
    return settings


def _quorum_behaviour(settings: QueueSettings) -> QueueSettings:
    """rabbit_fifo: returns go to the back without a delivery limit (so that the log can be
    truncated), to the head with one; x-delivery-count; no global QoS. `reject-publish-dlx`
    (argument or policy) falls back to drop-head, as rabbit_quorum_queue:overflow/3 does."""
    overflow = settings.overflow
    if overflow is Overflow.REJECT_PUBLISH_DLX:
        overflow = Overflow.DROP_HEAD
    strategy = settings.dead_letter_strategy
    if settings.overflow is not Overflow.REJECT_PUBLISH or settings.dead_letter_exchange is None:
        strategy = DeadLetterStrategy.AT_MOST_ONCE
    return dataclasses.replace(
        settings,
        overflow=overflow,
        dead_letter_strategy=strategy,
        requeue_at_back=settings.delivery_limit is None,
        delivery_count_header=True,
        fetch_counts_as_consumer=True,
        global_qos=False,
        handover_after_returns=False,
    )


_TYPE_BEHAVIOUR: Mapping[QueueType, Callable[[QueueSettings], QueueSettings]] = {
    QueueType.CLASSIC: _classic_behaviour,
    QueueType.QUORUM: _quorum_behaviour,
    QueueType.STREAM: _classic_behaviour,  # streams are declared but not implemented
}


def _setting_value(field: str, value: JsonValue) -> object:
    if field == "dead_letter_strategy":
        return DeadLetterStrategy(value)
    return Overflow(value) if field == "overflow" else value
