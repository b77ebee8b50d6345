"""Resource alarms: stop publishers while the node is short of memory or disk.

Theory of operation (RabbitMQ's "Memory and Disk Alarms" guide):
1. `ResourceMonitor` samples twice a second the node's memory use (`used_memory_bytes`) and
   the free space of the file system that holds its data directory. Memory above
   `vm_memory_high_watermark` (a fraction of the machine's RAM, ``0.4`` by default, or an
   absolute size such as ``512MiB``) raises the ``memory`` alarm; free disk below
   `disk_free_limit` (``50MB`` by default) raises the ``disk`` alarm. Each clears once
   the reading is back on the right side. Before that, memory above
   `vm_memory_high_watermark_paging_ratio` (0.5) of the watermark sets
   `broker.memory_pressure`, and queues page messages out (`warren.runtime.queues.paging`).
2. While any alarm is up, every connection that has published is blocked: it is sent
   ``connection.blocked`` (if its client announced the capability) with the reason
   ``low on memory`` / ``low on disk`` and its socket is no longer read, so TCP pushes back
   on the publisher. A connection that only consumes is left alone, so consumers keep
   draining queues, which is what frees the resources. A connection that publishes for
   the first time during an alarm is blocked right after that read. When the last alarm
   clears, blocked connections get ``connection.unblocked`` and are read again.
3. Memory use is what the process holds *in use*, as RabbitMQ's ``allocated`` strategy
   counts what its allocators hold: the resident set size less the bytes the C allocator
   keeps free for reuse (glibc's ``mallinfo2().fordblks``). Python seldom hands freed
   memory back to the system, so the resident size alone stays above the watermark after
   the queues drained and the alarm would never clear; freed message bodies go back to
   the allocator's free lists, so this reading falls again. Where ``mallinfo2`` is
   missing (not glibc) it is the resident size.
4. A blocked connection is not dropped for missed heartbeats: its peer's frames wait in
   the socket unread.
5. On a node of several workers the memory reading is the node's: each worker's monitor
   adds up every worker's (`warren.runtime.workers.board`), so every worker raises and
   clears the alarm (and sets the paging pressure) on the node's figure. The disk alarm
   reads the one file system that holds the node's data directory, as it is.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, cast

from warren.runtime.sizes import memory_limit_bytes, parse_size

if TYPE_CHECKING:
    from warren.runtime.broker import Broker

log = logging.getLogger("warren.alarms")

MEMORY: Final = "memory"
DISK: Final = "disk"
REASONS: Final = {MEMORY: "low on memory", DISK: "low on disk"}
CHECK_INTERVAL_S: Final = 0.5


def total_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def resident_bytes() -> int:
    """This process's resident set size (Linux); 0 where /proc is missing."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h), every field a size_t."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        function = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    function.argtypes = []
    return cast("Callable[[], _MallInfo2]", function)


_MALLINFO2 = _mallinfo2()


def used_memory_bytes() -> int:
    """The memory the node holds in use (rule 3): resident less the allocator's free bytes."""
    resident = resident_bytes()
    if _MALLINFO2 is None:
        return resident
    free_bytes: int = _MALLINFO2().fordblks
    return max(resident - free_bytes, 0)


def free_disk_bytes(path: os.PathLike[str] | str) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class ResourceMonitor:
    """Samples memory and disk and raises or clears the broker's alarms (rules 1-2)."""

    def __init__(self, broker: Broker) -> None:
        config = broker.config
        self.broker = broker
        self.memory_limit_bytes = memory_limit_bytes(
            config.vm_memory_high_watermark, total_memory_bytes()
        )
        ratio = config.vm_memory_high_watermark_paging_ratio
        if not 0 <= ratio <= 1:
            raise ValueError(
                f"vm_memory_high_watermark_paging_ratio is between 0 and 1, not {ratio}"
            )
        self.paging_limit_bytes = int(self.memory_limit_bytes * ratio)
        self.disk_free_limit_bytes = parse_size(config.disk_free_limit)
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        log.info(
            "memory alarm above %s bytes, disk alarm below %s bytes free",
            self.memory_limit_bytes,
            self.disk_free_limit_bytes,
        )
        self.check()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def check(self) -> None:
        memory = used_memory_bytes()
        if self.broker.board is not None:  # a worker: the node's memory is every worker's
            memory = self.broker.board.report_memory(memory)
        pressed = memory > self.paging_limit_bytes
        if pressed != self.broker.memory_pressure:
            log.info(
                "memory pressure %s (%s bytes)", "on: queues page out" if pressed else "off", memory
            )
            self.broker.memory_pressure = pressed
        self._set(MEMORY, memory > self.memory_limit_bytes, memory)
        disk = free_disk_bytes(self.broker.config.data_dir)
        self._set(DISK, disk < self.disk_free_limit_bytes, disk)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(CHECK_INTERVAL_S, self.check)

    def _set(self, resource: str, up: bool, reading: int) -> None:
        alarms = self.broker.alarms
        if up == (resource in alarms):
            return
        if up:
            log.warning("%s alarm set (%s bytes): publishers are blocked", resource, reading)
            alarms.add(resource)
        else:
            log.warning("%s alarm cleared (%s bytes)", resource, reading)
            alarms.discard(resource)
        for connection in list(self.broker.connections):
            connection.alarms_changed()
