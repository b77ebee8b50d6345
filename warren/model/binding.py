"""Bindings: the edges from an exchange to a queue or to another exchange.

Theory of operation:
1. A binding is the value ``(source, destination, kind, routing_key, arguments)``; two
   bindings are the same binding when all five are equal, arguments compared as mappings
   (RabbitMQ sorts the argument table before it stores a binding, so order never matters).
2. `Binding` hashes on everything but its arguments, so it can be used in sets and as a key
   although its arguments are a dict; equal bindings still hash equal.
3. A destination is named by its kind and name together: a queue and an exchange may share a
   name. `Destination` is that pair, the unit routing works in.

Source: rabbit_binding.erl (AMQP 0-9-1 section 3.1.3, "bindings").
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TypeAlias


class DestinationKind(enum.Enum):
    QUEUE = "queue"
    EXCHANGE = "exchange"


Destination: TypeAlias = tuple[DestinationKind, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """One binding; `arguments` are plain values from `warren.amqp.table.decode_table`."""

    source: str
    destination: str
    kind: DestinationKind
    routing_key: str
    arguments: dict[str, object] = dataclasses.field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.source, self.destination, self.kind, self.routing_key))

    @property
    def target(self) -> Destination:
        return (self.kind, self.destination)
