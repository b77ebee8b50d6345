"""queue.bind / exchange.bind and their unbinds: checks in RabbitMQ's order, auto-delete."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from warren.amqp.table import Typed
from warren.errors import AmqpError, SoftError
from warren.model import Binding, DestinationKind, VHost

QUEUE = DestinationKind.QUEUE
EXCHANGE = DestinationKind.EXCHANGE
DEFAULT_REFUSED = (403, "ACCESS_REFUSED - operation not permitted on the default exchange")
OWNER, OTHER = "connection-1", "connection-2"


def soft(action: Callable[[], object]) -> tuple[int, str]:
    with pytest.raises(AmqpError) as caught:
        action()
    assert isinstance(caught.value, SoftError)
    return caught.value.code, caught.value.text


def queue(vhost: VHost, name: str, *, exclusive: bool = False) -> None:
    vhost.declare_queue(
        name,
        owner=OWNER,
        passive=False,
        durable=not exclusive,
        exclusive=exclusive,
        auto_delete=False,
        arguments={},
    )


def exchange(
    vhost: VHost, name: str, type: str = "direct", *, auto_delete: bool = False, ae: str = ""
) -> None:
    arguments = {"alternate-exchange": Typed("S", ae)} if ae else {}
    vhost.declare_exchange(
        name,
        type,
        passive=False,
        durable=True,
        auto_delete=auto_delete,
        internal=False,
        arguments=arguments,
    )


@pytest.fixture
def vhost() -> VHost:
    vhost = VHost()
    queue(vhost, "q")
    exchange(vhost, "x")
    return vhost


def test_golden_bind_missing(vhost: VHost) -> None:
    assert soft(lambda: vhost.bind("nope", QUEUE, "x", "k", {})) == (
        404,
        "NOT_FOUND - no queue 'nope' in vhost '/'",
    )
    assert soft(lambda: vhost.bind("q", QUEUE, "nope", "k", {})) == (
        404,
        "NOT_FOUND - no exchange 'nope' in vhost '/'",
    )
    vhost.unbind("q", QUEUE, "x", "never-bound", {})


def test_missing_source_is_reported_before_missing_destination(vhost: VHost) -> None:
    assert soft(lambda: vhost.bind("noq", QUEUE, "nox", "k", {})) == (
        404,
        "NOT_FOUND - no exchange 'nox' in vhost '/'",
    )
    assert soft(lambda: vhost.bind("nox", EXCHANGE, "x", "k", {})) == (
        404,
        "NOT_FOUND - no exchange 'nox' in vhost '/'",
    )


def test_unbind_of_missing_things_is_fine(vhost: VHost) -> None:
    vhost.unbind("noq", QUEUE, "x", "k", {})
    vhost.unbind("q", QUEUE, "nox", "k", {})
    vhost.unbind("noq", QUEUE, "nox", "k", {})
    vhost.unbind("nox", EXCHANGE, "x", "k", {})


def test_golden_default_exchange_ops(vhost: VHost) -> None:
    assert soft(lambda: vhost.bind("q", QUEUE, "", "k", {})) == DEFAULT_REFUSED
    assert soft(lambda: vhost.unbind("q", QUEUE, "", "k", {})) == DEFAULT_REFUSED
    assert soft(lambda: vhost.bind("", EXCHANGE, "x", "k", {})) == DEFAULT_REFUSED
    assert soft(lambda: vhost.unbind("", EXCHANGE, "x", "k", {})) == DEFAULT_REFUSED
    # The default exchange is checked before existence.
    assert soft(lambda: vhost.bind("missing", QUEUE, "", "k", {})) == DEFAULT_REFUSED


def test_bind_is_idempotent_and_arguments_make_bindings_distinct(vhost: VHost) -> None:
    vhost.bind("q", QUEUE, "x", "k", {"a": 1})
    vhost.bind("q", QUEUE, "x", "k", {"a": 1})
    vhost.bind("q", QUEUE, "x", "k", {"a": 2})
    assert vhost.bindings_of("x") == [
        Binding("x", "q", QUEUE, "k", {"a": 1}),
        Binding("x", "q", QUEUE, "k", {"a": 2}),
    ]
    vhost.unbind("q", QUEUE, "x", "k", {"a": 1})
    assert vhost.route("x", ["k"], None) == ["q"]
    vhost.unbind("q", QUEUE, "x", "k", {"a": 2})
    assert vhost.route("x", ["k"], None) == []
    assert vhost.bindings_to("q", QUEUE) == [Binding("", "q", QUEUE, "q", {})]


def test_bound_arguments_are_copied(vhost: VHost) -> None:
    arguments: dict[str, object] = {"a": 1}
    vhost.bind("q", QUEUE, "x", "k", arguments)
    arguments["a"] = 2
    assert vhost.bindings_of("x")[0].arguments == {"a": 1}


def test_headers_binding_validates_x_match(vhost: VHost) -> None:
    assert soft(lambda: vhost.bind("q", QUEUE, "amq.headers", "", {"x-match": "foo"})) == (
        406,
        'PRECONDITION_FAILED - Invalid x-match field value <<"foo">>; '
        "expected all, any, all-with-x, or any-with-x",
    )
    vhost.bind("q", QUEUE, "x", "", {"x-match": "foo"})  # other exchange types do not look
    vhost.unbind("q", QUEUE, "amq.headers", "", {"x-match": "foo"})


def test_exclusive_queue_of_another_connection(vhost: VHost) -> None:
    queue(vhost, "excl", exclusive=True)
    locked = soft(lambda: vhost.bind("excl", QUEUE, "x", "k", {}, owner=OTHER))
    assert locked[0] == 405
    assert locked[1].startswith("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue")
    vhost.bind("excl", QUEUE, "x", "k", {}, owner=OWNER)
    vhost.bind("excl", QUEUE, "x", "k2", {})  # without an owner the runtime checked already
    # Refusals that come first in RabbitMQ come first here too.
    assert soft(lambda: vhost.bind("excl", QUEUE, "", "k", {}, owner=OTHER))[0] == 403
    assert soft(lambda: vhost.bind("excl", QUEUE, "nox", "k", {}, owner=OTHER))[0] == 404
    bad = {"x-match": "z"}
    assert soft(lambda: vhost.bind("excl", QUEUE, "amq.match", "k", bad, owner=OTHER))[0] == 406
    # Unbinding: only an existing binding is guarded.
    assert soft(lambda: vhost.unbind("excl", QUEUE, "x", "k", {}, owner=OTHER))[0] == 405
    vhost.unbind("excl", QUEUE, "x", "k3", {}, owner=OTHER)
    vhost.unbind("excl", QUEUE, "x", "k", {}, owner=OWNER)
    assert vhost.route("x", ["k"], None) == []


def test_auto_delete_exchange_goes_with_its_last_binding(vhost: VHost) -> None:
    exchange(vhost, "ad", auto_delete=True)
    vhost.bind("q", QUEUE, "ad", "a", {})
    vhost.bind("q", QUEUE, "ad", "b", {})
    vhost.unbind("q", QUEUE, "ad", "a", {})
    assert "ad" in vhost.exchanges
    vhost.unbind("q", QUEUE, "ad", "b", {})
    assert "ad" not in vhost.exchanges


def test_auto_delete_exchange_without_bindings_stays(vhost: VHost) -> None:
    exchange(vhost, "ad", auto_delete=True)
    vhost.unbind("q", QUEUE, "ad", "never", {})
    assert "ad" in vhost.exchanges


def test_auto_delete_exchange_goes_with_its_last_queue(vhost: VHost) -> None:
    exchange(vhost, "ad", "fanout", auto_delete=True)
    vhost.bind("q", QUEUE, "ad", "", {})
    vhost.delete_queue("q")
    assert "ad" not in vhost.exchanges


def test_auto_delete_cascades_through_exchange_bindings(vhost: VHost) -> None:
    exchange(vhost, "a1", auto_delete=True)
    exchange(vhost, "a2", auto_delete=True)
    exchange(vhost, "keep")
    vhost.bind("a2", EXCHANGE, "a1", "k", {})  # a1 -> a2 -> q
    vhost.bind("q", QUEUE, "a2", "k", {})
    vhost.bind("a2", EXCHANGE, "keep", "k", {})  # keep -> a2, keep is not auto-delete
    vhost.delete_queue("q")
    assert "a2" not in vhost.exchanges
    assert "a1" not in vhost.exchanges
    assert "keep" in vhost.exchanges
    assert vhost.bindings_of("keep") == []


def test_deleting_an_exchange_cascades_to_auto_delete_sources(vhost: VHost) -> None:
    exchange(vhost, "ad", auto_delete=True)
    vhost.bind("x", EXCHANGE, "ad", "k", {})
    vhost.delete_exchange("x", if_unused=False)
    assert "ad" not in vhost.exchanges


def test_self_bound_auto_delete_exchange_stays(vhost: VHost) -> None:
    exchange(vhost, "ad", auto_delete=True)
    vhost.bind("ad", EXCHANGE, "ad", "loop", {})
    vhost.bind("q", QUEUE, "ad", "k", {})
    vhost.delete_queue("q")
    assert "ad" in vhost.exchanges


def test_auto_delete_cascade_of_a_long_chain(vhost: VHost) -> None:
    depth = 3000  # deeper than Python's recursion limit
    for index in range(depth):
        exchange(vhost, f"c{index}", auto_delete=True)
    vhost.bind("q", QUEUE, "c0", "k", {})
    for index in range(1, depth):
        vhost.bind(f"c{index - 1}", EXCHANGE, f"c{index}", "k", {})
    vhost.delete_queue("q")
    assert not any(name.startswith("c") for name in vhost.exchanges)


def test_listing(vhost: VHost) -> None:
    queue(vhost, "a")
    exchange(vhost, "y")
    vhost.bind("q", QUEUE, "y", "k2", {})
    vhost.bind("y", EXCHANGE, "x", "k", {})
    vhost.bind("q", QUEUE, "x", "k", {})
    vhost.bind("a", QUEUE, "x", "k", {})
    assert vhost.list_bindings() == [
        Binding("", "a", QUEUE, "a", {}),
        Binding("", "q", QUEUE, "q", {}),
        Binding("x", "y", EXCHANGE, "k", {}),
        Binding("x", "a", QUEUE, "k", {}),
        Binding("x", "q", QUEUE, "k", {}),
        Binding("y", "q", QUEUE, "k2", {}),
    ]
    assert vhost.bindings_of("") == vhost.list_bindings()[:2]
    assert vhost.bindings_to("q", QUEUE) == [
        Binding("", "q", QUEUE, "q", {}),
        Binding("y", "q", QUEUE, "k2", {}),
        Binding("x", "q", QUEUE, "k", {}),
    ]
    assert vhost.bindings_to("y", EXCHANGE) == [Binding("x", "y", EXCHANGE, "k", {})]
    assert soft(lambda: vhost.bindings_of("nope"))[0] == 404
