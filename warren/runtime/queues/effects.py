"""The one effect interpreter: what a queue machine's effects do, for every kind of host.

Theory of operation:
1. A host applies a command to its `QueueMachine` and hands the effects to its
   `Interpreter`; nothing else carries effects out. The host answers two questions the
   interpreter cannot: which local consumer a `Deliver` goes to (`EffectHost.recipient`:
   None when another node delivers it, as for a quorum consumer elsewhere) and the entry
   with its message in memory (`EffectHost.handed_out`: paged in, or a quorum queue's
   body read back from its Raft log).
2. `Deliver` goes to the consumer's channel. `DeadLetter` is republished through the
   dead-letter exchange at once, or, held (at-least-once), by the queue's
   `DeadLetterWorker`. `Dropped` (made only for hosts that follow drops: durable or
   paged) frees a scratch page. `SetTimer` moves the queue's one
   timer; when it fires the host decides what to apply (`Tick`). `QueueExpired` asks the
   node to delete the queue.
3. Only the deliveries are carried out by every replica of a quorum queue (each to its
   own consumers); dead-lettering, timers and expiry by its leader only: the host says
   whether it leads (`perform(effects, leading)`). A classic host always leads.
4. A durable classic queue (`journaled` and a journal key) tells the node's durability
   what left it: deliveries needing an ack as delivered, the rest as settled, in one call
   each per batch of effects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from warren.amqp.content import Message
from warren.queue import DeadLetter, Deliver, Dropped, Effect, Entry, QueueExpired, SetTimer
from warren.runtime.queues.clock import now_ms
from warren.runtime.queues.deadletter import DeadLetterWorker, dead_letter
from warren.runtime.queues.host import ConsumerRef, QueueHost
from warren.runtime.queues.paging import release
from warren.storage.pages import PageRef


class EffectHost(QueueHost, Protocol):
    """What the interpreter asks of the host whose effects it carries out."""

    def recipient(self, effect: Deliver) -> ConsumerRef | None:
        """The local consumer a delivery goes to (None: not delivered from here)."""

    def handed_out(self, entry: Entry) -> Entry:
        """The entry with its message in memory, as a consumer receives it."""


class Interpreter:
    """Carries out one queue's effects; owns its timer and its dead-letter worker."""

    __slots__ = ("_journaled", "_on_timer", "_timer", "host", "worker")

    def __init__(self, host: EffectHost, on_timer: Callable[[], None], journaled: bool) -> None:
        self.host = host
        self._on_timer = on_timer
        self._journaled = journaled
        self._timer: asyncio.TimerHandle | None = None
        # sends held dead-lettered messages (at-least-once); made when the first one is
        self.worker: DeadLetterWorker | None = None

    def perform(self, effects: Sequence[Effect], leading: bool = True) -> None:
        host = self.host
        key = host.journal_key if self._journaled else None
        delivered: list[int] = []
        gone: list[int] = []
        for effect in effects:
            if type(effect) is Deliver:
                ref = host.recipient(effect)
                if ref is None:
                    continue
                entry = effect.entry
                if type(entry.message) is not Message:
                    entry = host.handed_out(entry)
                ref.channel.deliver(ref.tag, entry, host)
                if key is not None:
                    (gone if ref.no_ack else delivered).append(entry.msg_id)
            elif not leading:
                continue
            elif type(effect) is DeadLetter:
                if effect.held:  # gone once `SettleDeadLetter` says the targets have it
                    self.dead_letters().send(effect)
                    continue
                # the copy's record in the target queue comes before the settlement here
                dead_letter(host, effect.entry, effect.reason)
                self._gone(effect.entry, key, gone)
            elif type(effect) is Dropped:
                self._gone(effect.entry, key, gone)
            elif type(effect) is SetTimer:
                self.arm(effect.at_ms)
            elif type(effect) is QueueExpired:
                host.broker.expire_queue(host)
        if delivered or gone:
            durability = host.broker.durability
            assert durability is not None and key is not None
            if delivered:
                durability.delivered(key, delivered)
            if gone:
                durability.settled(key, gone)

    def _gone(self, entry: Entry, key: str | None, gone: list[int]) -> None:
        """A message that left without being handed to a consumer."""
        if type(entry.message) is PageRef:
            release(self.host, (entry,))
        if key is not None:
            gone.append(entry.msg_id)

    def dead_letters(self) -> DeadLetterWorker:
        if self.worker is None:
            self.worker = DeadLetterWorker(self.host)
        return self.worker

    def arm(self, at_ms: int) -> None:
        """The queue's one timer, moved to `at_ms` wall-clock time."""
        if self._timer is not None:
            self._timer.cancel()
        delay_s = max(0.0, (at_ms - now_ms()) / 1000)
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._fired)

    def _fired(self) -> None:
        self._timer = None
        self._on_timer()

    def stop(self) -> None:
        """No timer and no dead-lettering from here on (the queue went, or its replica
        stopped leading)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.worker is not None:
            self.worker.stop()
            self.worker = None
