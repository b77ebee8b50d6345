"""`unused_port(s)` keep clear of the ports the kernel gives outgoing connections."""

from __future__ import annotations

import socket

import pytest

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


def test_a_slice_confines_the_draw_so_processes_sharing_the_range_never_meet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the suite's pytest-xdist workers each draw from their own slice (tests/conftest.py)
    width = (ports._ephemeral_start() - ports.FLOOR) // 4
    for index in range(4):
        monkeypatch.setenv(ports.SLICE_VARIABLE, f"{index}/4")
        low = ports.FLOOR + index * width
        assert all(low <= ports.unused_port() < low + width for _ in range(20))
        first = ports.unused_ports(3)
        assert low <= first and first + 2 < low + width


@pytest.mark.parametrize("share", ["4/4", "1", "-1/2", "a/b", "0/0"])
def test_a_slice_that_is_not_i_of_n_is_refused(monkeypatch: pytest.MonkeyPatch, share: str) -> None:
    monkeypatch.setenv(ports.SLICE_VARIABLE, share)
    with pytest.raises(ValueError, match=ports.SLICE_VARIABLE):
        ports.unused_port()


def test_ports_another_process_drew_or_the_caller_avoids_are_never_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a node's supervisor draws its workers' cluster ports from the slice of the suite's
    # process that started it, and a node's own ports are drawn before they are bound
    monkeypatch.setattr(ports, "_given", set())
    ports.mark_given([12_000])
    draws = iter([12_000, 12_001, 12_002])
    monkeypatch.setattr(ports.random, "randrange", lambda _floor, _ceiling: next(draws))
    assert ports.unused_port(avoid=[12_001]) == 12_002
