"""The composition root of a node (or of one worker of a node): it builds the node from its
config, starts the management API and the AMQP listeners, and serves until SIGINT or
SIGTERM. `warren-server` (`warren.launch`) runs it in every process that serves.

Theory of operation:
1. Start-up does what can fail on the operator's side first, before any state is loaded
   or anything listens: settings (`config.load`), the TLS files, the data directory's lock
   (one node per directory) and the bind of every port, AMQP first
   (`warren.runtime.start`). A failure is one line on stderr naming the thing and the fix,
   exit status 1, and nothing left bound.
2. Then durable state comes back, and only then do the bound sockets listen: the
   management API first, so a client that sees the AMQP port open can use it too.

It sits above every layer (runtime and mgmt both); only `warren.launch` imports it."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import signal
import socket
import sys

from warren import __version__
from warren.mgmt import start_management
from warren.runtime import admin_live
from warren.runtime.alarms import ResourceMonitor
from warren.runtime.broker import Broker
from warren.runtime.cluster.node import ClusterNode
from warren.runtime.config import Config, flag
from warren.runtime.connection import AmqpConnection
from warren.runtime.recovery import recover
from warren.runtime.start import Listener, StartError, bind_listeners, lock_data_dir
from warren.runtime.tls import server_context
from warren.runtime.workers import layout as workers_layout
from warren.runtime.workers.board import Board
from warren.runtime.workers.worker import Worker

log = logging.getLogger("warren")

# The log thread's fsync returns into a loop thread that holds the GIL; at the default
# 5 ms switch interval it waits that long for it, and group commit stalls at ~50 syncs/s
# under load. 0.2 ms lets the sync thread back in promptly.
SWITCH_INTERVAL_S = 0.0002


async def serve(config: Config, worker: int | None = None) -> int:
    """Run the node (or one `worker` of it) until SIGINT/SIGTERM; the exit status (non-zero
    if the log failed). Raises StartError, with nothing left listening or locked, if it
    cannot start."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        tls = server_context(config)
    except ValueError as error:
        raise StartError(str(error)) from None
    lock = lock_data_dir(config.data_dir)
    try:
        listeners = bind_listeners(config, tls, worker)
        try:
            return await _serve(config, listeners, worker)
        finally:
            for listener in listeners:
                listener.sock.close()
    finally:
        os.close(lock)


async def _serve(config: Config, listeners: list[Listener], worker: int | None) -> int:
    nodes_of: dict[str, str] = {}  # in a cluster of nodes of several workers: their nodes
    local_links: dict[str, str] = {}  # a worker's: the node's workers' Unix sockets
    if worker is None:
        broker = Broker(config)
    else:  # one node to the outside: its name, its limits counted across the workers
        board = Board.inherited(os.environ, config.workers, worker)
        broker = Broker(config, workers_layout.node_of(config.node_name, worker), board)
        if workers_layout.worker_names(config, broker.node_name)[0] == broker.node_name:
            nodes_of = workers_layout.nodes_of_members(config, broker.node_name)
        local_links = workers_layout.link_addresses(config, broker.node_name)
    monitor = ResourceMonitor(broker)
    stop = asyncio.Event()
    try:
        if local_links:
            workers_layout.make_sockets_directory(local_links[config.node_name])
        describe = functools.partial(admin_live.node_json, broker)
        cluster = (
            ClusterNode(
                broker, config, stop.set, describe, nodes_of=nodes_of, local_links=local_links
            )
            if config.cluster_nodes
            else None
        )
    except ValueError as error:  # cluster_nodes, cluster_cookie or the sockets' directory
        raise StartError(str(error)) from None
    if cluster is not None:
        await cluster.open()  # quorum queues find their Raft groups as definitions return
    # Durable state is back before anything listens: a client never sees a half-loaded node.
    recovered = recover(
        broker, config.data_dir, stop.set, segment_max_bytes=config.log_segment_max_bytes
    )
    durability = recovered.durability
    try:
        if cluster is not None:
            cluster.attach(durability)
            try:
                await cluster.start()
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                raise StartError(
                    f"cluster port {config.cluster_port} is in use by another program: stop"
                    " it, or choose another port with --cluster-port (WARREN_CLUSTER_PORT)"
                ) from None
            if recovered.dead_letters:  # their queues may be homed on the other nodes
                await cluster.queues_known()
        recovered.carry_out()
        following = None  # a worker's connections follow their queues to other workers
        links = workers_layout.inboxes(os.environ)
        if cluster is not None and worker is not None and links is not None:
            following = Worker(broker, cluster, worker, *links)
        await _run(broker, stop, listeners, monitor, worker, following)
    finally:
        if cluster is not None:
            await cluster.close()
        await durability.close()
    if durability.failed:
        log.critical("stopped: the message log failed")
        return 1
    if cluster is not None and cluster.raft.failure is not None:
        log.critical("stopped: the Raft log failed")
        return 1
    return 0


async def start_listeners(
    broker: Broker, listeners: list[Listener], worker: Worker | None = None
) -> list[asyncio.Server]:
    """Start listening for AMQP (and AMQPS) on the bound sockets; a `worker`'s
    connections follow their queues to the other workers."""
    loop = asyncio.get_running_loop()
    servers: list[asyncio.Server] = []
    try:
        for listener in listeners:
            if listener.setting in ("port", "ssl_port"):
                address = _address(listener.sock)
                try:
                    server = await loop.create_server(
                        (lambda: AmqpConnection(broker)) if worker is None else worker.connection,
                        sock=listener.sock,
                        backlog=1024,
                        ssl=listener.tls,
                    )
                except OSError as error:  # asyncio's loop: listen(2) failed
                    raise _cannot_listen(listener, address) from error
                servers.append(server)
                if None in server.sockets:  # uvloop closed it, and said nothing
                    raise _cannot_listen(listener, address)
                log.info("%s listening on %s", listener.label, address)
    except StartError:
        for server in servers:
            server.close()
        raise
    return servers


def _cannot_listen(listener: Listener, address: str) -> StartError:
    """Another program took the port between the node's bind and its listen (it bound the
    port with SO_REUSEADDR too, and listened first)."""
    return StartError(
        f"{listener.label} cannot listen on {address}: another program took the port as this"
        f" node started; stop it, or choose another port with {flag(listener.setting)}"
    )


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _run(
    broker: Broker,
    stop: asyncio.Event,
    listeners: list[Listener],
    monitor: ResourceMonitor,
    worker: int | None,
    following: Worker | None,
) -> None:
    config = broker.config
    monitor.start()
    management = await start_management(
        broker,
        [(item.sock, item.tls) for item in listeners if item.setting.startswith("management")],
        worker,
    )
    loop = asyncio.get_running_loop()
    if following is not None:
        following.start()  # SIGUSR1: log the messages that crossed workers
    else:  # what asks a worker for its crossings leaves a node of one process be
        loop.add_signal_handler(signal.SIGUSR1, log.info, "one process: no message crosses workers")
    servers = await start_listeners(broker, listeners, following)
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    log.info(
        "Warren %s node %s started, data in %s", __version__, config.node_name, config.data_dir
    )
    await stop.wait()
    log.info("stopping")
    monitor.stop()
    if following is not None:
        following.stop()
    for server in servers:
        server.close()
    await management.cleanup()
    for connection in list(broker.connections):
        connection.shutdown()
    for server in servers:
        with contextlib.suppress(Exception):
            await server.wait_closed()
