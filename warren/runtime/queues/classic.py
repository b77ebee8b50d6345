"""A classic queue: its machine applied on this node, its effects carried out at once.

Theory of operation:
1. A `ClassicHost` owns one `QueueMachine` and its `QueueRecord`. It is the only place
   that applies commands to that machine: it builds the `Meta`, applies the command and
   hands the effects to its `Interpreter` (`warren.runtime.queues.effects`).
2. Consumers register a `ConsumerRef` with the host so that deliveries can find their
   channel. A channel that cannot take more deliveries (a channel-wide prefetch, or a
   socket whose write buffer is full) is passed to the machine as credit in `Meta`.
3. A durable queue's host has a `journal_key` and reports to the node's durability what
   its machine did to messages: the command's own outcome first (an `Enqueue`'s record
   must come before anything its effects do to the message), then the effects (by the
   interpreter). A host without a key (non-durable queue, or a node without storage)
   pays one test for it, and, unless it paged a message, asks the machine for no
   `Dropped` effects (`Meta.drops_followed`): nothing is done when such a message goes.
4. Paging: `warren.runtime.queues.paging.admit` decides which arrivals leave memory (in
   long durable queues, and in any queue under memory pressure); every message handed out
   (delivery, basic.get, dead-lettering) is made resident first, and the scratch pages of
   messages that leave otherwise are released.
5. Every answer is at once: `Accepted`, or `Refused` (a consumer the machine refuses, a
   publish the queue rejects).
6. In a cluster the queue's delete goes through the metadata log, and its timer waits
   while that delete is on its way: the host asks its `Home` (the cluster's
   `warren.runtime.cluster.node.ClusterHome`; none on a node alone). The home is a part
   the host holds, not a subclass, so that the host compiles (setup.py: a compiled class
   can have no subclass in Python); it is asked on a delete and when the timer fires,
   never per message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any, Protocol

from warren.amqp.content import Message
from warren.model import QueueRecord
from warren.queue import (
    REJECTED_REPLY,
    Cancel,
    Checkout,
    Command,
    Configure,
    Deliver,
    Discard,
    Dispatch,
    Effect,
    Enqueue,
    Entry,
    Get,
    Got,
    Meta,
    Purge,
    QueueMachine,
    Restore,
    Return,
    Settle,
    SettleDeadLetter,
    Tick,
    Touch,
)
from warren.queue import Refused as MachineRefused
from warren.runtime.queues.clock import now_ms
from warren.runtime.queues.effects import Interpreter
from warren.runtime.queues.host import (
    ACCEPTED,
    REJECTED_PUBLISH,
    Accepted,
    ConsumerRef,
    HostFields,
    Node,
    Outcome,
    Placement,
    Published,
    Publisher,
    Refused,
    Subscriber,
)
from warren.runtime.queues.paging import admit, release, resident


class Home(Protocol):
    """Where a classic queue's delete goes when this node does not make it at once
    (module doc, 6)."""

    def forward_delete(
        self, host: ClassicHost, if_unused: bool, if_empty: bool
    ) -> asyncio.Future[int] | None:
        """`QueueHost.forward_delete` for `host`."""

    def deleting(self) -> bool:
        """A delete is on its way: the queue's timer does nothing meanwhile."""


