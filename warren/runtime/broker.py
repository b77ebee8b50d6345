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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Protocol

from warren.model import QueueRecord, VHost
from warren.model.policy import Policy, effective_settings
from warren.queue import (
    Cancel,
    Checkout,
    Command,
    Configure,
    DeadLetter,
    Deliver,
    Dispatch,
    Effect,
    Meta,
    QueueExpired,
    QueueMachine,
    Refused,
    SetTimer,
    Tick,
)
from warren.runtime.deadletter import dead_letter

if TYPE_CHECKING:
    from warren.runtime.config import Config

log = logging.getLogger("warren.broker")


def now_ms() -> int:
    return int(time.time() * 1000)


class Subscriber(Protocol):
    """What a queue host needs of a channel that consumes from it."""

    def credit(self) -> int | None:
        """Ack-requiring deliveries this channel can take across all queues; None: no limit."""

    def blocked(self) -> bool:
        """Whether the channel can take no delivery at all now (its socket is full)."""

    def deliver(self, consumer_tag: str, entry: object, host: QueueHost) -> None: ...

    def queue_deleted(self, consumer_tag: str) -> None: ...


class ConsumerRef:
    __slots__ = ("channel", "tag")

    def __init__(self, channel: Subscriber, tag: str) -> None:
        self.channel = channel
        self.tag = tag


class QueueHost:
    """Drives one classic queue's machine and performs its effects."""

    __slots__ = (
        "_consumers",
        "_limited",
        "_timer",
        "broker",
        "ever_consumed",
        "machine",
        "operator_policy",
        "policy",
        "record",
    )

    def __init__(self, broker: Broker, record: QueueRecord) -> None:
        self.broker = broker
        self.record = record
        self.machine = QueueMachine(record.name, record.vhost, last_used_ms=now_ms())
        self._consumers: dict[Hashable, ConsumerRef] = {}
        self._limited: set[Subscriber] = set()
        self._timer: asyncio.TimerHandle | None = None
        self.ever_consumed = False
        self.policy: Policy | None = None
        self.operator_policy: Policy | None = None
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
        reply, effects = self.machine.apply(self.meta(), command)
        if effects:
            self.perform(effects)
        return reply

    def perform(self, effects: list[Effect]) -> None:
        consumers = self._consumers
        for effect in effects:
            if type(effect) is Deliver:
                ref = consumers[effect.consumer]
                ref.channel.deliver(ref.tag, effect.entry, self)
            elif type(effect) is DeadLetter:
                dead_letter(self, effect.entry, effect.reason)
            elif type(effect) is SetTimer:
                self._arm(effect.at_ms)
            elif type(effect) is QueueExpired:
                self.broker.expire_queue(self)

    def _arm(self, at_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        delay_s = max(0.0, (at_ms - now_ms()) / 1000)
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.broker.queues.get((self.record.vhost, self.record.name)) is self:
            self.apply(Tick())

    def refresh_policies(self) -> None:
        """Match the vhost's policies again and apply the effective settings at once
        (RabbitMQ truncates a queue as soon as a max-length policy arrives)."""
        vhost = self.broker.vhosts.get(self.record.vhost)
        user = vhost.policies.match_queue(self.record) if vhost else None
        operator = vhost.operator_policies.match_queue(self.record) if vhost else None
        self.policy, self.operator_policy = user, operator
        settings = effective_settings(self.record, user, operator)
        if settings != self.machine.settings:
            self.apply(Configure(settings))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def subscribe(
        self, channel: Subscriber, tag: str, command: Checkout, limited: bool
    ) -> tuple[object, list[Effect]]:
        """Add a consumer; the caller performs the effects after it sent consume-ok."""
        ref = ConsumerRef(channel, tag)
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

    def unsubscribe(self, key: Hashable) -> None:
        ref = self._consumers.pop(key, None)
        if ref is None:
            return
        self.apply(Cancel(key))
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
        self.users: dict[str, str] = {config.default_user: config.default_pass}
        self.connections: set[object] = set()
        self.reply_to: dict[str, Any] = {}  # direct reply-to token -> channel

    def queue(self, vhost: str, name: str) -> QueueHost | None:
        return self.queues.get((vhost, name))

    def add_queue(self, record: QueueRecord) -> QueueHost:
        host = QueueHost(self, record)
        self.queues[record.vhost, record.name] = host
        return host

    def expire_queue(self, host: QueueHost) -> None:
        """x-expires ran out: delete the queue as if a client had."""
        vhost = self.vhosts.get(host.record.vhost)
        if vhost is not None and self.queues.get((vhost.name, host.name)) is host:
            log.debug("queue %r in vhost %r expired", host.name, vhost.name)
            self.delete_queue(vhost, host.name)

    def delete_queue(self, vhost: VHost, name: str) -> int:
        """Delete a queue, its bindings and consumers; return how many messages it held."""
        host = self.queues.pop((vhost.name, name), None)
        if name in vhost.queues:
            vhost.delete_queue(name)
        if host is None:
            return 0
        host.stop()
        host.cancel_all()
        return host.machine.ready_count

    def authenticate(self, user: str, password: str) -> bool:
        return self.users.get(user) == password
