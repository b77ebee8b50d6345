"""The cluster verbs of `warrenctl` and `warren-queues`, as subprocesses against a real
three-node cluster (`LocalCluster`): their banners, tables, JSON and exit codes are
rabbitmqctl's and rabbitmq-queues' (3.10.8), and the membership changes they make keep
every message."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest

from tests.cluster.conftest import (
    AVAILABLE_WITHIN_S,
    NAMES,
    connect,
    declare,
    drain,
    publish,
    until,
)
from warren.testing.cluster import LocalCluster

CTL = "warren.cli"
QUEUES = "warren.cli.queues"


def run(
    cluster: LocalCluster | None, node: str, module: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """`python -m module args` against `node`'s management API."""
    env = dict(os.environ)
    if cluster is not None:
        env["WARREN_URL"] = f"http://guest:guest@127.0.0.1:{cluster.nodes[node].management_port}"
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=90)


def ok(cluster: LocalCluster, node: str, module: str, *args: str) -> str:
    done = run(cluster, node, module, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def members(cluster: LocalCluster, node: str, queue: str) -> list[dict[str, Any]]:
    return json.loads(ok(cluster, node, QUEUES, "quorum_status", queue, "--formatter", "json"))


def test_cluster_status_shows_three_running_nodes(cluster: LocalCluster) -> None:
    status = until(
        lambda: json.loads(ok(cluster, "warren-a", CTL, "cluster_status", "--formatter", "json")),
        lambda status: status["metadata"]["leader"] is not None,  # elected after the start
    )
    assert status["disk_nodes"] == status["running_nodes"] == NAMES
    assert (status["cluster_name"], status["ram_nodes"], status["partitions"]) == (
        "warren-a",
        [],
        {},
    )
    assert status["metadata"]["leader"] in NAMES
    text = ok(cluster, "warren-b", CTL, "cluster_status")
    nodes = "\n".join(NAMES)
    assert text.startswith(
        "Cluster status of node warren-b ...\nBasics\n\nCluster name: warren-b\n\n"
        f"Disk Nodes\n\n{nodes}\n\nRunning Nodes\n\n{nodes}\n\n"
        "Network Partitions\n\n(none)\n\nMetadata store (Raft group)\n\nLeader: warren-"
    )
    assert f"Voters: {', '.join(NAMES)}\nLearners: (none)\n" in text
    assert ok(cluster, "warren-b", CTL, "cluster_status", "-q").startswith("Basics\n")


def test_quorum_status_shows_three_members_and_one_leader(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)
    cluster.leader_of(name)
    rows = members(cluster, "warren-c", name)
    assert [row["Node Name"] for row in rows] == NAMES
    assert sorted(row["Raft State"] for row in rows) == ["follower", "follower", "leader"]
    assert {row["Membership"] for row in rows} == {"voter"}
    assert len({row["Term"] for row in rows}) == 1
    pretty = ok(cluster, "warren-c", QUEUES, "quorum_status", name).splitlines()
    assert pretty[0] == f"Status of quorum queue {name} on node warren-c ..."
    assert pretty[1].startswith("┌") and pretty[-1].startswith("└")
    header = [cell.strip() for cell in pretty[2].strip("│").split("│")]
    assert header == [
        "Node Name",
        "Raft State",
        "Membership",
        "Last Log Index",
        "Last Applied",
        "Commit Index",
        "Snapshot Index",
        "Term",
    ]
    silent = ok(cluster, "warren-c", QUEUES, "quorum_status", name, "--formatter", "table", "-s")
    assert [line.split("\t")[0] for line in silent.splitlines()] == NAMES
    missing = run(cluster, "warren-a", QUEUES, "quorum_status", f"{name}-nope")
    assert (missing.returncode, missing.stderr) == (
        69,
        f"Error:\nquorum queue '{name}-nope' in vhost '/' not found\n",
    )


def test_delete_then_add_member_keeps_the_messages(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)
    bodies = [b"m%d" % i for i in range(100)]
    publish(cluster, "warren-a", name, bodies)
    follower = next(node for node in NAMES if node != cluster.leader_of(name))
    assert ok(cluster, "warren-a", QUEUES, "delete_member", name, follower) == (
        f"Removing a replica of queue {name} on node {follower}...\n"
    )
    assert [row["Node Name"] for row in members(cluster, "warren-a", name)] == [
        node for node in NAMES if node != follower
    ]
    again = run(cluster, "warren-a", QUEUES, "delete_member", name, follower)
    assert (again.returncode, again.stderr) == (
        69,
        f"Error:\n{follower} is not a member of '{name}'\n",
    )
    assert ok(cluster, "warren-b", QUEUES, "add_member", name, follower, "-q") == ""
    rows = until(
        lambda: members(cluster, "warren-a", name),
        lambda rows: (
            len(rows) == 3 and all(row["Last Applied"] == rows[0]["Last Applied"] for row in rows)
        ),
    )
    assert [row["Node Name"] for row in rows] == NAMES
    assert {row["Membership"] for row in rows} == {"voter"}
    assert until(lambda: cluster.queue(follower, name)["messages"], lambda n: n == 100) == 100
    assert drain(cluster, follower, name, len(bodies)) == bodies


def test_a_consumer_on_a_member_moved_away_and_back_gets_nothing_twice(
    cluster: LocalCluster, name: str
) -> None:
    # The replica added again replays the queue's log from the start; the deliveries its
    # consumers had the first time are not made again.
    declare(cluster, "warren-a", name)
    follower = next(node for node in NAMES if node != cluster.leader_of(name))
    connection = connect(cluster, follower)
    received: list[bytes] = []
    channel = connection.channel()
    channel.basic_consume(name, lambda *delivery: received.append(delivery[3]), auto_ack=True)

    def receive(count: int) -> None:
        deadline = time.monotonic() + AVAILABLE_WITHIN_S
        while len(received) < count and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.1)
        connection.process_data_events(time_limit=0.5)  # and anything more that would come

    before, after = [b"before%d" % i for i in range(10)], [b"after%d" % i for i in range(10)]
    publish(cluster, "warren-a", name, before)
    receive(10)
    ok(cluster, "warren-a", QUEUES, "delete_member", name, follower)
    ok(cluster, "warren-a", QUEUES, "add_member", name, follower)
    until(
        lambda: members(cluster, "warren-a", name),
        lambda rows: (
            len(rows) == 3 and all(row["Last Applied"] == rows[0]["Last Applied"] for row in rows)
        ),
    )
    publish(cluster, "warren-a", name, after)
    receive(20)
    connection.close()
    assert received == before + after


