"""HTTP resources for the cluster: what ``rabbitmqctl`` and ``rabbitmq-queues`` do over
Erlang distribution, Warren does over its management API (administrators only).

Resources (Warren's own; RabbitMQ's HTTP API has no equivalent):
- ``GET /api/warren/cluster``: `ClusterNode.status` (``warrenctl cluster_status``);
- ``POST /api/warren/cluster/join`` ``{"node": seed}`` (``join_cluster``);
- ``DELETE /api/warren/cluster/nodes/{node}`` (``forget_cluster_node``);
- ``GET /api/warren/quorum/{vhost}/{queue}`` (``quorum_status``);
- ``POST .../{vhost}/{queue}/members`` ``{"node"}`` and ``DELETE .../members/{node}``
  (``add_member``, ``delete_member``);
- ``POST /api/warren/quorum-grow`` ``{"node", "strategy", "vhost_pattern",
  "queue_pattern"}``, ``POST /api/warren/quorum-shrink`` ``{"node", "errors_only"}``,
  ``POST /api/warren/quorum-rebalance`` ``{"vhost_pattern", "queue_pattern"}``.
A node that is not in a cluster answers 400 ``not_clustered``; an operation that fails
answers 400 with the reason.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from aiohttp import web

from warren.mgmt import replies
from warren.mgmt.authz import Level
from warren.mgmt.resources import read_body
from warren.mgmt.workers import on_its_own
from warren.runtime.broker import Broker
from warren.runtime.cluster import operations
from warren.runtime.cluster.node import ClusterNode
from warren.runtime.cluster.operations import MembershipError
from warren.runtime.cluster.peers import PeerUnavailable

ADMINISTRATOR = Level.ADMINISTRATOR


def _cluster(broker: Broker) -> ClusterNode | web.Response:
    """The node's cluster side, whose operators' verbs these are (the broker knows it as a
    `Cluster`, a protocol, so that it imports no cluster module). The workers of a node of
    several are no cluster to the outside: such a node is on its own."""
    if not isinstance(broker.cluster, ClusterNode) or on_its_own(broker):
        return replies.bad_request("not_clustered")
    return broker.cluster


async def _cluster_and_body(
    request: web.Request, broker: Broker, required: tuple[str, ...]
) -> tuple[ClusterNode, dict[str, Any]] | web.Response:
    cluster = _cluster(broker)
    if isinstance(cluster, web.Response):
        return cluster
    body = await read_body(request, required)
    if isinstance(body, web.Response):
        return body
    return cluster, body


async def _run(outcome: Awaitable[Any]) -> web.Response:
    try:
        result = await outcome
    except (MembershipError, PeerUnavailable) as error:
        return replies.bad_request(str(error))
    return replies.ok(result if result is not None else {})


async def cluster_status(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    cluster = _cluster(broker)
    if isinstance(cluster, web.Response):
        return cluster
    return replies.ok(_as_nodes(cluster, cluster.status()))


def _as_nodes(cluster: ClusterNode, status: dict[str, Any]) -> dict[str, Any]:
    """The status with the workers of a node of several named as their node, once
    (`warren.runtime.cluster.node`, module doc 6); unchanged on a node of one process."""
    name = cluster.node_of
    metadata = dict(status["metadata"])
    if metadata.get("leader") is not None:
        metadata["leader"] = name(metadata["leader"])
    for key in ("members", "voters", "learners"):
        if key in metadata:
            metadata[key] = list(dict.fromkeys(name(member) for member in metadata[key]))
    if "learners" in metadata:  # a node whose worker 0 votes is a voter (its others learn)
        voters = set(metadata.get("voters", []))
        metadata["learners"] = [node for node in metadata["learners"] if node not in voters]
    return {
        **status,
        "node": name(status["node"]),
        "nodes": sorted({name(node) for node in status["nodes"]}),
        "running": sorted({name(node) for node in status["running"]}),
        "metadata": metadata,
    }


async def join_cluster(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    given = await _cluster_and_body(request, broker, ("node",))
    if isinstance(given, web.Response):
        return given
    cluster, body = given
    return await _run(operations.join(cluster, str(body["node"])))


async def forget_node(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    cluster = _cluster(broker)
    if isinstance(cluster, web.Response):
        return cluster
    return await _run(operations.forget(cluster, params[0]))


async def quorum_status(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    cluster = _cluster(broker)
    if isinstance(cluster, web.Response):
        return cluster
    return await _run(operations.quorum_status(cluster, params[0], params[1]))


async def add_member(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    given = await _cluster_and_body(request, broker, ("node",))
    if isinstance(given, web.Response):
        return given
    cluster, body = given
    return await _run(operations.add_member(cluster, params[0], params[1], str(body["node"])))


async def delete_member(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    cluster = _cluster(broker)
    if isinstance(cluster, web.Response):
        return cluster
    return await _run(operations.delete_member(cluster, params[0], params[1], params[2]))


async def grow(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    given = await _cluster_and_body(request, broker, ("node", "strategy"))
    if isinstance(given, web.Response):
        return given
    cluster, body = given
    return await _run(
        operations.grow(
            cluster,
            str(body["node"]),
            str(body["strategy"]),
            str(body.get("vhost_pattern", ".*")),
            str(body.get("queue_pattern", ".*")),
        )
    )


async def shrink(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    given = await _cluster_and_body(request, broker, ("node",))
    if isinstance(given, web.Response):
        return given
    cluster, body = given
    errors_only = bool(body.get("errors_only", False))
    return await _run(operations.shrink(cluster, str(body["node"]), errors_only))


async def rebalance(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    given = await _cluster_and_body(request, broker, ())
    if isinstance(given, web.Response):
        return given
    cluster, body = given
    vhost_pattern = str(body.get("vhost_pattern", ".*"))
    queue_pattern = str(body.get("queue_pattern", ".*"))
    return await _run(operations.rebalance(cluster, vhost_pattern, queue_pattern))


def routes() -> dict[str, dict[str, tuple[Any, Level, int | None]]]:
    quorum = "warren/quorum/{}/{}"
    return {
        "warren/cluster": {"GET": (cluster_status, ADMINISTRATOR, None)},
        "warren/cluster/join": {"POST": (join_cluster, ADMINISTRATOR, None)},
        "warren/cluster/nodes/{}": {"DELETE": (forget_node, ADMINISTRATOR, None)},
        quorum: {"GET": (quorum_status, ADMINISTRATOR, None)},
        quorum + "/members": {"POST": (add_member, ADMINISTRATOR, None)},
        quorum + "/members/{}": {"DELETE": (delete_member, ADMINISTRATOR, None)},
        "warren/quorum-grow": {"POST": (grow, ADMINISTRATOR, None)},
        "warren/quorum-shrink": {"POST": (shrink, ADMINISTRATOR, None)},
        "warren/quorum-rebalance": {"POST": (rebalance, ADMINISTRATOR, None)},
    }
