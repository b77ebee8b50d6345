"""One fixed management-API scenario, run against RabbitMQ 3.10.8 (to record) or Warren.

Theory of operation:
1. `run(base, user, password, prefix)` builds the same objects on any broker through its
   HTTP API and one AMQP connection (a vhost, three users with different tags, their
   permissions, an exchange, two queues, a binding, a consumer, a few messages), reads
   every resource the scenario names, then deletes what it built. It returns one
   `Exchange` per step: method, path (with the prefix replaced by ``{p}``), status and
   body.
2. `record_rabbitmq.py` runs it against a real RabbitMQ and writes the result to
   ``data/rabbitmq-3.10.8-mgmt.json``; `test_mgmt_shapes.py` runs it against Warren and
   compares the two field by field (`shape_diff`).
3. Names start with the prefix, so lists can be narrowed to the scenario's own objects.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import pika

PASSWORD = "s3cret-Pw"
STATS_WAIT_S = 6.0  # RabbitMQ's statistics interval is 5 s


@dataclass
class Exchange:
    name: str
    method: str
    path: str
    status: int
    body: Any
    location: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "body": self.body,
            "location": self.location,
        }


class Http:
    def __init__(self, base: str, user: str, password: str) -> None:
        self.base = base.rstrip("/")
        self.user = user
        self.password = password

    def call(
        self, method: str, path: str, body: Any = None, *, user: str | None = None
    ) -> tuple[int, Any, str | None]:
        token = base64.b64encode(
            f"{user or self.user}:{PASSWORD if user else self.password}".encode()
        ).decode()
        headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + "/api/" + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                raw = response.read()
                return response.status, _decode(raw), response.headers.get("Location")
        except urllib.error.HTTPError as failure:
            return failure.code, _decode(failure.read()), failure.headers.get("Location")


def _decode(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def q(text: str) -> str:
    return quote(text, safe="")


def run(
    base: str,
    user: str,
    password: str,
    amqp_url: str,
    prefix: str,
    stats_wait_s: float = STATS_WAIT_S,
) -> list[Exchange]:
    """The scenario; see the module docstring. Everything built is deleted afterwards."""
    http = Http(base, user, password)
    steps: list[Exchange] = []
    vhost = f"{prefix}.vh"
    names = {
        "vhost": vhost,
        "admin": f"{prefix}.admin",
        "monitor": f"{prefix}.monitor",
        "manager": f"{prefix}.manager",
        "nobody": f"{prefix}.nobody",
        "exchange": f"{prefix}.x",
        "queue": f"{prefix}.q",
        "consumed": f"{prefix}.consumed",
        "quorum": f"{prefix}.qq",
    }

    def step(
        name: str, method: str, path: str, body: Any = None, *, as_user: str | None = None
    ) -> Exchange:
        status, reply, location = http.call(method, path, body, user=as_user)
        shown = path.replace(q(vhost), "{vhost}")
        for key, value in names.items():
            if key != "vhost":
                shown = shown.replace(q(value), "{" + key + "}")
        done = Exchange(name, method, shown, status, reply, location)
        steps.append(done)
        return done

    v, x, qn = q(vhost), q(names["exchange"]), q(names["queue"])
    try:
        step("vhost.put", "PUT", f"vhosts/{v}", {"description": "scenario", "tags": "a,b"})
        step("vhost.put.again", "PUT", f"vhosts/{v}", {"description": "scenario", "tags": "a,b"})
        for who, tags in (
            ("admin", "administrator"),
            ("monitor", "monitoring"),
            ("manager", "management"),
            ("nobody", ""),
        ):
            step(
                f"user.put.{who}",
                "PUT",
                f"users/{q(names[who])}",
                {"password": PASSWORD, "tags": tags},
            )
        step(
            "user.put.again",
            "PUT",
            f"users/{q(names['admin'])}",
            {"password": PASSWORD, "tags": "administrator"},
        )
        for who in ("admin", "manager"):
            step(
                f"permission.put.{who}",
                "PUT",
                f"permissions/{v}/{q(names[who])}",
                {"configure": ".*", "write": ".*", "read": ".*"},
            )
        step(
            "permission.put.guest",
            "PUT",
            f"permissions/{v}/guest",
            {"configure": ".*", "write": ".*", "read": ".*"},
        )
        step("exchange.put", "PUT", f"exchanges/{v}/{x}", {"type": "topic", "durable": True})
        step("exchange.put.again", "PUT", f"exchanges/{v}/{x}", {"type": "topic", "durable": True})
        step(
            "queue.put",
            "PUT",
            f"queues/{v}/{qn}",
            {"durable": True, "arguments": {"x-max-length": 10}},
        )
        step(
            "queue.put.again",
            "PUT",
            f"queues/{v}/{qn}",
            {"durable": True, "arguments": {"x-max-length": 10}},
        )
        step(
            "queue.put.consumed",
            "PUT",
            f"queues/{v}/{q(names['consumed'])}",
            {"durable": False, "auto_delete": False},
        )
        step(
            "queue.put.quorum",
            "PUT",
            f"queues/{v}/{q(names['quorum'])}",
            {"durable": True, "arguments": {"x-queue-type": "quorum"}},
        )
        step(
            "binding.post",
            "POST",
            f"bindings/{v}/e/{x}/q/{qn}",
            {"routing_key": "a.#", "arguments": {}},
        )
        step(
            "binding.post.arguments",
            "POST",
            f"bindings/{v}/e/{x}/q/{q(names['quorum'])}",
            {"routing_key": "k", "arguments": {"x-any": "yes", "n": 7}},
        )
        step(
            "exchange.publish",
            "POST",
            f"exchanges/{v}/{x}/publish",
            {
                "properties": {"delivery_mode": 2, "headers": {"h": 1}},
                "routing_key": "a.b",
                "payload": "hello",
                "payload_encoding": "string",
            },
        )
        step(
            "exchange.publish.unrouted",
            "POST",
            f"exchanges/{v}/{x}/publish",
            {
                "properties": {},
                "routing_key": "zzz",
                "payload": "aGk=",
                "payload_encoding": "base64",
            },
        )
        with _amqp(amqp_url, vhost, names["consumed"]) as connection_name:
            time.sleep(stats_wait_s)
            _await_quorum_stats(http, f"queues/{v}/{q(names['quorum'])}")
            _reads(step, v, x, qn, names, connection_name, urlsplit(amqp_url).port or 5672)
            step("connection.delete", "DELETE", f"connections/{q(connection_name)}")
        step(
            "queue.get",
            "POST",
            f"queues/{v}/{qn}/get",
            {"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000},
        )
        step(
            "queue.get.base64",
            "POST",
            f"queues/{v}/{qn}/get",
            {"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64"},
        )
        step("queue.purge", "DELETE", f"queues/{v}/{qn}/contents")
        _auth(step, v, names)
        step("binding.delete", "DELETE", f"bindings/{v}/e/{x}/q/{qn}/a.%23")
        step("binding.delete.missing", "DELETE", f"bindings/{v}/e/{x}/q/{qn}/a.%23")
        step("queue.delete", "DELETE", f"queues/{v}/{qn}")
        step("queue.delete.missing", "DELETE", f"queues/{v}/{qn}")
        step("queue.delete.quorum", "DELETE", f"queues/{v}/{q(names['quorum'])}")
        step("exchange.delete", "DELETE", f"exchanges/{v}/{x}")
        step("permission.delete", "DELETE", f"permissions/{v}/{q(names['manager'])}")
        step("user.delete", "DELETE", f"users/{q(names['nobody'])}")
        step("user.delete.missing", "DELETE", f"users/{q(names['nobody'])}")
        step("users.bulk-delete", "POST", "users/bulk-delete", {"users": [names["monitor"]]})
        step("users.bulk-delete.missing", "POST", "users/bulk-delete", {"users": [names["nobody"]]})
        step("users.bulk-delete.no-users", "POST", "users/bulk-delete", {})
    finally:
        for who in ("admin", "monitor", "manager", "nobody"):
            http.call("DELETE", f"users/{q(names[who])}")
        http.call("DELETE", f"vhosts/{v}")
    step("vhost.delete.missing", "DELETE", f"vhosts/{v}")
    return steps


def _await_quorum_stats(http: Http, path: str) -> None:
    """RabbitMQ lists a new quorum queue's statistics (state, counts) only once its Raft
    member reported them, which can take longer than the statistics interval."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "state" not in http.call("GET", path)[1]:
        time.sleep(0.5)


