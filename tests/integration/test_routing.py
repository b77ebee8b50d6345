"""Which queues a message reaches: direct, fanout, topic, headers, default, alternate exchanges.

The topic and headers tables were observed on RabbitMQ 3.10.8. Each table test binds one
exclusive queue per row, publishes every message once and compares what each queue holds.
"""

from __future__ import annotations

import pika
import pytest

# -- helpers ----------------------------------------------------------------------------------


def route(amqp, channel, exchange: str, bindings: dict, messages: list) -> dict[str, list[str]]:
    """Bind a fresh queue per `bindings` entry (label → queue_bind kwargs), publish each
    `(label, routing_key, headers)` to `exchange`; return label → labels of messages held."""
    queues = {}
    for label, bind in bindings.items():
        queues[label] = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queues[label], exchange, **bind)
    for label, routing_key, headers in messages:
        amqp.publish(channel, routing_key, label, exchange=exchange, headers=headers)
    return {label: amqp.bodies(channel, queue) for label, queue in queues.items()}


def keyed(*routing_keys: str) -> list:
    """Messages whose label is their routing key."""
    return [(key, key, None) for key in routing_keys]


# -- direct and fanout ------------------------------------------------------------------------


def test_direct_routes_on_exact_key(amqp):
    channel = amqp.channel()
    exchange = amqp.exchange("x", "direct", channel)
    bindings = {"a": {"routing_key": "a"}, "a-too": {"routing_key": "a"}, "b": {"routing_key": "b"}}
    got = route(amqp, channel, exchange, bindings, keyed("a", "b", "A", "a.b", ""))
    assert got == {"a": ["a"], "a-too": ["a"], "b": ["b"]}


def test_direct_queue_bound_with_two_keys(amqp):
    channel = amqp.channel()
    exchange = amqp.exchange("x", "direct", channel)
    queue = amqp.queue("q", channel)
    channel.queue_bind(queue, exchange, "k1")
    channel.queue_bind(queue, exchange, "k2")
    channel.queue_bind(queue, exchange, "k2")  # binding twice is one binding
    for key in ("k1", "k2", "k3"):
        amqp.publish(channel, key, key, exchange=exchange)
    assert amqp.bodies(channel, queue) == ["k1", "k2"]


def test_fanout_ignores_routing_keys(amqp):
    channel = amqp.channel()
    exchange = amqp.exchange("x", "fanout", channel)
    bindings = {"one": {"routing_key": "one"}, "two": {"routing_key": ""}}
    got = route(amqp, channel, exchange, bindings, keyed("one", "x.y", ""))
    assert got == {"one": ["one", "x.y", ""], "two": ["one", "x.y", ""]}


# -- topic ------------------------------------------------------------------------------------

TOPIC_KEYS = ["", "a", "b", "a.b", "b.a", "a.a", "a.b.c", "a.x.b", "a.x.y.b", "x.a", ".a", "a.",
              ".", "a..b", "..", "a.b.b"]  # fmt: skip
ALL_BUT_EMPTY = [key for key in TOPIC_KEYS if key]
# pattern → the keys it matches, in publish order. The empty key has no words at all, so
# only `#`-only patterns and the empty pattern match it; "." is two empty words.
TOPIC_MATCHES = {
    "#": TOPIC_KEYS,
    "#.#": TOPIC_KEYS,
    "*": ["a", "b"],
    "*.#": ALL_BUT_EMPTY,
    "#.*": ALL_BUT_EMPTY,
    "": [""],
    "a": ["a"],
    "a.*": ["a.b", "a.a", "a."],
    "*.b": ["a.b"],
    "*.*": ["a.b", "b.a", "a.a", "x.a", ".a", "a.", "."],
    "a.#": ["a", "a.b", "a.a", "a.b.c", "a.x.b", "a.x.y.b", "a.", "a..b", "a.b.b"],
    "#.a": ["a", "b.a", "a.a", "x.a", ".a"],
    "a.#.b": ["a.b", "a.x.b", "a.x.y.b", "a..b", "a.b.b"],
    "a.#.#.b": ["a.b", "a.x.b", "a.x.y.b", "a..b", "a.b.b"],
    "a.*.b": ["a.x.b", "a..b", "a.b.b"],
    "a.*.#": ["a.b", "a.a", "a.b.c", "a.x.b", "a.x.y.b", "a.", "a..b", "a.b.b"],
    "#.b.#": ["b", "a.b", "b.a", "a.b.c", "a.x.b", "a.x.y.b", "a..b", "a.b.b"],
    "a..b": ["a..b"],
    "..": [".."],
}


def test_topic_patterns(amqp):
    channel = amqp.channel()
    exchange = amqp.exchange("x", "topic", channel)
    bindings = {pattern: {"routing_key": pattern} for pattern in TOPIC_MATCHES}
    assert route(amqp, channel, exchange, bindings, keyed(*TOPIC_KEYS)) == TOPIC_MATCHES


