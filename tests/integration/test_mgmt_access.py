"""Users, vhosts and permissions through the API: logins, persistence, tags; plus /metrics,
live counters and rates, and list queries.

Tests not marked `warren_only` pass against RabbitMQ 3.10.8 too (``WARREN_TEST_URL``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import pika
import pika.exceptions
import pytest

PASSWORD = "pa55-Word"


class Api:
    def __init__(self, base: str, user: str = "guest", password: str = "guest") -> None:
        self.base = base.rstrip("/")
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.cleanups: list[str] = []

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": self.auth, "Content-Type": "application/json"}
        request = urllib.request.Request(f"{self.base}/api/{path}", data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw.strip() else None
        except urllib.error.HTTPError as failure:
            raw = failure.read()
            return failure.code, json.loads(raw) if raw.strip() else None

    def as_user(self, user: str, password: str = PASSWORD) -> Api:
        return Api(self.base, user, password)


@pytest.fixture
def api(management: tuple[str, str, str]) -> Iterator[Api]:
    base, user, password = management
    client = Api(base, user, password)
    yield client
    for path in reversed(client.cleanups):
        client.call("DELETE", path)


def make_user(api: Api, name: str, tags: str, vhost: str | None = None) -> None:
    assert api.call("PUT", f"users/{quote(name, safe='')}", {"password": PASSWORD, "tags": tags})[
        0
    ] in (201, 204)
    api.cleanups.append(f"users/{quote(name, safe='')}")
    if vhost is not None:
        body = {"configure": ".*", "write": ".*", "read": ".*"}
        path = f"permissions/{quote(vhost, safe='')}/{quote(name, safe='')}"
        assert api.call("PUT", path, body)[0] in (201, 204)


def make_vhost(api: Api, name: str) -> None:
    assert api.call("PUT", f"vhosts/{quote(name, safe='')}", {})[0] in (201, 204)
    api.cleanups.insert(0, f"vhosts/{quote(name, safe='')}")


def amqp(broker: Any, user: str, password: str, vhost: str) -> pika.BlockingConnection:
    parts = urlsplit(broker.url)
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            host=parts.hostname,
            port=parts.port,
            virtual_host=vhost,
            credentials=pika.PlainCredentials(user, password),
        )
    )


def test_a_user_made_through_the_api_logs_in_over_amqp(api: Api, broker: Any, unique: str) -> None:
    vhost, user = f"{unique}.v", f"{unique}.u"
    make_vhost(api, vhost)
    make_user(api, user, "", vhost)
    connection = amqp(broker, user, PASSWORD, vhost)
    try:
        channel = connection.channel()
        declared = channel.queue_declare("", exclusive=True)
        assert declared.method.queue.startswith("amq.gen-")
    finally:
        connection.close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        amqp(broker, user, "wrong", vhost)


def test_no_permission_on_the_vhost_refuses_connection_open(
    api: Api, broker: Any, unique: str
) -> None:
    vhost, user = f"{unique}.v", f"{unique}.u"
    make_vhost(api, vhost)
    make_user(api, user, "management")  # no permissions at all
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        amqp(broker, user, PASSWORD, vhost)
    assert str(refused.value) == (
        'ConnectionClosedByBroker: (530) "NOT_ALLOWED - access to vhost '
        f"'{vhost}' refused for user '{user}'\""
    )


def test_password_is_stored_salted_and_hashed(broker, api: Api, unique: str) -> None:
    # RabbitMQ: one salted SHA-256; Warren: PBKDF2 by default (docs/security.md)
    user = f"{unique}.u"
    make_user(api, user, "monitoring")
    status, body = api.call("GET", f"users/{quote(user, safe='')}")
    assert status == 200
    raw = base64.b64decode(body["password_hash"])
    if broker.is_rabbitmq:
        assert body["hashing_algorithm"] == "rabbit_password_hashing_sha256"
        salt, digest = raw[:4], raw[4:]
        assert digest == hashlib.sha256(salt + PASSWORD.encode()).digest()
    else:
        assert body["hashing_algorithm"] == "warren_password_hashing_pbkdf2_sha256"
        salt, rounds, key = raw[:16], int.from_bytes(raw[16:20], "big"), raw[20:]
        assert key == hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), salt, rounds)
    assert body["tags"] == ["monitoring"]


def test_tags_decide_what_a_user_may_do(api: Api, unique: str) -> None:
    vhost = f"{unique}.v"
    make_vhost(api, vhost)
    for who, tags in (("none", ""), ("mgmt", "management"), ("mon", "monitoring")):
        make_user(api, f"{unique}.{who}", tags, vhost if who == "mgmt" else None)
    none, mgmt, mon = (api.as_user(f"{unique}.{who}") for who in ("none", "mgmt", "mon"))
    assert none.call("GET", "overview") == (
        401,
        {"error": "not_authorised", "reason": "Not management user"},
    )
    refused_admin = (401, {"error": "not_authorised", "reason": "Not administrator user"})
    assert mgmt.call("GET", "users") == refused_admin
    assert mon.call("GET", "users") == refused_admin
    assert mgmt.call("GET", "nodes") == (
        401,
        {"error": "not_authorised", "reason": "Not monitor user"},
    )
    assert mon.call("GET", "nodes")[0] == 200
    status, vhosts = mgmt.call("GET", "vhosts")
    assert status == 200 and [v["name"] for v in vhosts] == [vhost]
    refused_vhost = (
        401,
        {"error": "not_authorised", "reason": "User not authorised to access virtual host"},
    )
    assert mgmt.call("GET", "queues/%2F") == refused_vhost
    queue = f"queues/{quote(vhost, safe='')}/{unique}.q"
    assert mgmt.call("PUT", queue, {"durable": False}) == (201, None)
    assert mgmt.call("DELETE", queue) == (204, None)
    assert mon.call("PUT", f"vhosts/{quote(vhost, safe='')}", {}) == refused_admin


@pytest.mark.warren_only
def test_users_vhosts_permissions_survive_a_restart(server_factory: Any, tmp_path: Any) -> None:
    data_dir = tmp_path / "node"
    server = server_factory(data_dir)
    api = Api(server.broker.management_url)
    assert api.call("PUT", "vhosts/kept", {"description": "d", "tags": "t1,t2"})[0] == 201
    assert api.call("PUT", "users/keeper", {"password": PASSWORD, "tags": "management"}) == (
        201,
        None,
    )
    body = {"configure": "^k", "write": ".*", "read": ""}
    assert api.call("PUT", "permissions/kept/keeper", body) == (201, None)
    assert api.call("PUT", "users/gone", {"password": PASSWORD, "tags": ""})[0] == 201
    assert api.call("DELETE", "users/gone") == (204, None)
    before = [api.call("GET", path)[1] for path in ("users/keeper", "vhosts/kept")]
    server.stop()

    server = server_factory(data_dir)
    api = Api(server.broker.management_url)
    assert api.call("GET", "users/keeper")[1] == before[0]
    vhost = api.call("GET", "vhosts/kept")[1]
    assert (vhost["description"], vhost["tags"]) == ("d", ["t1", "t2"])
    assert api.call("GET", "permissions/kept/keeper")[1] == {
        "user": "keeper",
        "vhost": "kept",
        **body,
    }
    assert api.call("GET", "users/gone")[0] == 404
    connection = amqp(server.broker, "keeper", PASSWORD, "kept")
    connection.close()
    assert api.as_user("keeper").call("GET", "whoami") == (
        200,
        {"name": "keeper", "tags": ["management"]},
    )


@pytest.mark.warren_only
def test_deleting_a_vhost_deletes_its_queues_and_closes_its_connections(
    api: Api, broker: Any, unique: str
) -> None:
    vhost = f"{unique}.v"
    make_vhost(api, vhost)
    connection = amqp(broker, "guest", "guest", vhost)
    channel = connection.channel()
    channel.queue_declare("q", durable=True)
    assert api.call("DELETE", f"vhosts/{quote(vhost, safe='')}") == (204, None)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(2)
        channel.queue_declare("q", passive=True)
    assert closed.value.reply_code == 320
    make_vhost(api, vhost)
    assert api.call("GET", f"queues/{quote(vhost, safe='')}") == (200, [])


def test_list_queries(api: Api, broker: Any, unique: str) -> None:
    connection = amqp(broker, "guest", "guest", "/")
    channel = connection.channel()
    names = [f"{unique}.{suffix}" for suffix in ("b", "a", "c-x")]
    try:
        for name in names:
            channel.queue_declare(name, auto_delete=True)
        status, page = api.call(
            "GET", f"queues/%2F?page=1&page_size=2&name={quote(unique)}&sort=name"
        )
        assert status == 200
        assert [q["name"] for q in page["items"]] == sorted(names)[:2]
        assert (page["filtered_count"], page["page_count"], page["item_count"]) == (3, 2, 2)
        status, page = api.call(
            "GET",
            f"queues/%2F?page=1&name={quote(unique, safe='')}%5C.c&use_regex=true"
            "&sort=name&sort_reverse=true&columns=name",
        )
        assert status == 200 and page["items"] == [{"name": f"{unique}.c-x"}]
        status, body = api.call("GET", f"queues/%2F?page=9&page_size=2&name={quote(unique)}")
        assert (status, body["error"]) == (400, "page_out_of_range")
    finally:
        connection.close()


@pytest.mark.warren_only
def test_counters_are_live_and_rates_follow(api: Api, broker: Any, unique: str) -> None:
    connection = amqp(broker, "guest", "guest", "/")
    channel = connection.channel()
    queue = f"{unique}.q"
    channel.queue_declare(queue, auto_delete=True)
    channel.confirm_delivery()
    try:
        before = api.call("GET", "overview")[1]["message_stats"]["publish"]
        for number in range(20):
            channel.basic_publish("", queue, str(number).encode())
        status, body = api.call("GET", f"queues/%2F/{quote(queue, safe='')}")
        assert (status, body["messages_ready"]) == (200, 20)  # at once, no stats delay
        assert body["message_stats"]["publish"] == 20
        time.sleep(2.5)  # a sampling round or two
        stats = api.call("GET", "overview")[1]["message_stats"]
        assert stats["publish"] - before >= 20
        assert stats["publish_details"]["rate"] > 0
        assert stats["confirm"] >= 20
        channels = api.call("GET", "channels")[1]
        mine = [c for c in channels if c["confirm"] and c["message_stats"]["publish"] == 20]
        assert mine and mine[0]["message_stats"]["publish_details"]["rate"] > 0
        assert mine[0]["messages_unconfirmed"] == 0  # pika waited for each confirm
        metrics = urllib.request.urlopen(f"{api.base}/metrics", timeout=10).read().decode()
        assert "rabbitmq_channel_messages_published_total" in metrics
        per_object = urllib.request.urlopen(f"{api.base}/metrics/per-object", timeout=10)
        text = per_object.read().decode()
        assert f'rabbitmq_queue_messages_ready{{vhost="/",queue="{queue}"}} 20' in text
        assert f'rabbitmq_queue_messages_unacked{{vhost="/",queue="{queue}"}} 0' in text
        published = f'rabbitmq_queue_messages_published_total{{vhost="/",queue="{queue}"}} 20'
        assert published in text
    finally:
        connection.close()


@pytest.mark.warren_only
def test_alarm_health_check_fails_while_an_alarm_is_up(
    server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WARREN_VM_MEMORY_HIGH_WATERMARK", "1MiB")  # always above it
    server = server_factory()
    api = Api(server.broker.management_url)
    deadline = time.monotonic() + 10
    status, body = api.call("GET", "health/checks/local-alarms")
    while status == 200 and time.monotonic() < deadline:
        time.sleep(0.2)
        status, body = api.call("GET", "health/checks/local-alarms")
    assert (status, body["status"], body["reason"]) == (
        503,
        "failed",
        "There are alarms in effect in the cluster",
    )
    assert body["alarms"] == [{"node": "warren@localhost", "resource": "memory"}]
    assert api.call("GET", "nodes")[1][0]["mem_alarm"] is True
