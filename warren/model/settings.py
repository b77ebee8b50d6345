"""A queue's effective settings: what its arguments and policies add up to.

Theory of operation:
1. `QueueSettings` is what the queue machine obeys: length limits, overflow, TTLs, expiry,
   dead-lettering, priorities, single active consumer, delivery limit. It is computed from
   the queue's own `x-` arguments and the policy and operator policy that match it
   (`warren.model.policy`), and recomputed whenever one of those changes.
2. None means "no limit" / "not set". Values are already validated (by
   `warren.model.arguments` and the policy validation): nothing checks them again.
3. `settings_from_arguments` reads the queue's own arguments; `warren.model.policy`
   combines them with policies.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace

from warren.amqp.table import Typed


class Overflow(enum.Enum):
    DROP_HEAD = "drop-head"
    REJECT_PUBLISH = "reject-publish"
    REJECT_PUBLISH_DLX = "reject-publish-dlx"


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
        if typed is not None and isinstance(typed.value, int):
            values[name] = typed.value
    for argument, name in _STRING_ARGUMENTS.items():
        typed = arguments.get(argument)
        if typed is not None:
            values[name] = _text(typed.value)
    overflow = arguments.get("x-overflow")
    if overflow is not None:
        values["overflow"] = Overflow(_text(overflow.value))
    single = arguments.get("x-single-active-consumer")
    if single is not None:
        values["single_active_consumer"] = bool(single.value)
    return replace(DEFAULT_SETTINGS, **values)  # type: ignore[arg-type]


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
