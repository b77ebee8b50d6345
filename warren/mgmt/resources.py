"""One handler per RabbitMQ management resource, over `warren.runtime.admin`.

Theory of operation:
1. `ROUTES` maps a path (its fixed segments, then how many variable segments follow) to
   the handlers of each method, so ``/api/policies/%2F/p`` is ``("policies",)`` with the
   parameters ``["/", "p"]``. A handler turns the admin call's result or failure into
   RabbitMQ's status code and body.
2. Status codes follow RabbitMQ's Cowboy resources: GET 200; PUT 201 when it created the
   object and 204 when it replaced one; DELETE 204, or 404 when there was nothing to
   delete; 400 for a refused body.
3. Bodies are read as RabbitMQ's rabbit_mgmt_util:with_decode/4 reads them: an empty body
   is an empty object, anything but a JSON object is ``not_json``, and missing required
   keys are listed as ``[{key_missing,pattern},…]``. Policy texts are HTML-escaped for
   /api/policies and not for /api/operator-policies, a quirk clients may match on.
4. /api/definitions: GET exports (200), POST imports (204; 400 ``failed_to_parse_json``
   for a body that is not JSON, 400 with the refusal for anything Warren will not declare).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from warren.mgmt import replies
from warren.runtime import admin
from warren.runtime.broker import Broker

Handler = Callable[[web.Request, Broker, list[str]], Awaitable[web.Response]]

POLICY_REQUIRED_KEYS = ("pattern", "definition")


async def get_overview(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    return replies.ok(admin.overview(broker))


async def get_alive(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    return replies.ok({"status": "ok"})


async def list_queues(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        return replies.ok(admin.list_queues(broker, params[0] if params else None))
    except admin.NotFound:
        return replies.not_found()


async def get_queue(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        return replies.ok(admin.get_queue(broker, params[0], params[1]))
    except admin.NotFound:
        return replies.not_found()


async def get_definitions(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    """GET /api/definitions[/{vhost}]: RabbitMQ answers a missing vhost with a 400."""
    try:
        return replies.ok(admin.export_definitions(broker, params[0] if params else None))
    except admin.NotFound:
        return replies.bad_request("vhost_not_found")


async def post_definitions(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    """POST /api/definitions[/{vhost}]: 204 once everything is declared, else 400."""
    vhost = params[0] if params else None
    if vhost is not None and vhost not in broker.vhosts:
        return replies.vhost_not_found()
    try:
        document = json.loads(await request.read())
    except ValueError:
        return replies.bad_request("failed_to_parse_json")
    try:
        admin.import_definitions(broker, document, vhost)
    except admin.NotFound:
        return replies.vhost_not_found()
    except admin.PolicyError as refused:
        return replies.bad_request(refused.text)
    except admin.DefinitionsError as refused:
        return replies.bad_request(str(refused))
    return replies.no_content()


def policy_handlers(*, operator: bool) -> tuple[Handler, Handler, Handler, Handler]:
    """List, get, put and delete for /api/policies or /api/operator-policies."""

    async def list_all(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        vhost = params[0] if params else None
        try:
            return replies.ok(admin.list_policies(broker, vhost, operator=operator))
        except admin.NotFound:
            return replies.not_found()

    async def get_one(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        try:
            return replies.ok(admin.get_policy(broker, *params, operator=operator))
        except admin.NotFound:
            return replies.not_found()

    async def put_one(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        if operator and request.content_type != "application/json":
            return replies.unsupported_media_type()
        if params[0] not in broker.vhosts:
            return replies.vhost_not_found()
        body = await read_body(request, POLICY_REQUIRED_KEYS)
        if isinstance(body, web.Response):
            return body
        return set_policy(broker, params, body, operator=operator)

    async def delete_one(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        try:
            admin.clear_policy(broker, *params, operator=operator)
        except admin.NotFound:
            return replies.not_found()
        return replies.no_content()

    return list_all, get_one, put_one, delete_one


def set_policy(
    broker: Broker, params: list[str], body: dict[str, Any], *, operator: bool
) -> web.Response:
    vhost, name = params
    try:
        created = admin.set_policy(
            broker,
            vhost,
            name,
            pattern=body["pattern"],
            definition=body["definition"],
            priority=body.get("priority", 0),
            apply_to=body.get("apply-to", "all"),
            operator=operator,
        )
    except admin.NotFound:
        return replies.vhost_not_found()
    except admin.PolicyError as refused:
        text = refused.text if operator else replies.escape_html_tags(refused.text)
        return replies.bad_request(text)
    return replies.created() if created else replies.no_content()


async def read_body(
    request: web.Request, required: tuple[str, ...]
) -> dict[str, Any] | web.Response:
    """The request's JSON object, or RabbitMQ's 400 for a body it cannot use."""
    raw = await request.read()
    body: object = {}
    if raw.strip():
        try:
            body = json.loads(raw)
        except ValueError:
            return replies.bad_request("not_json")
    if not isinstance(body, dict):
        return replies.bad_request("not_json")
    missing = [key for key in required if key not in body]
    if missing:
        return replies.bad_request(
            "[" + ",".join(f"{{key_missing,{key}}}" for key in missing) + "]"
        )
    return body


def _routes() -> dict[tuple[tuple[str, ...], int], Mapping[str, Handler]]:
    routes: dict[tuple[tuple[str, ...], int], Mapping[str, Handler]] = {
        (("overview",), 0): {"GET": get_overview},
        (("health", "checks", "alive"), 0): {"GET": get_alive},
        (("queues",), 0): {"GET": list_queues},
        (("queues",), 1): {"GET": list_queues},
        (("queues",), 2): {"GET": get_queue},
        (("definitions",), 0): {"GET": get_definitions, "POST": post_definitions},
        (("definitions",), 1): {"GET": get_definitions, "POST": post_definitions},
    }
    for prefix, operator in (("policies", False), ("operator-policies", True)):
        list_all, get_one, put_one, delete_one = policy_handlers(operator=operator)
        routes[(prefix,), 0] = {"GET": list_all}
        routes[(prefix,), 1] = {"GET": list_all}
        routes[(prefix,), 2] = {"GET": get_one, "PUT": put_one, "DELETE": delete_one}
    return routes


ROUTES = _routes()


def route(segments: list[str]) -> tuple[Mapping[str, Handler], list[str]] | None:
    """The handlers for a path below /api/ and its variable segments, if it is known."""
    for (prefix, count), handlers in ROUTES.items():
        size = len(prefix)
        if tuple(segments[:size]) == prefix and len(segments) == size + count:
            return handlers, segments[size:]
    return None
