"""Who may call what: RabbitMQ's user tags over the management API.

Theory of operation (rabbit_mgmt_util:is_authorized* of 3.10.8, checked against a live
broker; see tests/integration/data/rabbitmq-3.10.8-mgmt.json):
1. Tags grant levels: ``administrator`` everything; ``monitoring`` reads every vhost's
   objects and the nodes; ``policymaker`` policies of its vhosts; ``management`` the
   objects of the vhosts it has permissions on, and its own connections. A user with
   none of these (``none``) is refused every call: 401 ``Not management user``.
2. A route needs a level (`Level`); failing it is 401 ``not_authorised`` with
   RabbitMQ's reason (``Not administrator user``, ``Not monitor user``, ...).
3. A path that names an existing vhost needs a permission on it (any user, even an
   administrator): else 401 ``User not authorised to access virtual host``.
4. Lists are narrowed for users below monitoring: to the vhosts they have permissions on,
   and connections, channels and consumers to their own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from warren.runtime.access import User
from warren.runtime.broker import Broker

MANAGEMENT_TAGS = frozenset({"management", "policymaker", "monitoring", "administrator"})


class Level(enum.Enum):
    MANAGEMENT = "Not management user"
    POLICYMAKER = "Not policymaker user"
    MONITOR = "Not monitor user"
    ADMINISTRATOR = "Not administrator user"


VHOST_REFUSED = "User not authorised to access virtual host"


@dataclass(frozen=True, slots=True)
class Principal:
    user: User

    @property
    def name(self) -> str:
        return self.user.name

    @property
    def tags(self) -> tuple[str, ...]:
        return self.user.tags

    def has(self, level: Level) -> bool:
        tags = set(self.user.tags)
        if "administrator" in tags:
            return True
        if level is Level.MANAGEMENT:
            return bool(tags & MANAGEMENT_TAGS)
        if level is Level.POLICYMAKER:
            return "policymaker" in tags
        if level is Level.MONITOR:
            return "monitoring" in tags
        return False

    @property
    def sees_all(self) -> bool:
        """Monitoring and administrator users see every vhost's objects and connections."""
        return self.has(Level.MONITOR)

    def may_use_vhost(self, broker: Broker, vhost: str) -> bool:
        return broker.access.permission(self.user.name, vhost) is not None

    def visible_vhosts(self, broker: Broker) -> list[str]:
        names = sorted(broker.vhosts)
        if self.sees_all:
            return names
        return [name for name in names if self.may_use_vhost(broker, name)]

    def sees_user(self, user: str) -> bool:
        return self.sees_all or user == self.user.name
