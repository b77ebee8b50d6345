"""Vhost permissions: may this user configure, write or read this resource?

Theory of operation (RabbitMQ's Access Control guide, rabbit_access_control):
1. A user's permission in a vhost is three regular expressions, for configure, write and
   read. A resource (queue or exchange) is permitted when the expression *matches
   somewhere* in its name (an unanchored search, as Erlang's ``re:run``); the empty
   expression permits nothing, like ``^$``. The default exchange is the resource
   ``amq.default``.
2. Which operation needs what (recorded from RabbitMQ 3.10.8):
   - configure: queue.declare (not passive), queue.delete, exchange.declare (not
     passive), exchange.delete on that queue or exchange;
   - write: basic.publish on the exchange; queue.bind/unbind on the queue and
     exchange.bind/unbind on the destination exchange (checked first);
   - read: basic.consume, basic.get and queue.purge on the queue; queue.bind/unbind and
     exchange.bind/unbind on the source exchange (checked second).
   Passive declares need nothing.
3. A denial is 403 ACCESS_REFUSED on the channel: ``access to queue 'q' in vhost 'v'
   refused for user 'u'``. A user with no permission in a vhost cannot open a connection
   to it (530 NOT_ALLOWED ``access to vhost 'v' refused for user 'u'``).
4. `PermissionCheck` answers for one user in one vhost and remembers its answers per
   resource name, so a publisher's check is one dict lookup; it is rebuilt when the
   permission changes.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Final

from warren.errors import SoftError, access_refused, describe_exchange, describe_queue
from warren.model.binding import DestinationKind as Kind

DEFAULT_EXCHANGE_RESOURCE: Final = "amq.default"
# a user's own answers per resource; past this many names the memo starts over
_MEMO_ENTRIES_MAX: Final = 4096


class Access(enum.Enum):
    CONFIGURE = "configure"
    WRITE = "write"
    READ = "read"


@dataclass(slots=True)
class PermissionCheck:
    """The configure/write/read expressions of one user in one vhost (rule 4)."""

    user: str
    vhost: str
    configure: str
    write: str
    read: str
    _patterns: dict[Access, re.Pattern[str] | None] = field(default_factory=dict)
    _memo: dict[tuple[Access, str], bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for access, expression in (
            (Access.CONFIGURE, self.configure),
            (Access.WRITE, self.write),
            (Access.READ, self.read),
        ):
            try:
                self._patterns[access] = re.compile(expression) if expression else None
            except re.error:  # the API refuses these; one stored anyway permits nothing
                self._patterns[access] = None

    def permits(self, access: Access, name: str) -> bool:
        key = (access, name)
        answer = self._memo.get(key)
        if answer is None:
            pattern = self._patterns[access]
            answer = pattern is not None and pattern.search(name) is not None
            if len(self._memo) >= _MEMO_ENTRIES_MAX:
                self._memo.clear()
            self._memo[key] = answer
        return answer

    def check(self, access: Access, kind: Kind, name: str) -> None:
        """Raise RabbitMQ's 403 unless the user may `access` the resource (rule 3)."""
        resource = name if name or kind is Kind.QUEUE else DEFAULT_EXCHANGE_RESOURCE
        if not self.permits(access, resource):
            raise self.refused(kind, resource)

    def refused(self, kind: Kind, name: str) -> SoftError:
        describe = describe_queue if kind is Kind.QUEUE else describe_exchange
        resource = describe(name, self.vhost)
        return access_refused(f"access to {resource} refused for user '{self.user}'")
