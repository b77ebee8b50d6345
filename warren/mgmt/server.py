"""The aiohttp application: authentication, dispatch on the raw path, and the listeners.

Theory of operation:
1. Every request under /api/ needs HTTP basic credentials of a broker user. No
   credentials is a bare 401 with RabbitMQ's ``WWW-Authenticate`` realm; wrong ones are
   ``not_authorized``/``Login failed``; a loopback-only user (guest) from another address
   is refused as RabbitMQ refuses it. The caller's tags then decide (`authz`): a user
   without a management tag is refused everything, each endpoint needs its level, and a
   path naming an existing vhost needs a permission on it. /metrics (Prometheus) needs
   no credentials, as on RabbitMQ's prometheus port.
2. Dispatch splits the *raw* path on ``/`` and unquotes each segment, so ``%2F`` is the
   vhost ``/`` and never a separator; `resources.route` finds the handlers. HEAD is
   answered by the GET handler (aiohttp drops the body). An unknown path is RabbitMQ's
   404, a known path with another method 405.
3. `start_management` listens on the sockets `warren.server` bound for it, on every
   address of `config.bind`, `config.management_port` (and `config.management_ssl_port`
   over HTTPS with the node's TLS context).
4. Everything outside /api/ is the web UI's static files (`warren/mgmt/ui`), served
   without credentials as RabbitMQ serves its own; the UI asks for them and sends them
   on its API calls.
5. `start_management` also starts the rate sampler (`rates.run_sampler`) and stops it
   on cleanup.
7. A worker of a node of several (issue 19): worker 0 serves the node's ports and asks
   the others for what lives in them (`warren.mgmt.workers`); each other worker serves
   its API on its own Unix socket only, where every caller is local (loopback users may
   log in).
6. In a cluster a request that changed definitions is answered once every node it can
   reach applied the changes (`Broker.definitions_settled`), as a channel's -ok is.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import ipaddress
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from urllib.parse import unquote

from aiohttp import web

from warren.mgmt import metrics, replies
from warren.mgmt.authz import VHOST_REFUSED, Level, Principal
from warren.mgmt.context import BROKER_KEY, PRINCIPAL, RATES_KEY
from warren.mgmt.rates import Rates, run_sampler
from warren.mgmt.resources import route
from warren.mgmt.workers import WORKERS_KEY
from warren.runtime.broker import Broker
from warren.runtime.workers.layout import (
    make_sockets_directory,
    management_address,
    worker_names,
)

log = logging.getLogger("warren.mgmt")

API_PREFIX = "/api/"
UI_DIR = Path(__file__).with_name("ui")


def build_app(broker: Broker) -> web.Application:
    app = web.Application(middlewares=[authenticate])
    app[BROKER_KEY] = broker
    app[RATES_KEY] = Rates()
    app.router.add_route("*", "/api/{tail:.*}", dispatch)
    app.router.add_get("/", ui_index)
    app.router.add_static("/ui/", UI_DIR)
    app.router.add_get("/metrics", metrics.serve)
    app.router.add_get("/metrics/per-object", metrics.serve_per_object)
    app.cleanup_ctx.append(_sampler)
    return app


async def _sampler(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.get_running_loop().create_task(run_sampler(app[BROKER_KEY], app[RATES_KEY]))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def start_management(
    broker: Broker,
    sockets: Sequence[tuple[socket.socket, ssl.SSLContext | None]],
    worker: int | None = None,
) -> web.AppRunner:
    """Serve the management API on bound `sockets` (HTTPS on those with a TLS context), and
    as `worker` of a node of several on its socket for worker 0 (module doc, 7); the
    caller awaits `runner.cleanup()` to stop it."""
    app = build_app(broker)
    if worker == 0:
        app[WORKERS_KEY] = tuple(
            (node, management_address(broker.config.data_dir.parent, index))
            for index, node in enumerate(worker_names(broker.config, broker.node_name))
            if index
        )
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    if worker:
        address = management_address(broker.config.data_dir.parent, worker)
        make_sockets_directory(address)
        await web.UnixSite(runner, address).start()
    for sock, context in sockets:
        await web.SockSite(runner, sock, ssl_context=context).start()
        host, port = sock.getsockname()[:2]
        scheme = "HTTPS" if context is not None else "HTTP"
        log.info("management API (%s) listening on %s:%s", scheme, host, port)
    return runner


@web.middleware
async def authenticate(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    if not request.path.startswith(API_PREFIX):
        return await handler(request)
    credentials = _credentials(request.headers.get("Authorization", ""))
    if credentials is None:
        return replies.unauthorized(None)
    name, password = credentials
    broker = request.app[BROKER_KEY]
    access = broker.access
    user = access.authenticated(name, password)
    if user is None and access.has_password(name):  # a slow hash: off the event loop
        loop = asyncio.get_running_loop()
        user = await loop.run_in_executor(None, access.authenticate, name, password)
    if user is None:
        return replies.unauthorized("Login failed")
    local = _is_loopback(request.remote) or _on_unix(request)
    if name in broker.config.loopback_users and not local:
        return replies.unauthorized("User can only log in via localhost")
    caller = Principal(user)
    if not caller.has(Level.MANAGEMENT):
        return replies.not_authorised(Level.MANAGEMENT.value)
    request[PRINCIPAL] = caller
    return await handler(request)


def _credentials(header: str) -> tuple[str, str] | None:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None


def _on_unix(request: web.Request) -> bool:
    """The request came over a worker's Unix socket (module doc, 7)."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    return sock is not None and sock.family == socket.AF_UNIX


def _is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


async def ui_index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(UI_DIR / "index.html")


async def dispatch(request: web.Request) -> web.Response:
    raw = request.rel_url.raw_path
    segments = [unquote(part) for part in raw[len(API_PREFIX) :].rstrip("/").split("/")]
    found = route(segments)
    if found is None:
        return replies.not_found()
    endpoints, params = found
    method = "GET" if request.method == "HEAD" else request.method
    endpoint = endpoints.get(method)
    if endpoint is None:
        allowed = ["HEAD", *endpoints] if "GET" in endpoints else list(endpoints)
        return replies.method_not_allowed(allowed)
    broker = request.app[BROKER_KEY]
    caller = request[PRINCIPAL]
    if not caller.has(endpoint.level):
        return replies.not_authorised(endpoint.level.value)
    if endpoint.vhost_param is not None:
        vhost = params[endpoint.vhost_param]
        if vhost in broker.vhosts and not caller.may_use_vhost(broker, vhost):
            return replies.not_authorised(VHOST_REFUSED)
    response = await endpoint.handler(request, broker, params)
    settled = broker.definitions_settled() if method != "GET" else None
    if settled is not None:  # in a cluster: answered once every node has the change
        await asyncio.shield(settled)  # a client that goes away leaves the changes be
    return response
