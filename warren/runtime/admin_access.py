"""Admin calls for users, vhosts and permissions, in RabbitMQ's HTTP shapes.

Theory of operation:
1. Each change is written to the definitions store (when the node has one) before the
   in-memory `Access` and model change, so a 2xx reply means it survives a restart.
2. A new vhost gets the model's predeclared exchanges and, as in RabbitMQ, its creator
   gets full permissions on it. Deleting a vhost deletes its queues (with their messages),
   closes its connections (320 CONNECTION_FORCED) and forgets its permissions.
3. Failures: `admin_errors.NotFound` for a missing object, `AccessError` with RabbitMQ's
   ``reason`` for a refused body (``tags_not_present``, ``vhost_or_user_not_found``).
4. In a cluster a user's, permission's, topic permission's and the cluster name's
   changes go to the metadata log first (`through_log`): every node, this one included,
   makes them when it applies the entry, and the call returns once every node has; so do
   a vhost's (the creator's permission is a second entry). Imported definitions take the
   same calls (`warren.runtime.admin.import_definitions`), each after the one before.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

from warren.cluster.metadata import (
    DeletePermission,
    DeleteTopicPermissions,
    DeleteUser,
    DeleteVHost,
    Operation,
    PutGlobalParameter,
    PutPermission,
    PutTopicPermission,
    PutUser,
    PutVHost,
)
from warren.errors import AmqpError, HardError, ReplyCode
from warren.model import VHost
from warren.runtime.access import CLUSTER_NAME, Permission, TopicPermission, User, VHostInfo
from warren.runtime.admin_errors import NotFound
from warren.runtime.passwords import SHA256, hash_password
from warren.storage.definitions import VHostDefinition

if TYPE_CHECKING:
    from warren.runtime.broker import Broker

Json = dict[str, Any]
PERMISSION_KEYS = ("configure", "write", "read")


class AccessError(ValueError):
    """A body RabbitMQ would refuse; `reason` is its 400 reason (a string or a JSON value)."""

    def __init__(self, reason: Any) -> None:
        super().__init__(str(reason))
        self.reason = reason


def parse_tags(value: object) -> tuple[str, ...]:
    """Tags as a comma-separated string or a list, as RabbitMQ accepts both."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else str(value).split(",")
    return tuple(tag for tag in (str(item).strip() for item in items) if tag)


# --- Users ---


def user_json(user: User) -> Json:
    return {
        "name": user.name,
        "password_hash": user.password_hash,
        "hashing_algorithm": user.hashing_algorithm,
        "tags": list(user.tags),
        "limits": {},
    }


def list_users(broker: Broker, *, without_permissions: bool = False) -> list[Json]:
    access = broker.access
    users = [access.users[name] for name in sorted(access.users)]
    if without_permissions:
        granted = {user for user, _vhost in access.permissions}
        users = [user for user in users if user.name not in granted]
    return [user_json(user) for user in users]


def get_user(broker: Broker, name: str) -> Json:
    user = broker.access.users.get(name)
    if user is None:
        raise NotFound()
    return user_json(user)


async def put_user(broker: Broker, name: str, body: Json) -> bool:
    """Create or replace a user; True when it is new."""
    user = user_of(broker, name, body)
    created = name not in broker.access.users
    if not await through_log(broker, PutUser(user.definition())):
        store_user(broker, user)
    return created


def user_of(broker: Broker, name: str, body: Json) -> User:
    """The user a PUT makes. RabbitMQ wants ``tags`` unless a password is given; a
    ``password_hash`` is taken as it is (``""``: no password login)."""
    if "tags" not in body and "password" not in body and "password_hash" not in body:
        raise AccessError("tags_not_present")
    existing = broker.access.users.get(name)
    tags = parse_tags(body.get("tags")) if "tags" in body else (existing.tags if existing else ())
    if "password" in body:
        algorithm = broker.access.hashing_algorithm
        password_hash = hash_password(str(body["password"]), algorithm)
    elif "password_hash" in body:
        password_hash = str(body["password_hash"])
        algorithm = str(body.get("hashing_algorithm", SHA256))
    elif existing is not None:
        password_hash, algorithm = existing.password_hash, existing.hashing_algorithm
    else:
        password_hash, algorithm = "", broker.access.hashing_algorithm
    return User(name, password_hash, tags, algorithm)


def store_user(broker: Broker, user: User) -> None:
    if broker.durability is not None:
        broker.durability.definitions.put_user(user.definition())
    broker.access.users[user.name] = user


async def delete_user(broker: Broker, name: str) -> None:
    if name not in broker.access.users:
        raise NotFound()
    if await through_log(broker, DeleteUser(name)):
        return
    if broker.durability is not None:
        broker.durability.definitions.delete_user(name)
    broker.access.forget_user(name)


