"""`unused_port(s)` keep clear of the ports the kernel gives outgoing connections."""

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


def test_consecutive_ports_are_given_once_and_bindable() -> None:
    # a node of 3 workers listens on its cluster port and the two after it
    firsts = [ports.unused_ports(3) for _ in range(10)]
    given = [first + offset for first in firsts for offset in range(3)]
    assert len(set(given)) == len(given)
    assert ports.unused_port() not in given
    assert all(ports.FLOOR <= port < ports._ephemeral_start() for port in given)
    for port in given:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))
