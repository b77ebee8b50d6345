"""The route table of the management API, and the policy and definitions resources.

The other resources live beside it: `resources_access` (users, vhosts, permissions),
`resources_objects` (exchanges, queues, bindings), `resources_live` (overview, nodes,
connections, channels, consumers, health checks).

Theory of operation:
1. `ROUTES` maps a path pattern (``policies/{}/{}``: ``{}`` is one variable segment) to
   an `Endpoint` per method: its handler, the `authz.Level` it needs, and which variable
   segment (if any) names a vhost the caller must have a permission on. So
   ``/api/policies/%2F/p`` is ``policies/{}/{}`` with the parameters ``["/", "p"]``. A
   handler turns the admin call's result or failure into RabbitMQ's status and body.
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
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from warren.mgmt import replies
from warren.mgmt.authz import Level
from warren.mgmt.context import Handler, listed
from warren.runtime import admin
from warren.runtime.broker import Broker

POLICY_REQUIRED_KEYS = ("pattern", "definition")


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
        await admin.import_definitions(broker, document, vhost)
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
            found = admin.list_policies(broker, vhost, operator=operator)
        except admin.NotFound:
            return replies.not_found()
        return listed(request, broker, found)

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
        return await set_policy(broker, params, body, operator=operator)

    async def delete_one(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        try:
            await admin.clear_policy(broker, *params, operator=operator)
        except admin.NotFound:
            return replies.not_found()
        return replies.no_content()

    return list_all, get_one, put_one, delete_one


async def set_policy(
    broker: Broker, params: list[str], body: dict[str, Any], *, operator: bool
) -> web.Response:
    vhost, name = params
    try:
        created = await admin.set_policy(
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


@dataclass(frozen=True, slots=True)
class Endpoint:
    handler: Handler
    level: Level = Level.MANAGEMENT
    vhost_param: int | None = None  # the variable segment naming a vhost to check


Routes = dict[str, dict[str, Endpoint]]


def _policy_routes() -> Routes:
    routes: Routes = {}
    for prefix, operator in (("policies", False), ("operator-policies", True)):
        level = Level.ADMINISTRATOR if operator else Level.POLICYMAKER
        list_all, get_one, put_one, delete_one = policy_handlers(operator=operator)
        routes[prefix] = {"GET": Endpoint(list_all, level)}
        routes[prefix + "/{}"] = {"GET": Endpoint(list_all, level, 0)}
        routes[prefix + "/{}/{}"] = {
            "GET": Endpoint(get_one, level, 0),
            "PUT": Endpoint(put_one, level, 0),
            "DELETE": Endpoint(delete_one, level, 0),
        }
    admin_only = Level.ADMINISTRATOR
    routes["definitions"] = {
        "GET": Endpoint(get_definitions, admin_only),
        "POST": Endpoint(post_definitions, admin_only),
    }
    routes["definitions/{}"] = {
        "GET": Endpoint(get_definitions, admin_only, 0),
        "POST": Endpoint(post_definitions, admin_only, 0),
    }
    return routes


def _all_routes() -> Routes:
    from warren.mgmt import (
        resources_access,
        resources_cluster,
        resources_live,
        resources_objects,
    )

    routes = _policy_routes()
    for module in (resources_access, resources_cluster, resources_live, resources_objects):
        for pattern, endpoints in module.routes().items():
            assert pattern not in routes, pattern
            routes[pattern] = {
                method: Endpoint(handler, level, vhost_param)
                for method, (handler, level, vhost_param) in endpoints.items()
            }
    return routes


_TABLE: list[tuple[list[str | None], dict[str, Endpoint]]] | None = None


def _table() -> list[tuple[list[str | None], dict[str, Endpoint]]]:
    """Patterns as segment lists (None: variable), literal ones first at each position."""
    global _TABLE
    if _TABLE is None:
        table = [
            ([None if part == "{}" else part for part in pattern.split("/")], endpoints)
            for pattern, endpoints in _all_routes().items()
        ]
        table.sort(key=lambda entry: [part is None for part in entry[0]])
        _TABLE = table
    return _TABLE


def route(segments: list[str]) -> tuple[dict[str, Endpoint], list[str]] | None:
    """The endpoints for a path below /api/ and its variable segments, if it is known."""
    for pattern, endpoints in _table():
        if len(pattern) != len(segments):
            continue
        params: list[str] = []
        for part, segment in zip(pattern, segments, strict=True):
            if part is None:
                params.append(segment)
            elif part != segment:
                break
        else:
            return endpoints, params
    return None
