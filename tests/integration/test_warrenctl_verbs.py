"""`warrenctl`'s everyday verbs (users, vhosts, permissions, listings, queues, connections,
status) as a subprocess, against Warren's management API or RabbitMQ's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pika
import pytest


class Ctl:
    def __init__(self, management: tuple[str, str, str]) -> None:
        base, user, password = management
        parts = urlsplit(base)
        self.url = urlunsplit((parts.scheme, f"{user}:{password}@{parts.netloc}", "", "", ""))
        self.cleanups: list[list[str]] = []

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "WARREN_URL": self.url}
        command = [sys.executable, "-m", "warren.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)

    def ok(self, *args: str) -> str:
        done = self(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout


def settled(read: Callable[[], Any], ok: Callable[[Any], bool]) -> Any:
    """RabbitMQ lists connections, channels and consumers from its statistics database,
    seconds late; Warren at once. Read until `ok` holds (or 20 s pass)."""
    deadline = time.monotonic() + 20
    value = read()
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(0.5)
        value = read()
    return value


@pytest.fixture
def ctl(management: tuple[str, str, str]) -> Iterator[Ctl]:
    runner = Ctl(management)
    yield runner
    for args in reversed(runner.cleanups):
        runner(*args, "-q")


def test_users(ctl: Ctl, unique: str) -> None:
    user = f"{unique}.u"
    ctl.cleanups.append(["delete_user", user])
    assert ctl.ok("add_user", user, "pw1") == (
        f'Adding user "{user}" ...\n'
        "Done. Don't forget to grant the user permissions to some virtual hosts! "
        "See 'rabbitmqctl help set_permissions' to learn more.\n"
    )
    again = ctl("add_user", user, "pw1")
    assert (again.returncode, again.stderr) == (70, f"Error:\nuser_already_exists: {user}\n")
    assert ctl.ok("set_user_tags", user, "monitoring", "policymaker") == (
        f'Setting tags for user "{user}" to [monitoring, policymaker] ...\n'
    )
    assert ctl.ok("change_password", user, "pw2") == (f'Changing password for user "{user}" ...\n')
    rows = json.loads(ctl.ok("list_users", "--formatter", "json"))
    assert {"user": user, "tags": ["monitoring", "policymaker"]} in rows
    table = ctl.ok("list_users", "--silent").splitlines()
    assert f"{user}\t[monitoring, policymaker]" in table
    assert ctl.ok("delete_user", user) == f'Deleting user "{user}" ...\n'
    gone = ctl("delete_user", user)
    assert (gone.returncode, gone.stderr) == (65, f'Error:\nUser "{user}" does not exist\n')


def test_vhosts_and_permissions(ctl: Ctl, unique: str, broker: Any) -> None:
    vhost, user = f"{unique}.v", f"{unique}.u"
    ctl.cleanups += [["delete_vhost", vhost], ["delete_user", user]]
    assert ctl.ok("add_vhost", vhost, "--description", "for tests") == (
        f'Adding vhost "{vhost}" ...\n'
    )
    ctl.ok("add_user", user, "pw", "-q")
    assert ctl.ok("set_permissions", "-p", vhost, user, "^c", ".*", "") == (
        f'Setting permissions for user "{user}" in vhost "{vhost}" ...\n'
    )
    rows = json.loads(ctl.ok("list_permissions", "-p", vhost, "--formatter", "json"))
    assert {"user": user, "configure": "^c", "write": ".*", "read": ""} in rows
    pretty = ctl.ok("list_permissions", "-p", vhost, "--formatter", "pretty_table")
    assert pretty.splitlines()[0] == f'Listing permissions for vhost "{vhost}" ...'
    assert pretty.splitlines()[1].startswith("┌")
    vhosts = json.loads(ctl.ok("list_vhosts", "name", "description", "--formatter", "json"))
    assert {"name": vhost, "description": "for tests"} in vhosts
    parts = urlsplit(broker.url)
    connection = pika.BlockingConnection(
        pika.ConnectionParameters(
            parts.hostname, parts.port, vhost, pika.PlainCredentials(user, "pw")
        )
    )
    connection.close()
    assert ctl.ok("delete_vhost", vhost) == f'Deleting vhost "{vhost}" ...\n'
    missing = ctl("delete_vhost", vhost)
    assert missing.returncode == 65


def test_listings_and_queue_verbs(ctl: Ctl, unique: str, broker: Any) -> None:
    queue, exchange = f"{unique}.q", f"{unique}.x"
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        channel.exchange_declare(exchange, "fanout", auto_delete=True)
        channel.queue_declare(queue)
        channel.queue_bind(queue, exchange)
        channel.basic_qos(prefetch_count=7)
        tag = channel.basic_consume(queue, lambda *args: None)
        exchanges = ctl.ok("list_exchanges", "--silent").splitlines()
        assert f"{exchange}\tfanout" in exchanges
        bindings = ctl.ok("list_bindings", "--silent").splitlines()
        assert f"{exchange}\texchange\t{queue}\tqueue\t{queue}\t[]" in bindings
        consumers = settled(
            lambda: json.loads(ctl.ok("list_consumers", "--formatter", "json")),
            lambda rows: any(c["consumer_tag"] == tag for c in rows),
        )
        mine = [c for c in consumers if c["consumer_tag"] == tag]
        assert len(mine) == 1 and mine[0]["queue_name"] == queue
        assert mine[0]["ack_required"] is True and mine[0]["prefetch_count"] == 7
        connections = settled(
            lambda: json.loads(
                ctl.ok("list_connections", "name", "user", "vhost", "--formatter", "json")
            ),
            lambda rows: any(c["user"] == "guest" for c in rows),
        )
        assert any(c["user"] == "guest" and c["vhost"] == "/" for c in connections)
        channels = settled(
            lambda: json.loads(
                ctl.ok("list_channels", "name", "consumer_count", "--formatter", "json")
            ),
            lambda rows: any(c["consumer_count"] == 1 for c in rows),
        )
        assert any(c["consumer_count"] == 1 for c in channels)
        channel.basic_cancel(tag)
        channel.basic_publish("", queue, b"one")
        assert ctl.ok("purge_queue", queue) == f"Purging queue '{queue}' in vhost '/' ...\n"
        assert ctl.ok("delete_queue", queue) == (
            f"Deleting queue '{queue}' on vhost '/' ...\n"
            "Queue was successfully deleted with 0 messages\n"
        )
        assert ctl("delete_queue", queue).returncode == 65
    finally:
        if connection.is_open:
            connection.close()


@pytest.mark.warren_only
def test_close_connection_and_status(ctl: Ctl, broker: Any) -> None:
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": "to-close"}
    connection = pika.BlockingConnection(params)
    try:
        rows = json.loads(
            ctl.ok("list_connections", "name", "user_provided_name", "--formatter", "json")
        )
        name = next(r["name"] for r in rows if r["user_provided_name"] == "to-close")
        assert ctl.ok("close_connection", name, "go away") == (
            f"Closing connection {name}, reason: go away...\n"
        )
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            connection.process_data_events(2)
            connection.channel()
        assert (closed.value.reply_code, closed.value.reply_text) == (
            320,
            "CONNECTION_FORCED - go away",
        )
    finally:
        if connection.is_open:
            connection.close()
    status = ctl.ok("status")
    assert status.splitlines()[0].startswith("Status of node ")
    assert "RabbitMQ version (compatible): 3.10.8" in status
    assert "protocol: amqp" in status
