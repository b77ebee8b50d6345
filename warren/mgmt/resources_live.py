"""HTTP resources for the node and what is live on it: overview, nodes, connections,
channels, consumers, health checks (over `warren.runtime.admin_live`).

Counts are read when the request comes (never stale); rates come from `warren.mgmt.rates`.
On worker 0 of a node of several, connections, channels and consumers, and the
overview's totals, are every worker's (`warren.mgmt.workers`).
Health checks answer 200 ``{"status": "ok", …}`` or 503 ``{"status": "failed", …}`` as
RabbitMQ's do.
"""

from __future__ import annotations

import contextlib
from typing import Any

from aiohttp import web

from warren.mgmt import replies
from warren.mgmt.authz import Level
from warren.mgmt.context import listed, principal, rates, single
from warren.mgmt.rates import HISTORY_AGE_S, connection_counts, totals_counts
from warren.mgmt.workers import (
    answered_elsewhere,
    found_elsewhere,
    listed_elsewhere,
    on_its_own,
    summed,
)
from warren.runtime import admin, admin_live, admin_neutral, config
from warren.runtime.admin import NotFound
from warren.runtime.broker import Broker
from warren.runtime.cluster.calls import NodeDetails
from warren.runtime.cluster.node import ClusterNode
from warren.runtime.cluster.peers import PeerUnavailable, RemoteError

NODE_DETAILS_WAIT_S = 2.0  # how long /api/nodes waits for another node's answer

MANAGEMENT = Level.MANAGEMENT
MONITOR = Level.MONITOR
# the seconds of samples kept, per RabbitMQ's retention policy: one minute for all three
SAMPLE_RETENTION = {policy: [HISTORY_AGE_S] for policy in ("global", "basic", "detailed")}


