"""Free TCP ports on loopback that no outgoing connection can take before they are listened on.

Binding to port 0 finds a free port in the kernel's ephemeral range, the range it also hands
out as the local port of every outgoing connection on the machine. Between finding such a port
and a process listening on it, any connection may take it, and the listener then fails with
"address in use" (a cluster test saw a node's peer link take another node's AMQP port).
`unused_port` draws ports below the ephemeral range instead, where the kernel assigns none by
itself, checks each by binding, and never returns the same port twice in one process.

Processes that draw at once on one machine (the test suite's pytest-xdist workers, and the
nodes each one starts, which inherit its environment) would otherwise draw the same port now
and then, and the slower to listen fails. `SLICE_VARIABLE` (``i/n``) confines a process to
the i-th of n equal slices of that range, so that no two of them ever draw the same port.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Collection
from pathlib import Path

FLOOR = 10_000  # below this are the registered ports other programs are configured to use
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
SLICE_VARIABLE = "WARREN_PORT_SLICE"  # "i/n": this process draws from slice i of n (0-based)
_given: set[int] = set()


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49_152  # IANA's dynamic range, which BSD and macOS use


def _bounds() -> tuple[int, int]:
    """The range this process draws from: below the ephemeral range, its slice of it."""
    floor, ceiling = FLOOR, _ephemeral_start()
    share = os.environ.get(SLICE_VARIABLE)
    if share:
        index, _, count = share.partition("/")
        if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
            raise ValueError(f"{SLICE_VARIABLE}={share!r}: expected i/n with 0 <= i < n")
        width = (ceiling - floor) // int(count)
        floor += int(index) * width
        ceiling = floor + width
    return floor, ceiling


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def mark_given(ports: Collection[int]) -> None:
    """Never give `ports` here: another process drew them from this one's slice (the
    supervisor of a node of several workers, its workers' cluster ports), and they may be
    unbound a while (the node stopped, to start again on them)."""
    _given.update(ports)


def unused_port(avoid: Collection[int] = ()) -> int:
    """A port free on 127.0.0.1 now, outside the ephemeral range (in this process's slice of
    it), not given before here and not in `avoid` (ports taken but maybe not yet bound)."""
    return unused_ports(1, avoid)


def unused_ports(count: int, avoid: Collection[int] = ()) -> int:
    """The first of `count` consecutive ports that `unused_port` could each give (a node of
    several workers listens on its cluster port and the `count - 1` after it)."""
    floor, ceiling = _bounds()
    ceiling -= count - 1
    taken = _given.union(avoid)
    for _ in range(1_000) if ceiling - floor >= 1_000 else ():
        first = random.randrange(floor, ceiling)
        ports = range(first, first + count)
        if taken.isdisjoint(ports) and all(_bindable(port) for port in ports):
            _given.update(ports)
            return first
    if count > 1:
        raise OSError(f"no {count} consecutive free ports below the ephemeral range")
    with socket.socket() as probe:  # no room below the ephemeral range: take the kernel's pick
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    _given.add(port)
    return port
