"""The permission matrix: users x operations in a vhost of their own, each denial with
RabbitMQ's code and text, nothing permitted that should not be. Users, the vhost and
permissions are made through the management API, so the same test runs on RabbitMQ
3.10.8 (``WARREN_TEST_URL``), where its expectations were recorded."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from urllib.parse import quote

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

PASSWORD = "secret"
# user -> (configure, write, read)
USERS = {
    "full": (".*", ".*", ".*"),
    "none": ("^$", "^$", "^$"),
    "cfg": (".*", "^$", "^$"),
    "wr": ("^$", ".*", "^$"),
    "rd": ("^$", "^$", ".*"),
}
Operation = Callable[[BlockingChannel], object]
OPERATIONS: dict[str, Operation] = {
    "queue.declare": lambda ch: ch.queue_declare("q.new"),
    "queue.declare passive": lambda ch: ch.queue_declare("q", passive=True),
    "exchange.declare": lambda ch: ch.exchange_declare("ex.new", "fanout"),
    "queue.bind": lambda ch: ch.queue_bind("q", "ex", "k2"),
    "queue.unbind": lambda ch: ch.queue_unbind("q", "ex", "k3"),
    "exchange.bind": lambda ch: ch.exchange_bind("ex", "amq.fanout", "k"),
    # a publish is refused asynchronously: the next synchronous call sees the channel close
    "basic.publish": lambda ch: (ch.basic_publish("ex", "k", b"m"), ch.basic_qos()),
    "basic.publish default": lambda ch: (ch.basic_publish("", "q", b"m"), ch.basic_qos()),
    "basic.consume": lambda ch: ch.basic_consume("q", lambda *args: None),
    "basic.get": lambda ch: ch.basic_get("q"),
    "queue.purge": lambda ch: ch.queue_purge("q"),
    "queue.delete": lambda ch: ch.queue_delete("q.gone"),
    "exchange.delete": lambda ch: ch.exchange_delete("ex.gone"),
}
# what each operation needs, as (access, resource) checked in order (RabbitMQ 3.10.8)
NEEDS = {
    "queue.declare": [("configure", "queue 'q.new'")],
    "queue.declare passive": [],
    "exchange.declare": [("configure", "exchange 'ex.new'")],
    "queue.bind": [("write", "queue 'q'"), ("read", "exchange 'ex'")],
    "queue.unbind": [("write", "queue 'q'"), ("read", "exchange 'ex'")],
    "exchange.bind": [("write", "exchange 'ex'"), ("read", "exchange 'amq.fanout'")],
    "basic.publish": [("write", "exchange 'ex'")],
    "basic.publish default": [("write", "exchange 'amq.default'")],
    "basic.consume": [("read", "queue 'q'")],
    "basic.get": [("read", "queue 'q'")],
    "queue.purge": [("read", "queue 'q'")],
    "queue.delete": [("configure", "queue 'q.gone'")],
    "exchange.delete": [("configure", "exchange 'ex.gone'")],
}
ACCESS = {"configure": 0, "write": 1, "read": 2}


class Api:
    def __init__(self, management: tuple[str, str, str]) -> None:
        self.base, user, password = management
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: object = None) -> int:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + "/api/" + path, data, self.headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as failure:
            return failure.code


@pytest.fixture(scope="module")
def world(broker, management, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """A vhost with an exchange ``ex`` bound to a queue ``q``, and one user per row."""
    api = Api(management)
    prefix = f"perm.{tmp_path_factory.mktemp('p').name}"
    vhost = f"{prefix}.vh"
    assert api.call("PUT", f"vhosts/{quote(vhost, safe='')}", {}) in (201, 204)
    for name, (configure, write, read) in USERS.items():
        user = f"{prefix}.{name}"
        assert api.call("PUT", f"users/{user}", {"password": PASSWORD, "tags": ""}) in (201, 204)
        permission = {"configure": configure, "write": write, "read": read}
        path = f"permissions/{quote(vhost, safe='')}/{user}"
        assert api.call("PUT", path, permission) in (201, 204)
    outsider = f"{prefix}.outsider"
    assert api.call("PUT", f"users/{outsider}", {"password": PASSWORD, "tags": ""}) in (201, 204)
    connection = connect(broker, vhost, f"{prefix}.full")
    channel = connection.channel()
    channel.exchange_declare("ex", "direct")
    channel.queue_declare("q")
    channel.queue_bind("q", "ex", "k")
    connection.close()
    yield prefix, vhost
    for name in [*USERS, "outsider"]:
        api.call("DELETE", f"users/{prefix}.{name}")
    api.call("DELETE", f"vhosts/{quote(vhost, safe='')}")


def connect(broker, vhost: str, user: str) -> BlockingConnection:
    credentials = pika.PlainCredentials(user, PASSWORD)
    parameters = pika.ConnectionParameters(broker.host, broker.port, vhost, credentials)
    return BlockingConnection(parameters)


def expected(user: str, operation: str, vhost: str, prefix: str) -> tuple[int, str] | None:
    """None if permitted, else (403, text) of the first check the user fails."""
    for access, resource in NEEDS[operation]:
        if USERS[user][ACCESS[access]] != ".*":
            return 403, (
                f"ACCESS_REFUSED - access to {resource} in vhost '{vhost}'"
                f" refused for user '{prefix}.{user}'"
            )
    return None


@pytest.mark.parametrize("operation", list(OPERATIONS))
@pytest.mark.parametrize("user", list(USERS))
def test_each_user_may_do_exactly_what_their_permissions_allow(broker, world, user, operation):
    prefix, vhost = world
    connection = connect(broker, vhost, f"{prefix}.{user}")
    try:
        OPERATIONS[operation](connection.channel())
        outcome = None
    except pika.exceptions.ChannelClosedByBroker as closed:
        outcome = (closed.reply_code, closed.reply_text)
    finally:
        if connection.is_open:
            connection.close()
    assert outcome == expected(user, operation, vhost, prefix)


def test_a_user_without_permission_in_a_vhost_cannot_open_it(broker, world):
    prefix, vhost = world
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as denied:
        connect(broker, vhost, f"{prefix}.outsider")
    assert "530" in str(denied.value)
    assert f"NOT_ALLOWED - access to vhost '{vhost}' refused for user '{prefix}.outsider'" in str(
        denied.value
    )


@pytest.mark.warren_only
def test_a_permission_change_reaches_an_open_channel(broker, management, world):
    """Warren checks a changed permission on the next publish of a channel already open
    (RabbitMQ caches its answers per channel)."""
    prefix, vhost = world
    user = f"{prefix}.changing"
    api = Api(management)
    assert api.call("PUT", f"users/{user}", {"password": PASSWORD, "tags": ""}) in (201, 204)
    path = f"permissions/{quote(vhost, safe='')}/{user}"
    assert api.call("PUT", path, {"configure": ".*", "write": ".*", "read": ".*"}) in (201, 204)
    connection = connect(broker, vhost, user)
    try:
        channel = connection.channel()
        channel.basic_publish("ex", "k", b"allowed")
        channel.basic_qos()
        assert api.call("PUT", path, {"configure": ".*", "write": "^$", "read": ".*"}) == 204
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.basic_publish("ex", "k", b"refused")
            channel.basic_qos()
        assert closed.value.reply_code == 403
    finally:
        if connection.is_open:
            connection.close()
        api.call("DELETE", f"users/{user}")
