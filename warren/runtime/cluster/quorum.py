"""A quorum queue on one node: a replica of its queue machine, driven through Raft.

Theory of operation:
1. Every replica holds a `QueueMachine` and applies the same committed commands in the
   same order with the same `Meta` (the entry's Raft index, and the leader's clock stamped
   on the entry when the command reached it: `EntryMeta`), so every replica computes
   the same state *and the same effects*. A `QuorumHost` is a `QueueHost`
   (`warren.runtime.queues.host`): a command is proposed (on the leader) or forwarded to
   the leader (`ClusterNode.submit`), and what needs its outcome answers `Pending`:
   publishes (the confirm waits for a majority), basic.get, purge. The reply a committed
   entry gives the proposer is already the outcome's value (a publish's: True unless the
   queue rejected it).
   The commands a host sends in one turn of the event loop go as one entry (a batch:
   `queue_entries`, point 1), so a burst of publishes costs one proposal, one Raft append
   per follower and one reply; each command's outcome is answered from the batch's reply
   (a list, one per command): a future's, or, for a channel's publishes, one call per
   channel and batch (`Publisher.replicated`: done up to a tag, and which were refused),
   so that a confirm costs no future per publish. Batches are answered in the order they
   were sent, whatever order their submits end in.
   Every command is numbered by the host that sends it (`Sequenced`): when a leader
   change makes the node send a command again that had committed after all, the machine
   applies it once and answers the copy as it answered the first. Settles and cancels,
   which nothing waits for, are sent again until applied when their submit fails (no
   leader in time, a lost link): dropped, an acked message would be delivered again.
2. Effects are carried out by the one interpreter every host uses
   (`warren.runtime.queues.effects`), where they belong, by the replica that applies them:
   - `Deliver` by the node of the consumer (a consumer key is ``(node, n)``), so a follower
     delivers to its own clients from its own copy of the log, without another hop, and
     a leader change loses no delivery in flight; for a consumer on a node that holds no
     replica (outside the group's Raft configuration: `_replicates`), by the leader,
     which sends it there (`warren.runtime.cluster.remote`). Such consumers are sent what
     they hold again, as redelivered, when a deliverer may have lost it: by a new leader,
     when their link comes back, when their node leaves the configuration, and by a
     replica after it installed a snapshot; their node drops what it already handed over
     (`Handed`). Deliveries are counted by log index on the
     consumer's node (`_delivered_through`), whichever way they came: a replica started
     again while the process runs (its node removed from the members, then added)
     applies the log from the start once more, and makes only the deliveries after the
     last one its consumers had, from it or from the leader;
   - dead-lettering, timers and queue expiry by the leader only. At-most-once
     dead-lettering loses the copy if the leader crashes between commit and re-publish,
     as RabbitMQ's default strategy may; at-least-once keeps it held in the machine until
     a replicated `SettleDeadLetter`, and a new leader sends what is still held again.
3. Consumers of a node that is gone (its link down for a grace period) are cancelled by
   the leader, and their unacknowledged messages returned, so that they are delivered
   again; the same happens for every consumer of a node the leader finds gone when it is
   elected. A node without a replica learns of it from the leader (a ``cancelled``
   item), or, if that was lost with the link, by asking the leader once a link is back.
   A consumer key names the node process's incarnation, so a node that restarted cancels
   the consumers of its previous life as soon as it sees them. A delivery to a consumer
   this node no longer has (its channel closed meanwhile) is returned at once.
   Messages taken with basic.get and not yet settled are held the same way, by the node
   process (`Get.holder`, a key numbered 0), and returned by the same rules.
4. Settings (arguments, policies) are applied by the leader as a replicated `Configure`
   when it is elected and whenever a policy changes, so every replica limits the same way.
5. Bodies stay on disk, as in RabbitMQ's quorum queues: the machine keeps the position
   of an `Enqueue` (`Meta.index`: its entry's Raft index and its slot in the batch,
   `queue_entries.position`) in place of its message, so it holds only a small record
   per message (`Entry`: ids, size, deadline, that position). The body is read back
   from the entry when the message is handed out (delivered to a consumer of this node,
   fetched, dead-lettered), from the log in memory or from the WAL
   (`RaftGroup.entry_data`); the last `RECENT_BODIES_MAX` bodies applied are kept at
   hand, so that a consumer that keeps up never waits for a read. What is handed out is a
   copy of the entry with the message in it: the machine's entry keeps its position.
6. Snapshots are the machine with its entries as columns (`warren.queue.snapshot`,
   `MACHINE_VERSION` 2: small records only). The indexes it holds are `kept_indexes`: the Raft
   host keeps the WAL from the lowest of them on, and sends a follower that needs the
   snapshot the entries with it, so every replica can read every body it holds after a
   crash or a restart. A snapshot of version 1 (whole messages in the machine) is still
   restored: those messages are handed out as they are.

Why bodies are read from the Raft log rather than copied into a store of their own when
applied: measured on 1,000,000 queued 128-byte messages, the bytes went to the messages
in the machine, the Raft log's entries in memory and the snapshots holding both; the
entries are on disk already, so reading them back costs no second write and no second
index, and the WAL's liveness ledger only needs to know how far back to keep them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Final, Protocol, TypeGuard, TypeVar, cast

from warren.amqp.content import Message
from warren.cluster import queue_entries
from warren.cluster.metadata import DeleteQueue, Operation
from warren.model import QueueRecord
from warren.queue import (
    Cancel,
    Checkout,
    Command,
    Configure,
    Counters,
    Deliver,
    Discard,
    Enqueue,
    Entry,
    Get,
    Got,
    Meta,
    Purge,
    QueueMachine,
    Rejected,
    Return,
    Sequenced,
    Settle,
    SettleDeadLetter,
    Tick,
    Touch,
)
from warren.queue import snapshot as queue_snapshot
from warren.runtime.cluster.calls import (
    ConsumerKey,
    Consumers,
    Counts,
    LeaderCounters,
    LeaderRequest,
)
from warren.runtime.cluster.peers import PeerUnavailable, RemoteError
from warren.runtime.cluster.raft_host import EntryMeta, RaftHost
from warren.runtime.cluster.remote import RemoteQueues, copy_entry
from warren.runtime.queues.clock import now_ms
from warren.runtime.queues.effects import Interpreter
from warren.runtime.queues.host import (
    ACCEPTED,
    REPLICATING,
    Answer,
    ConsumerRef,
    HostFields,
    Node,
    Outcome,
    Pending,
    Placement,
    Published,
    Publisher,
    Subscriber,
)

if TYPE_CHECKING:
    from warren.runtime.cluster.raft_host import RaftGroup

log = logging.getLogger("warren.quorum")
R = TypeVar("R")

# commands sent in one turn of the event loop: number, command, who is told its outcome
# (its future, or the channel that published it) and the publish's tag (0: a future)
_Batch = list[tuple[int, Command, "asyncio.Future[object] | Publisher", int]]
_HOST_NUMBERS = itertools.count(1)  # a host made again in one process numbers anew
# bodies of the latest enqueues kept in memory, so a consumer that keeps up reads no disk
RECENT_BODIES_MAX: Final = 4096
RESEND_DELAY_S: Final = 0.5  # before a command that must not be lost is sent again


class QuorumNode(Protocol):
    """What a quorum host needs of the node's cluster side
    (`warren.runtime.cluster.node.ClusterNode`, which imports this module)."""

    @property
    def broker(self) -> Node: ...

    @property
    def name(self) -> str: ...

    @property
    def incarnation(self) -> str:
        """Names this process's consumers (those of an earlier life of the node are stale)."""

    @property
    def applying(self) -> bool:
        """A metadata operation is being applied here (its changes are not proposed again)."""

    @property
    def remote(self) -> RemoteQueues: ...

    @property
    def raft(self) -> RaftHost:
        """The node's Raft groups: a replica reads its group's configuration there."""

    def submit(self, group_id: str, data: bytes) -> asyncio.Future[object]:
        """A command to the group's leader; the future has its outcome once applied."""

    def replicate(self, operation: Operation) -> asyncio.Future[object]:
        """A metadata operation through the log; done once every node applied it."""

    async def leader_call(self, request: LeaderRequest[R]) -> R: ...

    def forget_queue(self, host: QuorumHost) -> None: ...

    def reap_soon(self) -> None:
        """Cancel, after a grace period, the consumers of nodes still unreachable."""


