"""Admin calls for exchanges, queues and bindings: declare, delete, publish, get, purge.

Theory of operation:
1. Declares go through the model exactly as a client's AMQP declares do (owner None, as
   the management plugin's direct connection), then are stored by `Durability` when
   durable, so the HTTP reply means what declare-ok means.
2. A refusal from the model is an `AmqpError`; `ObjectError` carries its detail (the text
   after ``CODE - ``, which is how RabbitMQ's API words it) and its reply code, so the
   HTTP layer can pick 400 or 401 (ACCESS_REFUSED: ``Access refused.``).
3. In a cluster an exchange's declare and delete and a binding's add and delete go to the
   metadata log first, as a channel's do (`warren.runtime.cluster.metadata`, point 2):
   the reply comes once every node applied the change, from what applying it gave. A
   queue's DELETE is answered once the delete is committed, as queue.delete-ok is
   (`Broker.client_delete`): a quorum queue's through the log, a classic queue's by its
   home, which deletes it through the log too.
4. Publishing routes through the vhost and enqueues on each queue's host like
   basic.publish without confirms; ``/get`` takes up to `count` messages with basic.get
   semantics and then acks, requeues or rejects them all, per ``ackmode``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from warren.amqp.content import BasicProperties, Message, encode_properties
from warren.amqp.table import encode_table
from warren.cluster.metadata import Bind, ExchangeDeclare, ExchangeDelete, Operation, Unbind
from warren.errors import AmqpError, ReplyCode
from warren.model import Binding, DestinationKind, Exchange, QueueType, VHost
from warren.queue import Discard, Enqueue, Return, Settle
from warren.runtime.admin import (
    NotFound,
    binding_definition,
    exchange_json,
    plain_value,
    typed_arguments,
    vhost_of,
)
from warren.runtime.admin_access import through_log
from warren.runtime.admin_phash import properties_key, quote_binding
from warren.runtime.queues.host import Accepted
from warren.runtime.stats import MessageStats

if TYPE_CHECKING:
    from warren.runtime.broker import Broker

Json = dict[str, Any]
ACK_MODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")
TABLE_PROPERTIES = ("headers",)
INT_PROPERTIES = ("delivery_mode", "priority", "timestamp")


class ObjectError(ValueError):
    """The model refused: `detail` is RabbitMQ's reason text, `code` the AMQP reply code."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail

    @classmethod
    def of(cls, error: AmqpError) -> ObjectError:
        return cls(int(error.code), error.text.split(" - ", 1)[-1])


def flag(body: Json, key: str, default: bool) -> bool:
    """A boolean field; RabbitMQ also takes the strings "true" and "false" (rabbitmqadmin
    sends those)."""
    value = body.get(key, default)
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


# --- Exchanges ---


def list_exchanges(broker: Broker, vhosts: list[VHost]) -> list[Json]:
    return [exchange_listed(v, v.exchanges[name]) for v in vhosts for name in sorted(v.exchanges)]


def get_exchange(broker: Broker, vhost: str, name: str) -> Json:
    target = broker.vhosts.get(vhost)
    if target is None or name not in target.exchanges:
        raise NotFound()
    return {**exchange_listed(target, target.exchanges[name]), "incoming": [], "outgoing": []}


def exchange_listed(vhost: VHost, exchange: Exchange) -> Json:
    """An exchange as the API shows it: with ``message_stats`` once published to and the
    ``policy`` that applies to it, if one does, as RabbitMQ (rates are added by the HTTP
    layer), and no record of who declared it."""
    json = {**exchange_json(vhost, exchange), "user_who_performed_action": ""}
    policy = vhost.policies.match_exchange(exchange.name) if exchange.name else None
    if policy is not None:
        json["policy"] = policy.name
    if exchange.publish_in:
        json["message_stats"] = {
            "publish_in": exchange.publish_in,
            "publish_out": exchange.publish_out,
        }
    return json


