"""The wall clock as queues count time: milliseconds since the epoch.

Theory of operation: a queue's machine never reads a clock; its host passes the time in
(`Meta.now_ms`, message TTLs, x-expires, the queue's timer), read here. A module of its own
so that the release build compiles it (setup.py): the classic host reads it on every
publish, and a compiled caller calling a Python function paid a Python frame for it.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
