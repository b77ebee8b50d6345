"""`warren-server`: the composition root. It builds a node from its config, starts the
management API and the AMQP listeners, and serves until SIGINT or SIGTERM.

Theory of operation:
1. Start-up does what can fail on the operator's side first, before any state is loaded
   or anything listens: settings (`config.load`), the TLS files, the data directory's lock
   (one node per directory) and the bind of every port, AMQP first. A failure is one line
   on stderr naming the thing and the fix, exit status 1, and nothing left bound.
2. Then durable state comes back, and only then do the bound sockets listen: the
   management API first, so a client that sees the AMQP port open can use it too.
3. The cyclic garbage collector runs less often than CPython's default (`GC_THRESHOLDS`).
   A queue's messages are many small objects (entries, slots, journal records) that live
   until they are consumed; with the default thresholds (700, 10, 10) each full collection
   walked all of them, finding nothing, whenever the heap had grown by a quarter: 8-13 us of
   the node's 34-51 us of CPU per message while 200,000 persistent messages were published
   into one queue with confirms, 2-3 us with these thresholds (docs/pipeline.md,
   "Throughput", round 8). Reference counting still frees everything that is not a cycle.

It sits above every layer (runtime and mgmt both), so nothing imports it."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import gc
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from warren import __version__
from warren.mgmt import start_management
from warren.runtime import admin_live
from warren.runtime import config as config_module
from warren.runtime.alarms import ResourceMonitor
from warren.runtime.broker import Broker
from warren.runtime.cluster.node import ClusterNode
from warren.runtime.config import Config
from warren.runtime.connection import AmqpConnection
from warren.runtime.recovery import recover
from warren.runtime.tls import server_context
from warren.runtime.workers import layout as workers_layout
from warren.runtime.workers.board import Board
from warren.runtime.workers.supervisor import Supervisor, die_with_supervisor
from warren.runtime.workers.worker import Worker

log = logging.getLogger("warren")

# The log thread's fsync returns into a loop thread that holds the GIL; at the default
# 5 ms switch interval it waits that long for it, and group commit stalls at ~50 syncs/s
# under load. 0.2 ms lets the sync thread back in promptly.
SWITCH_INTERVAL_S = 0.0002
DATA_DIR_LOCK = "node.lock"  # flock'ed by the running node; holds its pid


class StartError(Exception):
    """Why the node cannot start, in one line naming the thing and the fix."""


@dataclass(slots=True)
class Listener:
    """A socket bound (not yet listening) for one of the node's ports."""

    label: str  # what it serves, in log lines and errors
    setting: str  # the config setting that chose its port
    sock: socket.socket
    tls: ssl.SSLContext | None


def bind_listeners(
    config: Config, tls: ssl.SSLContext | None, worker: int | None = None
) -> list[Listener]:
    """Bind every port the node serves on every address of `config.bind`, AMQP first, so a
    port in use fails the start before anything listens (rule 2). An address this host
    lacks (no IPv6) is skipped when there are others. A `worker` of a node shares the AMQP
    ports with the others (SO_REUSEPORT); only worker 0 serves the management API."""
    ports: list[tuple[str, str, int, ssl.SSLContext | None]] = [("AMQP", "port", config.port, None)]
    if tls is not None:
        ports.append(("AMQPS", "ssl_port", config.ssl_port, tls))
    amqp_ports = len(ports)
    ports.append(("management API (HTTP)", "management_port", config.management_port, None))
    if tls is not None:
        ports.append(
            ("management API (HTTPS)", "management_ssl_port", config.management_ssl_port, tls)
        )
    if worker not in (None, 0):
        del ports[amqp_ports:]
    listeners: list[Listener] = []
    try:
        for number, (label, setting, port, context) in enumerate(ports):
            for host in config.bind:
                try:
                    for sock in _bind(host, port, worker is not None and number < amqp_ports):
                        listeners.append(Listener(label, setting, sock, context))
                except OSError as error:
                    flag = "--" + setting.replace("_", "-")
                    if error.errno == errno.EADDRINUSE:
                        raise StartError(
                            f"{label} port {port} on {host} is in use by another program:"
                            f" stop it, or choose another port with {flag}"
                            f" (WARREN_{setting.upper()})"
                        ) from None
                    if host == "::1" and len(config.bind) > 1:
                        log.warning("%s not listening on [::1]:%s: %s", label, port, error)
                        continue
                    raise StartError(
                        f"cannot listen on {host} port {port} for {label}: {error.strerror};"
                        f" check --bind and {flag}"
                    ) from None
    except BaseException:
        for listener in listeners:
            listener.sock.close()
        raise
    return listeners


