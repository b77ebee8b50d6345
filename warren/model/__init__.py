"""The broker's model: vhosts, exchanges, queue records, bindings and routing.

Theory of operation:
1. `VHost` is the entry point: it declares and deletes exchanges and queues, binds and
   unbinds, and routes a published message to queue names. Everything else in this package
   serves it: `arguments` (queue argument validation), `equivalence` (redeclare checks),
   `exchange` and `routers` (per-type routing indexes), `topic` and `headers` (matchers),
   `erlang_terms` (printing values the way RabbitMQ's error texts do).
2. This is a pure core: no I/O, clocks or randomness; it imports only `warren.errors`,
   `warren.amqp.table` and the standard library. Output order never depends on hashing.
3. Every client-visible refusal is a `warren.errors.SoftError`/`HardError` with RabbitMQ
   3.10's code and text.
"""

from warren.model.arguments import QueueType
from warren.model.binding import Binding, Destination, DestinationKind
from warren.model.exchange import Exchange, ExchangeType
from warren.model.queue_record import QueueRecord
from warren.model.vhost import VHost

__all__ = [
    "Binding",
    "Destination",
    "DestinationKind",
    "Exchange",
    "ExchangeType",
    "QueueRecord",
    "QueueType",
    "VHost",
]
