"""Queue arguments: which queue type takes which ``x-`` argument, and what values are valid.

Theory of operation:
1. `QUEUE_TYPE_ARGUMENTS` lists, per queue type, the arguments it understands, in RabbitMQ's
   order. That list is also what a redeclare compares (`warren.model.equivalence`); any
   argument not on any list (``x-custom``) is stored and never looked at.
2. `VALIDATORS` is the one table of argument → validator, in the order RabbitMQ checks them.
   A validator gets the typed value and all arguments and returns None when it is fine, or
   the reason printed as Erlang would (``{value_negative,-1}``), which becomes
   ``PRECONDITION_FAILED - invalid arg 'x-…' for queue 'q' in vhost '/': <reason>``.
   A new feature adds a row here and its name to the queue types that accept it.
3. `validate_new_queue` runs RabbitMQ's checks for a queue about to be created, in RabbitMQ's
   order: the dead-letter exchange's type (a channel check), ``x-queue-type`` alone, every
   validator of the queue's type, arguments that only other queue types accept (in the order
   the client sent them), then the type's rules on flags (a quorum queue is durable, not
   exclusive, not auto-delete). Arguments of an existing queue are never validated again.
4. Warren differs in two places on purpose: RabbitMQ 3.x accepts any value of
   ``x-delivery-limit``; Warren requires a non-negative integer, like ``x-max-length``, so the
   queue machine never sees a limit it cannot use. And a quorum queue declared with
   ``x-overflow: reject-publish-dlx`` is refused (`REFUSED_VALUES`), as the quorum-queue
   guide's feature matrix says, where RabbitMQ 3.10 accepts it and behaves as drop-head.

Source: rabbit_amqqueue.erl (declare_args/0, check_*_arg), rabbit_channel.erl (queue.declare),
rabbit_{classic,quorum,stream}_queue.erl (capabilities/0), rabbit_queue_type_util.erl.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping

from warren.amqp.table import Typed
from warren.errors import (
    SoftError,
    describe_queue,
    invalid_arg_type,
    invalid_queue_arg,
    invalid_queue_property,
    precondition_failed,
    queue_arg_not_for_type,
)
from warren.model.erlang_terms import (
    INTEGER_TAGS,
    erlang_string,
    erlang_tuple,
    tilde_s,
    wire_type_name,
)

QUEUE_TYPE = "x-queue-type"
DEAD_LETTER_EXCHANGE = "x-dead-letter-exchange"
EXPIRY_MS_MAX = 315_360_000_000  # ten years, rabbit_misc:check_expiry/1
PRIORITY_MAX = 255
STREAM_SEGMENT_SIZE_BYTES_MAX = 3_000_000_000


class QueueType(enum.Enum):
    CLASSIC = "classic"
    QUORUM = "quorum"
    STREAM = "stream"

    @property
    def module_name(self) -> str:
        """The Erlang module RabbitMQ names in its texts (``rabbit_quorum_queue``)."""
        return f"rabbit_{self.value}_queue"


def queue_type_of(arguments: Mapping[str, Typed]) -> QueueType:
    """The type a queue with these (validated) arguments has; classic by default."""
    value = arguments.get(QUEUE_TYPE)
    if value is None or not isinstance(value.value, str):
        return QueueType.CLASSIC
    return QueueType(value.value)


QUEUE_TYPE_ARGUMENTS: Mapping[QueueType, tuple[str, ...]] = {
    QueueType.CLASSIC: (
        "x-expires",
        "x-message-ttl",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-overflow",
        "x-queue-mode",
        "x-queue-version",
        "x-single-active-consumer",
        "x-queue-type",
        "x-queue-master-locator",
    ),
    QueueType.QUORUM: (
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-dead-letter-strategy",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-overflow",
        "x-single-active-consumer",
        "x-queue-type",
        "x-quorum-initial-group-size",
        "x-delivery-limit",
        "x-message-ttl",
        "x-queue-leader-locator",
    ),
    QueueType.STREAM: (
        "x-max-length-bytes",
        "x-queue-type",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
    ),
}

_KNOWN_ARGUMENTS: Mapping[str, None] = dict.fromkeys(
    name for names in QUEUE_TYPE_ARGUMENTS.values() for name in names
)

Validator = Callable[[Typed, Mapping[str, Typed]], str | None]


# --- Reasons, printed as RabbitMQ prints the Erlang terms. ---


def _unacceptable_type(value: Typed) -> str:
    return erlang_tuple("unacceptable_type", wire_type_name(value.tag))


def _integer(value: Typed) -> int | None:
    if value.tag in INTEGER_TAGS and isinstance(value.value, int):
        return value.value
    return None


def _not_integer(value: Typed) -> str:
    return erlang_string(f"expected integer, got {wire_type_name(value.tag)}")


def _string(value: Typed) -> str | None:
    if value.tag == "S" and isinstance(value.value, str | bytes):
        return tilde_s(value.value)
    return None


# --- Validators (rabbit_amqqueue:check_*_arg). ---


def check_non_negative_integer(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    number = _integer(value)
    if number is None:
        return _not_integer(value)
    return erlang_tuple("value_negative", str(number)) if number < 0 else None


def _check_expiry(number: int) -> str | None:
    if number < 0:
        return erlang_tuple("value_negative", str(number))
    if number > EXPIRY_MS_MAX:
        return erlang_tuple("value_too_large", str(number))
    return None


def check_expires(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    number = _integer(value)
    if number is None:
        return _not_integer(value)
    return erlang_tuple("value_zero", "0") if number == 0 else _check_expiry(number)


def check_message_ttl(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    number = _integer(value)
    return _not_integer(value) if number is None else _check_expiry(number)


def check_max_priority(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    reason = check_non_negative_integer(value, arguments)
    number = _integer(value)
    if reason is None and number is not None and number > PRIORITY_MAX:
        return erlang_tuple("max_value_exceeded", str(number))
    return reason


def check_initial_cluster_size(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    reason = check_non_negative_integer(value, arguments)
    return erlang_tuple("value_zero", "0") if reason is None and value.value == 0 else reason


def check_queue_version(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    reason = check_non_negative_integer(value, arguments)
    if reason is None and value.value not in (1, 2):
        return erlang_string(f"unsupported queue version '{value.value}'")
    return reason


def check_boolean(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    return None if value.tag == "t" else _unacceptable_type(value)


def one_of(choices: tuple[str, ...], reason: Callable[[str], str]) -> Validator:
    """A validator for a longstr that must be one of `choices`."""

    def check(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
        text = _string(value)
        if text is None:
            return _unacceptable_type(value)
        return None if text in choices else reason(text)

    return check


def check_dead_letter_exchange(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    return None if _string(value) is not None else _unacceptable_type(value)


def check_dead_letter_routing_key(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    if _string(value) is None:
        return _unacceptable_type(value)
    return None if DEAD_LETTER_EXCHANGE in arguments else "routing_key_but_no_dlx_defined"


_MAX_AGE = re.compile(r"([0-9]+)(Y|M|D|h|m|s)")


def check_max_age(value: Typed, arguments: Mapping[str, Typed]) -> str | None:
    text = _string(value)
    if text is None:
        return _unacceptable_type(value)
    match = _MAX_AGE.fullmatch(text)
    return None if match is not None and int(match.group(1)) > 0 else "invalid_max_age"


QUEUE_TYPE_NAMES = tuple(queue_type.value for queue_type in QueueType)
OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")
QUEUE_MODES = ("default", "lazy")
LEADER_LOCATORS = ("client-local", "balanced", "random", "least-leaders")

check_queue_type = one_of(
    QUEUE_TYPE_NAMES, lambda text: erlang_string(f"unsupported queue type '{text}'")
)

VALIDATORS: Mapping[str, Validator] = {
    "x-expires": check_expires,
    "x-message-ttl": check_message_ttl,
    "x-dead-letter-exchange": check_dead_letter_exchange,
    "x-dead-letter-routing-key": check_dead_letter_routing_key,
    "x-dead-letter-strategy": one_of(DEAD_LETTER_STRATEGIES, lambda _: "invalid_dlx_strategy"),
    "x-max-length": check_non_negative_integer,
    "x-max-length-bytes": check_non_negative_integer,
    "x-max-in-memory-length": check_non_negative_integer,
    "x-max-in-memory-bytes": check_non_negative_integer,
    "x-max-priority": check_max_priority,
    "x-overflow": one_of(OVERFLOW_MODES, lambda _: "invalid_overflow"),
    "x-queue-mode": one_of(
        QUEUE_MODES, lambda text: erlang_string(f"unsupported queue mode '{text}'")
    ),
    "x-queue-version": check_queue_version,
    "x-single-active-consumer": check_boolean,
    "x-queue-type": check_queue_type,
    "x-quorum-initial-group-size": check_initial_cluster_size,
    "x-max-age": check_max_age,
    "x-stream-max-segment-size-bytes": check_non_negative_integer,
    "x-initial-cluster-size": check_initial_cluster_size,
    "x-queue-leader-locator": one_of(LEADER_LOCATORS, lambda _: "invalid_queue_locator_arg"),
}


# --- Checks of a consumer's arguments (rabbit_amqqueue:check_consume_arguments, then the
# queue type's own). ---

CONSUMER_VALIDATORS: Mapping[str, Validator] = {
    "x-priority": lambda value, _: None if _integer(value) is not None else _not_integer(value),
    "x-cancel-on-ha-failover": check_boolean,
}
STREAM_CONSUMER_ARGUMENTS = ("x-stream-offset",)


def consumer_priority(
    name: str, vhost: str, queue_type: QueueType, arguments: Mapping[str, Typed]
) -> int:
    """Raise the 406 RabbitMQ would for a consumer's arguments; return its `x-priority`."""
    for key, check in CONSUMER_VALIDATORS.items():
        value = arguments.get(key)
        reason = None if value is None else check(value, arguments)
        if reason is not None:
            raise invalid_queue_arg(key, name, vhost, reason)
    if queue_type is not QueueType.STREAM:
        for key in STREAM_CONSUMER_ARGUMENTS:
            if key in arguments:
                raise queue_arg_not_for_type(key, name, vhost, queue_type.module_name)
    priority = arguments.get("x-priority")
    return 0 if priority is None else _integer(priority) or 0


