"""A queue's effective settings: what its arguments and policies add up to.

Theory of operation:
1. `QueueSettings` is what the queue machine obeys: length limits, overflow, TTLs, expiry,
   dead-lettering, priorities, single active consumer, delivery limit. It is computed from
   the queue's own `x-` arguments and the policy and operator policy that match it
   (`warren.model.policy`), and recomputed whenever one of those changes.
2. What differs between queue types is a setting too (`requeue_at_back`,
   `delivery_count_header`, `fetch_counts_as_consumer`, `global_qos`, the effective
   `dead_letter_strategy`), filled in from ``x-queue-type`` by `warren.model.policy`, so the
   machine and the runtime ask a setting, never the type.
3. None means "no limit" / "not set". Values are already validated (by
   `warren.model.arguments` and the policy validation): nothing checks them again.
4. `settings_from_arguments` reads the queue's own arguments; `warren.model.policy`
   combines them with policies.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace

from warren.amqp.table import Typed
from warren.model.erlang_terms import INTEGER_TAGS


class Overflow(enum.Enum):
    DROP_HEAD = "drop-head"
    REJECT_PUBLISH = "reject-publish"
    REJECT_PUBLISH_DLX = "reject-publish-dlx"


class DeadLetterStrategy(enum.Enum):
    AT_MOST_ONCE = "at-most-once"
    # the queue holds a dead-lettered message until its target queues have taken it
    AT_LEAST_ONCE = "at-least-once"


# dead-lettered messages a queue with at-least-once dead-lettering has out at once
# (RabbitMQ's dead_letter_worker_consumer_prefetch)
DEAD_LETTER_PREFETCH_DEFAULT = 32


@dataclass(frozen=True, slots=True)
class QueueSettings:
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: Overflow = Overflow.DROP_HEAD
    message_ttl_ms: int | None = None
    expires_ms: int | None = None
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_priority: int | None = None
    single_active_consumer: bool = False
    delivery_limit: int | None = None
    # the strategy in force (at-least-once only with reject-publish), not the one asked for
    dead_letter_strategy: DeadLetterStrategy = DeadLetterStrategy.AT_MOST_ONCE
    dead_letter_prefetch: int = DEAD_LETTER_PREFETCH_DEFAULT
    # --- set by the queue type ---
    requeue_at_back: bool = False  # a returned message goes behind every ready one
    delivery_count_header: bool = False  # deliveries carry x-delivery-count
    fetch_counts_as_consumer: bool = False  # an unsettled basic.get counts as a consumer
    global_qos: bool = True  # a channel with a channel-wide prefetch may consume
    # a cancelled single active consumer that still holds messages: the next one gets nothing
    # until those come back (its channel closes) or another message arrives, so that the
    # returned ones go first (a classic queue's process); quorum queues hand over at once
    handover_after_returns: bool = True


DEFAULT_SETTINGS = QueueSettings()


_INTEGER_ARGUMENTS = {
    "x-max-length": "max_length",
    "x-max-length-bytes": "max_length_bytes",
    "x-message-ttl": "message_ttl_ms",
    "x-expires": "expires_ms",
    "x-max-priority": "max_priority",
    "x-delivery-limit": "delivery_limit",
}
_STRING_ARGUMENTS = {
    "x-dead-letter-exchange": "dead_letter_exchange",
    "x-dead-letter-routing-key": "dead_letter_routing_key",
}


def settings_from_arguments(arguments: Mapping[str, Typed]) -> QueueSettings:
    """The settings a queue's own (already validated) `x-` arguments ask for."""
    values: dict[str, object] = {}
    for argument, name in _INTEGER_ARGUMENTS.items():
        typed = arguments.get(argument)
        if typed is not None and typed.tag in INTEGER_TAGS and isinstance(typed.value, int):
            values[name] = typed.value
    limit = values.get("delivery_limit")
    if isinstance(limit, int) and limit < 0:
        # RabbitMQ takes any x-delivery-limit: a negative one drops at the first return, as
        # 0 does; one that is not an integer never compares lower than a count: no limit
        values["delivery_limit"] = 0
    for argument, name in _STRING_ARGUMENTS.items():
        typed = arguments.get(argument)
        if typed is not None:
            values[name] = _text(typed.value)
    overflow = arguments.get("x-overflow")
    if overflow is not None:
        values["overflow"] = Overflow(_text(overflow.value))
    strategy = arguments.get("x-dead-letter-strategy")
    if strategy is not None:
        values["dead_letter_strategy"] = DeadLetterStrategy(_text(strategy.value))
    single = arguments.get("x-single-active-consumer")
    if single is not None:
        values["single_active_consumer"] = bool(single.value)
    return replace(DEFAULT_SETTINGS, **values)  # type: ignore[arg-type]


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
