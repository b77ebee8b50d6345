"""Quorum queues in a cluster of nodes of two workers each (issue 19): a queue's replicas
spread over every node's workers, two never on one node, they come back after kill -9 of
their worker or of their whole node, and what operators see names nodes.

The cluster here always runs 2 workers a node, whatever ``WARREN_TEST_WORKERS`` says
(`tests/integration/test_workers.py` does the same for a node on its own). Where a
replica lives is read from ``quorum_status``'s ``member`` (the Raft member, a worker of
the row's node); the nodes are killed and started again within each test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.error
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.cluster.conftest import connect, declare, drain, publish, revived, until
from warren.testing.cluster import LocalCluster

pytestmark = pytest.mark.warren_only  # Warren's worker processes

NODES = ["warren-a", "warren-b", "warren-c"]
WORKERS = {node: [node, f"{node}-w1"] for node in NODES}  # each node's members, by worker
CROSSED = re.compile(r"worker (\d+): (\d+) messages crossed workers")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    directory: Path = tmp_path_factory.mktemp("quorum-workers")
    local = LocalCluster(directory, NODES, workers=2)
    try:
        local.start_all()
        yield local
    finally:
        local.stop_all()


def fresh_names(count: int) -> list[str]:
    stem = uuid.uuid4().hex[:8]
    return [f"qw-{stem}-{index}" for index in range(count)]


def status(cluster: LocalCluster, node: str, queue: str) -> list[dict[str, object]]:
    return list(cluster.api(node, f"/api/warren/quorum/%2F/{urllib.parse.quote(queue)}"))


def hosting(cluster: LocalCluster) -> Counter[str]:
    """How many quorum replicas each worker hosts, every queue of the cluster counted."""
    queues = [q["name"] for q in cluster.api("warren-a", "/api/queues") if q["type"] == "quorum"]
    return Counter(str(row["member"]) for q in queues for row in status(cluster, "warren-a", q))


def declared_with_messages(cluster: LocalCluster, node: str, count: int) -> list[str]:
    queues = fresh_names(count)
    connection = connect(cluster, node)
    channel = connection.channel()
    channel.confirm_delivery()
    for queue in queues:
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        for number in range(20):
            body = f"{queue} {number}".encode()
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    connection.close()
    return queues


def refused(
    cluster: LocalCluster, node: str, path: str, method: str, body: object = None
) -> tuple[int, str]:
    """The status and reason of a call the management API refuses."""
    with pytest.raises(urllib.error.HTTPError) as error:
        cluster.api(node, path, method, body, timeout_s=30)
    return error.value.code, json.loads(error.value.read())["reason"]


def all_online(cluster: LocalCluster, node: str, queue: str) -> bool:
    return len(status(cluster, node, queue)) == 3 and reached(cluster, node, queue)


def reached(cluster: LocalCluster, node: str, queue: str) -> bool:
    """Whether `node` hears from every replica of `queue`, however many it has."""
    return all(row["role"] in ("leader", "follower") for row in status(cluster, node, queue))


def test_replicas_spread_over_both_workers_of_every_node(cluster: LocalCluster) -> None:
    before = hosting(cluster)
    queues = declared_with_messages(cluster, "warren-a", 4)
    added = hosting(cluster) - before
    for node in NODES:  # each worker of each node took replicas of the new queues
        assert [added[member] for member in WORKERS[node]] == [2, 2], (node, added)
    for queue in queues:
        rows = status(cluster, "warren-b", queue)
        assert [row["node"] for row in rows] == NODES  # one replica a node
        assert {row["member"] for row in rows} <= {m for ms in WORKERS.values() for m in ms}
        # what the management API shows names nodes, on a node's worker 0 as on any
        shown = cluster.queue("warren-c", queue)
        assert (shown["members"], shown["online"]) == (NODES, NODES)
        assert shown["leader"] in NODES and shown["node"] == shown["leader"]
        assert shown["messages"] == 20
    listed = {q["name"]: q for q in cluster.api("warren-b", "/api/queues") if q["name"] in queues}
    assert sorted(listed) == queues
    for item in listed.values():
        assert item["members"] == NODES and item["leader"] in NODES, item


def crossed(cluster: LocalCluster, node: str) -> int:
    """The messages that crossed between `node`'s workers so far: each worker logs its
    count when the supervisor gets SIGUSR1 (`warren.runtime.workers.worker`)."""
    process = cluster.nodes[node].process
    assert process is not None
    log = cluster.nodes[node].log_path
    logged = len(CROSSED.findall(log.read_text(errors="replace")))
    os.kill(process.pid, signal.SIGUSR1)
    counts = until(
        lambda: CROSSED.findall(log.read_text(errors="replace")),
        lambda found: len(found) >= logged + 2,  # both workers answered
    )
    return sum({worker: int(count) for worker, count in counts}.values())  # each one's last


def led_by(cluster: LocalCluster, queue: str, node: str) -> int:
    """The term in which `node`'s replica leads `queue`; 0 while it does not."""
    rows = status(cluster, "warren-a", queue)
    leading = [row for row in rows if row["role"] == "leader" and row["node"] == node]
    return max((int(row["term"]) for row in leading), default=0)