class ClassicHost(HostFields):
    """Drives one classic queue's machine on this node."""

    def __init__(self, broker: Node, record: QueueRecord, home: Home | None = None) -> None:
        super().__init__(broker, record)
        self.home = home
        self.machine = QueueMachine(record.name, record.vhost, last_used_ms=now_ms())
        self._consumers: dict[Hashable, ConsumerRef] = {}
        self._limited: set[Subscriber] = set()
        self._starting: dict[Hashable, list[Effect]] = {}  # subscribed, before consume-ok
        self.effects = Interpreter(self, self.on_timer, journaled=True)
        self.refresh_policies()

    @property
    def placement(self) -> Placement:
        return Placement.LOCAL

    def meta(self) -> Meta:
        # a departure matters to the journal (durable) and to a scratch page (paged) only
        followed = self.journal_key is not None or self.scratch_paged
        if not self._limited:
            return Meta(now_ms(), drops_followed=followed)
        credit: dict[Any, int] = {}
        blocked: list[Any] = []
        for channel in self._limited:
            if channel.blocked():
                blocked.append(channel)
            limit = channel.credit()
            if limit is not None:
                credit[channel] = limit
        return Meta(now_ms(), credit or None, blocked, drops_followed=followed)

    # --- the interface (`QueueHost`) ----------------------------------------------------------

    def publish(
        self, command: Enqueue, publisher: Publisher | None = None, tag: int = 0
    ) -> Published:
        """`execute` for the commonest command, on a path of its own: the calls and type
        tests it saves per message are a measurable share of a publish (issue #18)."""
        durable = self.journal_key is not None
        if durable or self.broker.memory_pressure:
            command = admit(self, command)
        meta = self.meta()  # after `admit`: paging this message may make drops followed
        reply, effects = self.machine.apply(meta, command)
        if durable and type(reply) is int:  # the record comes before its effects'
            durability = self.broker.durability
            assert durability is not None
            durability.enqueued(self, reply, command, meta.now_ms)
        if effects:
            self.effects.perform(effects)
        return REJECTED_PUBLISH if reply is REJECTED_REPLY else ACCEPTED

    def get(self, no_ack: bool) -> Accepted[Got | None]:
        reply = self.execute(Get(no_ack))
        return Accepted(reply if type(reply) is Got else None)

    def purge(self) -> Accepted[int]:
        count = self.execute(Purge())
        assert type(count) is int
        return Accepted(count)

    def counts(self) -> Accepted[tuple[int, int]]:
        return Accepted((self.machine.ready_count, self.machine.consumer_count))

    def settle(self, command: Settle | Return | Discard | SettleDeadLetter) -> None:
        self.execute(command)

    def touch(self) -> None:
        self.execute(Touch())

    def forward_delete(self, if_unused: bool, if_empty: bool) -> asyncio.Future[int] | None:
        home = self.home
        return None if home is None else home.forward_delete(self, if_unused, if_empty)

    def execute(self, command: Command) -> object:
        """Run `command` (any but an `Enqueue`: `publish`) through the machine's `apply`
        and carry out its effects; the machine's reply."""
        meta = self.meta()
        durable = self.journal_key is not None
        if type(command) is Purge and self.scratch_paged:
            release(self, self.machine.ready_entries())
        reply, effects = self.machine.apply(meta, command)
        if type(reply) is Got and type(reply.entry.message) is not Message:
            resident(self, reply.entry)  # before a no-ack get settles it in the journal
        if durable:
            self._journal(command, reply)
        if effects:
            self.effects.perform(effects)
        return reply

    def restore(self, command: Restore) -> list[Effect]:
        """Recovered messages back in the machine; their effects (expiry, dead-lettering)
        are the caller's to carry out once every queue has its messages."""
        _reply, effects = self.machine.apply(self.meta(), command)
        return effects

    def _journal(self, command: Command, reply: object) -> None:
        """Log what the command itself did to messages (its effects follow)."""
        durability = self.broker.durability
        key = self.journal_key
        assert durability is not None and key is not None
        if type(command) is Settle or type(command) is SettleDeadLetter:
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

    # --- what the interpreter asks (`EffectHost`) ------------------------------------------------

    def recipient(self, effect: Deliver) -> ConsumerRef:
        return self._consumers[effect.consumer]

    def handed_out(self, entry: Entry) -> Entry:
        resident(self, entry)
        return entry

    def on_timer(self) -> None:
        """The queue's timer fired (or its home asks again): a `Tick`, unless the queue is
        no longer this node's or its delete is on its way."""
        if self.home is not None and self.home.deleting():
            return
        if self.broker.queue(self.record.vhost, self.record.name) is self:
            self.execute(Tick())

    def refresh_policies(self) -> None:
        """Match the vhost's policies again and apply the effective settings at once
        (RabbitMQ truncates a queue as soon as a max-length policy arrives)."""
        self.policy, self.operator_policy = self.broker.policies_of(self.record)
        settings = self.broker.settings_of(self.record, self.policy, self.operator_policy)
        if settings != self.machine.settings:
            self.execute(Configure(settings))

    def stop(self) -> None:
        self.effects.stop()

    # --- consumers -----------------------------------------------------------------------------

    def subscribe(
        self, channel: Subscriber, tag: str, command: Checkout, limited: bool
    ) -> Outcome[None]:
        """Add a consumer; its first deliveries go once the caller calls `started`."""
        ref = ConsumerRef(channel, tag, command.no_ack)
        self._consumers[command.consumer] = ref
        if limited:
            self._limited.add(channel)
        reply, effects = self.machine.apply(self.meta(), command)
        if isinstance(reply, MachineRefused):
            del self._consumers[command.consumer]
            self._forget_channel_if_idle(channel)
            return Refused(reply.error)
        self.ever_consumed = True
        if effects:
            self._starting[command.consumer] = effects
        return ACCEPTED

    def started(self, key: Hashable) -> None:
        effects = self._starting.pop(key, None)
        if effects:
            self.effects.perform(effects)

    def unsubscribe(self, key: Hashable, requeue: bool = False) -> None:
        """Remove a consumer; with `requeue`, what it held goes back (its node is gone)."""
        ref = self._consumers.pop(key, None)
        if ref is None:
            return
        self._starting.pop(key, None)
        self.execute(Cancel(key, requeue))
        self._forget_channel_if_idle(ref.channel)

    def _forget_channel_if_idle(self, channel: Subscriber) -> None:
        if all(ref.channel is not channel for ref in self._consumers.values()):
            self._limited.discard(channel)

    def limit(self, channel: Subscriber) -> None:
        if any(ref.channel is channel for ref in self._consumers.values()):
            self._limited.add(channel)

    def dispatch(self) -> None:
        if self._consumers and self.machine.ready_count:
            self.execute(Dispatch())

    def cancel_all(self) -> None:
        for ref in list(self._consumers.values()):
            ref.channel.queue_deleted(ref.tag)
        self._consumers.clear()
        self._limited.clear()
        self._starting.clear()


class ClassicHosts:
    """The `HostFactory` of a node that is not in a cluster: every queue is classic (a
    quorum queue on a single node too, as its machine is the same)."""

    __slots__ = ("broker",)

    def __init__(self, broker: Node) -> None:
        self.broker = broker

    def make(self, record: QueueRecord) -> ClassicHost:
        return ClassicHost(self.broker, record)

    def replicated_declare(self, record: QueueRecord) -> asyncio.Future[None] | None:
        return None
