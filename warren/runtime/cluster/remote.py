"""Queues served across nodes: classic queues used from any node, and deliveries to the
consumers of a quorum queue on nodes that hold no replica of it.

Theory of operation:
1. A classic queue lives on its *home*, the node that declared it. Its record (with the
   home) reaches every node through the metadata group (`TransientDefinitions`), and each
   other node gets a `RemoteHost` for it: a `QueueHost` whose commands go to the home,
   and whose answers are `Pending` until the home's come back.
2. A proxy sends its home `Call`s over the nodes' link (`Peers.send`: in order, batched
   per loop turn; the messages are `warren.runtime.cluster.calls`): commands, consumers
   added and cancelled, declare-ok counts, deletes. What needs an answer carries a call
   number and the home answers with a `CallReply` (or `CallError`), so commands from one
   node apply in the order that node sent them. A
   publish is answered once the home has it; a persistent message in a durable queue
   once the home's log is durable, so the publisher's confirm means what it means on the
   home itself.
3. A consumer on another node is a `RemoteConsumer` on the home: the queue host's
   subscriber for it, which sends each delivery to the consumer's node; the queue machine
   applies the consumer's prefetch as for a local one, and the node settles through its
   proxy. Deliveries that arrive before the channel sent consume-ok wait in the proxy.
   A channel-wide prefetch (basic.qos global) is its channel's, on the consumer's node:
   the home sends at most that many unacknowledged messages to the consumer (its prefetch
   there is the smaller of the two), and the proxy holds what arrives while the channel
   has no credit left, handing it on in order as acks give credit back (`dispatch`), so
   the client never has more than the channel's prefetch unacknowledged across all its
   queues. What the proxy holds is unacknowledged at the home (no other consumer gets
   it) and goes back there if the consumer is cancelled.
4. Failures. When the link to a node goes down (or comes up: the other side may have
   seen a link go that this side saw replaced), the home cancels that node's consumers
   and returns what they and that node's basic.gets held (``Cancel(requeue=True)``). The
   node cancels its consumers of the home's queues (basic.cancel, consumer_cancel_notify),
   fails what waits for an answer, and puts a fresh proxy in place of the old one, so a
   late ack meant for the old link never settles a message the home has given to another
   consumer since. While the home is unreachable its queues answer 404, "home node ... is
   down or inaccessible", as RabbitMQ's do.
5. Quorum queues: a consumer's deliveries are made by its own node from its replica; for
   a consumer on a node that holds no replica the leader sends them (a `Delivery`, the
   same as a classic home's), and a new leader sends again what such consumers hold.
   The node keeps the msg_ids it handed to each such consumer until they are settled and
   drops a delivery it already made (`warren.runtime.cluster.quorum.Handed`), so no
   duplicate reaches the client.
6. The metadata log says what changed, not what a restarted node forgot (the records of
   other nodes' classic queues, non-durable exchanges and bindings are not stored), so
   when a link comes up each node sends the other what it holds of these, with its own
   classic queues as they are now: the other makes what it misses and drops its proxies
   of queues the node no longer has (a non-durable queue does not survive its home's
   restart, as in RabbitMQ), except a queue whose declare or delete it applied from the
   log after the index the list was taken at (a delete the log took while the link was
   down can reach the other node before this list does). The nodes it heard this from
   since their links came up are ``heard``: a restarted node dead-letters what expired
   while it was down once it has heard from every other node (`ClusterNode.queues_known`).
7. The management API of a node shows another node's classic queue with the counts its
   home answers when asked (``counters``): ready and unacknowledged messages and bytes,
   and consumers.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from warren.cluster.metadata import ClassicQueue, DeleteClassicQueue, Operation, PutBinding
from warren.cluster.queue_entries import from_record, message, to_record
from warren.errors import (
    AmqpError,
    ReplyCode,
    SoftError,
    describe_queue,
    precondition_failed,
    queue_not_found,
)
from warren.model import QueueRecord
from warren.queue import (
    Checkout,
    Configure,
    Counters,
    Discard,
    Enqueue,
    Entry,
    Get,
    Got,
    Meta,
    Purge,
    QueueMachine,
    Return,
    Settle,
    SettleDeadLetter,
)
from warren.runtime.cluster.calls import (
    AnyQueueRequest,
    Call,
    CallError,
    CallReply,
    CancelConsumer,
    Consume,
    ConsumerCancelled,
    ConsumerKey,
    Definitions,
    DeleteQueue,
    Delivery,
    EntryRecord,
    PeerMessage,
    QueueCommand,
    QueueCounters,
    QueueCounts,
    QueueRequest,
    Reply,
    call_reply,
    call_value,
)
from warren.runtime.queues.classic import ClassicHost
from warren.runtime.queues.clock import now_ms
from warren.runtime.queues.host import (
    ACCEPTED,
    Answer,
    ConsumerRef,
    HostFields,
    Outcome,
    Pending,
    Placement,
    Published,
    Publisher,
    QueueHost,
    Refused,
    Subscriber,
)
from warren.storage.definitions import BindingDefinition

if TYPE_CHECKING:
    from warren.runtime.broker import Broker
    from warren.runtime.cluster.peers import PeerLinks


def copy_entry(entry: Entry) -> Entry:
    """A message handed out as it is now: the queue's own entry may change meanwhile."""
    copy = Entry(entry.msg_id, entry.message, entry.size_bytes, None, entry.level)
    copy.delivery_count = entry.delivery_count
    return copy


