"""VHost.route: every exchange type, exchange-to-exchange bindings, alternate exchanges."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from warren.amqp.table import Typed
from warren.errors import AmqpError, SoftError
from warren.model import DestinationKind, VHost

QUEUE = DestinationKind.QUEUE
EXCHANGE = DestinationKind.EXCHANGE


def soft(action: Callable[[], object]) -> tuple[int, str]:
    with pytest.raises(AmqpError) as caught:
        action()
    assert isinstance(caught.value, SoftError)
    return caught.value.code, caught.value.text


def queues(vhost: VHost, *names: str) -> None:
    for name in names:
        vhost.declare_queue(
            name,
            owner=None,
            passive=False,
            durable=True,
            exclusive=False,
            auto_delete=False,
            arguments={},
        )


def exchange(
    vhost: VHost, name: str, type: str = "direct", *, ae: str | None = None, internal: bool = False
) -> None:
    arguments = {} if ae is None else {"alternate-exchange": Typed("S", ae)}
    vhost.declare_exchange(
        name,
        type,
        passive=False,
        durable=True,
        auto_delete=False,
        internal=internal,
        arguments=arguments,
    )


@pytest.fixture
def vhost() -> VHost:
    vhost = VHost()
    queues(vhost, "q1", "q2", "q3")
    return vhost


def test_golden_publish_to_a_missing_exchange(vhost: VHost) -> None:
    assert soft(lambda: vhost.route("missing", ["rk"], None)) == (
        404,
        "NOT_FOUND - no exchange 'missing' in vhost '/'",
    )


def test_publish_to_an_internal_exchange(vhost: VHost) -> None:
    exchange(vhost, "int", "fanout", internal=True)
    assert soft(lambda: vhost.route("int", [""], None)) == (
        403,
        "ACCESS_REFUSED - cannot publish to internal exchange 'int' in vhost '/'",
    )
    assert soft(lambda: vhost.route("amq.rabbitmq.trace", [""], None))[0] == 403


def test_default_exchange(vhost: VHost) -> None:
    assert vhost.route("", ["q1"], None) == ["q1"]
    assert vhost.route("", ["nope"], None) == []
    assert vhost.route("", ["q2", "nope", "q1", "q2"], None) == ["q1", "q2"]  # CC/BCC keys


def test_direct(vhost: VHost) -> None:
    vhost.bind("q1", QUEUE, "amq.direct", "a", {})
    vhost.bind("q2", QUEUE, "amq.direct", "a", {"ignored": 1})
    vhost.bind("q3", QUEUE, "amq.direct", "b", {})
    assert vhost.route("amq.direct", ["a"], None) == ["q1", "q2"]
    assert vhost.route("amq.direct", ["b"], None) == ["q3"]
    assert vhost.route("amq.direct", ["A"], None) == []
    assert vhost.route("amq.direct", ["b", "a", "c"], None) == ["q1", "q2", "q3"]


def test_fanout_ignores_keys(vhost: VHost) -> None:
    vhost.bind("q2", QUEUE, "amq.fanout", "whatever", {})
    vhost.bind("q1", QUEUE, "amq.fanout", "", {})
    assert vhost.route("amq.fanout", ["x"], None) == ["q1", "q2"]


def test_topic(vhost: VHost) -> None:
    vhost.bind("q1", QUEUE, "amq.topic", "stock.*.nyse", {})
    vhost.bind("q2", QUEUE, "amq.topic", "stock.#", {})
    vhost.bind("q3", QUEUE, "amq.topic", "#.nyse", {})
    assert vhost.route("amq.topic", ["stock.ibm.nyse"], None) == ["q1", "q2", "q3"]
    assert vhost.route("amq.topic", ["stock"], None) == ["q2"]
    assert vhost.route("amq.topic", ["nyse"], None) == ["q3"]
    assert vhost.route("amq.topic", ["bonds", "x.nyse"], None) == ["q3"]


def test_headers(vhost: VHost) -> None:
    vhost.bind("q1", QUEUE, "amq.match", "", {"format": "pdf", "type": "report"})
    vhost.bind("q2", QUEUE, "amq.match", "", {"x-match": "any", "format": "pdf", "type": "log"})
    vhost.bind("q3", QUEUE, "amq.headers", "", {})
    assert vhost.route("amq.match", [""], {"format": "pdf", "type": "report"}) == ["q1", "q2"]
    assert vhost.route("amq.match", [""], {"type": "log"}) == ["q2"]
    assert vhost.route("amq.match", [""], None) == []
    assert vhost.route("amq.headers", ["any"], None) == ["q3"]


def test_exchange_to_exchange(vhost: VHost) -> None:
    exchange(vhost, "x1", "topic")
    exchange(vhost, "x2", "fanout")
    vhost.bind("x2", EXCHANGE, "x1", "a.*", {})
    vhost.bind("q1", QUEUE, "x1", "a.b", {})
    vhost.bind("q1", QUEUE, "x2", "", {})  # q1 reached twice: listed once
    vhost.bind("q2", QUEUE, "x2", "", {})
    assert vhost.route("x1", ["a.b"], None) == ["q1", "q2"]
    assert vhost.route("x1", ["a.c"], None) == ["q1", "q2"]
    assert vhost.route("x1", ["b"], None) == []


def test_cycles_end(vhost: VHost) -> None:
    exchange(vhost, "x1", "fanout")
    exchange(vhost, "x2", "fanout")
    vhost.bind("x2", EXCHANGE, "x1", "", {})
    vhost.bind("x1", EXCHANGE, "x2", "", {})
    vhost.bind("x1", EXCHANGE, "x1", "", {})
    vhost.bind("q3", QUEUE, "x2", "", {})
    assert vhost.route("x1", [""], None) == ["q3"]
    assert vhost.route("x2", [""], None) == ["q3"]


def test_alternate_exchange_takes_what_routes_nowhere(vhost: VHost) -> None:
    exchange(vhost, "ae", "fanout")
    exchange(vhost, "main", ae="ae")
    vhost.bind("q1", QUEUE, "main", "k", {})
    vhost.bind("q2", QUEUE, "ae", "", {})
    assert vhost.route("main", ["k"], None) == ["q1"]
    assert vhost.route("main", ["other"], None) == ["q2"]


def test_alternate_exchange_is_per_exchange_in_a_chain(vhost: VHost) -> None:
    # Checked on RabbitMQ 3.10.8: main routes to e2e (not nothing), so main's alternate is not
    # used; e2e routes nothing, so e2e's alternate is.
    exchange(vhost, "ae", "fanout")
    exchange(vhost, "e2e", ae="ae")
    exchange(vhost, "main", ae="ae")
    vhost.bind("e2e", EXCHANGE, "main", "k", {})
    vhost.bind("q1", QUEUE, "ae", "", {})
    assert vhost.route("main", ["k"], None) == ["q1"]
    assert vhost.route("main", ["z"], None) == ["q1"]
    exchange(vhost, "lonely")
    vhost.bind("lonely", EXCHANGE, "amq.direct", "k", {})
    exchange(vhost, "main2", ae="q-less")
    vhost.bind("lonely", EXCHANGE, "main2", "k", {})
    assert vhost.route("main2", ["k"], None) == []


def test_alternate_exchange_edge_cases(vhost: VHost) -> None:
    exchange(vhost, "to-missing", ae="missing")
    assert vhost.route("to-missing", ["k"], None) == []
    exchange(vhost, "to-default", ae="")  # the default exchange has no bindings to follow
    assert vhost.route("to-default", ["q1"], None) == []
    exchange(vhost, "internal", "fanout", internal=True)
    vhost.bind("q2", QUEUE, "internal", "", {})
    exchange(vhost, "to-internal", ae="internal")
    assert vhost.route("to-internal", ["k"], None) == ["q2"]
    exchange(vhost, "to-self", ae="to-self")
    assert vhost.route("to-self", ["k"], None) == []
    exchange(vhost, "ping", ae="pong")
    exchange(vhost, "pong", ae="ping")
    assert vhost.route("ping", ["k"], None) == []


def test_deleted_alternate_exchange_is_skipped(vhost: VHost) -> None:
    exchange(vhost, "ae", "fanout")
    exchange(vhost, "main", ae="ae")
    vhost.bind("q1", QUEUE, "ae", "", {})
    vhost.delete_exchange("ae", if_unused=False)
    assert vhost.route("main", ["k"], None) == []


# --- Property: route() against a naive model of the same vhost, under random changes. ---

EXCHANGE_NAMES = ["x0", "x1", "x2"]
QUEUE_NAMES = ["q0", "q1"]
KEYS = ["a", "b"]
AMQ_EXCHANGES = [name for name in VHost().exchanges if name]


@dataclasses.dataclass
class Naive:
    """The vhost as plain lists: what each operation should do, written the obvious way."""

    exchanges: dict[str, tuple[str, bool, str | None]]  # type, auto_delete, alternate
    queues: list[str]
    bindings: list[tuple[str, str, DestinationKind, str]]

    def route(self, source: str, key: str) -> list[str]:
        found: set[str] = set()
        seen = {source}
        pending = [source]
        while pending:
            name = pending.pop()
            type_name, _, alternate = self.exchanges[name]
            targets = [
                (kind, destination)
                for (src, destination, kind, binding_key) in self.bindings
                if src == name and (type_name == "fanout" or binding_key == key)
            ]
            if not targets and alternate is not None:
                targets = [(EXCHANGE, alternate)]
                if alternate in seen or alternate not in self.exchanges:
                    targets = []
            for kind, destination in targets:
                if kind is QUEUE:
                    found.add(destination)
                elif destination not in seen:
                    seen.add(destination)
                    if destination in self.exchanges:
                        pending.append(destination)
        return sorted(found)

    def remove_destination(self, kind: DestinationKind, name: str) -> None:
        sources = {src for (src, dst, k, _) in self.bindings if (k, dst) == (kind, name)}
        self.bindings = [b for b in self.bindings if (b[2], b[1]) != (kind, name)]
        for source in sorted(sources):
            self.maybe_auto_delete(source)

    def maybe_auto_delete(self, name: str) -> None:
        auto_delete = name in self.exchanges and self.exchanges[name][1]
        if auto_delete and not any(src == name for (src, *_rest) in self.bindings):
            del self.exchanges[name]
            self.remove_destination(EXCHANGE, name)


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("bind"),
            st.sampled_from(EXCHANGE_NAMES + QUEUE_NAMES),
            st.sampled_from(EXCHANGE_NAMES),
            st.sampled_from(KEYS),
        ),
        st.tuples(
            st.just("unbind"),
            st.sampled_from(EXCHANGE_NAMES + QUEUE_NAMES),
            st.sampled_from(EXCHANGE_NAMES),
            st.sampled_from(KEYS),
        ),
        st.tuples(st.just("delete_queue"), st.sampled_from(QUEUE_NAMES)),
        st.tuples(st.just("delete_exchange"), st.sampled_from(EXCHANGE_NAMES)),
    ),
    max_size=30,
)
EXCHANGE_SPECS = st.lists(
    st.tuples(
        st.sampled_from(["direct", "fanout"]),
        st.booleans(),
        st.sampled_from([None, *EXCHANGE_NAMES, "missing"]),
    ),
    min_size=len(EXCHANGE_NAMES),
    max_size=len(EXCHANGE_NAMES),
)


def build(specs: list[tuple[str, bool, str | None]]) -> tuple[VHost, Naive]:
    vhost = VHost()
    naive = Naive({}, list(QUEUE_NAMES), [])
    queues(vhost, *QUEUE_NAMES)
    for name, (type_name, auto_delete, alternate) in zip(EXCHANGE_NAMES, specs, strict=True):
        arguments = {} if alternate is None else {"alternate-exchange": Typed("S", alternate)}
        vhost.declare_exchange(
            name,
            type_name,
            passive=False,
            durable=True,
            auto_delete=auto_delete,
            internal=False,
            arguments=arguments,
        )
        naive.exchanges[name] = (type_name, auto_delete, alternate)
    return vhost, naive


def apply(vhost: VHost, naive: Naive, operation: tuple[str, ...]) -> None:
    verb, *rest = operation
    if verb in ("bind", "unbind"):
        destination, source, key = rest
        kind = QUEUE if destination.startswith("q") else EXCHANGE
        present = source in naive.exchanges and (
            destination in (naive.queues if kind is QUEUE else naive.exchanges)
        )
        if not present:
            return
        if verb == "bind":
            vhost.bind(destination, kind, source, key, {})
            if (source, destination, kind, key) not in naive.bindings:
                naive.bindings.append((source, destination, kind, key))
        else:
            vhost.unbind(destination, kind, source, key, {})
            if (source, destination, kind, key) in naive.bindings:
                naive.bindings.remove((source, destination, kind, key))
                naive.maybe_auto_delete(source)
    elif verb == "delete_queue" and rest[0] in naive.queues:
        vhost.delete_queue(rest[0])
        naive.queues.remove(rest[0])
        naive.remove_destination(QUEUE, rest[0])
    elif verb == "delete_exchange" and rest[0] in naive.exchanges:
        vhost.delete_exchange(rest[0], if_unused=False)
        del naive.exchanges[rest[0]]
        naive.bindings = [b for b in naive.bindings if b[0] != rest[0]]
        naive.remove_destination(EXCHANGE, rest[0])


@settings(max_examples=300, deadline=None)
@given(specs=EXCHANGE_SPECS, operations=OPERATIONS)
@example(  # an auto-delete exchange losing its queue must also lose the bindings to it
    specs=[("direct", True, None), ("fanout", False, None), ("direct", False, "x0")],
    operations=[("bind", "q0", "x0", "a"), ("bind", "x0", "x1", "b"), ("delete_queue", "q0")],
)
def test_route_matches_the_naive_model(
    specs: list[tuple[str, bool, str | None]], operations: list[tuple[str, ...]]
) -> None:
    vhost, naive = build(specs)
    for operation in operations:
        apply(vhost, naive, operation)
    assert sorted(vhost.exchanges) == sorted(["", *naive.exchanges, *AMQ_EXCHANGES])
    assert sorted(vhost.queues) == sorted(naive.queues)
    explicit = [b for b in vhost.list_bindings() if b.source]
    assert sorted((b.source, b.destination, b.kind.value, b.routing_key) for b in explicit) == (
        sorted((src, dst, kind.value, key) for (src, dst, kind, key) in naive.bindings)
    )
    for name in naive.exchanges:
        for key in KEYS:
            routed = vhost.route(name, [key], None)
            assert routed == naive.route(name, key)
            assert routed == sorted(set(routed))
