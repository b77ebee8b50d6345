"""Cluster metadata: definitions replicated through one Raft group that every node is in.

Theory of operation:
1. Every durable definition change on a node goes through its `DefinitionsStore` (that is
   how it survives a restart). In a cluster the store is wrapped by `ReplicatedDefinitions`:
   each ``put_*``/``delete_*`` is written locally as before and also proposed to the
   metadata group as an operation ``(origin node, method name, arguments)``.
2. `MetadataMachine.apply` runs on every node in log order. The node that made the change
   already applied it (a client's declare answers at once), so it skips its own
   operations; every other node applies them to its live model *and* its store, with
   replication switched off while it does (`applying`), so nothing echoes back. The
   last index applied is kept in the store, so a restart does not apply anything twice.
3. Quorum queues are different: their declare and delete go to the log first and take
   effect on every node, the declaring one included, when committed (origin ``""``), so
   that two nodes declaring one name at once end with one queue (the first in the log)
   everywhere; the same holds for a queue's member list and for the address of a node
   that joins (kept in the store, so every node can reach it after a restart).
4. What is replicated: vhosts, users, permissions, policies and operator policies, durable
   exchanges, quorum queues and the bindings between them. Classic queues stay on the node
   that declared them (with their bindings), as a RabbitMQ classic queue lives on one
   node; unlike RabbitMQ, other nodes do not see them.
5. Conflicts (other definitions): two nodes changing the same definition at the same
   moment each apply their own change first; every node then applies the other's in log
   order, so the two nodes may end with different versions of that one definition until
   it is changed again.
6. Snapshots: the machine's snapshot is the node's store contents (`Definitions`); a node
   that restores one puts every definition it holds.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warren.amqp.table import decode_table
from warren.model import DestinationKind, QueueType
from warren.runtime import recovery
from warren.runtime.access import Permission, User, VHostInfo
from warren.runtime.admin import apply_policies
from warren.runtime.admin_access import delete_vhost
from warren.runtime.cluster.quorum import QuorumHost
from warren.storage.definitions import (
    BindingDefinition,
    Definitions,
    DefinitionsStore,
    QueueDefinition,
)

if TYPE_CHECKING:
    from warren.runtime.broker import Broker
    from warren.runtime.cluster.node import ClusterNode

log = logging.getLogger("warren.cluster.metadata")

Operation = tuple[str, str, tuple[Any, ...]]  # origin node, store method, its arguments


class ReplicatedDefinitions:
    """A `DefinitionsStore` whose changes are also proposed to the metadata group."""

    def __init__(self, store: DefinitionsStore, cluster: ClusterNode) -> None:
        self.store = store
        self.cluster = cluster
        self.applying = False  # applying another node's operation: do not replicate it

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _replicate(self, method: str, *arguments: Any) -> None:
        if not self.applying:
            outcome = self.cluster.replicate((self.cluster.name, method, arguments))
            outcome.add_done_callback(lambda done: _unreplicated(done, method, arguments))

    def _local_queue(self, vhost: str, name: str) -> bool:
        """A classic queue: it lives on this node only, so does what is bound to it."""
        broker = self.cluster.broker
        found = broker.vhosts.get(vhost)
        record = found.queues.get(name) if found is not None else None
        return record is not None and record.queue_type is not QueueType.QUORUM

    def put_vhost(self, vhost: Any) -> None:
        self.store.put_vhost(vhost)
        self._replicate("put_vhost", vhost)

    def delete_vhost(self, name: str) -> None:
        self.store.delete_vhost(name)
        self._replicate("delete_vhost", name)

    def put_user(self, user: Any) -> None:
        self.store.put_user(user)
        self._replicate("put_user", user)

    def delete_user(self, name: str) -> None:
        self.store.delete_user(name)
        self._replicate("delete_user", name)

    def put_permission(self, permission: Any) -> None:
        self.store.put_permission(permission)
        self._replicate("put_permission", permission)

    def delete_permission(self, user: str, vhost: str) -> None:
        self.store.delete_permission(user, vhost)
        self._replicate("delete_permission", user, vhost)

    def put_exchange(self, exchange: Any) -> None:
        self.store.put_exchange(exchange)
        self._replicate("put_exchange", exchange)

    def delete_exchange(self, vhost: str, name: str) -> None:
        self.store.delete_exchange(vhost, name)
        self._replicate("delete_exchange", vhost, name)

    def put_binding(self, binding: BindingDefinition) -> None:
        self.store.put_binding(binding)
        if not self._bound_to_local_queue(binding):
            self._replicate("put_binding", binding)

    def delete_binding(self, binding: BindingDefinition) -> None:
        self.store.delete_binding(binding)
        if not self._bound_to_local_queue(binding):
            self._replicate("delete_binding", binding)

    def _bound_to_local_queue(self, binding: BindingDefinition) -> bool:
        return binding.destination_kind == "queue" and self._local_queue(
            binding.vhost, binding.destination
        )

    def put_policy(self, policy: Any) -> None:
        self.store.put_policy(policy)
        self._replicate("put_policy", policy)

    def delete_policy(self, vhost: str, name: str) -> None:
        self.store.delete_policy(vhost, name)
        self._replicate("delete_policy", vhost, name)

    def put_operator_policy(self, policy: Any) -> None:
        self.store.put_operator_policy(policy)
        self._replicate("put_operator_policy", policy)

    def delete_operator_policy(self, vhost: str, name: str) -> None:
        self.store.delete_operator_policy(vhost, name)
        self._replicate("delete_operator_policy", vhost, name)


def _unreplicated(done: asyncio.Future[object], method: str, arguments: tuple[Any, ...]) -> None:
    """A change made here that the metadata group never took: the other nodes miss it."""
    error = None if done.cancelled() else done.exception()
    if error is not None:
        log.warning("%s%r not replicated to the cluster: %s", method, arguments, error)


class MetadataMachine:
    """The metadata group's state machine: other nodes' definition changes, applied here."""

    def __init__(self, cluster: ClusterNode) -> None:
        self.cluster = cluster
        self.leader = False

    @property
    def broker(self) -> Broker:
        return self.cluster.broker

    def apply(self, index: int, data: bytes) -> object:
        store = self.cluster.definitions.store
        if index <= store.applied_index():
            return None  # applied before this node restarted
        origin, method, arguments = pickle.loads(data)
        result: object = None
        if origin != self.cluster.name:  # else: applied when this node made the change
            definitions = self.cluster.definitions
            definitions.applying = True
            try:
                result = _APPLY[method](self, *arguments)
            except Exception:
                # A definition this node cannot take (the model refuses it here) must not
                # stop the metadata log: it is logged, as a refused one is at recovery.
                log.exception("metadata operation %s%r not applied", method, arguments)
            finally:
                definitions.applying = False
        store.set_applied_index(index)
        return result

    def retained(self) -> int:
        return 0  # definitions: small next to the log of their changes

    def held(self) -> list[int]:
        return []  # reads no entry back

    def snapshot(self) -> bytes:
        state = (self.cluster.definitions.store.load(), self.cluster.placements())
        return pickle.dumps(state, pickle.HIGHEST_PROTOCOL)

    def restore(self, data: bytes) -> None:
        loaded: Definitions
        loaded, placements = pickle.loads(data)
        definitions = self.cluster.definitions
        definitions.applying = True
        try:
            for vhost in loaded.vhosts:
                self._put_vhost(vhost)
            for user in loaded.users:
                self._put_user(user)
            for permission in loaded.permissions:
                self._put_permission(permission)
            for policy in loaded.policies:
                self._put_policy(policy, False)
            for policy in loaded.operator_policies:
                self._put_policy(policy, True)
            for exchange in loaded.exchanges:
                self._put_exchange(exchange)
            for queue in loaded.queues:
                if queue.type == QueueType.QUORUM.value:
                    self._put_queue(queue, placements.get((queue.vhost, queue.name)))
            for binding in loaded.bindings:
                self._put_binding(binding)
        finally:
            definitions.applying = False

    def role_changed(self, leader: bool, leader_node: str | None) -> None:
        self.leader = leader

    # --- one operation each ----------------------------------------------------------------

    def _put_vhost(self, vhost: Any) -> None:
        self.cluster.definitions.store.put_vhost(vhost)
        recovery.vhost_of(self.broker, vhost.name)
        self.broker.access.vhosts[vhost.name] = VHostInfo(
            vhost.name, vhost.description, vhost.tags, vhost.default_queue_type
        )

    def _delete_vhost(self, name: str) -> None:
        if name in self.broker.vhosts:
            delete_vhost(self.broker, name)

    def _put_user(self, user: Any) -> None:
        self.cluster.definitions.store.put_user(user)
        access = self.broker.access
        access.users[user.name] = User(
            user.name, user.password_hash, user.tags, user.hashing_algorithm
        )
        access.version += 1

    def _delete_user(self, name: str) -> None:
        self.cluster.definitions.store.delete_user(name)
        if name in self.broker.access.users:
            self.broker.access.forget_user(name)

    def _put_permission(self, permission: Any) -> None:
        self.cluster.definitions.store.put_permission(permission)
        self.broker.access.set_permission(
            Permission(
                permission.user,
                permission.vhost,
                permission.configure,
                permission.write,
                permission.read,
            )
        )

    def _delete_permission(self, user: str, vhost: str) -> None:
        self.cluster.definitions.store.delete_permission(user, vhost)
        self.broker.access.clear_permission(user, vhost)

    def _put_policy(self, policy: Any, operator: bool) -> None:
        store = self.cluster.definitions.store
        (store.put_operator_policy if operator else store.put_policy)(policy)
        recovery.restore_policy(self.broker, policy, operator)
        apply_policies(self.broker, recovery.vhost_of(self.broker, policy.vhost))

    def _delete_policy(self, vhost: str, name: str, operator: bool) -> None:
        store = self.cluster.definitions.store
        (store.delete_operator_policy if operator else store.delete_policy)(vhost, name)
        target = self.broker.vhosts.get(vhost)
        if target is not None:
            (target.operator_policies if operator else target.policies).remove(name)
            apply_policies(self.broker, target)

    def _put_exchange(self, exchange: Any) -> None:
        durability = self.broker.durability
        assert durability is not None
        recovery.restore_exchange(self.broker, exchange)
        vhost = self.broker.vhosts[exchange.vhost]
        model = vhost.exchanges.get(exchange.name)
        if model is not None:
            durability.exchange_declared(vhost, model)

    def _delete_exchange(self, vhost_name: str, name: str) -> None:
        durability = self.broker.durability
        vhost = self.broker.vhosts.get(vhost_name)
        if vhost is None or durability is None:
            return
        if name in vhost.exchanges:
            vhost.delete_exchange(name, if_unused=False)
        durability.exchanges_changed(vhost)

    def _put_queue(self, queue: QueueDefinition, placement: Any) -> bool:
        """A quorum queue's declare, on every node: the first one in the log creates it
        (with its placement); a later one for the same name finds it there."""
        vhost = recovery.vhost_of(self.broker, queue.vhost)
        if queue.name in vhost.queues:
            if placement is not None:  # from a snapshot: the member list may be news
                self.cluster.members_changed(queue.vhost, queue.name, *placement)
            return False
        self.cluster.adopt_placement(queue.vhost, queue.name, placement)
        return recovery.declare_stored_queue(self.broker, queue) is not None

    def _queue_members(self, vhost: str, name: str, group_id: str, members: list[str]) -> None:
        self.cluster.members_changed(vhost, name, group_id, members)

    def _node_address(self, node: str, host: str, port: int) -> None:
        self.cluster.definitions.store.put_cluster_node(node, host, port)
        self.cluster.node_known(node, host, port)

    def _node_forgotten(self, node: str) -> None:
        self.cluster.definitions.store.delete_cluster_node(node)
        self.cluster.forget_node(node)

    def _delete_queue(self, vhost_name: str, name: str, group_id: str | None = None) -> int:
        """A quorum queue's delete, on every node (of this very queue, not of one declared
        again since); its ready count as the deleting node's reply."""
        vhost = self.broker.vhosts.get(vhost_name)
        host = self.broker.queues.get((vhost_name, name))
        if vhost is None or name not in vhost.queues:
            return 0
        if group_id is not None and (not isinstance(host, QuorumHost) or host.group_id != group_id):
            return 0
        return self.broker.delete_queue(vhost, name)

    def _put_binding(self, binding: BindingDefinition) -> None:
        durability = self.broker.durability
        assert durability is not None
        recovery.restore_binding(self.broker, binding)
        vhost = self.broker.vhosts[binding.vhost]
        arguments = decode_table(binding.arguments) if binding.arguments else {}
        durability.binding_added(
            vhost,
            binding.destination,
            DestinationKind(binding.destination_kind),
            binding.source,
            binding.routing_key,
            arguments,
        )

    def _delete_binding(self, binding: BindingDefinition) -> None:
        durability = self.broker.durability
        vhost = self.broker.vhosts.get(binding.vhost)
        if vhost is None or durability is None:
            return
        kind = DestinationKind(binding.destination_kind)
        arguments = decode_table(binding.arguments) if binding.arguments else {}
        try:
            vhost.unbind(binding.destination, kind, binding.source, binding.routing_key, arguments)
        except Exception:
            log.debug("binding %r was not in the model", binding)
        durability.binding_removed(
            vhost, binding.destination, kind, binding.source, binding.routing_key, arguments
        )


_APPLY: dict[str, Callable[..., object]] = {
    "put_vhost": MetadataMachine._put_vhost,
    "delete_vhost": MetadataMachine._delete_vhost,
    "put_user": MetadataMachine._put_user,
    "delete_user": MetadataMachine._delete_user,
    "put_permission": MetadataMachine._put_permission,
    "delete_permission": MetadataMachine._delete_permission,
    "put_policy": lambda machine, policy: machine._put_policy(policy, False),
    "delete_policy": lambda machine, vhost, name: machine._delete_policy(vhost, name, False),
    "put_operator_policy": lambda machine, policy: machine._put_policy(policy, True),
    "delete_operator_policy": lambda machine, vhost, name: machine._delete_policy(
        vhost, name, True
    ),
    "put_exchange": MetadataMachine._put_exchange,
    "delete_exchange": MetadataMachine._delete_exchange,
    "put_queue": MetadataMachine._put_queue,
    "delete_queue": MetadataMachine._delete_queue,
    "queue_members": MetadataMachine._queue_members,
    "node_address": MetadataMachine._node_address,
    "node_forgotten": MetadataMachine._node_forgotten,
    "put_binding": MetadataMachine._put_binding,
    "delete_binding": MetadataMachine._delete_binding,
}
