"""Queue argument validation at declare: RabbitMQ 3.10.8's texts, checked on a live broker."""

from __future__ import annotations

import decimal

import pytest

from warren.amqp.table import Typed
from warren.errors import AmqpError, SoftError
from warren.model import QueueType, VHost
from warren.model.arguments import QUEUE_TYPE_ARGUMENTS, VALIDATORS

QQ = {"x-queue-type": Typed("S", "quorum")}


def typed(value: object) -> Typed:
    """The wire type pika gives a Python value (what the golden files were made with)."""
    if isinstance(value, Typed):
        return value
    if isinstance(value, bool):
        return Typed("t", value)
    if isinstance(value, int):
        return Typed("I" if -(2**31) <= value < 2**31 else "l", value)
    assert isinstance(value, str)
    return Typed("S", value)


def declare(
    arguments: dict[str, object],
    name: str = "q",
    *,
    durable: bool = True,
    exclusive: bool = False,
    auto_delete: bool = False,
) -> None:
    VHost().declare_queue(
        name,
        owner="connection-1",
        passive=False,
        durable=durable,
        exclusive=exclusive,
        auto_delete=auto_delete,
        arguments={key: typed(value) for key, value in arguments.items()},
    )


def refusal(arguments: dict[str, object], name: str = "q", **flags: bool) -> tuple[int, str]:
    with pytest.raises(AmqpError) as caught:
        declare(arguments, name, **flags)
    assert isinstance(caught.value, SoftError)
    return caught.value.code, caught.value.text


def invalid(arg: str, reason: str, name: str = "q") -> tuple[int, str]:
    return (
        406,
        f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{name}' in vhost '/': {reason}",
    )


def not_for_type(arg: str, queue_type: str, name: str = "q") -> tuple[int, str]:
    text = f"invalid arg '{arg}' for queue '{name}' in vhost '/' of queue type {queue_type}"
    return 406, f"PRECONDITION_FAILED - {text}"


# --- The golden files (maxlen.invalid_args, ttl.invalid_args, dlx.invalid_args). ---


@pytest.mark.parametrize(
    ("arguments", "arg", "reason"),
    [
        ({"x-max-length": -1}, "x-max-length", "{value_negative,-1}"),
        ({"x-max-length": "10"}, "x-max-length", '"expected integer, got longstr"'),
        ({"x-max-length-bytes": -5}, "x-max-length-bytes", "{value_negative,-5}"),
        ({"x-overflow": "drop-tail"}, "x-overflow", "invalid_overflow"),
        ({"x-overflow": 1}, "x-overflow", "{unacceptable_type,signedint}"),
        ({"x-expires": 0}, "x-expires", "{value_zero,0}"),
        ({"x-expires": -1}, "x-expires", "{value_negative,-1}"),
        ({"x-expires": "1000"}, "x-expires", '"expected integer, got longstr"'),
        ({"x-message-ttl": -1}, "x-message-ttl", "{value_negative,-1}"),
        ({"x-message-ttl": "100"}, "x-message-ttl", '"expected integer, got longstr"'),
        (
            {"x-dead-letter-routing-key": "k"},
            "x-dead-letter-routing-key",
            "routing_key_but_no_dlx_defined",
        ),
        (
            {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": 5},
            "x-dead-letter-routing-key",
            "{unacceptable_type,signedint}",
        ),
    ],
)
def test_golden_invalid_args(arguments: dict[str, object], arg: str, reason: str) -> None:
    assert refusal(arguments) == invalid(arg, reason)


def test_golden_dead_letter_exchange_of_wrong_type() -> None:
    assert refusal({"x-dead-letter-exchange": 5}) == (
        406,
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' "
        "in queue 'q' in vhost '/'",
    )


def test_golden_strategy_on_classic() -> None:
    arguments = {"x-dead-letter-strategy": "at-least-once"}
    assert refusal(arguments) == not_for_type("x-dead-letter-strategy", "rabbit_classic_queue")


def test_golden_message_ttl_zero_is_fine() -> None:
    declare({"x-message-ttl": 0})


# --- More of RabbitMQ's validators, as the live broker answered. ---


@pytest.mark.parametrize(
    ("arguments", "arg", "reason"),
    [
        ({"x-max-priority": 256}, "x-max-priority", "{max_value_exceeded,256}"),
        ({"x-max-priority": -1}, "x-max-priority", "{value_negative,-1}"),
        ({"x-max-priority": True}, "x-max-priority", '"expected integer, got bool"'),
        ({"x-max-priority": Typed("d", 1.5)}, "x-max-priority", '"expected integer, got double"'),
        (
            {"x-max-priority": Typed("D", decimal.Decimal(5))},
            "x-max-priority",
            '"expected integer, got decimal"',
        ),
        ({"x-max-priority": Typed("T", 5)}, "x-max-priority", '"expected integer, got timestamp"'),
        ({"x-max-priority": Typed("V", None)}, "x-max-priority", '"expected integer, got void"'),
        ({"x-max-priority": Typed("x", b"5")}, "x-max-priority", '"expected integer, got binary"'),
        ({"x-max-length": Typed("F", {})}, "x-max-length", '"expected integer, got table"'),
        ({"x-max-length": Typed("A", [])}, "x-max-length", '"expected integer, got array"'),
        ({"x-expires": 315_360_000_001}, "x-expires", "{value_too_large,315360000001}"),
        ({"x-message-ttl": 315_360_000_001}, "x-message-ttl", "{value_too_large,315360000001}"),
        ({"x-queue-mode": "fast"}, "x-queue-mode", "\"unsupported queue mode 'fast'\""),
        ({"x-queue-mode": 1}, "x-queue-mode", "{unacceptable_type,signedint}"),
        ({"x-queue-version": 3}, "x-queue-version", "\"unsupported queue version '3'\""),
        ({"x-queue-version": "2"}, "x-queue-version", '"expected integer, got longstr"'),
        (
            {"x-single-active-consumer": "true"},
            "x-single-active-consumer",
            "{unacceptable_type,longstr}",
        ),
        (
            {"x-single-active-consumer": 1},
            "x-single-active-consumer",
            "{unacceptable_type,signedint}",
        ),
        ({"x-queue-type": 1}, "x-queue-type", "{unacceptable_type,signedint}"),
        ({"x-queue-type": "bogus"}, "x-queue-type", "\"unsupported queue type 'bogus'\""),
        ({"x-overflow": False}, "x-overflow", "{unacceptable_type,bool}"),
    ],
)
def test_classic_invalid_args(arguments: dict[str, object], arg: str, reason: str) -> None:
    assert refusal(arguments) == invalid(arg, reason)


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-max-priority": Typed("l", 5)},
        {"x-max-priority": Typed("B", 5)},
        {"x-max-priority": Typed("L", 5)},
        {"x-message-ttl": 315_360_000_000},
        {"x-queue-mode": "lazy"},
        {"x-queue-version": 2},
        {"x-single-active-consumer": True},
        {"x-overflow": "reject-publish-dlx"},
        {"x-queue-type": "classic"},
        {"x-foo": "bar"},  # unknown x- arguments are kept, never checked
        {"foo": 1},
        {"x-queue-master-locator": 7},  # accepted by classic queues, never validated
    ],
)
def test_classic_valid_args(arguments: dict[str, object]) -> None:
    declare(arguments)


