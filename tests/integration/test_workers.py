"""A node of two worker processes (`--workers 2`, issue 19): one AMQP port whose
connections land on either worker, queues usable from every connection whichever worker
declared them, connections handed to the worker of their queues (no message lost,
reordered or left unconfirmed, and none crossing workers), and a worker killed with
SIGKILL restarted with its durable queues. A node told no number runs one worker per core
on a new data directory, and that number from then on. The workers' Unix sockets go with
the node: removed when it stops, and those a killed node left at the next start.

A connection's worker is told by the management API, which worker 0 serves for the whole
node: its connection list names each connection's worker (`on_worker`)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pytest
from pika.adapters.blocking_connection import BlockingConnection

from tests.conftest import STARTED_LINE, WarrenServer
from warren.runtime.workers.layout import cores, management_address

pytestmark = pytest.mark.warren_only

CONNECT_ATTEMPTS_MAX = 64  # each lands on a worker at random: both seen long before this
WAIT_S = 30.0
_AUTHORIZATION = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


def _api(server: WarrenServer, path: str) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.management_port}/api/{path}", headers=_AUTHORIZATION
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def _worker_api(server: WarrenServer, index: int, path: str) -> Any:
    """Worker `index`'s own answer, on the socket where worker 0 asks it."""
    address = management_address(server.data_dir / "workers", index)
    connection = http.client.HTTPConnection("worker")
    connection.sock = socket.socket(socket.AF_UNIX)
    try:
        connection.sock.connect(str(address))
        connection.request("GET", f"/api/{path}", headers=_AUTHORIZATION)
        return json.load(connection.getresponse())
    finally:
        connection.close()


def _metrics(server: WarrenServer, path: str) -> str:
    address = f"http://127.0.0.1:{server.management_port}/{path}"
    with urllib.request.urlopen(address, timeout=10) as response:
        return str(response.read().decode())


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
    _until(lambda: _answering(server))
    yield server


def _answering(server: WarrenServer) -> bool:
    """The AMQP port opens with the first worker to listen; worker 0's management API may
    come a moment later, refusing connections until then."""
    try:
        nodes = _api(server, "nodes")
    except urllib.error.URLError:
        return False
    return [n["running"] for n in nodes] == [True]


def test_the_node_is_one_node_to_the_outside(node: WarrenServer) -> None:
    """Its workers are no cluster: one node in the API and in cluster_status, by its name."""
    nodes = _api(node, "nodes")
    assert [item["name"] for item in nodes] == ["warren@localhost"]
    assert _api(node, "overview")["node"] == "warren@localhost"
    assert _api(node, "nodes/warren%40localhost")["name"] == "warren@localhost"
    with pytest.raises(urllib.error.HTTPError) as missing:
        _api(node, "nodes/warren-w1%40localhost")
    missing.value.close()
    assert missing.value.code == 404
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "warren.cli",
            "--url",
            node.broker.management_url or "",
            "cluster_status",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0] == "Cluster status of node warren@localhost ..."
    disk = lines.index("Disk Nodes")
    assert lines[disk : disk + 4] == ["Disk Nodes", "", "warren@localhost", ""]


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
    path = f"queues/%2F/{urllib.parse.quote(queue, safe='')}"
    assert _api(node, path)["node"] == "warren@localhost"  # one node to the outside
    assert _worker_api(node, 1, path)["node"] == "warren-w1@localhost"  # its home
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


def test_metrics_are_the_nodes(
    node: WarrenServer, connections: dict[int, list[BlockingConnection]], unique: str
) -> None:
    """Worker 0's /metrics adds up every worker's: connections on both, queues on both."""
    channel = connections[1][0].channel()
    queues = [f"{unique}.m{number}" for number in range(4)]  # spread 2/2 over the workers
    for queue in queues:
        channel.queue_declare(queue)
    assert {_worker_api(node, 1, f"queues/%2F/{q}")["node"] for q in queues} == {
        "warren-w0@localhost",
        "warren-w1@localhost",
    }
    channel.confirm_delivery()
    for queue in queues:
        for number in range(5):
            channel.basic_publish("", queue, f"m{number}".encode())
    text = _metrics(node, "metrics")
    assert "\nrabbitmq_connections 4\n" in text
    assert "\nrabbitmq_queues 4\n" in text
    assert "\nrabbitmq_queue_messages_ready 20\n" in text
    assert "\nrabbitmq_channel_messages_published_total 20\n" in text
    assert 'rabbitmq_node="warren@localhost"' in text
    per_object = _metrics(node, "metrics/per-object")
    for queue in queues:
        assert f'rabbitmq_queue_messages_ready{{vhost="/",queue="{queue}"}} 5\n' in per_object
    for queue in queues:
        channel.queue_delete(queue)


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