class QuorumHost(HostFields):
    """One quorum queue's replica on this node: a `QueueHost` driven through Raft."""

    replica: Replica

    def __init__(
        self, cluster: QuorumNode, record: QueueRecord, group_id: str, members: list[str]
    ) -> None:
        super().__init__(cluster.broker, record)
        self.cluster = cluster
        self.group_id = group_id
        self.members = members
        self.group: RaftGroup | None = None
        self.machine = self._empty_machine()
        self._consumers: dict[ConsumerKey, ConsumerRef] = {}
        self._wire_keys: dict[Hashable, ConsumerKey] = {}  # a channel's key -> ours
        # numbers this host's commands (`Sequenced`): a copy sent again is applied once
        self._sender = (cluster.name, cluster.incarnation, next(_HOST_NUMBERS))
        self._seq = itertools.count(1)
        # what this host proposed and has not seen applied, by number: applied as it is
        # rather than decoded again (`queue_entries.decode`)
        self._sent: dict[int, Command] = {}
        self._batch: _Batch = []  # sent in this turn of the event loop, not yet proposed
        self._delivered_through = 0  # the last index whose deliveries this node made,
        self._delivered_by: str | None = None  # from its replica (its name) or a leader's
        # holds what this node process takes with basic.get (consumers count from 1)
        self._getter: ConsumerKey = (cluster.name, cluster.incarnation, 0)
        self._dropping: set[ConsumerKey] = set()  # stale consumers of ours being cancelled
        self.handed = Handed()  # deliveries the leader sent here (no replica here)
        # batches submitted and not yet answered, answered in this order (`_answered`)
        self._answering: deque[tuple[_Batch, asyncio.Future[object]]] = deque()
        self._stopped = False
        # timers, dead-lettering (at-least-once: its worker) on the leader; never journaled
        self.effects = Interpreter(self, self._on_timer, journaled=False)
        self._mine: str | None = None  # while applying an entry: whose deliveries are ours
        self._leading = False  # likewise: whether this replica leads
        self._applying = 0  # likewise: the entry's Raft index
        self.replica = Replica(self)
        self._replicas: tuple[int, ...] = ()  # the Raft configuration the leader last saw
        # position: body (a `Message`, or as the entry holds it: `queue_entries.message`)
        self._recent: OrderedDict[int, object] = OrderedDict()
        self.refresh_policies()

    @property
    def leader(self) -> bool:
        return self.group is not None and self.group.is_leader

    @property
    def placement(self) -> Placement:
        return Placement.REPLICATED

    # --- what channels call (`QueueHost`) ----------------------------------------------------

    # the reply of a committed entry is the outcome's value (`apply_entry`): the casts say
    # which one, as the future comes through `ClusterNode.submit` for any group

    def publish(
        self, command: Enqueue, publisher: Publisher | None = None, tag: int = 0
    ) -> Published:
        group = self.group
        if group is None or not group.is_leader:  # forwarded to the leader's node
            self.cluster.remote.sent += 1
        if publisher is None:
            return Pending(cast("asyncio.Future[bool]", self.submit(command)))
        self._add(next(self._seq), command, publisher, tag)
        return REPLICATING

    def get(self, no_ack: bool) -> Answer[Got | None]:
        command = Get(no_ack) if no_ack else Get(no_ack, holder=self._getter)
        return Pending(cast("asyncio.Future[Got | None]", self.submit(command)))

    def purge(self) -> Answer[int]:
        return Pending(cast("asyncio.Future[int]", self.submit(Purge())))

    def counts(self) -> Answer[tuple[int, int]]:
        return Pending(asyncio.ensure_future(self._counts()))

    def leader_counters(self) -> asyncio.Future[Counters]:
        """The leader's counts, for the management API of a node that holds no replica
        (its machine is empty): RabbitMQ shows a quorum queue's leader's metrics."""
        return asyncio.ensure_future(self.cluster.leader_call(LeaderCounters(self.group_id)))

    def touch(self) -> None:
        self.submit(Touch())

    def settle(self, command: Settle | Return | Discard | SettleDeadLetter) -> None:
        if type(command) is Return:  # it may come back to the same consumer at once
            self.handed.settled(command.msg_ids)
        self._submit_until_applied(command)

    def _submit_until_applied(self, command: Command) -> None:
        """Fire and forget, but never lost: a command whose submit failed (no leader in
        time, a lost link) is sent again, with its number, until it is applied or the host
        stops, as rabbit_fifo_client resends pending settles to a new leader. A settle
        dropped here would leave the message checked out until its consumer went, then
        deliver it again although the client had acked it. The number makes the copy
        harmless if the first one committed after all (`Sequenced`)."""
        self._send_until_applied(next(self._seq), command)

    def _send_until_applied(self, seq: int, command: Command) -> None:
        if not self._stopped:
            future = self._send(seq, command)
            future.add_done_callback(partial(self._sent_once, seq, command))

    def _sent_once(self, seq: int, command: Command, future: asyncio.Future[object]) -> None:
        if future.cancelled() or self._stopped:
            return
        if future.exception() is None:
            if type(command) is Settle or type(command) is Discard:
                # a leader elected before this applied may have sent it again: ours till now
                self.handed.settled(command.msg_ids)
            return
        log.debug("%s: %s sent again", self.group_id, type(command).__name__)
        loop = asyncio.get_running_loop()  # not at once: it may fail as fast (no leader yet)
        loop.call_later(RESEND_DELAY_S, self._send_until_applied, seq, command)

    def forward_delete(self, if_unused: bool, if_empty: bool) -> asyncio.Future[int] | None:
        """Through the metadata log (None while the log's delete is being applied)."""
        cluster = self.cluster
        if cluster.applying:
            return None
        record = self.record
        deleted = cluster.replicate(DeleteQueue(record.vhost, record.name, self.group_id))
        return cast("asyncio.Future[int]", deleted)

    def submit(self, command: Command) -> asyncio.Future[object]:
        return self._send(next(self._seq), command)

    def _send(self, seq: int, command: Command) -> asyncio.Future[object]:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._add(seq, command, future, 0)
        return future

    def _add(
        self, seq: int, command: Command, told: asyncio.Future[object] | Publisher, tag: int
    ) -> None:
        """Into the batch of this turn of the event loop: every command the host sends in
        one turn goes as one entry (`queue_entries`, point 1), proposed once the turn's
        other callbacks ran (`_flush`)."""
        batch = self._batch
        if not batch:
            asyncio.get_running_loop().call_soon(self._flush)
        batch.append((seq, command, told, tag))
        self._sent[seq] = command
        if len(batch) >= queue_entries.BATCH_MAX:
            self._flush()

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return  # flushed early (full, or a count waits for it)
        data = queue_entries.encode(
            self._sender, [(seq, command) for seq, command, _told, _tag in batch]
        )
        submitted = self.cluster.submit(self.group_id, data)
        self._answering.append((batch, submitted))
        submitted.add_done_callback(self._answered)

    def _answered(self, _submitted: asyncio.Future[object]) -> None:
        """A batch's entry was applied (a reply per command), or its submit failed: the
        batches done at the head of those submitted are answered, in the order they were
        sent, so that a channel told its publishes are done up to a tag has every earlier
        one done too (`Publisher`)."""
        answering = self._answering
        while answering and answering[0][1].done():
            self._answer(*answering.popleft())

    def _answer(self, batch: _Batch, submitted: asyncio.Future[object]) -> None:
        sent = self._sent
        for seq, _command, _told, _tag in batch:
            sent.pop(seq, None)  # failed, or applied elsewhere: a later copy is decoded
        error: BaseException | None = None
        replies: list[object] = []
        if submitted.cancelled():
            error = asyncio.CancelledError()
        else:
            error = submitted.exception()
            if error is None:
                replies = cast("list[object]", submitted.result())
            else:
                log.debug("%s: %s commands failed: %s", self.group_id, len(batch), error)
        done: dict[Publisher, _Done] = {}
        for slot, (_seq, _command, told, tag) in enumerate(batch):
            if isinstance(told, asyncio.Future):
                if told.done():
                    continue
                if error is None:
                    told.set_result(replies[slot])
                elif submitted.cancelled():
                    told.cancel()
                else:
                    told.set_exception(error)
                    told.exception()  # seen: those nobody waits for fail quietly
                continue
            report = done.get(told)
            if report is None:
                report = done[told] = _Done()
            report.upto = tag
            report.count += 1
            if error is not None or not replies[slot]:
                report.refused.append(tag)
        for publisher, report in done.items():
            publisher.replicated(self, report.upto, report.count, report.refused or None)

    async def _all_sent(self) -> None:
        """Once every command this host sent so far was applied (or failed)."""
        self._flush()
        if self._answering:
            submitted = [submitted for _batch, submitted in self._answering]
            await asyncio.gather(*submitted, return_exceptions=True)

    async def _counts(self) -> tuple[int, int]:
        """declare-ok's message and consumer counts, read after every command this node
        sent has been applied, from the leader's state (read your writes)."""
        await self._all_sent()
        if self.leader:
            return self.machine.ready_count, self.machine.consumer_count
        return await self.cluster.leader_call(Counts(self.group_id))

    async def recheck_consumers(self) -> None:
        """On a node without a replica, once a link is back: consumers the leader cancelled
        meanwhile (the word of it went with the link) are cancelled here too."""
        await self._all_sent()
        ours = list(self._consumers)
        if self.group is not None or not ours:
            return
        try:
            alive = await self.cluster.leader_call(Consumers(self.group_id))
        except (PeerUnavailable, RemoteError) as error:
            log.debug("consumers of %s not checked: %s", self.group_id, error)
            return
        for key in ours:
            if key not in alive:
                self.cancelled(key)

    def subscribe(
        self, channel: Subscriber, tag: str, command: Checkout, limited: bool
    ) -> Outcome[None]:
        key = self.cluster.remote.consumer_key()
        self._consumers[key] = ConsumerRef(channel, tag, command.no_ack)
        self._wire_keys[command.consumer] = key
        self.ever_consumed = True
        self.submit(replace(command, consumer=key, channel=key))
        return ACCEPTED

    def started(self, key: Hashable) -> None:
        """Deliveries come from committed entries, after consume-ok went."""

    def unsubscribe(self, key: Hashable, requeue: bool = False) -> None:
        """basic.cancel (a channel closing cancels its consumers first): what the consumer
        holds stays checked out to it, as rabbit_fifo's cancel leaves it, until its channel
        acks or returns it (on close, counted as a delivery); with `requeue` (the consumer's
        process is gone) it goes back with the cancel, as rabbit_fifo's ``down`` does."""
        wire = self._wire_keys.pop(key, None)
        if wire is not None:
            self._consumers.pop(wire, None)
            self.handed.forget(wire)
            self._submit_until_applied(Cancel(wire, requeue))

    def delivered(self, key: Hashable, entry: Entry, index: int, sender: str) -> None:
        """A delivery the leader sent (this node holds no replica): to the consumer once;
        if no channel here has the consumer (closed, or from before a restart), it is
        cancelled with what it holds, so the leader stops sending to it. Deliveries come
        in log order from each leader; one from an entry this node had deliveries of
        already (from its replica, or from another leader applying the entry again as it
        catches up) is dropped. One sent again (`index` 0: `hand_again`) goes by `Handed`
        only."""
        if index:
            through = self._delivered_through
            if index < through or (index == through and sender != self._delivered_by):
                return
            self._delivered_through, self._delivered_by = index, sender
        found = self._consumers.get(cast("ConsumerKey", key))
        if found is None:
            self._drop_stale(cast("ConsumerKey", key))
        elif found.no_ack or self.handed.fresh(key, entry.msg_id):
            # a no-ack delivery is settled as it is applied: never sent again (`hand_again`
            # sends what is checked out), so `Handed` keeps nothing of it
            found.channel.deliver(found.tag, entry, self)

    def cancelled(self, key: Hashable) -> None:
        """The leader cancelled a consumer of ours (it took this node for gone): the
        channel is told, and nothing of the consumer stays here (no settle or cancel of
        it will come: the channel forgets it)."""
        ref = self._consumers.pop(cast("ConsumerKey", key), None)
        if ref is not None:
            self.handed.forget(key)
            for wire in [wire for wire, ours in self._wire_keys.items() if ours == key]:
                del self._wire_keys[wire]
            ref.channel.queue_deleted(ref.tag)

    def limit(self, channel: Subscriber) -> None:
        """Channel-wide prefetch does not apply to quorum queues (RabbitMQ refuses it)."""

    def dispatch(self) -> None:
        """Consumers' credit is the machine's own: nothing to retry."""

    def cancel_all(self) -> None:
        for ref in list(self._consumers.values()):
            ref.channel.queue_deleted(ref.tag)
        self._consumers.clear()
        self._wire_keys.clear()

    def stop(self) -> None:
        self._stopped = True  # nothing is sent again (`_submit_until_applied`)
        self._stop_leading()
        self.cluster.forget_queue(self)

    def _stop_leading(self) -> None:
        self.effects.stop()

    def refresh_policies(self) -> None:
        self.policy, self.operator_policy = self.broker.policies_of(self.record)
        if self.leader:
            self._configure()

    def _empty_machine(self) -> QueueMachine:
        return QueueMachine(
            self.record.name,
            self.record.vhost,
            settings=self.broker.settings_of(self.record, None, None),
            last_used_ms=now_ms(),
        )

    def drop_replica(self) -> None:
        """This node holds no replica any more: its state goes with it, since a replica
        added here again starts from an empty log (or from the leader's snapshot)."""
        self.machine = self._empty_machine()
        self._recent.clear()

    def _configure(self) -> None:
        settings = self.broker.settings_of(self.record, self.policy, self.operator_policy)
        if settings != self.machine.settings:
            self.submit(Configure(settings))

    # --- the Raft group's state machine --------------------------------------------------------

    def apply_entry(self, meta: EntryMeta, data: bytes) -> object:
        """Apply a committed entry: its commands in order, each with its own position
        (`queue_entries.position`); the reply is the proposer's outcome value for each
        (a publish's bool, basic.get's `Got` or None, purge's count), a list of them
        for a batch."""
        index = meta.index
        commands = queue_entries.decode(data, self._sender, self._sent)
        leader = self.leader
        if leader:
            self._check_replicas()
        # a replica started again in this process (its node was a member, then not, then
        # again) applies the log from the start: its consumers had what came before
        mine = None
        if index > self._delivered_through:
            mine = self.cluster.name
            self._delivered_through, self._delivered_by = index, mine
        replies = [
            self._apply_command(meta, slot, numbered, leader, mine)
            for slot, numbered in enumerate(commands)
        ]
        return replies if queue_entries.batched(data) else replies[0]

    def _apply_command(
        self, meta: EntryMeta, slot: int, numbered: object, leader: bool, mine: str | None
    ) -> object:
        index = meta.index
        time_ms = meta.time_ms
        if time_ms is None:  # written before the leader stamped entries: (proposer's time, command)
            time_ms, numbered = cast("tuple[int, Command]", numbered)
        command = numbered.command if type(numbered) is Sequenced else numbered
        held = queue_entries.position(index, slot)
        if type(command) is Enqueue:  # the machine keeps the entry's position (point 5)
            recent = self._recent
            recent[held] = command.message
            if len(recent) > RECENT_BODIES_MAX:
                recent.popitem(last=False)
        reply, effects = self.machine.apply(Meta(time_ms, index=held), cast("Command", numbered))
        if type(command) is Enqueue:
            reply = type(reply) is not Rejected
        elif leader and type(reply) is Got:  # to the proposer, maybe on another node
            reply = Got(self.with_body(reply.entry), reply.remaining)
        if type(command) is Cancel:
            cancelled = cast("ConsumerKey", command.consumer)
            if cancelled in self._consumers:
                self.cancelled(cancelled)  # the leader's (it thought this node gone)
            elif leader and self._elsewhere(cancelled):
                self.cluster.remote.cancel(cancelled[0], self.record, cancelled)
        elif type(command) is Get and self._stale(command.holder):
            self._drop_stale(command.holder)  # a get of this node's life before a restart
        elif type(command) is Checkout and self._stale(command.consumer):
            self._drop_stale(command.consumer)  # replayed after a restart: that life is over
        if effects:
            self._mine, self._leading, self._applying = mine, leader, index
            self.effects.perform(effects, leader)
        return reply

    # --- what the interpreter asks (`EffectHost`) ------------------------------------------------

    def recipient(self, effect: Deliver) -> ConsumerRef | None:
        """Deliveries to this node's consumers are made here, from this replica; the leader
        sends those of consumers on nodes without a replica (point 2)."""
        consumer = cast("ConsumerKey", effect.consumer)
        if consumer[0] != self._mine:
            if self._leading and not self._replicates(consumer[0]):
                entry = self.with_body(effect.entry)
                self.cluster.remote.hand(consumer[0], self.record, consumer, entry, self._applying)
            return None
        if consumer[1] != self.cluster.incarnation:
            self._drop_stale(consumer)  # added before this node restarted
            return None
        found = self._consumers.get(consumer)
        if found is None:  # the channel went away after the consumer was added
            self._submit_until_applied(Return([effect.entry.msg_id]))
        elif not found.no_ack and not self.handed.fresh(consumer, effect.entry.msg_id):
            return None  # the leader handed it already (this node was no member then)
        return found

    def handed_out(self, entry: Entry) -> Entry:
        return self.with_body(entry)

    def with_body(self, entry: Entry) -> Entry:
        """A copy of `entry` with its message read back (point 5)."""
        held = entry.message
        if type(held) is not int:
            return entry  # restored from a snapshot of MACHINE_VERSION 1
        recent = self._recent.pop(held, None)
        message = self.read_body(held) if recent is None else queue_entries.message(recent)
        copy = Entry(entry.msg_id, message, entry.size_bytes, entry.expires_at_ms, entry.level)
        copy.delivery_count = entry.delivery_count
        return copy

    def read_body(self, held: int) -> Message:
        """The message enqueued by the command at `position` `held` (point 5)."""
        recent = self._recent.get(held)
        if recent is None:
            assert self.group is not None, "a replica without its Raft group holds no message"
            data = self.group.entry_data(queue_entries.index_of(held))
            command = queue_entries.decode(data)[queue_entries.slot_of(held)]
            if type(command) is tuple:  # written before stamps: (proposer's time, command)
                command = command[1]
            if type(command) is Sequenced:
                command = command.command
            assert type(command) is Enqueue
            recent = command.message
        return queue_entries.message(recent)

    def kept_indexes(self) -> list[int]:
        """The Raft indexes of the entries holding the messages the machine holds."""
        index_of = queue_entries.index_of
        return list(
            {index_of(e.message) for e in self.machine.held_entries() if type(e.message) is int}
        )

    def snapshot(self) -> bytes:
        return queue_snapshot.dumps(self.machine)

    def restore(self, data: bytes) -> None:
        self.machine = queue_snapshot.loads(data)
        self._recent.clear()
        if self.group is not None:  # a snapshot installed while the node runs
            self._hand_held_here()
        # consumers of this node's earlier lives in it: dropped once the host is wired
        asyncio.get_running_loop().call_soon(self._drop_stale_holders)

    def _drop_stale_holders(self) -> None:
        for key in self._holders():
            if self._stale(key):
                self._drop_stale(key)

    def _hand_held_here(self) -> None:
        """After a snapshot replaced this replica's state: the entries it covers made no
        deliveries here, so what this node's consumers hold in it and were never handed
        goes to them now (as redelivered: it may have come another way before)."""
        for consumer in self._consumer_keys():
            ref = self._consumers.get(consumer)
            if ref is None or ref.no_ack:
                continue
            for entry in self.machine.checked_out_entries(consumer):
                if self.handed.fresh(consumer, entry.msg_id):
                    copy = copy_entry(self.with_body(entry))
                    copy.delivery_count += 1
                    ref.channel.deliver(ref.tag, copy, self)

    def role_changed(self, leader: bool, leader_node: str | None) -> None:
        self._drop_stale_holders()
        if not leader:
            self._stop_leading()
            return
        self._configure()
        assert self.group is not None, "only a replica leads"
        self._replicas = self.group.node.membership.members
        if self.machine.timer_at_ms is not None:
            self.effects.arm(self.machine.timer_at_ms)
        for dead in self.machine.dead_letters_in_flight():  # a new leader sends them again
            self.effects.dead_letters().send(dead)
        self.hand_again()  # and what consumers with no replica hold
        self.cluster.reap_soon()

    def hand_again(self, node: str | None = None) -> None:
        """On the leader: send the consumers on nodes without a replica (those of `node`
        only, if given) what they hold again, since the first copy may have been lost
        (with a link that dropped, or with the leader that sent it). Their node drops
        what it already handed to the consumer (`Handed`); what it hands now may have
        reached a client before, so it goes as redelivered, which keeps the order a
        client sees (no message redelivered=false after a later one)."""
        if not self.leader:
            return
        for consumer in self._consumer_keys():
            if self._elsewhere(consumer) and node in (None, consumer[0]):
                for entry in self.machine.checked_out_entries(consumer):
                    copy = copy_entry(self.with_body(entry))  # the machine's entry stays
                    copy.delivery_count += 1
                    self.cluster.remote.hand(consumer[0], self.record, consumer, copy)

    def _elsewhere(self, consumer: ConsumerKey) -> bool:
        """A consumer on a node that holds no replica (the leader delivers to it)."""
        return consumer[0] != self.cluster.name and not self._replicates(consumer[0])

    def _replicates(self, node: str) -> bool:
        """Whether `node` applies this queue's log, so that it delivers to its consumers
        itself: it hosts the group (the metadata's member list names it) and is in the Raft
        group's configuration as this replica has it. Neither alone will do: the list
        changes before a member is added and after one is removed, and either stays
        changed when a change fails halfway."""
        group = self.group
        if group is None or node not in self.members:
            return node in self.members
        return self.cluster.raft.names.add(node) in group.node.membership.members

    def _check_replicas(self) -> None:
        """On the leader, as it applies: a node that left the group's configuration may not
        have applied (so delivered) the last entries before it left; its consumers are
        handed what they hold (their node drops what it had: `Handed`)."""
        group = self.group
        assert group is not None, "only a replica applies entries"
        replicas = group.node.membership.members
        if replicas == self._replicas:
            return
        gone = set(self._replicas) - set(replicas)
        self._replicas = replicas
        for node_id in sorted(gone):
            node = self.cluster.raft.name_of(node_id)
            if node is not None:
                self.hand_again(node)

    def reap(self, nodes: set[str]) -> None:
        """On the leader: cancel the consumers of `nodes` (gone) and requeue what they, and
        basic.get on those nodes, held."""
        if not nodes or not self.leader:
            return
        for key in self._holders():
            if key[0] in nodes:
                self._cancel_with_messages(key)

    def _consumer_keys(self) -> list[ConsumerKey]:
        """The consumers as the log has them (every key is a `ConsumerKey`: `subscribe`)."""
        return cast("list[ConsumerKey]", list(self.machine.consumers()))

    def _holders(self) -> list[ConsumerKey]:
        """The consumers, and the node processes holding fetched messages, as the log has
        them."""
        return [*self._consumer_keys(), *cast("list[ConsumerKey]", list(self.machine.holders()))]

    def _stale(self, key: Hashable) -> TypeGuard[ConsumerKey]:
        """A consumer or getter key of this node in an earlier life."""
        mine = (self.cluster.name, self.cluster.incarnation)
        return isinstance(key, tuple) and key[0] == mine[0] and key[1] != mine[1]

    def _drop_stale(self, consumer: ConsumerKey) -> None:
        """A consumer (or getter) of this node that no channel has (from before the node
        restarted, or its channel closed): nobody receives or settles for it."""
        if consumer not in self._dropping:
            self._dropping.add(consumer)
            self._cancel_with_messages(consumer)

    def _cancel_with_messages(self, consumer: ConsumerKey) -> None:
        self._submit_until_applied(Cancel(consumer, requeue=True))

    def _on_timer(self) -> None:
        if self.leader:
            self.submit(Tick())


