"""exchange.declare / delete / bind / unbind: flags, lifecycles, predeclared exchanges, errors.

Routing itself (which queue gets which message) lives in test_routing.py.
"""

from __future__ import annotations

import pytest

PREDECLARED = [
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
]
DEFAULT_EXCHANGE_REFUSED = {
    "closed": "channel",
    "code": 403,
    "text": "ACCESS_REFUSED - operation not permitted on the default exchange",
}


def not_found(exchange: str) -> dict:
    return {
        "closed": "channel",
        "code": 404,
        "text": f"NOT_FOUND - no exchange '{exchange}' in vhost '/'",
    }


def in_use(exchange: str) -> dict:
    text = f"PRECONDITION_FAILED - exchange '{exchange}' in vhost '/' in use"
    return {"closed": "channel", "code": 406, "text": text}


def exists(amqp, connection, exchange: str) -> bool:
    result = amqp.attempt_on(connection, lambda ch: ch.exchange_declare(exchange, passive=True))
    assert result in ({"ok": True}, not_found(exchange))
    return result == {"ok": True}


def test_passive_declare(amqp):
    connection = amqp.connect()
    exchange = amqp.exchange("x", "topic", connection.channel())
    missing = amqp.name("missing")
    assert exists(amqp, connection, exchange)
    assert not exists(amqp, connection, missing)


def test_declare_twice_with_the_same_arguments(amqp):
    connection = amqp.connect()
    arguments = {"alternate-exchange": amqp.name("ae")}
    exchange = amqp.exchange("x", "direct", connection.channel(), durable=True, arguments=arguments)

    def redeclare(channel) -> None:
        channel.exchange_declare(exchange, "direct", durable=True, arguments=arguments)

    assert amqp.attempt_on(connection, redeclare) == {"ok": True}


def test_unknown_exchange_type_closes_the_connection(amqp):
    channel = amqp.channel()
    assert amqp.attempt(lambda: channel.exchange_declare(amqp.name("x"), "no-such-type")) == {
        "closed": "connection",
        "code": 503,
        "text": "COMMAND_INVALID - unknown exchange type 'no-such-type'",
    }


def test_alternate_exchange_must_be_a_string(amqp):
    channel = amqp.channel()
    exchange = amqp.name("x")

    def declare() -> None:
        channel.exchange_declare(exchange, arguments={"alternate-exchange": 5})

    text = (
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange'"
        f" in exchange '{exchange}' in vhost '/'"
    )
    assert amqp.attempt(declare) == {"closed": "channel", "code": 406, "text": text}


def test_delete_missing_exchange_is_ok(amqp):
    assert amqp.attempt(lambda: amqp.channel().exchange_delete(amqp.name("never"))) == {"ok": True}


def test_delete_removes_the_exchange(amqp):
    connection = amqp.connect()
    exchange = amqp.exchange("x", "fanout", connection.channel())
    connection.channel().exchange_delete(exchange)
    assert not exists(amqp, connection, exchange)


# -- default and predeclared exchanges --------------------------------------------------------


@pytest.mark.parametrize(
    "operation",
    [
        lambda ch, queue: ch.exchange_declare("", passive=True),
        lambda ch, queue: ch.exchange_declare("", "direct"),
        lambda ch, queue: ch.queue_unbind(queue, "", queue),
        lambda ch, queue: ch.queue_bind(queue, "", queue),
        lambda ch, queue: ch.exchange_delete(""),
    ],
    ids=["passive-declare", "declare", "unbind", "bind", "delete"],
)
def test_default_exchange_refuses_operations(amqp, operation):
    connection = amqp.connect()
    queue = amqp.queue("q", connection.channel())
    result = amqp.attempt_on(connection, lambda ch: operation(ch, queue))
    assert result == DEFAULT_EXCHANGE_REFUSED