def _exited(pid: int) -> bool:
    """The process ended, every thread of it: its descriptors (its listener among them)
    are closed. A zombie too, its parent (stopped) not having reaped it; but not while
    its main thread is one and others still exit, holding the descriptors."""
    try:
        return all(
            (task / "stat").read_text().rpartition(")")[2].split()[0] in ("Z", "X")
            for task in Path(f"/proc/{pid}/task").iterdir()
        )
    except FileNotFoundError:
        return True


def _worker_knows(server: WarrenServer, index: int, path: str) -> bool | None:
    """Whether worker `index` has the object (or bindings) at `path`; None while it does
    not answer."""
    try:
        answer = _worker_api(server, index, path)
    except OSError:
        return None
    return bool(answer) and "error" not in answer


def test_a_dead_worker_other_than_0_blocks_no_declare_and_catches_up(
    node: WarrenServer, unique: str
) -> None:
    """Worker 0 is the node's only metadata voter, the other workers its learners: with
    worker 1 killed and kept down (its supervisor stopped, so not restarted), exchanges,
    queues and bindings are declared and deleted at once through worker 0, and worker 1,
    restarted, has what worker 0 has."""
    lock = Path(node.data_dir) / "workers" / "1" / "node.lock"
    killed = int(lock.read_text())
    os.kill(node.process.pid, signal.SIGSTOP)
    try:
        os.kill(killed, signal.SIGKILL)
        _until(lambda: _exited(killed))
        connection = _connect(node)  # on worker 0: worker 1 listens no more
        channel = connection.channel()
        channel.confirm_delivery()
        started = time.monotonic()
        for number in range(4):
            channel.exchange_declare(f"{unique}.x{number}", "fanout", durable=True)
            channel.queue_declare(f"{unique}.q{number}", durable=number % 2 == 0)
            channel.queue_bind(f"{unique}.q{number}", f"{unique}.x{number}")
        channel.queue_delete(f"{unique}.q0")
        channel.exchange_delete(f"{unique}.x0")
        elapsed = time.monotonic() - started
        channel.basic_publish(f"{unique}.x2", "", b"routed")
        assert _exited(killed) and lock.read_text().strip() in ("", str(killed))
    finally:
        os.kill(node.process.pid, signal.SIGCONT)
    assert elapsed < 5.0, f"{elapsed:.1f} s for 14 declares and deletes"
    _until(lambda: _worker_knows(node, 1, f"queues/%2F/{unique}.q3") is not None)
    for number in range(1, 4):
        assert _worker_knows(node, 1, f"queues/%2F/{unique}.q{number}")
        assert _worker_knows(node, 1, f"exchanges/%2F/{unique}.x{number}")
        assert _worker_knows(node, 1, f"bindings/%2F/e/{unique}.x{number}/q/{unique}.q{number}")
    assert _worker_knows(node, 1, f"queues/%2F/{unique}.q0") is False
    assert _worker_knows(node, 1, f"exchanges/%2F/{unique}.x0") is False
    assert _bodies(connection, f"{unique}.q2", 1) == [b"routed"]
    for number in range(1, 4):
        channel.queue_delete(f"{unique}.q{number}")
        channel.exchange_delete(f"{unique}.x{number}")
    connection.close()


