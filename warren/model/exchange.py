"""Exchanges: their declared properties and the bindings they are the source of.

Theory of operation:
1. An exchange's name, type, flags and arguments never change after it is declared (a
   redeclare must be equivalent, see `warren.model.equivalence`). Its alternate exchange
   is the ``alternate-exchange`` argument, read once, or else the one its policy names
   (`use_policy`, called again whenever the vhost's policies change).
2. The exchange owns its bindings as a source, grouped by destination in insertion order,
   and keeps its type's router (`warren.model.routers`) in step with them: a binding is added
   to the router exactly when it is new here, and removed exactly when it was here.
3. The exchange knows nothing of other exchanges or queues: what happens to a destination
   that disappears, or to an auto-delete exchange that loses its last binding, is the
   vhost's business (`warren.model.vhost`).

Source: rabbit_exchange.erl, rabbit_binding.erl; AMQP 0-9-1 section 3.1.3.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence

from warren.amqp.table import Typed
from warren.model.binding import Binding, Destination, DestinationKind
from warren.model.routers import DirectRouter, FanoutRouter, HeadersRouter, Router, TopicRouter

ALTERNATE_EXCHANGE = "alternate-exchange"


class ExchangeType(enum.Enum):
    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"


_ROUTERS: Mapping[ExchangeType, Callable[[], Router]] = {
    ExchangeType.DIRECT: DirectRouter,
    ExchangeType.FANOUT: FanoutRouter,
    ExchangeType.TOPIC: TopicRouter,
    ExchangeType.HEADERS: HeadersRouter,
}


class Exchange:
    """One exchange of a vhost."""

    __slots__ = (
        "_argument_alternate",
        "_by_destination",
        "_exchange_destinations",
        "_router",
        "alternate_exchange",
        "arguments",
        "auto_delete",
        "durable",
        "internal",
        "name",
        "publish_in",
        "publish_out",
        "type",
    )

    def __init__(
        self,
        name: str,
        type: ExchangeType,
        *,
        durable: bool,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Typed] | None = None,
    ) -> None:
        self.name = name
        self.type = type
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Typed] = dict(arguments or {})
        # The exchange that takes messages this one routes nowhere, if any. Read-only.
        self._argument_alternate = _alternate_exchange(self.arguments)
        self.alternate_exchange: str | None = self._argument_alternate
        self._router = _ROUTERS[type]()
        self._by_destination: dict[Destination, list[Binding]] = {}
        self._exchange_destinations = 0
        # Messages published to it, and how many of them it routed (the management API's
        # message_stats); bumped by whoever publishes.
        self.publish_in = 0
        self.publish_out = 0

    def __repr__(self) -> str:
        return f"Exchange({self.name!r}, {self.type.value})"

    def count_publish(self, routed: bool) -> None:
        self.publish_in += 1
        if routed:
            self.publish_out += 1

    def use_policy(self, definition: Mapping[str, object] | None) -> None:
        """The definition of the policy that applies now (None: none does)."""
        alternate = (definition or {}).get(ALTERNATE_EXCHANGE)
        if self._argument_alternate is not None or not isinstance(alternate, str):
            self.alternate_exchange = self._argument_alternate
        else:
            self.alternate_exchange = alternate

    @property
    def bindings(self) -> list[Binding]:
        """Bindings this exchange is the source of, grouped by destination."""
        return [binding for group in self._by_destination.values() for binding in group]

    @property
    def has_bindings(self) -> bool:
        return bool(self._by_destination)

    def destinations(self) -> list[Destination]:
        return list(self._by_destination)

    def bindings_to(self, destination: Destination) -> list[Binding]:
        return list(self._by_destination.get(destination, ()))

    def has_binding(self, binding: Binding) -> bool:
        return binding in self._by_destination.get(binding.target, ())

    def add_binding(self, binding: Binding) -> bool:
        """Add `binding` (its source must be this exchange); False if it was already here."""
        group = self._by_destination.get(binding.target)
        if group is None:
            group = self._by_destination[binding.target] = []
            self._count_destination(binding.target, +1)
        elif binding in group:
            return False
        group.append(binding)
        self._router.add(binding)
        return True

    def remove_binding(self, binding: Binding) -> bool:
        """Remove `binding`; False if it was not here."""
        group = self._by_destination.get(binding.target)
        if group is None or binding not in group:
            return False
        group.remove(binding)
        if not group:
            del self._by_destination[binding.target]
            self._count_destination(binding.target, -1)
        self._router.remove(binding)
        return True

    def remove_bindings_to(self, destination: Destination) -> list[Binding]:
        removed = self._by_destination.pop(destination, [])
        if removed:
            self._count_destination(destination, -1)
        for binding in removed:
            self._router.remove(binding)
        return removed

    def _count_destination(self, destination: Destination, change: int) -> None:
        if destination[0] is DestinationKind.EXCHANGE:
            self._exchange_destinations += change

    def match(
        self, routing_keys: Sequence[str], headers: Mapping[str, object] | None
    ) -> Iterable[Destination]:
        """Destinations of this exchange's own bindings, without the alternate exchange."""
        return self._router.match(routing_keys, headers)

    def match_queues(
        self, routing_keys: Sequence[str], headers: Mapping[str, object] | None
    ) -> list[str] | None:
        """Queue names of `match` (maybe repeated), or None if any binding leads to an
        exchange: the publish fast path, which needs no walk over exchanges."""
        if self._exchange_destinations:
            return None
        names = []
        for _, name in self._router.match(routing_keys, headers):
            names.append(name)
        return names


def _alternate_exchange(arguments: Mapping[str, Typed]) -> str | None:
    value = arguments.get(ALTERNATE_EXCHANGE)
    if value is None or value.tag != "S" or not isinstance(value.value, str):
        return None
    return value.value