@pytest.mark.parametrize(("exchange", "exchange_type"), PREDECLARED)
def test_predeclared_exchange(amqp, exchange, exchange_type):
    connection = amqp.connect()
    other_type = "direct" if exchange_type == "fanout" else "fanout"

    def declare(as_type: str) -> dict:
        return amqp.attempt_on(
            connection, lambda ch: ch.exchange_declare(exchange, as_type, durable=True)
        )

    assert declare(exchange_type) == {"ok": True}
    other = declare(other_type)
    text = (
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{exchange}' in vhost '/':"
        f" received '{other_type}' but current is '{exchange_type}'"
    )
    assert other == {"closed": "channel", "code": 406, "text": text}
    deleted = amqp.attempt_on(connection, lambda ch: ch.exchange_delete(exchange))
    text = f"ACCESS_REFUSED - deletion of system exchange '{exchange}' in vhost '/' not allowed"
    assert deleted == {"closed": "channel", "code": 403, "text": text}


# -- auto-delete and internal -----------------------------------------------------------------


def test_auto_delete_exchange_without_bindings_stays(amqp):
    connection = amqp.connect()
    exchange = amqp.exchange("x", "fanout", connection.channel(), auto_delete=True)
    assert exists(amqp, connection, exchange)


@pytest.mark.parametrize("remove", ["queue_unbind", "queue_delete", "exchange_unbind"])
def test_auto_delete_exchange_goes_with_its_last_binding(amqp, remove):
    connection = amqp.connect()
    channel = connection.channel()
    exchange = amqp.exchange("x", "fanout", channel, auto_delete=True)
    queue = amqp.queue("q", channel)
    destination = amqp.exchange("dest", "fanout", channel)
    channel.queue_bind(queue, exchange)
    channel.exchange_bind(destination, exchange)
    {
        "queue_unbind": lambda: channel.queue_unbind(queue, exchange),
        "queue_delete": lambda: channel.queue_delete(queue),
        "exchange_unbind": lambda: channel.exchange_unbind(destination, exchange),
    }[remove]()
    assert exists(amqp, connection, exchange)  # one binding is left
    if remove == "exchange_unbind":
        channel.queue_unbind(queue, exchange)
    else:
        channel.exchange_unbind(destination, exchange)
    assert not exists(amqp, connection, exchange)


