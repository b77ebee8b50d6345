"""The management API's policies, operator policies and queue columns, on Warren and RabbitMQ.

Every test here also passes against RabbitMQ 3.10.8 (``WARREN_TEST_URL`` set) except those
marked `warren_only`. RabbitMQ applies a policy to its queues asynchronously and fills its
queue counters from a statistics database every few seconds, so reads that depend on
either are polled until they settle (`Api.until`); Warren answers at once.
"""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest

SETTLE_S = 20.0  # RabbitMQ's statistics interval is 5 s; the golden files waited 11 s
MISSING = "<missing>"


class Api:
    """Blocking JSON calls to the management API; tracks policies to delete afterwards."""

    def __init__(self, management: tuple[str, str, str], prefix: str) -> None:
        self.base, user, password = management
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.authorization = f"Basic {token}"
        self.prefix = prefix
        self.created: list[tuple[str, str]] = []

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        authorization: str | None = "default",
    ) -> tuple[int, Any]:
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        if authorization is not None:
            sent["Authorization"] = (
                self.authorization if authorization == "default" else authorization
            )
        request = urllib.request.Request(self.base + "/api/" + path, data, sent, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as failure:
            return failure.code, _decode(failure.read())

    def put_policy(self, suffix: str, body: dict[str, Any], *, operator: bool = False) -> int:
        name = f"{self.prefix}-{suffix}"
        kind = "operator-policies" if operator else "policies"
        self.created.append((kind, name))
        status, _ = self.call("PUT", f"{kind}/%2F/{quote(name, safe='')}", body)
        return status

    def queue(self, name: str) -> dict[str, Any]:
        status, body = self.call("GET", f"queues/%2F/{quote(name, safe='')}")
        assert status == 200, body
        assert isinstance(body, dict)
        return body

    def columns(self, queue: str, *keys: str) -> dict[str, Any]:
        """Some columns of a queue; RabbitMQ leaves out those its statistics lack yet."""
        info = self.queue(queue)
        return {key: info.get(key, MISSING) for key in keys}

    def until(self, read: Callable[[], Any], expected: Any) -> Any:
        """Poll `read()` until it returns `expected` (or give up and return the last)."""
        deadline = time.monotonic() + SETTLE_S
        value = read()
        while value != expected and time.monotonic() < deadline:
            time.sleep(0.25)
            value = read()
        return value

    def cleanup(self) -> None:
        for kind, name in self.created:
            self.call("DELETE", f"{kind}/%2F/{quote(name, safe='')}")


def _decode(raw: bytes) -> Any:
    return json.loads(raw) if raw.strip() else None


@pytest.fixture
def api(management: tuple[str, str, str], unique: str) -> Iterator[Api]:
    helper = Api(management, unique.replace(".", "-"))
    yield helper
    helper.cleanup()


def exact(name: str) -> str:
    return "^" + re.escape(name) + "$"


def passive_count(amqp: Any, queue: str) -> int:
    return int(amqp.passive_count(amqp.channel(), queue)[0])


def publish(amqp: Any, queue: str, bodies: list[str]) -> None:
    channel = amqp.channel()
    for body in bodies:
        amqp.publish(channel, queue, body)
    amqp.sync(channel)


# --- Policy CRUD ---


@pytest.mark.parametrize("operator", [False, True], ids=["policies", "operator-policies"])
def test_policy_crud_shapes_and_status_codes(api: Api, operator: bool) -> None:
    kind = "operator-policies" if operator else "policies"
    name = f"{api.prefix}-p"
    path = f"{kind}/%2F/{name}"
    body = {"pattern": "^nothing$", "definition": {"max-length": 5}}
    assert api.put_policy("p", body, operator=operator) == 201
    assert api.call("GET", path) == (
        200,
        {
            "vhost": "/",
            "name": name,
            "pattern": "^nothing$",
            "apply-to": "all",
            "definition": {"max-length": 5},
            "priority": 0,
        },
    )
    body = {
        "pattern": "^nothing$",
        "definition": {"message-ttl": 10, "max-length": 3},
        "priority": 7,
        "apply-to": "queues",
    }
    assert api.call("PUT", path, body) == (204, None)
    expected = {"vhost": "/", "name": name, **body}
    assert api.call("GET", path) == (200, expected)
    for listing in (kind, f"{kind}/%2F"):
        status, policies = api.call("GET", listing)
        assert status == 200 and expected in policies
    assert api.call("DELETE", path) == (204, None)
    not_found = (404, {"error": "Object Not Found", "reason": "Not Found"})
    assert api.call("GET", path) == not_found
    assert api.call("DELETE", path) == not_found


def test_listing_is_by_priority_then_name(api: Api) -> None:
    for suffix, priority in (("b", 5), ("a", 5), ("c", 1), ("d", 10)):
        body = {"pattern": "^nothing$", "definition": {"max-length": 1}, "priority": priority}
        assert api.put_policy(suffix, body) == 201
    _, policies = api.call("GET", "policies/%2F")
    ours = [p["name"].rsplit("-", 1)[1] for p in policies if p["name"].startswith(api.prefix)]
    assert ours == ["c", "a", "b", "d"]


def test_missing_vhost(api: Api) -> None:
    not_found = (404, {"error": "Object Not Found", "reason": "Not Found"})
    assert api.call("GET", "policies/no-such-vhost") == not_found
    assert api.call("GET", "queues/no-such-vhost") == not_found
    assert api.call("GET", "queues/no-such-vhost/q") == not_found
    body = {"pattern": "x", "definition": {"max-length": 1}}
    assert api.call("PUT", "policies/no-such-vhost/p", body) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )


# --- Refused policies: RabbitMQ's 400 texts ---


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            {"pattern": "^zz", "definition": {"max-length": -1}},
            "Validation failed\n\n-1 is not a valid maximum length\n",
        ),
        (
            {"pattern": "^zz", "definition": {"foo": 1, "bar": "x"}},
            'Validation failed\n\n[{&lt;&lt;"bar"&gt;&gt;,&lt;&lt;"x"&gt;&gt;},'
            '{&lt;&lt;"foo"&gt;&gt;,1}] are not recognised policy settings\n',
        ),
        ({"pattern": "^zz", "definition": {}}, "Validation failed\n\nno policy provided\n"),
        (
            {"pattern": "(", "definition": {"max-length": 1}},
            "Validation failed\n\npattern should be regular expression but is invalid: "
            '{"missing )",1}\n',
        ),
        (
            {"pattern": "^zz", "definition": {"max-length": 1}, "apply-to": "bogus"},
            "Validation failed\n\napply-to 'bogus' unrecognised; should be 'queues', "
            "'exchanges' or 'all'\n",
        ),
        (
            {"pattern": "^zz", "definition": {"max-length": 1}, "priority": "x"},
            'Validation failed\n\npriority should be a number, actually was &lt;&lt;"x"&gt;&gt;\n',
        ),
        ({"definition": {"max-length": 1}}, "[{key_missing,pattern}]"),
        ({}, "[{key_missing,pattern},{key_missing,definition}]"),
    ],
)
def test_refused_policies_get_rabbitmq_reasons(api: Api, body: dict[str, Any], reason: str) -> None:
    status, reply = api.call("PUT", f"policies/%2F/{api.prefix}-bad", body)
    api.created.append(("policies", f"{api.prefix}-bad"))
    assert (status, reply) == (400, {"error": "bad_request", "reason": reason})


def test_operator_policies_refuse_other_keys_without_html_escaping(api: Api) -> None:
    body = {"pattern": "^zz", "definition": {"overflow": "reject-publish"}}
    status, reply = api.call("PUT", f"operator-policies/%2F/{api.prefix}-bad", body)
    api.created.append(("operator-policies", f"{api.prefix}-bad"))
    reason = (
        'Validation failed\n\n[{<<"overflow">>,<<"reject-publish">>}] '
        "are not recognised policy settings\n"
    )
    assert (status, reply) == (400, {"error": "bad_request", "reason": reason})


def test_a_body_that_is_not_a_json_object_is_not_json(api: Api) -> None:
    for raw in (b"notjson", b"[]"):
        status, reply = api.call("PUT", f"policies/%2F/{api.prefix}-bad", raw=raw)
        assert (status, reply) == (400, {"error": "bad_request", "reason": "not_json"})