@pytest.mark.parametrize("killed", ["node", "worker"])
def test_what_expired_while_down_is_dead_lettered_to_another_workers_queue(
    node: WarrenServer,
    server_factory: Callable[..., WarrenServer],
    unique: str,
    killed: str,
) -> None:
    """A message whose TTL ran out while its worker was down is dead-lettered when the
    worker recovers, into a dead-letter queue homed on the other worker: the recovering
    worker waits until it knows the other's queues (it learns them when their link comes
    up) instead of finding no such queue and dropping the message."""
    dead, expiring = f"{unique}.dead", f"{unique}.expiring"
    dlx = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
    connection = _connect(node)
    channel = connection.channel()
    channel.queue_declare(dead, durable=True)  # one queue on each worker (a declare
    channel.queue_declare(expiring, durable=True, arguments={**dlx, "x-message-ttl": 500})
    assert {_home(node, dead), _home(node, expiring)} == {0, 1}  # goes to the emptiest)
    channel.confirm_delivery()
    channel.basic_publish("", expiring, b"expired", pika.BasicProperties(delivery_mode=2))
    connection.close()
    home = Path(node.data_dir) / "workers" / str(_home(node, expiring)) / "node.lock"
    pid = int(home.read_text())
    if killed == "node":
        node.kill()
        time.sleep(1.0)  # due while the node is down: dead-lettered as it recovers
        node = server_factory(data_dir=node.data_dir, workers=2, bind="127.0.0.1")
    else:  # restarted by the supervisor after 0.5 s: due by then, almost always
        os.kill(pid, signal.SIGKILL)
        _until(lambda: home.read_text().strip() not in ("", str(pid)))
    _until(lambda: _answering(node))
    connection = _connect(node)
    channel = connection.channel()
    got: list[bytes] = []

    def dead_lettered() -> bool:
        _, properties, body = channel.basic_get(dead, auto_ack=True)
        if body is not None:
            deaths = (properties.headers or {}).get("x-death", [])
            got.append(body)
            assert [death["reason"] for death in deaths] == ["expired"]
        return bool(got)

    _until(dead_lettered)
    assert got == [b"expired"]
    assert channel.queue_declare(expiring, passive=True).method.message_count == 0
    channel.queue_delete(dead)
    channel.queue_delete(expiring)
    connection.close()


def _home(server: WarrenServer, queue: str) -> int:
    node = _worker_api(server, 1, f"queues/%2F/{urllib.parse.quote(queue, safe='')}")["node"]
    return int(node.split("@")[0].rsplit("-w", 1)[1])


CROSSED = re.compile(r"worker (\d+): (\d+) messages crossed workers.*handed over (\d+)")


def _crossings(server: WarrenServer) -> tuple[int, int]:
    """(messages that crossed workers, connections handed over) so far: each worker logs
    them when sent SIGUSR1."""
    reports = len(CROSSED.findall(server.log()))
    for lock in (Path(server.data_dir) / "workers").glob("*/node.lock"):
        os.kill(int(lock.read_text()), signal.SIGUSR1)
    _until(lambda: len(CROSSED.findall(server.log())) >= reports + 2)
    latest = {
        worker: (int(crossed), int(handed))
        for worker, crossed, handed in CROSSED.findall(server.log())
    }
    return sum(c for c, _ in latest.values()), sum(h for _, h in latest.values())


def test_quorum_publishes_to_another_workers_leader_are_crossings(
    node: WarrenServer, connections: dict[int, list[BlockingConnection]], unique: str
) -> None:
    """Published on worker 0 through an exchange (so the connection stays there) to a
    quorum queue led on worker 1: each publish is forwarded to the leader, and counted."""
    queue = f"{unique}.qq"
    declaring = connections[1][0].channel()
    declaring.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    declaring.queue_bind(queue, "amq.direct", routing_key=queue)
    assert _home(node, queue) == 1
    crossed_before, _ = _crossings(node)
    publisher = connections[0][0].channel()
    publisher.confirm_delivery()
    bodies = [f"q{number}".encode() for number in range(10)]
    for body in bodies:
        publisher.basic_publish("amq.direct", queue, body)
    assert _crossings(node)[0] - crossed_before == 10
    assert _bodies(connections[1][1], queue, 10) == bodies
    declaring.queue_delete(queue)


def test_sigusr1_to_the_supervisor_reaches_every_worker(node: WarrenServer) -> None:
    reports = len(CROSSED.findall(node.log()))
    os.kill(node.process.pid, signal.SIGUSR1)
    _until(lambda: len(CROSSED.findall(node.log())) >= reports + 2)
    assert node.process.poll() is None


def test_sigusr1_leaves_a_node_of_one_process_running(
    server_factory: Callable[..., WarrenServer],
) -> None:
    server = server_factory(workers=1)
    os.kill(server.process.pid, signal.SIGUSR1)
    _until(lambda: "no message crosses workers" in server.log())
    assert server.process.poll() is None
    _connect(server).close()


