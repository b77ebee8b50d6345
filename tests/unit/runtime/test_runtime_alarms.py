"""Resource alarms (`warren.runtime.alarms`): sizes, raising and clearing, and what a
connection does when they change, with a recording transport instead of a socket."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from warren.amqp import methods as m
from warren.amqp.content import method_frame
from warren.runtime import alarms, sizes
from warren.runtime.broker import Broker
from warren.runtime.config import Config
from warren.runtime.connection import AmqpConnection
from warren.runtime.workers.board import BOARD_VARIABLE, Board


def test_sizes_are_read_as_rabbitmq_writes_them():
    assert sizes.parse_size("1000000") == 1_000_000
    assert sizes.parse_size("50MB") == 50_000_000
    assert sizes.parse_size("512MiB") == 512 * 1024**2
    with pytest.raises(ValueError, match="not a size"):
        sizes.parse_size("lots")
    assert sizes.memory_limit_bytes("0.4", 1000) == 400
    assert sizes.memory_limit_bytes("2GB", 1000) == 2_000_000_000
    with pytest.raises(ValueError, match="between 0 and 1"):
        sizes.memory_limit_bytes("1.5", 1000)


class Transport:
    """Records what a connection writes and whether it reads."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.written += data

    def writelines(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.written += chunk

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def test_an_alarm_blocks_publishing_connections_until_it_clears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readings = {"memory": 10, "disk": 10**12}
    monkeypatch.setattr(alarms, "used_memory_bytes", lambda: readings["memory"])
    monkeypatch.setattr(alarms, "free_disk_bytes", lambda path: readings["disk"])

    async def test() -> None:
        broker = Broker(Config(data_dir=tmp_path, vm_memory_high_watermark="100"))
        publisher, consumer = AmqpConnection(broker), AmqpConnection(broker)
        transports = Transport(), Transport()
        publisher.connection_made(transports[0])  # type: ignore[arg-type]
        consumer.connection_made(transports[1])  # type: ignore[arg-type]
        publisher.published = True
        publisher._blocked_capability = True
        monitor = alarms.ResourceMonitor(broker)
        monitor.check()
        assert broker.alarms == set() and transports[0].reading
        readings["memory"] = 101
        monitor.check()
        assert broker.alarms == {"memory"}
        assert publisher.blocked and not transports[0].reading
        assert bytes(method_frame(0, m.ConnectionBlocked("low on memory"))) in transports[0].written
        assert not consumer.blocked and transports[1].reading  # it never published
        readings["memory"] = 99
        monitor.check()
        assert broker.alarms == set() and not publisher.blocked and transports[0].reading
        assert transports[0].written.endswith(bytes(method_frame(0, m.ConnectionUnblocked())))
        monitor.stop()
        for connection in (publisher, consumer):
            connection.connection_lost(None)

    asyncio.run(test())


def test_memory_in_use_falls_when_freed_memory_stays_with_the_process():
    """Freed bodies go back to the allocator, not the system: the reading falls anyway."""
    before = alarms.used_memory_bytes()
    bodies = [bytes(100_000) + bytes([n % 256]) for n in range(500)]  # about 50 MB
    held = alarms.used_memory_bytes()
    del bodies
    after = alarms.used_memory_bytes()
    assert held - before > 40_000_000
    assert after - before < 10_000_000


def test_a_worker_raises_the_memory_alarm_on_the_nodes_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worker under the watermark, the node over it: every worker's alarm is up."""
    monkeypatch.setattr(alarms, "used_memory_bytes", lambda: 60)
    monkeypatch.setattr(alarms, "free_disk_bytes", lambda path: 10**12)
    supervisor = Board.create(2)
    boards = [
        Board.inherited({BOARD_VARIABLE: str(os.dup(supervisor.fd))}, 2, index) for index in (0, 1)
    ]

    async def test() -> None:
        config = Config(data_dir=tmp_path, vm_memory_high_watermark="100")
        monitors = [alarms.ResourceMonitor(Broker(config, board=board)) for board in boards]
        monitors[0].check()
        assert monitors[0].broker.alarms == set()  # 60 of 100: the other worker not counted yet
        monitors[1].check()
        monitors[0].check()
        assert monitors[0].broker.alarms == monitors[1].broker.alarms == {"memory"}
        supervisor.clear(1)  # the other worker exited
        monitors[0].check()
        assert monitors[0].broker.alarms == set()
        for monitor in monitors:
            monitor.stop()

    asyncio.run(test())
    for board in (supervisor, *boards):
        assert board is not None
        board.close()