def home_down(record: QueueRecord, home: str) -> SoftError:
    durable = "durable " if record.durable else ""
    where = describe_queue(record.name, record.vhost)
    return SoftError(
        ReplyCode.NOT_FOUND, f"home node '{home}' of {durable}{where} is down or inaccessible"
    )


@runtime_checkable
class Receiver(Protocol):
    """A queue host that takes deliveries sent by another node (`RemoteHost`, and
    `QuorumHost` on a node that holds no replica)."""

    def delivered(self, key: Hashable, entry: Entry, index: int, sender: str) -> None: ...

    def cancelled(self, key: Hashable) -> None: ...


class RemoteConsumer:
    """On a queue's home: a consumer on another node, as the queue host's subscriber."""

    __slots__ = ("key", "node", "queues", "record")

    def __init__(
        self, queues: RemoteQueues, node: str, key: ConsumerKey, record: QueueRecord
    ) -> None:
        self.queues = queues
        self.node = node
        self.key = key
        self.record = record

    def credit(self) -> int | None:
        return None  # the consumer's prefetch is the machine's; a channel-wide one stays local

    global_prefetch = 0  # the consumer's node applies its channel's (module doc, 3)

    def blocked(self) -> bool:
        return False

    def deliver(self, consumer_tag: str, entry: Entry, host: QueueHost) -> None:
        self.queues.hand(self.node, host.record, self.key, entry)

    def queue_deleted(self, consumer_tag: str) -> None:
        self.queues.consumer_gone(self.node, self.key)
        self.queues.cancel(self.node, self.record, self.key)