# --- Vhosts ---


def vhost_json(broker: Broker, name: str) -> Json:
    info = broker.access.vhosts.get(name) or VHostInfo(name)
    tags = list(info.tags)
    return {
        "name": name,
        "description": info.description,
        "tags": tags,
        "default_queue_type": info.default_queue_type or "undefined",
        "metadata": {"description": info.description, "tags": tags},
        "tracing": False,
        "cluster_state": {broker.node_name: "running"},
    }


def vhost_names(broker: Broker) -> list[str]:
    return sorted(broker.vhosts)


async def put_vhost(broker: Broker, name: str, body: Json, creator: str) -> bool:
    """Create a vhost (its creator gets full permissions) or update its metadata."""
    info = vhost_info(broker, name, body)
    created = name not in broker.vhosts
    definition = VHostDefinition(name, info.description, info.tags, info.default_queue_type)
    if not await through_log(broker, PutVHost(definition)):
        return store_vhost(broker, info, creator)
    if created and creator in broker.access.users:
        await through_log(broker, PutPermission(Permission(creator, name).definition()))
    return created


def vhost_info(broker: Broker, name: str, body: Json) -> VHostInfo:
    """A vhost's metadata as a PUT leaves it (what the body does not say stays)."""
    existing = broker.access.vhosts.get(name)
    queue_type = body.get("default_queue_type")
    return VHostInfo(
        name,
        str(body.get("description", existing.description if existing else "")),
        parse_tags(body["tags"]) if "tags" in body else (existing.tags if existing else ()),
        str(queue_type) if queue_type else (existing.default_queue_type if existing else None),
    )


def store_vhost(broker: Broker, info: VHostInfo, creator: str) -> bool:
    """Make a vhost here at once; True when it is new."""
    name = info.name
    created = name not in broker.vhosts
    if broker.durability is not None:
        broker.durability.definitions.put_vhost(
            VHostDefinition(name, info.description, info.tags, info.default_queue_type)
        )
    broker.access.vhosts[name] = info
    if created:
        broker.vhosts[name] = VHost(name)
        if creator in broker.access.users:
            store_permission(broker, Permission(creator, name))
    return created


async def remove_vhost(broker: Broker, name: str) -> None:
    """A vhost's DELETE: `delete_vhost` here, or in a cluster on every node from the log."""
    if name not in broker.vhosts:
        raise NotFound()
    if not await through_log(broker, DeleteVHost(name)):
        delete_vhost(broker, name)


def delete_vhost(broker: Broker, name: str) -> None:
    found = broker.vhosts.get(name)
    if found is None:
        raise NotFound()
    vhost: VHost = found
    for connection in list(broker.connections):
        if connection.vhost is vhost:
            connection.close_with(
                HardError(ReplyCode.CONNECTION_FORCED, f"vhost '{name}' is deleted")
            )
    for queue_name in list(vhost.queues):
        broker.delete_queue(vhost, queue_name)
    if broker.durability is not None:
        broker.durability.vhost_deleted(name)
    del broker.vhosts[name]
    broker.access.forget_vhost(name)
    broker.retired_stats.pop(name, None)


# --- Permissions ---


def permission_json(permission: Permission) -> Json:
    return {
        "user": permission.user,
        "vhost": permission.vhost,
        "configure": permission.configure,
        "write": permission.write,
        "read": permission.read,
    }


def list_permissions(
    broker: Broker, *, user: str | None = None, vhost: str | None = None
) -> list[Json]:
    access = broker.access
    _check_scope(broker, user, vhost)
    found = [
        p
        for p in access.permissions.values()
        if (user is None or p.user == user) and (vhost is None or p.vhost == vhost)
    ]
    found.sort(key=lambda p: (p.user, p.vhost))
    return [permission_json(p) for p in found]


def _check_scope(broker: Broker, user: str | None, vhost: str | None) -> None:
    """NotFound when a list is asked for a user or vhost that does not exist."""
    if user is not None and user not in broker.access.users:
        raise NotFound()
    if vhost is not None and vhost not in broker.vhosts:
        raise NotFound()


def get_permission(broker: Broker, vhost: str, user: str) -> Json:
    permission = broker.access.permission(user, vhost)
    if permission is None:
        raise NotFound()
    return permission_json(permission)


async def put_permission(broker: Broker, vhost: str, user: str, body: Json) -> bool:
    permission = permission_of(broker, vhost, user, body)
    created = broker.access.permission(user, vhost) is None
    if not await through_log(broker, PutPermission(permission.definition())):
        store_permission(broker, permission)
    return created