@pytest.mark.parametrize(
    ("value", "type_name"),
    [(Typed("t", True), "bool"), (Typed("V", None), "void"), (Typed("x", b"a"), "binary")],
)
def test_dead_letter_exchange_type_names(value: Typed, type_name: str) -> None:
    assert refusal({"x-dead-letter-exchange": value}) == (
        406,
        f"PRECONDITION_FAILED - invalid type '{type_name}' for arg 'x-dead-letter-exchange' "
        "in queue 'q' in vhost '/'",
    )


@pytest.mark.parametrize(
    "arg",
    [
        "x-delivery-limit",
        "x-queue-leader-locator",
        "x-max-in-memory-length",
        "x-initial-cluster-size",
        "x-max-age",
        "x-quorum-initial-group-size",
    ],
)
def test_arguments_of_other_queue_types_refused_on_classic(arg: str) -> None:
    assert refusal({arg: 5}) == not_for_type(arg, "rabbit_classic_queue")


def test_values_are_checked_before_arguments_of_other_types() -> None:
    arguments = {"x-queue-leader-locator": "x", "x-max-length": -1}
    assert refusal(arguments) == invalid("x-max-length", "{value_negative,-1}")


def test_foreign_arguments_reported_in_the_order_sent() -> None:
    first = {"x-queue-leader-locator": "a", "x-dead-letter-strategy": "x"}
    assert refusal(first) == not_for_type("x-queue-leader-locator", "rabbit_classic_queue")
    second = {"x-dead-letter-strategy": "x", "x-queue-leader-locator": "a"}
    assert refusal(second) == not_for_type("x-dead-letter-strategy", "rabbit_classic_queue")


def test_validators_run_in_rabbitmqs_order_not_the_order_sent() -> None:
    arguments = {"x-overflow": "bad", "x-max-length": -1, "x-expires": 0}
    assert refusal(arguments) == invalid("x-expires", "{value_zero,0}")
    arguments = {"x-max-length": -1, "x-message-ttl": -1}
    assert refusal(arguments) == invalid("x-message-ttl", "{value_negative,-1}")


