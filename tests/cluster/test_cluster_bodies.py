"""Quorum queue bodies on disk, on a cluster of its own: the test kills every node, and
the queues of other tests would be re-elected meanwhile."""

from __future__ import annotations

import contextlib
import time

from tests.cluster.conftest import (
    AVAILABLE_WITHIN_S,
    NAMES,
    declare,
    drain,
    publish,
    revived,
)
from warren.testing.cluster import LocalCluster


def test_bodies_come_back_from_disk_on_a_follower_that_missed_them_and_after_sigkill(
    cluster: LocalCluster, name: str
) -> None:
    """Logs are compacted every 64 entries, so the bodies are read back from each node's
    WAL; the follower that was down gets them with the leader's snapshot."""
    declare(cluster, "warren-a", name)
    leader = cluster.leader_of(name)
    follower = next(node for node in NAMES if node != leader)
    bodies = [b"%d-" % i + bytes(range(100)) for i in range(300)]
    with revived(cluster):
        cluster.kill(follower)
        publish(cluster, leader, name, bodies[:200])
        cluster.start(follower)
        deadline = time.monotonic() + AVAILABLE_WITHIN_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if cluster.queue(follower, name)["messages"] == 200:
                    break
            time.sleep(0.1)
        publish(cluster, follower, name, bodies[200:])
        for node in NAMES:
            cluster.kill(node)
        for node in NAMES:
            cluster.launch(node)
        for node in NAMES:
            cluster.wait_listening(node)
    assert drain(cluster, follower, name, len(bodies)) == bodies