def _reads(
    step: Callable[..., Exchange],
    v: str,
    x: str,
    qn: str,
    names: dict[str, str],
    connection_name: str,
    amqp_port: int,
) -> None:
    c = q(connection_name)
    step("overview", "GET", "overview")
    step("whoami", "GET", "whoami")
    step("nodes", "GET", "nodes")
    nodes = step("nodes", "GET", "nodes").body
    step("node", "GET", f"nodes/{q(nodes[0]['name'])}")
    step("vhosts", "GET", "vhosts")
    step("vhost", "GET", f"vhosts/{v}")
    step("users", "GET", "users")
    step("user", "GET", f"users/{q(names['admin'])}")
    step("users.without-permissions", "GET", "users/without-permissions")
    step("permissions", "GET", "permissions")
    step("permission", "GET", f"permissions/{v}/{q(names['admin'])}")
    step("vhost.permissions", "GET", f"vhosts/{v}/permissions")
    step("user.permissions", "GET", f"users/{q(names['admin'])}/permissions")
    step("connections", "GET", "connections")
    step("connection", "GET", f"connections/{c}")
    step("vhost.connections", "GET", f"vhosts/{v}/connections")
    step("connection.channels", "GET", f"connections/{c}/channels")
    channels = step("channels", "GET", "channels").body
    mine = [ch for ch in channels if ch.get("vhost") == names["vhost"]]
    if mine:
        step("channel", "GET", f"channels/{q(mine[0]['name'])}")
    step("vhost.channels", "GET", f"vhosts/{v}/channels")
    step("consumers", "GET", "consumers")
    step("vhost.consumers", "GET", f"consumers/{v}")
    step("exchanges", "GET", "exchanges")
    step("vhost.exchanges", "GET", f"exchanges/{v}")
    step("exchange", "GET", f"exchanges/{v}/{x}")
    step("exchange.default", "GET", f"exchanges/{v}/amq.default")
    step("exchange.source-bindings", "GET", f"exchanges/{v}/{x}/bindings/source")
    step("exchange.destination-bindings", "GET", f"exchanges/{v}/{x}/bindings/destination")
    step("queues", "GET", "queues")
    step("vhost.queues", "GET", f"queues/{v}")
    step("queue", "GET", f"queues/{v}/{qn}")
    step("queue.consumed", "GET", f"queues/{v}/{q(names['consumed'])}")
    step("queue.quorum", "GET", f"queues/{v}/{q(names['quorum'])}")
    step("queue.bindings", "GET", f"queues/{v}/{qn}/bindings")
    step("bindings", "GET", "bindings")
    step("vhost.bindings", "GET", f"bindings/{v}")
    step("binding.list", "GET", f"bindings/{v}/e/{x}/q/{qn}")
    step("binding", "GET", f"bindings/{v}/e/{x}/q/{qn}/a.%23")
    step("binding.list.arguments", "GET", f"bindings/{v}/e/{x}/q/{q(names['quorum'])}")
    step("queues.page", "GET", f"queues/{v}?page=1&page_size=1&name=&use_regex=false&sort=name")
    step("queues.page.regex", "GET", f"queues/{v}?page=1&page_size=100&name=q%24&use_regex=true")
    step("queues.page.beyond", "GET", f"queues/{v}?page=9&page_size=1")
    step("queues.columns", "GET", f"queues/{v}?columns=name,messages")
    step("exchanges.sort", "GET", f"exchanges/{v}?sort=name&sort_reverse=true")
    step("definitions.vhost", "GET", f"definitions/{v}")
    for check in (
        "alive",
        "virtual-hosts",
        "local-alarms",
        "node-is-quorum-critical",
        "node-is-mirror-sync-critical",
        "port-listener/1",
        "protocol-listener/amqp",
        "protocol-listener/stomp",
        "certificate-expiration/1/days",
    ):
        step(f"health.{check}", "GET", f"health/checks/{check}")
    step("health.port-listener.amqp", "GET", f"health/checks/port-listener/{amqp_port}")
    step("aliveness-test", "GET", f"aliveness-test/{v}")
    step("healthchecks.node", "GET", "healthchecks/node")
    step("healthchecks.node.named", "GET", f"healthchecks/node/{q(nodes[0]['name'])}")
    step("healthchecks.node.missing", "GET", "healthchecks/node/nope%40nowhere")
    step("missing.queue", "GET", f"queues/{v}/nope")
    step("missing.vhost.queues", "GET", "queues/nope-vhost")


