"""Definitions export and import (/api/definitions, warrenctl export/import_definitions).

Every test here also passes against RabbitMQ 3.10.8 (``WARREN_TEST_URL`` set) except those
marked `warren_only`. The reference shape is `data/rabbitmq-3.10.8-definitions.json`, an
export taken from RabbitMQ 3.10.8 with a few objects declared (its node-specific
``internal_cluster_id`` global parameter removed). Tests rename its ``fixture.`` objects
to their own unique prefix so that they never collide on a shared broker.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pika
import pytest

DATA = Path(__file__).parent / "data"
REFERENCE = DATA / "rabbitmq-3.10.8-definitions.json"
LISTS = ("policies", "queues", "exchanges", "bindings")


def reference() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(REFERENCE.read_text())
    return document


def renamed(prefix: str) -> dict[str, Any]:
    """The reference export with its ``fixture.`` objects renamed to `prefix`."""
    escaped = prefix.replace(".", "\\\\.")  # a regex escape, inside a JSON string
    text = REFERENCE.read_text().replace("fixture.", f"{prefix}.")
    text = text.replace("^fixture\\\\.", "^" + escaped + "\\\\.")
    document: dict[str, Any] = json.loads(text)
    return document


class Api:
    def __init__(self, management: tuple[str, str, str]) -> None:
        self.base, user, password = management
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.authorization = f"Basic {token}"
        self.policies: list[tuple[str, str]] = []

    def call(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Authorization": self.authorization}
        request = urllib.request.Request(self.base + "/api/" + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as failure:
            return failure.code, _decode(failure.read())

    def export(self) -> dict[str, Any]:
        status, body = self.call("GET", "definitions")
        assert status == 200, body
        assert isinstance(body, dict)
        return body

    def put_policy(self, name: str, body: dict[str, Any], *, operator: bool = False) -> None:
        kind = "operator-policies" if operator else "policies"
        self.policies.append((kind, name))
        status, reply = self.call("PUT", f"{kind}/%2F/{quote(name, safe='')}", body)
        assert status in (201, 204), reply

    def track_policies(self, document: dict[str, Any]) -> None:
        for policy in document.get("policies", []):
            self.policies.append(("policies", policy["name"]))
        for parameter in document.get("parameters", []):
            if parameter["component"] == "operator_policy":
                self.policies.append(("operator-policies", parameter["name"]))

    def cleanup(self) -> None:
        for kind, name in self.policies:
            self.call("DELETE", f"{kind}/%2F/{quote(name, safe='')}")


def _decode(raw: bytes) -> Any:
    return json.loads(raw) if raw.strip() else None


@pytest.fixture
def api(management: tuple[str, str, str]) -> Iterator[Api]:
    client = Api(management)
    yield client
    client.cleanup()


def mine(document: dict[str, Any], prefix: str) -> dict[str, list[dict[str, Any]]]:
    """The objects of `document` whose names start with `prefix`, by list."""
    found: dict[str, list[dict[str, Any]]] = {}
    for key in (*LISTS, "parameters"):
        found[key] = [
            item
            for item in document.get(key, [])
            if str(item.get("name", item.get("source", ""))).startswith(prefix)
        ]
    return found


def durable(objects: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Only the durable exchanges and queues, and bindings between those."""
    kept = {key: list(items) for key, items in objects.items()}
    for key in ("exchanges", "queues"):
        kept[key] = [item for item in objects[key] if item["durable"]]
    names = {item["name"] for key in ("exchanges", "queues") for item in kept[key]}
    kept["bindings"] = [
        binding
        for binding in objects["bindings"]
        if binding["source"] in names and binding["destination"] in names
    ]
    return kept


