"""`unused_port` keeps clear of the ports the kernel gives outgoing connections."""

from __future__ import annotations

import socket

from warren.runtime import ports


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    given = [ports.unused_port() for _ in range(50)]
    assert len(set(given)) == len(given)
    assert all(ports.FLOOR <= port < ports._ephemeral_start() for port in given)
    for port in given:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))