@pytest.mark.warren_only
def test_a_definition_that_is_not_an_object_is_refused(api: Api) -> None:
    # RabbitMQ 3.10.8 answers 500 (a badmap crash); Warren uses rabbit_policy's own text.
    body = {"pattern": "x", "definition": [1]}
    status, reply = api.call("PUT", f"policies/%2F/{api.prefix}-bad", body)
    reason = "Validation failed\n\ndefinition must be a dictionary: [1]\n"
    assert (status, reply) == (400, {"error": "bad_request", "reason": reason})


# --- Policies applied to queues ---


def test_a_policy_truncates_a_queue_at_once_and_clearing_it_lifts_the_limit(
    api: Api, amqp: Any
) -> None:
    # golden maxlen.policy_applied_later
    queue = amqp.queue("q", durable=True)
    publish(amqp, queue, ["m1", "m2", "m3", "m4", "m5"])
    assert api.put_policy("p", {"pattern": exact(queue), "definition": {"max-length": 2}}) == 201
    assert api.until(lambda: passive_count(amqp, queue), 2) == 2
    assert api.call("DELETE", f"policies/%2F/{api.prefix}-p") == (204, None)
    assert api.until(lambda: api.columns(queue, "policy"), {"policy": None}) == {"policy": None}
    publish(amqp, queue, ["n1", "n2", "n3"])
    assert passive_count(amqp, queue) == 5
    assert amqp.bodies(amqp.channel(), queue) == ["m4", "m5", "n1", "n2", "n3"]


def test_operator_policy_and_user_policy_take_the_lower_limit(api: Api, amqp: Any) -> None:
    # golden maxlen.operator_policy_min
    queue = amqp.name("q")
    user = {"pattern": exact(queue), "definition": {"max-length": 3}}
    operator = {"pattern": exact(queue), "definition": {"max-length": 2}}
    assert api.put_policy("user", user) == 201
    assert api.put_policy("op", operator, operator=True) == 201
    amqp.channel().queue_declare(queue, durable=True)
    publish(amqp, queue, ["m1", "m2", "m3", "m4", "m5"])
    expected = {
        "policy": f"{api.prefix}-user",
        "operator_policy": f"{api.prefix}-op",
        "effective_policy_definition": {"max-length": 2},
        "arguments": {},
    }
    assert api.until(lambda: api.columns(queue, *expected), expected) == expected
    assert amqp.bodies(amqp.channel(), queue) == ["m4", "m5"]


def test_the_argument_is_lower_than_the_policy(api: Api, amqp: Any) -> None:
    # golden maxlen.arg_lower_than_policy: the queue obeys 2; the column shows the policy's 5
    queue = amqp.name("q")
    assert api.put_policy("p", {"pattern": exact(queue), "definition": {"max-length": 5}}) == 201
    amqp.channel().queue_declare(queue, durable=True, arguments={"x-max-length": 2})
    publish(amqp, queue, ["m1", "m2", "m3", "m4", "m5", "m6"])
    expected = {"effective_policy_definition": {"max-length": 5}, "arguments": {"x-max-length": 2}}
    assert api.until(lambda: api.columns(queue, *expected), expected) == expected
    assert amqp.bodies(amqp.channel(), queue) == ["m5", "m6"]


def test_only_the_highest_priority_policy_applies(api: Api, amqp: Any) -> None:
    # golden maxlen.policy_priority
    queue = amqp.name("q")
    pattern = exact(queue)
    low = {"pattern": pattern, "definition": {"max-length": 1, "message-ttl": 60000}, "priority": 1}
    high = {"pattern": pattern, "definition": {"max-length": 3}, "priority": 2}
    exchanges = {
        "pattern": pattern,
        "definition": {"alternate-exchange": "amq.fanout"},
        "priority": 9,
        "apply-to": "exchanges",
    }
    for suffix, body in (("low", low), ("high", high), ("exch", exchanges)):
        assert api.put_policy(suffix, body) == 201
    amqp.channel().queue_declare(queue, durable=True)
    publish(amqp, queue, ["m1", "m2", "m3", "m4", "m5"])
    expected = {"policy": f"{api.prefix}-high", "effective_policy_definition": {"max-length": 3}}
    assert api.until(lambda: api.columns(queue, *expected), expected) == expected
    assert amqp.bodies(amqp.channel(), queue) == ["m3", "m4", "m5"]