def declare_sample(amqp: Any, api: Api, prefix: str) -> dict[str, str]:
    """A durable topic exchange, a durable queue bound to it, a policy, an operator policy
    (and non-durable, exclusive and amq.* things that must not be exported)."""
    channel = amqp.channel()
    names = {
        "exchange": amqp.name("ex"),
        "queue": amqp.name("q"),
        "transient": amqp.name("transient"),
        "exclusive": amqp.name("exclusive"),
        "transient_ex": amqp.name("transient-ex"),
    }
    channel.exchange_declare(
        names["exchange"], "topic", durable=True, arguments={"alternate-exchange": "amq.fanout"}
    )
    channel.queue_declare(
        names["queue"], durable=True, arguments={"x-max-length": 10, "x-queue-mode": "lazy"}
    )
    channel.queue_bind(names["queue"], names["exchange"], "a.#")
    channel.queue_bind(names["queue"], "amq.direct", names["queue"])
    channel.queue_declare(names["transient"], durable=False)
    channel.queue_declare(names["exclusive"], durable=True, exclusive=True)
    channel.exchange_declare(names["transient_ex"], "fanout", durable=False)
    channel.queue_bind(names["transient"], names["exchange"], "b.#")
    pattern = f"^{prefix}\\.q$"
    api.put_policy(
        f"{prefix}.p",
        {"pattern": pattern, "definition": {"max-length": 100}, "priority": 1},
    )
    api.put_policy(
        f"{prefix}.op",
        {"pattern": pattern, "definition": {"max-length": 1000}, "apply-to": "queues"},
        operator=True,
    )
    return names


# --- Export ---


def test_export_shape_matches_rabbitmq(amqp: Any, api: Api, unique: str) -> None:
    names = declare_sample(amqp, api, unique)
    document = api.export()
    expected = reference()
    assert list(document) == list(expected)
    assert document["rabbit_version"] == document["rabbitmq_version"] == "3.10.8"
    for key, items in expected.items():
        if not isinstance(items, list) or not items:
            continue
        assert document[key], key
        for item in document[key]:
            assert list(item) == list(items[0]), key
    assert {"name": "/"} in document["vhosts"]
    user = document["users"][0]
    if amqp.broker.is_rabbitmq:
        assert user["hashing_algorithm"] == "rabbit_password_hashing_sha256"
        assert len(base64.b64decode(user["password_hash"])) == 4 + 32
    else:  # PBKDF2 by default: salt, rounds, key (docs/security.md)
        assert user["hashing_algorithm"] == "warren_password_hashing_pbkdf2_sha256"
        assert len(base64.b64decode(user["password_hash"])) == 16 + 4 + 32

    objects = durable(mine(document, unique))
    assert objects["exchanges"] == [
        {
            "name": names["exchange"],
            "vhost": "/",
            "type": "topic",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {"alternate-exchange": "amq.fanout"},
        }
    ]
    assert objects["queues"] == [
        {
            "name": names["queue"],
            "vhost": "/",
            "durable": True,
            "auto_delete": False,
            "arguments": {"x-max-length": 10, "x-queue-mode": "lazy"},
        }
    ]
    assert objects["bindings"] == [
        {
            "source": names["exchange"],
            "vhost": "/",
            "destination": names["queue"],
            "destination_type": "queue",
            "routing_key": "a.#",
            "arguments": {},
        }
    ]
    assert {
        "source": "amq.direct",
        "vhost": "/",
        "destination": names["queue"],
        "destination_type": "queue",
        "routing_key": names["queue"],
        "arguments": {},
    } in document["bindings"]
    assert objects["policies"] == [
        {
            "vhost": "/",
            "name": f"{unique}.p",
            "pattern": f"^{unique}\\.q$",
            "apply-to": "all",
            "definition": {"max-length": 100},
            "priority": 1,
        }
    ]
    assert objects["parameters"] == [
        {
            "value": {
                "pattern": f"^{unique}\\.q$",
                "definition": {"max-length": 1000},
                "priority": 0,
                "apply-to": "queues",
            },
            "vhost": "/",
            "component": "operator_policy",
            "name": f"{unique}.op",
        }
    ]
    assert not any(e["name"].startswith("amq.") or not e["name"] for e in document["exchanges"])
    assert names["exclusive"] not in {q["name"] for q in document["queues"]}


