"""One AMQP channel: what each method means to the broker.

Theory of operation:
1. The connection hands each `MethodReceived` and `Content` event of this channel to
   `handle` / `publish`. A client-caused failure raises `SoftError` (the connection closes
   the channel) or `HardError` (it closes the connection); this module never writes a
   close itself.
2. Delivery tags count up per channel. `unacked` maps a tag to the queue host and the
   queue's msg_id, in tag order, so `multiple` acks take a prefix of it.
3. Publisher confirms are `warren.runtime.confirms.Confirms` (present in confirm mode):
   the channel tells it what each publish did (refused, replicated, logged); it holds and
   orders the acks and nacks, which go when the connection flushes, after any
   ``basic.return`` of the same message.
4. Transactions (`warren.runtime.transactions`) buffer publishes and settlements until
   ``tx.commit``; a rollback drops the publishes and puts the settled tags back as
   unacknowledged. A commit that wrote to the message log answers ``tx.commit-ok`` once
   that is durable (`CommitWait`); replies the channel sends meanwhile wait behind it, so
   replies keep their order.
5. Direct reply-to: a consumer on ``amq.rabbitmq.reply-to`` gets a token; a publish to the
   default exchange with ``amq.rabbitmq.reply-to.<token>`` goes straight to that channel.
   A queue.declare of the pseudo-queue (or of a live reply address) is answered as
   RabbitMQ does, with no messages and one consumer; no queue by these names ever exists.
6. A channel knows its connection as a `Connection`, the protocol of what it needs of it
   (`warren.runtime.connection.AmqpConnection` makes channels, so this module does not
   import it: the runtime has no import cycle).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import re
import secrets
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from warren.amqp import methods as m
from warren.amqp.connection import Content
from warren.amqp.content import (
    EXPIRATION_FLAG,
    HEADERS_FLAG,
    PRIORITY_FLAG,
    REPLY_TO_FLAG,
    USER_ID_FLAG,
    BasicProperties,
    Message,
    content_frames,
    deliver_frames,
    encode_properties,
    get_ok_frames,
    shortstr,
)
from warren.amqp.methods import encode_method
from warren.amqp.table import TableError, Typed, decode_table, decode_table_typed
from warren.cluster.metadata import Bind, ExchangeDeclare, ExchangeDelete, Operation, Unbind
from warren.errors import (
    AmqpError,
    HardError,
    ReplyCode,
    SoftError,
    access_refused,
    describe_queue,
    not_allowed,
    not_implemented,
    precondition_failed,
    queue_not_found,
)
from warren.model import DestinationKind, ExchangeType, VHost
from warren.model.arguments import consumer_priority
from warren.model.permissions import Access, PermissionCheck
from warren.queue import Checkout, Discard, Enqueue, Got, Return, Settle
from warren.runtime.access import permission_check
from warren.runtime.confirms import Confirms
from warren.runtime.queues.host import ACCEPTED, REPLICATING, Pending, QueueHost, Refused
from warren.runtime.stats import MessageStats
from warren.runtime.transactions import CommitWait, Reply, Transaction

if TYPE_CHECKING:
    from warren.runtime.broker import Broker

REPLY_TO = "amq.rabbitmq.reply-to"
REPLY_TO_PREFIX = REPLY_TO + "."
# properties that make a publish decode its header: routing, checks, TTL, priority
_INSPECTED_FLAGS = HEADERS_FLAG | USER_ID_FLAG | EXPIRATION_FLAG | PRIORITY_FLAG | REPLY_TO_FLAG
_WRITABLE_MAX = 1024  # exchanges a channel remembers as writable
_DEFINING_CLASSES = frozenset((m.ExchangeDeclare.CLASS_ID, m.QueueDeclare.CLASS_ID))
_BOUND: dict[type[m.Method], type[m.Method]] = {  # a binding method's -ok
    m.ExchangeBind: m.ExchangeBindOk,
    m.ExchangeUnbind: m.ExchangeUnbindOk,
    m.QueueBind: m.QueueBindOk,
    m.QueueUnbind: m.QueueUnbindOk,
}
# the commonest properties, known to be well formed: none, or only a delivery mode
# Raw properties already read once that ask nothing of a publish beyond their expiration
# and priority (no user-id to check, no reply-to to rewrite, no headers for CC/BCC or a
# headers exchange): the decoded properties (a value, never changed in place), the headers
# to route with (None or empty), the TTL and the priority. A publisher that sets no message
# id, correlation id or time stamp sends the same bytes with every message, and those
# publishes neither decode nor inspect them again. Bounded: emptied when full.
_SETTLED: dict[bytes, tuple[BasicProperties, Mapping[str, Any] | None, int | None, int]] = {}
_SETTLED_MAX = 1024


class Connection(Protocol):
    """What a channel needs of its connection (`warren.runtime.connection.AmqpConnection`)."""

    delivered: bool  # a channel wrote deliveries since the connection last asked for more

    @property
    def broker(self) -> Broker: ...

    @property
    def vhost(self) -> VHost: ...

    @property
    def user(self) -> str: ...

    @property
    def peer(self) -> str: ...

    @property
    def frame_max(self) -> int: ...

    @property
    def cancel_notify(self) -> bool:
        """The client takes basic.cancel from the server (consumer_cancel_notify)."""

    @property
    def paused(self) -> bool:
        """The socket is full: deliveries wait."""

    @property
    def exclusive_queues(self) -> list[str]: ...

    def send(self, data: bytes) -> None: ...

    def send_method(self, channel: int, method: m.Method) -> None: ...

    def confirm_later(self, channel: Channel) -> None:
        """Ask `channel.pending_confirms` when the connection flushes."""

    def hold_flow(self, channel: Channel, held: bool) -> None: ...

    def suspend(self, channel: Channel, outcome: asyncio.Future[Any], then: Any) -> None:
        """Read no more methods until `outcome` is done, then call ``then(outcome)``."""

    def forget_exclusive(self, name: str) -> None: ...


def _token(node: str) -> str:
    """A direct reply-to token: random, then the node of its channel, so that a publish
    on another node (or worker) of the cluster knows where to send the reply."""
    encoded = base64.urlsafe_b64encode(node.encode()).decode().rstrip("=")
    return f"{secrets.token_urlsafe(16)}.{encoded}"


def _token_node(token: str) -> str | None:
    """The node of a direct reply-to token (`_token`); None if it names none."""
    encoded = token.partition(".")[2]
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None


class _Consumer:
    __slots__ = ("arguments", "host", "key", "no_ack", "tag", "tag_shortstr")

    def __init__(
        self,
        tag: str,
        host: QueueHost | None,
        no_ack: bool,
        arguments: Mapping[str, Typed] | None = None,
    ) -> None:
        self.tag = tag
        self.arguments = arguments or {}  # basic.consume's, as the management API shows them
        self.tag_shortstr = shortstr(tag)
        self.host = host  # None for the direct reply-to pseudo consumer
        self.no_ack = no_ack
        self.key: Hashable = object()


class Channel:
    """Broker-side state of one open channel."""

    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        self.broker = connection.broker
        self.vhost: VHost = connection.vhost
        self.next_tag = 1
        # delivery tag -> (queue host, msg_id, counted against the channel's prefetch)
        self.unacked: dict[int, tuple[QueueHost, int, bool]] = {}
        self.counted_unacked = 0
        self.consumers: dict[str, _Consumer] = {}
        self.prefetch_count = 0
        self.global_prefetch = 0
        self.confirms: Confirms | None = None  # in confirm mode
        self.durability = self.broker.durability
        self.max_message_size = self.broker.config.max_message_size
        self.replicating = 0  # publishes to quorum queues not yet committed
        self._commit_wait: CommitWait | None = None  # made by the first commit that waits
        self.transaction: Transaction | None = None
        self._permission: PermissionCheck | None = None  # see `_permit`
        self._permission_source: object = None
        self.access = self.broker.access
        self._writable: set[str] = set()  # exchanges a publish may go to (`_permit_write`)
        self._writable_version = -1
        self.last_queue = ""
        self.reply_token: str | None = None
        # server cancels held back while this channel's queue.delete runs (`_queue_delete`)
        self._cancels_held: list[m.Method] | None = None
        self.stats = MessageStats()  # message_stats of the management API
        self._handlers: dict[type, Callable[[Any], None]] = {
            m.ChannelFlow: self._flow,
            m.ChannelFlowOk: self._ignore,
            m.ExchangeDeclare: self._exchange_declare,
            m.ExchangeDelete: self._exchange_delete,
            m.ExchangeBind: self._exchange_bind,
            m.ExchangeUnbind: self._exchange_unbind,
            m.QueueDeclare: self._queue_declare,
            m.QueueBind: self._queue_bind,
            m.QueueUnbind: self._queue_unbind,
            m.QueuePurge: self._queue_purge,
            m.QueueDelete: self._queue_delete,
            m.BasicQos: self._basic_qos,
            m.BasicConsume: self._basic_consume,
            m.BasicCancel: self._basic_cancel,
            m.BasicGet: self._basic_get,
            m.BasicAck: self._basic_ack,
            m.BasicNack: self._basic_nack,
            m.BasicReject: self._basic_reject,
            m.BasicRecover: self._basic_recover,
            m.BasicRecoverAsync: self._basic_recover,
            m.ConfirmSelect: self._confirm_select,
            m.TxSelect: self._tx_select,
            m.TxCommit: self._tx_commit,
            m.TxRollback: self._tx_rollback,
        }

    # --- plumbing --------------------------------------------------------------------------

    def send(self, method: m.Method) -> None:
        wait = self._commit_wait
        if wait is not None and wait.waiting:
            wait.behind(method)
            return
        self.connection.send_method(self.number, method)

    def handle(self, method: m.Method) -> None:
        handler = self._handlers.get(type(method))
        if handler is None:
            raise HardError(
                ReplyCode.COMMAND_INVALID, f"unexpected method '{method.NAME}' from client"
            )
        handler(method)

    def _ignore(self, method: m.Method) -> None:
        pass

    def _flow(self, method: m.ChannelFlow) -> None:
        if not method.active:
            raise not_implemented("active=false")
        self.send(m.ChannelFlowOk(True))

    # --- exchanges -------------------------------------------------------------------------

    def _exchange_declare(self, method: m.ExchangeDeclare) -> None:
        if not method.passive:
            self._permit(Access.CONFIGURE, DestinationKind.EXCHANGE, method.exchange)
            declare = ExchangeDeclare(
                self.vhost.name,
                method.exchange,
                method.type,
                method.durable,
                method.auto_delete,
                method.internal,
                method.arguments,
            )
            if method.exchange not in self.vhost.exchanges and self._logged(
                method, m.ExchangeDeclareOk(), declare
            ):
                return
        exchange = self.vhost.declare_exchange(
            method.exchange,
            method.type,
            passive=method.passive,
            durable=method.durable,
            auto_delete=method.auto_delete,
            internal=method.internal,
            arguments=_typed_arguments(method.arguments),
        )
        if self.durability is not None and not method.passive:
            self.durability.exchange_declared(self.vhost, exchange)
        self._reply(method, m.ExchangeDeclareOk())

    def _exchange_delete(self, method: m.ExchangeDelete) -> None:
        self._permit(Access.CONFIGURE, DestinationKind.EXCHANGE, method.exchange)
        delete = ExchangeDelete(self.vhost.name, method.exchange, method.if_unused)
        if method.exchange in self.vhost.exchanges and self._logged(
            method, m.ExchangeDeleteOk(), delete
        ):
            return
        self.vhost.delete_exchange(method.exchange, if_unused=method.if_unused)
        if self.durability is not None:
            self.durability.exchanges_changed(self.vhost)
        self._reply(method, m.ExchangeDeleteOk())

    def _exchange_bind(self, method: m.ExchangeBind) -> None:
        exchange = DestinationKind.EXCHANGE
        self._bind(self.vhost.bind, method.destination, exchange, method.source, method)

    def _exchange_unbind(self, method: m.ExchangeUnbind) -> None:
        exchange = DestinationKind.EXCHANGE
        self._bind(self.vhost.unbind, method.destination, exchange, method.source, method)

    def _bind(
        self,
        change: Callable[..., None],
        destination: str,
        kind: DestinationKind,
        source: str,
        method: m.ExchangeBind | m.ExchangeUnbind | m.QueueBind | m.QueueUnbind,
    ) -> None:
        """Add or remove one binding and answer; `owner` lets the model refuse another's
        exclusive queue. A binding between durable ends is stored (or deleted) before the
        reply. The user must be allowed to write to the destination and read from the
        source, in that order."""
        self._permit(Access.WRITE, kind, destination)
        self._permit(Access.READ, DestinationKind.EXCHANGE, source)
        if self.access.topic_permissions:
            self._permit_topic(source, method.routing_key, write=False)
        arguments = _plain_arguments(method.arguments)
        vhost = self.vhost
        reply = _BOUND[type(method)]()
        record = vhost.queues.get(destination) if kind is DestinationKind.QUEUE else None
        if record is not None and self.broker.cluster is not None:
            record.check_access(self.connection)  # through the log, the model cannot tell
        logged = Bind if change == vhost.bind else Unbind
        binding = (destination, kind.value, source, method.routing_key, method.arguments)
        if self._logged(method, reply, logged(vhost.name, *binding)):
            return
        change(destination, kind, source, method.routing_key, arguments, owner=self.connection)
        durability = self.durability
        if durability is not None:
            if change == vhost.bind:
                durability.binding_added(
                    vhost, destination, kind, source, method.routing_key, arguments
                )
            else:
                durability.binding_removed(
                    vhost, destination, kind, source, method.routing_key, arguments
                )
        self._reply(method, reply)

    def _logged(self, method: m.Method, reply: m.Method, change: Operation) -> bool:
        """In a cluster, make a definition change through the metadata log, on every node
        this one too, and answer from what applying it gave here: `reply`, or the error the
        model refused it with (`warren.runtime.cluster.metadata`, point 2). False on a
        single node: the caller makes it at once."""
        pending = self.broker.logged_change(change)
        if pending is None:
            return False
        self.connection.suspend(self, pending, lambda done: self._applied(method, reply, done))
        return True

    def _applied(self, method: m.Method, reply: m.Method, done: asyncio.Future[object]) -> None:
        refused = done.result()
        if isinstance(refused, AmqpError):
            raise refused.at(method.CLASS_ID, method.METHOD_ID)  # as `_on_error` names it
        self._reply(method, reply)

    def _permit(self, access: Access, kind: DestinationKind, name: str) -> None:
        """403 unless the user's permission in this vhost allows `access` to the resource.
        The check is rebuilt only when the stored permission changes (or goes)."""
        source = self.access.permission(self.connection.user, self.vhost.name)
        check = self._permission
        if source is not self._permission_source or check is None:
            self._permission_source = source
            self._permission = check = permission_check(
                source, self.connection.user, self.vhost.name
            )
        check.check(access, kind, name)

    def _permit_write(self, exchange: str) -> None:
        """`_permit` for a publish, remembered per exchange until permissions change (a
        publisher then pays one set lookup per message)."""
        access = self.access
        if self._writable_version != access.version or len(self._writable) >= _WRITABLE_MAX:
            self._writable.clear()
            self._writable_version = access.version
        self._permit(Access.WRITE, DestinationKind.EXCHANGE, exchange)
        self._writable.add(exchange)

    def _permit_topic(self, exchange: str, routing_key: str, *, write: bool) -> None:
        """403 unless the user's topic permission on a topic exchange (if any) allows the
        routing key: to publish with it (`write`) or to bind with it."""
        found = self.vhost.exchanges.get(exchange)
        user, vhost = self.connection.user, self.vhost.name
        if (
            found is not None
            and found.type is ExchangeType.TOPIC
            and self.access.topic_refused(user, vhost, exchange, routing_key, write=write)
        ):
            raise access_refused(
                f"access to topic '{routing_key}' in exchange '{exchange}' in vhost"
                f" '{vhost}' refused for user '{user}'"
            )

    def _reply(self, method: m.Method, reply: m.Method) -> None:
        # in a cluster, an exchange or queue method's -ok goes once every node has the
        # definitions it changed
        settled = (
            self.broker.definitions_settled() if method.CLASS_ID in _DEFINING_CLASSES else None
        )
        if getattr(method, "nowait", False):
            return
        if settled is None:
            self.send(reply)
        else:
            self.connection.suspend(self, settled, lambda _done: self.send(reply))

    # --- queues ----------------------------------------------------------------------------

    def _queue_name(self, name: str) -> str:
        """An empty queue name means the last queue declared on this channel."""
        if name:
            return name
        if not self.last_queue:
            raise SoftError(ReplyCode.NOT_FOUND, "no previously declared queue")
        return self.last_queue

    def _host(self, name: str) -> QueueHost:
        """The queue's host, after checking it exists and this connection may use it."""
        record = self.vhost.check_queue_access(name, self.connection)
        host = self.broker.queue(self.vhost.name, record.name)
        assert host is not None
        return host

    def _queue_declare(self, method: m.QueueDeclare) -> None:
        if method.queue.startswith(REPLY_TO):
            self._declare_reply_to(method)
            return
        vhost = self.vhost
        name = method.queue or (self.last_queue if method.passive else "")
        if method.passive:
            if not name:
                raise queue_not_found(name, vhost.name)
            host = self._host(name)
        else:
            server_named = not name
            name = name or "amq.gen-" + secrets.token_urlsafe(16)
            self._permit(Access.CONFIGURE, DestinationKind.QUEUE, name)
            record, created = vhost.declare_queue(
                name,
                owner=self.connection,
                passive=False,
                durable=method.durable,
                exclusive=method.exclusive,
                auto_delete=method.auto_delete,
                arguments=_typed_arguments(method.arguments),
                server_named=server_named,
            )
            if created:
                pending: asyncio.Future[Any] | None = self.broker.replicated_declare(record)
                if pending is None and not method.exclusive:
                    # an exclusive queue lives and dies with its connection, which the
                    # metadata log cannot name: made here first
                    pending = self.broker.logged_declare(record)
                if pending is not None:  # in a cluster: declared once the metadata log
                    # has it; then this declare runs again against it
                    again = copy.copy(method)  # methods are not dataclasses
                    again.queue = name
                    self.connection.suspend(
                        self, pending, lambda done: self._declare_again(again, done)
                    )
                    return
                declared = self.broker.declare_queue(record)
                assert declared is not None
                host = declared
                if method.exclusive:
                    self.connection.exclusive_queues.append(name)
            else:
                found = self.broker.queue(vhost.name, name)
                assert found is not None
                host = found
        host.touch()
        self.last_queue = name
        if method.nowait:
            return
        counts = host.counts()
        if isinstance(counts, Pending):
            self.connection.suspend(
                self, counts.future, lambda done: self.send(m.QueueDeclareOk(name, *done.result()))
            )
        else:
            self._reply(method, m.QueueDeclareOk(name, *counts.value))

    def _declare_reply_to(self, method: m.QueueDeclare) -> None:
        """As RabbitMQ: any declare (passive or not, whatever its flags) of the direct
        reply-to pseudo-queue, or of the address of a live reply consumer, is answered as
        for a queue with no messages and one consumer; other such names do not exist."""
        name = method.queue
        token = name[len(REPLY_TO_PREFIX) :] if name.startswith(REPLY_TO_PREFIX) else ""
        node = self._reply_node(token)
        if node is not None and self.broker.cluster is not None:  # its channel is there
            live = self.broker.cluster.reply_live(node, token)
            then = functools.partial(self._declared_reply_to, method)
            self.connection.suspend(self, live, lambda done: then(done.result()))
            return
        self._declared_reply_to(method, name == REPLY_TO or token in self.broker.reply_to)

    def _declared_reply_to(self, method: m.QueueDeclare, live: bool) -> None:
        if not live:
            raise queue_not_found(method.queue, self.vhost.name)
        self.last_queue = method.queue
        self._reply(method, m.QueueDeclareOk(method.queue, 0, 1))

    def _reply_node(self, token: str) -> str | None:
        """The other node of the cluster whose channel a direct reply-to token is (None:
        this node's, or no node's)."""
        node = _token_node(token)
        cluster = self.broker.cluster
        if cluster is None or node is None or node not in cluster.nodes:
            return None
        return None if node == self.broker.config.node_name else node

    def _declare_again(self, method: m.QueueDeclare, done: asyncio.Future[object]) -> None:
        done.result()
        if method.queue not in self.vhost.queues:
            raise SoftError(ReplyCode.INTERNAL_ERROR, "the queue's declare was not applied")
        self._queue_declare(method)

    def _queue_bind(self, method: m.QueueBind) -> None:
        queue = self._queue_name(method.queue)
        self._bind(self.vhost.bind, queue, DestinationKind.QUEUE, method.exchange, method)

    def _queue_unbind(self, method: m.QueueUnbind) -> None:
        queue = self._queue_name(method.queue)
        self._bind(self.vhost.unbind, queue, DestinationKind.QUEUE, method.exchange, method)

    def _queue_purge(self, method: m.QueuePurge) -> None:
        name = self._queue_name(method.queue)
        self._permit(Access.READ, DestinationKind.QUEUE, name)
        host = self._host(name)
        count = host.purge()
        if isinstance(count, Pending):  # a quorum queue's leader answers
            self.connection.suspend(
                self, count.future, lambda done: self._reply(method, m.QueuePurgeOk(done.result()))
            )
        else:
            self._reply(method, m.QueuePurgeOk(count.value))

    def _queue_delete(self, method: m.QueueDelete) -> None:
        name = self._queue_name(method.queue)
        self._permit(Access.CONFIGURE, DestinationKind.QUEUE, name)
        vhost = self.vhost
        if name not in vhost.queues:
            count = 0
        else:
            host = self._host(name)
            where = f"queue '{name}' in vhost '{vhost.name}'"
            if method.if_unused and host.machine.consumer_count:
                raise precondition_failed(f"{where} in use")
            if method.if_empty and host.machine.ready_count:
                raise precondition_failed(f"{where} not empty")
            # RabbitMQ answers delete-ok before it cancels this channel's own consumers
            self._cancels_held = []
            pending = self.broker.client_delete(host, method.if_unused, method.if_empty)
            if pending is not None:  # in a cluster: through the metadata log, or the home
                answer = functools.partial(self._deleted, method, name)
                self.connection.suspend(self, pending, lambda done: answer(done.result))
            else:
                self._deleted(method, name, lambda: self.broker.delete_queue(vhost, name))
            return
        self._reply(method, m.QueueDeleteOk(count))

    def _deleted(self, method: m.QueueDelete, name: str, count: Callable[[], object]) -> None:
        """Answer a queue.delete with the count it gave, then send the cancels of this
        channel's consumers that it held back."""
        try:
            deleted = count()
        finally:
            cancels, self._cancels_held = self._cancels_held or [], None
        assert isinstance(deleted, int)
        self.connection.forget_exclusive(name)
        self._reply(method, m.QueueDeleteOk(deleted))
        for cancel in cancels:
            self.send(cancel)

    # --- consumers -------------------------------------------------------------------------

    def _basic_qos(self, method: m.BasicQos) -> None:
        if method.prefetch_size:
            raise not_implemented(f"prefetch_size!=0 ({method.prefetch_size})")
        if method.global_:
            self.global_prefetch = method.prefetch_count
            for consumer in self.consumers.values():
                if consumer.host is not None:
                    consumer.host.limit(self)
            self.send(m.BasicQosOk())
            self.dispatch_consumers()
        else:
            self.prefetch_count = method.prefetch_count
            self.send(m.BasicQosOk())

    def _basic_consume(self, method: m.BasicConsume) -> None:
        tag = method.consumer_tag or "amq.ctag-" + secrets.token_urlsafe(16)
        if tag in self.consumers:
            raise not_allowed(f"attempt to reuse consumer tag '{tag}'")
        if method.queue == REPLY_TO:
            self._consume_reply_to(method, tag)
            return
        name = self._queue_name(method.queue)
        self._permit(Access.READ, DestinationKind.QUEUE, name)
        host = self._host(name)
        if self.global_prefetch and not host.machine.settings.global_qos:
            where = describe_queue(name, self.vhost.name)
            raise not_implemented(f"{where} does not support global qos")
        record = self.vhost.queues[name]
        arguments = _typed_arguments(method.arguments)
        priority = consumer_priority(name, self.vhost.name, record.queue_type, arguments)
        consumer = _Consumer(tag, host, method.no_ack, arguments)
        command = Checkout(
            consumer=consumer.key,
            channel=self,
            prefetch_count=self.prefetch_count,
            no_ack=method.no_ack,
            exclusive=method.exclusive,
            priority=priority,
        )
        limited = bool(self.global_prefetch) or self.connection.paused
        outcome = host.subscribe(self, tag, command, limited)
        if type(outcome) is Refused:
            assert outcome.error is not None
            raise outcome.error
        self.consumers[tag] = consumer
        if type(outcome) is Pending:  # a classic queue's home on another node
            self.connection.suspend(
                self, outcome.future, lambda done: self._consumed(method, consumer, done)
            )
            return
        self._reply(method, m.BasicConsumeOk(tag))
        host.started(consumer.key)

    def _consumed(
        self, method: m.BasicConsume, consumer: _Consumer, done: asyncio.Future[None]
    ) -> None:
        """The home added the consumer (or refused it: the error closes the channel)."""
        if done.exception() is not None:
            self.consumers.pop(consumer.tag, None)
        done.result()
        self._reply(method, m.BasicConsumeOk(consumer.tag))
        assert consumer.host is not None
        consumer.host.started(consumer.key)

    def _consume_reply_to(self, method: m.BasicConsume, tag: str) -> None:
        if not method.no_ack:
            raise precondition_failed("reply consumer cannot acknowledge")
        if self.reply_token is not None:
            raise precondition_failed("reply consumer already set")
        self.reply_token = _token(self.broker.config.node_name)
        self.broker.reply_to[self.reply_token] = self
        self.consumers[tag] = _Consumer(tag, None, True)
        self._reply(method, m.BasicConsumeOk(tag))

    def _basic_cancel(self, method: m.BasicCancel) -> None:
        self._cancel_consumer(method.consumer_tag)
        self._reply(method, m.BasicCancelOk(method.consumer_tag))

    def _cancel_consumer(self, tag: str) -> None:
        consumer = self.consumers.pop(tag, None)
        if consumer is None:
            return
        host = consumer.host
        if host is None:
            self._drop_reply_to()
            return
        host.unsubscribe(consumer.key)
        self.broker.auto_delete(host)

    def _drop_reply_to(self) -> None:
        if self.reply_token is not None:
            self.broker.reply_to.pop(self.reply_token, None)
            self.reply_token = None

    def queue_deleted(self, consumer_tag: str) -> None:
        """The queue went away under a consumer: tell the client (consumer_cancel_notify)."""
        if self.consumers.pop(consumer_tag, None) is None:
            return
        if self.connection.cancel_notify:
            if self._cancels_held is not None:
                self._cancels_held.append(m.BasicCancel(consumer_tag, True))
            else:
                self.send(m.BasicCancel(consumer_tag, True))

    def blocked(self) -> bool:
        return self.connection.paused

    def credit(self) -> int | None:
        if self.global_prefetch:
            return max(0, self.global_prefetch - self.counted_unacked)
        return None

    def deliver(self, consumer_tag: str, entry: Any, host: QueueHost) -> None:
        consumer = self.consumers[consumer_tag]
        tag = self.next_tag
        self.next_tag = tag + 1
        stats = self.stats
        queue_stats = host.stats
        if not consumer.no_ack:
            self.unacked[tag] = (host, entry.msg_id, True)
            self.counted_unacked += 1
            stats.deliver += 1
            queue_stats.deliver += 1
        else:
            stats.deliver_no_ack += 1
            queue_stats.deliver_no_ack += 1
        message = entry.message
        if entry.delivery_count > 1:
            stats.redeliver += 1
            queue_stats.redeliver += 1
            if host.machine.settings.delivery_count_header:
                message = with_delivery_count(message, entry.delivery_count - 1)
        self.connection.delivered = True
        self.connection.send(
            deliver_frames(
                self.number,
                consumer.tag_shortstr,
                tag,
                entry.delivery_count > 1,
                message,
                self.connection.frame_max,
            )
        )

    def deliver_reply(self, message: Message) -> None:
        for consumer in self.consumers.values():
            if consumer.host is None:
                tag = self.next_tag
                self.next_tag = tag + 1
                self.connection.send(
                    deliver_frames(
                        self.number,
                        consumer.tag_shortstr,
                        tag,
                        False,
                        message,
                        self.connection.frame_max,
                    )
                )
                return

    def dispatch_consumers(self) -> None:
        for host in {id(c.host): c.host for c in self.consumers.values() if c.host}.values():
            host.dispatch()

    # --- basic.get and settlement ----------------------------------------------------------

    def _basic_get(self, method: m.BasicGet) -> None:
        name = self._queue_name(method.queue)
        self._permit(Access.READ, DestinationKind.QUEUE, name)
        host = self._host(name)
        outcome = host.get(method.no_ack)
        if isinstance(outcome, Pending):  # a quorum queue's leader answers
            self.connection.suspend(
                self, outcome.future, lambda done: self._got(host, method.no_ack, done.result())
            )
        else:
            self._got(host, method.no_ack, outcome.value)

    def _got(self, host: QueueHost, no_ack: bool, reply: Got | None) -> None:
        stats = self.stats
        if reply is None:
            stats.get_empty += 1
            host.stats.get_empty += 1
            self.send(m.BasicGetEmpty())
            return
        entry = reply.entry
        tag = self.next_tag
        self.next_tag = tag + 1
        if not no_ack:
            self.unacked[tag] = (host, entry.msg_id, False)
            stats.get += 1
            host.stats.get += 1
        else:
            stats.get_no_ack += 1
            host.stats.get_no_ack += 1
        if entry.delivery_count > 1:
            stats.redeliver += 1
            host.stats.redeliver += 1
        message = entry.message
        assert isinstance(message, Message)  # the host made it resident
        if host.machine.settings.delivery_count_header:  # also a first fetch's 0, as RabbitMQ
            message = with_delivery_count(message, entry.delivery_count - 1)
        self._send_frames(
            get_ok_frames(
                self.number,
                tag,
                entry.delivery_count > 1,
                message,
                reply.remaining,
                self.connection.frame_max,
            )
        )

    def _take(self, delivery_tag: int, multiple: bool) -> list[tuple[int, Any]]:
        """Remove and return the unacked entries an ack/nack/reject names."""
        unacked = self.unacked
        if multiple:
            if delivery_tag == 0:
                taken = list(unacked.items())
                unacked.clear()
                return taken
            if delivery_tag not in unacked:
                raise precondition_failed(f"unknown delivery tag {delivery_tag}")
            taken = []
            for tag in list(unacked):
                if tag > delivery_tag:
                    break
                taken.append((tag, unacked.pop(tag)))
            return taken
        held = unacked.pop(delivery_tag, None)
        if held is None:
            raise precondition_failed(f"unknown delivery tag {delivery_tag}")
        return [(delivery_tag, held)]

    def _basic_ack(self, method: m.BasicAck) -> None:
        taken = self._take(method.delivery_tag, method.multiple)
        self.stats.ack += len(taken)
        self._settle(Settle, taken)

    def _basic_nack(self, method: m.BasicNack) -> None:
        taken = self._take(method.delivery_tag, method.multiple)
        self._settle(Return if method.requeue else Discard, taken)

    def _basic_reject(self, method: m.BasicReject) -> None:
        self._settle(Return if method.requeue else Discard, self._take(method.delivery_tag, False))

    def _settle(self, command: type, taken: list[tuple[int, Any]]) -> None:
        if self.transaction is not None:
            self.transaction.settlements.append((command, taken))
            return
        self._apply_settlement(command, taken)

    def _apply_settlement(self, command: type, taken: list[tuple[int, Any]]) -> None:
        by_host: dict[int, tuple[QueueHost, list[int]]] = {}
        counted = 0
        for _tag, (host, msg_id, is_counted) in taken:
            counted += is_counted
            group = by_host.get(id(host))
            if group is None:
                by_host[id(host)] = (host, [msg_id])
            else:
                group[1].append(msg_id)
        self.counted_unacked -= counted
        for host, msg_ids in by_host.values():
            if not self._is_live(host):
                continue  # the queue was deleted meanwhile: RabbitMQ ignores the settlement
            if command is Settle:
                host.stats.ack += len(msg_ids)
            host.settle(command(msg_ids))
        if self.global_prefetch and counted:
            self.dispatch_consumers()

    def _is_live(self, host: QueueHost) -> bool:
        """Whether `host` still serves its queue (not deleted, nor declared anew)."""
        return self.broker.queues.get((host.record.vhost, host.record.name)) is host

    def _basic_recover(self, method: m.BasicRecover | m.BasicRecoverAsync) -> None:
        if not method.requeue:
            raise not_implemented("requeue=false")
        self.requeue_all()
        if isinstance(method, m.BasicRecover):
            self.send(m.BasicRecoverOk())

    def requeue_all(self) -> None:
        taken = list(self.unacked.items())
        self.unacked.clear()
        self._apply_settlement(Return, taken)

    # --- publishing ------------------------------------------------------------------------

    def publish(self, content: Content) -> None:
        if content.method.immediate:
            raise not_implemented("immediate=true").at(60, 40)
        if len(content.body) > self.max_message_size:
            raise precondition_failed(
                f"message size {len(content.body)} is larger than configured max size"
                f" {self.max_message_size}"
            ).at(60, 40)
        exchange = content.method.exchange
        if self._writable_version != self.access.version or exchange not in self._writable:
            self._permit_write(exchange)
        if self.transaction is not None:
            self.transaction.publishes.append(content)
            return
        self._publish(content)

    def _publish(self, content: Content) -> None:
        method = content.method
        exchange = method.exchange
        routing_keys = [method.routing_key]
        raw = content.properties_raw
        settled = _SETTLED.get(raw)
        if settled is None:
            message = Message(exchange, method.routing_key, raw, content.body, content.route)
            headers, ttl_ms, priority = self._read_properties(message, routing_keys)
        else:
            properties, headers, ttl_ms, priority = settled
            message = Message(
                exchange, method.routing_key, raw, content.body, content.route, properties
            )
        if not exchange and method.routing_key.startswith(REPLY_TO_PREFIX):
            self._publish_reply(method, message)
            return
        vhost = self.vhost
        queues = vhost.route(exchange, routing_keys, headers)
        if self.access.topic_permissions:
            self._permit_topic(exchange, method.routing_key, write=True)
        self.stats.publish += 1
        vhost.exchanges[exchange].count_publish(bool(queues))
        broker_queues = self.broker.queues
        vhost_name = vhost.name
        enqueue = Enqueue(message, len(content.body), ttl_ms, priority)
        rejected = False
        confirms = self.confirms
        replicated: list[asyncio.Future[bool]] | None = None
        if confirms is None:
            tag = 0
            log = None
        else:
            tag = confirms.next_tag
            durability = self.durability
            log = durability.log if durability is not None else None
            # a durable queue that logs the message appends to the log: the confirm waits
            logged_from = log.next_sequence if log is not None else 0
        for name in queues:
            host = broker_queues[vhost_name, name]
            host.stats.publish += 1
            outcome = host.publish(enqueue, self, tag)
            if outcome is ACCEPTED:
                continue
            if outcome is REPLICATING:  # a quorum queue: it tells `replicated`
                self._count_replicating()
                if confirms is not None:
                    confirms.expect(host)
            elif type(outcome) is Pending:
                # a home elsewhere: the outcome comes once it has it
                future = outcome.future
                self._count_replicating()
                future.add_done_callback(self._replication_done)
                if replicated is None:
                    replicated = [future]
                else:
                    replicated.append(future)
            else:
                rejected = True
        if not queues:
            if method.mandatory:
                self.stats.return_unroutable += 1
                self._return(message, ReplyCode.NO_ROUTE, "NO_ROUTE")
            else:
                self.stats.drop_unroutable += 1
        if confirms is not None:
            # the log sequence its confirm waits for if it logged, else 0
            logged_to = log.next_sequence if log is not None else 0
            log_sequence = logged_to - 1 if logged_to != logged_from else 0
            confirms.published(rejected, replicated, log_sequence)

    def _count_replicating(self) -> None:
        """Flow control (RabbitMQ's quorum_commands_soft_limit): past the limit of publishes
        to quorum queues waiting for their commit, the connection stops reading until fewer
        than the limit wait (rabbit_fifo_client unblocks below its soft limit, not at half
        of it: with half, a confirmed publisher ran at three quarters of the window), so a
        fast publisher cannot pile up commands in memory."""
        self.replicating += 1
        if self.replicating > self.broker.config.quorum_commands_soft_limit:
            self.connection.hold_flow(self, True)

    def _replication_done(self, _done: asyncio.Future[bool]) -> None:
        self._replicated(1)

    def replicated(self, host: QueueHost, upto: int, count: int, refused: list[int] | None) -> None:
        """A quorum queue is done with `count` of this channel's publishes (`Publisher`)."""
        self._replicated(count)
        if self.confirms is not None:
            self.confirms.replicated(host, upto, refused)

    def _replicated(self, count: int) -> None:
        self.replicating -= count
        if self.replicating < self.broker.config.quorum_commands_soft_limit:
            self.connection.hold_flow(self, False)

    def _read_properties(
        self, message: Message, routing_keys: list[str]
    ) -> tuple[Mapping[str, Any] | None, int | None, int]:
        """Properties not seen before: decoded (502 if malformed, so that no consumer gets
        bytes it cannot parse), inspected, and remembered in `_SETTLED` when the next
        publish with the same bytes may skip all that. The headers to route with, the TTL
        and the priority."""
        raw = message.properties_raw
        properties = message.properties
        headers = None
        ttl_ms = None
        if ((raw[0] << 8) | raw[1]) & _INSPECTED_FLAGS:  # decoded: two bytes at least
            headers = self._inspect_properties(message, routing_keys)
            if properties.expiration is not None:
                ttl_ms = parse_expiration(properties.expiration)
        priority = properties.priority or 0
        # Bytes that name one message (its id, correlation id or time stamp) do not come
        # again. Without a user-id, a reply-to or headers the inspection changed nothing:
        # the next publish of these bytes needs only what this one found.
        if (
            properties.message_id is None
            and properties.correlation_id is None
            and properties.timestamp is None
            and properties.user_id is None
            and properties.reply_to is None
            and not properties.headers
        ):
            if len(_SETTLED) >= _SETTLED_MAX:
                _SETTLED.clear()
            _SETTLED[raw] = (properties, headers, ttl_ms, priority)
        return headers, ttl_ms, priority

    def _inspect_properties(self, message: Message, routing_keys: list[str]) -> Any:
        """Check user_id, expand CC/BCC and rewrite a direct reply-to address."""
        properties = message.properties
        user = self.connection.user
        if properties.user_id is not None and properties.user_id != user:
            raise precondition_failed(
                f"user_id property set to '{properties.user_id}' but authenticated user "
                f"was '{user}'"
            )
        headers = properties.headers
        changed = False
        if headers:
            for key in ("CC", "BCC"):
                keys = headers.get(key)
                if isinstance(keys, list):
                    routing_keys.extend(str(k) for k in keys if isinstance(k, str))
            if "BCC" in headers:
                headers = {k: v for k, v in headers.items() if k != "BCC"}
                properties = replace(properties, headers=headers)
                changed = True
        if properties.reply_to == REPLY_TO:
            if self.reply_token is None:
                raise precondition_failed("fast reply consumer does not exist")
            properties = replace(properties, reply_to=REPLY_TO_PREFIX + self.reply_token)
            changed = True
        if changed:
            message.properties_raw = encode_properties(properties)
            message._properties = properties
        return headers

    def _publish_reply(self, method: m.BasicPublish, message: Message) -> None:
        token = method.routing_key[len(REPLY_TO_PREFIX) :]
        target = self.broker.reply_to.get(token)
        node = self._reply_node(token)
        if target is not None:
            target.deliver_reply(message)
        elif node is not None and self.broker.cluster is not None:
            self.broker.cluster.send_reply(node, token, message)  # routed: its node delivers
        elif method.mandatory:
            self._return(message, ReplyCode.NO_ROUTE, "NO_ROUTE")
        if self.confirms is not None:
            self.confirms.published(False, None, 0)

    def _return(self, message: Message, code: int, text: str) -> None:
        payload = encode_method(m.BasicReturn(code, text, message.exchange, message.routing_key))
        self.connection.send(
            content_frames(
                self.number,
                payload,
                message.properties_raw,
                message.body,
                self.connection.frame_max,
            )
        )

    def pending_confirms(self) -> list[m.Method]:
        """The acks and nacks that may go now (the connection asks when it flushes)."""
        return [] if self.confirms is None else self.confirms.pending()

    def _send_frames(self, data: bytes) -> None:
        """Frames of a reply (basic.get-ok): behind a waiting tx.commit-ok if there is one."""
        wait = self._commit_wait
        if wait is not None and wait.waiting:
            wait.behind(data)
            return
        self.connection.send(data)

    def _write(self, reply: Reply) -> None:
        """A reply that waited behind a tx.commit-ok (`CommitWait`)."""
        if isinstance(reply, bytes):
            self.connection.send(reply)
        else:
            self.connection.send_method(self.number, reply)

    # --- confirms and transactions ---------------------------------------------------------

    def _confirm_select(self, method: m.ConfirmSelect) -> None:
        if self.transaction is not None:
            raise precondition_failed("cannot switch from tx to confirm mode")
        if self.confirms is None:
            flush_later = functools.partial(self.connection.confirm_later, self)
            self.confirms = Confirms(self.durability, flush_later, self.send, self.stats)
        self._reply(method, m.ConfirmSelectOk())

    def _tx_select(self, method: m.TxSelect) -> None:
        if self.confirms is not None:
            raise precondition_failed("cannot switch from confirm to tx mode")
        if self.transaction is None:
            self.transaction = Transaction()
        self.send(m.TxSelectOk())

    def _require_transaction(self) -> Transaction:
        if self.transaction is None:
            raise precondition_failed("channel is not transactional")
        return self.transaction

    def _tx_commit(self, method: m.TxCommit) -> None:
        transaction = self._require_transaction()
        self.transaction = Transaction()
        durability = self.durability
        logged_from = durability.log.next_sequence if durability is not None else 0
        for content in transaction.publishes:
            self._publish(content)
        for command, taken in transaction.settlements:
            self._apply_settlement(command, taken)
        if durability is not None and transaction.settlements:
            durability.write_deferred()  # the acks' records, for the commit-ok to wait for
        if durability is not None and durability.log.next_sequence != logged_from:
            needed = durability.log.next_sequence - 1
            if needed > durability.log.durable_sequence:
                # persistent messages (or acks) went to the log: commit-ok once it is durable
                if self._commit_wait is None:
                    self._commit_wait = CommitWait(durability, self._write)
                self._commit_wait.commit_ok(needed)
                return
        self.send(m.TxCommitOk())

    def _tx_rollback(self, method: m.TxRollback) -> None:
        transaction = self._require_transaction()
        self.transaction = Transaction()
        self.unacked.update(transaction.taken())
        self.unacked = dict(sorted(self.unacked.items()))
        self.send(m.TxRollbackOk())

    # --- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """The channel is gone: cancel its consumers and requeue what it held."""
        self.broker.retire_stats(self.vhost.name, self.stats)
        if self.confirms is not None:
            self.confirms.close()
        if self._commit_wait is not None:
            self._commit_wait.close()
        for tag in list(self.consumers):
            self._cancel_consumer(tag)
        self._drop_reply_to()
        if self.transaction is not None:
            self.unacked.update(self.transaction.taken())
            self.transaction = None
        self.requeue_all()


