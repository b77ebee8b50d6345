"""What operators do to a cluster: join and forget nodes, move quorum queue replicas.

Theory of operation:
1. These are RabbitMQ's ``rabbitmqctl join_cluster / forget_cluster_node`` and
   ``rabbitmq-queues add_member / delete_member / grow / shrink / rebalance /
   quorum_status``; the management API calls them, `warrenctl` and `warren-queues` call
   the API.
2. A replica is added in two steps: the metadata group first records the new member list
   (so the node starts the queue's group, empty, waiting to hear from a leader), then the
   queue's leader adds it as a learner, sends it the log or a snapshot, and promotes it
   once it has caught up. Removal goes the other way round: the leader removes it, then
   the member list is recorded and the node drops its replica. Each change is one Raft
   membership change, committed by a majority, so none loses committed data. What is
   recorded after the change is the group's configuration as the leader answers it, not
   the list read before: a change that ran meanwhile (another node added or removed) is
   kept, where the list read before would drop a replica the group counts on. Each
   recording carries the configuration's index, and the metadata group skips one older
   than the list it has (two changes' recordings may commit in either order:
   `warren.cluster.metadata`, point 6); add_member's first one, which starts the new
   replica, carries the index of the configuration it grows.
3. Failures are `MembershipError` with a message for the operator.
4. The verbs act on an `OperatedNode`, what they need of the node's cluster side
   (`warren.runtime.cluster.node.ClusterNode`, which joins a cluster through `join`).
5. Operators name nodes. In a cluster of nodes of several workers a replica is a worker
   of its node (`warren.runtime.cluster.node`, module doc 6): a verb finds a queue's
   member on a node with `member_on`, places a new one with `replica_member`, and
   answers with node names (`node_of`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from warren.cluster.metadata import NodeForgotten, Operation
from warren.cluster.nodes import METADATA_GROUP
from warren.runtime.cluster.calls import (
    AddMember,
    Configuration,
    Forward,
    GroupStatus,
    LeaderRequest,
    NodeRequest,
    RemoveMember,
    Transfer,
)
from warren.runtime.cluster.peers import PeerUnavailable, RemoteError
from warren.runtime.cluster.quorum import QuorumHost

if TYPE_CHECKING:
    from warren.runtime.broker import Broker
    from warren.runtime.cluster.peers import PeerLinks

R = TypeVar("R")


class OperatedNode(Protocol):
    """What operators' verbs need of the node's cluster side."""

    @property
    def name(self) -> str: ...

    @property
    def nodes(self) -> Mapping[str, tuple[str, int]]: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def peers(self) -> PeerLinks: ...

    @property
    def queues(self) -> Mapping[str, QuorumHost]:
        """This node's quorum queue hosts by Raft group id."""

    def node_of(self, member: str) -> str:
        """The node a member is a worker of (itself on a node of one process)."""

    def node_names(self) -> list[str]:
        """The cluster's nodes, each once however many workers it runs."""

    def member_on(self, members: list[str], node: str) -> str | None:
        """The member of `members` that is a worker of `node`."""

    def replica_member(self, node: str) -> str:
        """The worker of `node` a new replica goes to."""

    async def ask(self, node: str, request: NodeRequest[R], timeout: float) -> R: ...

    async def leader_call(self, request: LeaderRequest[R]) -> R: ...

    async def set_members(self, host: QuorumHost, configuration: Configuration) -> None:
        """Record a queue's member list in the metadata group, tagged with its
        configuration's index; back once applied here."""

    async def current_members(self, host: QuorumHost) -> Configuration:
        """A queue's members as its leader's Raft configuration has them."""

    def replicate(self, operation: Operation) -> asyncio.Future[object]: ...


class MembershipError(Exception):
    pass


def _quorum_host(cluster: OperatedNode, vhost: str, queue: str) -> QuorumHost:
    host = cluster.broker.queues.get((vhost, queue))
    if not isinstance(host, QuorumHost):
        raise MembershipError(f"quorum queue '{queue}' in vhost '{vhost}' not found")
    return host


