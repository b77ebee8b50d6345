"""Worker 0's management API answers for the whole node (issue 19): what lives in one
worker (its connections, channels and consumers) is asked of every other worker.

Theory of operation:
1. Every worker of a node runs the management app; worker 0 serves it on the node's
   management ports, each other worker on a Unix socket in its data directory
   (`warren.runtime.workers.layout.management_address`), where worker 0 asks it.
2. A list (``GET /api/connections``, ``/api/channels``, ``/api/consumers`` and their
   per-vhost forms) is worker 0's items and every other worker's answer to the same
   request without the listing parameters (``sort``, ``page``, ``columns``, ``name`` …),
   which apply once, to the whole list. Each worker adds its own rates.
3. One object by name (a connection, its channels, a channel; closing a connection) is
   worker 0's when it has it, else the answer of the first other worker that does not
   answer 404. A queue another worker holds (a classic queue's home, a quorum queue's
   replica) shows that worker's counts, rates and samples, with every worker's message
   stats added up.
4. Node-wide totals (the overview's message stats, queue totals and counts of
   connections, channels and consumers, an exchange's or a queue's message stats: each
   worker's of its own) are the workers' answers added up (`summed`): counts, rates,
   averages and samples alike, as each is a sum over the node's objects.
5. The node is one node to the outside: a queue's ``node``, ``leader``, ``members`` and
   ``online`` name it, not the worker that holds the queue (`as_one_node`), in worker 0's
   answers only: the other workers' name their own, which is how worker 0 finds the one
   that holds a queue. In a cluster of such nodes, each worker is named as its node
   (`warren.runtime.cluster.node`, module doc 6).
6. A request goes on with the caller's ``Authorization``: each worker checks the caller
   itself (users and permissions are the node's). A worker that does not answer within
   `ASK_TIMEOUT_S` (it is restarting) is left out, as RabbitMQ leaves out a node that is
   down. A request that came over a worker's socket is never asked further.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from yarl import URL

from warren.runtime.cluster.node import ClusterNode

if TYPE_CHECKING:
    from warren.runtime.broker import Broker

# the other workers' (node name, socket), on worker 0 only
WORKERS_KEY = web.AppKey("workers", tuple)
ASK_TIMEOUT_S = 5.0
LISTING_PARAMETERS = frozenset(
    ("name", "use_regex", "sort", "sort_reverse", "columns", "page", "page_size")
)


async def _ask(
    request: web.Request, address: str, query: Mapping[str, str]
) -> tuple[int, str, bytes] | None:
    """The worker's (status, content type, body) for this request; None if it is down."""
    url = URL("http://worker" + request.rel_url.raw_path, encoded=True).with_query(query)
    headers = {"Authorization": request.headers.get("Authorization", "")}
    if "X-Reason" in request.headers:
        headers["X-Reason"] = request.headers["X-Reason"]
    timeout = aiohttp.ClientTimeout(total=ASK_TIMEOUT_S)
    connector = aiohttp.UnixConnector(path=address)
    try:
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.request(request.method, url, headers=headers) as response,
        ):
            return response.status, response.content_type, await response.read()
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


def _others(request: web.Request) -> Sequence[str]:
    return [address for _, address in request.app.get(WORKERS_KEY, ())]


def _response(answer: tuple[int, str, bytes]) -> web.Response:
    status, content_type, body = answer
    return web.Response(status=status, body=body or None, content_type=content_type)


async def _bodies_elsewhere(request: web.Request) -> dict[str, bytes]:
    """The other workers' answers to this request without its listing parameters (module
    doc, 2), by worker name: those that answered 200."""
    query = {k: v for k, v in request.query.items() if k not in LISTING_PARAMETERS}
    workers = request.app.get(WORKERS_KEY, ())
    answers = await asyncio.gather(*(_ask(request, address, query) for _, address in workers))
    return {
        name: answer[2]
        for (name, _), answer in zip(workers, answers, strict=True)
        if answer is not None and answer[0] == 200
    }


