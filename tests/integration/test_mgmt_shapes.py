"""Warren's management API against RabbitMQ 3.10.8's recorded replies, field by field.

`mgmt_scenario.run` drives the same steps on the broker under test as
`data/record_rabbitmq_mgmt.py` drove on a real RabbitMQ 3.10.8; every step must give the
same status, and every body the same shape: the same keys, recursively, with values of
the same JSON kind (number, string, boolean, list, object; null matches anything).
Fields Warren leaves out on purpose are listed in `ABSENT` with the reason; a field Warren
has that RabbitMQ has not fails the test too.

Against a real RabbitMQ (``WARREN_TEST_URL``) the same comparison checks the recording
still matches the broker, except for fields that depend on its statistics timing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mgmt_scenario
import pytest

RECORDING = Path(__file__).with_name("data") / "rabbitmq-3.10.8-mgmt.json"

# Each entry: a dotted field path inside a reply ("*" any key; "[]" items of a list),
# and why Warren leaves it out. The same name may appear in several replies. Fields with
# no meaning in Warren are not left out: they carry neutral values
# (`warren.runtime.admin_neutral`, listed in docs/management.md).
ABSENT: dict[str, str] = {
    "idle_since": "RabbitMQ shows it only while an object is idle; Warren does not track it",
}
# Fields only Warren has, and why.
EXTRA: dict[str, str] = {
    "python_version": "Warren's runtime, where RabbitMQ reports erlang_version",
}
# Objects whose keys are names or user data, not fields: only their kind is compared.
OPAQUE = (
    "cluster_state",
    "arguments",
    "client_properties",
    "properties",
    "definition",
    "effective_policy_definition",
    "open_files",
)


def _absent(path: str) -> str | None:
    tail = path.split(".")[-1]
    for pattern, reason in ABSENT.items():
        if pattern.endswith("*") and tail.startswith(pattern[:-1]):
            return reason
        if pattern in (path, tail) or path.endswith("." + pattern):
            return reason
    return None


def kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(value), "null")


def shape_diff(expected: Any, actual: Any, path: str) -> list[str]:
    """Differences in keys and kinds between two JSON values; [] when the shapes match."""
    if expected is None or actual is None:
        return []
    if kind(expected) != kind(actual):
        # RabbitMQ writes an empty property list as [] (Erlang's empty proplist)
        if {kind(expected), kind(actual)} == {"list", "object"} and not expected and not actual:
            return []
        return [f"{path or '.'}: {kind(expected)} in RabbitMQ, {kind(actual)} in Warren"]
    if isinstance(expected, dict):
        if path.split(".")[-1] in OPAQUE:
            return []
        problems = []
        for key in expected.keys() - actual.keys():
            where = f"{path}.{key}" if path else key
            if _absent(where) is None:
                problems.append(f"{where}: missing in Warren")
        for key in actual.keys() - expected.keys():
            where = f"{path}.{key}" if path else key
            if key not in EXTRA:
                problems.append(f"{where}: only in Warren")
        for key in expected.keys() & actual.keys():
            where = f"{path}.{key}" if path else key
            if _absent(where) is None:
                problems += shape_diff(expected[key], actual[key], where)
        return problems
    if isinstance(expected, list) and expected and actual:
        return shape_diff(*_pair(expected, actual), path + ".[]")
    return []


def _pair(expected: list[Any], actual: list[Any]) -> tuple[Any, Any]:
    """The first recorded item that has a counterpart of the same name in Warren's list
    (the scenario's prefix aside), else the two first items."""
    for item in expected:
        if not isinstance(item, dict) or "name" not in item:
            break
        name = str(item["name"]).replace("rec.", "shape.", 1)
        for other in actual:
            if isinstance(other, dict) and other.get("name") == name:
                return item, other
    return expected[0], actual[0]


def _mine(body: Any, prefix: str) -> Any:
    """A list narrowed to the scenario's own objects, where the items name them."""
    if not isinstance(body, list):
        return body
    keep = [
        item
        for item in body
        if not isinstance(item, dict)
        or any(str(item.get(key, "")).startswith(prefix) for key in ("vhost", "name", "user"))
    ]
    return keep or body


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    steps = json.loads(RECORDING.read_text())["steps"]
    return {f"{s['name']}#{index}": s for index, s in enumerate(steps)}


@pytest.fixture(scope="module")
def replayed(broker: Any, management: tuple[str, str, str]) -> dict[str, Any]:
    base, user, password = management
    prefix = "shape"
    # RabbitMQ's statistics need a collection interval; Warren's rates one sampling round
    wait_s = mgmt_scenario.STATS_WAIT_S if broker.is_rabbitmq else 1.5
    steps = mgmt_scenario.run(base, user, password, broker.url, prefix, wait_s)
    return {f"{s.name}#{index}": s.as_json() for index, s in enumerate(steps)}


def test_same_steps(recorded: dict[str, Any], replayed: dict[str, Any]) -> None:
    assert [key.split("#")[0] for key in replayed] == [key.split("#")[0] for key in recorded]


KNOWN_STATUS = {
    # RabbitMQ 3.10.8 has no /api/health/checks/alive (added in 3.11); Warren keeps it.
    "health.alive": 200,
}


def test_status_codes(recorded: dict[str, Any], replayed: dict[str, Any], broker: Any) -> None:
    known = {} if broker.is_rabbitmq else KNOWN_STATUS
    wrong = []
    for key, expected in recorded.items():
        got = replayed.get(key)
        if got is None:
            continue
        want = known.get(expected["name"], expected["status"])
        if got["status"] != want:
            wrong.append(f"{key} {got['method']} {got['path']}: {got['status']}, want {want}")
    assert wrong == []


def test_shapes(recorded: dict[str, Any], replayed: dict[str, Any]) -> None:
    problems: list[str] = []
    for key, expected in recorded.items():
        got = replayed.get(key)
        if got is None or expected["name"] in KNOWN_STATUS:
            continue
        want = _mine(expected["body"], "rec")
        have = _mine(got["body"], "shape")
        problems += [f"{key}: {p}" for p in shape_diff(want, have, "")]
    assert problems == []


def test_error_bodies_are_rabbitmqs(recorded: dict[str, Any], replayed: dict[str, Any]) -> None:
    """A 4xx body is matched exactly (its error and reason), names aside."""
    different = []
    for key, expected in recorded.items():
        got = replayed.get(key)
        if got is None or not 400 <= expected["status"] < 500 or expected["name"] in KNOWN_STATUS:
            continue
        want = json.dumps(expected["body"]).replace("rec.", "shape.")
        if json.dumps(got["body"]) != want:
            different.append(f"{key}: {got['body']!r} != {want}")
    assert different == []


@pytest.mark.parametrize("step", ["binding.post", "binding.post.arguments"])
def test_location_of_a_new_binding(
    recorded: dict[str, Any], replayed: dict[str, Any], step: str
) -> None:
    """The Location names the binding by its properties_key, RabbitMQ's hash of the
    arguments included."""
    key = next(k for k in recorded if k.startswith(step + "#"))
    assert replayed[key]["location"] == recorded[key]["location"].replace("rec.", "shape.")


def _body(steps: dict[str, Any], name: str) -> Any:
    return next(step["body"] for key, step in steps.items() if key.split("#")[0] == name)


def test_values_monitoring_tools_read(recorded: dict[str, Any], replayed: dict[str, Any]) -> None:
    """Beyond the shapes: the values that depend only on what the scenario did."""
    for steps, prefix in ((recorded, "rec"), (replayed, "shape")):
        exchange = _body(steps, "exchange")
        assert exchange["message_stats"]["publish_in"] == 2
        assert exchange["message_stats"]["publish_out"] == 1
        consumers = _body(steps, "vhost.consumers")
        assert [c["arguments"] for c in consumers] == [{"x-priority": 3}]
        quorum = _body(steps, "queue.quorum")
        node = _body(steps, "nodes")[0]["name"]
        assert (quorum["leader"], quorum["members"], quorum["online"]) == (node, [node], [node])
        overview = _body(steps, "overview")
        ports = {str(listener["port"]) for listener in overview["listeners"]}
        assert overview["contexts"][0]["port"] in ports
        assert _body(steps, "binding.list.arguments")[0]["properties_key"] == "k~rkBFvA"
        assert _body(steps, "healthchecks.node") == {"status": "ok"}
        assert _body(steps, "users.bulk-delete.missing")["reason"] == [
            "no_such_user",
            f"{prefix}.nobody",
        ]
