"""bench.brokers starting Warren: a node interrupted while it starts is stopped, not left
running without a harness that knows it."""

from __future__ import annotations

import pytest

from bench import brokers


def test_a_warren_interrupted_while_it_starts_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(port: int) -> bool:  # what a SIGTERM's handler raises, mid-start
        raise SystemExit(143)

    original = brokers.Broker.stop
    stopped: list[brokers.Broker] = []

    def stop(self: brokers.Broker) -> None:
        stopped.append(self)
        original(self)

    monkeypatch.setattr(brokers, "_port_open", interrupted)
    monkeypatch.setattr(brokers.Broker, "stop", stop)
    with pytest.raises(SystemExit):
        brokers.start_warren()
    [broker] = stopped
    assert broker.process is not None and broker.process.poll() is not None
