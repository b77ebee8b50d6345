"""Upgrade check: a 3-node cluster whose data one source tree of Warren wrote, restarted on
another, loses nothing.

    python -m bench.upgrade_cluster OLD_TREE NEW_TREE

OLD_TREE and NEW_TREE are source trees (for example `git worktree add /tmp/old v0.1.0`, and
this checkout). The cluster starts on OLD_TREE, takes 200 persistent messages into a quorum
queue with confirms, acknowledges the first 50, stops, starts again on the same data
directories on NEW_TREE, and must hand out the other 150 in order. A data directory of the
previous release checked in as a fixture would make this a test of the suite (issue #20);
until then it is run by hand before a change of what the Raft log stores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pika
from pika.adapters.blocking_connection import BlockingChannel

from warren.testing.cluster import FaultProxy, LocalCluster

QUEUE = "upgrade.qq"
PUBLISHED = 200
ACKED_BEFORE = 50
WAIT_S = 30.0


def channel(cluster: LocalCluster, name: str) -> BlockingChannel:
    """A channel to `name`, once its node and the queue's group answer (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(cluster.nodes[name].url))
            opened = connection.channel()
            opened.queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
            return opened
        except pika.exceptions.AMQPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def on_tree(cluster: LocalCluster, tree: str) -> None:
    """Start every node with `tree` first on its Python path (new proxies each time)."""
    os.environ["PYTHONPATH"] = tree
    cluster.proxies = {  # on the ports of the last ones, which stop_all closed
        key: FaultProxy(cluster.nodes[key[1]].cluster_port + key[2], proxy.port)
        for key, proxy in cluster.proxies.items()
    }
    cluster.start_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_tree")
    parser.add_argument("new_tree")
    arguments = parser.parse_args()
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="warren-upgrade-")), ["a", "b", "c"])
    try:
        on_tree(cluster, arguments.old_tree)
        before = channel(cluster, "a")
        before.confirm_delivery()
        for number in range(PUBLISHED):
            properties = pika.BasicProperties(delivery_mode=2)
            before.basic_publish("", QUEUE, f"m-{number}".encode(), properties)
        for _ in range(ACKED_BEFORE):
            method, _properties, _body = before.basic_get(QUEUE)
            before.basic_ack(method.delivery_tag)
        before.connection.close()
        cluster.stop_all()

        on_tree(cluster, arguments.new_tree)
        after = channel(cluster, "b")
        bodies: list[str] = []
        deadline = time.monotonic() + WAIT_S
        while len(bodies) < PUBLISHED - ACKED_BEFORE and time.monotonic() < deadline:
            method, _properties, body = after.basic_get(QUEUE)
            if method is None:
                time.sleep(0.2)
                continue
            bodies.append(body.decode())
            after.basic_ack(method.delivery_tag)
        expected = [f"m-{number}" for number in range(ACKED_BEFORE, PUBLISHED)]
        print(
            f"after the upgrade: {len(bodies)} of {len(expected)}, in order: {bodies == expected}"
        )
        if bodies != expected:
            raise SystemExit(1)
    finally:
        cluster.stop_all()


if __name__ == "__main__":
    main()
