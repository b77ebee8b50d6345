"""A node of two worker processes (`--workers 2`, issue 19's first slice): one AMQP port
whose connections land on either worker, queues usable from every connection whichever
worker declared them, and a worker killed with SIGKILL restarted with its durable queues.

A connection's worker is told by the management API, which worker 0 serves for the whole
node: its connection list names each connection's worker (`on_worker`)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingConnection

from tests.conftest import WarrenServer

pytestmark = pytest.mark.warren_only

CONNECT_ATTEMPTS_MAX = 64  # each lands on a worker at random: both seen long before this
WAIT_S = 30.0


def _api(server: WarrenServer, path: str) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.management_port}/api/{path}",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def _connect(server: WarrenServer) -> BlockingConnection:
    return BlockingConnection(pika.URLParameters(server.broker.url))


def on_worker(server: WarrenServer, connection: BlockingConnection) -> int:
    """The index of the worker that has the connection."""
    local_port = connection._impl._transport._sock.getsockname()[1]  # pika's socket
    nodes = {item["peer_port"]: item["node"] for item in _api(server, "connections")}
    return 0 if nodes[local_port].endswith("-w0@localhost") else 1


@pytest.fixture
def node(server_factory: Callable[..., WarrenServer]) -> Iterator[WarrenServer]:
    server = server_factory(workers=2, bind="127.0.0.1")
    _until(lambda: _both_running(server))
    yield server


def _both_running(server: WarrenServer) -> bool:
    """The AMQP port opens with the first worker to listen; worker 0's management API may
    come a moment later, refusing connections until then."""
    try:
        nodes = _api(server, "nodes")
    except urllib.error.URLError:
        return False
    return len(nodes) == 2 and all(n["running"] for n in nodes)


@pytest.fixture
def connections(node: WarrenServer) -> Iterator[dict[int, list[BlockingConnection]]]:
    """Two connections on each worker (more were opened and closed to find them)."""
    found: dict[int, list[BlockingConnection]] = {0: [], 1: []}
    for _ in range(CONNECT_ATTEMPTS_MAX):
        if all(len(held) == 2 for held in found.values()):
            break
        connection = _connect(node)
        held = found[on_worker(node, connection)]
        if len(held) < 2:
            held.append(connection)
        else:
            connection.close()
    assert all(len(held) == 2 for held in found.values()), "connections all on one worker"
    yield found
    for held in found.values():
        for connection in held:
            with contextlib.suppress(pika.exceptions.AMQPError):  # its worker may be gone
                connection.close()


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _bodies(connection: BlockingConnection, queue: str, count: int) -> list[bytes]:
    channel = connection.channel()
    received: list[bytes] = []

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        received.append(body)
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(queue, on_message)
    deadline = time.monotonic() + WAIT_S
    while len(received) < count and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    channel.close()
    return received


def test_a_queue_declared_on_one_worker_serves_connections_on_both(
    node: WarrenServer, connections: dict[int, list[BlockingConnection]], unique: str
) -> None:
    queue = f"{unique}.q"
    declaring = connections[1][0].channel()
    declaring.queue_declare(queue)
    info = _api(node, f"queues/%2F/{urllib.parse.quote(queue, safe='')}")
    assert info["node"].endswith("-w1@localhost")  # its home: the declaring worker
    publisher = connections[0][0].channel()  # the other worker
    publisher.confirm_delivery()
    bodies = [f"m{number}".encode() for number in range(20)]
    for body in bodies:
        publisher.basic_publish("", queue, body)
    received = _bodies(connections[0][1], queue, 10)  # a consumer across workers
    received += _bodies(connections[1][1], queue, 10)  # and one at home
    assert received == bodies
    declaring.queue_delete(queue)


def test_the_management_api_shows_every_workers_connections_and_channels(
    node: WarrenServer, connections: dict[int, list[BlockingConnection]]
) -> None:
    for held in connections.values():
        for connection in held:
            connection.channel()
    listed = _api(node, "connections")
    assert sorted(item["node"][-len("-w0@localhost") :] for item in listed) == [
        "-w0@localhost",
        "-w0@localhost",
        "-w1@localhost",
        "-w1@localhost",
    ]
    on_worker_1 = next(item for item in listed if item["node"].endswith("-w1@localhost"))
    name = urllib.parse.quote(on_worker_1["name"], safe="")
    assert _api(node, f"connections/{name}")["name"] == on_worker_1["name"]
    assert len(_api(node, f"connections/{name}/channels")) == 1
    assert len(_api(node, "channels")) == 4
    totals = _api(node, "overview")["object_totals"]
    assert (totals["connections"], totals["channels"]) == (4, 4)
    paged = _api(node, "connections?page=1&page_size=3&sort=peer_port")
    assert (paged["total_count"], len(paged["items"])) == (4, 3)


def test_direct_reply_to_crosses_workers(
    node: WarrenServer, connections: dict[int, list[BlockingConnection]], unique: str
) -> None:
    """An RPC client on one worker and its server on the other: the server sees the reply
    address live (passive declare) while the client consumes, and its reply arrives."""
    reply_to = "amq.rabbitmq.reply-to"
    client = connections[0][0].channel()
    replies: list[bytes] = []
    tag = client.basic_consume(reply_to, lambda ch, m, p, body: replies.append(body), True)
    server = connections[1][0].channel()
    queue = server.queue_declare(f"{unique}.rpc").method.queue
    client.basic_publish("", queue, b"question", pika.BasicProperties(reply_to=reply_to))
    got: list[Any] = []
    _until(lambda: bool(got.append(server.basic_get(queue, auto_ack=True)) or got[-1][0]))
    address = got[-1][1].reply_to
    assert server.queue_declare(address, passive=True).method.consumer_count == 1
    server.basic_publish("", address, b"answer")
    deadline = time.monotonic() + WAIT_S
    while not replies and time.monotonic() < deadline:
        connections[0][0].process_data_events(time_limit=0.1)
    assert replies == [b"answer"]
    client.basic_cancel(tag)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        connections[1][1].channel().queue_declare(address, passive=True)
    assert closed.value.reply_code == 404
    server.queue_delete(queue)


def test_a_killed_worker_is_restarted_with_its_durable_queues(
    node: WarrenServer, connections: dict[int, list[BlockingConnection]], unique: str
) -> None:
    queue = f"{unique}.durable"
    channel = connections[1][0].channel()
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    for number in range(5):
        channel.basic_publish("", queue, f"d{number}".encode(), persistent)
    lock = Path(node.data_dir) / "workers" / "1" / "node.lock"
    killed = int(lock.read_text())
    os.kill(killed, signal.SIGKILL)
    _until(lambda: lock.read_text().strip() not in ("", str(killed)))

    def recovered() -> bool:
        state = _api(node, f"queues/%2F/{urllib.parse.quote(queue, safe='')}")
        return state.get("state", "running") == "running" and state.get("messages") == 5

    _until(recovered)
    assert _bodies(connections[0][0], queue, 5) == [f"d{number}".encode() for number in range(5)]
    connections[0][0].channel().queue_delete(queue)
    assert node.process.poll() is None  # the supervisor, and so the node, carried on


def test_sigkill_of_the_node_kills_every_worker(node: WarrenServer) -> None:
    """kill -9 of the supervisor leaves no worker holding its directory (or writing on)."""
    workers = [
        int((Path(node.data_dir) / "workers" / str(index) / "node.lock").read_text())
        for index in range(2)
    ]
    node.kill()

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    _until(lambda: all(gone(pid) for pid in workers))