class _Done:
    """What one channel is told of its publishes in one batch (`Publisher.replicated`)."""

    __slots__ = ("count", "refused", "upto")

    def __init__(self) -> None:
        self.upto = 0
        self.count = 0
        self.refused: list[int] = []


class Handed:
    """The msg_ids a node handed to each of its consumers (acknowledging ones) and has not
    seen settled, whether its replica delivered them or the leader sent them: a delivery
    that comes again (sent again by a leader, or made again after a snapshot) is dropped."""

    __slots__ = ("_by_consumer",)

    def __init__(self) -> None:
        self._by_consumer: dict[Hashable, set[int]] = {}

    def fresh(self, key: Hashable, msg_id: int) -> bool:
        """Whether handing `msg_id` to `key` is news (remembered if so)."""
        handed = self._by_consumer.get(key)
        if handed is None:
            handed = self._by_consumer[key] = set()
        elif msg_id in handed:
            return False
        handed.add(msg_id)
        return True

    def __bool__(self) -> bool:
        return bool(self._by_consumer)

    def settled(self, msg_ids: Iterable[int]) -> None:
        if self._by_consumer:
            for handed in self._by_consumer.values():
                handed.difference_update(msg_ids)

    def forget(self, key: Hashable) -> None:
        self._by_consumer.pop(key, None)


class Replica:
    """The host as its Raft group's state machine (`GroupMachine`)."""

    __slots__ = ("host",)

    def __init__(self, host: QuorumHost) -> None:
        self.host = host

    def apply(self, meta: EntryMeta, data: bytes) -> object:
        return self.host.apply_entry(meta, data)

    def retained(self) -> int:
        machine = self.host.machine
        return machine.ready_count + machine.unacked_count

    def kept_indexes(self) -> list[int]:
        return self.host.kept_indexes()

    def snapshot(self) -> bytes:
        return self.host.snapshot()

    def restore(self, data: bytes) -> None:
        self.host.restore(data)

    def role_changed(self, leader: bool, leader_node: str | None) -> None:
        self.host.role_changed(leader, leader_node)