class RemoteHost(HostFields):
    """A classic queue whose home is another node, used by this node's channels."""

    def __init__(self, queues: RemoteQueues, record: QueueRecord, home: str) -> None:
        super().__init__(queues.broker, record)  # auto-delete is the home's to decide
        self.queues = queues
        self.home = home
        self.attached = True  # False once the link to the home went down (module doc, 4)
        self.policy, self.operator_policy = self.broker.policies_of(record)
        settings = self.broker.settings_of(record, self.policy, self.operator_policy)
        # stays empty: channels read its settings (delivery-count header, global qos)
        self.machine = QueueMachine(record.name, record.vhost, settings, last_used_ms=now_ms())
        self._consumers: dict[Hashable, ConsumerRef] = {}  # by our key
        self._wire_keys: dict[Hashable, ConsumerKey] = {}  # a channel's key -> ours
        self._waiting: dict[Hashable, list[Entry]] = {}  # deliveries before consume-ok
        # deliveries past the channel's global prefetch (module doc, 3), by our key
        self._held: dict[Hashable, deque[Entry]] = {}

    @property
    def placement(self) -> Placement:
        return Placement.REMOTE

    @property
    def _where(self) -> tuple[str, str]:
        return self.record.vhost, self.record.name

    def _send(self, request: AnyQueueRequest) -> None:
        """A request the home answers nobody for (a settlement, a consumer cancelled)."""
        if self.attached:
            self.queues.peers.send(self.home, Call(0, request))

    # --- what channels call (`QueueHost`) ----------------------------------------------------
    # Publishes, gets and purges are answered by the home; settlements go one way; what the
    # home does by itself (dispatch, timers, settings) is not sent.

    def publish(
        self, command: Enqueue, publisher: Publisher | None = None, tag: int = 0
    ) -> Published:
        self.queues.sent += 1
        return Pending(self.queues.call(self, QueueCommand(*self._where, to_record(command))))

    def get(self, no_ack: bool) -> Answer[Got | None]:
        request = QueueCommand(*self._where, to_record(Get(no_ack)))
        return Pending(self.queues.call(self, request))

    def purge(self) -> Answer[int]:
        return Pending(self.queues.call(self, QueueCommand(*self._where, to_record(Purge()))))

    def counts(self) -> Answer[tuple[int, int]]:
        return Pending(self.queues.call(self, QueueCounts(*self._where)))

    def counters(self) -> asyncio.Future[Counters]:
        """The home's message and consumer counts, for the management API (module doc, 7)."""
        return self.queues.call(self, QueueCounters(*self._where))

    def settle(self, command: Settle | Return | Discard | SettleDeadLetter) -> None:
        self._send(QueueCommand(*self._where, to_record(command)))

    def touch(self) -> None:
        """The home counts x-expires from its own use."""

    def forward_delete(self, if_unused: bool, if_empty: bool) -> asyncio.Future[int] | None:
        """queue.delete at the home; its answer is the ready count (None while the
        metadata log's delete is being applied here)."""
        if self.queues.cluster.applying:
            return None
        request = DeleteQueue(*self._where, if_unused, if_empty)
        answer: asyncio.Future[int] = self.queues.call(self, request)
        answer.add_done_callback(self._deleted)
        return answer

    def _deleted(self, done: asyncio.Future[int]) -> None:
        """Gone from here at once: the home's metadata operation, applied here a little
        later, then finds nothing to delete."""
        key = (self.record.vhost, self.name)
        broker = self.queues.broker
        queues = broker.queues
        if done.exception() is not None or queues.get(key) is not self:
            return
        del queues[key]
        vhost = self.broker.vhosts.get(self.record.vhost)
        if vhost is not None and self.name in vhost.queues:
            vhost.delete_queue(self.name)
        self.cancel_all()

    def subscribe(
        self, channel: Subscriber, tag: str, command: Checkout, limited: bool
    ) -> Outcome[None]:
        """The home adds the consumer: the answer is pending, failed if the home refuses
        it (or is down); `started` releases deliveries after consume-ok."""
        key = self.queues.consumer_key()
        self._consumers[key] = ConsumerRef(channel, tag, command.no_ack)
        self._wire_keys[command.consumer] = key
        self._waiting[key] = []
        prefetch = command.prefetch_count
        if channel.global_prefetch and not command.no_ack:
            prefetch = min(prefetch or channel.global_prefetch, channel.global_prefetch)
        request = Consume(
            *self._where,
            key,
            prefetch,
            command.no_ack,
            command.exclusive,
            command.priority,
        )
        answer: asyncio.Future[None] = self.queues.call(self, request)
        answer.add_done_callback(lambda done: self._consumed(key, done))
        return Pending(answer)

    def _consumed(self, key: ConsumerKey, done: asyncio.Future[None]) -> None:
        if done.cancelled() or done.exception() is not None:
            self._forget(key)

    def started(self, key: Hashable) -> None:
        """After consume-ok: what the home delivered meanwhile goes to the channel."""
        ours = self._wire_keys.get(key)
        waiting = self._waiting.pop(ours, None) if ours is not None else None
        for entry in waiting or ():
            self.delivered(ours, entry, 0, self.home)

    def delivered(self, key: Hashable, entry: Entry, index: int, sender: str) -> None:
        """A delivery from the home, in order (`index` and `sender` are for a quorum
        leader's); returned at once if the consumer is gone."""
        ref = self._consumers.get(key)
        if ref is None:
            self._send(QueueCommand(*self._where, to_record(Return([entry.msg_id]))))
            return
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.append(entry)
            return
        held = self._held.get(key)
        if held is not None or not _has_credit(ref):
            self._held.setdefault(key, deque()).append(entry)
        else:
            ref.channel.deliver(ref.tag, entry, self)

    def cancelled(self, key: Hashable) -> None:
        """The home cancelled a consumer of ours (its queue went): tell the client."""
        ref = self._forget(key)
        if ref is not None:
            ref.channel.queue_deleted(ref.tag)

    def _forget(self, key: Hashable) -> ConsumerRef | None:
        self._waiting.pop(key, None)
        self._held.pop(key, None)
        for wire, ours in list(self._wire_keys.items()):
            if ours == key:
                del self._wire_keys[wire]
        return self._consumers.pop(key, None)

    def unsubscribe(self, key: Hashable, requeue: bool = False) -> None:
        ours = self._wire_keys.pop(key, None)
        if ours is None:
            return
        waiting = [*(self._waiting.pop(ours, None) or ()), *self._held.pop(ours, ())]
        self._consumers.pop(ours, None)
        self._send(CancelConsumer(*self._where, ours, [entry.msg_id for entry in waiting]))

    def limit(self, channel: Subscriber) -> None:
        """What arrives past the channel's credit is held (`delivered`)."""

    def dispatch(self) -> None:
        """Hand on what was held while the channels had no credit (module doc, 3)."""
        for key, held in list(self._held.items()):
            ref = self._consumers[key]
            while held and _has_credit(ref):
                ref.channel.deliver(ref.tag, held.popleft(), self)
            if not held:
                del self._held[key]

    def cancel_all(self) -> None:
        for key in list(self._consumers):
            self.cancelled(key)

    def detach(self) -> None:
        """The link to the home went down: consumers are cancelled and nothing this proxy
        is asked to send any more goes out."""
        self.attached = False
        self.cancel_all()

    def stop(self) -> None:
        pass

    def refresh_policies(self) -> None:
        self.policy, self.operator_policy = self.broker.policies_of(self.record)
        settings = self.broker.settings_of(self.record, self.policy, self.operator_policy)
        self.machine.apply(Meta(now_ms()), Configure(settings))


