"""Publisher confirms of one channel in confirm mode: what becomes ``basic.ack`` and
``basic.nack``, and when.

Theory of operation:
1. Every publish gets the next sequence number (`published`) and is confirmed in one of
   three ways: at once (nothing it did needs waiting for), *held* (it appended to the
   node's message log, a persistent message in a durable queue, or went to quorum queues
   whose commits are `Pending`), or nacked (a queue refused it: reject-publish overflow,
   or a quorum queue that said no).
2. Confirms go in publish order: a held publish holds every later one, acked or nacked
   (RabbitMQ's confirms are in order too). `pending` gives what may go now, acks merged
   into one ``basic.ack(multiple)`` up to the first publish still held; the connection
   asks for it when it flushes, after `ready` asked for a flush.
3. A held publish waits for the log as a `Waiter` of the node's durability
   (`durable_reached`), and for each quorum queue's future; a refusal from any of them
   turns its ack into a nack.
4. With nothing held, a refused publish is nacked at once through `send` (after an ack of
   what came before it): no flush needed.
5. Once the channel closes (`close`) nothing here asks for a flush or sends again: a
   quorum queue's late commit must not confirm on a channel number reused meanwhile.
This unit knows no channel or socket: it is driven by `published`, `pending` and the
durability's `durable_reached`, so its rules are tested without a connection.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from warren.amqp import methods as m
from warren.runtime.queues.host import DurableStore
from warren.runtime.stats import MessageStats


class _Held:
    """A confirm that waits: for the log to be durable up to `log_sequence`, and for
    `waiting` replicated outcomes (quorum queues' commits); `nack` if any queue refused."""

    __slots__ = ("log_sequence", "nack", "seq", "waiting")

    def __init__(self, seq: int, log_sequence: int, nack: bool, waiting: int = 0) -> None:
        self.seq = seq
        self.log_sequence = log_sequence
        self.nack = nack
        self.waiting = waiting


class Confirms:
    """The confirm sequence of one channel and the confirms it still holds."""

    __slots__ = (
        "_closed",
        "_held",
        "_log_wanted",
        "_ready",
        "_send",
        "confirmed_upto",
        "durability",
        "publish_seq",
        "stats",
    )

    def __init__(
        self,
        durability: DurableStore | None,
        ready: Callable[[], None],
        send: Callable[[m.Method], None],
        stats: MessageStats,
    ) -> None:
        self.durability = durability
        self._ready = ready  # ask the connection to flush (it then calls `pending`)
        self._send = send
        self.stats = stats  # the channel's: counts the confirms that went out
        self.publish_seq = 0  # the sequence number of the latest publish
        self.confirmed_upto = 0  # every publish up to here had its ack or nack
        self._held: deque[_Held] = deque()  # in publish order
        self._log_wanted = 0  # the highest log sequence a held confirm waits for
        self._closed = False

    @property
    def unconfirmed(self) -> int:
        """Publishes that had no ack or nack yet (the management API's messages_unconfirmed)."""
        return self.publish_seq - self.confirmed_upto

    def published(
        self, refused: bool, replicated: list[asyncio.Future[bool]] | None, log_sequence: int
    ) -> None:
        """A publish went through routing: `refused` if a queue said no, the futures of the
        quorum queues that will say, and the log sequence it appended (0: none)."""
        self.publish_seq += 1
        if refused:
            self._nack_latest()
        elif replicated is not None:
            self._hold_replicated(replicated, log_sequence)
        elif log_sequence:
            self._hold(log_sequence)
        else:
            self._ready()

    def _hold(self, log_sequence: int) -> None:
        """The latest publish is confirmed once the log is durable up to `log_sequence`."""
        durability = self.durability
        assert durability is not None  # a sequence comes from its log
        if log_sequence <= durability.log.durable_sequence:
            self._ready()
            return
        self._held.append(_Held(self.publish_seq, log_sequence, False))
        self._log_wanted = log_sequence
        durability.wait(self)

    def _hold_replicated(self, outcomes: list[asyncio.Future[bool]], log_sequence: int) -> None:
        """The latest publish is confirmed once every quorum queue it went to committed it
        (and the log is durable up to `log_sequence`); nacked if one refused it."""
        item = _Held(self.publish_seq, log_sequence, False, len(outcomes))
        self._held.append(item)
        if log_sequence and self.durability is not None:
            self._log_wanted = max(self._log_wanted, log_sequence)
            self.durability.wait(self)
        for outcome in outcomes:
            outcome.add_done_callback(lambda done: self._replicated(item, done))

    def _replicated(self, item: _Held, done: asyncio.Future[bool]) -> None:
        item.waiting -= 1
        if done.cancelled() or done.exception() is not None or not done.result():
            item.nack = True
        if not self._closed:
            self._ready()

    def _nack_latest(self) -> None:
        """A queue refused the latest publish: ack what came before, then nack it."""
        seq = self.publish_seq
        if self._held:  # after the held ones, in order
            self._held.append(_Held(seq, 0, True))
            return
        if seq - 1 > self.confirmed_upto:
            self._send(m.BasicAck(seq - 1, seq - 1 - self.confirmed_upto > 1))
        self._send(m.BasicNack(seq, False, False))
        self.confirmed_upto = seq

    def pending(self) -> list[m.Method]:
        """The acks (and nacks) that may go now, in publish order: everything published
        since the last ack, up to the first publish still held."""
        before = self.confirmed_upto
        out: list[m.Method] = []
        held = self._held
        if held:
            durability = self.durability
            durable = durability.log.durable_sequence if durability is not None else 0
            while held and held[0].log_sequence <= durable and not held[0].waiting:
                item = held.popleft()
                if item.nack:
                    self._ack_upto(item.seq - 1, out)
                    out.append(m.BasicNack(item.seq, False, False))
                    self.confirmed_upto = item.seq
        self._ack_upto(held[0].seq - 1 if held else self.publish_seq, out)
        self.stats.confirm += self.confirmed_upto - before
        return out

    def _ack_upto(self, upto: int, out: list[m.Method]) -> None:
        if upto > self.confirmed_upto:
            out.append(m.BasicAck(upto, upto - self.confirmed_upto > 1))
            self.confirmed_upto = upto

    def durable_reached(self, durable_sequence: int) -> bool:
        """The log is durable up to `durable_sequence` (`Waiter`): ask for a flush if that
        releases the first held confirm. True while a held confirm waits for more."""
        held = self._held
        if held and held[0].log_sequence <= durable_sequence and not self._closed:
            self._ready()
        return self._log_wanted > durable_sequence

    def close(self) -> None:
        """The channel is gone: forget what is held, ask for nothing more."""
        self._closed = True
        self._held.clear()
        if self.durability is not None:
            self.durability.forget(self)
