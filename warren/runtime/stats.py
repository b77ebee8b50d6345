"""Message counters for the management API's ``message_stats``: plain ints, bumped in place.

Theory of operation:
1. Each channel owns one `MessageStats` and bumps its fields on its own path (one integer
   add per publish, per delivery, per batch of acks or confirms); nothing is sampled or
   timed here. When a channel closes its counts are added to the broker's `retired`
   totals, per vhost, so node and vhost totals never go backwards.
2. Names are RabbitMQ's ``message_stats`` keys: ``publish``, ``confirm``, ``deliver``
   (consumer deliveries needing an ack), ``deliver_no_ack``, ``get``, ``get_no_ack``,
   ``get_empty``, ``redeliver``, ``ack``, ``return_unroutable``, ``drop_unroutable``;
   ``deliver_get`` is the sum of the four delivery kinds, computed when read.
3. Rates are not computed here: `warren.mgmt.rates` samples these totals over time.
"""

from __future__ import annotations

from collections.abc import Iterable

FIELDS = (
    "publish",
    "confirm",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "redeliver",
    "ack",
    "return_unroutable",
    "drop_unroutable",
)


class MessageStats:
    __slots__ = FIELDS

    def __init__(self) -> None:
        self.publish = 0
        self.confirm = 0
        self.deliver = 0
        self.deliver_no_ack = 0
        self.get = 0
        self.get_no_ack = 0
        self.get_empty = 0
        self.redeliver = 0
        self.ack = 0
        self.return_unroutable = 0
        self.drop_unroutable = 0

    def add(self, other: MessageStats) -> None:
        for name in FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def counts(self) -> dict[str, int]:
        """The counters with RabbitMQ's derived ``deliver_get``."""
        counts = {name: getattr(self, name) for name in FIELDS}
        counts["deliver_get"] = self.deliver + self.deliver_no_ack + self.get + self.get_no_ack
        return counts

    @classmethod
    def total(cls, parts: Iterable[MessageStats]) -> MessageStats:
        total = cls()
        for part in parts:
            total.add(part)
        return total
