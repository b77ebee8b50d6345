"""What survives a restart: durable definitions in SQLite, persistent messages in the log.

Theory of operation:
1. Layout under the node's data directory: ``definitions.sqlite3`` (`DefinitionsStore`:
   vhosts, durable exchanges and queues, bindings between durable ends, policies and
   operator policies), ``log/`` (the node's `Log`, written by the `QueueJournal`) and
   ``pages/`` (scratch `PageStore` for paging under memory pressure, emptied at start).
   Non-durable and exclusive objects are never stored; neither are transient messages,
   nor persistent ones in non-durable queues.
2. Startup is `warren.runtime.recovery`: it rebuilds the model and the queues' messages
   from what is stored, then hands the open store, log and journal to `Durability`.
3. Definitions are committed on the event loop before the -ok reply: one SQLite
   transaction with ``synchronous=FULL``. The model's cascades (a deleted queue or exchange
   takes its bindings; an auto-delete exchange goes with its last binding) are mirrored by
   `exchanges_changed`, which drops stored exchanges the model no longer has; the store
   cascades their bindings the same way the model does.
4. Messages: a durable queue's `QueueHost` reports what its machine did (`enqueued`,
   `delivered`, `settled`, `purged`, `queue_deleted`); the journal ignores msg_ids it
   never logged, so transient messages cost a lookup at most. Only persistent messages
   (delivery-mode 2) are logged; `warren.runtime.queues.paging` lets long queues keep their bodies
   there only. First deliveries and settlements are collected per queue and logged as one
   `Settled` and one `Delivered` record per queue just before the batch is sealed
   (`write_deferred`), not one per message or per ack: a mark or a settlement only matters
   once it is durable, which it can only be with that batch, and the journal drops what
   concerns messages that left meanwhile (purged, deleted), so the later record means the
   same. A record that kills a message still follows its `Enqueued` (appended at once).
   A transaction's commit writes them at once, so that its commit-ok waits for its acks.
5. Group commit: every append asks for one ``call_soon`` callback per loop turn (`_kick`).
   When no batch is in flight it seals the appends of the turn into a batch and syncs it
   on a single thread of its own; when the sync returns, waiters (channels holding
   publisher confirms or a tx.commit-ok) are told the new durable sequence, the journal
   retires dead segments, a compaction step runs (plan here, read on a reader thread,
   apply here) and the next batch is sealed if anything was appended meanwhile.
6. Rule: a confirm for a persistent message in a durable queue leaves only once the log
   sequence of its record is durable (see `warren.runtime.channel`). Deliveries do not
   wait: a consumer may see a message before it is on disk, as in RabbitMQ.
7. A failed sync (`LogFailed`) means durability can no longer be promised: it is logged as
   critical and the node stops with a non-zero exit status (`on_failure`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from warren.amqp.content import Message
from warren.amqp.table import encode_table
from warren.model import DestinationKind, Exchange, QueueRecord, VHost
from warren.model.policy import Policy
from warren.model.vhost import RESERVED_PREFIX
from warren.queue import Enqueue
from warren.runtime.queues.host import QueueHost, Waiter
from warren.runtime.queues.paging import PageSlot
from warren.storage.definitions import (
    BindingDefinition,
    DefinitionsStore,
    ExchangeDefinition,
    PolicyDefinition,
    QueueDefinition,
)
from warren.storage.journal import CompactionPlan, QueueJournal
from warren.storage.log import Batch, Log, LogError
from warren.storage.pages import PageRef, PageStore

log = logging.getLogger("warren.durability")

CLOSE_WAIT_S = 10.0


class DefinitionsObserver(Protocol):
    """Told of every definition change, stored or not (a cluster replicates the ones the
    store does not keep: `warren.runtime.cluster.metadata.TransientDefinitions`)."""

    def exchange_declared(self, vhost: VHost, exchange: Exchange) -> None: ...

    def exchanges_changed(self, vhost: VHost) -> None: ...

    def binding_changed(self, binding: BindingDefinition, added: bool) -> None: ...

    def queue_declared(self, host: QueueHost) -> None: ...

    def queue_deleted(self, vhost: VHost, host: QueueHost) -> None: ...


class Durability:
    """The node's durable state and the group commit driver. See the module docstring."""

    def __init__(
        self,
        definitions: DefinitionsStore,
        wal: Log,
        journal: QueueJournal,
        pages: PageStore,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self.definitions = definitions
        self.log = wal
        self.journal = journal
        self.pages = pages  # scratch space for messages paged out under memory pressure
        self.on_failure = on_failure
        self.failed = False
        self._closing = False  # no new syncs or compaction steps; `close` does the last sync
        self._loop = asyncio.get_running_loop()
        # one thread syncs, another reads segments for compaction, so a read never delays a
        # sync (the log allows reading a sealed segment while a batch is being synced)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="warren-log")
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="warren-read")
        self._scheduled = False  # a `_drive` callback is queued
        self._syncing: asyncio.Future[int] | None = None
        self._reading: asyncio.Future[dict[int, bytes]] | None = None  # compaction read
        self._waiters: dict[Waiter, None] = {}
        # first deliveries and settlements not yet logged, per queue (rule 4)
        self._marks: dict[str, list[int]] = {}
        self._settles: dict[str, list[int]] = {}
        # what the store holds, so redeclares and repeated binds cost no transaction
        self._exchanges: dict[str, dict[str, None]] = {}  # vhost -> names
        self._bindings: set[BindingDefinition] = set()
        self.syncs = 0
        self.observer: DefinitionsObserver | None = None  # None: a single node

    def remember_stored(
        self, exchanges: Iterable[ExchangeDefinition], bindings: Iterable[BindingDefinition]
    ) -> None:
        """What the store held at startup (so it is not written again, and cascades find it)."""
        for exchange in exchanges:
            self._exchanges.setdefault(exchange.vhost, {})[exchange.name] = None
        self._bindings.update(bindings)

    # --- definitions: exchanges ------------------------------------------------------------

    def exchange_declared(self, vhost: VHost, exchange: Exchange) -> None:
        """After exchange.declare: store the exchange if it is durable and not yet stored."""
        if self.observer is not None and not exchange.durable:
            self.observer.exchange_declared(vhost, exchange)
        stored = self._exchanges.setdefault(vhost.name, {})
        if not exchange.durable or exchange.name in stored:
            return
        if not exchange.name or exchange.name.startswith(RESERVED_PREFIX):
            return  # predeclared in every vhost
        self.definitions.put_exchange(
            ExchangeDefinition(
                vhost.name,
                exchange.name,
                exchange.type.value,
                durable=True,
                auto_delete=exchange.auto_delete,
                internal=exchange.internal,
                arguments=encode_table(exchange.arguments),
            )
        )
        stored[exchange.name] = None

    def exchanges_changed(self, vhost: VHost) -> None:
        """After anything that may delete exchanges (directly or by auto-delete cascade):
        drop the stored ones the model no longer has, with their bindings."""
        if self.observer is not None:
            self.observer.exchanges_changed(vhost)
        stored = self._exchanges.get(vhost.name)
        if not stored:
            return
        gone = [name for name in stored if name not in vhost.exchanges]
        if not gone:
            return
        with self.definitions.transaction():
            for name in gone:
                self.definitions.delete_exchange(vhost.name, name)
        for name in gone:
            del stored[name]
        gone_set = set(gone)
        self._bindings = {
            b
            for b in self._bindings
            if b.vhost != vhost.name
            or (
                b.source not in gone_set
                and not (b.destination_kind == "exchange" and b.destination in gone_set)
            )
        }

    # --- definitions: bindings -------------------------------------------------------------

    def _binding(
        self,
        vhost: VHost,
        destination: str,
        kind: DestinationKind,
        source: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> BindingDefinition | None:
        """The stored form of a binding, or None if it is not durable (both ends must be)."""
        exchange = vhost.exchanges.get(source)
        if exchange is None or not exchange.durable:
            return None
        if kind is DestinationKind.QUEUE:
            record = vhost.queues.get(destination)
            if record is None or not record.durable:
                return None
        else:
            target = vhost.exchanges.get(destination)
            if target is None or not target.durable:
                return None
        return binding_definition(vhost, destination, kind, source, routing_key, arguments)

    def binding_added(
        self,
        vhost: VHost,
        destination: str,
        kind: DestinationKind,
        source: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> None:
        binding = self._binding(vhost, destination, kind, source, routing_key, arguments)
        if binding is not None and binding not in self._bindings:
            self.definitions.put_binding(binding)
            self._bindings.add(binding)
        if self.observer is not None:
            changed = binding or binding_definition(
                vhost, destination, kind, source, routing_key, arguments
            )
            self.observer.binding_changed(changed, True)

    def binding_removed(
        self,
        vhost: VHost,
        destination: str,
        kind: DestinationKind,
        source: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> None:
        """After unbind (whose source exchange may have been auto-deleted with it)."""
        binding = binding_definition(vhost, destination, kind, source, routing_key, arguments)
        if binding in self._bindings:
            self.definitions.delete_binding(binding)
            self._bindings.discard(binding)
        if self.observer is not None:
            self.observer.binding_changed(binding, False)
        self.exchanges_changed(vhost)

    # --- definitions: queues ---------------------------------------------------------------

    def queue_declared(self, host: QueueHost) -> None:
        """A queue was created: store it if durable; its incarnation keys its messages."""
        if self.observer is not None:
            self.observer.queue_declared(host)
        record = host.record
        if not record.durable or record.exclusive:
            return
        incarnation = self.definitions.put_queue(queue_definition(record))
        host.journal_key = str(incarnation)

    def queue_deleted(self, vhost: VHost, host: QueueHost) -> None:
        """After the model and the broker dropped a queue (and maybe auto-delete exchanges)."""
        if self.observer is not None:
            self.observer.queue_deleted(vhost, host)
        key = host.journal_key
        if key is not None:
            host.journal_key = None
            self.definitions.delete_queue(vhost.name, host.record.name)
            target = (vhost.name, "queue", host.record.name)
            self._bindings = {
                b for b in self._bindings if (b.vhost, b.destination_kind, b.destination) != target
            }
            if self.journal.delete_queue(key) is not None:
                self._kick()
        self.exchanges_changed(vhost)

    # --- definitions: policies -------------------------------------------------------------

    def vhost_deleted(self, name: str) -> None:
        """A vhost and everything in it is gone (its queues were deleted first)."""
        self.definitions.delete_vhost(name)
        self._exchanges.pop(name, None)
        self._bindings = {b for b in self._bindings if b.vhost != name}

    def policy_set(self, policy: Policy, *, operator: bool) -> None:
        definition = policy_definition(policy)
        if operator:
            self.definitions.put_operator_policy(definition)
        else:
            self.definitions.put_policy(definition)

    def policy_cleared(self, vhost: str, name: str, *, operator: bool) -> None:
        if operator:
            self.definitions.delete_operator_policy(vhost, name)
        else:
            self.definitions.delete_policy(vhost, name)

    # --- messages (called by the hosts of durable queues) ------------------------------------

    def enqueued(self, host: QueueHost, msg_id: int, command: Enqueue, now_ms: int) -> None:
        """The machine took a message: log it if it is persistent. Runs before the effects
        of the same command, so its record precedes any delivery or settlement of it. A
        message in a `PageSlot` is paged out at once: until the next group commit its
        record is read back from the log's write buffer."""
        held = command.message
        message: Message | None
        slot: PageSlot | None
        if type(held) is Message:
            message, slot = held, None
        elif type(held) is PageSlot:
            message, slot = held.message, held
            assert message is not None  # emptied only after this record is durable
        else:
            assert type(held) is PageRef
            return  # only messages that are never logged go to scratch pages
        if not message.persistent:
            return
        key = host.journal_key
        assert key is not None
        machine = host.machine
        ttl_ms = command.ttl_ms
        self.journal.enqueue_fields(
            key,
            msg_id,
            now_ms,
            # most messages have no TTL at all: no call to find that out
            None
            if ttl_ms is None and machine.settings.message_ttl_ms is None
            else machine.message_deadline(now_ms, ttl_ms),
            command.priority,
            message.route,
            message.properties_raw,
            message.body,
        )
        if slot is not None:
            slot.message = None  # paged out: `QueueJournal.read` finds it by `sequence`
        if not self._scheduled:
            self._kick()

    def delivered(self, key: str, msg_ids: Iterable[int]) -> None:
        marks = self._marks.get(key)
        if marks is None:
            self._marks[key] = list(msg_ids)
            self._kick()
        else:
            marks.extend(msg_ids)

    def settled(self, key: str, msg_ids: Iterable[int]) -> None:
        settles = self._settles.get(key)
        if settles is None:
            self._settles[key] = list(msg_ids)
            self._kick()
        else:
            settles.extend(msg_ids)

    def write_deferred(self) -> None:
        """Append the settlements and first deliveries collected since the last batch was
        sealed (rule 4): before a seal, and when a transaction's acks must be durable
        before its commit-ok."""
        settles, marks = self._settles, self._marks
        if settles:
            self._settles = {}
            settle = self.journal.settle
            for key, msg_ids in settles.items():
                settle(key, msg_ids)
        if marks:  # after the settlements: a mark of a message settled meanwhile is dropped
            self._marks = {}
            deliver = self.journal.deliver
            for key, msg_ids in marks.items():
                deliver(key, msg_ids)

    def purged(self, key: str, kept_msg_ids: list[int]) -> None:
        if self.journal.purge(key, kept_msg_ids) is not None:
            self._kick()

    # --- group commit ------------------------------------------------------------------------

    @property
    def caught_up(self) -> bool:
        """Everything appended (or marked delivered, or settled) so far is durable; no sync
        in flight."""
        wal = self.log
        return (
            not self._marks
            and not self._settles
            and self._syncing is None
            and wal.durable_sequence == wal.next_sequence - 1
        )

    def wait(self, waiter: Waiter) -> None:
        """`waiter.durable_reached` is called after every sync until it returns False."""
        self._waiters[waiter] = None

    def forget(self, waiter: Waiter) -> None:
        self._waiters.pop(waiter, None)

    def sync_soon(self) -> None:
        """Have whatever was appended synced (the drivers do this after every append)."""
        self._kick()

    def _kick(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._drive)

    def _drive(self) -> None:
        """Seal what this loop turn appended and sync it, unless a sync is under way (its
        completion seals the next batch)."""
        self._scheduled = False
        if self.failed or self._closing:
            return
        try:
            self.write_deferred()
            if self._syncing is not None:
                return
            batch = self.log.seal()
        except LogError as error:
            self._fail(error)
            return
        if batch is None:
            return
        self._syncing = future = self._loop.run_in_executor(self._executor, self._sync, batch)
        future.add_done_callback(self._synced)

    def _sync(self, batch: Batch) -> int:
        return self.log.sync_batch(batch)

    def _synced(self, future: asyncio.Future[int]) -> None:
        self._syncing = None
        try:
            durable = future.result()
        except BaseException as error:  # LogFailed, or a bug: durability is gone either way
            self._fail(error)
            return
        self.syncs += 1
        for waiter in list(self._waiters):
            if not waiter.durable_reached(durable):
                self._waiters.pop(waiter, None)
        if self._closing:
            return
        try:
            if self._reading is None:
                # Retiring deletes segments from the log's list, which the reader thread
                # searches: not while it reads; the next sync retires what waits.
                self.journal.maintain(compact=False)
                self._compaction_step()
        except LogError as error:
            self._fail(error)
            return
        if self.log.pending_records:
            self._drive()

    def _compaction_step(self) -> None:
        plan = self.journal.compaction_plan()
        if plan is None:
            return
        self._reading = future = self._loop.run_in_executor(
            self._reader, self.log.read, plan.segment_id, plan.sequences
        )
        future.add_done_callback(lambda done: self._compaction_read(plan, done))

    def _compaction_read(
        self, plan: CompactionPlan, future: asyncio.Future[dict[int, bytes]]
    ) -> None:
        self._reading = None
        if self.failed or self._closing:
            return
        try:
            payloads = future.result()
        except Exception as error:  # compaction only saves space: skip it, plan again later
            log.warning("compaction of log segment %s skipped: %r", plan.segment_id, error)
            self.journal.cancel_compaction()
            return
        copied = self.journal.apply_compaction(plan, payloads)
        log.debug("compacting log segment %s: %s live records copied", plan.segment_id, copied)
        self._kick()

    def _fail(self, error: BaseException) -> None:
        if self.failed:
            return
        self.failed = True
        log.critical("the message log failed, durability is lost; stopping: %s", error)
        self.on_failure()

    # --- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Let the sync and read in flight finish, then sync what is pending, close files."""
        self._closing = True
        deadline = self._loop.time() + CLOSE_WAIT_S
        while self._loop.time() < deadline:
            in_flight = [f for f in (self._syncing, self._reading) if f is not None]
            if not in_flight:
                break
            await asyncio.wait(in_flight, timeout=max(0.0, deadline - self._loop.time()))
            await asyncio.sleep(0)  # their done callbacks run
        try:
            if self._syncing is not None:
                log.error("the log thread did not finish; closing without a final sync")
            elif not self.failed:
                self.write_deferred()
                self.log.close(flush=True)
                for waiter in list(self._waiters):
                    waiter.durable_reached(self.log.durable_sequence)
        except LogError as error:
            log.critical("final sync of the message log failed: %s", error)
            self.failed = True
        finally:
            if self._syncing is None:
                self.log.close(flush=False)  # no-op when closed above
            self.definitions.close()
            self.pages.close()
            self._executor.shutdown(wait=False)
            self._reader.shutdown(wait=False)
        log.info("message log closed after %s group commits", self.syncs)


def queue_definition(record: QueueRecord) -> QueueDefinition:
    """A durable queue as the definitions store keeps it (before it has an incarnation)."""
    return QueueDefinition(
        record.vhost,
        record.name,
        durable=True,
        auto_delete=record.auto_delete,
        arguments=encode_table(record.arguments),
        type=record.queue_type.value,
    )


def policy_definition(policy: Policy) -> PolicyDefinition:
    return PolicyDefinition(
        policy.vhost,
        policy.name,
        policy.pattern,
        policy.apply_to,
        policy.priority,  # type: ignore[arg-type]  # RabbitMQ also accepts a float
        dict(policy.definition),
    )


def binding_definition(
    vhost: VHost,
    destination: str,
    kind: DestinationKind,
    source: str,
    routing_key: str,
    arguments: Mapping[str, object],
) -> BindingDefinition:
    # Canonical bytes: the model compares arguments as mappings, so must the store.
    encoded = encode_table(dict(sorted(arguments.items())))
    return BindingDefinition(vhost.name, source, destination, kind.value, routing_key, encoded)