# -- headers ----------------------------------------------------------------------------------

HEADER_MESSAGES = {
    "both": {"a": 1, "b": "x"},
    "a-only": {"a": 1},
    "b-only": {"b": "x"},
    "no-headers": None,
    "both-and-more": {"a": 1, "b": "x", "c": 3},
    "x-tag-only": {"x-tag": "t"},
    "a-as-string": {"a": "1", "b": "x"},
    "a2-and-x-tag": {"a": 2, "x-tag": "t"},
    "flag": {"flag": True},
    "b-differs": {"a": 1, "b": "y"},
    "empty-table": {},
}
EVERY_HEADER_MESSAGE = list(HEADER_MESSAGES)
HEADER_BINDINGS = {
    "all": ({"x-match": "all", "a": 1, "b": "x"}, ["both", "both-and-more"]),
    "default-is-all": ({"a": 1, "b": "x"}, ["both", "both-and-more"]),
    "any": (
        {"x-match": "any", "a": 1, "b": "x"},
        ["both", "a-only", "b-only", "both-and-more", "a-as-string", "b-differs"],
    ),
    "all-of-nothing": ({"x-match": "all"}, EVERY_HEADER_MESSAGE),
    "no-arguments": ({}, EVERY_HEADER_MESSAGE),
    "any-of-nothing": ({"x-match": "any"}, []),
    "all-ignores-x-keys": ({"x-match": "all", "x-tag": "t"}, EVERY_HEADER_MESSAGE),
    "any-ignores-x-keys": ({"x-match": "any", "x-tag": "t"}, []),
    "all-with-x": ({"x-match": "all-with-x", "x-tag": "t", "a": 2}, ["a2-and-x-tag"]),
    "any-with-x": ({"x-match": "any-with-x", "x-tag": "t"}, ["x-tag-only", "a2-and-x-tag"]),
    "boolean": ({"x-match": "all", "flag": True}, ["flag"]),
}


@pytest.mark.parametrize("exchange_name", ["own", "amq.headers", "amq.match"])
def test_headers_matching(amqp, exchange_name):
    channel = amqp.channel()
    exchange = exchange_name
    if exchange_name == "own":
        exchange = amqp.exchange("x", "headers", channel)
    bindings = {
        label: {"routing_key": "ignored", "arguments": arguments}
        for label, (arguments, _) in HEADER_BINDINGS.items()
    }
    messages = [(label, label, headers) for label, headers in HEADER_MESSAGES.items()]
    expected = {label: matched for label, (_, matched) in HEADER_BINDINGS.items()}
    assert route(amqp, channel, exchange, bindings, messages) == expected


def test_headers_invalid_x_match(amqp):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)

    def bind() -> None:
        channel.queue_bind(queue, "amq.headers", arguments={"x-match": "some"})

    text = (
        'PRECONDITION_FAILED - Invalid x-match field value <<"some">>;'
        " expected all, any, all-with-x, or any-with-x"
    )
    assert amqp.attempt(bind) == {"closed": "channel", "code": 406, "text": text}


# -- default and predeclared exchanges --------------------------------------------------------


def test_default_exchange_routes_by_queue_name(amqp):
    channel = amqp.channel()
    first, second = amqp.queue("first", channel), amqp.queue("second", channel)
    amqp.publish(channel, first, "to-first")
    amqp.publish(channel, second, "to-second")
    amqp.publish(channel, amqp.name("nobody"), "dropped")
    assert (amqp.bodies(channel, first), amqp.bodies(channel, second)) == (
        ["to-first"],
        ["to-second"],
    )


@pytest.mark.parametrize(
    ("exchange", "bind_key", "routing_key"),
    [("amq.direct", "{q}", "{q}"), ("amq.fanout", "", "any"), ("amq.topic", "{q}.#", "{q}.x.y")],
)
def test_predeclared_exchanges_route(amqp, exchange, bind_key, routing_key):
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    channel.queue_bind(queue, exchange, bind_key.format(q=queue))
    amqp.publish(channel, routing_key.format(q=queue), "m1", exchange=exchange)
    channel.queue_unbind(queue, exchange, bind_key.format(q=queue))
    assert amqp.bodies(channel, queue) == ["m1"]


def test_delivery_names_the_exchange_published_to(amqp):
    channel = amqp.channel()
    source = amqp.exchange("source", "direct", channel)
    destination = amqp.exchange("dest", "fanout", channel)
    queue = amqp.queue("q", channel)
    channel.exchange_bind(destination, source, "k")
    channel.queue_bind(queue, destination)
    amqp.publish(channel, "k", "m1", exchange=source)
    method, _, _ = channel.basic_get(queue, auto_ack=True)
    assert (method.exchange, method.routing_key) == (source, "k")


# -- alternate exchanges ----------------------------------------------------------------------


