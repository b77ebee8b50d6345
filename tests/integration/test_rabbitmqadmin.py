"""The real `rabbitmqadmin` (v1, from RabbitMQ 3.10.8) as a subprocess against the broker.

`make test` fetches the script from Debian's rabbitmq-server package into .venv and
passes its path in ``WARREN_RABBITMQADMIN``; without it the tests look on PATH and are
skipped if it is nowhere. The same tests pass against RabbitMQ (``WARREN_TEST_URL``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

SCRIPT_ENV = "WARREN_RABBITMQADMIN"


class Admin:
    def __init__(self, script: str, management: tuple[str, str, str]) -> None:
        base, user, password = management
        parts = urlsplit(base)
        self.command = [sys.executable, script, "-H", parts.hostname or "127.0.0.1"]
        self.command += ["-P", str(parts.port or 15672), "-u", user, "-p", password]

    def __call__(self, *args: str, check: bool = True) -> str:
        done = subprocess.run([*self.command, *args], capture_output=True, text=True, timeout=60)
        if check:
            assert done.returncode == 0, done.stderr + done.stdout
        return done.stdout + done.stderr

    def json(self, *args: str) -> Any:
        return json.loads(self("-f", "raw_json", *args))


@pytest.fixture
def rabbitmqadmin(management: tuple[str, str, str]) -> Iterator[Admin]:
    script = os.environ.get(SCRIPT_ENV) or shutil.which("rabbitmqadmin")
    if not script or not os.path.exists(script):
        pytest.skip("rabbitmqadmin not found (make test provides it)")
    yield Admin(script, management)


def test_declare_list_publish_get_delete(rabbitmqadmin: Admin, unique: str) -> None:
    admin = rabbitmqadmin
    queue, exchange = f"{unique}.q", f"{unique}.x"
    try:
        assert admin("declare", "queue", f"name={queue}", "durable=false") == "queue declared\n"
        assert (
            admin("declare", "exchange", f"name={exchange}", "type=topic") == "exchange declared\n"
        )
        assert (
            admin(
                "declare",
                "binding",
                f"source={exchange}",
                f"destination={queue}",
                "routing_key=a.*",
            )
            == "binding declared\n"
        )
        queues = {q["name"]: q for q in admin.json("list", "queues")}
        assert queues[queue]["durable"] is False
        exchanges = {e["name"]: e for e in admin.json("list", "exchanges")}
        assert exchanges[exchange]["type"] == "topic"
        assert exchanges[exchange]["auto_delete"] is False
        assert exchanges[exchange]["internal"] is False
        bindings = [b for b in admin.json("list", "bindings") if b["source"] == exchange]
        assert [(b["destination"], b["routing_key"]) for b in bindings] == [(queue, "a.*")]

        out = admin("publish", f"exchange={exchange}", "routing_key=a.b", "payload=hello")
        assert out == "Message published\n"
        out = admin("publish", f"exchange={exchange}", "routing_key=zz", "payload=lost")
        assert out == "Message published but NOT routed\n"

        got = admin.json("get", f"queue={queue}", "ackmode=ack_requeue_true")
        assert [(m["payload"], m["routing_key"], m["redelivered"]) for m in got] == [
            ("hello", "a.b", False)
        ]
        got = admin.json("get", f"queue={queue}", "ackmode=ack_requeue_false")
        assert [(m["payload"], m["redelivered"], m["message_count"]) for m in got] == [
            ("hello", True, 0)
        ]
        assert admin.json("get", f"queue={queue}") == []

        assert (
            admin(
                "delete",
                "binding",
                f"source={exchange}",
                f"destination={queue}",
                "destination_type=queue",
                "properties_key=a.*",
            )
            == "binding deleted\n"
        )
        assert admin("delete", "exchange", f"name={exchange}") == "exchange deleted\n"
        assert admin("delete", "queue", f"name={queue}") == "queue deleted\n"
        names = [q["name"] for q in admin.json("list", "queues")]
        assert queue not in names
    finally:
        admin("delete", "queue", f"name={queue}", check=False)
        admin("delete", "exchange", f"name={exchange}", check=False)


def test_list_columns_and_show_overview(rabbitmqadmin: Admin, unique: str, broker: Any) -> None:
    admin = rabbitmqadmin
    queue = f"{unique}.q"
    admin("declare", "queue", f"name={queue}", "durable=false")
    try:
        admin("publish", "exchange=amq.default", f"routing_key={queue}", "payload=one")
        rows = admin.json("list", "queues", "name", "messages")
        mine = [row for row in rows if row["name"] == queue]
        # RabbitMQ leaves out counters its statistics database has not collected yet;
        # Warren's are live
        assert mine and set(mine[0]) <= {"name", "messages"}
        if not broker.is_rabbitmq:
            assert mine[0] == {"name": queue, "messages": 1}
        overview = admin.json("show", "overview")
        assert overview[0]["rabbitmq_version"].startswith("3.")
        out = admin("purge", "queue", f"name={queue}")
        assert out == "queue purged\n"
    finally:
        admin("delete", "queue", f"name={queue}", check=False)


def test_users_vhosts_permissions(rabbitmqadmin: Admin, unique: str) -> None:
    admin = rabbitmqadmin
    vhost, user = f"{unique}.v", f"{unique}.u"
    try:
        assert admin("declare", "vhost", f"name={vhost}") == "vhost declared\n"
        assert (
            admin("declare", "user", f"name={user}", "password=pw", "tags=monitoring")
            == "user declared\n"
        )
        out = admin(
            "declare",
            "permission",
            f"vhost={vhost}",
            f"user={user}",
            "configure=.*",
            "write=.*",
            "read=",
        )
        assert out == "permission declared\n"
        users = {u["name"]: u for u in admin.json("list", "users")}
        assert users[user]["tags"] in (["monitoring"], "monitoring")
        permissions = [p for p in admin.json("list", "permissions") if p["user"] == user]
        assert permissions == [
            {"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ""}
        ]
        assert vhost in [v["name"] for v in admin.json("list", "vhosts")]
    finally:
        assert admin("delete", "user", f"name={user}", check=False) == "user deleted\n"
        assert admin("delete", "vhost", f"name={vhost}", check=False) == "vhost deleted\n"
