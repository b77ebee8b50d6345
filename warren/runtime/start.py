"""What a node's start checks before it loads anything: its data directory's lock and its
ports, bound but not yet listening (`warren.server`, rule 1).

Theory of operation:
1. A failure is a `StartError`: one line naming the thing and the fix, which `warren-server`
   prints on stderr before it exits with status 1 (`warren.launch`).
2. `lock_data_dir` holds ``<data_dir>/node.lock`` (flock, with the holder's pid) for the
   life of the process: one node per data directory. `bind_listeners` binds every port the
   node serves, AMQP first, and closes all of them if one fails.
3. Both the supervisor of a node of several workers (`warren.runtime.workers.supervisor`)
   and each node process use them; the supervisor imports this module and not the node's
   code (`warren.server`), so that it starts its workers without loading what it never
   runs.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from warren.runtime.config import Config, flag, variable

log = logging.getLogger("warren")

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
                    if error.errno == errno.EADDRINUSE:
                        raise StartError(
                            f"{label} port {port} on {host} is in use by another program:"
                            f" stop it, or choose another port with {flag(setting)}"
                            f" ({variable(setting)})"
                        ) from None
                    if host == "::1" and len(config.bind) > 1:
                        log.warning("%s not listening on [::1]:%s: %s", label, port, error)
                        continue
                    raise StartError(
                        f"cannot listen on {host} port {port} for {label}: {error.strerror};"
                        f" check --bind and {flag(setting)}"
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
