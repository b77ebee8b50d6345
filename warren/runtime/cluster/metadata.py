"""Cluster metadata: definitions replicated through one Raft group that every node is in.

Theory of operation:
1. A definition change is a typed operation (`warren.cluster.metadata`: one small class
   per change, in a versioned MessagePack encoding) in the log of the metadata group.
   `MetadataMachine.apply` runs on every node in log order: the pure transition
   (`warren.cluster.metadata.apply`) decides whether the entry is new, and this module
   carries out its effects, making every operation, its proposer's own included, on the
   node's live model *and* its store (with replication switched off while it does,
   `applying`, so nothing echoes back), dispatched by the operation's type; its result
   goes back to the proposer. The live model stays the machine's state (channels route
   on it), so the making is here, not in the pure core. The last index applied is kept
   in the store, so a restart does not apply anything twice.
2. Log first: a channel's exchange declare and delete and bind and unbind (the
   operations `ExchangeDeclare`, `ExchangeDelete`, `Bind`, `Unbind`), its declare and
   delete of a classic queue that is not exclusive (`QueueDeclare`: the first for a name
   makes it, the home the queue, the others a proxy, and the channel declares again
   against it; `QueueDelete`, proposed by the home, answered with the count the queue
   had; the management API's queue PUT and DELETE alike), what a classic queue's home
   deletes by itself (auto-delete, x-expires: a `QueueDelete` too, through the
   queue's `warren.runtime.cluster.node.ClusterHome`), the management API's changes to
   exchanges, bindings, policies, vhosts, users, (topic) permissions and the cluster
   name, and imported definitions (`/api/definitions` POST, ``warrenctl
   import_definitions``: the same operations, one after the other), are proposed
   without touching the model (`Broker.logged_change`); the caller answers from what
   applying gave on its node: the -ok, or the error the model refused it with (406 for
   an inequivalent declare another node's came before, an `AmqpError` in the leader's
   answer). What goes with a delete (the bindings to a queue, exchanges that
   auto-delete with their last binding) goes on every node as it applies the delete,
   with nothing more proposed. On a single node there is no log: the caller makes the
   change at once, as it always did. Two nodes making such changes at once end with the
   log's order everywhere.
3. Quorum queues go to the log first too: their declare and delete take effect on every
   node when committed, so two nodes declaring one name at once end with one queue (the
   first in the log) everywhere; the same holds for a queue's member list and for the
   address of a node that joins (kept in the store, so every node can reach it after a
   restart).
4. Made here first: an exclusive queue's declare and delete, and what goes with that
   delete. The queue lives and dies with its connection, which only its node knows: the
   log cannot name the owner for the other nodes to check, and a connection that closes
   must lose its queues at once, even on a node cut off from the log. Such changes are
   made on the node and proposed after: every durable change through the store, wrapped
   by `ReplicatedDefinitions` (each ``put_*``/``delete_*`` is written locally and
   proposed), and through `TransientDefinitions` (the durability's observer) what the
   store does not keep or keeps on one node only: the classic queue with its home,
   non-durable exchanges, and bindings. Such a change is applied again on its own node
   when the log brings it back, as on every other, so the nodes end the same. When a
   link comes up each node sends the other its own classic queues, non-durable
   exchanges and bindings (`TransientDefinitions.operations`), made there if missing,
   with the index its metadata log was applied through. A queue whose declare or delete
   the receiving node applied from the log after that index is left as the log made it
   (`MetadataMachine.changed_after`): the list was taken before that change, so a queue
   the log deleted meanwhile is not made again, nor a new one taken away.
5. Operations are numbered by their sender (a node's process, `logged`): a copy that a
   new leader commits again is skipped on every node (the transition's decision), as
   the quorum queues' `Sequenced` commands are. Entries earlier releases pickled are
   read through `warren.legacy` as typed operations (those written before numbering
   have no sender).
6. Snapshots: the machine's snapshot is the node's store contents (`Definitions`), the
   quorum queues' placements, what the store does not keep (point 4) and the last number
   applied of each sender; a node that restores one makes every definition it holds
   (`warren.cluster.metadata.restoring`).
7. A definition's -ok reaches the client once every node has it, as in RabbitMQ: an
   operation's proposer waits, after the commit, until its own node and every node it has
   a link with applied the entry (`ClusterNode.replicate`, an `AppliedThrough` barrier,
   bounded in time); a channel sends the -ok of a method that proposed changes, and the
   management API its answer to a request that did, once they are settled (`settled`),
   so a publish through any node at once finds the queue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Final, Protocol, cast

from warren.amqp.table import decode_table, decode_table_typed, encode_table
from warren.cluster.metadata import (
    Bind,
    Change,
    ClassicQueue,
    DeleteBinding,
    DeleteClassicQueue,
    DeleteExchange,
    DeleteOperatorPolicy,
    DeletePermission,
    DeletePolicy,
    DeleteQueue,
    DeleteTopicPermissions,
    DeleteUser,
    DeleteVHost,
    Entry,
    ExchangeDeclare,
    ExchangeDelete,
    Meta,
    NodeAddress,
    NodeForgotten,
    Operation,
    PutBinding,
    PutExchange,
    PutGlobalParameter,
    PutOperatorPolicy,
    PutPermission,
    PutPolicy,
    PutQueue,
    PutTopicPermission,
    PutUser,
    PutVHost,
    QueueDeclare,
    QueueDelete,
    QueueMembers,
    Recorded,
    Snapshot,
    State,
    TransientExchange,
    Unbind,
    decode_entry,
    decode_snapshot,
    encode_entry,
    encode_snapshot,
    restoring,
)
from warren.cluster.metadata import apply as transition
from warren.errors import AmqpError
from warren.model import DestinationKind, Exchange, VHost
from warren.model.binding import Binding
from warren.model.vhost import RESERVED_PREFIX
from warren.runtime import recovery
from warren.runtime.access import CLUSTER_NAME, Permission, TopicPermission, User, VHostInfo
from warren.runtime.admin import resolve_policies
from warren.runtime.admin_access import delete_vhost
from warren.runtime.broker import Broker
from warren.runtime.cluster.calls import Applied, Outcome, to_wire
from warren.runtime.cluster.quorum import QuorumHost
from warren.runtime.cluster.raft_host import EntryMeta
from warren.runtime.cluster.remote import RemoteHost, RemoteQueues
from warren.runtime.durability import Durability, binding_definition, queue_definition
from warren.runtime.queues.host import Placement, QueueHost
from warren.storage.definitions import (
    BindingDefinition,
    DefinitionsStore,
    QueueDefinition,
)

log = logging.getLogger("warren.cluster.metadata")

# Classic queue declares and deletes remembered to weigh a peer's list of its queues
# against (module doc, 4): that list is at most a link's set-up behind the log.
QUEUE_CHANGES_KEPT: Final = 10_000

Placements = dict[tuple[str, str], tuple[str, list[str]]]  # queue -> (group id, members)


class MetadataNode(Protocol):
    """What the metadata group needs of the node's cluster side
    (`warren.runtime.cluster.node.ClusterNode`, which imports this module)."""

    @property
    def name(self) -> str: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def definitions(self) -> ReplicatedDefinitions: ...

    @property
    def transient(self) -> TransientDefinitions: ...

    @property
    def remote(self) -> RemoteQueues: ...

    def replicate(self, operation: Operation) -> asyncio.Future[object]:
        """Propose an operation; the future has its result once every node applied it."""

    def placements(self) -> Placements: ...

    def adopt_placement(self, vhost: str, name: str, placement: Any) -> None: ...

    def members_changed(self, vhost: str, name: str, group_id: str, members: list[str]) -> None:
        """A quorum queue's member list as the metadata group has it."""

    def node_known(self, node: str, host: str, port: int) -> None: ...

    def forget_node(self, node: str) -> None: ...


