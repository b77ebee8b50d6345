"""The node's shared state: vhosts, queue hosts by name, users, connections.

Theory of operation:
1. The broker holds the vhosts of `warren.model` and the registry of queue hosts, by
   (vhost, queue name). A host is any `warren.runtime.queues.QueueHost`; the broker makes
   one with its `HostFactory` (classic hosts on a single node; the cluster layer puts in
   its own, which makes quorum hosts) and never looks at which kind it got.
2. Deleting a queue cancels its consumers (consumer_cancel_notify) and forgets its host;
   a queue whose delete another node or the metadata log carries out says so
   (`QueueHost.forward_delete`).
3. The broker sits below the connections and the cluster layer that use it: it knows a
   connection as a `Client` and the cluster as a `Cluster`, protocols of what the node's
   registry and its readers need of them, so that nothing here imports either (the
   runtime has no import cycle, `docs/DESIGN.md`).
4. On a worker of a node of several (`warren.runtime.workers`), the node's limits are
   counted on the board the workers share (`board`): `admit` takes a connection only
   while the node has fewer than ``connection_max``, and `node_name` is the node's name,
   which clients and operators see, while ``config.node_name`` is the worker's, which
   the workers' internal cluster uses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sized
from typing import TYPE_CHECKING, Any, Protocol

from warren.cluster.metadata import Operation
from warren.errors import AmqpError
from warren.model import QueueRecord, VHost
from warren.model.policy import Policy, effective_settings
from warren.model.settings import QueueSettings
from warren.runtime.access import Access
from warren.runtime.queues.classic import ClassicHosts
from warren.runtime.queues.clock import now_ms
from warren.runtime.queues.host import HostFactory, QueueHost
from warren.runtime.queues.paging import release
from warren.runtime.stats import MessageStats

if TYPE_CHECKING:
    from warren.amqp.content import Message
    from warren.runtime.config import Config
    from warren.runtime.durability import Durability

log = logging.getLogger("warren.broker")


class Client(Protocol):
    """A client connection as the node sees it (`warren.runtime.connection.AmqpConnection`)."""

    @property
    def vhost(self) -> VHost | None:
        """None until the handshake opened a vhost."""

    @property
    def channels(self) -> Sized: ...

    def close_with(self, error: AmqpError) -> None: ...

    def alarms_changed(self) -> None:
        """A resource alarm was set or cleared: block or unblock publishers."""

    def shutdown(self) -> None:
        """The node stops: close with connection.close (320)."""


class Settling(Protocol):
    def settled(self) -> asyncio.Future[list[object]] | None: ...


class Cluster(Protocol):
    """The node's cluster side as the broker's readers see it
    (`warren.runtime.cluster.node.ClusterNode`; the management API's operators' verbs use
    that class itself)."""

    @property
    def nodes(self) -> Mapping[str, tuple[str, int]]:
        """The cluster's other nodes and their cluster listeners."""

    @property
    def definitions(self) -> Settling:
        """The definition changes this node made, replicated through the metadata log."""

    def unreachable(self) -> set[str]: ...

    def logged_change(self, change: Operation) -> asyncio.Future[object]:
        """A definition change of this node, made by every node from the metadata log."""

    def logged_declare(self, record: QueueRecord) -> asyncio.Future[object]:
        """A classic queue the model just created here: out of the model again, declared
        on every node from the metadata log, this node its home; the outcome as for
        `logged_change`."""

    def logged_delete(self, host: QueueHost) -> asyncio.Future[object] | None:
        """A classic queue of this node that a client deletes: deleted on every node from
        the metadata log; the outcome is the ready count it had (None: deleted here at
        once, as an exclusive queue is)."""

    def queue_columns(self, host: object) -> dict[str, object]:
        """The management API's cluster columns of a queue (leader, members, home)."""

    def send_reply(self, node: str, token: str, message: Message) -> None:
        """A publish to a direct reply-to address of `node`'s: delivered there."""

    def reply_live(self, node: str, token: str) -> asyncio.Future[bool]:
        """Whether `node`'s channel of a direct reply-to address still consumes from it
        (False when `node` does not answer)."""


