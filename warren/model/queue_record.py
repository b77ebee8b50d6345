"""Queue records: what a vhost knows of a queue (its declaration), not its messages.

Theory of operation:
1. A record holds the declared name, flags and arguments; the queue's contents and consumers
   belong to `warren.queue` and the runtime. An exclusive queue's owner is an opaque hashable
   token for the connection that declared it; None means the queue is not exclusive.
2. `durable` is the stored value: RabbitMQ stores an exclusive queue as non-durable whatever
   the declare said.
3. Access to an exclusive queue by anyone but its owner is refused with 405 RESOURCE_LOCKED
   (`check_access`), the "lax" check RabbitMQ makes before consume, get, purge, delete,
   bind and a passive declare. A non-passive redeclare uses the strict check instead
   (the declaring connection's exclusivity must be the same), in `warren.model.vhost`.

Source: amqqueue.erl, rabbit_amqqueue:check_exclusive_access/3.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from warren.amqp.table import Typed
from warren.errors import resource_locked_queue
from warren.model.arguments import QueueType, queue_type_of


@dataclasses.dataclass(slots=True)
class QueueRecord:
    name: str
    vhost: str
    durable: bool
    exclusive_owner: Hashable | None
    auto_delete: bool
    arguments: dict[str, Typed]

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def queue_type(self) -> QueueType:
        """classic, quorum or stream, from ``x-queue-type``."""
        return queue_type_of(self.arguments)

    def check_access(self, owner: object) -> None:
        """405 unless the queue is not exclusive or `owner` is its owner."""
        if self.exclusive_owner is not None and self.exclusive_owner != owner:
            raise resource_locked_queue(self.name, self.vhost)
