"""A virtual host: its exchanges, queue records and bindings, and routing between them.

Theory of operation:
1. The vhost is the only writer of its three collections: `exchanges` and `queues` (name →
   object, insertion-ordered) and the bindings, which live in their source exchange with a
   reverse index here (destination → names of the exchanges bound to it).
2. Invariants: every binding's source and destination exist; the reverse index names exactly
   the exchanges holding a binding to each destination; the default exchange ``""`` has no
   explicit bindings (it reaches every queue by name implicitly) and cannot be deleted.
3. Removing a destination (a queue, or an exchange) removes every binding to it; an
   auto-delete exchange that thereby loses its last binding as a source is deleted too, and
   that deletion cascades the same way. An auto-delete exchange that never had a binding
   stays. Unbinding an exchange's last binding deletes it the same way.
4. Routing follows RabbitMQ's rabbit_exchange:route/2: the default exchange delivers to the
   queues named by the routing keys; any other exchange is walked with a work list over
   exchange-to-exchange bindings, each exchange visited at most once (so cycles end); an
   exchange whose own bindings match nothing hands the message to its alternate exchange,
   if that exists. The result is each queue once, sorted by name as RabbitMQ's usort does.
5. Every refusal is a `SoftError`/`HardError` with RabbitMQ's code and text, checked in
   RabbitMQ's order (so a request that breaks two rules fails the way RabbitMQ's does).
6. The model only decides; it keeps no clocks, does no I/O, and never looks at messages
   beyond their routing keys and headers.

Source: rabbit_channel.erl (handle_method for exchange.*, queue.*, binding_action/10),
rabbit_exchange.erl, rabbit_binding.erl, rabbit_amqqueue.erl (RabbitMQ 3.10).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from warren.amqp.table import Typed
from warren.errors import (
    default_exchange_refused,
    describe_exchange,
    exchange_in_use,
    exchange_not_found,
    internal_exchange_publish,
    invalid_arg_type,
    invalid_exchange_type,
    queue_not_found,
    reserved_name_prefix,
    resource_locked_queue,
    system_exchange_deletion,
)
from warren.model.arguments import QUEUE_TYPE_ARGUMENTS, validate_new_queue
from warren.model.binding import Binding, Destination, DestinationKind
from warren.model.equivalence import assert_arguments, assert_flag
from warren.model.erlang_terms import wire_type_name
from warren.model.exchange import ALTERNATE_EXCHANGE, Exchange, ExchangeType
from warren.model.headers import validate_x_match
from warren.model.policy import PolicyStore
from warren.model.queue_record import QueueRecord

RESERVED_PREFIX = "amq."

# Declared in every vhost, all durable (rabbit_vhost:do_add/2 in RabbitMQ 3.10).
PREDECLARED_EXCHANGES: tuple[tuple[str, ExchangeType, bool], ...] = (
    ("", ExchangeType.DIRECT, False),
    ("amq.direct", ExchangeType.DIRECT, False),
    ("amq.fanout", ExchangeType.FANOUT, False),
    ("amq.headers", ExchangeType.HEADERS, False),
    ("amq.match", ExchangeType.HEADERS, False),
    ("amq.rabbitmq.trace", ExchangeType.TOPIC, True),
    ("amq.topic", ExchangeType.TOPIC, False),
)

_QUEUE = DestinationKind.QUEUE
_EXCHANGE = DestinationKind.EXCHANGE


class VHost:
    """Exchanges, queue records and bindings of one virtual host."""

    def __init__(self, name: str = "/") -> None:
        self.name = name
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, QueueRecord] = {}
        self._sources_of: dict[Destination, dict[str, None]] = {}
        self.policies = PolicyStore()  # user policies (warren.model.policy)
        self.operator_policies = PolicyStore()
        for exchange_name, exchange_type, internal in PREDECLARED_EXCHANGES:
            self.exchanges[exchange_name] = Exchange(
                exchange_name, exchange_type, durable=True, internal=internal
            )

    # --- Exchanges ---

    def declare_exchange(
        self,
        name: str,
        type: str,
        *,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Typed],
    ) -> Exchange:
        """exchange.declare: the existing or new exchange, or the error RabbitMQ sends."""
        if passive:
            if not name:
                raise default_exchange_refused()
            return self.exchange(name)
        exchange_type = _exchange_type(type)
        if not name:
            raise default_exchange_refused()
        existing = self.exchanges.get(name)
        if existing is not None:
            self._assert_exchange_equivalent(
                existing, exchange_type, durable, auto_delete, internal, arguments
            )
            return existing
        self._check_new_exchange(name, arguments)
        exchange = Exchange(
            name,
            exchange_type,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )
        self._use_policy(exchange)
        self.exchanges[name] = exchange
        return exchange

    def resolve_exchange_policies(self) -> None:
        """The policies changed: each exchange takes what now applies to it."""
        for exchange in self.exchanges.values():
            self._use_policy(exchange)

    def _use_policy(self, exchange: Exchange) -> None:
        policy = self.policies.match_exchange(exchange.name) if exchange.name else None
        exchange.use_policy(policy.definition if policy is not None else None)

    def exchange(self, name: str) -> Exchange:
        """The exchange called `name`, or 404."""
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise exchange_not_found(name, self.name)
        return exchange

    def delete_exchange(self, name: str, *, if_unused: bool) -> None:
        """exchange.delete; deleting a missing exchange is not an error."""
        if not name:
            raise default_exchange_refused()
        if name.startswith(RESERVED_PREFIX):
            raise system_exchange_deletion(name, self.name)
        exchange = self.exchanges.get(name)
        if exchange is None:
            return
        if if_unused and exchange.has_bindings:
            raise exchange_in_use(name, self.name)
        self._delete_exchange(exchange)

    def _assert_exchange_equivalent(
        self,
        exchange: Exchange,
        exchange_type: ExchangeType,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Typed],
    ) -> None:
        name, vhost = exchange.name, self.name
        assert_flag("exchange", name, vhost, "type", exchange.type.value, exchange_type.value)
        assert_flag("exchange", name, vhost, "durable", exchange.durable, durable)
        assert_flag("exchange", name, vhost, "auto_delete", exchange.auto_delete, auto_delete)
        assert_flag("exchange", name, vhost, "internal", exchange.internal, internal)
        keys = (ALTERNATE_EXCHANGE,)
        assert_arguments("exchange", name, vhost, keys, exchange.arguments, arguments)

    def _check_new_exchange(self, name: str, arguments: Mapping[str, Typed]) -> None:
        if name.startswith(RESERVED_PREFIX):
            raise reserved_name_prefix("exchange", name)
        alternate = arguments.get(ALTERNATE_EXCHANGE)
        if alternate is not None and alternate.tag != "S":
            resource = describe_exchange(name, self.name)
            raise invalid_arg_type(wire_type_name(alternate.tag), ALTERNATE_EXCHANGE, resource)

    def _delete_exchange(self, exchange: Exchange) -> None:
        for target in exchange.destinations():
            exchange.remove_bindings_to(target)
            self._forget_source(target, exchange.name)
        del self.exchanges[exchange.name]
        self._drop_destination((_EXCHANGE, exchange.name))

    # --- Queues ---

    def declare_queue(
        self,
        name: str,
        *,
        owner: object,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: dict[str, Typed],
        server_named: bool = False,
    ) -> tuple[QueueRecord, bool]:
        """queue.declare: the record and whether it was created now.

        `server_named` is True when the runtime generated `name` (``amq.gen-…``) for a declare
        with an empty name; only such a name may start with ``amq.``.
        """
        if passive:
            return self.check_queue_access(name, owner), False
        stored_owner = owner if exclusive else None
        stored_durable = durable and not exclusive
        if name.startswith(RESERVED_PREFIX) and not server_named:
            raise reserved_name_prefix("queue", name)
        existing = self.queues.get(name)
        if existing is not None:
            self._assert_queue_equivalent(
                existing, stored_owner, stored_durable, auto_delete, arguments
            )
            return existing, False
        validate_new_queue(
            name,
            self.name,
            durable=stored_durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments,
        )
        record = QueueRecord(
            name, self.name, stored_durable, stored_owner, auto_delete, dict(arguments)
        )
        self.queues[name] = record
        return record, True

    def check_queue_access(self, name: str, owner: object) -> QueueRecord:
        """The record of queue `name` if `owner` may use it; else 404 or 405."""
        record = self.queues.get(name)
        if record is None:
            raise queue_not_found(name, self.name)
        record.check_access(owner)
        return record

    def delete_queue(self, name: str) -> QueueRecord:
        """Remove the queue and its bindings (404 if missing; queue.delete of a missing queue
        is a success with count 0, which the runtime answers without calling this)."""
        record = self.queues.pop(name, None)
        if record is None:
            raise queue_not_found(name, self.name)
        self._drop_destination((_QUEUE, name))
        return record

    def _assert_queue_equivalent(
        self,
        record: QueueRecord,
        owner: object | None,
        durable: bool,
        auto_delete: bool,
        arguments: Mapping[str, Typed],
    ) -> None:
        if record.exclusive_owner != owner:
            raise resource_locked_queue(record.name, self.name)
        name, vhost = record.name, self.name
        assert_flag("queue", name, vhost, "durable", record.durable, durable)
        assert_flag("queue", name, vhost, "auto_delete", record.auto_delete, auto_delete)
        keys = QUEUE_TYPE_ARGUMENTS[record.queue_type]
        assert_arguments("queue", name, vhost, keys, record.arguments, arguments)

    # --- Bindings ---

    def bind(
        self,
        destination: str,
        kind: DestinationKind,
        source: str,
        routing_key: str,
        arguments: dict[str, object],
        *,
        owner: object | None = None,
    ) -> None:
        """queue.bind / exchange.bind. With `owner`, a queue exclusive to another connection
        is refused (405) at the point RabbitMQ checks it; binding twice is not an error."""
        _check_not_default(destination, kind, source)
        exchange = self.exchange(source)
        self._check_destination_exists(destination, kind)
        if exchange.type is ExchangeType.HEADERS:
            error = validate_x_match(arguments)
            if error is not None:
                raise error
        if kind is _QUEUE and owner is not None:
            self.queues[destination].check_access(owner)
        binding = Binding(source, destination, kind, routing_key, dict(arguments))
        if exchange.add_binding(binding):
            self._sources_of.setdefault(binding.target, {})[source] = None

    def unbind(
        self,
        destination: str,
        kind: DestinationKind,
        source: str,
        routing_key: str,
        arguments: dict[str, object],
        *,
        owner: object | None = None,
    ) -> None:
        """queue.unbind / exchange.unbind: a missing source, destination or binding is a
        success, as in RabbitMQ; the source goes if it is auto-delete and this was its last."""
        _check_not_default(destination, kind, source)
        exchange = self.exchanges.get(source)
        if exchange is None or not self._destination_exists(destination, kind):
            return
        binding = Binding(source, destination, kind, routing_key, dict(arguments))
        if not exchange.has_binding(binding):
            return
        if kind is _QUEUE and owner is not None:
            self.queues[destination].check_access(owner)
        exchange.remove_binding(binding)
        if not exchange.bindings_to(binding.target):
            self._forget_source(binding.target, source)
        if exchange.auto_delete and not exchange.has_bindings:
            self._delete_exchange(exchange)

    def bindings_of(self, source: str) -> list[Binding]:
        """Bindings whose source is `source`; the default exchange's are implicit ones."""
        if not source:
            return [_implicit_binding(name) for name in sorted(self.queues)]
        return self.exchange(source).bindings

    def bindings_to(self, destination: str, kind: DestinationKind) -> list[Binding]:
        """Bindings whose destination is the given queue or exchange, implicit one first."""
        found = [_implicit_binding(destination)] if kind is _QUEUE else []
        for source in self._sources_of.get((kind, destination), ()):
            found.extend(self.exchanges[source].bindings_to((kind, destination)))
        return found

    def list_bindings(self) -> list[Binding]:
        """Every binding: implicit default-exchange ones, then the rest in RabbitMQ's order
        (source, routing key, destination kind, destination)."""
        explicit = [
            binding for exchange in self.exchanges.values() for binding in exchange.bindings
        ]
        explicit.sort(key=_binding_order)
        return self.bindings_of("") + explicit

    def _check_destination_exists(self, destination: str, kind: DestinationKind) -> None:
        if not self._destination_exists(destination, kind):
            if kind is _QUEUE:
                raise queue_not_found(destination, self.name)
            raise exchange_not_found(destination, self.name)

    def _destination_exists(self, destination: str, kind: DestinationKind) -> bool:
        return destination in (self.queues if kind is _QUEUE else self.exchanges)

    def _forget_source(self, target: Destination, source: str) -> None:
        sources = self._sources_of.get(target)
        if sources is not None:
            sources.pop(source, None)
            if not sources:
                del self._sources_of[target]

    def _drop_destination(self, target: Destination) -> None:
        """Remove every binding to `target`, cascading through auto-delete exchanges."""
        pending = [target]
        while pending:
            current = pending.pop()
            for source_name in self._sources_of.pop(current, {}):
                source = self.exchanges[source_name]
                source.remove_bindings_to(current)
                if source.auto_delete and not source.has_bindings:
                    del self.exchanges[source_name]
                    pending.append((_EXCHANGE, source_name))

    # --- Routing ---

    def route(
        self,
        exchange: str,
        routing_keys: Sequence[str],
        headers: Mapping[str, object] | None,
    ) -> list[str]:
        """Names of the queues a message published to `exchange` reaches, each once, sorted.

        `routing_keys` holds the message's routing key first, then any CC and BCC keys.
        """
        source = self.exchanges.get(exchange)
        if source is None:
            raise exchange_not_found(exchange, self.name)
        if source.internal:
            raise internal_exchange_publish(exchange, self.name)
        if not exchange:
            return self._route_by_queue_name(routing_keys)
        return self._route_from(source, routing_keys, headers)

    def _route_by_queue_name(self, routing_keys: Sequence[str]) -> list[str]:
        if len(routing_keys) == 1:
            return [routing_keys[0]] if routing_keys[0] in self.queues else []
        return sorted(dict.fromkeys(key for key in routing_keys if key in self.queues))

    def _route_from(
        self, source: Exchange, routing_keys: Sequence[str], headers: Mapping[str, object] | None
    ) -> list[str]:
        names = source.match_queues(routing_keys, headers)
        if names is not None:  # the common case, kept cheap: no walk over exchanges
            if len(names) > 1:
                return sorted(dict.fromkeys(names))
            if names or source.alternate_exchange is None:
                return names
        return self._walk(source, routing_keys, headers)

    def _walk(
        self, source: Exchange, routing_keys: Sequence[str], headers: Mapping[str, object] | None
    ) -> list[str]:
        queues: dict[str, None] = {}
        seen: dict[str, None] = {source.name: None}
        pending = [source]
        while pending:
            exchange = pending.pop()
            matched = False
            for kind, name in exchange.match(routing_keys, headers):
                matched = True
                if kind is _QUEUE:
                    queues[name] = None
                else:
                    self._visit(name, seen, pending)
            alternate = exchange.alternate_exchange
            if not matched and alternate is not None:
                self._visit(alternate, seen, pending)
        return sorted(queues) if len(queues) > 1 else list(queues)

    def _visit(self, name: str, seen: dict[str, None], pending: list[Exchange]) -> None:
        if name in seen:
            return
        seen[name] = None
        exchange = self.exchanges.get(name)
        if exchange is not None:
            pending.append(exchange)


def _exchange_type(type_name: str) -> ExchangeType:
    try:
        return ExchangeType(type_name)
    except ValueError:
        raise invalid_exchange_type(type_name) from None


def _check_not_default(destination: str, kind: DestinationKind, source: str) -> None:
    if not source or (kind is _EXCHANGE and not destination):
        raise default_exchange_refused()


def _implicit_binding(queue: str) -> Binding:
    return Binding("", queue, _QUEUE, queue, {})


def _binding_order(binding: Binding) -> tuple[str, str, str, str]:
    return (binding.source, binding.routing_key, binding.kind.value, binding.destination)
