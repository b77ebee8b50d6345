"""The figures the workers of one node share, so that its limits are the node's, not each
worker's: every worker's memory in use and client connections, in shared memory.

Theory of operation:
1. The supervisor makes the board (`Board.create`): a memfd of one slot per worker, two
   64-bit counts each (memory in use, connections), that every worker inherits
   (``BOARD_VARIABLE`` names its descriptor, `Board.inherited`) and maps. A worker writes
   its own slot only; anyone reads them all. The supervisor zeroes a worker's slot once
   it exited (`clear`): what it held is gone with it.
2. ``connection_max`` is the node's: a worker admits a connection (`admit`) only while
   the slots add up to less than the limit, and counts it in its slot in the same step,
   under a POSIX record lock on the memfd (``lockf``: one holder per process), so two
   workers accepting at once cannot both take the last place. A connection handed from
   one worker to another was admitted where it was accepted: the worker taking it over
   counts it without the check (`count`), the one handing it uncounts it (`left`).
3. The memory alarm is the node's: each worker's resource monitor writes what it uses
   and compares the sum over the workers with the watermark (`report_memory`), so every
   worker raises and clears the alarm on the node's figure, within one check interval of
   the others (`warren.runtime.alarms`).
It does no other I/O: the memfd is made and mapped here, never read or written as a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from typing import Final

BOARD_VARIABLE: Final = "WARREN_WORKER_BOARD"  # set by the supervisor: the memfd's descriptor
_SLOT: Final = struct.Struct("=qq")  # memory in use (bytes), connections
_MEMORY: Final = 0
_CONNECTIONS: Final = 1


class Board:
    """One node's shared figures (module doc), as worker `index` sees them (None: the
    supervisor's view, which only clears slots)."""

    def __init__(self, fd: int, workers: int, index: int | None = None) -> None:
        self.fd = fd
        self.workers = workers
        self.index = index
        self._memory = mmap.mmap(fd, workers * _SLOT.size)

    @classmethod
    def create(cls, workers: int) -> Board:
        """The supervisor's: a zeroed board, its descriptor inheritable."""
        fd = os.memfd_create("warren-board")  # close-on-exec: passed on with pass_fds
        os.ftruncate(fd, workers * _SLOT.size)
        return cls(fd, workers)

    @classmethod
    def inherited(cls, environ: Mapping[str, str], workers: int, index: int) -> Board | None:
        """Worker `index`'s view of the board its supervisor made; None on a node of one."""
        value = environ.get(BOARD_VARIABLE)
        return None if not value else cls(int(value), workers, index)

    def close(self) -> None:
        self._memory.close()
        os.close(self.fd)

    # --- connections (module doc, 2) ----------------------------------------------------------

    def admit(self, limit: int) -> bool:
        """Whether the node takes one more connection (`limit` 0: no limit); counted here
        if so."""
        with self._locked():
            if limit and self._total(_CONNECTIONS) >= limit:
                return False
            self._add(_CONNECTIONS, 1)
            return True

    def count(self) -> None:
        """A connection admitted by another worker, handed here."""
        with self._locked():
            self._add(_CONNECTIONS, 1)

    def left(self) -> None:
        with self._locked():
            self._add(_CONNECTIONS, -1)

    def connections(self) -> int:
        return self._total(_CONNECTIONS)

    # --- memory (module doc, 3) ---------------------------------------------------------------

    def report_memory(self, used_bytes: int) -> int:
        """Write this worker's memory in use; the node's (every worker's added up)."""
        with self._locked():
            self._set(_MEMORY, used_bytes)
            return self._total(_MEMORY)

    def memory(self) -> int:
        return self._total(_MEMORY)

    # --- the slots ----------------------------------------------------------------------------

    def clear(self, index: int) -> None:
        """Worker `index` exited: nothing of it counts any more (the supervisor's)."""
        with self._locked():
            _SLOT.pack_into(self._memory, index * _SLOT.size, 0, 0)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)

    def _total(self, field: int) -> int:
        return sum(
            _SLOT.unpack_from(self._memory, index * _SLOT.size)[field]
            for index in range(self.workers)
        )

    def _set(self, field: int, value: int) -> None:
        assert self.index is not None, "the supervisor writes no figures"
        slot = list(_SLOT.unpack_from(self._memory, self.index * _SLOT.size))
        slot[field] = value
        _SLOT.pack_into(self._memory, self.index * _SLOT.size, *slot)

    def _add(self, field: int, delta: int) -> None:
        assert self.index is not None, "the supervisor writes no figures"
        value = _SLOT.unpack_from(self._memory, self.index * _SLOT.size)[field]
        self._set(field, value + delta)