@pytest.mark.warren_only
def test_export_leaves_out_transient_objects(amqp: Any, api: Api, unique: str) -> None:
    """RabbitMQ 3.10.8 exports transient exchanges and queues too; Warren exports what its
    definitions store keeps over a restart (durable objects only)."""
    declare_sample(amqp, api, unique)
    objects = mine(api.export(), unique)
    assert objects == durable(objects)


def test_export_of_one_vhost(amqp: Any, api: Api, unique: str) -> None:
    declare_sample(amqp, api, unique)
    status, document = api.call("GET", "definitions/%2F")
    assert status == 200
    assert list(document) == [
        "rabbit_version",
        "parameters",
        "policies",
        "queues",
        "exchanges",
        "bindings",
    ]
    for key in ("parameters", *LISTS):
        assert document[key], key
        assert all(
            ("vhost" in item) == (key in ("parameters", "policies")) for item in document[key]
        ), key
    assert api.call("GET", "definitions/no-such-vhost") == (
        400,
        {"error": "bad_request", "reason": "vhost_not_found"},
    )


# --- Import ---


def test_round_trip(amqp: Any, api: Api, unique: str) -> None:
    names = declare_sample(amqp, api, unique)
    exported = durable(mine(api.export(), unique))
    channel = amqp.channel()
    channel.queue_delete(names["queue"])
    channel.exchange_delete(names["exchange"])
    channel.queue_delete(names["transient"])
    channel.exchange_delete(names["transient_ex"])
    api.call("DELETE", f"policies/%2F/{quote(unique + '.p', safe='')}")
    api.call("DELETE", f"operator-policies/%2F/{quote(unique + '.op', safe='')}")
    assert mine(api.export(), unique) == {key: [] for key in exported}

    assert api.call("POST", "definitions", exported) == (204, None)
    assert mine(api.export(), unique) == exported
    assert api.call("POST", "definitions", exported) == (204, None)  # idempotent
    assert mine(api.export(), unique) == exported

    # the objects work: the binding routes, the queue keeps its arguments
    channel.basic_publish(names["exchange"], "a.b", b"back")
    method, _, body = channel.basic_get(names["queue"], auto_ack=True)
    assert method is not None and body == b"back"
    channel.queue_declare(
        names["queue"],
        durable=True,
        passive=False,
        arguments={"x-max-length": 10, "x-queue-mode": "lazy"},
    )


def test_import_into_one_vhost_ignores_item_vhosts(amqp: Any, api: Api, unique: str) -> None:
    queue = amqp.name("q")
    document = {"queues": [{"name": queue, "durable": True, "auto_delete": False}]}
    assert api.call("POST", "definitions/%2F", document) == (204, None)
    channel = amqp.channel()
    channel.queue_declare(queue, passive=True)


def test_import_a_rabbitmq_export(amqp: Any, api: Api, unique: str) -> None:
    document = renamed(unique)
    for key in ("queues", "exchanges"):
        for item in document[key]:
            amqp.track(item["name"])
    api.track_policies(document)
    assert api.call("POST", "definitions", document) == (204, None)
    assert api.call("POST", "definitions", document) == (204, None)

    exported = mine(api.export(), unique)
    original = mine(document, unique)
    for key in ("parameters", *LISTS):
        assert sorted(json.dumps(item, sort_keys=True) for item in exported[key]) == sorted(
            json.dumps(item, sort_keys=True) for item in original[key]
        )

    channel = amqp.channel()
    channel.basic_publish(f"{unique}.events", "order.new", b"order")
    method, _, body = channel.basic_get(f"{unique}.orders", auto_ack=True)
    assert method is not None and body == b"order"
    # unrouted: the alternate exchange takes it to the "lost" queue
    channel.basic_publish(f"{unique}.events", "nothing", b"lost")
    # through the exchange-to-exchange binding and the headers exchange
    headers = pika.BasicProperties(headers={"kind": "audit"})
    channel.basic_publish(f"{unique}.events", "audit.x", b"audit", headers)
    got = []
    for _ in range(2):
        method, _, body = channel.basic_get(f"{unique}.lost", auto_ack=True)
        assert method is not None
        got.append(body)
    assert sorted(got) == [b"audit", b"lost"]