def with_alternate(amqp, channel, alternate: str | None = None) -> tuple[str, str, str]:
    """A direct exchange with an alternate fanout exchange (internal) and one queue on each;
    returns (exchange, queue bound with key "k", queue on the alternate exchange)."""
    alternate = alternate or amqp.exchange("ae", "fanout", channel, internal=True)
    arguments = {"alternate-exchange": alternate}
    exchange = amqp.exchange("x", "direct", channel, arguments=arguments)
    routed, unrouted = amqp.queue("routed", channel), amqp.queue("unrouted", channel)
    channel.queue_bind(routed, exchange, "k")
    channel.queue_bind(unrouted, alternate)
    return exchange, routed, unrouted


def test_alternate_exchange_takes_only_unroutable_messages(amqp):
    channel = amqp.channel()
    exchange, routed, unrouted = with_alternate(amqp, channel)
    amqp.publish(channel, "k", "m1", exchange=exchange)
    amqp.publish(channel, "other", "m2", exchange=exchange)
    assert (amqp.bodies(channel, routed), amqp.bodies(channel, unrouted)) == (["m1"], ["m2"])


def test_alternate_exchange_keeps_exchange_and_routing_key(amqp):
    channel = amqp.channel()
    exchange, _, unrouted = with_alternate(amqp, channel)
    amqp.publish(channel, "other", "m1", exchange=exchange)
    method, _, _ = channel.basic_get(unrouted, auto_ack=True)
    assert (method.exchange, method.routing_key) == (exchange, "other")


def test_mandatory_message_taken_by_alternate_exchange_is_not_returned(amqp):
    channel = amqp.channel()
    exchange, _, unrouted = with_alternate(amqp, channel)
    channel.confirm_delivery()
    amqp.publish(channel, "other", "m1", exchange=exchange, mandatory=True)  # raises if returned
    assert amqp.bodies(channel, unrouted) == ["m1"]


def returned_by(amqp, channel, exchange: str) -> list[tuple[int, str, str]]:
    """Publish an unroutable mandatory message on a confirm channel; what came back."""
    channel.confirm_delivery()
    try:
        amqp.publish(channel, "other", "m1", exchange=exchange, mandatory=True)
    except pika.exceptions.UnroutableError as unroutable:
        return [
            (r.method.reply_code, r.method.reply_text, r.method.exchange)
            for r in unroutable.messages
        ]
    return []


def test_missing_alternate_exchange_means_unroutable(amqp):
    channel = amqp.channel()
    exchange = amqp.exchange(
        "x", "direct", channel, arguments={"alternate-exchange": amqp.name("nope")}
    )
    assert returned_by(amqp, channel, exchange) == [(312, "NO_ROUTE", exchange)]


def test_alternate_exchange_cycle_means_unroutable(amqp):
    channel = amqp.channel()
    first, second = amqp.name("first"), amqp.name("second")
    channel.exchange_declare(first, "direct", arguments={"alternate-exchange": second})
    channel.exchange_declare(second, "direct", arguments={"alternate-exchange": first})
    assert returned_by(amqp, channel, first) == [(312, "NO_ROUTE", first)]


def test_alternate_exchanges_chain(amqp):
    channel = amqp.channel()
    last = amqp.exchange("last", "fanout", channel)
    middle = amqp.exchange("middle", "direct", channel, arguments={"alternate-exchange": last})
    first = amqp.exchange("first", "direct", channel, arguments={"alternate-exchange": middle})
    queue = amqp.queue("q", channel)
    channel.queue_bind(queue, last)
    assert returned_by(amqp, channel, first) == []
    assert amqp.bodies(channel, queue) == ["m1"]


def test_alternate_exchange_set_by_policy(amqp, mgmt):
    channel = amqp.channel()
    alternate = amqp.exchange("ae", "fanout", channel)
    unrouted = amqp.queue("unrouted", channel)
    channel.queue_bind(unrouted, alternate)
    before = amqp.exchange("x.before", "direct", channel)
    policy = mgmt.set_policy("ae", r"x\.", {"alternate-exchange": alternate}, apply_to="exchanges")
    after = amqp.exchange("x.after", "direct", channel)
    assert returned_by(amqp, channel, before) == []
    assert returned_by(amqp, channel, after) == []
    assert amqp.bodies(channel, unrouted) == ["m1", "m1"]
    mgmt.clear_policy(policy)
    assert returned_by(amqp, channel, before) == [(312, "NO_ROUTE", before)]


def test_alternate_exchange_argument_wins_over_the_policy(amqp, mgmt):
    channel = amqp.channel()
    exchange, _, unrouted = with_alternate(amqp, channel)
    by_policy = amqp.exchange("by-policy", "fanout", channel)
    ignored = amqp.queue("ignored", channel)
    channel.queue_bind(ignored, by_policy)
    mgmt.set_policy("ae", "x$", {"alternate-exchange": by_policy}, apply_to="exchanges")
    assert returned_by(amqp, channel, exchange) == []
    assert (amqp.bodies(channel, unrouted), amqp.bodies(channel, ignored)) == (["m1"], [])
