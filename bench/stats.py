"""Measurements for the load generator: latency histograms and /proc process accounting.

Owns `LatencyHistogram` (log-linear buckets of microseconds, ~0.2 % precision, mergeable
across consumer processes) and the Linux /proc readers for CPU time (utime + stime) and
resident memory (VmRSS) of a process and its descendants, and the whole machine's busy CPU
time (to tell when something else was competing for the cores during a measurement), plus
the Erlang VM memory of a RabbitMQ node from its management API.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.parse
import urllib.request
from array import array
from pathlib import Path
from typing import Any

import numpy as np

_SUB_BITS = 10
_SUB = 1 << _SUB_BITS  # values below this many microseconds get an exact bucket
_HALF = _SUB >> 1
_MAX_US = (1 << 40) - 1  # clamp: 12.7 days
_BUCKETS = _SUB + (40 - _SUB_BITS) * _HALF
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _bucket_value(index: int) -> float:
    """Midpoint of a bucket, in microseconds."""
    if index < _SUB:
        return float(index)
    shift, mantissa = divmod(index - _SUB, _HALF)
    shift += 1
    return float(((mantissa + _HALF) << shift) + (1 << (shift - 1)))


class LatencyHistogram:
    """Counts of latencies in log-linear microsecond buckets.

    Exact below 1,024 us, then 512 buckets per power of two. Recording is vectorised: the
    consumer appends raw nanosecond latencies to an `array('q')` and folds it in now and then.
    """

    def __init__(self) -> None:
        self.counts = np.zeros(_BUCKETS, dtype=np.int64)
        self.total_us = 0

    def record_many_ns(self, nanoseconds: array[int]) -> None:
        if not len(nanoseconds):
            return
        us = np.clip(np.frombuffer(nanoseconds, dtype=np.int64) // 1000, 0, _MAX_US)
        bit_length = np.frexp(us.astype(np.float64))[1]  # exact: us < 2**53
        shift = np.maximum(bit_length - _SUB_BITS, 1)
        index = np.where(us < _SUB, us, _SUB + (shift - 1) * _HALF + (us >> shift) - _HALF)
        self.counts += np.bincount(index, minlength=_BUCKETS)
        self.total_us += int(us.sum())

    def to_sparse(self) -> dict[int, int]:
        return {int(i): int(self.counts[i]) for i in np.flatnonzero(self.counts)}

    def merge_sparse(self, sparse: dict[int, int], total_us: int) -> None:
        for index, count in sparse.items():
            self.counts[index] += count
        self.total_us += total_us

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def percentile(self, fraction: float) -> float | None:
        """Latency in microseconds at `fraction` (0..1) of the samples, or None when empty."""
        total = self.count
        if not total:
            return None
        rank = max(1, round(fraction * total))
        index = int(np.searchsorted(np.cumsum(self.counts), rank))
        return _bucket_value(index)

    def summary_ms(self) -> dict[str, float | int | None]:
        """Mean, p50/p99/p99.9 and max in milliseconds, plus the sample count."""
        total = self.count

        def ms(us: float | None) -> float | None:
            return None if us is None else round(us / 1000, 3)

        return {
            "latency_samples": total,
            "latency_mean_ms": ms(self.total_us / total) if total else None,
            "latency_p50_ms": ms(self.percentile(0.50)),
            "latency_p99_ms": ms(self.percentile(0.99)),
            "latency_p999_ms": ms(self.percentile(0.999)),
            "latency_max_ms": ms(self.percentile(1.0)),
        }


# ---------------------------------------------------------------------------- /proc


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (after the parenthesised command name)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, in seconds (0 when it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def system_seconds(pid: int) -> float:
    """stime of one process (its CPU in the kernel), in seconds (0 when it is gone)."""
    fields = _stat_fields(pid)
    return 0.0 if fields is None else int(fields[12]) / CLOCK_TICKS


def process_tree(pid: int) -> list[int]:
    """`pid` and all its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in process_tree(pid))


def tree_system_seconds(pid: int) -> float:
    return sum(system_seconds(p) for p in process_tree(pid))


def write_calls(pid: int) -> int:
    """The write system calls (write, writev, ...) one process made (0 when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in text.splitlines() if line.startswith("syscw")), 0)


def tree_write_calls(pid: int) -> int:
    return sum(write_calls(p) for p in process_tree(pid))


def rss_bytes(pid: int) -> int:
    """VmRSS of one process in bytes (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss_bytes(pid: int) -> int:
    return sum(rss_bytes(p) for p in process_tree(pid))


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (from /proc/stat, idle and iowait excluded)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLOCK_TICKS


def foreign_cpu_share(exclude_pids: list[int], window_s: float = 1.0) -> float:
    """Cores kept busy over `window_s` by anything but the trees of `exclude_pids` (0s ignored)."""

    def excluded_cpu() -> float:
        return sum(tree_cpu_seconds(pid) for pid in exclude_pids if pid)

    machine, excluded = machine_busy_seconds(), excluded_cpu()
    time.sleep(window_s)
    return (machine_busy_seconds() - machine - (excluded_cpu() - excluded)) / window_s


def settled_tree_rss(pid: int, max_wait_s: float, tolerance: int = 1 << 20) -> int:
    """The tree's RSS once it changes by less than `tolerance` over a second (or at timeout).

    Freed memory (a queue deleted by the previous run, a garbage collection) goes back to
    the OS with some delay; reading RSS before it settles skews a before/after delta.
    """
    deadline = time.monotonic() + max_wait_s
    last = tree_rss_bytes(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        current = tree_rss_bytes(pid)
        if abs(current - last) < tolerance:
            return current
        last = current
    return last


# ---------------------------------------------------------------------------- RabbitMQ API


def rabbitmq_vm_memory(api_url: str) -> int:
    """Memory the Erlang VM of the first node has allocated (`erlang:memory(total)`), in bytes.

    `api_url` is the management API base with credentials, e.g. http://guest:guest@host:15672.
    Unlike RSS this drops when a queue is deleted: beam keeps freed carriers mapped, so RSS
    deltas after an earlier large queue read too low (even negative).
    """
    node = _api_get(api_url, "/api/nodes")[0]["name"]
    memory = _api_get(api_url, f"/api/nodes/{urllib.parse.quote(node)}/memory")["memory"]
    return int(memory["total"]["erlang"])


def _api_get(api_url: str, path: str) -> Any:
    parts = urllib.parse.urlsplit(api_url)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}"
    user, password = parts.username or "guest", parts.password or "guest"
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(base + path, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)