def test_connections_move_to_their_queues_worker_and_no_message_crosses(
    node: WarrenServer, connections: dict[int, list[BlockingConnection]], unique: str
) -> None:
    """A publisher on worker 0 of a queue of worker 1, and a consumer on worker 1 of a queue
    of worker 0, each end up on the queue's worker (the same TCP connection), with every
    confirm and every message in order; a burst of publishes read with the one that moved
    the connection goes along with it."""
    here, there = f"{unique}.w0", f"{unique}.w1"
    connections[1][0].channel().queue_declare(there)  # a tie: stays on worker 1
    connections[0][0].channel().queue_declare(here)  # worker 0 homes fewest: stays
    assert (_home(node, here), _home(node, there)) == (0, 1)
    crossed_before, handed_before = _crossings(node)

    publisher = connections[0][1]
    burst = publisher.channel()  # no confirms: many publishes per read
    confirmed = publisher.channel()
    confirmed.confirm_delivery()  # both channels open, in their modes, before the move
    bodies = [f"b{number}".encode() for number in range(300)]
    for body in bodies:
        burst.basic_publish("", there, body)
    bodies += [f"c{number}".encode() for number in range(30)]
    for body in bodies[300:]:
        confirmed.basic_publish("", there, body)  # raises if not confirmed
    assert on_worker(node, publisher) == 1
    assert _bodies(connections[1][0], there, len(bodies)) == bodies

    consumer = connections[1][1]
    feeder = connections[0][0].channel()
    for body in bodies[:50]:
        feeder.basic_publish("", here, body)
    assert _bodies(consumer, here, 50) == bodies[:50]
    assert on_worker(node, consumer) == 0

    crossed, handed = _crossings(node)
    assert (crossed - crossed_before, handed - handed_before) == (0, 2)
    feeder.queue_delete(here)
    feeder.queue_delete(there)


def test_a_connection_that_holds_a_consumer_stays_and_still_reaches_the_other_worker(
    node: WarrenServer, connections: dict[int, list[BlockingConnection]], unique: str
) -> None:
    """Once a connection consumes it never moves: its publishes to the other worker's
    queue cross, correctly."""
    here, there = f"{unique}.w0", f"{unique}.w1"
    connections[1][0].channel().queue_declare(there)
    connections[0][0].channel().queue_declare(here)
    both = connections[0][1]
    consuming = both.channel()
    consuming.basic_consume(here, lambda *_: None)
    publishing = both.channel()
    publishing.confirm_delivery()
    for number in range(10):
        publishing.basic_publish("", there, f"x{number}".encode())
    assert on_worker(node, both) == 0
    received = _bodies(connections[1][1], there, 10)
    assert received == [f"x{number}".encode() for number in range(10)]
    crossed, _ = _crossings(node)
    assert crossed >= 10
    consuming.close()
    publishing.queue_delete(here)
    publishing.queue_delete(there)


def test_aio_pika_clients_keep_confirms_order_and_qos_wherever_they_land(
    node: WarrenServer, unique: str
) -> None:
    """Queues declared one after another spread over the workers; aio-pika publishers with
    confirms and consumers with a prefetch, each on its own connection landing on either
    worker, get every confirm and every message in order, and nothing crosses workers."""
    queues = [f"{unique}.{number}" for number in range(4)]
    count = 200

    async def publish(url: str, queue: str) -> None:
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue(queue, passive=True)
            for number in range(count):
                await channel.default_exchange.publish(
                    aio_pika.Message(f"{queue}:{number}".encode()), routing_key=queue
                )

    async def consume(url: str, queue: str) -> list[bytes]:
        async with await aio_pika.connect(url) as connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=20)
            declared = await channel.declare_queue(queue, passive=True)
            received: list[bytes] = []
            async with declared.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        received.append(message.body)
                    if len(received) == count:
                        break
            return received

    async def scenario() -> list[list[bytes]]:
        async with await aio_pika.connect(node.broker.url) as setup:
            channel = await setup.channel()
            for queue in queues:
                await channel.declare_queue(queue)
        consumers = [asyncio.ensure_future(consume(node.broker.url, q)) for q in queues]
        await asyncio.gather(*(publish(node.broker.url, q) for q in queues))
        return await asyncio.wait_for(asyncio.gather(*consumers), WAIT_S)

    crossed_before, _ = _crossings(node)
    received = asyncio.run(scenario())
    assert received == [[f"{q}:{n}".encode() for n in range(count)] for q in queues]
    assert sorted(_home(node, queue) for queue in queues) == [0, 0, 1, 1]
    crossed, _ = _crossings(node)
    assert crossed == crossed_before


