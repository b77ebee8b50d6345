"""Publisher confirms of one channel in confirm mode: what becomes ``basic.ack`` and
``basic.nack``, and when.

Theory of operation:
1. Every publish gets the next sequence number (`published`, the delivery tag of its
   confirm) and is confirmed in one of three ways: at once (nothing it did needs waiting
   for), *held* (it appended to the node's message log, a persistent message in a
   durable queue, or went to quorum queues that have still to commit it), or nacked (a
   queue refused it: reject-publish overflow, or a quorum queue that said no).
2. Confirms go in publish order: a held publish holds every later one, acked or nacked
   (RabbitMQ's confirms are in order too). `pending` gives what may go now, acks merged
   into one ``basic.ack(multiple)`` up to the first publish still held, with the nacks
   due before it; the connection asks for it when it flushes, after `ready` asked for a
   flush.
3. What a held publish waits for:
   - the log: as a `Waiter` of the node's durability (`durable_reached`), up to the log
     sequence it appended. Consecutive publishes whose records are in the same unsealed
     batch become durable with the same sync: they share one `_Held` entry, whose tag and
     log sequence move up with each (the Spark writer's publishes arrive hundreds a read);
   - quorum queues: by counters, with no object per publish. The channel names each
     quorum host a publish went to (`expect`), which adds its tag to that host's queue of
     tags; the host says, once per committed batch, up to which tag this channel's
     publishes to it are done and which of them it refused (`replicated`). A host answers
     its batches in the order it sent them, so everything up to that tag is done: one
     call releases a run of tags. The first tag a host still owes bounds what may be
     confirmed; a publish routed to several queues waits for each;
   - another node's classic queue: the future of its `Pending` outcome, counted in the
     `_Held` entry (`waiting`).
   A refusal from any of them turns the ack into a nack, sent once the publishes before
   it are confirmed.
4. With nothing held, a refused publish is nacked at once through `send` (after an ack of
   what came before it): no flush needed.
5. Once the channel closes (`close`) nothing here asks for a flush or sends again: a
   quorum queue's late commit must not confirm on a channel number reused meanwhile.
This unit knows no channel or socket: it is driven by `expect`, `published`, `pending`,
`replicated` and the durability's `durable_reached`, so its rules are tested without a
connection.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import deque
from collections.abc import Callable

from warren.amqp import methods as m
from warren.runtime.queues.host import DurableStore
from warren.runtime.stats import MessageStats


class _Held:
    """Confirms that wait, tags `seq` to `last_seq`: for the log to be durable up to
    `log_sequence`, and for `waiting` futures (another node's classic queues). A run of
    publishes held by records of one unsealed batch shares one entry (point 3)."""

    __slots__ = ("last_seq", "log_sequence", "seq", "waiting")

    def __init__(self, seq: int, log_sequence: int, waiting: int = 0) -> None:
        self.seq = seq
        self.last_seq = seq
        self.log_sequence = log_sequence
        self.waiting = waiting


class Confirms:
    """The confirm sequence of one channel and the confirms it still holds."""

    __slots__ = (
        "_closed",
        "_expected",
        "_held",
        "_log_waiting",
        "_log_wanted",
        "_nacks",
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
        # per quorum host (its identity), the tags it has still to answer, in order
        self._expected: dict[object, deque[int]] = {}
        self._nacks: list[int] = []  # a heap: refused tags held behind earlier ones
        self._log_wanted = 0  # the highest log sequence a held confirm waits for
        self._log_waiting = False  # a waiter of the durability (until it says False)
        self._closed = False

    @property
    def unconfirmed(self) -> int:
        """Publishes that had no ack or nack yet (the management API's messages_unconfirmed)."""
        return self.publish_seq - self.confirmed_upto

    @property
    def next_tag(self) -> int:
        """The tag the publish being routed will have (`published` gives it)."""
        return self.publish_seq + 1

    def expect(self, host: object) -> None:
        """The publish being routed went to quorum queue `host`, which tells `replicated`."""
        tags = self._expected.get(host)
        if tags is None:
            tags = self._expected[host] = deque()
        tags.append(self.publish_seq + 1)

    def published(
        self, refused: bool, replicated: list[asyncio.Future[bool]] | None, log_sequence: int
    ) -> None:
        """A publish went through routing (after `expect` for its quorum queues): `refused`
        if a queue said no, the futures of other nodes' queues that will say, and the log
        sequence it appended (0: none)."""
        seq = self.publish_seq = self.publish_seq + 1
        if refused:
            self._nack_latest()
        elif replicated is not None:
            self._hold_futures(replicated, log_sequence)
        elif not log_sequence:
            self._ready()
        else:  # held until the log is durable up to `log_sequence` (inline: most publishes)
            durability = self.durability
            assert durability is not None  # a sequence comes from its log
            log = durability.log
            held = self._held
            if held:
                last = held[-1]
                if (
                    last.last_seq == seq - 1
                    and last.log_sequence >= log.unsealed_from
                    and not last.waiting
                ):
                    # The publish before this one waits for a record of the same unsealed
                    # batch: both are durable after the same sync, so one entry holds the
                    # run (and this is a waiter already: that record is not durable).
                    last.last_seq = seq
                    last.log_sequence = self._log_wanted = log_sequence
                    return
            if log_sequence <= log.durable_sequence:
                self._ready()
                return
            held.append(_Held(seq, log_sequence))
            self._log_wanted = log_sequence
            if not self._log_waiting:  # once per run of held confirms, not per publish
                self._log_waiting = True
                durability.wait(self)

    def _hold_futures(self, outcomes: list[asyncio.Future[bool]], log_sequence: int) -> None:
        """The latest publish is confirmed once every future says True (and the log is
        durable up to `log_sequence`); nacked if one says otherwise."""
        item = _Held(self.publish_seq, log_sequence, len(outcomes))
        self._held.append(item)
        if log_sequence and self.durability is not None:
            self._log_wanted = max(self._log_wanted, log_sequence)
            self._log_waiting = True
            self.durability.wait(self)
        for outcome in outcomes:
            outcome.add_done_callback(lambda done: self._answered(item, done))

    def _answered(self, item: _Held, done: asyncio.Future[bool]) -> None:
        item.waiting -= 1
        if done.cancelled() or done.exception() is not None or not done.result():
            heapq.heappush(self._nacks, item.seq)
        if not self._closed:
            self._ready()

    def replicated(self, host: object, upto: int, refused: list[int] | None) -> None:
        """Quorum queue `host` is done with this channel's publishes to it up to tag
        `upto`; the `refused` ones are nacked."""
        if self._closed:
            return
        tags = self._expected.get(host)
        if tags is not None:
            while tags and tags[0] <= upto:
                tags.popleft()
            if not tags:
                del self._expected[host]
        if refused:
            for tag in refused:
                heapq.heappush(self._nacks, tag)
        self._ready()

    def _nack_latest(self) -> None:
        """A queue refused the latest publish: ack what came before, then nack it."""
        seq = self.publish_seq
        if self._held or self._expected or self._nacks:  # after the held ones, in order
            heapq.heappush(self._nacks, seq)
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
        upto = self.publish_seq
        for tags in self._expected.values():
            if tags[0] <= upto:
                upto = tags[0] - 1
        held = self._held
        if held:
            durability = self.durability
            durable = durability.log.durable_sequence if durability is not None else 0
            while held and held[0].log_sequence <= durable and not held[0].waiting:
                held.popleft()
            if held and held[0].seq <= upto:
                upto = held[0].seq - 1
        nacks = self._nacks
        while nacks and nacks[0] <= upto:
            tag = heapq.heappop(nacks)
            if tag > self.confirmed_upto:  # refused by more than one queue: nacked once
                self._ack_upto(tag - 1, out)
                out.append(m.BasicNack(tag, False, False))
                self.confirmed_upto = tag
        self._ack_upto(upto, out)
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
        self._log_waiting = self._log_wanted > durable_sequence
        return self._log_waiting

    def close(self) -> None:
        """The channel is gone: forget what is held, ask for nothing more."""
        self._closed = True
        self._held.clear()
        self._expected.clear()
        self._nacks.clear()
        if self.durability is not None:
            self.durability.forget(self)