# --- Checks of a queue about to be created. ---


def validate_new_queue(
    name: str,
    vhost: str,
    *,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: Mapping[str, Typed],
) -> QueueType:
    """Raise the 406 RabbitMQ would for a new queue; return its type. `durable` is final."""
    _check_dead_letter_exchange_type(name, vhost, arguments)
    _run_validators(name, vhost, arguments, (QUEUE_TYPE,))
    queue_type = queue_type_of(arguments)
    accepted = QUEUE_TYPE_ARGUMENTS[queue_type]
    _run_validators(name, vhost, arguments, [key for key in VALIDATORS if key in accepted])
    _check_foreign_arguments(name, vhost, arguments, queue_type)
    error = _property_error(queue_type, name, vhost, durable, exclusive, auto_delete, arguments)
    if error is not None:
        raise error
    return queue_type


def _check_dead_letter_exchange_type(name: str, vhost: str, arguments: Mapping[str, Typed]) -> None:
    value = arguments.get(DEAD_LETTER_EXCHANGE)
    if value is not None and value.tag != "S":
        raise invalid_arg_type(
            wire_type_name(value.tag), DEAD_LETTER_EXCHANGE, describe_queue(name, vhost)
        )


def _run_validators(
    name: str, vhost: str, arguments: Mapping[str, Typed], keys: tuple[str, ...] | list[str]
) -> None:
    for key in keys:
        value = arguments.get(key)
        if value is None:
            continue
        reason = VALIDATORS[key](value, arguments)
        if reason is not None:
            raise invalid_queue_arg(key, name, vhost, reason)


def _check_foreign_arguments(
    name: str, vhost: str, arguments: Mapping[str, Typed], queue_type: QueueType
) -> None:
    accepted = QUEUE_TYPE_ARGUMENTS[queue_type]
    for key in arguments:
        if key in _KNOWN_ARGUMENTS and key not in accepted:
            raise queue_arg_not_for_type(key, name, vhost, queue_type.module_name)


def _property_error(
    queue_type: QueueType,
    name: str,
    vhost: str,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: Mapping[str, Typed],
) -> SoftError | None:
    """rabbit_queue_type_util checks of quorum and stream queues, in RabbitMQ's order."""
    if queue_type is QueueType.CLASSIC:
        return None
    for refused, prop in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner")):
        if refused:
            return invalid_queue_property(prop, name, vhost)
    if not durable:
        return invalid_queue_property("non-durable", name, vhost)
    segment = arguments.get("x-stream-max-segment-size-bytes", Typed("V", None)).value
    if isinstance(segment, int) and segment > STREAM_SEGMENT_SIZE_BYTES_MAX:
        return precondition_failed("Exceeded max value for x-stream-max-segment-size-bytes")
    return None