def test_import_errors(api: Api) -> None:
    assert api.call("POST", "definitions", raw=b"not json") == (
        400,
        {"error": "bad_request", "reason": "failed_to_parse_json"},
    )
    assert api.call("POST", "definitions/no-such-vhost", {}) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )
    status, body = api.call(
        "POST", "definitions", {"queues": [{"name": "x", "vhost": "no-such-vhost"}]}
    )
    assert status == 400 and body["error"] == "bad_request"
    api.authorization = "Basic " + base64.b64encode(b"guest:wrong").decode()
    assert api.call("GET", "definitions")[0] == 401


@pytest.mark.warren_only
def test_import_refuses_a_queue_rabbitmq_refuses(api: Api, unique: str) -> None:
    status, body = api.call(
        "POST",
        "definitions",
        {"queues": [{"name": unique, "durable": True, "arguments": {"x-max-length": "x"}}]},
    )
    assert status == 400
    assert "invalid arg 'x-max-length'" in body["reason"]


@pytest.mark.warren_only
def test_imported_definitions_survive_a_restart(server_factory: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    server = server_factory(data_dir)
    api = Api((server.broker.management_url, "guest", "guest"))
    document = renamed("restart")
    assert api.call("POST", "definitions", document) == (204, None)
    before = mine(api.export(), "restart")
    server.stop()
    server = server_factory(data_dir)
    api = Api((server.broker.management_url, "guest", "guest"))
    assert mine(api.export(), "restart") == before
    assert len(before["queues"]) == 2 and len(before["bindings"]) == 4


# --- warrenctl ---


def warrenctl(management: tuple[str, str, str], *args: str, stdin: str | None = None) -> Any:
    base, user, password = management
    parts = urlsplit(base)
    url = urlunsplit((parts.scheme, f"{user}:{password}@{parts.netloc}", parts.path, "", ""))
    env = {**os.environ, "WARREN_URL": url}
    command = [sys.executable, "-m", "warren.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, input=stdin)


def test_warrenctl_export_and_import(
    management: tuple[str, str, str], amqp: Any, api: Api, unique: str, tmp_path: Path
) -> None:
    names = declare_sample(amqp, api, unique)
    target = tmp_path / "defs.json"
    done = warrenctl(management, "export_definitions", str(target))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f'Exporting definitions in JSON to a file at "{target}" ...\n'
    text = target.read_text()
    document = json.loads(text)
    assert text == json.dumps(document, separators=(",", ":"), sort_keys=True)
    assert mine(document, unique) == mine(api.export(), unique)

    to_stdout = warrenctl(management, "export_definitions", "-")
    assert to_stdout.returncode == 0
    assert mine(json.loads(to_stdout.stdout), unique) == mine(document, unique)

    channel = amqp.channel()
    channel.queue_delete(names["queue"])
    done = warrenctl(management, "import_definitions", str(target))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f'Importing definitions in JSON from a file at "{target}" ...\n'
        "Successfully started definition import. "
        "This process is asynchronous and can take some time.\n"
    )
    channel.queue_declare(names["queue"], passive=True)

    missing = warrenctl(management, "import_definitions", str(tmp_path / "none.json"))
    assert missing.returncode == 65
    assert missing.stderr.startswith(
        f"Error (argument validation): Bad argument: File {tmp_path / 'none.json'} does not exist\n"
    )
    bad = tmp_path / "bad.json"
    bad.write_text("xx\n")
    failed = warrenctl(management, "import_definitions", str(bad))
    assert failed.returncode == 65
    assert failed.stderr.startswith("Error:\nFailed to deserialise input (format: JSON)")