def _known(cluster: OperatedNode, node: str) -> None:
    if node not in cluster.node_names():
        raise MembershipError(f"node {node} is not in the cluster")


def _as_nodes(cluster: OperatedNode, members: list[str]) -> list[str]:
    return sorted(cluster.node_of(member) for member in members)


async def add_member(cluster: OperatedNode, vhost: str, queue: str, node: str) -> list[str]:
    _known(cluster, node)
    host = _quorum_host(cluster, vhost, queue)
    current = await cluster.current_members(host)
    if cluster.member_on(current.members, node) is not None:
        raise MembershipError(f"{node} is already a member of '{queue}'")
    member = cluster.replica_member(node)
    # the list the node starts its replica by, tagged as the configuration it grows
    grown = Configuration(sorted({*current.members, member}), current.index)
    await cluster.set_members(host, grown)
    changed = await cluster.leader_call(AddMember(host.group_id, member))
    await cluster.set_members(host, changed)
    return _as_nodes(cluster, changed.members)


async def delete_member(cluster: OperatedNode, vhost: str, queue: str, node: str) -> list[str]:
    host = _quorum_host(cluster, vhost, queue)
    current = await cluster.current_members(host)
    member = cluster.member_on(current.members, node)
    if member is None:
        raise MembershipError(f"{node} is not a member of '{queue}'")
    if len(current.members) == 1:
        raise MembershipError(f"'{queue}' has no other member: delete the queue instead")
    changed = await cluster.leader_call(RemoveMember(host.group_id, member))
    await cluster.set_members(host, changed)
    return _as_nodes(cluster, changed.members)


def _matching(cluster: OperatedNode, vhost_pattern: str, queue_pattern: str) -> list[QuorumHost]:
    vhosts, queues = re.compile(vhost_pattern), re.compile(queue_pattern)
    return sorted(
        (
            host
            for host in cluster.queues.values()
            if vhosts.search(host.record.vhost) and queues.search(host.record.name)
        ),
        key=lambda host: (host.record.vhost, host.record.name),
    )


async def grow(
    cluster: OperatedNode, node: str, strategy: str, vhost_pattern: str, queue_pattern: str
) -> list[dict[str, Any]]:
    """Add `node` to every matching queue (``all``) or to those with an even number of
    members (``even``), as ``rabbitmq-queues grow`` does."""
    if strategy not in ("all", "even"):
        raise MembershipError("strategy must be all or even")
    _known(cluster, node)
    results = []
    for host in _matching(cluster, vhost_pattern, queue_pattern):
        if cluster.member_on(host.members, node) is not None or (
            strategy == "even" and len(host.members) % 2
        ):
            continue
        results.append(await _attempt(add_member, cluster, host, node))
    return results


async def shrink(cluster: OperatedNode, node: str, errors_only: bool) -> list[dict[str, Any]]:
    """Remove `node` from every queue it is a member of (not from a queue's last member)."""
    results = []
    for host in _matching(cluster, "", ""):
        if cluster.member_on(host.members, node) is not None and len(host.members) > 1:
            result = await _attempt(delete_member, cluster, host, node)
            if not errors_only or result["result"] != "ok":
                results.append(result)
    return results


async def _attempt(
    action: Any, cluster: OperatedNode, host: QuorumHost, node: str
) -> dict[str, Any]:
    record = host.record
    try:
        members = await action(cluster, record.vhost, record.name, node)
    except (MembershipError, PeerUnavailable) as error:
        return {"vhost": record.vhost, "name": record.name, "result": f"error: {error}"}
    return {"vhost": record.vhost, "name": record.name, "size": len(members), "result": "ok"}