@pytest.mark.warren_only
def test_equal_priorities_take_the_first_name(api: Api, amqp: Any) -> None:
    # RabbitMQ picks by the hash order of its parameter table; Warren by name.
    queue = amqp.name("q")
    for suffix, limit in (("b", 3), ("a", 1), ("c", 2)):
        body = {"pattern": exact(queue), "definition": {"max-length": limit}, "priority": 4}
        assert api.put_policy(suffix, body) == 201
    amqp.channel().queue_declare(queue)
    assert api.queue(queue)["policy"] == f"{api.prefix}-a"


# --- Queue columns and the overview ---


def test_queue_columns(api: Api, amqp: Any) -> None:
    channel = amqp.channel()
    queue = amqp.queue("q", channel, durable=True, arguments={"x-max-length": 7, "x-c": "v"})
    publish(amqp, queue, ["aaa", "bbbb"])
    method, _, _ = channel.basic_get(queue)
    assert method is not None
    expected = {
        "name": queue,
        "vhost": "/",
        "durable": True,
        "auto_delete": False,
        "exclusive": False,
        "arguments": {"x-max-length": 7, "x-c": "v"},
        "policy": None,
        "operator_policy": None,
        "effective_policy_definition": {},
        "messages": 2,
        "messages_ready": 1,
        "messages_unacknowledged": 1,
        "message_bytes": 7,
        "message_bytes_ready": 4,
        "message_bytes_unacknowledged": 3,
        "consumers": 0,
        "type": "classic",
        "state": "running",
    }

    assert api.until(lambda: api.columns(queue, *expected), expected) == expected
    status, queues = api.call("GET", "queues/%2F")
    assert status == 200 and queue in [item["name"] for item in queues]
    channel.basic_ack(method.delivery_tag)


def test_an_exchange_names_the_policy_that_applies_to_it(api: Api) -> None:
    # RabbitMQ shows ``policy`` on an exchange only while one applies, in the listing too.
    name = f"{api.prefix}-x"
    path = f"exchanges/%2F/{quote(name, safe='')}"
    assert api.call("PUT", path, {"type": "direct"})[0] == 201
    try:
        assert "policy" not in api.call("GET", path)[1]
        body = {"pattern": exact(name), "definition": {"alternate-exchange": "amq.fanout"}}
        assert api.put_policy("ae", {**body, "apply-to": "exchanges"}) == 201
        assert api.call("GET", path)[1]["policy"] == f"{api.prefix}-ae"
        status, listed = api.call("GET", "exchanges/%2F?columns=name,policy")
        assert status == 200 and {"name": name, "policy": f"{api.prefix}-ae"} in listed
        assert {"name": "amq.direct"} in listed
    finally:
        api.call("DELETE", path)


def test_overview_shape(api: Api) -> None:
    status, overview = api.call("GET", "overview")
    assert status == 200
    assert set(overview["object_totals"]) >= {
        "channels",
        "connections",
        "consumers",
        "exchanges",
        "queues",
    }
    assert set(overview["queue_totals"]) >= {
        "messages",
        "messages_ready",
        "messages_unacknowledged",
    }
    assert isinstance(overview["node"], str) and overview["management_version"]


@pytest.mark.warren_only
def test_health_check_alive(api: Api) -> None:
    # Not in RabbitMQ 3.10.8 (404 there).
    assert api.call("GET", "health/checks/alive") == (200, {"status": "ok"})


# --- Authentication ---


def test_credentials_are_required(api: Api) -> None:
    assert api.call("GET", "overview", authorization=None)[0] == 401
    wrong = "Basic " + base64.b64encode(b"guest:wrong").decode()
    assert api.call("GET", "overview", authorization=wrong) == (
        401,
        {"error": "not_authorized", "reason": "Login failed"},
    )