def test_sigkill_of_the_node_kills_every_worker(node: WarrenServer) -> None:
    """kill -9 of the supervisor leaves no worker holding its directory (or writing on)."""
    _kill(node)


def _kill(node: WarrenServer) -> None:
    """kill -9 of the supervisor, and wait until every worker died with it."""
    workers = [
        int((Path(node.data_dir) / "workers" / str(index) / "node.lock").read_text())
        for index in range(2)
    ]
    node.kill()
    _until(lambda: all(_exited(pid) for pid in workers))


def _sockets(server: WarrenServer) -> Path:
    """The directory of the node's Unix sockets: its workers' management and link ones."""
    return Path(management_address(server.data_dir / "workers", 0)).parent


def test_a_stopped_node_leaves_no_sockets_behind(node: WarrenServer) -> None:
    directory = _sockets(node)
    assert sorted(path.name for path in directory.iterdir()) == ["0.link", "1.link", "1.sock"]
    node.stop()
    assert node.process.returncode == 0
    assert not directory.exists()


def test_a_start_refused_beside_a_live_node_leaves_its_sockets(
    node: WarrenServer, port_factory: Callable[[], int]
) -> None:
    """Only a start that holds the data directory's lock clears the sockets."""
    command = [sys.executable, "-m", "warren", "--data-dir", str(node.data_dir)]
    command += ["--bind", "127.0.0.1", "--port", str(port_factory())]
    command += ["--management-port", str(port_factory())]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert refused.returncode == 1
    assert "is in use by another Warren node" in refused.stderr
    assert sorted(path.name for path in _sockets(node).iterdir()) == ["0.link", "1.link", "1.sock"]
    assert _worker_api(node, 1, "overview")["node"] == "warren@localhost"  # it answers


def test_the_next_start_clears_the_sockets_a_killed_node_left(
    node: WarrenServer, port_factory: Callable[[], int]
) -> None:
    """Even a start that fails (here its AMQP port is taken) clears them: they were a dead
    node's, as its data directory's lock proves."""
    _kill(node)
    assert sorted(path.name for path in _sockets(node).iterdir()) == ["0.link", "1.link", "1.sock"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port_factory()))
        taken.listen()
        command = [sys.executable, "-m", "warren", "--data-dir", str(node.data_dir)]
        command += ["--bind", "127.0.0.1", "--port", str(taken.getsockname()[1])]
        command += ["--management-port", str(port_factory())]
        refused = subprocess.run(
            command, capture_output=True, text=True, timeout=WAIT_S, check=False
        )
    assert refused.returncode == 1, refused.stderr
    assert "is in use" in refused.stderr
    assert not _sockets(node).exists()


def test_a_new_node_runs_one_worker_per_core_and_keeps_that_number(
    server_factory: Callable[..., WarrenServer], tmp_path: Path
) -> None:
    """No ``--workers``: one worker per core on a new data directory, then the data
    directory's number on every start; another number given is refused (issue 19)."""
    data_dir = tmp_path / "data"
    server = server_factory(data_dir, workers=None, bind="127.0.0.1")
    _until(lambda: _answering(server))
    assert _api(server, "warren/environment")["settings"]["workers"] == cores()
    assert server.log().count(STARTED_LINE) == cores()
    server.stop()
    if cores() > 1:
        assert f" runs {cores()} workers, data in {data_dir}" in server.log()
    other = 1 if cores() > 1 else 2
    refused = subprocess.run(
        [sys.executable, "-m", "warren", "--data-dir", str(data_dir), "--workers", str(other)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    made = "1 worker (one process)" if cores() == 1 else f"{cores()} workers"
    assert (refused.returncode, refused.stderr) == (
        1,
        f"warren-server: bad workers = {other}: the data directory {data_dir} was made for"
        f" {made}, and changing a node's number of workers is not supported yet; leave"
        f" workers out (the node keeps {cores()}), or use another --data-dir\n",
    )
    again = server_factory(data_dir, workers=None, bind="127.0.0.1")
    _until(lambda: _answering(again))
    assert _api(again, "warren/environment")["settings"]["workers"] == cores()
