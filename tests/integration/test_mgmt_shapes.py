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

ERLANG = "Erlang VM internals with no Warren counterpart"
STATS = "per-object statistics Warren does not keep (yet)"
CLUSTER = "clustering and plugins Warren does not have"
# Each entry: a dotted field path inside a reply ("*" any key; "[]" items of a list),
# and why Warren leaves it out. The same name may appear in several replies.
ABSENT: dict[str, str] = {
    # /api/overview
    "erlang_version": ERLANG,
    "erlang_full_version": ERLANG,
    "release_series_support_status": "RabbitMQ release-series metadata",
    "churn_rates": STATS,
    "contexts": CLUSTER,
    "listeners.[].socket_opts": ERLANG,
    "message_stats.disk_reads": STATS,
    "message_stats.disk_reads_details": STATS,
    "message_stats.disk_writes": STATS,
    "message_stats.disk_writes_details": STATS,
    # /api/nodes
    "applications": ERLANG,
    "context_switches": ERLANG,
    "context_switches_details": ERLANG,
    "gc_bytes_reclaimed": ERLANG,
    "gc_bytes_reclaimed_details": ERLANG,
    "gc_num": ERLANG,
    "gc_num_details": ERLANG,
    "io_*": STATS,
    "mnesia_*": ERLANG,
    "msg_store_*": STATS,
    "queue_index_*": STATS,
    "queue_created*": STATS,
    "queue_declared*": STATS,
    "queue_deleted*": STATS,
    "channel_closed*": STATS,
    "channel_created*": STATS,
    "connection_closed*": STATS,
    "connection_created*": STATS,
    "fd_used_details": STATS,
    "mem_used_details": STATS,
    "proc_used_details": STATS,
    "sockets_used_details": STATS,
    "disk_free_details": STATS,
    "metrics_gc_queue_length": ERLANG,
    "ra_open_file_metrics": "Warren's quorum queues keep no open-file metrics",
    # connections, channels, queues, vhosts
    "garbage_collection": ERLANG,
    "reductions": ERLANG,
    "reductions_details": ERLANG,
    # a vhost's byte counters: Warren counts bytes per connection only
    "recv_oct": STATS,
    "recv_oct_details": STATS,
    "send_oct": STATS,
    "send_oct_details": STATS,
    "idle_since": STATS,
    "backing_queue_status": "classic queue v1 internals",
    "consumer_capacity": STATS,
    "consumer_utilisation": STATS,
    "memory": ERLANG,
    "message_bytes_paged_out": "Warren pages nothing out yet",
    "messages_paged_out": "Warren pages nothing out yet",
    "message_bytes_persistent": STATS,
    "messages_persistent": STATS,
    "message_bytes_ram": STATS,
    "messages_ram": STATS,
    "messages_ready_ram": STATS,
    "messages_unacknowledged_ram": STATS,
    "message_stats": STATS,  # per exchange only; see PRESENT_MESSAGE_STATS
    "user_who_performed_action": "Warren does not record who declared an object",
}
# message_stats is kept where Warren has it: node, vhost and channel replies.
PRESENT_MESSAGE_STATS = (
    "overview",
    "vhost",
    "vhosts",
    "channel",
    "channels",
    "connection.channels",
    "vhost.channels",
    "auth.manager.overview",
    "auth.manager.vhosts",
    "queue",
    "queue.consumed",
    "queues",
    "vhost.queues",
    "queues.page",
    "queues.page.regex",
)
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
)


def _absent(path: str, step: str) -> str | None:
    tail = path.split(".")[-1]
    for pattern, reason in ABSENT.items():
        if pattern == "message_stats" and step in PRESENT_MESSAGE_STATS:
            continue
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


def shape_diff(expected: Any, actual: Any, path: str, step: str) -> list[str]:
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
            if _absent(where, step) is None:
                problems.append(f"{where}: missing in Warren")
        for key in actual.keys() - expected.keys():
            where = f"{path}.{key}" if path else key
            if key not in EXTRA:
                problems.append(f"{where}: only in Warren")
        for key in expected.keys() & actual.keys():
            where = f"{path}.{key}" if path else key
            if _absent(where, step) is None:
                problems += shape_diff(expected[key], actual[key], where, step)
        return problems
    if isinstance(expected, list) and expected and actual:
        return shape_diff(*_pair(expected, actual), path + ".[]", step)
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
        problems += [f"{key}: {p}" for p in shape_diff(want, have, "", expected["name"])]
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


def test_location_of_a_new_binding(recorded: dict[str, Any], replayed: dict[str, Any]) -> None:
    key = next(k for k in recorded if k.startswith("binding.post#"))
    assert replayed[key]["location"] == recorded[key]["location"].replace("rec.", "shape.")
