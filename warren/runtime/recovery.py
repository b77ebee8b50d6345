"""Startup: the broker's durable state back from the data directory, before any listener.

Theory of operation (`recover`):
1. Definitions first (`definitions.sqlite3`): vhosts, then policies and operator policies
   (so that each queue finds its policy when its host is created), durable exchanges,
   durable queues, then the bindings between them, each declared through the model as a
   client would, with owner None. A stored object the model refuses now is logged and
   skipped; the node always starts.
2. Then the log (``log/``): `Log.open` recovers it and its report is logged, at WARNING when
   anything was dropped (a torn or corrupt tail, damaged segments). `QueueJournal.recover`
   folds the records into each queue's live messages, keeping only the keys of the durable
   queues just rebuilt: a queue's key is its store incarnation, so a queue deleted (or
   deleted and declared again) before the crash never gets the old messages back.
3. Every queue gets its messages with `Restore`: original msg_id, absolute deadline (a TTL
   keeps counting across the restart; what is due expires now), priority, and
   ``redelivered`` for those delivered before. All queues are restored before any effect
   is carried out, so a message dead-lettered at startup into another durable queue never
   takes a msg_id a recovered message there still has. `x-expires` countdowns start again
   from node start (the host's ``last_used_ms``). Bodies stay in the log: each one is read
   back when its message is handed out (`warren.runtime.queues.paging`), so a backlog larger than
   memory recovers.
4. The journal retires and compacts what it can; `Durability` takes over the open store,
   log and journal and is set as `broker.durability`.
5. What the restores dead-lettered is held (`Recovered`) until the caller carries it out:
   at once on a node of its own, and in a cluster (or a node of
   several workers) once the node knows the other nodes' queues, which it learns when
   their links come up (`warren.server`): a dead-letter queue homed elsewhere is then
   found, as RabbitMQ's replicated queue table finds it, instead of the message being
   dropped. The other effects (timers, drop-head) are carried out at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from warren.amqp.table import decode_table, decode_table_typed
from warren.errors import AmqpError
from warren.model import DestinationKind, QueueRecord, VHost
from warren.model.policy import PolicyError, make_policy
from warren.model.vhost import RESERVED_PREFIX
from warren.queue import DeadLetter, Effect, Restore, Restored
from warren.runtime.access import CLUSTER_NAME, Permission, TopicPermission, User, VHostInfo
from warren.runtime.durability import Durability
from warren.runtime.queues.classic import ClassicHost
from warren.runtime.queues.host import QueueHost
from warren.runtime.queues.paging import PAGED_OUT
from warren.storage.definitions import (
    BindingDefinition,
    Definitions,
    DefinitionsStore,
    ExchangeDefinition,
    PolicyDefinition,
    QueueDefinition,
    VHostDefinition,
)
from warren.storage.journal import QueueJournal
from warren.storage.log import SEGMENT_MAX_BYTES_DEFAULT, Log
from warren.storage.messages import RecordFormatError, RecoveredMessage
from warren.storage.pages import PageStore

if TYPE_CHECKING:
    from warren.runtime.broker import Broker

log = logging.getLogger("warren.recovery")

DEFINITIONS_FILE = "definitions.sqlite3"
LOG_DIRECTORY = "log"
PAGES_DIRECTORY = "pages"


@dataclass(slots=True)
class Recovered:
    """A node's durable state back (`durability`, also `broker.durability`), with what its
    restores dead-lettered still to be carried out (module doc, 5)."""

    durability: Durability
    dead_letters: list[tuple[ClassicHost, list[Effect]]]

    def carry_out(self) -> None:
        """Dead-letter what expired while the node was down, through the queues the node
        knows now; a queue deleted meanwhile (by the metadata log) dead-letters nothing."""
        held, self.dead_letters = self.dead_letters, []
        for host, effects in held:
            if host.broker.queue(host.record.vhost, host.name) is host:
                host.effects.perform(effects)


def recover(
    broker: Broker,
    data_dir: Path,
    on_failure: Callable[[], None] = lambda: None,
    segment_max_bytes: int = SEGMENT_MAX_BYTES_DEFAULT,
) -> Recovered:
    """Rebuild the broker's durable state from `data_dir`; the driver is also set as
    `broker.durability`, the restores' dead-lettering is left to `Recovered.carry_out`
    (module doc, 5). Call on the event loop, before listeners open."""
    definitions = DefinitionsStore.open(data_dir / DEFINITIONS_FILE)
    try:
        loaded = definitions.load()
        hosts = _rebuild(broker, definitions, loaded)
        wal, report = Log.open(data_dir / LOG_DIRECTORY, segment_max_bytes)
    except BaseException:
        definitions.close()
        raise
    level = logging.INFO if report.clean else logging.WARNING
    log.log(level, "recovered %s", report.summary())
    try:
        journal, recovered = QueueJournal.recover(
            wal, keep=lambda key: key in hosts, on_undecodable=_skip_undecodable, contents=False
        )
    except BaseException:
        wal.close(flush=False)
        definitions.close()
        raise
    durability = Durability(
        definitions, wal, journal, PageStore.open(data_dir / PAGES_DIRECTORY), on_failure
    )
    restored = [e for e in loaded.exchanges if e.name in vhost_of(broker, e.vhost).exchanges]
    durability.remember_stored(restored, loaded.bindings)
    broker.durability = durability
    dead_letters = _restore_messages(hosts, recovered)
    journal.maintain()  # may append compaction copies: the first group commit takes them
    durability.sync_soon()
    count = sum(len(messages) for messages in recovered.values())
    log.info("recovered %s durable queues, %s persistent messages", len(hosts), count)
    return Recovered(durability, dead_letters)


def _skip_undecodable(sequence: int, error: RecordFormatError) -> None:
    log.error("log record %s is not a valid queue record, skipped: %s", sequence, error)


def vhost_of(broker: Broker, name: str) -> VHost:
    vhost = broker.vhosts.get(name)
    if vhost is None:
        vhost = broker.vhosts[name] = VHost(name)
    return vhost


def _rebuild(
    broker: Broker, definitions: DefinitionsStore, loaded: Definitions
) -> dict[str, ClassicHost]:
    """The model from the stored definitions; returns the durable classic queues' hosts by
    key (a quorum queue's messages are in its Raft log, not in the journal)."""
    if not any(v.name == "/" for v in loaded.vhosts):
        definitions.put_vhost(VHostDefinition("/", "Default virtual host"))
    for stored_vhost in loaded.vhosts:
        vhost_of(broker, stored_vhost.name)
    _restore_access(broker, definitions, loaded)
    for policies, operator in ((loaded.policies, False), (loaded.operator_policies, True)):
        for policy in policies:
            restore_policy(broker, policy, operator)
    for exchange in loaded.exchanges:
        restore_exchange(broker, exchange)
    hosts: dict[str, ClassicHost] = {}
    for queue in loaded.queues:
        host = _restore_queue(broker, queue)
        if isinstance(host, ClassicHost):
            hosts[host.journal_key or ""] = host
    for binding in loaded.bindings:
        restore_binding(broker, binding)
    return hosts


def _restore_access(broker: Broker, definitions: DefinitionsStore, loaded: Definitions) -> None:
    """Users, permissions, topic permissions, vhost metadata and the cluster name. On a
    node's first start (no users stored) the default user and its permissions on ``/`` are
    stored, as RabbitMQ creates them once."""
    access = broker.access
    if not loaded.users:
        with definitions.transaction():
            for user in access.users.values():
                definitions.put_user(user.definition())
            for permission in access.permissions.values():
                definitions.put_permission(permission.definition())
    else:
        access.users = {
            user.name: User(user.name, user.password_hash, user.tags, user.hashing_algorithm)
            for user in loaded.users
        }
        access.permissions = {
            (p.user, p.vhost): Permission(p.user, p.vhost, p.configure, p.write, p.read)
            for p in loaded.permissions
        }
        access.version += 1
    access.topic_permissions = {
        (p.user, p.vhost, p.exchange): TopicPermission(p.user, p.vhost, p.exchange, p.write, p.read)
        for p in loaded.topic_permissions
    }
    broker.cluster_name = loaded.global_parameters.get(CLUSTER_NAME, broker.cluster_name)
    for stored in loaded.vhosts:
        access.vhosts[stored.name] = VHostInfo(
            stored.name, stored.description, stored.tags, stored.default_queue_type
        )


def restore_policy(broker: Broker, stored: PolicyDefinition, operator: bool) -> None:
    try:
        policy = make_policy(
            stored.vhost,
            stored.name,
            pattern=stored.pattern,
            definition=dict(stored.definition),
            priority=stored.priority,
            apply_to=stored.apply_to,
            operator=operator,
        )
    except PolicyError as error:
        log.warning("policy %r in vhost %r not restored: %s", stored.name, stored.vhost, error)
        return
    vhost = vhost_of(broker, stored.vhost)
    (vhost.operator_policies if operator else vhost.policies).put(policy)


def restore_exchange(broker: Broker, stored: ExchangeDefinition) -> None:
    vhost = vhost_of(broker, stored.vhost)
    try:
        vhost.declare_exchange(
            stored.name,
            stored.type,
            passive=False,
            durable=True,
            auto_delete=stored.auto_delete,
            internal=stored.internal,
            arguments=decode_table_typed(stored.arguments),
        )
    except (AmqpError, ValueError) as error:
        log.warning("exchange %r in vhost %r not restored: %s", stored.name, stored.vhost, error)


def _restore_queue(broker: Broker, stored: QueueDefinition) -> QueueHost | None:
    record = declare_record(broker, stored)
    if record is None:
        return None
    host = broker.add_queue(record)
    host.journal_key = str(stored.incarnation)
    return host


def declare_stored_queue(broker: Broker, stored: QueueDefinition) -> QueueHost | None:
    """A queue another node declared: into the model, and stored here as a declare would."""
    record = declare_record(broker, stored)
    return None if record is None else broker.declare_queue(record)


def declare_record(
    broker: Broker, stored: QueueDefinition, durable: bool = True, owner: object = None
) -> QueueRecord | None:
    """The queue in the model (None if the model refuses it: logged); `owner` makes it
    exclusive to that owner."""
    vhost = vhost_of(broker, stored.vhost)
    try:
        record, _created = vhost.declare_queue(
            stored.name,
            owner=owner,
            passive=False,
            durable=durable,
            exclusive=owner is not None,
            auto_delete=stored.auto_delete,
            arguments=decode_table_typed(stored.arguments),
            server_named=stored.name.startswith(RESERVED_PREFIX),
        )
    except (AmqpError, ValueError) as error:
        log.warning("queue %r in vhost %r not restored: %s", stored.name, stored.vhost, error)
        return None
    return record


def restore_binding(broker: Broker, stored: BindingDefinition) -> None:
    vhost = vhost_of(broker, stored.vhost)
    try:
        vhost.bind(
            stored.destination,
            DestinationKind(stored.destination_kind),
            stored.source,
            stored.routing_key,
            decode_table(stored.arguments) if stored.arguments else {},
        )
    except (AmqpError, ValueError) as error:
        log.warning("stored binding %r not restored: %s", stored, error)


def _restore_messages(
    hosts: Mapping[str, ClassicHost], recovered: Mapping[str, list[RecoveredMessage]]
) -> list[tuple[ClassicHost, list[Effect]]]:
    """Every queue first, effects (expiry, drop-head) after: a message dead-lettered into
    another durable queue must not take an id recovered there. Returns the dead-lettering,
    held (module doc, 5)."""
    pending: list[tuple[ClassicHost, list[Effect]]] = []
    for key, messages in recovered.items():
        host = hosts[key]
        effects = host.restore(Restore([_restored(message) for message in messages]))
        pending.append((host, effects))
    held: list[tuple[ClassicHost, list[Effect]]] = []
    for host, effects in pending:
        dead: list[Effect] = [effect for effect in effects if type(effect) is DeadLetter]
        if len(dead) < len(effects):
            host.effects.perform([effect for effect in effects if type(effect) is not DeadLetter])
        if dead:
            held.append((host, dead))
    return held


def _restored(recovered: RecoveredMessage) -> Restored:
    """A recovered message with its body left in the log (`warren.runtime.queues.paging`)."""
    record = recovered.message
    return Restored(
        record.msg_id,
        PAGED_OUT,
        recovered.body_size_bytes,
        record.expires_at_ms,
        record.priority,
        recovered.redelivered,
    )