def _has_credit(ref: ConsumerRef) -> bool:
    """Whether the consumer's channel takes one more delivery (module doc, 3)."""
    if ref.no_ack:
        return True
    credit = ref.channel.credit()
    return credit is None or credit > 0


class LocalDefinitions(Protocol):
    def operations(self, home: str | None) -> list[Operation]:
        """What this node holds that the store does not keep, as metadata operations."""


class Replaying(Protocol):
    def replay(self, operations: list[Operation]) -> object:
        """Apply operations another node made, without replicating them again."""

    @property
    def applied_through(self) -> int:
        """The metadata log's last index applied on this node."""

    def changed_after(self, vhost: str, queue: str, index: int) -> bool:
        """Whether the log declared or deleted the classic queue here after `index`."""


class RemoteNode(Protocol):
    """What remote queues need of the node's cluster side
    (`warren.runtime.cluster.node.ClusterNode`, which imports this module)."""

    @property
    def name(self) -> str: ...

    @property
    def incarnation(self) -> str: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def peers(self) -> PeerLinks: ...

    @property
    def applying(self) -> bool:
        """A metadata operation is being applied here (its effects are not sent again)."""

    @property
    def transient(self) -> LocalDefinitions: ...

    @property
    def metadata(self) -> Replaying: ...

    def node_of(self, member: str) -> str:
        """The node a member is a worker of (itself on a node of one process)."""


