"""Resource alarms: stop publishers while the node is short of memory or disk.

Theory of operation (RabbitMQ's "Memory and Disk Alarms" guide):
1. `ResourceMonitor` samples twice a second the node's memory use (resident set size) and
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
3. A blocked connection is not dropped for missed heartbeats: its peer's frames wait in
   the socket unread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from warren.runtime.broker import Broker

log = logging.getLogger("warren.alarms")

MEMORY: Final = "memory"
DISK: Final = "disk"
REASONS: Final = {MEMORY: "low on memory", DISK: "low on disk"}
CHECK_INTERVAL_S: Final = 0.5

_UNITS = {
    "": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "k": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes of a size as RabbitMQ writes them: ``1000000``, ``50MB`` (10^6), ``512MiB``."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 1073741824, 50MB, 512MiB)")
    return int(match.group(1)) * _UNITS[unit]


def memory_limit_bytes(watermark: str, total_bytes: int) -> int:
    """The memory alarm's threshold: a fraction of `total_bytes` or an absolute size."""
    text = watermark.strip()
    if "." in text:
        fraction = float(text)
        if not 0 <= fraction <= 1:
            raise ValueError(f"a relative memory watermark is between 0 and 1, not {text}")
        return int(total_bytes * fraction)
    return parse_size(text)


def total_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def resident_bytes() -> int:
    """This process's resident set size (Linux); 0 where /proc is missing."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


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
        memory = resident_bytes()
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