class ReplicatedDefinitions:
    """A `DefinitionsStore` whose changes are also proposed to the metadata group."""

    def __init__(self, store: DefinitionsStore, cluster: MetadataNode) -> None:
        self.store = store
        self.cluster = cluster
        self.applying = False  # applying another node's operation: do not replicate it
        # proposed and not yet applied everywhere, for `settled` (in order; a set)
        self._unsettled: dict[asyncio.Future[object], None] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def replicate(self, operation: Operation) -> None:
        """Propose a change made here (not one being applied from the log)."""
        if not self.applying:
            outcome = self.cluster.replicate(operation)
            outcome.add_done_callback(lambda done: _unreplicated(done, operation))
            self._unsettled[outcome] = None
            outcome.add_done_callback(self._settled)

    def _settled(self, done: asyncio.Future[object]) -> None:
        self._unsettled.pop(done, None)

    def settled(self) -> asyncio.Future[list[object]] | None:
        """The changes proposed here and not yet applied on every node, once they are
        (point 7); None when there are none."""
        if not self._unsettled:
            return None
        return asyncio.gather(*self._unsettled, return_exceptions=True)

    def put_vhost(self, vhost: Any) -> None:
        self.store.put_vhost(vhost)
        self.replicate(PutVHost(vhost))

    def delete_vhost(self, name: str) -> None:
        self.store.delete_vhost(name)
        self.replicate(DeleteVHost(name))

    def put_user(self, user: Any) -> None:
        self.store.put_user(user)
        self.replicate(PutUser(user))

    def delete_user(self, name: str) -> None:
        self.store.delete_user(name)
        self.replicate(DeleteUser(name))

    def put_permission(self, permission: Any) -> None:
        self.store.put_permission(permission)
        self.replicate(PutPermission(permission))

    def delete_permission(self, user: str, vhost: str) -> None:
        self.store.delete_permission(user, vhost)
        self.replicate(DeletePermission(user, vhost))

    def put_topic_permission(self, permission: Any) -> None:
        self.store.put_topic_permission(permission)
        self.replicate(PutTopicPermission(permission))

    def delete_topic_permissions(self, user: str, vhost: str, exchange: str | None) -> None:
        self.store.delete_topic_permissions(user, vhost, exchange)
        self.replicate(DeleteTopicPermissions(user, vhost, exchange))

    def put_global_parameter(self, name: str, value: Any) -> None:
        self.store.put_global_parameter(name, value)
        self.replicate(PutGlobalParameter(name, value))

    def put_exchange(self, exchange: Any) -> None:
        self.store.put_exchange(exchange)
        self.replicate(PutExchange(exchange))

    def delete_exchange(self, vhost: str, name: str) -> None:
        self.store.delete_exchange(vhost, name)
        self.replicate(DeleteExchange(vhost, name))

    def put_binding(self, binding: BindingDefinition) -> None:
        """Stored (replicated by `TransientDefinitions`, as every binding is)."""
        if not self._to_remote_queue(binding):
            self.store.put_binding(binding)

    def delete_binding(self, binding: BindingDefinition) -> None:
        if not self._to_remote_queue(binding):
            self.store.delete_binding(binding)

    def _to_remote_queue(self, binding: BindingDefinition) -> bool:
        """Bound to a classic queue whose home is another node: the home stores it."""
        host = self.cluster.broker.queues.get((binding.vhost, binding.destination))
        return binding.destination_kind == "queue" and isinstance(host, RemoteHost)

    def put_policy(self, policy: Any) -> None:
        self.store.put_policy(policy)
        self.replicate(PutPolicy(policy))

    def delete_policy(self, vhost: str, name: str) -> None:
        self.store.delete_policy(vhost, name)
        self.replicate(DeletePolicy(vhost, name))

    def put_operator_policy(self, policy: Any) -> None:
        self.store.put_operator_policy(policy)
        self.replicate(PutOperatorPolicy(policy))

    def delete_operator_policy(self, vhost: str, name: str) -> None:
        self.store.delete_operator_policy(vhost, name)
        self.replicate(DeleteOperatorPolicy(vhost, name))