def test_auto_delete_exchange_as_destination_stays(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    source = amqp.exchange("source", "fanout", channel)
    destination = amqp.exchange("dest", "fanout", channel, auto_delete=True)
    channel.exchange_bind(destination, source)
    channel.exchange_unbind(destination, source)
    assert exists(amqp, connection, destination)


def test_internal_exchange_refuses_publishes(amqp):
    channel = amqp.channel()
    exchange = amqp.exchange("internal", "fanout", channel, internal=True)
    amqp.publish(channel, "", "m1", exchange=exchange)
    text = f"ACCESS_REFUSED - cannot publish to internal exchange '{exchange}' in vhost '/'"
    assert amqp.attempt(lambda: amqp.sync(channel)) == {
        "closed": "channel",
        "code": 403,
        "text": text,
    }


def test_internal_exchange_routes_from_another_exchange(amqp):
    channel = amqp.channel()
    public = amqp.exchange("public", "fanout", channel)
    internal = amqp.exchange("internal", "fanout", channel, internal=True)
    queue = amqp.queue("q", channel)
    channel.exchange_bind(internal, public)
    channel.queue_bind(queue, internal)
    amqp.publish(channel, "", "m1", exchange=public)
    assert amqp.bodies(channel, queue) == ["m1"]


# -- delete if-unused -------------------------------------------------------------------------


def test_delete_if_unused(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    with_queue, source, destination, lonely = (
        amqp.exchange(name, "fanout", channel)
        for name in ("with-queue", "source", "dest", "lonely")
    )
    channel.queue_bind(amqp.queue("q", channel), with_queue)
    channel.exchange_bind(destination, source)

    def delete(exchange: str) -> dict:
        return amqp.attempt_on(connection, lambda ch: ch.exchange_delete(exchange, if_unused=True))

    assert delete(with_queue) == in_use(with_queue)
    assert delete(source) == in_use(source)
    assert delete(destination) == {"ok": True}  # being a destination does not count
    assert delete(lonely) == {"ok": True}
    assert exists(amqp, connection, with_queue) and exists(amqp, connection, source)


# -- bindings -------------------------------------------------------------------------------


def test_queue_bind_missing_queue_or_exchange(amqp):
    connection = amqp.connect()
    queue = amqp.queue("q", connection.channel())
    exchange = amqp.exchange("x", "direct", connection.channel())
    missing = amqp.name("missing")
    no_queue = amqp.attempt_on(connection, lambda ch: ch.queue_bind(missing, exchange, "k"))
    text = f"NOT_FOUND - no queue '{missing}' in vhost '/'"
    assert no_queue == {"closed": "channel", "code": 404, "text": text}
    assert amqp.attempt_on(connection, lambda ch: ch.queue_bind(queue, missing, "k")) == not_found(
        missing
    )


def test_exchange_bind_missing_source_or_destination(amqp):
    connection = amqp.connect()
    exchange = amqp.exchange("x", "direct", connection.channel())
    missing = amqp.name("missing")
    as_source = amqp.attempt_on(connection, lambda ch: ch.exchange_bind(exchange, missing, "k"))
    as_destination = amqp.attempt_on(
        connection, lambda ch: ch.exchange_bind(missing, exchange, "k")
    )
    assert as_source == not_found(missing)
    assert as_destination == not_found(missing)


def test_unbind_of_missing_binding_is_ok(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    source = amqp.exchange("source", "direct", channel)
    destination = amqp.exchange("dest", "direct", channel)
    queue = amqp.queue("q", channel)
    assert amqp.attempt_on(connection, lambda ch: ch.queue_unbind(queue, source, "k")) == {
        "ok": True
    }
    unbind = amqp.attempt_on(connection, lambda ch: ch.exchange_unbind(destination, source, "k"))
    assert unbind == {"ok": True}


def test_queue_unbind_stops_routing(amqp):
    channel = amqp.channel()
    exchange = amqp.exchange("x", "direct", channel)
    queue = amqp.queue("q", channel)
    channel.queue_bind(queue, exchange, "k")
    amqp.publish(channel, "k", "bound", exchange=exchange)
    channel.queue_unbind(queue, exchange, "k")
    amqp.publish(channel, "k", "unbound", exchange=exchange)
    assert amqp.bodies(channel, queue) == ["bound"]


def test_exchange_to_exchange_binding_routes_and_unbinds(amqp):
    channel = amqp.channel()
    source = amqp.exchange("source", "direct", channel)
    destination = amqp.exchange("dest", "fanout", channel)
    queue = amqp.queue("q", channel)
    channel.queue_bind(queue, destination)
    channel.exchange_bind(destination, source, "k")
    amqp.publish(channel, "k", "m1", exchange=source)
    amqp.publish(channel, "other", "m2", exchange=source)
    channel.exchange_unbind(destination, source, "k")
    amqp.publish(channel, "k", "m3", exchange=source)
    assert amqp.bodies(channel, queue) == ["m1"]


def test_message_reaching_a_queue_by_two_paths_is_enqueued_once(amqp):
    channel = amqp.channel()
    source = amqp.exchange("source", "topic", channel)
    middle = amqp.exchange("middle", "fanout", channel)
    queue = amqp.queue("q", channel)
    channel.queue_bind(queue, source, "a.*")
    channel.queue_bind(queue, source, "*.b")
    channel.exchange_bind(middle, source, "#")
    channel.queue_bind(queue, middle)
    amqp.publish(channel, "a.b", "m1", exchange=source)
    assert amqp.bodies(channel, queue) == ["m1"]


def test_exchange_binding_cycle_delivers_once(amqp):
    channel = amqp.channel()
    first = amqp.exchange("first", "fanout", channel)
    second = amqp.exchange("second", "fanout", channel)
    queue = amqp.queue("q", channel)
    channel.exchange_bind(second, first)
    channel.exchange_bind(first, second)
    channel.queue_bind(queue, second)
    amqp.publish(channel, "", "m1", exchange=first)
    assert amqp.bodies(channel, queue) == ["m1"]
