"""A queue machine as bytes, for a replicated queue's Raft snapshots.

Theory of operation:
1. `dumps(machine)` and `loads(data)` are the only ways a snapshot is written and read.
   A quorum queue of a million messages is snapshotted whole, on the event loop, and
   pickling a million `Entry` objects takes seconds and holds a memo of every object
   pickled (about 240 bytes per entry at its peak, more than the entries themselves).
   So the entries go as columns instead: one `array` per field (msg_id, message, size,
   deadline, priority level, delivery count, live), in the order of the structure that
   holds them, pickled in-band as buffers (no copy), and the structures as runs of those
   columns. Everything else in the machine (settings, counters, consumers) is pickled as
   it is. A million entries take 34 MB and well under the time of pickling them.
2. Every entry is held by exactly one of: a priority level's ready deque or returned
   heap, the unacked map, the held dead letters. The deadline heap refers to entries held
   elsewhere, or to entries gone (stale tuples, skipped when they come up): it is written
   as (deadline, msg_id) pairs and its entries are found again by msg_id; a gone one
   comes back as a dead placeholder, which `QueueMachine` skips as it skips the original.
   A dead (killed) entry left in a ready deque and also held for dead-lettering comes
   back as two objects: the deque skips its copy, as it skipped the original.
3. Messages that are ints (a quorum queue's Raft indexes) go in an array too; any other
   kind (a snapshot of a machine holding `Message`s) in a list.
4. A snapshot of `MACHINE_VERSION` 1 was the pickled machine itself: `loads` returns it as
   it is.
"""

from __future__ import annotations

import pickle
from array import array
from collections import deque
from collections.abc import Collection, Iterator, Sequence
from dataclasses import fields
from operator import attrgetter
from typing import Any, Final, TypeAlias

from warren.queue.machine import MACHINE_VERSION, DeadLetter, Entry, QueueMachine, _Level

_NO_DEADLINE: Final = -1
# fields written by the columns rather than pickled as they are
_COLUMNED: Final = frozenset(
    {"_levels", "_deadlines", "_unacked", "_dead_letters_waiting", "_dead_letters_out"}
)
# the array type and the `Entry` attribute of each column, in order
_FIELDS: Final = (
    ("q", "msg_id"),
    ("q", "message"),  # a list instead when some message is not an int
    ("I", "size_bytes"),
    ("q", "expires_at_ms"),  # _NO_DEADLINE for None
    ("B", "level"),
    ("I", "delivery_count"),
    ("B", "live"),
)
_Columns: TypeAlias = list[object]


def dumps(machine: QueueMachine) -> bytes:
    plain = {f.name: getattr(machine, f.name) for f in fields(machine) if f.name not in _COLUMNED}
    levels = [(_columns(level.ready), _columns(level.returned)) for level in machine._levels]
    unacked = list(machine._unacked.values())
    waiting = machine._dead_letters_waiting
    out = list(machine._dead_letters_out.values())
    deadlines = machine._deadlines
    state = (
        plain,
        levels,
        (_columns([entry for entry, _ in unacked]), [consumer for _, consumer in unacked]),
        (_columns([dead.entry for dead in waiting]), [(d.reason, d.held) for d in waiting]),
        (_columns([dead.entry for dead in out]), [(d.reason, d.held) for d in out]),
        (array("q", [d[0] for d in deadlines]), array("q", [d[1] for d in deadlines])),
    )
    return pickle.dumps((MACHINE_VERSION, state), pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> QueueMachine:
    loaded = pickle.loads(data)
    if isinstance(loaded, QueueMachine):
        return loaded  # MACHINE_VERSION 1 (point 4)
    _version, state = loaded
    plain, levels, unacked, waiting, out, deadlines = state
    machine = QueueMachine(**plain)
    machine._levels = []
    for ready, returned in levels:
        level = _Level()
        level.ready = deque(_entries(ready))
        level.returned = _entries(returned)
        machine._levels.append(level)
    unacked_entries = _entries(unacked[0])
    machine._unacked = {
        entry.msg_id: (entry, consumer)
        for entry, consumer in zip(unacked_entries, unacked[1], strict=True)
    }
    machine._dead_letters_waiting = deque(_dead_letters(waiting))
    machine._dead_letters_out = {dead.entry.msg_id: dead for dead in _dead_letters(out)}
    machine._deadlines = _deadlines(machine, *deadlines)
    return machine


def _columns(entries: Collection[Entry]) -> _Columns:
    """One column per field of `_FIELDS`; arrays go as buffers, pickled without a copy."""
    ints = all(type(entry.message) is int for entry in entries)
    columns: list[object] = []
    for typecode, name in _FIELDS:
        values: Iterator[Any] = map(attrgetter(name), entries)
        if name == "message" and not ints:
            columns.append(list(values))
            continue
        if name == "expires_at_ms":
            values = (_NO_DEADLINE if value is None else value for value in values)
        columns.append(pickle.PickleBuffer(array(typecode, values)))
    return columns


def _entries(columns: _Columns) -> list[Entry]:
    decoded = [
        _column(typecode, column) for (typecode, _), column in zip(_FIELDS, columns, strict=True)
    ]
    result = []
    for msg_id, message, size, deadline, level, delivery_count, live in zip(*decoded, strict=True):
        expires_at_ms = None if deadline == _NO_DEADLINE else deadline
        entry = Entry(msg_id, message, size, expires_at_ms, level)
        entry.delivery_count = delivery_count
        entry.live = bool(live)
        result.append(entry)
    return result


def _column(typecode: str, column: object) -> Sequence[Any]:
    if isinstance(column, list):
        return column  # messages that are not ints
    values = array(typecode)
    values.frombytes(column)  # type: ignore[arg-type]
    return values


def _dead_letters(written: tuple[_Columns, list[tuple[str, bool]]]) -> list[DeadLetter]:
    columns, reasons = written
    return [
        DeadLetter(entry, reason, held)
        for entry, (reason, held) in zip(_entries(columns), reasons, strict=True)
    ]


def _deadlines(
    machine: QueueMachine, at_ms: array[int], msg_ids: array[int]
) -> list[tuple[int, int, Entry]]:
    """The deadline heap again, in the same order, with the entries held (point 2)."""
    if not at_ms:
        return []
    held: dict[int, Entry] = {}
    for level in machine._levels:
        for entry in (*level.ready, *level.returned):
            if entry.live and entry.expires_at_ms is not None:
                held[entry.msg_id] = entry
    for entry, _consumer in machine._unacked.values():
        if entry.expires_at_ms is not None:
            held[entry.msg_id] = entry
    heap = []
    for deadline, msg_id in zip(at_ms, msg_ids, strict=True):
        found = held.get(msg_id)
        if found is None:  # gone: skipped when it comes up, as the original was
            found = Entry(msg_id, None, 0, deadline, 0)
            found.live = False
        heap.append((deadline, msg_id, found))
    return heap