class TransientDefinitions:
    """The durability's observer in a cluster: proposes what the store does not replicate
    (module doc, 4) as this node's operations."""

    def __init__(self, cluster: MetadataNode) -> None:
        self.cluster = cluster
        self._exchanges: dict[str, set[str]] = {}  # non-durable exchanges, by vhost

    def _replicate(self, operation: Operation) -> None:
        self.cluster.definitions.replicate(operation)

    def known(self, vhost: str, exchange: str) -> None:
        """A non-durable exchange another node declared (its delete is replicated too)."""
        self._exchanges.setdefault(vhost, set()).add(exchange)

    def exchange_declared(self, vhost: VHost, exchange: Exchange) -> None:
        known = self._exchanges.setdefault(vhost.name, set())
        name = exchange.name
        if name in known or not name or name.startswith(RESERVED_PREFIX):
            return  # known, or predeclared in every vhost
        known.add(name)
        self._replicate(_transient_exchange(vhost, exchange))

    def exchanges_changed(self, vhost: VHost) -> None:
        known = self._exchanges.get(vhost.name)
        for name in [name for name in known or () if name not in vhost.exchanges]:
            known.discard(name)  # type: ignore[union-attr]
            self._replicate(DeleteExchange(vhost.name, name))

    def operations(self, home: str | None) -> list[Operation]:
        """What the store does not keep, as operations that make it again elsewhere: the
        non-durable exchanges, the classic queues whose home is `home` (all if None), and
        the bindings to those queues or with a non-durable end (with `home` None: every
        binding). A node that has one already keeps it as it is."""
        broker = self.cluster.broker
        exchanges: list[Operation] = []
        queues: list[Operation] = []
        bindings: list[Operation] = []
        listed: set[tuple[str, str]] = set()
        for host in list(broker.queues.values()):
            if host.placement is Placement.LOCAL:
                found, record = self.cluster.name, host.record
            elif isinstance(host, RemoteHost):
                found, record = host.home, host.record
            else:
                continue
            if home in (None, found):
                listed.add((record.vhost, record.name))
                definition = queue_definition(record)
                queues.append(ClassicQueue(definition, found, record.durable, record.exclusive))
        for vhost in list(broker.vhosts.values()):
            for exchange in vhost.exchanges.values():
                if not exchange.durable and not exchange.name.startswith(RESERVED_PREFIX):
                    exchanges.append(_transient_exchange(vhost, exchange))
                for binding in exchange.bindings if exchange.name else ():
                    if home is None or _carried(vhost, exchange, binding, listed):
                        stored = binding_definition(
                            vhost,
                            binding.destination,
                            binding.kind,
                            binding.source,
                            binding.routing_key,
                            binding.arguments,
                        )
                        bindings.append(PutBinding(stored))
        return [*exchanges, *queues, *bindings]

    def binding_changed(self, binding: BindingDefinition, added: bool) -> None:
        self._replicate(PutBinding(binding) if added else DeleteBinding(binding))

    def queue_declared(self, host: QueueHost) -> None:
        if host.placement is Placement.LOCAL:  # a classic queue whose home is this node
            record = host.record
            definition = queue_definition(record)
            home = self.cluster.name
            self._replicate(ClassicQueue(definition, home, record.durable, record.exclusive))

    def queue_deleted(self, vhost: VHost, host: QueueHost) -> None:
        if host.placement is Placement.LOCAL:
            self._replicate(DeleteClassicQueue(vhost.name, host.name, self.cluster.name))