def permission_of(broker: Broker, vhost: str, user: str, body: Json) -> Permission:
    if vhost not in broker.vhosts or user not in broker.access.users:
        raise AccessError("vhost_or_user_not_found")
    for key in PERMISSION_KEYS:
        try:
            re.compile(str(body[key]))
        except re.error as refused:
            raise AccessError(f"invalid_regexp {body[key]!r}: {refused}") from None
    return Permission(user, vhost, str(body["configure"]), str(body["write"]), str(body["read"]))


def store_permission(broker: Broker, permission: Permission) -> None:
    if broker.durability is not None:
        broker.durability.definitions.put_permission(permission.definition())
    broker.access.set_permission(permission)


async def delete_permission(broker: Broker, vhost: str, user: str) -> None:
    if broker.access.permission(user, vhost) is None:
        raise NotFound()
    if await through_log(broker, DeletePermission(user, vhost)):
        return
    if broker.durability is not None:
        broker.durability.definitions.delete_permission(user, vhost)
    broker.access.clear_permission(user, vhost)


# --- Topic permissions and the cluster name ---

TOPIC_PERMISSION_KEYS = ("exchange", "write", "read")


def topic_permission_json(permission: TopicPermission) -> Json:
    return dataclasses.asdict(permission)  # user, vhost, exchange, write, read


def list_topic_permissions(
    broker: Broker, *, user: str | None = None, vhost: str | None = None
) -> list[Json]:
    access = broker.access
    _check_scope(broker, user, vhost)
    return [
        topic_permission_json(access.topic_permissions[key])
        for key in sorted(access.topic_permissions)
        if user in (None, key[0]) and vhost in (None, key[1])
    ]


def get_topic_permissions(broker: Broker, vhost: str, user: str) -> list[Json]:
    """A user's topic permissions in a vhost (RabbitMQ answers a list); none is a 404."""
    found = [
        item
        for item in list_topic_permissions(broker)
        if (item["vhost"], item["user"]) == (vhost, user)
    ]
    if not found:
        raise NotFound()
    return found


async def put_topic_permission(broker: Broker, vhost: str, user: str, body: Json) -> bool:
    """Set a user's topic permission on one exchange; True when it is new."""
    permission = topic_permission_of(broker, vhost, user, body)
    created = (user, vhost, permission.exchange) not in broker.access.topic_permissions
    if not await through_log(broker, PutTopicPermission(permission.definition())):
        store_topic_permission(broker, permission)
    return created


def topic_permission_of(broker: Broker, vhost: str, user: str, body: Json) -> TopicPermission:
    if vhost not in broker.vhosts or user not in broker.access.users:
        raise AccessError("vhost_or_user_not_found")
    for key in ("write", "read"):
        try:
            re.compile(str(body[key]))
        except re.error as refused:
            raise AccessError(f"invalid_regexp {body[key]!r}: {refused}") from None
    return TopicPermission(
        user, vhost, str(body["exchange"]), str(body["write"]), str(body["read"])
    )


def store_topic_permission(broker: Broker, permission: TopicPermission) -> None:
    if broker.durability is not None:
        broker.durability.definitions.put_topic_permission(permission.definition())
    broker.access.set_topic_permission(permission)


async def delete_topic_permissions(
    broker: Broker, vhost: str, user: str, exchange: str | None = None
) -> None:
    """Clear a user's topic permissions in a vhost (one exchange's, or all)."""
    present = [
        key
        for key in broker.access.topic_permissions
        if key[:2] == (user, vhost) and exchange in (None, key[2])
    ]
    if not present:
        raise NotFound()
    if await through_log(broker, DeleteTopicPermissions(user, vhost, exchange)):
        return
    if broker.durability is not None:
        broker.durability.definitions.delete_topic_permissions(user, vhost, exchange)
    broker.access.clear_topic_permissions(user, vhost, exchange)


async def set_cluster_name(broker: Broker, name: str) -> None:
    """RabbitMQ's cluster_name global parameter; in a cluster it reaches every node."""
    if not await through_log(broker, PutGlobalParameter(CLUSTER_NAME, name)):
        store_cluster_name(broker, name)


def store_cluster_name(broker: Broker, name: str) -> None:
    if broker.durability is not None:
        broker.durability.definitions.put_global_parameter(CLUSTER_NAME, name)
    broker.cluster_name = name


async def through_log(broker: Broker, change: Operation) -> bool:
    """In a cluster, make a definition change through the metadata log, on every node
    (`warren.runtime.cluster.metadata`, point 2), and raise what the model refused it
    with; False on a single node, where the caller makes it at once."""
    pending = broker.logged_change(change)
    if pending is None:
        return False
    refused = await pending
    if isinstance(refused, AmqpError):
        raise refused
    return True