def test_queue_type_is_checked_first() -> None:
    arguments = {"x-max-length": -1, "x-queue-type": "bogus"}
    assert refusal(arguments) == invalid("x-queue-type", "\"unsupported queue type 'bogus'\"")


# --- Quorum and stream queues. ---


@pytest.mark.parametrize(
    ("arg", "value"),
    [
        ("x-max-priority", 5),
        ("x-queue-mode", "lazy"),
        ("x-queue-master-locator", "client-local"),
        ("x-queue-version", 2),
    ],
)
def test_golden_classic_only_args_refused_on_quorum(arg: str, value: object) -> None:
    assert refusal({**QQ, arg: value}) == not_for_type(arg, "rabbit_quorum_queue")


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-quorum-initial-group-size": 1},
        {"x-single-active-consumer": True},
        {"x-queue-leader-locator": "balanced"},
        {"x-dead-letter-strategy": "at-least-once"},
        {"x-delivery-limit": 0},
        # RabbitMQ 3.10.8 takes any delivery limit, and reject-publish-dlx as drop-head
        {"x-delivery-limit": -1},
        {"x-delivery-limit": "abc"},
        {"x-overflow": "reject-publish-dlx"},
    ],
)
def test_quorum_valid_args(arguments: dict[str, object]) -> None:
    declare({**QQ, **arguments})


@pytest.mark.parametrize(
    ("arguments", "arg", "reason"),
    [
        (
            {"x-dead-letter-strategy": "exactly-once"},
            "x-dead-letter-strategy",
            "invalid_dlx_strategy",
        ),
        ({"x-queue-leader-locator": "nope"}, "x-queue-leader-locator", "invalid_queue_locator_arg"),
        ({"x-queue-leader-locator": 1}, "x-queue-leader-locator", "{unacceptable_type,signedint}"),
        ({"x-quorum-initial-group-size": 0}, "x-quorum-initial-group-size", "{value_zero,0}"),
        ({"x-max-in-memory-length": -1}, "x-max-in-memory-length", "{value_negative,-1}"),
    ],
)
def test_quorum_invalid_args(arguments: dict[str, object], arg: str, reason: str) -> None:
    assert refusal({**QQ, **arguments}) == invalid(arg, reason)


@pytest.mark.parametrize(
    ("flags", "prop"),
    [
        ({"durable": False}, "non-durable"),
        ({"exclusive": True}, "exclusive-owner"),
        ({"auto_delete": True}, "auto-delete"),
        ({"auto_delete": True, "durable": False}, "auto-delete"),
        ({"exclusive": True, "durable": False}, "exclusive-owner"),
    ],
)
def test_quorum_properties(flags: dict[str, bool], prop: str) -> None:
    assert refusal(QQ, "qq", **flags) == (
        406,
        f"PRECONDITION_FAILED - invalid property '{prop}' for queue 'qq' in vhost '/'",
    )


def test_quorum_arguments_are_checked_before_properties() -> None:
    assert refusal({**QQ, "x-max-length": -1}, durable=False) == invalid(
        "x-max-length", "{value_negative,-1}"
    )


def test_stream_queues() -> None:
    stream = {"x-queue-type": "stream"}
    declare(stream)
    declare({**stream, "x-max-age": "7D"})
    assert refusal({**stream, "x-message-ttl": 5}) == not_for_type(
        "x-message-ttl", "rabbit_stream_queue"
    )
    assert refusal({**stream, "x-max-age": "5X"}) == invalid("x-max-age", "invalid_max_age")
    assert refusal({**stream, "x-max-age": "0D"}) == invalid("x-max-age", "invalid_max_age")
    assert refusal({**stream, "x-stream-max-segment-size-bytes": 3_000_000_001}) == (
        406,
        "PRECONDITION_FAILED - Exceeded max value for x-stream-max-segment-size-bytes",
    )


def test_queue_type_of_record() -> None:
    vhost = VHost()
    for name, arguments, expected in [
        ("c", {}, QueueType.CLASSIC),
        ("q", QQ, QueueType.QUORUM),
        ("s", {"x-queue-type": Typed("S", "stream")}, QueueType.STREAM),
    ]:
        record, _ = vhost.declare_queue(
            name,
            owner=None,
            passive=False,
            durable=True,
            exclusive=False,
            auto_delete=False,
            arguments=dict(arguments),
        )
        assert record.queue_type is expected


def test_every_accepted_argument_has_a_validator_or_is_documented_as_unchecked() -> None:
    unchecked = {"x-queue-master-locator", "x-delivery-limit"}
    for names in QUEUE_TYPE_ARGUMENTS.values():
        for name in names:
            assert name in VALIDATORS or name in unchecked
