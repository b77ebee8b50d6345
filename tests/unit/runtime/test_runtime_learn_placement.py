"""`ClusterNode.learn_placement`: a node that recovered a quorum queue without a replica
asks a node hosting the group for its id and members. The metadata log may name them
while the question is on its way (`members_changed`, applied as the node catches up);
an answer that comes after must not overwrite what the log said with the answering
node's Raft configuration, which lags the log while a member is being added. The member
list is what the node's metadata snapshots record (`placements`) and what tells it, after
a restart, to start its replica."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.unit.runtime.cluster_fixtures import QuietLinks, cluster_node
from warren.amqp.table import Typed
from warren.model import QueueRecord
from warren.runtime.cluster.calls import GroupStatus, Request
from warren.runtime.cluster.node import ClusterNode, group_prefix
from warren.runtime.cluster.quorum import QuorumHost

NODES = ["n1", "n2", "n3", "n4"]
VHOST = "/"
QUEUE = "q"
GROUP = group_prefix(VHOST, QUEUE) + "0000beef"


class _Links(QuietLinks):
    """A `GroupStatus` is answered by `answer`, after `meanwhile` ran (what this node
    applies while the question is on its way)."""

    def __init__(self, answer: list[str]) -> None:
        super().__init__(NODES[:-1])  # n4's peers
        self.answer = answer
        self.meanwhile = lambda: None

    async def call(self, node: str, request: Request, timeout: float = 5.0) -> object:
        assert isinstance(request, GroupStatus)
        self.meanwhile()
        await asyncio.sleep(0)
        return {"group": GROUP, "members": self.answer}


async def _node(tmp_path: Path, links: _Links) -> tuple[ClusterNode, QuorumHost]:
    """n4 with `q` recovered without a replica: only the name's prefix known."""
    cluster = cluster_node(tmp_path, "n4", NODES, links)
    await cluster.open()
    record = QueueRecord(QUEUE, VHOST, True, None, False, {"x-queue-type": Typed("S", "quorum")})
    host = QuorumHost(cluster, record, group_prefix(VHOST, QUEUE), [])
    cluster.broker.queues[VHOST, QUEUE] = host
    cluster.queues[host.group_id] = host
    return cluster, host


def test_an_answer_does_not_overwrite_what_the_metadata_log_said_meanwhile(
    tmp_path: Path,
) -> None:
    asyncio.run(_overwrite(tmp_path))


async def _overwrite(tmp_path: Path) -> None:
    links = _Links(answer=["n1", "n2", "n3"])  # a follower that has not added n4 yet
    cluster, host = await _node(tmp_path, links)
    try:
        # the metadata log made n4 a member while the question was on its way
        links.meanwhile = lambda: cluster.members_changed(VHOST, QUEUE, GROUP, NODES)
        await cluster.learn_placement(host)
        assert host.group_id == GROUP
        assert sorted(host.members) == NODES
        assert host.group is not None  # its replica runs
        assert cluster.placements()[VHOST, QUEUE] == (GROUP, NODES)  # what snapshots keep
    finally:
        await cluster.close()


def test_an_answer_teaches_a_node_the_log_told_nothing_yet(tmp_path: Path) -> None:
    asyncio.run(_taught(tmp_path))


async def _taught(tmp_path: Path) -> None:
    cluster, host = await _node(tmp_path, _Links(answer=["n1", "n2", "n3"]))
    try:
        await cluster.learn_placement(host)
        assert (host.group_id, sorted(host.members)) == (GROUP, ["n1", "n2", "n3"])
        assert host.group is None
    finally:
        await cluster.close()
