"""The runtime's admin interface: what the management API may read and change in a broker.

Theory of operation:
1. Plain functions over a `Broker`, called on the event loop (so they never race the
   connections). They take and return JSON-ready values in RabbitMQ's HTTP shapes;
   `warren.mgmt` only adds HTTP around them, and nothing here knows about HTTP.
2. Policies live in each `VHost`'s two `PolicyStore`s. After any change to a vhost's
   policies every queue of that vhost is resolved again (`resolve_policies`): its user and
   operator policy are matched, its effective settings computed, and its host
   reconfigured (`QueueHost.refresh_policies`), so a new limit applies at once.
3. Queue columns are read from the queue host's machine at the moment of the call: unlike
   RabbitMQ's statistics database, they are never stale.
4. Failures are `NotFound` (a vhost, queue or policy that does not exist) and
   `warren.model.policy.PolicyError` (a policy RabbitMQ would refuse).
5. A policy change is committed to the definitions store (when the node has one) before
   the call returns, so the HTTP reply means it survives a restart.
6. In a cluster a policy's set and clear go to the metadata log first (`through_log`):
   every node, this one included, makes the change when it applies the entry, and the
   call returns once every node has.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import platform
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from warren import __version__
from warren.amqp.table import Typed, encode_table
from warren.cluster.metadata import (
    Bind,
    DeleteOperatorPolicy,
    DeletePolicy,
    ExchangeDeclare,
    PutOperatorPolicy,
    PutPolicy,
)
from warren.errors import AmqpError
from warren.model import Binding, DestinationKind, Exchange, QueueRecord, VHost
from warren.model.arguments import QueueType
from warren.model.policy import (
    Policy,
    PolicyError,
    PolicyStore,
    effective_policy_definition,
    make_policy,
)
from warren.model.vhost import RESERVED_PREFIX
from warren.queue import Counters
from warren.runtime import admin_access
from warren.runtime.access import CLUSTER_NAME
from warren.runtime.admin_access import through_log
from warren.runtime.admin_errors import DefinitionsError, NotFound
from warren.runtime.durability import policy_definition
from warren.runtime.passwords import SHA256

if TYPE_CHECKING:
    from warren.runtime.broker import Broker
    from warren.runtime.queues.host import QueueHost

__all__ = ["DefinitionsError", "NotFound", "PolicyError"]

# The RabbitMQ release whose observed behaviour Warren matches (shared/golden/).
RABBITMQ_VERSION = "3.10.8"
EXCHANGE_TYPES = (
    ("direct", "AMQP direct exchange, as per the AMQP specification"),
    ("fanout", "AMQP fanout exchange, as per the AMQP specification"),
    ("headers", "AMQP headers exchange, as per the AMQP specification"),
    ("topic", "AMQP topic exchange, as per the AMQP specification"),
)

Json = dict[str, Any]


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


async def set_policy(
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
    """Create or replace a policy and apply it (in a cluster: on every node, through the
    metadata log, point 6); True when it is new."""
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
    created = _store(target, operator).get(name) is None
    await _put_policy(broker, target, policy, operator)
    return created


async def _put_policy(broker: Broker, target: VHost, policy: Policy, operator: bool) -> None:
    """Make a policy: in a cluster through the metadata log (point 6), else here at once."""
    definition = policy_definition(policy)
    change = PutOperatorPolicy(definition) if operator else PutPolicy(definition)
    if not await through_log(broker, change):
        _policy_made(broker, target, policy, operator)


def _policy_made(broker: Broker, target: VHost, policy: Policy, operator: bool) -> None:
    if broker.durability is not None:
        broker.durability.policy_set(policy, operator=operator)
    _store(target, operator).put(policy)
    resolve_policies(broker, target)


async def clear_policy(broker: Broker, vhost: str, name: str, *, operator: bool) -> None:
    target = vhost_of(broker, vhost)
    if _store(target, operator).get(name) is None:
        raise NotFound()
    change = DeleteOperatorPolicy(vhost, name) if operator else DeletePolicy(vhost, name)
    if await through_log(broker, change):
        return
    _store(target, operator).remove(name)
    if broker.durability is not None:
        broker.durability.policy_cleared(vhost, name, operator=operator)
    resolve_policies(broker, target)


def resolve_policies(broker: Broker, vhost: VHost) -> None:
    """Resolve every exchange and queue of the vhost again and reconfigure its host."""
    vhost.resolve_exchange_policies()
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
    info = {
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
        **(broker.cluster.queue_columns(host) if broker.cluster and host else {}),
    }
    if record.queue_type is QueueType.QUORUM:  # RabbitMQ shows these for quorum queues only
        info["messages_dlx"] = host.machine.dead_letter_count if host else 0
        info["message_bytes_dlx"] = host.machine.dead_letter_bytes if host else 0
    return info


def _counters(host: QueueHost | None) -> Json:
    return counters_json(host.machine.counters() if host is not None else Counters())


def counters_json(counters: Counters) -> Json:
    """A queue's counts under RabbitMQ's names."""
    return {
        "messages": counters.ready + counters.unacked,
        "messages_ready": counters.ready,
        "messages_unacknowledged": counters.unacked,
        "message_bytes": counters.ready_bytes + counters.unacked_bytes,
        "message_bytes_ready": counters.ready_bytes,
        "message_bytes_unacknowledged": counters.unacked_bytes,
        "consumers": counters.consumers,
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
    return {
        "management_version": __version__,
        "rates_mode": "none",
        "product_name": "Warren",
        "product_version": __version__,
        "rabbitmq_version": RABBITMQ_VERSION,
        "python_version": platform.python_version(),
        "cluster_name": broker.cluster_name,
        "node": broker.node_name,
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
        "channels": sum(len(c.channels) for c in connections),
        "connections": len(connections),
        "consumers": sum(host.machine.consumer_count for host in broker.queues.values()),
        "exchanges": sum(len(vhost.exchanges) for vhost in broker.vhosts.values()),
        "queues": sum(len(vhost.queues) for vhost in broker.vhosts.values()),
    }


def _listeners(broker: Broker) -> list[Json]:
    """The node's listeners, with RabbitMQ's ``socket_opts`` for what Warren sets."""
    config = broker.config
    amqp_options = {"backlog": 128, "nodelay": True, "linger": [True, 0], "exit_on_close": False}
    http_options = {"cowboy_opts": {"sendfile": False}, "port": config.management_port}
    return [
        {
            "node": broker.node_name,
            "protocol": protocol,
            "ip_address": address,
            "port": port,
            "socket_opts": options,
        }
        for protocol, port, options in (
            ("amqp", config.port, amqp_options),
            ("http", config.management_port, http_options),
        )
        for address in config.bind
    ]


# --- Definitions ---

DEFINITIONS_KEYS = ("parameters", "policies", "queues", "exchanges", "bindings")
OPERATOR_POLICY_COMPONENT = "operator_policy"


def export_definitions(broker: Broker, vhost: str | None = None) -> Json:
    """The broker's definitions in the shape of RabbitMQ's GET /api/definitions.

    With `vhost`, RabbitMQ's per-vhost shape: only ``rabbit_version`` and the five object
    lists, whose queues, exchanges and bindings carry no ``vhost`` key. Users carry
    their stored ``password_hash`` (``rabbit_password_hashing_sha256``) and tags;
    permissions and vhosts are the node's own.

    Difference from RabbitMQ 3.10.8: only durable exchanges, durable non-exclusive queues
    and the bindings between durable ends are exported (what the definitions store keeps
    over a restart); RabbitMQ also exports transient exchanges and non-exclusive transient
    queues with their bindings. ``global_parameters`` holds ``internal_cluster_id`` and the
    cluster name once one was set.
    """
    vhosts = _vhosts(broker, vhost)
    objects: Json = {
        "parameters": [
            {
                "value": _policy_value(policy.as_json()),
                "vhost": policy.vhost,
                "component": OPERATOR_POLICY_COMPONENT,
                "name": policy.name,
            }
            for v in vhosts
            for policy in sorted(v.operator_policies, key=lambda p: p.name)
        ],
        "policies": [
            policy.as_json() for v in vhosts for policy in sorted(v.policies, key=lambda p: p.name)
        ],
        "queues": [_queue_definition(record) for v in vhosts for record in _durable_queues(v)],
        "exchanges": [
            exchange_json(v, exchange) for v in vhosts for exchange in _durable_exchanges(v)
        ],
        "bindings": [binding_definition(v, binding) for v in vhosts for binding in _bindings(v)],
    }
    if vhost is not None:
        for key in DEFINITIONS_KEYS[2:]:  # parameters and policies keep theirs, as in RabbitMQ
            for item in objects[key]:
                item.pop("vhost", None)
        return {"rabbit_version": RABBITMQ_VERSION, **objects}
    access = broker.access
    user_names = sorted(access.users)
    return {
        "rabbit_version": RABBITMQ_VERSION,
        "rabbitmq_version": RABBITMQ_VERSION,
        "product_name": "Warren",
        "product_version": __version__,
        "users": [
            {
                "name": name,
                "password_hash": access.users[name].password_hash,
                "hashing_algorithm": access.users[name].hashing_algorithm,
                "tags": list(access.users[name].tags),
                "limits": {},
            }
            for name in user_names
        ],
        "vhosts": [{"name": v.name} for v in vhosts],
        "permissions": [
            {
                "user": p.user,
                "vhost": p.vhost,
                "configure": p.configure,
                "write": p.write,
                "read": p.read,
            }
            for p in sorted(access.permissions.values(), key=lambda p: (p.user, p.vhost))
        ],
        "topic_permissions": [
            dataclasses.asdict(p) for _key, p in sorted(access.topic_permissions.items())
        ],
        "parameters": objects["parameters"],
        "global_parameters": _global_parameters(broker),
        "policies": objects["policies"],
        "queues": objects["queues"],
        "exchanges": objects["exchanges"],
        "bindings": objects["bindings"],
    }


def _global_parameters(broker: Broker) -> list[Json]:
    """``internal_cluster_id``, and ``cluster_name`` once one was set (as RabbitMQ)."""
    node = broker.node_name
    found = [{"name": "internal_cluster_id", "value": f"warren-{node}"}]
    if broker.cluster_name != node:
        found.insert(0, {"name": CLUSTER_NAME, "value": broker.cluster_name})
    return found


def _policy_value(policy: Json) -> Json:
    return {key: policy[key] for key in ("pattern", "definition", "priority", "apply-to")}


def _durable_queues(vhost: VHost) -> list[QueueRecord]:
    records = [r for r in vhost.queues.values() if r.durable and not r.exclusive]
    return sorted(records, key=lambda r: r.name)


def _queue_definition(record: QueueRecord) -> Json:
    return {
        "name": record.name,
        "vhost": record.vhost,
        "durable": record.durable,
        "auto_delete": record.auto_delete,
        "arguments": plain_arguments(record.arguments),
    }


def _durable_exchanges(vhost: VHost) -> list[Exchange]:
    found = [
        e
        for e in vhost.exchanges.values()
        if e.durable and e.name and not e.name.startswith(RESERVED_PREFIX)
    ]
    return sorted(found, key=lambda e: e.name)


def exchange_json(vhost: VHost, exchange: Exchange) -> Json:
    """An exchange as the API lists it and a definitions document holds it."""
    return {
        "name": exchange.name,
        "vhost": vhost.name,
        "type": exchange.type.value,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": plain_arguments(exchange.arguments),
    }


def _bindings(vhost: VHost) -> list[Binding]:
    """Explicit bindings whose two ends are durable (those RabbitMQ keeps and exports)."""
    found = []
    for binding in vhost.list_bindings():
        if not binding.source:
            continue
        ends = (
            vhost.exchanges.get(binding.source),
            (vhost.queues if binding.kind is DestinationKind.QUEUE else vhost.exchanges).get(
                binding.destination
            ),
        )
        if all(end is not None and end.durable for end in ends):
            record = ends[1]
            if not isinstance(record, QueueRecord) or not record.exclusive:
                found.append(binding)
    return found


def binding_definition(vhost: VHost, binding: Binding) -> Json:
    """A binding as a definitions document holds it (the API adds its properties key)."""
    return {
        "source": binding.source,
        "vhost": vhost.name,
        "destination": binding.destination,
        "destination_type": binding.kind.value,
        "routing_key": binding.routing_key,
        "arguments": {key: plain_value(value) for key, value in binding.arguments.items()},
    }


async def import_definitions(broker: Broker, document: object, vhost: str | None = None) -> None:
    """Declare what a RabbitMQ definitions document holds, as a client's declares would
    (in a cluster through the metadata log, one object after the other: every node, this
    one included, makes each when it applies it, and the call returns once every node
    has them all).

    Objects that exist already are left as they are (RabbitMQ's import does the same), so
    importing twice changes nothing; users and permissions are replaced by the
    document's. Vhosts, users (with their ``password_hash``), permissions, topic
    permissions and the ``cluster_name`` global parameter are set; other global parameters
    and parameters other than operator policies are accepted and ignored. With `vhost`
    (POST /api/definitions/{vhost}) every object goes to that vhost, whatever its own
    ``vhost`` key says.
    """
    if not isinstance(document, dict):
        raise DefinitionsError("failed_to_parse_json")
    if vhost is not None:
        vhost_of(broker, vhost)
    try:
        await _import(broker, document, vhost)
    except AmqpError as refused:
        raise DefinitionsError(refused.text) from None
    except (KeyError, TypeError, ValueError, AttributeError) as malformed:
        if isinstance(malformed, DefinitionsError | PolicyError):
            raise
        raise DefinitionsError(f"malformed definitions: {malformed!r}") from None


def _items(document: Json, key: str) -> list[Json]:
    items = document.get(key) or []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise DefinitionsError(f"malformed definitions: {key} must be a list of objects")
    return items


def _target(broker: Broker, item: Json, vhost: str | None) -> VHost:
    name = vhost if vhost is not None else item.get("vhost", "/")
    target = broker.vhosts.get(name)
    if target is None:
        raise DefinitionsError(_no_vhost(name))
    return target


def _no_vhost(name: object) -> str:
    return f"no_such_vhost {name!r}"


async def _import(broker: Broker, document: Json, vhost: str | None) -> None:
    if vhost is None:
        await _import_access(broker, document)
    policies = [(item, False) for item in _items(document, "policies")]
    for item in _items(document, "parameters"):
        if item.get("component") == OPERATOR_POLICY_COMPONENT:
            policies.append(
                ({**item["value"], "vhost": item.get("vhost"), "name": item["name"]}, True)
            )
    for item, operator in policies:
        target = _target(broker, item, vhost)
        policy = make_policy(
            target.name,
            item["name"],
            pattern=item.get("pattern"),
            definition=item.get("definition"),
            priority=item.get("priority", 0),
            apply_to=item.get("apply-to", "all"),
            operator=operator,
        )
        await _put_policy(broker, target, policy, operator)
    for item in _items(document, "queues"):
        await _import_queue(broker, _target(broker, item, vhost), item)
    for item in _items(document, "exchanges"):
        await _import_exchange(broker, _target(broker, item, vhost), item)
    for item in _items(document, "bindings"):
        await _import_binding(broker, _target(broker, item, vhost), item)


async def _import_access(broker: Broker, document: Json) -> None:
    """Vhosts, users and permissions of a whole-node document (RabbitMQ's order)."""
    for item in _items(document, "vhosts"):
        name = item["name"]
        if not isinstance(name, str):
            raise DefinitionsError(f"malformed definitions: vhost name {name!r}")
        if name not in broker.vhosts:
            await admin_access.put_vhost(broker, name, _vhost_metadata(item), creator="")
    for item in _items(document, "users"):
        user = {
            "password_hash": item.get("password_hash", ""),
            "hashing_algorithm": item.get("hashing_algorithm", SHA256),
            "tags": item.get("tags", ""),
        }
        await admin_access.put_user(broker, str(item["name"]), user)
    try:
        for item in _items(document, "permissions"):
            vhost, user_name = str(item["vhost"]), str(item["user"])
            await admin_access.put_permission(broker, vhost, user_name, item)
        for item in _items(document, "topic_permissions"):
            vhost, user_name = str(item["vhost"]), str(item["user"])
            await admin_access.put_topic_permission(broker, vhost, user_name, item)
    except admin_access.AccessError as refused:
        raise DefinitionsError(str(refused.reason)) from None
    for item in _items(document, "global_parameters"):
        if item.get("name") == CLUSTER_NAME:
            await admin_access.set_cluster_name(broker, str(item["value"]))


def _vhost_metadata(item: Json) -> Json:
    metadata = item.get("metadata")
    source = metadata if isinstance(metadata, dict) else item
    return {key: source[key] for key in ("description", "tags") if key in source}


async def _import_queue(broker: Broker, target: VHost, item: Json) -> None:
    name = item["name"]
    if not isinstance(name, str) or name in target.queues:
        if not isinstance(name, str):
            raise DefinitionsError(f"malformed definitions: queue name {name!r}")
        return
    record, created = target.declare_queue(
        name,
        owner=None,
        passive=False,
        durable=bool(item.get("durable", True)),
        exclusive=False,
        auto_delete=bool(item.get("auto_delete", False)),
        arguments=typed_arguments(item.get("arguments")),
    )
    if not created:
        return
    logged: asyncio.Future[object] | asyncio.Future[None] | None = (
        broker.logged_declare(record)
        if record.queue_type is QueueType.CLASSIC
        else broker.replicated_declare(record)
    )
    if logged is None:
        broker.declare_queue(record)
    else:  # in a cluster: made by the log (one declared meanwhile on another node stays)
        await logged


async def _import_exchange(broker: Broker, target: VHost, item: Json) -> None:
    name = item["name"]
    if not isinstance(name, str):
        raise DefinitionsError(f"malformed definitions: exchange name {name!r}")
    if not name or name.startswith(RESERVED_PREFIX) or name in target.exchanges:
        return  # RabbitMQ skips the predeclared ones too
    kind, durable = str(item.get("type", "direct")), bool(item.get("durable", True))
    auto_delete, internal = bool(item.get("auto_delete", False)), bool(item.get("internal", False))
    arguments = typed_arguments(item.get("arguments"))
    raw = encode_table(arguments)
    declare = ExchangeDeclare(target.name, name, kind, durable, auto_delete, internal, raw)
    if await through_log(broker, declare):
        return
    exchange = target.declare_exchange(
        name,
        kind,
        passive=False,
        durable=durable,
        auto_delete=auto_delete,
        internal=internal,
        arguments=arguments,
    )
    if broker.durability is not None:
        broker.durability.exchange_declared(target, exchange)


async def _import_binding(broker: Broker, target: VHost, item: Json) -> None:
    kind = DestinationKind(item.get("destination_type", "queue"))
    source, destination = str(item["source"]), str(item["destination"])
    routing_key = str(item.get("routing_key", ""))
    arguments = item.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise DefinitionsError("malformed definitions: binding arguments must be an object")
    typed = typed_arguments(arguments)
    plain = encode_table({str(key): plain_value(value) for key, value in typed.items()})
    bind = Bind(target.name, destination, kind.value, source, routing_key, plain)
    if await through_log(broker, bind):
        return
    target.bind(destination, kind, source, routing_key, dict(arguments))
    if broker.durability is not None:
        broker.durability.binding_added(target, destination, kind, source, routing_key, arguments)


def typed_arguments(arguments: object) -> dict[str, Typed]:
    """JSON arguments as RabbitMQ's HTTP API types them (rabbit_misc:to_amqp_table)."""
    if arguments is None:
        return {}
    if not isinstance(arguments, dict):
        raise DefinitionsError("malformed definitions: arguments must be an object")
    return {str(key): typed_value(value) for key, value in arguments.items()}


def typed_value(value: object) -> Typed:
    if isinstance(value, bool):
        return Typed("t", value)
    if isinstance(value, int):
        return Typed("l", value)
    if isinstance(value, float):
        return Typed("d", value)
    if isinstance(value, str):
        return Typed("S", value)
    if isinstance(value, list):
        return Typed("A", [typed_value(item) for item in value])
    if isinstance(value, dict):
        return Typed("F", {str(key): typed_value(item) for key, item in value.items()})
    if value is None:
        return Typed("V", None)
    raise DefinitionsError(f"malformed definitions: argument value {value!r}")