async def declare_exchange(broker: Broker, vhost: str, name: str, body: Json) -> bool:
    target = vhost_of(broker, vhost)
    created = name not in target.exchanges
    kind = str(body.get("type", "direct"))
    durable, auto_delete = flag(body, "durable", True), flag(body, "auto_delete", False)
    internal = flag(body, "internal", False)
    arguments = typed_arguments(body.get("arguments"))
    if created and await _logged(
        broker,
        ExchangeDeclare(vhost, name, kind, durable, auto_delete, internal, encode_table(arguments)),
    ):
        return True
    try:
        exchange = target.declare_exchange(
            name,
            kind,
            passive=False,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )
    except AmqpError as refused:
        raise ObjectError.of(refused) from None
    if broker.durability is not None:
        broker.durability.exchange_declared(target, exchange)
    return created


async def delete_exchange(
    broker: Broker, vhost: str, name: str, *, if_unused: bool = False
) -> None:
    target = broker.vhosts.get(vhost)
    if target is None or name not in target.exchanges:
        raise NotFound()
    if not name or name.startswith("amq."):
        raise ObjectError(ReplyCode.ACCESS_REFUSED, "Access refused.")
    if await _logged(broker, ExchangeDelete(vhost, name, if_unused)):
        return
    try:
        target.delete_exchange(name, if_unused=if_unused)
    except AmqpError as refused:
        raise ObjectError.of(refused) from None
    if broker.durability is not None:
        broker.durability.exchanges_changed(target)


def publish(broker: Broker, vhost: str, exchange: str, body: Json) -> bool:
    """POST /api/exchanges/{vhost}/{exchange}/publish: True when some queue got it."""
    target = vhost_of(broker, vhost)
    payload = _payload(body)
    properties = _properties(body.get("properties") or {})
    routing_key = str(body.get("routing_key", ""))
    raw = encode_properties(properties)
    message = Message(exchange, routing_key, raw, payload)
    routing_keys = [routing_key]
    headers = properties.headers
    if headers:
        for key in ("CC", "BCC"):
            keys = headers.get(key)
            if isinstance(keys, list):
                routing_keys.extend(str(k) for k in keys if isinstance(k, str))
    try:
        queues = target.route(exchange, routing_keys, headers)
    except AmqpError as refused:
        raise ObjectError(400, f"{int(refused.code)} {refused.text}") from None
    target.exchanges[exchange].count_publish(bool(queues))
    ttl_ms = int(properties.expiration) if properties.expiration else None
    enqueue = Enqueue(message, len(payload), ttl_ms, properties.priority or 0)
    for name in queues:
        host = broker.queue(target.name, name)
        if host is not None:
            host.stats.publish += 1
            host.publish(enqueue)
    counted = MessageStats()  # the API's publishes count in the vhost's totals
    counted.publish = 1
    counted.drop_unroutable = 0 if queues else 1
    broker.retire_stats(target.name, counted)
    return bool(queues)


def _payload(body: Json) -> bytes:
    payload = str(body.get("payload", ""))
    if body.get("payload_encoding", "string") == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise ObjectError(400, "invalid_base64_payload") from None
    return payload.encode("utf-8")


def _properties(given: object) -> BasicProperties:
    if not isinstance(given, Mapping):
        return BasicProperties()
    values: dict[str, Any] = {}
    for name in BasicProperties.__dataclass_fields__:
        if name not in given:
            continue
        value = given[name]
        if name in TABLE_PROPERTIES:
            values[name] = {str(k): _header_value(v) for k, v in dict(value).items()}
        elif name in INT_PROPERTIES:
            values[name] = int(value)
        else:
            values[name] = str(value)
    return BasicProperties(**values)


def _header_value(value: object) -> object:
    """JSON header values as an AMQP client would send them (strings as longstr bytes)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, list):
        return [_header_value(item) for item in value]
    if isinstance(value, dict):
        return {str(k): _header_value(v) for k, v in value.items()}
    return value


async def _logged(broker: Broker, change: Operation) -> bool:
    """`through_log`, with the model's refusal as an `ObjectError` (point 3)."""
    try:
        return await through_log(broker, change)
    except AmqpError as refused:
        raise ObjectError.of(refused) from None