def test_connections_follow_a_quorum_queue_to_its_nodes_replica(cluster: LocalCluster) -> None:
    queues = declared_with_messages(cluster, "warren-a", 2)  # one on each of a's workers
    # client-local: a's replica leads, from the term its election began
    elected = {q: until(lambda q=q: led_by(cluster, q, "warren-a"), bool) for q in queues}
    assert all(elected.values()), elected
    before = crossed(cluster, "warren-a")
    for queue in queues:  # new connections, wherever the kernel puts them
        publish(cluster, "warren-a", queue, [b"more %d" % number for number in range(30)])
        assert len(drain(cluster, "warren-a", queue, 50)) == 50
    # Hop-free while a's replica leads. On a busy machine an election may move a leader to
    # another node meanwhile, and publishes then go to it: they cross by design.
    after = crossed(cluster, "warren-a")
    rows = {q: status(cluster, "warren-a", q) for q in queues}
    now = {q: max(int(row["term"]) for row in rows[q]) for q in queues}  # the highest reported
    assert after == before or now != elected, (before, after, elected, rows)


def test_replicas_come_back_after_kill_9_of_their_worker_and_of_their_node(
    cluster: LocalCluster,
) -> None:
    queues = declared_with_messages(cluster, "warren-b", 2)
    on_a = {
        str(row["member"]): queue
        for queue in queues
        for row in status(cluster, "warren-b", queue)
        if row["node"] == "warren-a"
    }
    assert sorted(on_a) == WORKERS["warren-a"]  # one queue on each of a's workers
    killed, other = on_a["warren-a-w1"], on_a["warren-a"]
    with revived(cluster):
        cluster.restart_worker("warren-a", 1)  # its replica comes back from its own WAL
        assert until(lambda: all_online(cluster, "warren-c", killed), bool)
        publish(cluster, "warren-c", killed, [b"after the worker"])
        # without warren-c the group needs the restarted replica for its majority
        cluster.kill("warren-c")
        assert len(drain(cluster, "warren-b", killed, 21)) == 21
        cluster.start("warren-c")  # all of a node's workers, after kill -9 of the node
        for queue in queues:
            assert until(lambda q=queue: all_online(cluster, "warren-b", q), bool)
        publish(cluster, "warren-a", other, [b"after the node"])
        cluster.kill("warren-a")  # so warren-c's replicas make the majority
        assert len(drain(cluster, "warren-c", other, 21)) == 21
    for queue in queues:
        assert until(lambda q=queue: all_online(cluster, "warren-b", q), bool)
        assert cluster.queue("warren-a", queue)["messages"] == 0


def test_operators_name_nodes_and_a_new_replica_goes_to_the_emptier_worker(
    cluster: LocalCluster,
) -> None:
    (queue,) = fresh_names(1)
    declare(cluster, "warren-a", queue, **{"x-quorum-initial-group-size": 2})
    shown = until(lambda: cluster.queue("warren-a", queue), lambda q: q["leader"] is not None)
    (missing,) = set(NODES) - set(shown["members"])
    # warren-b places the replica on a worker it reaches: after the restarts of the test
    # before, wait until it reaches every replica again (a worker still redialling would
    # be passed over, as it should, and the emptier one not chosen)
    queues = [q["name"] for q in cluster.api("warren-a", "/api/queues") if q["type"] == "quorum"]
    assert until(lambda: all(reached(cluster, "warren-b", q) for q in queues), bool)
    counts = hosting(cluster)
    emptier = min(WORKERS[missing], key=lambda member: (counts[member], member))
    members = f"/api/warren/quorum/%2F/{queue}/members"
    grown = cluster.api("warren-b", members, "POST", {"node": missing}, timeout_s=30)
    assert grown == NODES
    rows = status(cluster, "warren-b", queue)
    assert {str(row["node"]): row["member"] for row in rows}[missing] == emptier
    again = refused(cluster, "warren-b", members, "POST", {"node": missing})
    assert again == (400, f"{missing} is already a member of '{queue}'")
    shrunk = cluster.api("warren-c", f"{members}/{missing}", "DELETE", timeout_s=30)
    assert shrunk == sorted(set(NODES) - {missing})
    gone = refused(cluster, "warren-c", f"{members}/{missing}", "DELETE")
    assert gone == (400, f"{missing} is not a member of '{queue}'")
    worker = refused(cluster, "warren-c", members, "POST", {"node": "warren-a-w1"})
    assert worker == (400, "node warren-a-w1 is not in the cluster")