def test_shrink_and_grow_a_node(cluster: LocalCluster, name: str) -> None:
    queues = [f"{name}.{i}" for i in range(3)]
    for queue in queues:
        declare(cluster, "warren-a", queue)
    publish(cluster, "warren-a", queues[0], [b"kept"])
    shrunk = ok(cluster, "warren-a", QUEUES, "shrink", "warren-c")
    lines = shrunk.splitlines()
    assert lines[:2] == ["Shrinking quorum queues on warren-c...", "vhost\tname\tsize\tresult"]
    assert {f"/\t{queue}\t2\tok" for queue in queues} <= set(lines[2:])
    for queue in queues:
        assert [row["Node Name"] for row in members(cluster, "warren-b", queue)] == NAMES[:2]
    assert ok(cluster, "warren-a", QUEUES, "shrink", "warren-c", "--errors-only", "-s") == "\n"
    grown = ok(
        cluster, "warren-b", QUEUES, "grow", "warren-c", "even", "--queue-pattern", f"^{name}"
    )
    assert grown.splitlines() == [
        "Growing even quorum queues on warren-c...",
        "vhost\tname\tsize\tresult",
        *(f"/\t{queue}\t3\tok" for queue in queues),
    ]
    # every queue the shrink touched gets its replica back (the ones already grown are skipped)
    restored = json.loads(
        ok(cluster, "warren-a", QUEUES, "grow", "warren-c", "all", "--formatter", "json")
    )
    assert all(row["result"] == "ok" for row in restored)
    assert not {row["name"] for row in restored} & set(queues)
    assert [row["Node Name"] for row in members(cluster, "warren-c", queues[0])] == NAMES
    assert drain(cluster, "warren-c", queues[0], 1) == [b"kept"]


def test_rebalance_spreads_the_leaders(cluster: LocalCluster, name: str) -> None:
    queues = [f"{name}.{i}" for i in range(6)]
    for queue in queues:
        declare(cluster, "warren-a", queue)  # client-local: warren-a leads them all
    bound = math.ceil(len(queues) / len(NAMES)) + 1
    output = ok(cluster, "warren-b", QUEUES, "rebalance", "quorum", "--queue-pattern", f"^{name}")
    lines = output.splitlines()
    assert lines[0] == "Re-balancing leaders of quorum queues..."
    assert lines[1].startswith("┌")
    summary = {
        cells[0]: int(cells[1])
        for cells in ([cell.strip() for cell in line.strip("│").split("│")] for line in lines[4:])
        if len(cells) == 2
    }
    assert sorted(summary) == NAMES and sum(summary.values()) == len(queues)
    assert max(summary.values()) <= bound

    def leaders() -> Counter[str]:
        return Counter(cluster.queue("warren-a", queue)["leader"] for queue in queues)

    settled = until(leaders, lambda counts: max(counts.values()) <= bound)
    assert max(settled.values()) <= bound, settled


def test_forget_cluster_node_refuses_a_running_or_unknown_node(cluster: LocalCluster) -> None:
    running = run(cluster, "warren-a", CTL, "forget_cluster_node", "warren-b")
    assert (running.returncode, running.stdout, running.stderr) == (
        69,
        "Removing node warren-b from the cluster\n",
        "Error:\nwarren-b is running: stop it first\n",
    )
    unknown = run(cluster, "warren-a", CTL, "forget_cluster_node", "warren-x")
    assert (unknown.returncode, unknown.stderr) == (
        69,
        "Error:\nnode warren-x is not in the cluster\n",
    )
    status = json.loads(ok(cluster, "warren-a", CTL, "cluster_status", "--formatter", "json"))
    assert status["disk_nodes"] == NAMES


def test_join_cluster_of_a_member_and_of_itself(cluster: LocalCluster) -> None:
    assert ok(cluster, "warren-c", CTL, "join_cluster", "warren-a") == (
        "Clustering node warren-c with warren-a\n"
    )
    itself = run(cluster, "warren-c", CTL, "join_cluster", "warren-c")
    assert (itself.returncode, itself.stderr) == (
        70,
        "Error: cannot cluster node with itself: warren-c\n",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["grow", "warren-c", "some"], "strategy 'some' is not recognised."),
        (["rebalance", "classic"], "type classic is not supported. Try quorum."),
    ],
)
def test_queues_usage_errors(args: list[str], message: str) -> None:
    done = run(None, "", QUEUES, *args)
    assert done.returncode == 64
    assert done.stderr.startswith(f"Error (argument validation): {message}\n")
    assert f"usage: warren-queues {args[0]}" in done.stderr