async def answered_elsewhere(request: web.Request) -> dict[str, Any]:
    """The other workers' JSON answers to this request, by worker name (`_bodies_elsewhere`)."""
    return {name: json.loads(body) for name, body in (await _bodies_elsewhere(request)).items()}


async def texts_elsewhere(request: web.Request) -> list[str]:
    """The other workers' text answers to this request (Prometheus metrics)."""
    return [body.decode() for body in (await _bodies_elsewhere(request)).values()]


async def listed_elsewhere(request: web.Request) -> list[Any]:
    """The other workers' items of the list this request asks for."""
    return [item for items in (await answered_elsewhere(request)).values() for item in items]


async def found_elsewhere(request: web.Request) -> web.Response | None:
    """Another worker's answer for the one object this request names (module doc, 3);
    None when no other worker has it."""
    for address in _others(request):
        answer = await _ask(request, address, request.query)
        if answer is not None and answer[0] != 404:
            return _response(answer)
    return None


async def with_stats_elsewhere(request: web.Request, items: list[Any]) -> list[Any]:
    """`items` (objects named by vhost and name: exchanges, queues) with the other workers'
    message stats of each added to their own (module doc, 4), and a quorum queue's leader
    as the worker that holds the node's replica of it knows it (module doc, 3)."""
    mine = {(item["vhost"], item["name"]): item for item in items}
    for answer in (await answered_elsewhere(request)).values():
        for other in answer if isinstance(answer, list) else [answer]:
            item = mine.get((other.get("vhost"), other.get("name")))
            if item is None:
                continue
            if "message_stats" in other:
                item["message_stats"] = summed(
                    item.get("message_stats", {}), other["message_stats"]
                )
            if item.get("leader") is None and other.get("leader") is not None:
                item.update({key: other[key] for key in ("leader", "node", "online")})
    return items


def on_its_own(broker: Broker) -> bool:
    """A node of several workers that is in no cluster of nodes (its workers do not know
    nodes of their own): its workers' internal cluster is no cluster to the outside."""
    cluster = broker.cluster
    return broker.board is not None and not (isinstance(cluster, ClusterNode) and cluster.nodes_of)


def node_of(broker: Broker) -> Callable[[str], str]:
    """The node a worker is part of, by the worker's name (module doc, 5)."""
    cluster = broker.cluster
    if isinstance(cluster, ClusterNode) and cluster.nodes_of:
        return cluster.node_of
    return lambda _worker: broker.node_name


def as_one_node(request: web.Request, broker: Broker, queues: list[Any]) -> None:
    """On worker 0: the queues' workers named as their nodes (module doc, 5)."""
    if WORKERS_KEY not in request.app:
        return
    name = node_of(broker)
    for info in queues:
        for key in ("node", "leader"):
            if info.get(key):
                info[key] = name(info[key])
        for key in ("members", "online"):
            if info.get(key):
                info[key] = list(dict.fromkeys(name(member) for member in info[key]))
        if "open_files" in info:
            info["open_files"] = dict.fromkeys(info["online"], 0)


def summed(mine: Any, other: Any) -> Any:
    """Two workers' figures of one shape as the node's (module doc, 4): numbers added,
    objects key by key, samples point by point (each worker's newest first, at the same
    interval; a sample keeps worker 0's timestamp)."""
    if isinstance(mine, bool) or isinstance(other, bool):
        return mine
    if isinstance(mine, int | float) and isinstance(other, int | float):
        return mine + other
    if isinstance(mine, dict) and isinstance(other, dict):
        added = {**other, **mine}
        for key in mine.keys() & other.keys() - {"timestamp"}:
            added[key] = summed(mine[key], other[key])
        return added
    if isinstance(mine, list) and isinstance(other, list):
        return [summed(a, b) for a, b in zip(mine, other, strict=False)]
    return mine
