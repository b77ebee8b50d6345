"""HTTP resources for exchanges, queues and bindings (declare, delete, publish, get, purge),
over `warren.runtime.admin_objects`.

Status codes as RabbitMQ's: PUT 201 created / 204 already there, DELETE 204 or 404, a
model refusal 400 with its text (ACCESS_REFUSED: 401 ``Access refused.``), a binding
POST 201 with a relative ``Location`` (the properties key, percent-encoded again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from aiohttp import web

from warren.errors import ReplyCode
from warren.mgmt import replies
from warren.mgmt.authz import Level
from warren.mgmt.context import listed, principal, rates, single
from warren.mgmt.rates import queue_counts, queue_message_stats
from warren.mgmt.resources import read_body
from warren.mgmt.workers import answered_elsewhere, as_one_node, summed, with_stats_elsewhere
from warren.model import DestinationKind, VHost
from warren.queue import Counters
from warren.runtime import admin, admin_live, admin_neutral, admin_objects
from warren.runtime.admin import Json, NotFound
from warren.runtime.broker import Broker
from warren.runtime.cluster.quorum import QuorumHost
from warren.runtime.cluster.remote import RemoteHost

MANAGEMENT = Level.MANAGEMENT
GET_KEYS = ("ackmode", "count", "encoding")
KINDS = {"q": DestinationKind.QUEUE, "e": DestinationKind.EXCHANGE}


def refused(error: admin_objects.ObjectError) -> web.Response:
    if error.code == ReplyCode.ACCESS_REFUSED:
        return replies.error(401, "not_authorised", "Access refused.")
    if error.code == ReplyCode.NOT_FOUND:
        return replies.error(404, "not_found", error.detail)
    return replies.bad_request(error.detail)


def visible(request: web.Request, broker: Broker, params: list[str]) -> list[VHost] | None:
    """The vhosts a list covers: the one named (None if it does not exist), or all the
    caller may see."""
    if params:
        vhost = broker.vhosts.get(params[0])
        return None if vhost is None else [vhost]
    return [broker.vhosts[name] for name in principal(request).visible_vhosts(broker)]


# --- Exchanges ---


async def list_exchanges(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    vhosts = visible(request, broker, params)
    if vhosts is None:
        return replies.not_found()
    items = [_with_rates(request, item) for item in admin_objects.list_exchanges(broker, vhosts)]
    return listed(request, broker, await with_stats_elsewhere(request, items))


async def get_exchange(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        found = admin_objects.get_exchange(broker, params[0], _exchange_name(params[1]))
    except NotFound:
        return replies.not_found()
    (found,) = await with_stats_elsewhere(request, [_with_rates(request, found)])
    return single(request, found)


def _with_rates(request: web.Request, exchange: Json) -> Json:
    counts = exchange.get("message_stats")
    if counts is not None:
        key = ("exchange", exchange["vhost"], exchange["name"])
        exchange["message_stats"] = rates(request).with_details(key, counts)
    return exchange


async def put_exchange(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    return await _declare(request, broker, params, admin_objects.declare_exchange)


async def _declare(
    request: web.Request,
    broker: Broker,
    params: list[str],
    declare: Callable[[Broker, str, str, Json], Awaitable[bool]],
) -> web.Response:
    """PUT of an exchange or a queue: 201 when created, 204 when it was there."""
    if params[0] not in broker.vhosts:
        return replies.vhost_not_found()
    body = await read_body(request, ())
    if isinstance(body, web.Response):
        return body
    try:
        created = await declare(broker, params[0], params[1], body)
    except admin_objects.ObjectError as error:
        return refused(error)
    except admin.DefinitionsError as error:
        return replies.bad_request(str(error))
    return replies.created() if created else replies.no_content()


async def delete_exchange(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    if_unused = request.query.get("if-unused") == "true"
    try:
        await admin_objects.delete_exchange(broker, params[0], params[1], if_unused=if_unused)
    except NotFound:
        return replies.not_found()
    except admin_objects.ObjectError as error:
        return refused(error)
    return replies.no_content()


async def publish(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    body = await read_body(request, ("properties", "routing_key", "payload", "payload_encoding"))
    if isinstance(body, web.Response):
        return body
    exchange = "" if params[1] == "amq.default" else params[1]
    try:
        routed = admin_objects.publish(broker, params[0], exchange, body)
    except NotFound:
        return replies.not_found()
    except admin_objects.ObjectError as error:
        return replies.bad_request(error.detail)
    return replies.ok({"routed": routed})


def _exchange_name(name: str) -> str:
    return "" if name == "amq.default" else name


async def source_bindings(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    source = _exchange_name(params[1])
    try:
        found = admin_objects.bindings_between(broker, params[0], source, None, None)
    except NotFound:
        return replies.not_found()
    return listed(request, broker, found)


async def destination_bindings(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    vhost = broker.vhosts.get(params[0])
    if vhost is None or params[1] not in vhost.exchanges:
        return replies.not_found()
    found = admin_objects.bindings_between(
        broker, params[0], None, DestinationKind.EXCHANGE, params[1]
    )
    return listed(request, broker, found)


# --- Queues ---


HOME_TIMEOUT_S = 2.0
HomeCounters = dict[tuple[str, str], Counters]


async def home_counters(broker: Broker, queues: list[tuple[str, str]]) -> HomeCounters:
    """The counts of those `queues` that other nodes hold, asked of them at once: classic
    queues of other homes, and quorum queues this node holds no replica of (their
    leader's); one that does not answer in time leaves its queue's counts at 0."""
    remote: list[RemoteHost | QuorumHost] = []
    for key in queues:
        host: object = broker.queues.get(key)
        if isinstance(host, RemoteHost) or (isinstance(host, QuorumHost) and host.group is None):
            remote.append(host)
    if not remote:
        return {}
    asked = (
        host.counters() if isinstance(host, RemoteHost) else host.leader_counters()
        for host in remote
    )
    answers = await asyncio.gather(
        *(asyncio.wait_for(counters, HOME_TIMEOUT_S) for counters in asked),
        return_exceptions=True,
    )
    return {
        (host.record.vhost, host.name): answer
        for host, answer in zip(remote, answers, strict=True)
        if isinstance(answer, Counters)
    }


def queue_json(
    request: web.Request,
    broker: Broker,
    vhost: VHost,
    name: str,
    *,
    details: bool = False,
    homes: HomeCounters | None = None,
) -> dict[str, Any]:
    record = vhost.queues[name]
    info = admin.queue_info(broker, vhost, record)
    counts = queue_counts(broker, vhost.name, name)
    key: tuple[str, ...] = ("queue", vhost.name, name)
    home = (homes or {}).get((vhost.name, name))
    if home is not None:  # the home's counts; the rates are the home's to show
        info.update(admin.counters_json(home))
        counts = {"messages": home.ready + home.unacked, "messages_ready": home.ready}
        counts["messages_unacknowledged"] = home.unacked
        key = ("home-queue", vhost.name, name)
    sampled = rates(request)
    info.update(sampled.with_details(key, counts))
    host = broker.queue(vhost.name, name)
    shown = queue_message_stats(host.stats) if host is not None else {}
    if shown:
        info["message_stats"] = sampled.with_details(("queue-stats", vhost.name, name), shown)
    # Warren does not time its deliveries: a queue with consumers shows full capacity
    capacity = 1.0 if info["consumers"] else 0
    info["consumer_capacity"] = info["consumer_utilisation"] = capacity
    if info["type"] == "quorum":
        _quorum_columns(broker, info)
    else:
        _classic_columns(broker, host, info)
    if details:
        info["consumer_details"] = admin_live.queue_consumers(broker, vhost.name, name)
        info["incoming"] = []
        info["deliveries"] = []
    return info


def _classic_columns(broker: Broker, host: Any, info: dict[str, Any]) -> None:
    info["exclusive_consumer_tag"] = None
    info["head_message_timestamp"] = None
    info["single_active_consumer_tag"] = None
    info["recoverable_slaves"] = None
    if host is not None and host.machine.exclusive_consumer is not None:
        for consumer in admin_live.queue_consumers(broker, info["vhost"], info["name"]):
            if consumer["exclusive"]:
                info["exclusive_consumer_tag"] = consumer["consumer_tag"]
    info.update(admin_neutral.ram_counts(info))
    admin_neutral.fill(info, admin_neutral.CLASSIC_QUEUE)


def _quorum_columns(broker: Broker, info: dict[str, Any]) -> None:
    """RabbitMQ's quorum queue keys: its Raft members (on a single node, the node), which
    consumer is the single active one, and no classic-only keys."""
    node = broker.config.node_name
    info.setdefault("leader", node)
    info.setdefault("members", [node])
    info.setdefault("online", info["members"])
    info["open_files"] = dict.fromkeys(info["online"], 0)
    info["single_active_consumer_ctag"] = None
    ram = admin_neutral.ram_counts(info)
    info["messages_ram"] = ram["messages_ram"]
    info["message_bytes_ram"] = ram["message_bytes_ram"]
    admin_neutral.fill(info, admin_neutral.QUEUE)


async def list_queues(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    vhosts = visible(request, broker, params)
    if vhosts is None:
        return replies.not_found()
    names = [(v, name) for v in vhosts for name in sorted(v.queues)]
    homes = await home_counters(broker, [(v.name, name) for v, name in names])
    # a queue deleted while its home answered (it expired, say) is no longer listed
    items = [
        queue_json(request, broker, v, name, homes=homes) for v, name in names if name in v.queues
    ]
    items = await with_stats_elsewhere(request, items)
    as_one_node(request, broker, items)
    return listed(request, broker, items)


async def get_queue(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    vhost = broker.vhosts.get(params[0])
    if vhost is None or params[1] not in vhost.queues:
        return replies.not_found()
    homes = await home_counters(broker, [(vhost.name, params[1])])
    if params[1] not in vhost.queues:  # deleted while its home answered
        return replies.not_found()
    body = queue_json(request, broker, vhost, params[1], details=True, homes=homes)
    others = await answered_elsewhere(request)  # the node's other workers' (workers.py, 3)
    stats = body.get("message_stats", {})
    for other in others.values():
        stats = summed(stats, other.get("message_stats", {}))
    holders = body.get("members") or [body.get("node", broker.config.node_name)]
    if broker.config.node_name not in holders:
        body = next((others[h] for h in holders if h in others), body)
    if stats:
        body["message_stats"] = stats
    as_one_node(request, broker, [body])
    return single(request, body)


async def put_queue(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    return await _declare(request, broker, params, admin_objects.declare_queue)


async def delete_queue(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    query = request.query
    try:
        await admin_objects.delete_queue(
            broker,
            params[0],
            params[1],
            if_unused=query.get("if-unused") == "true",
            if_empty=query.get("if-empty") == "true",
        )
    except NotFound:
        return replies.not_found()
    except admin_objects.ObjectError as error:
        return refused(error)
    return replies.no_content()


async def purge_queue(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        admin_objects.purge_queue(broker, params[0], params[1])
    except NotFound:
        return replies.not_found()
    return replies.no_content()


async def get_messages(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    body = await read_body(request, GET_KEYS)
    if isinstance(body, web.Response):
        return body
    try:
        return replies.ok(admin_objects.get_messages(broker, params[0], params[1], body))
    except NotFound:
        return replies.not_found()
    except admin_objects.ObjectError as error:
        return replies.bad_request(error.detail)
    except (TypeError, ValueError) as error:
        return replies.bad_request(str(error))


async def queue_bindings(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        found = admin_objects.bindings_between(
            broker, params[0], None, DestinationKind.QUEUE, params[1]
        )
    except NotFound:
        return replies.not_found()
    return listed(request, broker, found)


# --- Bindings ---


async def list_bindings(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    vhosts = visible(request, broker, params)
    if vhosts is None:
        return replies.not_found()
    return listed(request, broker, admin_objects.list_bindings(vhosts))


def binding_handlers(kind: DestinationKind) -> dict[str, Any]:
    async def between(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        vhost, source, destination = params
        try:
            found = admin_objects.bindings_between(
                broker, vhost, _exchange_name(source), kind, destination
            )
        except NotFound:
            return replies.not_found()
        return listed(request, broker, found)

    async def create(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        vhost, source, destination = params
        if vhost not in broker.vhosts:
            return replies.vhost_not_found()
        body = await read_body(request, ())
        if isinstance(body, web.Response):
            return body
        try:
            key = await admin_objects.add_binding(broker, vhost, source, kind, destination, body)
        except admin_objects.ObjectError as error:
            return refused(error)
        except admin.DefinitionsError as error:
            return replies.bad_request(str(error))
        location = quote(destination, safe="") + "/" + quote(key, safe="~")
        return web.Response(status=201, headers={"Location": location})

    async def get_one(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        vhost, source, destination, key = params
        try:
            binding = admin_objects.find_binding(broker, vhost, source, kind, destination, key)
        except NotFound:
            return replies.not_found()
        return single(request, admin_objects.binding_json(broker.vhosts[vhost], binding))

    async def delete_one(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
        vhost, source, destination, key = params
        try:
            await admin_objects.delete_binding(broker, vhost, source, kind, destination, key)
        except NotFound:
            return replies.not_found()
        except admin_objects.ObjectError as error:
            return refused(error)
        return replies.no_content()

    return {"list": between, "create": create, "get": get_one, "delete": delete_one}


def routes() -> dict[str, dict[str, tuple[Any, Level, int | None]]]:
    table: dict[str, dict[str, tuple[Any, Level, int | None]]] = {
        "exchanges": {"GET": (list_exchanges, MANAGEMENT, None)},
        "exchanges/{}": {"GET": (list_exchanges, MANAGEMENT, 0)},
        "exchanges/{}/{}": {
            "GET": (get_exchange, MANAGEMENT, 0),
            "PUT": (put_exchange, MANAGEMENT, 0),
            "DELETE": (delete_exchange, MANAGEMENT, 0),
        },
        "exchanges/{}/{}/publish": {"POST": (publish, MANAGEMENT, 0)},
        "exchanges/{}/{}/bindings/source": {"GET": (source_bindings, MANAGEMENT, 0)},
        "exchanges/{}/{}/bindings/destination": {"GET": (destination_bindings, MANAGEMENT, 0)},
        "queues": {"GET": (list_queues, MANAGEMENT, None)},
        "queues/{}": {"GET": (list_queues, MANAGEMENT, 0)},
        "queues/{}/{}": {
            "GET": (get_queue, MANAGEMENT, 0),
            "PUT": (put_queue, MANAGEMENT, 0),
            "DELETE": (delete_queue, MANAGEMENT, 0),
        },
        "queues/{}/{}/contents": {"DELETE": (purge_queue, MANAGEMENT, 0)},
        "queues/{}/{}/get": {"POST": (get_messages, MANAGEMENT, 0)},
        "queues/{}/{}/bindings": {"GET": (queue_bindings, MANAGEMENT, 0)},
        "bindings": {"GET": (list_bindings, MANAGEMENT, None)},
        "bindings/{}": {"GET": (list_bindings, MANAGEMENT, 0)},
    }
    for letter, kind in KINDS.items():
        handlers = binding_handlers(kind)
        table["bindings/{}/e/{}/" + letter + "/{}"] = {
            "GET": (handlers["list"], MANAGEMENT, 0),
            "POST": (handlers["create"], MANAGEMENT, 0),
        }
        table["bindings/{}/e/{}/" + letter + "/{}/{}"] = {
            "GET": (handlers["get"], MANAGEMENT, 0),
            "DELETE": (handlers["delete"], MANAGEMENT, 0),
        }
    return table
