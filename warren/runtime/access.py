"""Who may log in, and where: users, their tags and passwords, permissions, vhost metadata.

Theory of operation:
1. A `User` keeps a password hash and its algorithm as RabbitMQ's definitions do, never
   the password (`warren.runtime.passwords`: a slow PBKDF2 by default, RabbitMQ's salted
   digests accepted). `authenticate` checks the slow way (callers run it on a worker
   thread) and remembers a success; `authenticated` is the fast answer for a password
   that verified before. A user without a hash (RabbitMQ's ``password_hash: ""``) cannot
   log in with a password.
2. Tags are RabbitMQ's: ``administrator``, ``monitoring``, ``policymaker``,
   ``management``, or anything else (which grants nothing). `warren.mgmt` decides what a
   tag allows; this module only keeps them.
3. A permission is three regular expressions (configure, write, read) per user and vhost.
   Having one is what "may use the vhost" means (connection.open, the HTTP API for
   management users); channels check the expressions on every declare, delete, bind,
   publish, consume, get and purge through `permission_check` (`warren.model.permissions`
   says which operation needs what).
4. A topic permission (RabbitMQ's ``set_topic_permissions``) is two regular expressions
   (write, read) per user, vhost and topic exchange. `topic_refused` answers for a routing
   key: published to the exchange (write) or bound from it (read). A user with no topic
   permission on an exchange may use every routing key, as in RabbitMQ's internal backend;
   ``{username}`` and ``{vhost}`` in an expression stand for the user's name and the vhost
   (escaped), and the expression is searched in the key, not anchored.
5. Vhost metadata (description, tags, default queue type) sits beside the model's `VHost`,
   which knows nothing of it.
6. Pure bookkeeping: persistence is the caller's (`warren.runtime.admin_access` writes the
   definitions store before it changes anything here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from warren.model.permissions import PermissionCheck
from warren.runtime.passwords import DEFAULT_ALGORITHM, Verifier, hash_password, verify
from warren.storage.definitions import (
    PermissionDefinition,
    TopicPermissionDefinition,
    UserDefinition,
)

FULL_ACCESS = ".*"
CLUSTER_NAME = "cluster_name"  # the global parameter that names the cluster


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: str
    tags: tuple[str, ...] = ()
    hashing_algorithm: str = DEFAULT_ALGORITHM

    def definition(self) -> UserDefinition:
        """The user as the definitions store keeps it."""
        return UserDefinition(self.name, self.password_hash, self.tags, self.hashing_algorithm)


@dataclass(frozen=True, slots=True)
class Permission:
    user: str
    vhost: str
    configure: str = FULL_ACCESS
    write: str = FULL_ACCESS
    read: str = FULL_ACCESS

    def definition(self) -> PermissionDefinition:
        """The permission as the definitions store keeps it."""
        return PermissionDefinition(self.user, self.vhost, self.configure, self.write, self.read)


@dataclass(frozen=True, slots=True)
class TopicPermission:
    user: str
    vhost: str
    exchange: str
    write: str = FULL_ACCESS
    read: str = FULL_ACCESS

    def definition(self) -> TopicPermissionDefinition:
        """The topic permission as the definitions store keeps it."""
        return TopicPermissionDefinition(
            self.user, self.vhost, self.exchange, self.write, self.read
        )

    def allows(self, routing_key: str, *, write: bool) -> bool:
        """Rule 4: the write (or read) expression, its variables filled in, found in the key."""
        expression = self.write if write else self.read
        for variable, value in (("{username}", self.user), ("{vhost}", self.vhost)):
            expression = expression.replace(variable, re.escape(value))
        try:
            return re.search(expression, routing_key) is not None
        except re.error:
            return False


def permission_check(permission: Permission | None, user: str, vhost: str) -> PermissionCheck:
    """The check for `permission` (None: the user may use nothing in the vhost)."""
    if permission is None:
        return PermissionCheck(user, vhost, "", "", "")
    return PermissionCheck(user, vhost, permission.configure, permission.write, permission.read)


@dataclass(frozen=True, slots=True)
class VHostInfo:
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    default_queue_type: str | None = None


@dataclass
class Access:
    users: dict[str, User] = field(default_factory=dict)
    permissions: dict[tuple[str, str], Permission] = field(default_factory=dict)
    # (user, vhost, exchange): the topic permission
    topic_permissions: dict[tuple[str, str, str], TopicPermission] = field(default_factory=dict)
    vhosts: dict[str, VHostInfo] = field(default_factory=dict)
    hashing_algorithm: str = DEFAULT_ALGORITHM  # for new passwords
    verifier: Verifier = field(default_factory=Verifier)
    # grows with every change of permissions, so channels know when their answers are stale
    version: int = 0

    @classmethod
    def with_default(
        cls, user: str, password: str, hashing_algorithm: str = DEFAULT_ALGORITHM
    ) -> Access:
        """A node's first start: the default user, an administrator with full access to
        the default vhost (RabbitMQ's default_user, default_user_tags, default_permissions)."""
        access = cls(hashing_algorithm=hashing_algorithm)
        hashed = hash_password(password, hashing_algorithm)
        access.users[user] = User(user, hashed, ("administrator",), hashing_algorithm)
        access.permissions[user, "/"] = Permission(user, "/")
        access.vhosts["/"] = VHostInfo("/", "Default virtual host")
        return access

    def has_password(self, name: str) -> bool:
        user = self.users.get(name)
        return user is not None and bool(user.password_hash)

    def authenticated(self, name: str, password: str) -> User | None:
        """The user, if this password verified before against their current hash (fast)."""
        user = self.users.get(name)
        if user is None or not self.verifier.known(name, password, user.password_hash):
            return None
        return user

    def authenticate(self, name: str, password: str) -> User | None:
        """The user, if the password matches (slow: run it off the event loop)."""
        user = self.users.get(name)
        if user is None or not user.password_hash:
            return None
        if not verify(password, user.password_hash, user.hashing_algorithm):
            return None
        self.verifier.remember(name, password, user.password_hash)
        return user

    def permission(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.get((user, vhost))

    def set_permission(self, permission: Permission) -> None:
        self.permissions[permission.user, permission.vhost] = permission
        self.version += 1

    def clear_permission(self, user: str, vhost: str) -> None:
        self.permissions.pop((user, vhost), None)
        self.version += 1

    def set_topic_permission(self, permission: TopicPermission) -> None:
        self.topic_permissions[permission.user, permission.vhost, permission.exchange] = permission

    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> None:
        """A user's topic permissions in a vhost: one exchange's, or (None) all of them."""
        for key in [
            key
            for key in self.topic_permissions
            if key[:2] == (user, vhost) and exchange in (None, key[2])
        ]:
            del self.topic_permissions[key]

    def topic_refused(
        self, user: str, vhost: str, exchange: str, routing_key: str, *, write: bool
    ) -> bool:
        permission = self.topic_permissions.get((user, vhost, exchange))
        return permission is not None and not permission.allows(routing_key, write=write)

    def forget_user(self, name: str) -> None:
        self.version += 1
        self.users.pop(name, None)
        for key in [key for key in self.permissions if key[0] == name]:
            del self.permissions[key]
        for topic_key in [key for key in self.topic_permissions if key[0] == name]:
            del self.topic_permissions[topic_key]

    def forget_vhost(self, name: str) -> None:
        self.version += 1
        self.vhosts.pop(name, None)
        for key in [key for key in self.permissions if key[1] == name]:
            del self.permissions[key]
        for topic_key in [key for key in self.topic_permissions if key[1] == name]:
            del self.topic_permissions[topic_key]