def _carried(
    vhost: VHost, source: Exchange, binding: Binding, queues: set[tuple[str, str]]
) -> bool:
    """Whether a binding goes with a node's own queues: to one of them, or with a
    non-durable end."""
    if binding.kind is DestinationKind.QUEUE:
        return (vhost.name, binding.destination) in queues or not source.durable
    target = vhost.exchanges.get(binding.destination)
    return not source.durable or (target is not None and not target.durable)


def _transient_exchange(vhost: VHost, exchange: Exchange) -> TransientExchange:
    """A non-durable exchange as an operation that makes it on another node."""
    return TransientExchange(
        vhost.name,
        exchange.name,
        exchange.type.value,
        exchange.auto_delete,
        exchange.internal,
        encode_table(exchange.arguments),
    )


def _unreplicated(done: asyncio.Future[object], operation: Operation) -> None:
    """A change made here that the metadata group never took: the other nodes miss it."""
    error = None if done.cancelled() else done.exception()
    if error is not None:
        log.warning("%r not replicated to the cluster: %s", operation, error)


def logged(operation: Operation, sender: str, number: int) -> bytes:
    """An operation as the metadata log holds it: numbered by its sender (one node's
    process), from 1, so that a copy a new leader commits again is applied once (point 5)."""
    return encode_entry(Entry(sender, number, operation))


