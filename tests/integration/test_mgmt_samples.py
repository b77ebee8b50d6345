"""Sample history in the management API: RabbitMQ's range parameters (``lengths_age`` and
``lengths_incr``, ``msg_rates_*``, ``data_rates_*``) add ``samples`` to a statistic's
``_details``, a minute of them at 5 s by default, so a chart is full from the first reply;
and a connection counts the bytes it received and sent (``recv_oct``, ``send_oct``).
These run against a real RabbitMQ as well."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

MINUTE = "lengths_age=60&lengths_incr=5&msg_rates_age=60&msg_rates_incr=5"
STATS_WAIT_S = 15.0  # RabbitMQ emits a connection's statistics every 5 s


def eventually(mgmt: Any, path: str, ready: Callable[[Any], bool]) -> Any:
    """GET `path` until `ready` says the reply has the statistics (RabbitMQ emits them
    every 5 s; Warren samples every second)."""
    deadline = time.monotonic() + STATS_WAIT_S
    while True:
        status, reply = mgmt.request("GET", path)
        assert status == 200, reply
        if ready(reply):
            return reply
        if time.monotonic() > deadline:
            pytest.fail(f"GET {path}: no statistics after {STATS_WAIT_S} s: {reply}")
        time.sleep(0.5)


def assert_a_minute_of_samples(details: dict[str, Any]) -> None:
    samples = details["samples"]
    assert len(samples) == 13
    stamps = [sample["timestamp"] for sample in samples]
    assert all(stamp % 5000 == 0 for stamp in stamps)
    assert [a - b for a, b in itertools.pairwise(stamps)] == [5000] * 12
    assert all(isinstance(sample["sample"], int) for sample in samples)
    assert {"rate", "avg_rate", "avg"} <= details.keys()


def test_range_parameters_give_a_minute_of_samples(amqp: Any, mgmt: Any) -> None:
    channel = amqp.channel()
    channel.confirm_delivery()
    queue = amqp.name("samples")
    channel.queue_declare(queue)
    for _ in range(3):
        channel.basic_publish("", queue, b"m")
    path = f"/api/queues/%2F/{quote(queue, safe='')}"

    sampled = eventually(mgmt, f"{path}?{MINUTE}", lambda q: "messages_details" in q)
    for key in ("messages", "messages_ready", "messages_unacknowledged"):
        assert_a_minute_of_samples(sampled[f"{key}_details"])

    status, overview = mgmt.request("GET", f"/api/overview?{MINUTE}")
    assert status == 200
    assert_a_minute_of_samples(overview["queue_totals"]["messages_details"])
    assert_a_minute_of_samples(overview["message_stats"]["publish_details"])
    status, plain = mgmt.request("GET", path)
    assert status == 200
    assert "samples" not in plain["messages_details"]


def test_a_range_without_samples_is_refused(mgmt: Any) -> None:
    status, reply = mgmt.request("GET", "/api/overview?lengths_age=60&lengths_incr=0")
    assert (status, reply) == (
        400,
        {"error": "bad_request", "reason": "Invalid range parameters: age 60, incr 0"},
    )


def test_a_connection_counts_the_bytes_it_received_and_sent(amqp: Any, mgmt: Any) -> None:
    name = amqp.name("bytes")
    connection = amqp.connect(client_properties={"connection_name": name})
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish("", "no-such-queue", b"x" * 1000)

    def counted(found: list[dict[str, Any]]) -> bool:
        mine = [c for c in found if c.get("user_provided_name") == name]
        return bool(mine) and mine[0].get("recv_oct", 0) > 1000 and mine[0].get("send_oct", 0) > 0

    found = eventually(mgmt, "/api/connections", counted)
    mine = next(c for c in found if c.get("user_provided_name") == name)
    path = f"/api/connections/{quote(mine['name'], safe='')}"
    status, one = mgmt.request("GET", f"{path}?data_rates_age=60&data_rates_incr=5")
    assert status == 200
    for key in ("recv_oct", "send_oct"):
        assert isinstance(one[key], int)
        assert_a_minute_of_samples(one[f"{key}_details"])
    assert one["recv_cnt"] > 0 and one["send_cnt"] > 0
