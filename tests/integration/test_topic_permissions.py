"""Topic permissions (RabbitMQ's ``set_topic_permissions``): the /api/topic-permissions
endpoints, and their enforcement on publish to and bind from a topic exchange, with
RabbitMQ's 403 text. Set up through the management API, so the same tests run on
RabbitMQ 3.10.8 (``WARREN_TEST_URL``)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingConnection
from test_warrenctl_verbs import Ctl

PASSWORD = "secret"


class Api:
    def __init__(self, management: tuple[str, str, str]) -> None:
        self.base, user, password = management
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + "/api/" + path, data, self.headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as failure:
            with failure:
                raw = failure.read()
            return failure.code, json.loads(raw) if raw else None


@pytest.fixture
def world(broker: Any, management: tuple[str, str, str], unique: str) -> Iterator[dict[str, Any]]:
    """A vhost, a user with full permissions there and a topic permission on amq.topic
    (write ``^a``, read ``^r``)."""
    api = Api(management)
    vhost, user = f"{unique}.vh", f"{unique}.user"
    v = quote(vhost, safe="")
    assert api.call("PUT", f"vhosts/{v}", {})[0] == 201
    assert api.call("PUT", f"users/{user}", {"password": PASSWORD, "tags": ""})[0] == 201
    full = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.call("PUT", f"permissions/{v}/{user}", full)[0] == 201
    topic = {"exchange": "amq.topic", "write": "^a", "read": "^r"}
    assert api.call("PUT", f"topic-permissions/{v}/{user}", topic)[0] == 201
    yield {"api": api, "vhost": vhost, "v": v, "user": user}
    api.call("DELETE", f"users/{user}")
    api.call("DELETE", f"vhosts/{v}")


def connect(broker: Any, vhost: str, user: str) -> BlockingConnection:
    credentials = pika.PlainCredentials(user, PASSWORD)
    return BlockingConnection(
        pika.ConnectionParameters(broker.host, broker.port, vhost, credentials)
    )


def refused(world: dict[str, Any], routing_key: str) -> tuple[int, str]:
    return 403, (
        f"ACCESS_REFUSED - access to topic '{routing_key}' in exchange 'amq.topic' in vhost"
        f" '{world['vhost']}' refused for user '{world['user']}'"
    )


def test_the_api_lists_sets_and_clears_topic_permissions(world):
    api, v, user, vhost = world["api"], world["v"], world["user"], world["vhost"]
    entry = {"user": user, "vhost": vhost, "exchange": "amq.topic", "write": "^a", "read": "^r"}
    topic = {"exchange": "amq.topic", "write": "^a", "read": "^r"}
    assert api.call("PUT", f"topic-permissions/{v}/{user}", topic)[0] == 204
    assert api.call("GET", f"topic-permissions/{v}/{user}") == (200, [entry])
    assert entry in api.call("GET", "topic-permissions")[1]
    assert api.call("GET", f"vhosts/{v}/topic-permissions") == (200, [entry])
    assert api.call("GET", f"users/{user}/topic-permissions") == (200, [entry])
    assert api.call("PUT", f"topic-permissions/{v}/{user}", {"write": "", "read": ""}) == (
        400,
        {"error": "bad_request", "reason": "[{key_missing,exchange}]"},
    )
    assert api.call("PUT", f"topic-permissions/{v}/nobody-{user}", topic) == (
        400,
        {"error": "bad_request", "reason": "vhost_or_user_not_found"},
    )
    definitions = api.call("GET", "definitions")[1]
    assert entry in definitions["topic_permissions"]
    assert api.call("DELETE", f"topic-permissions/{v}/{user}") == (204, None)
    assert api.call("GET", f"topic-permissions/{v}/{user}")[0] == 404
    assert api.call("DELETE", f"topic-permissions/{v}/{user}")[0] == 404


def test_a_publish_to_a_topic_exchange_needs_a_routing_key_the_write_pattern_finds(broker, world):
    connection = connect(broker, world["vhost"], world["user"])
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("amq.topic", "a.b", b"allowed")
        channel.basic_publish("amq.direct", "b.c", b"not a topic exchange")
        channel.exchange_declare("other.topic", "topic", auto_delete=True)
        channel.basic_publish("other.topic", "b.c", b"no topic permission there")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.basic_publish("amq.topic", "b.c", b"refused")
        assert (closed.value.reply_code, closed.value.reply_text) == refused(world, "b.c")
    finally:
        if connection.is_open:
            connection.close()


def test_a_binding_from_a_topic_exchange_needs_a_key_the_read_pattern_finds(broker, world):
    connection = connect(broker, world["vhost"], world["user"])
    try:
        channel = connection.channel()
        channel.queue_declare("q")
        channel.queue_bind("q", "amq.topic", "r.#")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.queue_bind("q", "amq.topic", "zzz")
        assert (closed.value.reply_code, closed.value.reply_text) == refused(world, "zzz")
    finally:
        if connection.is_open:
            connection.close()


@pytest.mark.warren_only
def test_topic_permissions_and_the_cluster_name_survive_a_restart(server_factory):
    """Stored in the definitions store (RabbitMQ keeps them in Mnesia)."""
    server = server_factory()
    api = Api((server.broker.management_url, "guest", "guest"))
    topic = {"exchange": "amq.topic", "write": "^a", "read": "^r"}
    assert api.call("PUT", "topic-permissions/%2F/guest", topic)[0] == 201
    assert api.call("PUT", "cluster-name", {"name": "blue"})[0] == 204
    data_dir = server.data_dir
    server.stop()
    server = server_factory(data_dir)
    api = Api((server.broker.management_url, "guest", "guest"))
    assert api.call("GET", "topic-permissions/%2F/guest")[1][0]["write"] == "^a"
    assert api.call("GET", "cluster-name") == (200, {"name": "blue"})
    assert api.call("GET", "overview")[1]["cluster_name"] == "blue"
    definitions = api.call("GET", "definitions")[1]
    assert {"name": "cluster_name", "value": "blue"} in definitions["global_parameters"]


def test_warrenctl_sets_lists_and_clears_topic_permissions(management, world):
    ctl = Ctl(management)
    vhost, user = world["vhost"], world["user"]
    assert ctl.ok("set_topic_permissions", "-p", vhost, user, "amq.topic", "^w", "^r") == (
        f'Setting topic permissions on "amq.topic" for user "{user}" in vhost "{vhost}" ...\n'
    )
    ctl.ok("set_topic_permissions", "-p", vhost, user, "other", "^x", "^y", "-q")
    rows = json.loads(ctl.ok("list_topic_permissions", "-p", vhost, "--formatter", "json"))
    assert rows == [
        {"user": user, "exchange": "amq.topic", "write": "^w", "read": "^r"},
        {"user": user, "exchange": "other", "write": "^x", "read": "^y"},
    ]
    table = ctl.ok("list_topic_permissions", "-p", vhost).splitlines()
    assert table[:2] == [
        f'Listing topic permissions for vhost "{vhost}" ...',
        "user\texchange\twrite\tread",
    ]
    missing = ctl("set_topic_permissions", "-p", vhost, f"nobody-{user}", "amq.topic", "a", "b")
    assert (missing.returncode, missing.stderr) == (
        67,
        f"Error:\nUser nobody-{user} does not exist\n",
    )
    assert ctl.ok("clear_topic_permissions", "-p", vhost, user) == (
        f'Clearing topic permissions for user "{user}" in vhost "{vhost}" ...\n'
    )
    assert json.loads(ctl.ok("list_topic_permissions", "-p", vhost, "--formatter", "json")) == []
    ctl.ok("clear_topic_permissions", "-p", vhost, user)  # nothing to clear: no error


@pytest.mark.warren_only
def test_warrenctl_clears_one_exchanges_topic_permission(management, world):
    ctl = Ctl(management)
    vhost, user = world["vhost"], world["user"]
    ctl.ok("set_topic_permissions", "-p", vhost, user, "other", "^x", "^y", "-q")
    assert ctl.ok("clear_topic_permissions", "-p", vhost, user, "other") == (
        f'Clearing topic permissions on "other" for user "{user}" in vhost "{vhost}" ...\n'
    )
    rows = json.loads(ctl.ok("list_topic_permissions", "-p", vhost, "--formatter", "json"))
    assert [row["exchange"] for row in rows] == ["amq.topic"]