class MetadataMachine:
    """The metadata group's state machine on this node: the pure transition
    (`warren.cluster.metadata.apply`) decides, this carries its effects out on the live
    model and the store."""

    def __init__(self, cluster: MetadataNode) -> None:
        self.cluster = cluster
        self.leader = False
        self.applied_index = 0  # in memory: what `reached` waits for
        self._state: State | None = None  # read from the store at the first entry
        self._reached: list[tuple[int, asyncio.Future[bool]]] = []
        # (vhost, queue) -> the index of the last classic queue declare or delete applied
        # here, oldest first, at most QUEUE_CHANGES_KEPT (module doc, 4)
        self._queue_changes: dict[tuple[str, str], int] = {}

    @property
    def broker(self) -> Broker:
        return self.cluster.broker

    @property
    def state(self) -> State:
        if self._state is None:
            self._state = State(self.cluster.definitions.store.applied_index(), {})
        return self._state

    def apply(self, meta: EntryMeta, data: bytes) -> Applied:
        index = meta.index
        self._state, effects = transition(Meta(index, meta.term), decode_entry(data), self.state)
        result: object = None
        for effect in effects:
            if type(effect) is Change:
                result = self.replay([effect.operation])  # its proposer's too (module doc, 1)
                self._queue_changed(effect.operation, index)
            elif type(effect) is Recorded:
                self.cluster.definitions.store.set_applied_index(effect.index)
        self.applied_index = index
        if self._reached:
            waiting, self._reached = self._reached, []
            for through, future in waiting:
                if through > index:
                    self._reached.append((through, future))
                elif not future.done():
                    future.set_result(True)
        return Applied(index, cast("Outcome", to_wire(result)))  # the barrier's index (7)

    def _queue_changed(self, operation: Operation, index: int) -> None:
        match operation:
            case QueueDeclare(queue) | ClassicQueue(queue):
                key = (queue.vhost, queue.name)
            case QueueDelete(vhost, name) | DeleteClassicQueue(vhost, name):
                key = (vhost, name)
            case _:
                return
        changes = self._queue_changes
        changes.pop(key, None)  # to the end: the newest
        changes[key] = index
        if len(changes) > QUEUE_CHANGES_KEPT:
            del changes[next(iter(changes))]

    @property
    def applied_through(self) -> int:
        """The last index applied here (before the first entry since the start: the one
        the store had applied)."""
        return max(self.applied_index, self.state.stored)

    def changed_after(self, vhost: str, queue: str, index: int) -> bool:
        """Whether the log declared or deleted the classic queue here after `index`."""
        return self._queue_changes.get((vhost, queue), 0) > index

    async def reached(self, index: int, timeout_s: float) -> bool:
        """Once this node applied the entry at `index`; False if that took too long (the
        node lags behind the log, or lost the leader)."""
        if self.applied_index >= index:
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._reached.append((index, future))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return False

    def replay(self, operations: list[Operation]) -> object:
        """Make operations from the log or a peer (not replicated again); the last one's
        result."""
        definitions = self.cluster.definitions
        definitions.applying = True
        result: object = None
        try:
            for operation in operations:
                try:
                    result = self._make(operation)
                except Exception:
                    # A definition this node cannot take (the model refuses it here) must
                    # not stop the metadata log: it is logged, as one is at recovery.
                    log.exception("metadata operation %r not applied", operation)
        finally:
            definitions.applying = False
        return result

    def retained(self) -> int:
        return 0  # definitions: small next to the log of their changes

    def kept_indexes(self) -> list[int]:
        return []  # reads no entry back

    def snapshot(self) -> bytes:
        cluster = self.cluster
        placements = [
            (vhost, name, group_id, members)
            for (vhost, name), (group_id, members) in cluster.placements().items()
        ]
        placed = {group_id for _, _, group_id, _ in placements}
        configurations = self.state.configurations
        return encode_snapshot(
            Snapshot(
                cluster.definitions.store.load(),
                placements,
                cluster.transient.operations(None),
                dict(self.state.numbered),
                {group: index for group, index in configurations.items() if group in placed},
            )
        )

    def restore(self, data: bytes) -> None:
        snapshot = decode_snapshot(data)
        self._state = State(self.state.stored, snapshot.numbered, snapshot.configurations)
        self.replay(restoring(snapshot))

    def role_changed(self, leader: bool, leader_node: str | None) -> None:
        self.leader = leader

    def _make(self, operation: Operation) -> object:
        """Carry one operation out on the model and the store: dispatched by its type."""
        match operation:
            case ExchangeDeclare(vhost, name, exchange_type, durable, auto_delete, internal, raw):
                flags = (durable, auto_delete, internal)
                return self._exchange_declare(vhost, name, exchange_type, flags, raw)
            case ExchangeDelete(vhost, name, if_unused):
                return self._exchange_delete(vhost, name, if_unused)
            case Bind() | Unbind():
                return self._bind(operation)
            case QueueDeclare(queue, home, durable):
                self._queue_declare(queue, home, durable)
            case QueueDelete(vhost, name, home):
                self._queue_delete(vhost, name, home)
            case PutVHost(vhost):
                self._put_vhost(vhost)
            case DeleteVHost(name):
                self._delete_vhost(name)
            case PutUser(user):
                self._put_user(user)
            case DeleteUser(name):
                self._delete_user(name)
            case PutPermission(permission):
                self._put_permission(permission)
            case DeletePermission(user, vhost):
                self._delete_permission(user, vhost)
            case PutTopicPermission(permission):
                self._put_topic_permission(permission)
            case DeleteTopicPermissions(user, vhost, exchange):
                self._delete_topic_permissions(user, vhost, exchange)
            case PutGlobalParameter(name, value):
                self._put_global_parameter(name, value)
            case PutPolicy(policy):
                self._put_policy(policy, False)
            case DeletePolicy(vhost, name):
                self._delete_policy(vhost, name, False)
            case PutOperatorPolicy(policy):
                self._put_policy(policy, True)
            case DeleteOperatorPolicy(vhost, name):
                self._delete_policy(vhost, name, True)
            case PutExchange(exchange):
                self._put_exchange(exchange)
            case DeleteExchange(vhost, name):
                self._delete_exchange(vhost, name)
            case TransientExchange(vhost, name, exchange_type, auto_delete, internal, raw):
                self._put_transient_exchange(vhost, name, exchange_type, auto_delete, internal, raw)
            case PutBinding(binding):
                self._put_binding(binding)
            case DeleteBinding(binding):
                self._delete_binding(binding)
            case ClassicQueue(queue, home, durable, exclusive):
                self._put_classic_queue(queue, home, durable, exclusive)
            case DeleteClassicQueue(vhost, name, home):
                self._delete_classic_queue(vhost, name, home)
            case PutQueue(queue, placement):
                return self._put_queue(queue, placement)
            case DeleteQueue(vhost, name, group_id):
                return self._delete_queue(vhost, name, group_id)
            case QueueMembers(vhost, name, group_id, members):
                self.cluster.members_changed(vhost, name, group_id, members)
            case NodeAddress(node, host, port):
                self._node_address(node, host, port)
            case NodeForgotten(node):
                self._node_forgotten(node)
        return None

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

    def _put_topic_permission(self, permission: Any) -> None:
        self.cluster.definitions.store.put_topic_permission(permission)
        self.broker.access.set_topic_permission(TopicPermission(**dataclasses.asdict(permission)))

    def _delete_topic_permissions(self, user: str, vhost: str, exchange: str | None) -> None:
        self.cluster.definitions.store.delete_topic_permissions(user, vhost, exchange)
        self.broker.access.clear_topic_permissions(user, vhost, exchange)

    def _put_global_parameter(self, name: str, value: Any) -> None:
        self.cluster.definitions.store.put_global_parameter(name, value)
        if name == CLUSTER_NAME:
            self.broker.cluster_name = value

    def _put_policy(self, policy: Any, operator: bool) -> None:
        store = self.cluster.definitions.store
        (store.put_operator_policy if operator else store.put_policy)(policy)
        recovery.restore_policy(self.broker, policy, operator)
        resolve_policies(self.broker, recovery.vhost_of(self.broker, policy.vhost))

    def _delete_policy(self, vhost: str, name: str, operator: bool) -> None:
        store = self.cluster.definitions.store
        (store.delete_operator_policy if operator else store.delete_policy)(vhost, name)
        target = self.broker.vhosts.get(vhost)
        if target is not None:
            (target.operator_policies if operator else target.policies).remove(name)
            resolve_policies(self.broker, target)

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

    def _put_transient_exchange(
        self,
        vhost_name: str,
        name: str,
        exchange_type: str,
        auto_delete: bool,
        internal: bool,
        arguments: bytes,
    ) -> None:
        recovery.vhost_of(self.broker, vhost_name).declare_exchange(
            name,
            exchange_type,
            passive=False,
            durable=False,
            auto_delete=auto_delete,
            internal=internal,
            arguments=decode_table_typed(arguments),
        )
        self.cluster.transient.known(vhost_name, name)

    def _queue_declare(self, queue: QueueDefinition, home: str, durable: bool) -> None:
        """A channel's declare of a classic queue (point 2): the first in the log for its
        name makes it, on its home with the queue itself, elsewhere as a proxy; the
        declaring channel then declares it again, -ok if equivalent, else the model's
        error (406, or 405 for another connection's exclusive queue)."""
        vhost = self.broker.vhosts.get(queue.vhost)
        if vhost is None or queue.name in vhost.queues:
            return  # deleted meanwhile, or declared first by another
        if home != self.cluster.name:
            self._put_classic_queue(queue, home, durable, False)
            return
        record = recovery.declare_record(self.broker, queue, durable)
        if record is not None:
            self.broker.declare_queue(record)

    def _put_classic_queue(
        self, queue: QueueDefinition, home: str, durable: bool, exclusive: bool
    ) -> None:
        """A classic queue of another node: a record (owned by nobody here if exclusive)
        and a proxy to its home. A queue of that name declared here meanwhile stays."""
        vhost = recovery.vhost_of(self.broker, queue.vhost)
        if queue.name in vhost.queues or home == self.cluster.name:
            return
        owner = ("exclusive", home) if exclusive else None
        record = recovery.declare_record(self.broker, queue, durable, owner)
        if record is not None:
            self.cluster.remote.proxy(record, home)

    def _queue_delete(self, vhost_name: str, name: str, home: str) -> None:
        """A client's delete of a classic queue (point 2): on its home the queue itself,
        elsewhere its proxy."""
        host = self.broker.queues.get((vhost_name, name))
        mine = host is not None and host.placement is Placement.LOCAL
        self._delete_classic_queue(vhost_name, name, home, home == self.cluster.name and mine)

    def _delete_classic_queue(
        self, vhost_name: str, name: str, home: str, mine: bool = False
    ) -> None:
        """A classic queue's proxy goes (with `mine`: the queue itself, on its home)."""
        vhost = self.broker.vhosts.get(vhost_name)
        host = self.broker.queues.get((vhost_name, name))
        proxy = isinstance(host, RemoteHost) and host.home == home
        if vhost is not None and (mine or proxy):
            self.broker.delete_queue(vhost, name)

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

    def _exchange_declare(
        self,
        vhost_name: str,
        name: str,
        exchange_type: str,
        flags: tuple[bool, bool, bool],
        arguments: bytes,
    ) -> AmqpError | None:
        """A channel's exchange.declare of an exchange new on its node (point 2): made or
        found equivalent here, or the model's error."""
        vhost = self.broker.vhosts.get(vhost_name)
        if vhost is None:
            return None  # deleted meanwhile, with the declaring connection
        durable, auto_delete, internal = flags
        try:
            exchange = vhost.declare_exchange(
                name,
                exchange_type,
                passive=False,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=decode_table_typed(arguments),
            )
        except AmqpError as refused:
            return refused
        self._durability().exchange_declared(vhost, exchange)
        return None

    def _exchange_delete(self, vhost_name: str, name: str, if_unused: bool) -> AmqpError | None:
        vhost = self.broker.vhosts.get(vhost_name)
        if vhost is None:
            return None
        try:
            vhost.delete_exchange(name, if_unused=if_unused)
        except AmqpError as refused:
            return refused
        self._durability().exchanges_changed(vhost)
        return None

    def _bind(self, change: Bind | Unbind) -> AmqpError | None:
        """A channel's bind or unbind (point 2); the channel checked that its connection
        may use an exclusive destination queue."""
        vhost = self.broker.vhosts.get(change.vhost)
        if vhost is None:
            return None
        added = type(change) is Bind
        destination, source, routing_key = change.destination, change.source, change.routing_key
        kind = DestinationKind(change.kind)
        arguments = decode_table(change.arguments) if change.arguments else {}
        try:
            (vhost.bind if added else vhost.unbind)(
                destination, kind, source, routing_key, arguments
            )
        except AmqpError as refused:
            return refused
        durability = self._durability()
        (durability.binding_added if added else durability.binding_removed)(
            vhost, destination, kind, source, routing_key, arguments
        )
        return None

    def _durability(self) -> Durability:
        durability = self.broker.durability
        assert durability is not None  # a cluster node has its data directory
        return durability
