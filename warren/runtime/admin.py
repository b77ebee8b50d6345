"""The runtime's admin interface: what the management API may read and change in a broker.

Theory of operation:
1. Plain functions over a `Broker`, called on the event loop (so they never race the
   connections). They take and return JSON-ready values in RabbitMQ's HTTP shapes;
   `warren.mgmt` only adds HTTP around them, and nothing here knows about HTTP.
2. Policies live in each `VHost`'s two `PolicyStore`s. After any change to a vhost's
   policies every queue of that vhost is resolved again (`apply_policies`): its user and
   operator policy are matched, its effective settings computed, and its host
   reconfigured (`QueueHost.refresh_policies`), so a new limit applies at once.
3. Queue columns are read from the queue host's machine at the moment of the call: unlike
   RabbitMQ's statistics database, they are never stale.
4. Failures are `NotFound` (a vhost, queue or policy that does not exist) and
   `warren.model.policy.PolicyError` (a policy RabbitMQ would refuse).
5. A policy change is committed to the definitions store (when the node has one) before
   the call returns, so the HTTP reply means it survives a restart.
"""

from __future__ import annotations

import datetime
import decimal
import platform
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from warren import __version__
from warren.amqp.table import Typed
from warren.model import QueueRecord, VHost
from warren.model.policy import (
    PolicyError,
    PolicyStore,
    effective_policy_definition,
    make_policy,
)

if TYPE_CHECKING:
    from warren.runtime.broker import Broker, QueueHost

__all__ = ["NotFound", "PolicyError"]

# The RabbitMQ release whose observed behaviour Warren matches (shared/golden/).
RABBITMQ_VERSION = "3.10.8"
EXCHANGE_TYPES = (
    ("direct", "AMQP direct exchange, as per the AMQP specification"),
    ("fanout", "AMQP fanout exchange, as per the AMQP specification"),
    ("headers", "AMQP headers exchange, as per the AMQP specification"),
    ("topic", "AMQP topic exchange, as per the AMQP specification"),
)

Json = dict[str, Any]


class NotFound(LookupError):
    """A vhost, queue or policy that does not exist; `vhost` tells which was missing."""

    def __init__(self, *, vhost: bool = False) -> None:
        super().__init__("vhost_not_found" if vhost else "not_found")
        self.vhost = vhost


def vhost_of(broker: Broker, name: str) -> VHost:
    vhost = broker.vhosts.get(name)
    if vhost is None:
        raise NotFound(vhost=True)
    return vhost


def _vhosts(broker: Broker, name: str | None) -> list[VHost]:
    if name is None:
        return [broker.vhosts[key] for key in sorted(broker.vhosts)]
    return [vhost_of(broker, name)]


# --- Policies ---


def _store(vhost: VHost, operator: bool) -> PolicyStore:
    return vhost.operator_policies if operator else vhost.policies


def list_policies(broker: Broker, vhost: str | None, *, operator: bool) -> list[Json]:
    """Policies of one vhost (or all), by priority, then vhost and name, as RabbitMQ lists."""
    found = [p for v in _vhosts(broker, vhost) for p in _store(v, operator)]
    found.sort(key=lambda p: (p.priority, p.vhost, p.name))
    return [p.as_json() for p in found]


def get_policy(broker: Broker, vhost: str, name: str, *, operator: bool) -> Json:
    policy = _store(vhost_of(broker, vhost), operator).get(name)
    if policy is None:
        raise NotFound()
    return policy.as_json()


def set_policy(
    broker: Broker,
    vhost: str,
    name: str,
    *,
    pattern: object,
    definition: object,
    priority: object = 0,
    apply_to: object = "all",
    operator: bool,
) -> bool:
    """Create or replace a policy and apply it; True when it is new."""
    target = vhost_of(broker, vhost)
    policy = make_policy(
        vhost,
        name,
        pattern=pattern,
        definition=definition,
        priority=priority,
        apply_to=apply_to,
        operator=operator,
    )
    if broker.durability is not None:
        broker.durability.policy_set(policy, operator=operator)
    created = _store(target, operator).put(policy)
    apply_policies(broker, target)
    return created


def clear_policy(broker: Broker, vhost: str, name: str, *, operator: bool) -> None:
    target = vhost_of(broker, vhost)
    if _store(target, operator).remove(name) is None:
        raise NotFound()
    if broker.durability is not None:
        broker.durability.policy_cleared(vhost, name, operator=operator)
    apply_policies(broker, target)