def _auth(step: Callable[..., Exchange], v: str, names: dict[str, str]) -> None:
    """What each tag may do."""
    step("auth.nobody.overview", "GET", "overview", as_user=names["nobody"])
    step("auth.manager.overview", "GET", "overview", as_user=names["manager"])
    step("auth.manager.users", "GET", "users", as_user=names["manager"])
    step("auth.manager.vhosts", "GET", "vhosts", as_user=names["manager"])
    step("auth.manager.nodes", "GET", "nodes", as_user=names["manager"])
    step("auth.manager.queues.vhost", "GET", f"queues/{v}", as_user=names["manager"])
    step("auth.manager.queues.default", "GET", "queues/%2F", as_user=names["manager"])
    step(
        "auth.manager.queue.put.default",
        "PUT",
        "queues/%2F/" + q(names["queue"]),
        {},
        as_user=names["manager"],
    )
    step("auth.manager.connections", "GET", "connections", as_user=names["manager"])
    step("auth.manager.definitions", "GET", "definitions", as_user=names["manager"])
    step("auth.monitor.users", "GET", "users", as_user=names["monitor"])
    step("auth.monitor.nodes", "GET", "nodes", as_user=names["monitor"])
    step("auth.monitor.queues.vhost", "GET", f"queues/{v}", as_user=names["monitor"])
    step("auth.monitor.vhost.put", "PUT", f"vhosts/{v}", {}, as_user=names["monitor"])
    step("auth.admin.users", "GET", "users", as_user=names["admin"])
    step("auth.bad-password", "GET", "overview", as_user="nope-user")


