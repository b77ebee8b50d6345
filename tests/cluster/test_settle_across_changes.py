"""Acknowledgements made after the queue's group changed under the consumer still settle.

A channel ignores settlements for a queue host that no longer serves the queue
(`Channel._is_live`, by identity). These pin that a quorum queue's host stays the same
object on the consumer's node across what the cluster soak does to it (a leader change,
the consumer's node removed from the members and added again), so that acks made after
it are not dropped: the queue ends empty and nothing comes again.
"""

from __future__ import annotations

import time

import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.cluster.conftest import (
    AVAILABLE_WITHIN_S,
    NAMES,
    connect,
    declare,
    publish,
    revived,
    until,
)
from warren.testing.cluster import LocalCluster

COUNT = 20


def held_unacked(cluster: LocalCluster, node: str, queue: str) -> tuple[BlockingChannel, list[int]]:
    """A manual-ack consumer on `node` holding all COUNT messages, unacknowledged."""
    connection = connect(cluster, node)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=COUNT)
    tags: list[int] = []
    channel.basic_consume(queue, lambda _ch, method, _p, _b: tags.append(method.delivery_tag))
    deadline = time.monotonic() + AVAILABLE_WITHIN_S
    while len(tags) < COUNT and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    assert len(tags) == COUNT
    return channel, tags


def assert_acks_settle(
    cluster: LocalCluster, channel: BlockingChannel, tags: list[int], queue: str
) -> None:
    """The consumer acks everything it holds, then leaves: nothing may come back."""
    for tag in tags:
        channel.basic_ack(tag)
    channel.connection.process_data_events(time_limit=1.0)
    channel.connection.close()
    counts = until(
        lambda: {node: cluster.queue(node, queue)["messages"] for node in NAMES},
        lambda counts: set(counts.values()) == {0},
    )
    assert set(counts.values()) == {0}, counts


@pytest.mark.warren_only
def test_acks_after_the_consumers_member_was_removed_and_added_again(
    cluster: LocalCluster, name: str
) -> None:
    declare(cluster, "warren-a", name)
    publish(cluster, "warren-a", name, [b"m%d" % i for i in range(COUNT)])
    leader = cluster.leader_of(name)
    follower = next(node for node in NAMES if node != leader)
    channel, tags = held_unacked(cluster, follower, name)
    members = f"/api/warren/quorum/%2F/{name}/members"
    cluster.api(leader, f"{members}/{follower}", "DELETE", timeout_s=30)
    cluster.api(leader, members, "POST", {"node": follower}, timeout_s=30)
    back = until(
        lambda: cluster.queue(leader, name).get("members", []),
        lambda now: sorted(now) == NAMES,
    )
    assert sorted(back) == NAMES
    assert_acks_settle(cluster, channel, tags, name)


@pytest.mark.warren_only
def test_acks_after_a_leader_change(cluster: LocalCluster, name: str) -> None:
    declare(cluster, "warren-a", name)
    publish(cluster, "warren-a", name, [b"m%d" % i for i in range(COUNT)])
    leader = cluster.leader_of(name)
    follower = next(node for node in NAMES if node != leader)
    channel, tags = held_unacked(cluster, follower, name)
    with revived(cluster):
        cluster.kill(leader)
        until(lambda: cluster.leader_of(name), lambda now: now != leader)
        cluster.start(leader)
        assert_acks_settle(cluster, channel, tags, name)