# --- Queues ---


async def declare_queue(broker: Broker, vhost: str, name: str, body: Json) -> bool:
    target = vhost_of(broker, vhost)
    try:
        record, created = target.declare_queue(
            name,
            owner=None,
            passive=False,
            durable=flag(body, "durable", True),
            exclusive=False,
            auto_delete=flag(body, "auto_delete", False),
            arguments=typed_arguments(body.get("arguments")),
        )
    except AmqpError as refused:
        raise ObjectError.of(refused) from None
    pending = None
    if created and record.queue_type is QueueType.CLASSIC:
        pending = broker.logged_declare(record)
    if pending is not None:  # in a cluster: the first declare in the log made it; this
        # one again against it, 400 if not equivalent (201 still: it was not there before)
        await pending
        if name not in target.queues:
            raise ObjectError(ReplyCode.INTERNAL_ERROR, "the queue's declare was not applied")
        await declare_queue(broker, vhost, name, body)
    elif created:
        broker.declare_queue(record)
    return created


async def delete_queue(
    broker: Broker, vhost: str, name: str, *, if_unused: bool = False, if_empty: bool = False
) -> None:
    target = broker.vhosts.get(vhost)
    if target is None or name not in target.queues:
        raise NotFound()
    host = broker.queue(vhost, name)
    where = f"queue '{name}' in vhost '{vhost}'"
    if host is not None and if_unused and host.machine.consumer_count:
        raise ObjectError(ReplyCode.PRECONDITION_FAILED, f"{where} in use")
    if host is not None and if_empty and host.machine.ready_count:
        raise ObjectError(ReplyCode.PRECONDITION_FAILED, f"{where} not empty")
    pending = None if host is None else broker.client_delete(host, if_unused, if_empty)
    if pending is None:
        broker.delete_queue(target, name)
        return
    try:
        await pending
    except AmqpError as refused:  # the home's if-unused or if-empty, or the home is down
        raise ObjectError.of(refused) from None


def purge_queue(broker: Broker, vhost: str, name: str) -> int:
    host = broker.queue(vhost, name)
    if host is None:
        raise NotFound()
    count = host.purge()
    return count.value if type(count) is Accepted else 0  # a quorum queue's: not waited for


def get_messages(broker: Broker, vhost: str, name: str, body: Json) -> list[Json]:
    """POST /api/queues/{vhost}/{name}/get: take up to `count`, then settle all per ackmode."""
    host = broker.queue(vhost, name)
    if host is None:
        raise NotFound()
    ackmode = str(body["ackmode"])
    if ackmode not in ACK_MODES:
        raise ObjectError(400, f"invalid ackmode {ackmode!r}")
    encoding = str(body["encoding"])
    truncate = body.get("truncate")
    taken: list[int] = []
    found: list[Json] = []
    for _ in range(max(0, int(body["count"]))):
        outcome = host.get(no_ack=False)
        reply = outcome.value if type(outcome) is Accepted else None
        if reply is None:
            break
        entry = reply.entry
        taken.append(entry.msg_id)
        found.append(_message_json(entry, reply.remaining, encoding, truncate))
    if taken:
        command: dict[str, type[Return] | type[Settle] | type[Discard]] = {
            "ack_requeue_true": Return,
            "reject_requeue_true": Return,
            "ack_requeue_false": Settle,
            "reject_requeue_false": Discard,
        }
        host.settle(command[ackmode](taken))
    return found


def _message_json(entry: Any, remaining: int, encoding: str, truncate: object) -> Json:
    message: Message = entry.message
    body = message.body
    limit = int(truncate) if isinstance(truncate, int | str) and str(truncate).isdigit() else None
    shown = body if limit is None else body[:limit]
    payload_encoding = "string"
    if encoding == "base64":
        payload, payload_encoding = base64.b64encode(shown).decode("ascii"), "base64"
    else:
        try:
            payload = shown.decode("utf-8")
        except UnicodeDecodeError:
            payload, payload_encoding = base64.b64encode(shown).decode("ascii"), "base64"
    return {
        "payload_bytes": len(body),
        "redelivered": entry.delivery_count > 1,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": remaining,
        "properties": _properties_json(message.properties),
        "payload": payload,
        "payload_encoding": payload_encoding,
    }


