"""HTTP resources for users, vhosts and permissions (RabbitMQ's /api/users, /api/vhosts,
/api/permissions, /api/whoami), over `warren.runtime.admin_access`.

Status codes as RabbitMQ's: PUT 201 created / 204 updated, DELETE 204 or 404, a refused
body 400 with RabbitMQ's reason (``tags_not_present``, ``vhost_or_user_not_found``,
``[{key_missing,write}]``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from warren.mgmt import replies
from warren.mgmt.authz import Level
from warren.mgmt.context import listed, principal, rates, single
from warren.mgmt.rates import totals_counts
from warren.mgmt.resources import read_body
from warren.runtime import admin_access, admin_live, admin_neutral
from warren.runtime.admin import NotFound
from warren.runtime.broker import Broker

ADMIN = Level.ADMINISTRATOR
MANAGEMENT = Level.MANAGEMENT


async def whoami(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    caller = principal(request)
    return replies.ok({"name": caller.name, "tags": list(caller.tags)})


# --- Users ---


async def list_users(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    return listed(request, broker, admin_access.list_users(broker))


async def users_without_permissions(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    return listed(request, broker, admin_access.list_users(broker, without_permissions=True))


async def get_user(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        return single(request, admin_access.get_user(broker, params[0]))
    except NotFound:
        return replies.not_found()


async def put_user(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    body = await read_body(request, ())
    if isinstance(body, web.Response):
        return body
    try:
        created = await admin_access.put_user(broker, params[0], body)
    except admin_access.AccessError as refused:
        return replies.bad_request(refused.reason)
    return replies.created() if created else replies.no_content()


async def delete_user(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        await admin_access.delete_user(broker, params[0])
    except NotFound:
        return replies.not_found()
    return replies.no_content()


async def bulk_delete_users(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    """POST /api/users/bulk-delete ``{"users": [...]}``: deletes them in order, and stops
    with 400 ``["no_such_user", name]`` at the first that does not exist, as RabbitMQ."""
    body = await read_body(request, ("users",))
    if isinstance(body, web.Response):
        return body
    users = body["users"]
    if not isinstance(users, list) or not all(isinstance(name, str) for name in users):
        return replies.bad_request("users must be a list of names")
    for name in users:
        try:
            await admin_access.delete_user(broker, name)
        except NotFound:
            return replies.bad_request(["no_such_user", name])
    return replies.no_content()


async def user_permissions(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        return listed(request, broker, admin_access.list_permissions(broker, user=params[0]))
    except NotFound:
        return replies.not_found()


# --- Vhosts ---


def vhost_json(request: web.Request, broker: Broker, name: str) -> dict[str, Any]:
    sampled = rates(request)
    return {
        **admin_access.vhost_json(broker, name),
        **sampled.with_details(("vhost-totals", name), totals_counts(broker, name)),
        "message_stats": sampled.with_details(
            ("vhost", name), admin_live.vhost_stats(broker, name).counts()
        ),
        **admin_neutral.TRAFFIC,
    }


async def list_vhosts(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    names = principal(request).visible_vhosts(broker)
    return listed(request, broker, [vhost_json(request, broker, name) for name in names])


async def get_vhost(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    if params[0] not in broker.vhosts:
        return replies.not_found()
    return single(request, vhost_json(request, broker, params[0]))


async def put_vhost(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    body = await read_body(request, ())
    if isinstance(body, web.Response):
        return body
    created = await admin_access.put_vhost(broker, params[0], body, principal(request).name)
    return replies.created() if created else replies.no_content()


async def delete_vhost(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        await admin_access.remove_vhost(broker, params[0])
    except NotFound:
        return replies.not_found()
    return replies.no_content()


async def vhost_permissions(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    try:
        found = admin_access.list_permissions(broker, vhost=params[0])
    except NotFound:
        return replies.not_found()
    return listed(request, broker, [_vhost_first(p) for p in found])


def _vhost_first(permission: dict[str, Any]) -> dict[str, Any]:
    """/api/vhosts/{vhost}/permissions lists ``vhost`` before ``user``, as RabbitMQ does."""
    return {"vhost": permission["vhost"], **permission}


# --- Permissions ---


async def list_permissions(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    return listed(request, broker, admin_access.list_permissions(broker))


async def get_permission(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        return single(request, admin_access.get_permission(broker, params[0], params[1]))
    except NotFound:
        return replies.not_found()


def _put_handler(
    required: tuple[str, ...],
    put: Callable[[Broker, str, str, dict[str, Any]], Awaitable[bool]],
) -> Callable[[web.Request, Broker, list[str]], Awaitable[web.Response]]:
    """PUT of a (topic) permission at ``…/{vhost}/{user}``: 201 created, 204 replaced."""

    async def handler(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        body = await read_body(request, required)
        if isinstance(body, web.Response):
            return body
        try:
            created = await put(broker, params[0], params[1], body)
        except admin_access.AccessError as refused:
            return replies.bad_request(refused.reason)
        return replies.created() if created else replies.no_content()

    return handler


put_permission = _put_handler(admin_access.PERMISSION_KEYS, admin_access.put_permission)
put_topic_permission = _put_handler(
    admin_access.TOPIC_PERMISSION_KEYS, admin_access.put_topic_permission
)


async def delete_permission(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    try:
        await admin_access.delete_permission(broker, params[0], params[1])
    except NotFound:
        return replies.not_found()
    return replies.no_content()


# --- Topic permissions and the cluster name ---


async def list_topic_permissions(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    """/api/topic-permissions, /api/vhosts/{vhost}/… and /api/users/{user}/…"""
    scope = {"vhost" if "vhosts" in request.path else "user": params[0]} if params else {}
    try:
        return listed(request, broker, admin_access.list_topic_permissions(broker, **scope))
    except NotFound:
        return replies.not_found()


async def get_topic_permissions(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    try:
        return replies.ok(admin_access.get_topic_permissions(broker, params[0], params[1]))
    except NotFound:
        return replies.not_found()


async def delete_topic_permissions(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    exchange = request.query.get("exchange")  # Warren: only this exchange's (warrenctl)
    try:
        await admin_access.delete_topic_permissions(broker, params[0], params[1], exchange)
    except NotFound:
        return replies.not_found()
    return replies.no_content()


async def cluster_name(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    return replies.ok({"name": broker.cluster_name})


async def put_cluster_name(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    body = await read_body(request, ("name",))
    if isinstance(body, web.Response):
        return body
    await admin_access.set_cluster_name(broker, str(body["name"]))
    return replies.no_content()


def routes() -> dict[str, dict[str, tuple[Any, Level, int | None]]]:
    return {
        "whoami": {"GET": (whoami, MANAGEMENT, None)},
        "users": {"GET": (list_users, ADMIN, None)},
        "users/without-permissions": {"GET": (users_without_permissions, ADMIN, None)},
        "users/bulk-delete": {"POST": (bulk_delete_users, ADMIN, None)},
        "users/{}": {
            "GET": (get_user, ADMIN, None),
            "PUT": (put_user, ADMIN, None),
            "DELETE": (delete_user, ADMIN, None),
        },
        "users/{}/permissions": {"GET": (user_permissions, ADMIN, None)},
        "vhosts": {"GET": (list_vhosts, MANAGEMENT, None)},
        "vhosts/{}": {
            "GET": (get_vhost, MANAGEMENT, 0),
            "PUT": (put_vhost, ADMIN, None),
            "DELETE": (delete_vhost, ADMIN, None),
        },
        "vhosts/{}/permissions": {"GET": (vhost_permissions, ADMIN, None)},
        "permissions": {"GET": (list_permissions, ADMIN, None)},
        "topic-permissions": {"GET": (list_topic_permissions, ADMIN, None)},
        "topic-permissions/{}/{}": {
            "GET": (get_topic_permissions, ADMIN, None),
            "PUT": (put_topic_permission, ADMIN, None),
            "DELETE": (delete_topic_permissions, ADMIN, None),
        },
        "vhosts/{}/topic-permissions": {"GET": (list_topic_permissions, ADMIN, None)},
        "users/{}/topic-permissions": {"GET": (list_topic_permissions, ADMIN, None)},
        "cluster-name": {
            "GET": (cluster_name, MANAGEMENT, None),
            "PUT": (put_cluster_name, ADMIN, None),
        },
        "permissions/{}/{}": {
            "GET": (get_permission, ADMIN, None),
            "PUT": (put_permission, ADMIN, None),
            "DELETE": (delete_permission, ADMIN, None),
        },
    }