_EXPIRATION = re.compile(r"([+-]?[0-9]+)(.*)", re.DOTALL)


def parse_expiration(text: str) -> int:
    """The expiration property as RabbitMQ reads it (rabbit_basic:parse_expiration)."""
    match = _EXPIRATION.fullmatch(text)
    if match is None:
        reason = "no_integer"
    elif match.group(2):
        reason = f'{{leftover_string,"{match.group(2)}"}}'
    elif int(match.group(1)) < 0:
        reason = f"{{value_negative,{int(match.group(1))}}}"
    else:
        return int(match.group(1))
    raise precondition_failed(f"invalid expiration '{text}': {reason}")


def _typed_arguments(raw: bytes) -> dict[str, Typed]:
    try:
        return decode_table_typed(raw)
    except TableError as error:  # pragma: no cover - the frame decoder checked the table
        raise precondition_failed(f"malformed arguments: {error}") from error


def _plain_arguments(raw: bytes) -> dict[str, object]:
    return decode_table(raw) if raw != b"\x00\x00\x00\x00" else {}


def with_delivery_count(message: Message, count: int) -> Message:
    """`message` with ``x-delivery-count`` (a long, as RabbitMQ's quorum queues send it):
    the times it was returned before this delivery. The queue keeps the message as it was."""
    properties = message.properties
    headers = dict(properties.headers or {})
    headers["x-delivery-count"] = Typed("l", count)
    raw = encode_properties(replace(properties, headers=headers))
    return Message(message.exchange, message.routing_key, raw, message.body, message.route)