async def rebalance(
    cluster: OperatedNode, vhost_pattern: str, queue_pattern: str
) -> list[dict[str, Any]]:
    """Move leaders so that every node leads about as many queues (leadership transfers),
    counted by node whichever of its workers leads."""
    hosts = _matching(cluster, vhost_pattern, queue_pattern)
    counts = dict.fromkeys(cluster.node_names(), 0)
    leaders: dict[str, str] = {}
    for host in hosts:
        leader = await _leader(cluster, host)
        if leader is not None:
            leaders[host.group_id] = node = cluster.node_of(leader)
            counts[node] = counts.get(node, 0) + 1
    moves = []
    for host in hosts:
        leader = leaders.get(host.group_id)
        if leader is None:
            continue
        target = min(host.members, key=lambda m: (counts.get(cluster.node_of(m), 0), m))
        node = cluster.node_of(target)
        if counts.get(node, 0) + 1 < counts[leader]:
            try:
                await cluster.leader_call(Transfer(host.group_id, target))
            except PeerUnavailable:
                continue
            counts[leader] -= 1
            counts[node] = counts.get(node, 0) + 1
            moves.append({"vhost": host.record.vhost, "name": host.record.name, "to": node})
    return moves


async def _leader(cluster: OperatedNode, host: QuorumHost) -> str | None:
    """The queue's leader as this node's replica knows it, else as a member says (this
    worker may hold no replica of it); None if none answers."""
    if host.group is not None:
        return host.group.leader
    for member in sorted(host.members):
        if cluster.peers.connected(member):
            try:
                status = await cluster.ask(member, GroupStatus(host.group_id), 2.0)
            except (PeerUnavailable, RemoteError):
                continue
            if status is not None and status["leader"] is not None:
                return str(status["leader"])
    return None


async def quorum_status(cluster: OperatedNode, vhost: str, queue: str) -> list[dict[str, Any]]:
    """Each member's view of the queue's Raft group (``rabbitmq-queues quorum_status``), by
    node, with the member that holds it (``member``: a worker of the node)."""
    host = _quorum_host(cluster, vhost, queue)
    rows = []
    for member in sorted(host.members):
        status: dict[str, object] | None
        if member == cluster.name:
            status = host.group.status() if host.group is not None else None
        else:
            try:
                status = await cluster.ask(member, GroupStatus(host.group_id), 2.0)
            except PeerUnavailable:
                status = None
        row = _status_as_nodes(cluster, status or {"role": "unreachable"})
        rows.append({**row, "node": cluster.node_of(member), "member": member})
    return rows


def _status_as_nodes(cluster: OperatedNode, status: dict[str, Any]) -> dict[str, Any]:
    """A member's `GroupStatus` with its members named as their nodes (module doc, 5)."""
    name = cluster.node_of
    named = dict(status)
    if named.get("leader") is not None:
        named["leader"] = name(str(named["leader"]))
    for key in ("members", "voters", "learners"):
        if key in named:
            named[key] = [name(str(member)) for member in named[key]]
    if "match_index" in named:
        named["match_index"] = {name(m): index for m, index in named["match_index"].items()}
    return named


async def join(cluster: OperatedNode, seed: str) -> list[str]:
    """This node joins `seed`'s cluster: the metadata group's leader adds it as a member."""
    host, port = cluster.peers.listen_address
    request = AddMember(METADATA_GROUP, cluster.name, host, port)
    try:
        configuration = await cluster.ask(seed, Forward[Configuration](request), 30.0)
    except PeerUnavailable as error:
        raise MembershipError(f"{seed} is not reachable: {error}") from error
    return configuration.members


async def forget(cluster: OperatedNode, node: str) -> None:
    """Remove a node that is gone for good from every group (RabbitMQ needs it stopped)."""
    if node == cluster.name:
        raise MembershipError("a node cannot forget itself")
    _known(cluster, node)
    # a node of several workers is all of them (warren.runtime.cluster.node, module doc 6)
    workers = sorted(member for member in cluster.nodes if cluster.node_of(member) == node)
    if any(cluster.peers.connected(worker) for worker in workers):
        raise MembershipError(f"{node} is running: stop it first")
    for host in list(cluster.queues.values()):
        if cluster.member_on(host.members, node) is not None and len(host.members) > 1:
            await delete_member(cluster, host.record.vhost, host.record.name, node)
    for worker in workers:
        await cluster.leader_call(RemoveMember(METADATA_GROUP, worker))
        await cluster.replicate(NodeForgotten(worker))
