"""`warren-server`: the composition root. It builds a node from its config, starts the
management API and the AMQP listeners, and serves until SIGINT or SIGTERM.

It sits above every layer (runtime and mgmt both), so nothing imports it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
import sys
from collections.abc import Sequence

from warren import __version__
from warren.mgmt import start_management
from warren.runtime import config as config_module
from warren.runtime.alarms import ResourceMonitor
from warren.runtime.broker import Broker
from warren.runtime.cluster.node import ClusterNode
from warren.runtime.config import Config
from warren.runtime.connection import AmqpConnection
from warren.runtime.passwords import ALGORITHMS
from warren.runtime.recovery import open_durability
from warren.runtime.tls import server_context

log = logging.getLogger("warren")

# The log thread's fsync returns into a loop thread that holds the GIL; at the default
# 5 ms switch interval it waits that long for it, and group commit stalls at ~50 syncs/s
# under load. 0.2 ms lets the sync thread back in promptly.
SWITCH_INTERVAL_S = 0.0002
MESSAGE_SIZE_MAX = 512 * 1024 * 1024  # RabbitMQ's cap on max_message_size


async def start_listeners(
    broker: Broker, tls: ssl.SSLContext | None = None
) -> list[asyncio.Server]:
    """Listen on every configured address (and with TLS on the TLS port too); an address
    this host lacks (no IPv6) is skipped."""
    config = broker.config
    loop = asyncio.get_running_loop()
    servers: list[asyncio.Server] = []
    ports = [(config.port, None, "AMQP")]
    if tls is not None:
        ports.append((config.ssl_port, tls, "AMQPS"))
    for port, context, label in ports:
        for host in config.bind:
            try:
                server = await loop.create_server(
                    lambda: AmqpConnection(broker),
                    host,
                    port,
                    reuse_address=True,
                    backlog=1024,
                    ssl=context,
                )
            except OSError as error:
                if host == "::1" and len(config.bind) > 1:
                    log.warning("%s not listening on [::1]:%s: %s", label, port, error)
                    continue
                raise
            for sock in server.sockets:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            servers.append(server)
            log.info("%s listening on %s:%s", label, host, port)
    return servers


async def serve(config: Config) -> int:
    """Run the node until SIGINT/SIGTERM; the exit status (non-zero if the log failed)."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        if not 0 < config.max_message_size <= MESSAGE_SIZE_MAX:
            raise ValueError(f"max_message_size must be between 1 and {MESSAGE_SIZE_MAX}")
        if config.password_hashing_module not in ALGORITHMS:
            raise ValueError(f"password_hashing_module must be one of {', '.join(ALGORITHMS)}")
        broker = Broker(config)
        tls = server_context(config)
        monitor = ResourceMonitor(broker)
        stop = asyncio.Event()
        cluster = ClusterNode(broker, config, stop.set) if config.cluster_nodes else None
    except (ValueError, OSError, ssl.SSLError) as error:
        log.critical("cannot start: %s", error)
        return 2
    if cluster is not None:
        await cluster.open()  # quorum queues find their Raft groups as definitions return
    # Durable state is back before anything listens: a client never sees a half-loaded node.
    durability = open_durability(
        broker, config.data_dir, stop.set, segment_max_bytes=config.log_segment_max_bytes
    )
    try:
        if cluster is not None:
            cluster.attach(durability)
            await cluster.start()
        await _run(broker, stop, tls, monitor)
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


async def _run(
    broker: Broker, stop: asyncio.Event, tls: ssl.SSLContext | None, monitor: ResourceMonitor
) -> None:
    config = broker.config
    monitor.start()
    # The management API is up before AMQP, so a client that sees the AMQP port open can
    # use it too.
    management = await start_management(broker, tls)
    servers = await start_listeners(broker, tls)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    log.info(
        "Warren %s node %s started, data in %s", __version__, config.node_name, config.data_dir
    )
    await stop.wait()
    log.info("stopping")
    monitor.stop()
    for server in servers:
        server.close()
    await management.cleanup()
    for connection in list(broker.connections):
        connection.shutdown()
    for server in servers:
        with contextlib.suppress(Exception):
            await server.wait_closed()


def main(argv: Sequence[str] | None = None) -> None:
    config = config_module.load(argv)
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        status = asyncio.run(serve(config))
    else:
        status = uvloop.run(serve(config))
    if status:
        sys.exit(status)
