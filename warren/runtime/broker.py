"""The node's shared state: vhosts, queue hosts and the clock, driven by connections.

Theory of operation:
1. A `QueueHost` owns one `QueueMachine` and its `QueueRecord`. It is the only place that
   calls `apply`: it builds the `Meta`, applies the command and carries out the effects
   (a `Deliver` goes to the consumer's channel, which writes the frames).
2. Consumers register a `ConsumerRef` with the host so that effects can find their
   channel. A channel that cannot take more deliveries (a channel-wide prefetch, or a
   socket whose write buffer is full) is passed to the machine as credit in `Meta`.
3. The broker holds the vhosts of `warren.model` and maps (vhost, queue name) to hosts.
   Deleting a queue cancels its consumers (consumer_cancel_notify) and forgets its host.
4. A durable queue's host has a `journal_key` and reports to the broker's `Durability`
   what its machine did to messages: the command's own outcome first (an `Enqueue`'s
   record must come before anything its effects do to the message), then the effects
   (deliveries, settlements by no-ack delivery, dead-lettering or dropping). A host
   without a key (non-durable queue, or a broker without storage) pays one test for it.
5. Paging: `warren.runtime.paging.admit` decides which arrivals leave memory (in long
   durable queues, and in any queue under memory pressure); every message handed out
   (delivery, basic.get, dead-lettering) is made resident first, and the scratch pages of
   messages that leave otherwise are released.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Protocol

from warren.amqp.content import Message
from warren.model import QueueRecord, QueueType, VHost
from warren.model.policy import Policy, effective_settings
from warren.model.settings import QueueSettings
from warren.queue import (
    Cancel,
    Checkout,
    Command,
    Configure,
    DeadLetter,
    Deliver,
    Dispatch,
    Dropped,
    Effect,
    Enqueue,
    Get,
    Got,
    Meta,
    Purge,
    QueueExpired,
    QueueMachine,
    Refused,
    SetTimer,
    Settle,
    SettleDeadLetter,
    Tick,
)
from warren.runtime.access import Access
from warren.runtime.deadletter import DeadLetterWorker, dead_letter
from warren.runtime.paging import admit, release, resident
from warren.runtime.stats import MessageStats
from warren.storage.pages import PageRef

if TYPE_CHECKING:
    from warren.runtime.cluster.node import ClusterNode
    from warren.runtime.config import Config
    from warren.runtime.connection import AmqpConnection
    from warren.runtime.durability import Durability

log = logging.getLogger("warren.broker")


def now_ms() -> int:
    return int(time.time() * 1000)


def rearm(
    timer: asyncio.TimerHandle | None, at_ms: int, callback: Callable[[], None]
) -> asyncio.TimerHandle:
    """A queue's one timer (the machine's `SetTimer`), moved to `at_ms` wall-clock time."""
    if timer is not None:
        timer.cancel()
    delay_s = max(0.0, (at_ms - now_ms()) / 1000)
    return asyncio.get_running_loop().call_later(delay_s, callback)


class Subscriber(Protocol):
    """What a queue host needs of a channel that consumes from it."""

    def credit(self) -> int | None:
        """Ack-requiring deliveries this channel can take across all queues; None: no limit."""

    def blocked(self) -> bool:
        """Whether the channel can take no delivery at all now (its socket is full)."""

    def deliver(self, consumer_tag: str, entry: object, host: QueueHost) -> None: ...

    def queue_deleted(self, consumer_tag: str) -> None: ...


class ConsumerRef:
    __slots__ = ("channel", "no_ack", "tag")

    def __init__(self, channel: Subscriber, tag: str, no_ack: bool = False) -> None:
        self.channel = channel
        self.tag = tag
        self.no_ack = no_ack


class QueueHost:
    """Drives one classic queue's machine and performs its effects."""

    __slots__ = (
        "_consumers",
        "_limited",
        "_timer",
        "broker",
        "dead_letter_worker",
        "ever_consumed",
        "journal_key",
        "machine",
        "operator_policy",
        "policy",
        "record",
        "scratch_paged",
        "stats",
    )

    def __init__(self, broker: Broker, record: QueueRecord) -> None:
        self.broker = broker
        self.record = record
        self.machine = QueueMachine(record.name, record.vhost, last_used_ms=now_ms())
        self._consumers: dict[Hashable, ConsumerRef] = {}
        self._limited: set[Subscriber] = set()
        self._timer: asyncio.TimerHandle | None = None
        self.ever_consumed = False
        # the durable queue's key in the message journal; None: nothing is logged
        self.journal_key: str | None = None
        self.policy: Policy | None = None
        self.operator_policy: Policy | None = None
        self.scratch_paged = False  # some message went to a scratch page (`paging`)
        # message_stats of the management API, bumped by the channels that use the queue
        self.stats = MessageStats()
        # sends held dead-lettered messages (at-least-once); made when the first one is
        self.dead_letter_worker: DeadLetterWorker | None = None
        self.refresh_policies()

    @property
    def name(self) -> str:
        return self.record.name

    def meta(self) -> Meta:
        if not self._limited:
            return Meta(now_ms())
        credit: dict[Any, int] = {}
        blocked: list[Any] = []
        for channel in self._limited:
            if channel.blocked():
                blocked.append(channel)
            limit = channel.credit()
            if limit is not None:
                credit[channel] = limit
        return Meta(now_ms(), credit or None, blocked)

    def apply(self, command: Command) -> object:
        meta = self.meta()
        durable = self.journal_key is not None
        if type(command) is Enqueue:
            if durable or self.broker.memory_pressure:
                command = admit(self, command)
        elif type(command) is Purge and self.scratch_paged:
            release(self, self.machine.ready_entries())
        reply, effects = self.machine.apply(meta, command)
        if type(reply) is Got and type(reply.entry.message) is not Message:
            resident(self, reply.entry)  # before a no-ack get settles it in the journal
        if durable:
            self._journal(command, reply, meta)
        if effects:
            self.perform(effects)
        return reply

    def _journal(self, command: Command, reply: object, meta: Meta) -> None:
        """Log what the command itself did to messages (its effects follow in `perform`)."""
        durability = self.broker.durability
        key = self.journal_key
        assert durability is not None and key is not None
        if type(command) is Enqueue:
            if type(reply) is int:
                durability.enqueued(self, reply, command, meta.now_ms)
        elif type(command) is Settle or type(command) is SettleDeadLetter:
            durability.settled(key, command.msg_ids)
        elif type(command) is Get:
            if type(reply) is Got:
                msg_ids = (reply.entry.msg_id,)
                if command.no_ack:
                    durability.settled(key, msg_ids)
                else:
                    durability.delivered(key, msg_ids)
        elif type(command) is Purge:
            durability.purged(key, self.machine.unacked_msg_ids())

    def perform(self, effects: list[Effect]) -> None:
        consumers = self._consumers
        key = self.journal_key
        delivered: list[int] = []
        gone: list[int] = []
        for effect in effects:
            if type(effect) is Deliver:
                ref = consumers[effect.consumer]
                if type(effect.entry.message) is not Message:
                    resident(self, effect.entry)
                ref.channel.deliver(ref.tag, effect.entry, self)
                if key is not None:
                    (gone if ref.no_ack else delivered).append(effect.entry.msg_id)
            elif type(effect) is DeadLetter and effect.held:
                # gone from the journal once `SettleDeadLetter` says the targets have it
                worker = self.dead_letter_worker
                if worker is None:
                    worker = self.dead_letter_worker = DeadLetterWorker(self)
                worker.send(effect)
            elif type(effect) is DeadLetter:
                # the copy's record in the target queue comes before the settlement here
                dead_letter(self, effect.entry, effect.reason)
                if type(effect.entry.message) is PageRef:  # no dead-letter exchange took it
                    release(self, (effect.entry,))
                if key is not None:
                    gone.append(effect.entry.msg_id)
            elif type(effect) is Dropped:
                if type(effect.entry.message) is PageRef:
                    release(self, (effect.entry,))
                if key is not None:
                    gone.append(effect.entry.msg_id)
            elif type(effect) is SetTimer:
                self._arm(effect.at_ms)
            elif type(effect) is QueueExpired:
                self.broker.expire_queue(self)
        if delivered or gone:
            durability = self.broker.durability
            assert durability is not None and key is not None
            if delivered:
                durability.delivered(key, delivered)
            if gone:
                durability.settled(key, gone)

    def _arm(self, at_ms: int) -> None:
        self._timer = rearm(self._timer, at_ms, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.broker.queues.get((self.record.vhost, self.record.name)) is self:
            self.apply(Tick())

    def refresh_policies(self) -> None:
        """Match the vhost's policies again and apply the effective settings at once
        (RabbitMQ truncates a queue as soon as a max-length policy arrives)."""
        self.policy, self.operator_policy = self.broker.policies_of(self.record)
        settings = self.broker.settings_of(self.record, self.policy, self.operator_policy)
        if settings != self.machine.settings:
            self.apply(Configure(settings))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.dead_letter_worker is not None:
            self.dead_letter_worker.stop()

    def subscribe(
        self, channel: Subscriber, tag: str, command: Checkout, limited: bool
    ) -> tuple[object, list[Effect]]:
        """Add a consumer; the caller performs the effects after it sent consume-ok."""
        ref = ConsumerRef(channel, tag, command.no_ack)
        self._consumers[command.consumer] = ref
        if limited:
            self._limited.add(channel)
        reply, effects = self.machine.apply(self.meta(), command)
        if isinstance(reply, Refused):
            del self._consumers[command.consumer]
            self._forget_channel_if_idle(channel)
        else:
            self.ever_consumed = True
        return reply, effects

    def unsubscribe(self, key: Hashable, requeue: bool = False) -> None:
        """Remove a consumer; with `requeue`, what it held goes back (its node is gone)."""
        ref = self._consumers.pop(key, None)
        if ref is None:
            return
        self.apply(Cancel(key, requeue))
        self._forget_channel_if_idle(ref.channel)

    def _forget_channel_if_idle(self, channel: Subscriber) -> None:
        if all(ref.channel is not channel for ref in self._consumers.values()):
            self._limited.discard(channel)

    def limit(self, channel: Subscriber) -> None:
        """The channel's credit must now be consulted (global qos, or its socket is full)."""
        if any(ref.channel is channel for ref in self._consumers.values()):
            self._limited.add(channel)

    def dispatch(self) -> None:
        if self._consumers and self.machine.ready_count:
            self.apply(Dispatch())

    def cancel_all(self) -> None:
        """The queue is going away: tell every consumer, as consumer_cancel_notify says."""
        for ref in list(self._consumers.values()):
            ref.channel.queue_deleted(ref.tag)
        self._consumers.clear()
        self._limited.clear()


class Broker:
    """Everything one node holds: vhosts, queues, users, connections."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.vhosts: dict[str, VHost] = {"/": VHost("/")}
        self.queues: dict[tuple[str, str], QueueHost] = {}
        # users, permissions and vhost metadata; recovery replaces it with the stored ones
        self.access = Access.with_default(
            config.default_user, config.default_pass, config.password_hashing_module
        )
        # RabbitMQ's cluster_name global parameter: the node's name until one is set
        self.cluster_name = config.node_name
        # message counters of closed channels, per vhost (live channels keep their own)
        self.retired_stats: dict[str, MessageStats] = {}
        self.started_at_ms = now_ms()
        self.connections: set[AmqpConnection] = set()
        self.alarms: set[str] = set()  # resource alarms in force (`warren.runtime.alarms`)
        self.memory_pressure = False  # queues page messages out (`warren.runtime.paging`)
        self.reply_to: dict[str, Any] = {}  # direct reply-to token -> channel
        # durable definitions and messages; None when the node keeps nothing on disk
        self.durability: Durability | None = None
        self.cluster: ClusterNode | None = None  # None: a single node

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

    def add_queue(self, record: QueueRecord) -> QueueHost:
        host: QueueHost
        if self.cluster is not None and record.queue_type is QueueType.QUORUM:
            host = self.cluster.quorum_host(record)  # type: ignore[assignment]
        else:
            host = QueueHost(self, record)
        self.queues[record.vhost, record.name] = host
        return host

    def declare_queue(self, record: QueueRecord) -> QueueHost | None:
        """A queue the model just created: its host, and its definition stored if durable
        (None: a quorum queue in a cluster, created when the metadata log has it)."""
        if self.replicated_declare(record) is not None:
            return None
        host = self.add_queue(record)
        if self.durability is not None:
            self.durability.queue_declared(host)
        return host

    def replicated_declare(self, record: QueueRecord) -> asyncio.Future[None] | None:
        """A quorum queue in a cluster is declared through the metadata log: the future is
        done once it exists here (None: any other queue, declared at once)."""
        cluster = self.cluster
        if cluster is None or record.queue_type is not QueueType.QUORUM or cluster.applying:
            return None
        return cluster.propose_declare(record)

    def replicated_counts(self, host: QueueHost) -> asyncio.Future[tuple[int, int]] | None:
        """A quorum queue's declare-ok counts come from its leader once this node's commands
        are applied, a classic queue's on another node from its home (None: read the
        host's machine)."""
        if self.cluster is None or type(host) is QueueHost:
            return None
        return asyncio.ensure_future(host.counts())  # type: ignore[attr-defined,no-any-return]

    def replicated_delete(
        self, vhost: VHost, name: str, if_unused: bool = False, if_empty: bool = False
    ) -> asyncio.Future[object] | None:
        """Likewise for a delete (through the metadata log, or by the queue's home); the
        future has the queue's ready count."""
        cluster = self.cluster
        host = self.queues.get((vhost.name, name))
        if cluster is None or host is None or type(host) is QueueHost or cluster.applying:
            return None
        return cluster.replicated_delete(host, if_unused, if_empty)

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
        if self.replicated_delete(vhost, name) is not None:
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
