"""exchange.declare and exchange.delete: outcomes and texts as RabbitMQ 3.10.8 gives them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from warren.amqp.table import Typed
from warren.errors import AmqpError, HardError, SoftError
from warren.model import DestinationKind, Exchange, ExchangeType, VHost


def declare(
    vhost: VHost,
    name: str,
    type: str = "direct",
    *,
    passive: bool = False,
    durable: bool = True,
    auto_delete: bool = False,
    internal: bool = False,
    arguments: dict[str, Typed] | None = None,
) -> Exchange:
    return vhost.declare_exchange(
        name,
        type,
        passive=passive,
        durable=durable,
        auto_delete=auto_delete,
        internal=internal,
        arguments=arguments or {},
    )


def failure(action: Callable[[], object]) -> AmqpError:
    with pytest.raises(AmqpError) as caught:
        action()
    return caught.value


def soft(action: Callable[[], object]) -> tuple[int, str]:
    error = failure(action)
    assert isinstance(error, SoftError)
    return error.code, error.text


def inequivalent(arg: str, received: str, current: str, name: str = "x") -> tuple[int, str]:
    return 406, (
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for exchange '{name}' in vhost '/': "
        f"received {received} but current is {current}"
    )


@pytest.fixture
def vhost() -> VHost:
    return VHost()


def test_predeclared_exchanges() -> None:
    vhost = VHost("/other")
    expected = {
        "": ExchangeType.DIRECT,
        "amq.direct": ExchangeType.DIRECT,
        "amq.fanout": ExchangeType.FANOUT,
        "amq.topic": ExchangeType.TOPIC,
        "amq.headers": ExchangeType.HEADERS,
        "amq.match": ExchangeType.HEADERS,
        "amq.rabbitmq.trace": ExchangeType.TOPIC,
    }
    assert {name: x.type for name, x in vhost.exchanges.items()} == expected
    assert all(x.durable and not x.auto_delete for x in vhost.exchanges.values())
    assert [name for name, x in vhost.exchanges.items() if x.internal] == ["amq.rabbitmq.trace"]
    assert vhost.name == "/other"


def test_declare_then_same_again(vhost: VHost) -> None:
    first = declare(vhost, "x", "topic", auto_delete=True, internal=True)
    assert declare(vhost, "x", "topic", auto_delete=True, internal=True) is first
    assert (first.type, first.durable, first.auto_delete, first.internal) == (
        ExchangeType.TOPIC,
        True,
        True,
        True,
    )


@pytest.mark.parametrize("type_name", ["direct", "fanout", "topic", "headers"])
def test_every_builtin_type(vhost: VHost, type_name: str) -> None:
    assert declare(vhost, "x", type_name).type is ExchangeType(type_name)


def test_golden_exchange_type_mismatch(vhost: VHost) -> None:
    declare(vhost, "x", "direct", durable=True)
    assert soft(lambda: declare(vhost, "x", "fanout")) == inequivalent(
        "type", "'fanout'", "'direct'"
    )
    assert soft(lambda: declare(vhost, "x", "direct", durable=False)) == inequivalent(
        "durable", "'false'", "'true'"
    )
    declare(vhost, "x", "direct", durable=True)
    assert declare(vhost, "x", "fanout", passive=True).type is ExchangeType.DIRECT


def test_flags_are_compared_in_rabbitmqs_order(vhost: VHost) -> None:
    declare(vhost, "x", "fanout", internal=True)
    assert soft(lambda: declare(vhost, "x", "fanout", internal=False)) == inequivalent(
        "internal", "'false'", "'true'"
    )
    assert soft(lambda: declare(vhost, "x", "fanout", internal=True, auto_delete=True)) == (
        inequivalent("auto_delete", "'true'", "'false'")
    )
    assert soft(lambda: declare(vhost, "x", "topic", durable=False)) == inequivalent(
        "type", "'topic'", "'fanout'"
    )


def test_alternate_exchange_equivalence(vhost: VHost) -> None:
    ae = {"alternate-exchange": Typed("S", "ae")}
    declare(vhost, "x", arguments=ae)
    declare(vhost, "x", arguments={**ae, "other": Typed("I", 1)})  # other arguments: ignored
    assert soft(lambda: declare(vhost, "x", arguments={"alternate-exchange": Typed("S", "b")})) == (
        inequivalent("alternate-exchange", "'b'", "'ae'")
    )
    assert soft(lambda: declare(vhost, "x")) == inequivalent(
        "alternate-exchange", "none", "the value 'ae' of type 'longstr'"
    )
    assert soft(lambda: declare(vhost, "x", arguments={"alternate-exchange": Typed("I", 5)})) == (
        inequivalent("alternate-exchange", "'5'", "'ae'")
    )
    declare(vhost, "plain")
    assert soft(lambda: declare(vhost, "plain", arguments=ae)) == inequivalent(
        "alternate-exchange", "the value 'ae' of type 'longstr'", "none", name="plain"
    )


def test_alternate_exchange_of_wrong_type(vhost: VHost) -> None:
    arguments = {"alternate-exchange": Typed("I", 5)}
    assert soft(lambda: declare(vhost, "x", arguments=arguments)) == (
        406,
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' "
        "in exchange 'x' in vhost '/'",
    )
    assert "x" not in vhost.exchanges


def test_alternate_exchange_property(vhost: VHost) -> None:
    assert (
        declare(vhost, "x", arguments={"alternate-exchange": Typed("S", "ae")}).alternate_exchange
        == "ae"
    )
    assert declare(vhost, "y").alternate_exchange is None


@pytest.mark.parametrize("type_name", ["direct2", "no-such-type", "", "x-consistent-hash"])
def test_unknown_exchange_type_closes_the_connection(vhost: VHost, type_name: str) -> None:
    error = failure(lambda: declare(vhost, "x", type_name))
    assert isinstance(error, HardError)
    assert (error.code, error.text) == (
        503,
        f"COMMAND_INVALID - unknown exchange type '{type_name}'",
    )


def test_unknown_type_is_checked_before_the_name(vhost: VHost) -> None:
    assert isinstance(failure(lambda: declare(vhost, "", "foo")), HardError)
    assert isinstance(failure(lambda: declare(vhost, "amq.direct", "foo")), HardError)


def test_passive_declare_does_not_check_the_type(vhost: VHost) -> None:
    assert declare(vhost, "amq.topic", "nonsense", passive=True).type is ExchangeType.TOPIC


def test_passive_declare_of_a_missing_exchange(vhost: VHost) -> None:
    assert soft(lambda: declare(vhost, "nope", passive=True)) == (
        404,
        "NOT_FOUND - no exchange 'nope' in vhost '/'",
    )


DEFAULT_REFUSED = (403, "ACCESS_REFUSED - operation not permitted on the default exchange")


@pytest.mark.parametrize("passive", [False, True])
def test_default_exchange_cannot_be_declared(vhost: VHost, passive: bool) -> None:
    assert soft(lambda: declare(vhost, "", passive=passive)) == DEFAULT_REFUSED


def test_golden_reserved_prefix(vhost: VHost) -> None:
    assert soft(lambda: declare(vhost, "amq.g-oracle-test")) == (
        403,
        "ACCESS_REFUSED - exchange name 'amq.g-oracle-test' contains reserved prefix 'amq.*'",
    )
    assert declare(vhost, "amq.direct", passive=True) is vhost.exchanges["amq.direct"]
    assert declare(vhost, "amq.direct", "direct", durable=True) is vhost.exchanges["amq.direct"]
    assert declare(vhost, "amq.match", "headers") is vhost.exchanges["amq.match"]


def test_redeclare_of_a_system_exchange_must_be_equivalent(vhost: VHost) -> None:
    assert soft(lambda: declare(vhost, "amq.direct", "fanout")) == inequivalent(
        "type", "'fanout'", "'direct'", name="amq.direct"
    )
    assert soft(lambda: declare(vhost, "amq.direct", durable=False)) == inequivalent(
        "durable", "'false'", "'true'", name="amq.direct"
    )


def test_delete(vhost: VHost) -> None:
    declare(vhost, "x")
    vhost.delete_exchange("x", if_unused=False)
    assert "x" not in vhost.exchanges
    vhost.delete_exchange("x", if_unused=False)  # a missing exchange: fine
    vhost.delete_exchange("never", if_unused=True)


def test_golden_delete_system_and_default(vhost: VHost) -> None:
    assert soft(lambda: vhost.delete_exchange("amq.direct", if_unused=False)) == (
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )
    assert soft(lambda: vhost.delete_exchange("amq.nonexistent", if_unused=False)) == (
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.nonexistent' in vhost '/' not allowed",
    )
    assert soft(lambda: vhost.delete_exchange("", if_unused=False)) == DEFAULT_REFUSED
    assert "amq.direct" in vhost.exchanges


def test_delete_if_unused(vhost: VHost) -> None:
    declare(vhost, "src")
    declare(vhost, "dst")
    vhost.bind("dst", DestinationKind.EXCHANGE, "src", "k", {})
    # Only bindings as a source make an exchange used.
    vhost.delete_exchange("dst", if_unused=True)
    assert "dst" not in vhost.exchanges
    assert vhost.bindings_of("src") == []
    declare(vhost, "dst")
    vhost.bind("dst", DestinationKind.EXCHANGE, "src", "k", {})
    assert soft(lambda: vhost.delete_exchange("src", if_unused=True)) == (
        406,
        "PRECONDITION_FAILED - exchange 'src' in vhost '/' in use",
    )
    vhost.delete_exchange("src", if_unused=False)
    assert vhost.bindings_to("dst", DestinationKind.EXCHANGE) == []


def test_self_bound_exchange_is_in_use(vhost: VHost) -> None:
    declare(vhost, "x")
    vhost.bind("x", DestinationKind.EXCHANGE, "x", "k", {})
    assert soft(lambda: vhost.delete_exchange("x", if_unused=True))[0] == 406
    vhost.delete_exchange("x", if_unused=False)
    assert "x" not in vhost.exchanges
