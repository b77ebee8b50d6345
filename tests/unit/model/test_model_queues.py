"""queue.declare, exclusive access and queue deletion, with RabbitMQ 3.10.8's texts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from warren.amqp.table import Typed
from warren.errors import AmqpError, SoftError
from warren.model import DestinationKind, QueueRecord, VHost

OWNER = "connection-1"
OTHER = "connection-2"
LOCKED_TEXT = (
    "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{}' in vhost '/'. "
    "It could be originally declared on another connection or the exclusive property value "
    "does not match that of the original declaration."
)


def declare(
    vhost: VHost,
    name: str = "q",
    *,
    owner: object = OWNER,
    passive: bool = False,
    durable: bool = True,
    exclusive: bool = False,
    auto_delete: bool = False,
    arguments: dict[str, Typed] | None = None,
    server_named: bool = False,
) -> tuple[QueueRecord, bool]:
    return vhost.declare_queue(
        name,
        owner=owner,
        passive=passive,
        durable=durable,
        exclusive=exclusive,
        auto_delete=auto_delete,
        arguments=arguments or {},
        server_named=server_named,
    )


def soft(action: Callable[[], object]) -> tuple[int, str]:
    with pytest.raises(AmqpError) as caught:
        action()
    assert isinstance(caught.value, SoftError)
    return caught.value.code, caught.value.text


def locked(name: str = "q") -> tuple[int, str]:
    return 405, LOCKED_TEXT.format(name)


def inequivalent(arg: str, received: str, current: str, name: str = "q") -> tuple[int, str]:
    return 406, (
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue '{name}' in vhost '/': "
        f"received {received} but current is {current}"
    )


@pytest.fixture
def vhost() -> VHost:
    return VHost()


def test_declare_creates_once(vhost: VHost) -> None:
    arguments = {"x-max-length": Typed("I", 10)}
    record, created = declare(vhost, arguments=arguments)
    assert created
    assert record == QueueRecord("q", "/", True, None, False, arguments)
    assert vhost.queues == {"q": record}
    assert declare(vhost, arguments=arguments) == (record, False)
    assert not record.exclusive


def test_golden_passive_declare_of_a_missing_queue(vhost: VHost) -> None:
    assert soft(lambda: declare(vhost, "missing", passive=True)) == (
        404,
        "NOT_FOUND - no queue 'missing' in vhost '/'",
    )


def test_passive_declare_ignores_flags_and_arguments(vhost: VHost) -> None:
    record, _ = declare(vhost)
    arguments = {"x-max-length": Typed("I", -1)}
    assert declare(vhost, passive=True, durable=False, arguments=arguments) == (record, False)


def test_golden_flag_mismatch(vhost: VHost) -> None:
    declare(vhost, durable=True)
    assert soft(lambda: declare(vhost, durable=False)) == inequivalent(
        "durable", "'false'", "'true'"
    )
    assert soft(lambda: declare(vhost, auto_delete=True)) == inequivalent(
        "auto_delete", "'true'", "'false'"
    )
    assert soft(lambda: declare(vhost, exclusive=True)) == locked()


def test_durable_is_compared_before_auto_delete(vhost: VHost) -> None:
    declare(vhost, durable=False)
    assert soft(lambda: declare(vhost, durable=True, auto_delete=True)) == inequivalent(
        "durable", "'true'", "'false'"
    )


def test_golden_argument_added_or_removed(vhost: VHost) -> None:
    declare(vhost, "plain")
    declare(vhost, "with_ttl", arguments={"x-message-ttl": Typed("I", 5000)})
    assert soft(
        lambda: declare(vhost, "plain", arguments={"x-message-ttl": Typed("I", 5000)})
    ) == inequivalent("x-message-ttl", "the value '5000' of type 'signedint'", "none", name="plain")
    assert soft(lambda: declare(vhost, "with_ttl")) == inequivalent(
        "x-message-ttl", "none", "the value '5000' of type 'signedint'", name="with_ttl"
    )
    record, created = declare(vhost, "plain", arguments={"x-custom": Typed("S", "v")})
    assert not created
    assert record.arguments == {}
    assert soft(
        lambda: declare(vhost, "plain", arguments={"x-dead-letter-exchange": Typed("S", "x")})
    ) == inequivalent(
        "x-dead-letter-exchange", "the value 'x' of type 'longstr'", "none", name="plain"
    )


def test_golden_integer_types_are_equivalent(vhost: VHost) -> None:
    declare(vhost, arguments={"x-max-length": Typed("I", 10)})
    declare(vhost, arguments={"x-max-length": Typed("l", 10)})
    assert soft(lambda: declare(vhost, arguments={"x-max-length": Typed("l", 2**40)})) == (
        inequivalent("x-max-length", "'1099511627776'", "'10'")
    )


@pytest.mark.parametrize(
    ("received", "shown"),
    [
        (Typed("d", 10.0), "'10.0'"),
        (Typed("S", "10"), "'10'"),
        (Typed("t", True), "'true'"),
    ],
)
def test_other_types_are_not_equivalent(vhost: VHost, received: Typed, shown: str) -> None:
    declare(vhost, arguments={"x-max-length": Typed("I", 10)})
    assert soft(lambda: declare(vhost, arguments={"x-max-length": received})) == inequivalent(
        "x-max-length", shown, "'10'"
    )


def test_bare_equal_values_of_other_types_are_equivalent(vhost: VHost) -> None:
    current = {"x-max-length": Typed("I", 10), "x-dead-letter-exchange": Typed("S", "a")}
    declare(vhost, arguments=current)
    declare(
        vhost,
        arguments={"x-max-length": Typed("u", 10), "x-dead-letter-exchange": Typed("x", b"a")},
    )
    declare(vhost, arguments={**current, "x-max-length": Typed("T", 10)})


def test_void_against_nothing(vhost: VHost) -> None:
    declare(vhost)
    assert soft(lambda: declare(vhost, arguments={"x-max-length-bytes": Typed("V", None)})) == (
        inequivalent("x-max-length-bytes", "the value 'undefined' of type 'void'", "none")
    )


def test_arguments_are_compared_in_the_queue_types_order(vhost: VHost) -> None:
    declare(
        vhost, arguments={"x-max-length": Typed("I", 10), "x-dead-letter-exchange": Typed("S", "a")}
    )
    received = {
        "x-max-length": Typed("I", 11),
        "x-dead-letter-exchange": Typed("S", "b"),
        "x-message-ttl": Typed("I", 5),
    }
    assert soft(lambda: declare(vhost, arguments=received)) == inequivalent(
        "x-message-ttl", "the value '5' of type 'signedint'", "none"
    )


def test_arguments_of_other_queue_types_are_not_compared(vhost: VHost) -> None:
    declare(vhost)
    declare(vhost, arguments={"x-delivery-limit": Typed("I", 5)})
    declare(vhost, arguments={"x-queue-type": Typed("S", "classic")})


def test_golden_queue_type_mismatch(vhost: VHost) -> None:
    quorum = {"x-queue-type": Typed("S", "quorum")}
    declare(vhost, "classic")
    declare(vhost, "quorum", arguments=quorum)
    assert soft(lambda: declare(vhost, "classic", arguments=quorum)) == inequivalent(
        "x-queue-type", "the value 'quorum' of type 'longstr'", "none", name="classic"
    )
    classic = {"x-queue-type": Typed("S", "classic")}
    assert soft(lambda: declare(vhost, "quorum", arguments=classic)) == inequivalent(
        "x-queue-type", "'classic'", "'quorum'", name="quorum"
    )
    assert soft(lambda: declare(vhost, "quorum")) == inequivalent(
        "x-queue-type", "none", "the value 'quorum' of type 'longstr'", name="quorum"
    )
    assert declare(vhost, "quorum", passive=True)[0].name == "quorum"


def test_existing_queue_arguments_are_not_validated_again(vhost: VHost) -> None:
    declare(vhost)
    declare(vhost, arguments={"x-queue-leader-locator": Typed("S", "bogus")})


def test_golden_reserved_prefix(vhost: VHost) -> None:
    assert soft(lambda: declare(vhost, "amq.g-oracle-test")) == (
        403,
        "ACCESS_REFUSED - queue name 'amq.g-oracle-test' contains reserved prefix 'amq.*'",
    )
    assert soft(lambda: declare(vhost, "amq.nope", passive=True))[0] == 404


def test_server_named_queues_may_use_the_prefix_once(vhost: VHost) -> None:
    record, created = declare(vhost, "amq.gen-abc", exclusive=True, server_named=True)
    assert created and record.name == "amq.gen-abc"
    assert declare(vhost, "amq.gen-abc", passive=True) == (record, False)
    # A client redeclaring it by name is refused, as RabbitMQ does.
    assert soft(lambda: declare(vhost, "amq.gen-abc", exclusive=True))[0] == 403


def test_exclusive_queue_is_stored_non_durable(vhost: VHost) -> None:
    record, _ = declare(vhost, exclusive=True, durable=True)
    assert record.exclusive_owner == OWNER and record.exclusive and not record.durable
    assert declare(vhost, exclusive=True, durable=True) == (record, False)
    assert declare(vhost, exclusive=True, durable=False) == (record, False)


def test_golden_exclusive_queue_of_another_connection(vhost: VHost) -> None:
    declare(vhost, durable=False, exclusive=True)
    assert soft(lambda: declare(vhost, owner=OTHER, durable=False, exclusive=True)) == locked()
    assert soft(lambda: declare(vhost, owner=OTHER, passive=True)) == locked()
    assert soft(lambda: vhost.check_queue_access("q", OTHER)) == locked()
    assert vhost.check_queue_access("q", OWNER).name == "q"


def test_exclusive_flag_must_match_even_for_the_owner(vhost: VHost) -> None:
    declare(vhost, exclusive=True)
    assert soft(lambda: declare(vhost, durable=False)) == locked()


def test_check_queue_access(vhost: VHost) -> None:
    declare(vhost)
    assert vhost.check_queue_access("q", OTHER).name == "q"
    assert soft(lambda: vhost.check_queue_access("nope", OWNER)) == (
        404,
        "NOT_FOUND - no queue 'nope' in vhost '/'",
    )


def test_delete_queue_removes_its_bindings(vhost: VHost) -> None:
    record, _ = declare(vhost)
    vhost.bind("q", DestinationKind.QUEUE, "amq.direct", "k", {})
    vhost.bind("q", DestinationKind.QUEUE, "amq.topic", "#", {})
    assert vhost.delete_queue("q") is record
    assert vhost.queues == {}
    assert vhost.bindings_of("amq.direct") == []
    assert vhost.bindings_of("amq.topic") == []
    assert vhost.route("amq.topic", ["k"], None) == []
    assert soft(lambda: vhost.delete_queue("q"))[0] == 404