def _bind(host: str, port: int, shared: bool) -> list[socket.socket]:
    """Sockets bound to every address `host` resolves to, as `create_server` would bind;
    `shared` ones with SO_REUSEPORT, so that every worker of the node can bind them."""
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        ):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if shared:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind(address)
            sock.setblocking(False)
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def lock_data_dir(data_dir: Path) -> int:
    """Create `data_dir` and hold its lock for the life of the process (one node per data
    directory); returns the lock file's descriptor."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(data_dir / DATA_DIR_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise StartError(
            f"cannot use data directory {data_dir}: {error.strerror};"
            " choose another with --data-dir (WARREN_DATA_DIR)"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StartError(
            f"data directory {data_dir} is in use by another Warren node (pid {holder}):"
            " stop that node, or give this one its own with --data-dir (WARREN_DATA_DIR)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


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
    if worker is None:
        broker = Broker(config)
    else:  # one node to the outside: its name, its limits counted across the workers
        board = Board.inherited(os.environ, config.workers, worker)
        broker = Broker(config, workers_layout.node_of(config.node_name, worker), board)
        if workers_layout.worker_names(config, broker.node_name)[0] == broker.node_name:
            nodes_of = workers_layout.nodes_of_members(config, broker.node_name)
    monitor = ResourceMonitor(broker)
    stop = asyncio.Event()
    try:
        describe = functools.partial(admin_live.node_json, broker)
        cluster = (
            ClusterNode(broker, config, stop.set, describe, nodes_of=nodes_of)
            if config.cluster_nodes
            else None
        )
    except ValueError as error:  # cluster_nodes or cluster_cookie
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
    for listener in listeners:
        if listener.setting in ("port", "ssl_port"):
            server = await loop.create_server(
                (lambda: AmqpConnection(broker)) if worker is None else worker.connection,
                sock=listener.sock,
                backlog=1024,
                ssl=listener.tls,
            )
            servers.append(server)
            log.info("%s listening on %s", listener.label, _address(listener.sock))
    return servers


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


async def supervise(config: Config, argv: Sequence[str]) -> int:
    """Run a node of `config.workers` processes (`warren.runtime.workers`): the data
    directory's lock and a check that the ports are free here, the workers' own starts in
    them."""
    lock = lock_data_dir(config.data_dir)
    try:
        try:
            workers_layout.load_or_create(config)
            tls = server_context(config)
        except ValueError as error:  # ConfigError too
            raise StartError(str(error)) from None
        for listener in bind_listeners(config, tls, worker=0):
            listener.sock.close()
        return await Supervisor(config.workers, argv, os.environ).run()
    finally:
        os.close(lock)


GC_THRESHOLDS = (10_000, 10, 100)  # rule 3; CPython's are (700, 10, 10)


def main(argv: Sequence[str] | None = None) -> None:
    """Run a node; exit status 1 with one line on stderr if it cannot start (rule 1)."""
    gc.set_threshold(*GC_THRESHOLDS)
    worker = workers_layout.worker_index(os.environ)
    if worker is not None:
        die_with_supervisor(os.environ)
    try:
        config = config_module.load(argv)
        if worker is not None:
            config = workers_layout.worker_config(config, worker)
    except config_module.ConfigError as error:
        sys.exit(f"warren-server: {error}")
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        run = asyncio.run
    else:
        run = uvloop.run
    try:
        if config.workers > 1 and worker is None:
            status = run(supervise(config, sys.argv[1:] if argv is None else argv))
        else:
            status = run(serve(config, worker))
    except StartError as error:
        sys.exit(f"warren-server: {error}")
    if status:
        sys.exit(status)