def apply_policies(broker: Broker, vhost: VHost) -> None:
    """Resolve every queue of the vhost again and reconfigure its host."""
    for record in list(vhost.queues.values()):
        host = broker.queue(vhost.name, record.name)
        if host is not None:
            host.refresh_policies()


# --- Queues ---


def list_queues(broker: Broker, vhost: str | None) -> list[Json]:
    """Queues of one vhost (or all), sorted by vhost and name, with RabbitMQ's columns."""
    return [
        queue_info(broker, v, record)
        for v in _vhosts(broker, vhost)
        for record in sorted(v.queues.values(), key=lambda r: r.name)
    ]


def get_queue(broker: Broker, vhost: str, name: str) -> Json:
    target = broker.vhosts.get(vhost)
    record = None if target is None else target.queues.get(name)
    if target is None or record is None:
        raise NotFound()
    return queue_info(broker, target, record)


def queue_info(broker: Broker, vhost: VHost, record: QueueRecord) -> Json:
    host = broker.queue(vhost.name, record.name)
    user = host.policy if host else None
    operator = host.operator_policy if host else None
    return {
        "name": record.name,
        "vhost": record.vhost,
        "durable": record.durable,
        "auto_delete": record.auto_delete,
        "exclusive": record.exclusive,
        "arguments": plain_arguments(record.arguments),
        "policy": None if user is None else user.name,
        "operator_policy": None if operator is None else operator.name,
        "effective_policy_definition": effective_policy_definition(user, operator),
        **_counters(host),
        "type": record.queue_type.value,
        "state": "running",
        "node": broker.config.node_name,
    }


def _counters(host: QueueHost | None) -> Json:
    if host is None:
        ready = unacked = ready_bytes = unacked_bytes = consumers = 0
    else:
        machine = host.machine
        ready, unacked = machine.ready_count, machine.unacked_count
        ready_bytes = machine.ready_bytes
        unacked_bytes = getattr(machine, "unacked_bytes", 0)
        consumers = machine.consumer_count
    return {
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "message_bytes": ready_bytes + unacked_bytes,
        "message_bytes_ready": ready_bytes,
        "message_bytes_unacknowledged": unacked_bytes,
        "consumers": consumers,
    }


def plain_arguments(arguments: Mapping[str, Typed]) -> Json:
    """Queue arguments as plain JSON values, as RabbitMQ's HTTP API shows them."""
    return {key: plain_value(typed.value) for key, typed in arguments.items()}


def plain_value(value: object) -> Any:
    if isinstance(value, Typed):
        return plain_value(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, Mapping):
        return {str(key): plain_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain_value(item) for item in value]
    return str(value)


# --- Overview ---


def overview(broker: Broker) -> Json:
    config = broker.config
    return {
        "management_version": __version__,
        "rates_mode": "none",
        "product_name": "Warren",
        "product_version": __version__,
        "rabbitmq_version": RABBITMQ_VERSION,
        "python_version": platform.python_version(),
        "cluster_name": config.node_name,
        "node": config.node_name,
        "exchange_types": [
            {"name": name, "description": text, "enabled": True} for name, text in EXCHANGE_TYPES
        ],
        "message_stats": {},
        "queue_totals": _queue_totals(broker),
        "object_totals": _object_totals(broker),
        "listeners": _listeners(broker),
    }


def _queue_totals(broker: Broker) -> Json:
    """RabbitMQ's three message counts, and (Warren only) the matching byte counts."""
    keys = (
        "messages",
        "messages_ready",
        "messages_unacknowledged",
        "message_bytes",
        "message_bytes_ready",
        "message_bytes_unacknowledged",
    )
    totals = dict.fromkeys(keys, 0)
    for host in list(broker.queues.values()):
        counters = _counters(host)
        for key in keys:
            totals[key] += counters[key]
    return totals


def _object_totals(broker: Broker) -> Json:
    connections = list(broker.connections)
    return {
        "channels": sum(len(getattr(c, "channels", ())) for c in connections),
        "connections": len(connections),
        "consumers": sum(host.machine.consumer_count for host in broker.queues.values()),
        "exchanges": sum(len(vhost.exchanges) for vhost in broker.vhosts.values()),
        "queues": sum(len(vhost.queues) for vhost in broker.vhosts.values()),
    }


def _listeners(broker: Broker) -> list[Json]:
    config = broker.config
    return [
        {"node": config.node_name, "protocol": protocol, "ip_address": address, "port": port}
        for protocol, port in (("amqp", config.port), ("http", config.management_port))
        for address in config.bind
    ]