class _amqp:
    """One AMQP connection to the vhost with a consumer (prefetch 5) and some traffic."""

    def __init__(self, url: str, vhost: str, queue: str) -> None:
        parts = urlsplit(url)
        self.parameters = pika.ConnectionParameters(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5672,
            virtual_host=vhost,
            credentials=pika.PlainCredentials("guest", "guest"),
            client_properties={"connection_name": "scenario"},
        )
        self.queue = queue
        self.connection: pika.BlockingConnection | None = None

    def __enter__(self) -> str:
        self.connection = connection = pika.BlockingConnection(self.parameters)
        channel = connection.channel()
        channel.confirm_delivery()
        for number in range(4):
            channel.basic_publish("", self.queue, f"m{number}".encode())
        channel.basic_qos(prefetch_count=5)
        got = []
        channel.basic_consume(
            self.queue,
            lambda ch, method, props, body: got.append(method),
            arguments={"x-priority": 3},
        )
        deadline = time.monotonic() + 5
        while len(got) < 4 and time.monotonic() < deadline:
            connection.process_data_events(0.1)
        channel.basic_ack(got[0].delivery_tag)
        channel.basic_nack(got[1].delivery_tag, requeue=True)
        connection.process_data_events(0.5)
        local = connection._impl._transport._sock.getsockname()  # type: ignore[union-attr]
        return f"{local[0]}:{local[1]} -> {self.parameters.host}:{self.parameters.port}"

    def __exit__(self, *exc_info: object) -> None:
        if self.connection is not None and self.connection.is_open:
            with contextlib.suppress(Exception):
                self.connection.close()