class RemoteQueues:
    """This node's side of remote queues: as a home, and as a user of others' queues."""

    def __init__(self, cluster: RemoteNode) -> None:
        self.cluster = cluster
        self.broker = cluster.broker
        self.peers = cluster.peers
        self.numbers = itertools.count(1)  # consumer keys and call numbers of this node
        # messages that crossed to or from other nodes: publishes sent to their queues (a
        # quorum queue's: to its leader's node) and deliveries from them (a node's workers
        # log these: `warren.runtime.workers`)
        self.sent = self.received = 0
        self._calls: dict[int, tuple[RemoteHost, asyncio.Future[Any], AnyQueueRequest]] = {}
        # as a home: other nodes' consumers and unsettled basic.gets, by node
        self._consumers: dict[str, dict[ConsumerKey, ClassicHost]] = {}
        self._fetched: dict[str, dict[ClassicHost, set[int]]] = {}
        # answers to publishes that wait for this node's log: (log sequence, node, call, reply)
        self._durable_answers: deque[tuple[int, str, int, object]] = deque()
        # nodes whose own classic queues and bindings arrived since their link came up (6)
        self.heard: set[str] = set()
        self.peers.on_message(self._received)
        self.peers.on_link(self._link)

    def hand(
        self, node: str, record: QueueRecord, key: Hashable, entry: Entry, index: int = 0
    ) -> None:
        """Send a delivery to a consumer on `node` (from a classic home, or from a quorum
        leader with the index of the log entry that made it, or 0 for one sent again)."""
        consumer = cast("ConsumerKey", key)
        self.peers.send(
            node, Delivery(record.vhost, record.name, consumer, EntryRecord.of(entry), index)
        )

    def cancel(self, node: str, record: QueueRecord, key: Hashable) -> None:
        """Tell a consumer's node that its consumer is gone (consumer_cancel_notify)."""
        self.peers.send(
            node, ConsumerCancelled(record.vhost, record.name, cast("ConsumerKey", key))
        )

    # --- as a user of another node's queue ---------------------------------------------------

    def consumer_key(self) -> ConsumerKey:
        """A new consumer of this node process, of any queue (a quorum queue's getter is
        number 0)."""
        return (self.cluster.name, self.cluster.incarnation, next(self.numbers))

    def proxy(self, record: QueueRecord, home: str) -> RemoteHost:
        host = RemoteHost(self, record, home)
        self.broker.queues[record.vhost, record.name] = host
        return host

    def call(self, host: RemoteHost, request: AnyQueueRequest) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not host.attached or not self.peers.connected(host.home):
            future.set_exception(home_down(host.record, self.cluster.node_of(host.home)))
            return future
        number = next(self.numbers)
        self._calls[number] = (host, future, request)
        self.peers.send(host.home, Call(number, request))
        return future

    def _answered(self, node: str, reply: CallReply) -> None:
        call = self._calls.pop(reply.number, None)
        if call is None or call[1].done():
            return
        try:
            call[1].set_result(call_value(reply, call[2]))
        except Exception as error:  # not the request's reply type: a bug, not the client's
            call[1].set_exception(error)

    def _failed(self, node: str, error: CallError) -> None:
        call = self._calls.pop(error.number, None)
        if call is not None and not call[1].done():
            call[1].set_exception(SoftError(ReplyCode(error.code), error.detail))

    def _delivered(self, node: str, delivery: Delivery) -> None:
        self.received += 1
        host = self.broker.queues.get((delivery.vhost, delivery.name))
        if isinstance(host, Receiver):
            host.delivered(delivery.key, delivery.entry.entry(), delivery.index, node)
        else:  # the queue went from here meanwhile: the sender gets the message back
            returned = to_record(Return([delivery.entry.msg_id]))
            back = QueueCommand(delivery.vhost, delivery.name, returned)
            self.peers.send(node, Call(0, back))

    def _cancelled(self, node: str, cancelled: ConsumerCancelled) -> None:
        host = self.broker.queues.get((cancelled.vhost, cancelled.name))
        if isinstance(host, Receiver):
            host.cancelled(cancelled.key)

    # --- as a home -------------------------------------------------------------------------

    def _local(self, node: str, number: int, request: QueueRequest[Any]) -> ClassicHost | None:
        host = self.broker.queues.get((request.vhost, request.name))
        if isinstance(host, ClassicHost):
            return host
        self._refuse(node, number, queue_not_found(request.name, request.vhost))
        return None

    def _refuse(self, node: str, number: int, error: AmqpError) -> None:
        if number:
            detail = error.text.partition(" - ")[2]
            self.peers.send(node, CallError(number, int(error.code), detail))

    def _answer(self, node: str, number: int, value: object) -> None:
        if number:
            self.peers.send(node, call_reply(number, value))

    def _command(self, node: str, number: int, request: QueueCommand) -> None:
        host = self._local(node, number, request)
        if host is None:
            return
        command = from_record(request.command)
        if type(command) is Settle or type(command) is Return or type(command) is Discard:
            fetched = self._fetched.get(node, {}).get(host)
            if fetched:
                fetched.difference_update(command.msg_ids)
        durability = self.broker.durability
        logged_from = durability.log.next_sequence if durability is not None else 0
        reply: object = None
        if type(command) is Enqueue:
            command.message = message(command.message)  # whole again, for the home's log
            reply = host.publish(command) is ACCEPTED  # the proxy's outcome: True unless rejected
            if durability is not None:
                sequence = durability.log.next_sequence - 1
                if sequence >= logged_from and sequence > durability.log.durable_sequence:
                    self._durable_answers.append((sequence, node, number, reply))
                    durability.wait(self)
                    return
        elif type(command) is Get:
            got = host.get(command.no_ack).value
            if got is not None:
                if not command.no_ack:
                    self._fetched.setdefault(node, {}).setdefault(host, set()).add(got.entry.msg_id)
                reply = got  # recorded as it is now (`call_reply`)
        elif type(command) is Purge:
            reply = host.purge().value
        elif type(command) is Settle or type(command) is Return or type(command) is Discard:
            host.settle(command)
        else:
            raise ValueError(f"a home takes no {command!r} from another node")
        self._answer(node, number, reply)

    def durable_reached(self, durable_sequence: int) -> bool:
        """This node's log is durable that far: answer the publishes that waited for it."""
        waiting = self._durable_answers
        while waiting and waiting[0][0] <= durable_sequence:
            _, node, number, reply = waiting.popleft()
            self._answer(node, number, reply)
        return bool(waiting)

    def _counts(self, node: str, number: int, request: QueueCounts) -> None:
        host = self._local(node, number, request)
        if host is not None:
            self._answer(node, number, (host.machine.ready_count, host.machine.consumer_count))

    def _counters(self, node: str, number: int, request: QueueCounters) -> None:
        host = self._local(node, number, request)
        if host is not None:
            self._answer(node, number, host.machine.counters())

    def _consume(self, node: str, number: int, request: Consume) -> None:
        host = self._local(node, number, request)
        if host is None:
            return
        key = request.key
        consumer = RemoteConsumer(self, node, key, host.record)
        limits = (request.prefetch_count, request.no_ack, request.exclusive, request.priority)
        command = Checkout(key, consumer, *limits)
        outcome = host.subscribe(consumer, "", command, False)
        if type(outcome) is Refused:
            assert outcome.error is not None
            self._refuse(node, number, outcome.error)
            return
        self._consumers.setdefault(node, {})[key] = host
        self._answer(node, number, None)
        host.started(key)

    def _cancel(self, node: str, number: int, request: CancelConsumer) -> None:
        host = self._local(node, number, request)
        if host is None:
            return
        if request.waiting:  # handed to the node, never to its client
            host.settle(Return(request.waiting))
        self.consumer_gone(node, request.key)
        host.unsubscribe(request.key)
        self.broker.auto_delete(host)

    def consumer_gone(self, node: str, key: ConsumerKey) -> None:
        consumers = self._consumers.get(node)
        if consumers is not None:
            consumers.pop(key, None)

    def _delete(self, node: str, number: int, request: DeleteQueue) -> None:
        host = self._local(node, number, request)
        if host is None:
            return
        where = describe_queue(request.name, request.vhost)
        if request.if_unused and host.machine.consumer_count:
            self._refuse(node, number, precondition_failed(f"{where} in use"))
        elif request.if_empty and host.machine.ready_count:
            self._refuse(node, number, precondition_failed(f"{where} not empty"))
        else:
            pending = self.broker.logged_delete(host)
            if pending is None:
                vhost = self.broker.vhosts[request.vhost]
                self._answer(node, number, self.broker.delete_queue(vhost, request.name))
            else:
                pending.add_done_callback(lambda done: self._delete_answered(node, number, done))

    def _delete_answered(self, node: str, number: int, done: asyncio.Future[object]) -> None:
        """The metadata log deleted the queue (module doc, 4): its count, or why not."""
        error = done.exception()
        if error is None:
            self._answer(node, number, done.result())
        else:
            failed = SoftError(ReplyCode.INTERNAL_ERROR, f"the delete was not logged: {error}")
            self._refuse(node, number, error if isinstance(error, AmqpError) else failed)

    # --- links -------------------------------------------------------------------------------

    def _received(self, node: str, item: PeerMessage) -> None:
        """A message from another node, dispatched by its type (`calls`)."""
        if type(item) is Call:
            _CALLS[type(item.request)](self, node, item.number, item.request)
        elif type(item) is CallReply:
            self._answered(node, item)
        elif type(item) is CallError:
            self._failed(node, item)
        elif type(item) is Delivery:
            self._delivered(node, item)
        elif type(item) is ConsumerCancelled:
            self._cancelled(node, item)
        elif type(item) is Definitions:
            self._definitions(node, item.operations, item.applied)
        elif type(item) is Reply:  # to a direct reply-to address of this node's
            target = self.broker.reply_to.get(item.token)
            if target is not None:
                target.deliver_reply(message(item.message))

    def _link(self, node: str, up: bool) -> None:
        """A link went down: each side lets go of what the other held (module doc, 4).
        A link came up: the same, as the other side may have seen a link go down that
        this side saw replaced without a gap; then the node hears what it may have
        missed (module doc, 6)."""
        self._node_lost(node)
        self._home_lost(node)
        self.heard.discard(node)
        if up:
            operations = self.cluster.transient.operations(self.cluster.name)
            self.peers.send(node, Definitions(operations, self.cluster.metadata.applied_through))

    def _definitions(self, node: str, operations: list[Operation], applied: int) -> None:
        """A node's own classic queues, non-durable exchanges and bindings as it had them
        with its metadata log applied through `applied`: made here if missing; a proxy of
        one of its queues that it no longer has goes. A queue the log declared or deleted
        here after `applied` stays as the log left it (module doc, 6)."""
        metadata = self.cluster.metadata
        listed = {(op.queue.vhost, op.queue.name) for op in operations if type(op) is ClassicQueue}
        operations = [
            op
            for op in operations
            if type(op) is not ClassicQueue
            or not metadata.changed_after(op.queue.vhost, op.queue.name, applied)
        ]
        for (vhost, name), host in list(self.broker.queues.items()):
            if (
                isinstance(host, RemoteHost)
                and host.home == node
                and (vhost, name) not in listed
                and not metadata.changed_after(vhost, name, applied)
            ):
                operations.append(DeleteClassicQueue(vhost, name, node))
        bindings = [op.binding for op in operations if type(op) is PutBinding]
        self.cluster.metadata.replay([op for op in operations if type(op) is not PutBinding])
        # a binding whose end this node does not know yet comes with the metadata log
        known: list[Operation] = [PutBinding(b) for b in bindings if self._ends_known(b)]
        self.cluster.metadata.replay(known)
        self.heard.add(node)

    def _ends_known(self, binding: BindingDefinition) -> bool:
        vhost = self.broker.vhosts.get(binding.vhost)
        if vhost is None or binding.source not in vhost.exchanges:
            return False
        if binding.destination_kind == "queue":
            return binding.destination in vhost.queues
        return binding.destination in vhost.exchanges

    def _node_lost(self, node: str) -> None:
        """As a home: the node's consumers go, and what they and its gets held returns."""
        for key, host in self._consumers.pop(node, {}).items():
            host.unsubscribe(key, requeue=True)
            self.broker.auto_delete(host)
        for host, msg_ids in self._fetched.pop(node, {}).items():
            if msg_ids and self.broker.queues.get((host.record.vhost, host.name)) is host:
                host.settle(Return(sorted(msg_ids)))

    def _home_lost(self, home: str) -> None:
        """As a user of the home's queues: fresh proxies, and nothing waits for it."""
        for proxy in list(self.broker.queues.values()):
            if isinstance(proxy, RemoteHost) and proxy.home == home:
                proxy.detach()
                self.proxy(proxy.record, home)
        for number, (proxy, future, _) in list(self._calls.items()):
            if proxy.home == home:
                del self._calls[number]
                if not future.done():
                    future.set_exception(home_down(proxy.record, self.cluster.node_of(home)))


# a home's handler of each request, by the request's type
_CALLS: Mapping[type[QueueRequest[Any]], Callable[[RemoteQueues, str, int, Any], None]] = {
    QueueCommand: RemoteQueues._command,
    QueueCounts: RemoteQueues._counts,
    QueueCounters: RemoteQueues._counters,
    Consume: RemoteQueues._consume,
    CancelConsumer: RemoteQueues._cancel,
    DeleteQueue: RemoteQueues._delete,
}