class Board(Protocol):
    """What the workers of a node share, as the broker and its readers use it
    (`warren.runtime.workers.board.Board`; rule 4)."""

    def admit(self, limit: int) -> bool:
        """Whether the node takes one more connection (`limit` 0: none); counted if so."""

    def count(self) -> None:
        """A connection another worker admitted, handed here."""

    def left(self) -> None: ...

    def connections(self) -> int: ...

    def report_memory(self, used_bytes: int) -> int:
        """This worker's memory in use written; the node's returned."""

    def memory(self) -> int: ...


class Broker:
    """Everything one node holds: vhosts, queues, users, connections."""

    def __init__(
        self, config: Config, node_name: str | None = None, board: Board | None = None
    ) -> None:
        self.config = config
        self.node_name = node_name or config.node_name  # the node's, as seen outside (rule 4)
        self.board = board  # a worker's: what the node's workers share (rule 4)
        self.vhosts: dict[str, VHost] = {"/": VHost("/")}
        self.queues: dict[tuple[str, str], QueueHost] = {}
        # users, permissions and vhost metadata; recovery replaces it with the stored ones
        self.access = Access.with_default(
            config.default_user, config.default_pass, config.password_hashing_module
        )
        # RabbitMQ's cluster_name global parameter: the node's name until one is set
        self.cluster_name = self.node_name
        # message counters of closed channels, per vhost (live channels keep their own)
        self.retired_stats: dict[str, MessageStats] = {}
        self.started_at_ms = now_ms()
        self.connections: set[Client] = set()
        self.alarms: set[str] = set()  # resource alarms in force (`warren.runtime.alarms`)
        self.memory_pressure = False  # queues page messages out (`warren.runtime.queues.paging`)
        self.reply_to: dict[str, Any] = {}  # direct reply-to token -> channel
        # durable definitions and messages; None when the node keeps nothing on disk
        self.durability: Durability | None = None
        self.cluster: Cluster | None = None  # None: a single node
        self.hosts: HostFactory = ClassicHosts(self)  # the cluster layer puts in its own

    def admit(self, client: Client, handed: bool = False) -> bool:
        """Whether the node takes `client` (``connection_max``; one `handed` over by
        another worker was admitted there); it is counted if so (rule 4)."""
        if self.board is not None:
            if handed:
                self.board.count()
            elif not self.board.admit(self.config.connection_max):
                return False
        elif self.config.connection_max and len(self.connections) >= self.config.connection_max:
            return False
        self.connections.add(client)
        return True

    def release(self, client: Client) -> None:
        """`client` is gone (closed, or handed to another worker)."""
        if client in self.connections:
            self.connections.remove(client)
            if self.board is not None:
                self.board.left()

    def queue(self, vhost: str, name: str) -> QueueHost | None:
        return self.queues.get((vhost, name))

    def policies_of(self, record: QueueRecord) -> tuple[Policy | None, Policy | None]:
        """The policy and the operator policy that apply to a queue now."""
        vhost = self.vhosts.get(record.vhost)
        if vhost is None:
            return None, None
        return vhost.policies.match_queue(record), vhost.operator_policies.match_queue(record)

    def settings_of(
        self, record: QueueRecord, user: Policy | None, operator: Policy | None
    ) -> QueueSettings:
        """A queue's effective settings under these policies (and this node's config)."""
        prefetch = self.config.dead_letter_worker_consumer_prefetch
        return effective_settings(record, user, operator, prefetch)

    def definitions_settled(self) -> asyncio.Future[list[object]] | None:
        """The definition changes this node made that not every node of the cluster has
        yet, once they have (None: none, or a single node): a definition's -ok waits."""
        return None if self.cluster is None else self.cluster.definitions.settled()

    def logged_change(self, change: Operation) -> asyncio.Future[object] | None:
        """In a cluster, a definition change (`warren.runtime.cluster.metadata`, point 2)
        that the metadata log makes on every node, this one too: its outcome (the error the
        model refused it with, or None) once every node applied it. None on a single node,
        where the caller makes the change at once."""
        return None if self.cluster is None else self.cluster.logged_change(change)

    def logged_declare(self, record: QueueRecord) -> asyncio.Future[object] | None:
        """In a cluster, a classic queue a channel declared is made by the metadata log
        (`warren.runtime.cluster.metadata`, point 2); None on a single node."""
        return None if self.cluster is None else self.cluster.logged_declare(record)

    def logged_delete(self, host: QueueHost) -> asyncio.Future[object] | None:
        """In a cluster, a client's delete of a classic queue whose home is this node is
        made by the metadata log; None on a single node."""
        return None if self.cluster is None else self.cluster.logged_delete(host)

    def client_delete(
        self, host: QueueHost, if_unused: bool, if_empty: bool
    ) -> asyncio.Future[Any] | None:
        """A client's delete (queue.delete, the management API's DELETE) that another node
        or the metadata log makes: a quorum queue's, a classic queue's through a node that
        is not its home, or in a cluster its home's. The future has the ready count once
        the delete is committed, which is when the client is answered; None: the caller
        deletes at once (`delete_queue`)."""
        pending = host.forward_delete(if_unused, if_empty)
        return pending if pending is not None else self.logged_delete(host)

    def add_queue(self, record: QueueRecord) -> QueueHost:
        host = self.hosts.make(record)
        self.queues[record.vhost, record.name] = host
        return host

    def declare_queue(self, record: QueueRecord) -> QueueHost | None:
        """A queue the model just created: its host, and its definition stored if durable
        (None: a queue declared through the metadata log, made when the log has it)."""
        if self.replicated_declare(record) is not None:
            return None
        host = self.add_queue(record)
        if self.durability is not None:
            self.durability.queue_declared(host)
        return host

    def replicated_declare(self, record: QueueRecord) -> asyncio.Future[None] | None:
        """A quorum queue in a cluster is declared through the metadata log: the future is
        done once it exists here (None: any other queue, declared at once)."""
        return self.hosts.replicated_declare(record)

    def auto_delete(self, host: QueueHost) -> None:
        """An auto-delete queue goes once it had a consumer and has none left."""
        record = host.record
        vhost = self.vhosts.get(record.vhost)
        if vhost is None or self.queues.get((vhost.name, record.name)) is not host:
            return
        if record.auto_delete and host.ever_consumed and not host.machine.consumer_count:
            self.delete_queue(vhost, record.name)

    def expire_queue(self, host: QueueHost) -> None:
        """x-expires ran out: delete the queue as if a client had."""
        vhost = self.vhosts.get(host.record.vhost)
        if vhost is not None and self.queues.get((vhost.name, host.name)) is host:
            log.debug("queue %r in vhost %r expired", host.name, vhost.name)
            self.delete_queue(vhost, host.name)

    def delete_queue(self, vhost: VHost, name: str) -> int:
        """Delete a queue, its bindings and consumers; return how many messages it held
        (a quorum queue in a cluster goes when the metadata log has the delete: 0 here)."""
        host = self.queues.get((vhost.name, name))
        if host is not None and host.forward_delete(False, False) is not None:
            return 0
        host = self.queues.pop((vhost.name, name), None)
        if name in vhost.queues:
            vhost.delete_queue(name)
        if host is None:
            return 0
        host.stop()
        host.cancel_all()
        if host.scratch_paged:
            release(host, host.machine.ready_entries())
        if self.durability is not None:
            self.durability.queue_deleted(vhost, host)
        return host.machine.ready_count

    def retire_stats(self, vhost: str, stats: MessageStats) -> None:
        """A channel closed: keep its counts in its vhost's totals."""
        retired = self.retired_stats.get(vhost)
        if retired is None:
            retired = self.retired_stats[vhost] = MessageStats()
        retired.add(stats)