def _properties_json(properties: BasicProperties) -> Json | list[Any]:
    shown = {
        name: plain_value(getattr(properties, name))
        for name in BasicProperties.__dataclass_fields__
        if getattr(properties, name) is not None
    }
    return shown or []  # RabbitMQ shows no properties as an empty (Erlang) list


# --- Bindings ---


def binding_json(vhost: VHost, binding: Binding) -> Json:
    return {
        **binding_definition(vhost, binding),
        "properties_key": properties_key(binding.routing_key, binding.arguments),
    }


def list_bindings(vhosts: list[VHost]) -> list[Json]:
    return [binding_json(v, b) for v in vhosts for b in v.list_bindings()]


def bindings_between(
    broker: Broker,
    vhost: str,
    source: str | None,
    kind: DestinationKind | None,
    destination: str | None,
) -> list[Json]:
    """Bindings of one vhost filtered by source, destination kind and destination."""
    target = broker.vhosts.get(vhost)
    if target is None:
        raise NotFound()
    if source is not None and source not in target.exchanges:
        raise NotFound()
    if destination is not None and kind is not None:
        ends = target.queues if kind is DestinationKind.QUEUE else target.exchanges
        if destination not in ends:
            raise NotFound()
    return [
        binding_json(target, b)
        for b in target.list_bindings()
        if (source is None or b.source == source)
        and (kind is None or b.kind is kind)
        and (destination is None or b.destination == destination)
    ]


async def add_binding(
    broker: Broker, vhost: str, source: str, kind: DestinationKind, destination: str, body: Json
) -> str:
    """Bind; return the new binding's properties key (for the Location header)."""
    target = vhost_of(broker, vhost)
    routing_key = str(body.get("routing_key", ""))
    arguments = body.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise ObjectError(400, "arguments must be an object")
    plain = {str(key): plain_value(typed_arguments(arguments)[key]) for key in arguments}
    binding = Bind(vhost, destination, kind.value, source, routing_key, encode_table(plain))
    if not await _logged(broker, binding):
        try:
            target.bind(destination, kind, source, routing_key, plain)
        except AmqpError as refused:
            raise ObjectError.of(refused) from None
        if broker.durability is not None:
            durability = broker.durability
            durability.binding_added(target, destination, kind, source, routing_key, plain)
    return properties_key(routing_key, plain)


def find_binding(
    broker: Broker, vhost: str, source: str, kind: DestinationKind, destination: str, key: str
) -> Binding:
    target = broker.vhosts.get(vhost)
    if target is None:
        raise NotFound()
    # the URL's segment arrives unquoted once: the key as listed, or its parts unquoted
    named = {key, quote_binding(key)}
    if "~" in key:
        routing_key, _, digest = key.rpartition("~")
        named.add(quote_binding(routing_key) + "~" + quote_binding(digest))
    for binding in target.list_bindings():
        if (
            binding.source == source
            and binding.kind is kind
            and binding.destination == destination
            and properties_key(binding.routing_key, binding.arguments) in named
        ):
            return binding
    raise NotFound()


async def delete_binding(
    broker: Broker, vhost: str, source: str, kind: DestinationKind, destination: str, key: str
) -> None:
    binding = find_binding(broker, vhost, source, kind, destination, key)
    target = vhost_of(broker, vhost)
    arguments = encode_table(dict(binding.arguments))
    logged = Unbind(vhost, destination, kind.value, source, binding.routing_key, arguments)
    if await _logged(broker, logged):
        return
    try:
        target.unbind(destination, kind, source, binding.routing_key, dict(binding.arguments))
    except AmqpError as refused:
        raise ObjectError.of(refused) from None
    if broker.durability is not None:
        broker.durability.binding_removed(
            target, destination, kind, source, binding.routing_key, binding.arguments
        )
        broker.durability.exchanges_changed(target)