async def overview(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    """The node's overview; a user below monitoring sees only its vhosts' totals and not the
    listeners, as in RabbitMQ."""
    sampled = rates(request)
    caller = principal(request)
    body = admin.overview(broker)
    body["rates_mode"] = "basic"
    body["sample_retention_policies"] = SAMPLE_RETENTION
    body["disable_stats"] = False
    body["enable_queue_totals"] = False
    totals = body["object_totals"]
    if caller.sees_all:
        body["message_stats"] = sampled.with_details(
            ("node",), admin_live.node_stats(broker).counts()
        )
        body["queue_totals"] = sampled.with_details(("totals",), totals_counts(broker))
        totals["channels"] = sum(1 for _ in admin_live.channels(broker))
        totals["connections"] = len(admin_live.connections(broker))
    else:
        vhosts = caller.visible_vhosts(broker)
        body["message_stats"] = sampled.summed(
            [("vhost", v) for v in vhosts],
            [admin_live.vhost_stats(broker, v).counts() for v in vhosts],
        )
        body["queue_totals"] = sampled.summed(
            [("vhost-totals", v) for v in vhosts],
            [totals_counts(broker, v) for v in vhosts],
        )
        own = [c for c in admin_live.connections(broker) if c.user == caller.name]
        totals["connections"] = len(own)
        totals["channels"] = sum(len(c.channels) for c in own)
        totals["exchanges"] = sum(len(broker.vhosts[v].exchanges) for v in vhosts)
        totals["queues"] = sum(len(broker.vhosts[v].queues) for v in vhosts)
        del totals["consumers"]
        for key in ("listeners", "node"):
            body.pop(key, None)
    for other in (await answered_elsewhere(request)).values():  # the other workers'
        for key in ("connections", "channels", "consumers"):
            if key in totals:
                totals[key] += other["object_totals"][key]
        for key in ("message_stats", "queue_totals"):
            body[key] = summed(body[key], other[key])
    body["statistics_db_event_queue"] = 0
    admin_neutral.fill(body["message_stats"], admin_neutral.OVERVIEW_MESSAGE_STATS)
    admin_neutral.fill(body, admin_neutral.OVERVIEW)
    if caller.sees_all:
        context = admin_live.management_context(broker)
        body["contexts"] = [{"ssl_opts": [], "node": broker.node_name, **context}]
    return single(request, body)


async def extensions(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    return replies.ok([])


async def list_nodes(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    """Every node of the cluster, as RabbitMQ lists them: a node that cannot be reached
    is named with ``"running": false`` only. A node of several workers is one node."""
    cluster = broker.cluster
    if not isinstance(cluster, ClusterNode) or on_its_own(broker):
        return listed(request, broker, [admin_live.node_json(broker)])
    names = cluster.node_names()
    return listed(request, broker, [await _node(broker, name) for name in names])


async def environment(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    """Warren's own: the node's settings for `warrenctl environment` (secrets hidden)."""
    settings = config.environment(broker.config)
    return replies.ok({"node": broker.node_name, "settings": settings})


async def get_node(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    cluster = broker.cluster
    if params[0] == broker.node_name:
        return single(request, admin_live.node_json(broker))
    if (
        not isinstance(cluster, ClusterNode)
        or on_its_own(broker)
        or params[0] not in cluster.node_names()
    ):
        return replies.not_found()
    return single(request, await _node(broker, params[0]))


async def _node(broker: Broker, name: str) -> Any:
    """One node's details: this node's own, another's asked over the peer link."""
    cluster = broker.cluster
    if name == broker.config.node_name or not isinstance(cluster, ClusterNode):
        return admin_live.node_json(broker)
    details = None
    if name not in cluster.unreachable():
        with contextlib.suppress(PeerUnavailable, RemoteError, TimeoutError):
            details = await cluster.ask(name, NodeDetails(), NODE_DETAILS_WAIT_S)
    return details or {"name": name, "type": "disc", "running": False}


# --- Connections ---


async def _elsewhere(request: web.Request) -> web.Response:
    """Another worker's answer for an object this one does not have, else 404."""
    return await found_elsewhere(request) or replies.not_found()


def connection_json(request: web.Request, broker: Broker, connection: Any) -> Any:
    body = admin_live.connection_json(broker, connection)
    body.update(
        rates(request).with_details(("connection", id(connection)), connection_counts(connection))
    )
    return body


def _connections(request: web.Request, broker: Broker, vhost: str | None) -> list[Any]:
    caller = principal(request)
    return [
        c
        for c in admin_live.connections(broker)
        if caller.sees_user(c.user) and (vhost is None or c.vhost.name == vhost)
    ]


async def list_connections(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    vhost = params[0] if params else None
    if vhost is not None and vhost not in broker.vhosts:
        return replies.not_found()
    items = [connection_json(request, broker, c) for c in _connections(request, broker, vhost)]
    return listed(request, broker, items + await listed_elsewhere(request))


def _own_connection(request: web.Request, broker: Broker, name: str) -> Any:
    connection = admin_live.find_connection(broker, name)
    if not principal(request).sees_user(connection.user):
        raise NotFound()
    return connection


async def get_connection(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        connection = _own_connection(request, broker, params[0])
    except NotFound:
        return await _elsewhere(request)
    return single(request, connection_json(request, broker, connection))


async def delete_connection(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    try:
        _own_connection(request, broker, params[0])
        admin_live.close_connection(broker, params[0], request.headers.get("X-Reason"))
    except NotFound:
        return await _elsewhere(request)
    return replies.no_content()


# --- Channels ---


def channel_json(request: web.Request, broker: Broker, channel: Any, **kw: bool) -> Any:
    body = admin_live.channel_json(broker, channel, **kw)
    body["message_stats"] = rates(request).with_details(
        ("channel", id(channel)), body["message_stats"]
    )
    return body


async def list_channels(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    vhost = params[0] if params else None
    if vhost is not None and vhost not in broker.vhosts:
        return replies.not_found()
    caller = principal(request)
    items = [
        channel_json(request, broker, ch)
        for ch in admin_live.channels(broker)
        if caller.sees_user(ch.connection.user) and (vhost is None or ch.vhost.name == vhost)
    ]
    return listed(request, broker, items + await listed_elsewhere(request))


async def connection_channels(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    try:
        connection = _own_connection(request, broker, params[0])
    except NotFound:
        return await _elsewhere(request)
    items = [
        channel_json(request, broker, connection.channels[n]) for n in sorted(connection.channels)
    ]
    return listed(request, broker, items)


async def get_channel(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        channel = admin_live.find_channel(broker, params[0])
    except NotFound:
        return await _elsewhere(request)
    if not principal(request).sees_user(channel.connection.user):
        return replies.not_found()
    return single(request, channel_json(request, broker, channel, details=True))


async def list_consumers(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    caller = principal(request)
    if params:
        if params[0] not in broker.vhosts:
            return replies.not_found()
        vhosts = [params[0]]
    else:
        vhosts = caller.visible_vhosts(broker)
    items = [c for vhost in vhosts for c in admin_live.consumers(broker, vhost)]
    return listed(request, broker, items + await listed_elsewhere(request))


# --- Health checks ---


def _failed(reason: str, **extra: Any) -> web.Response:
    body = replies.json_body({"status": "failed", "reason": reason, **extra})
    return web.Response(status=503, text=body, content_type="application/json")


async def check_ok(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    return replies.ok({"status": "ok"})


async def check_alarms(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    """503 while a resource alarm (memory, disk) is in force, in RabbitMQ's shape."""
    alarms = broker.alarms
    if not alarms:
        return replies.ok({"status": "ok"})
    node = broker.node_name
    return _failed(
        "There are alarms in effect in the cluster",
        alarms=[{"node": node, "resource": resource} for resource in sorted(alarms)],
    )


async def node_health(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    """/api/healthchecks/node[/{node}] (RabbitMQ 3.10's older check): 200 with
    ``"status": "failed"`` and RabbitMQ's reason while an alarm is in force. Another node
    of the cluster is checked for being reachable only (its alarms are its own)."""
    node = broker.node_name
    cluster = broker.cluster
    if params and params[0] != node:
        if cluster is None or params[0] not in cluster.nodes:
            return replies.not_found()
        if params[0] in cluster.unreachable():
            reason = f"health check of node {params[0]} fails: nodedown"
            return replies.ok({"status": "failed", "reason": reason})
        return replies.ok({"status": "ok"})
    if not broker.alarms:
        return replies.ok({"status": "ok"})
    alarms = ",".join(f"{{{{resource_limit,{a},'{node}'}},[]}}" for a in sorted(broker.alarms))
    reason = f"resource alarm(s) in effect:[{alarms}]"
    return replies.ok({"status": "failed", "reason": replies.escape_html_tags(reason)})


async def check_single_node(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    return replies.ok({"status": "ok", "reason": "single node cluster"})


def _ports(broker: Broker) -> list[int]:
    return sorted({broker.config.port, broker.config.management_port})


async def check_port(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    try:
        port = int(params[0])
    except ValueError:
        return replies.bad_request(f"Invalid port: {params[0]}")
    if port in _ports(broker):
        return replies.ok({"status": "ok", "port": port})
    return _failed("No active listener", missing=port, ports=_ports(broker))


async def check_protocol(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    protocols = ["http", "amqp"]
    if params[0] in protocols or params[0] == "amqp091":
        return replies.ok({"status": "ok", "protocol": params[0]})
    return _failed("No active listener", missing=params[0], protocols=protocols)


async def check_certificates(
    request: web.Request, broker: Broker, params: list[str]
) -> web.Response:
    return replies.ok({"status": "ok"})  # Warren has no TLS listener: nothing expires


async def aliveness(request: web.Request, broker: Broker, params: list[str]) -> web.Response:
    if params[0] not in broker.vhosts:
        return replies.not_found()
    return replies.ok({"status": "ok"})


def routes() -> dict[str, dict[str, tuple[Any, Level, int | None]]]:
    checks = "health/checks/"
    return {
        "overview": {"GET": (overview, MANAGEMENT, None)},
        "extensions": {"GET": (extensions, MANAGEMENT, None)},
        "nodes": {"GET": (list_nodes, MONITOR, None)},
        "nodes/{}": {"GET": (get_node, MONITOR, None)},
        "warren/environment": {"GET": (environment, Level.ADMINISTRATOR, None)},
        "connections": {"GET": (list_connections, MANAGEMENT, None)},
        "connections/{}": {
            "GET": (get_connection, MANAGEMENT, None),
            "DELETE": (delete_connection, MANAGEMENT, None),
        },
        "connections/{}/channels": {"GET": (connection_channels, MANAGEMENT, None)},
        "vhosts/{}/connections": {"GET": (list_connections, MANAGEMENT, 0)},
        "vhosts/{}/channels": {"GET": (list_channels, MANAGEMENT, 0)},
        "channels": {"GET": (list_channels, MANAGEMENT, None)},
        "channels/{}": {"GET": (get_channel, MANAGEMENT, None)},
        "consumers": {"GET": (list_consumers, MANAGEMENT, None)},
        "consumers/{}": {"GET": (list_consumers, MANAGEMENT, 0)},
        checks + "alive": {"GET": (check_ok, MANAGEMENT, None)},
        checks + "virtual-hosts": {"GET": (check_ok, MANAGEMENT, None)},
        checks + "local-alarms": {"GET": (check_alarms, MANAGEMENT, None)},
        checks + "alarms": {"GET": (check_alarms, MANAGEMENT, None)},
        checks + "node-is-quorum-critical": {"GET": (check_single_node, MANAGEMENT, None)},
        checks + "node-is-mirror-sync-critical": {"GET": (check_single_node, MANAGEMENT, None)},
        checks + "port-listener/{}": {"GET": (check_port, MANAGEMENT, None)},
        checks + "protocol-listener/{}": {"GET": (check_protocol, MANAGEMENT, None)},
        checks + "certificate-expiration/{}/{}": {"GET": (check_certificates, MANAGEMENT, None)},
        "aliveness-test/{}": {"GET": (aliveness, MANAGEMENT, 0)},
        "healthchecks/node": {"GET": (node_health, MANAGEMENT, None)},
        "healthchecks/node/{}": {"GET": (node_health, MANAGEMENT, None)},
    }
