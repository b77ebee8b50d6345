"""`warren.legacy`: records Warren 0.3 pickled (pure Python) read into today's classes,
which the release build compiles with mypyc (setup.py's `COMPILED`); `make mypyc` runs
these on the compiled classes, the plain test run on the pure ones.

The bytes are what pickle writes for these objects from pure classes, protocol 5, as
0.3 wrote a quorum queue's snapshot and Raft entries (`tests/fixtures/legacy-data.tar.gz`
holds whole data directories of it, `tests/cluster/test_legacy_data.py` starts on them).
"""

from __future__ import annotations

import pytest

from warren import legacy
from warren.queue import machine
from warren.queue.machine import Sequenced, Settle, _Sender

# a `_Sender` (slotted, its `__init__` wants `now_ms`): NEWOBJ, then BUILD (None, slots)
SENDER = (
    b"\x80\x05\x95\x86\x00\x00\x00\x00\x00\x00\x00\x8c\x14warren.queue.machine\x8c\x07_Sender"
    b"\x93)\x81N}(\x8c\x05above\x8f(K\x04\x90\x8c\napplied_toK\x02\x8c\x07last_ms\x8a\x06"
    b"\xe7\xe0\x00\x1a\xa2\x01\x8c\x07replies\x8c\x0bcollections\x8c\x0bOrderedDict\x93)R("
    b"K\x01NK\x02\x88K\x04K\x01uu\x86b."
)
# `Sequenced(("a", "3736ce3b", 1), 7, Settle([1, 2]))`: frozen slotted dataclasses, each
# NEWOBJ then BUILD with the list of its fields
SEQUENCED_SETTLE = (
    b"\x80\x05\x95S\x00\x00\x00\x00\x00\x00\x00\x8c\x14warren.queue.machine\x94\x8c\tSequenced"
    b"\x93)\x81](\x8c\x01a\x8c\x083736ce3bK\x01\x87K\x07h\x00\x8c\x06Settle\x93)\x81]](K\x01K"
    b"\x02eabeb."
)
COMPILED = machine.__file__ is not None and not machine.__file__.endswith(".py")


def test_an_object_whose_init_wants_arguments_comes_back_whole() -> None:
    """Compiled, `_Sender.__new__` runs its `__init__`, which wants `now_ms`."""
    sender = legacy.loads(SENDER)
    assert isinstance(sender, _Sender)
    assert (sender.applied_to, sender.above, sender.last_ms) == (2, {4}, 1_795_732_594_919)
    assert dict(sender.replies) == {1: None, 2: True, 4: 1}
    assert sender.applied(4) and not sender.applied(3)
    sender.record(3, None)  # its compiled methods find every attribute
    assert (sender.applied_to, sender.above) == (4, set())


def test_a_frozen_dataclass_takes_its_fields_in_order() -> None:
    """Compiled, mypyc's own `__setstate__` would take a dict and set nothing from a list."""
    assert legacy.loads(SEQUENCED_SETTLE) == Sequenced(("a", "3736ce3b", 1), 7, Settle([1, 2]))


@pytest.mark.skipif(not COMPILED, reason="a pure object may lack an attribute, as in 0.3")
def test_a_compiled_object_is_refused_rather_than_half_made() -> None:
    """Made without its `__init__`, it takes only its own attributes and must get all of
    them: its compiled methods read and replace them without checking (a pure one would
    fail later with AttributeError, as in 0.3)."""
    with pytest.raises(legacy.LegacyDataError, match=r"_Sender pickled with \['unknown'\]"):
        legacy.loads(SENDER.replace(b"\x8c\x07last_ms", b"\x8c\x07unknown"))
    with pytest.raises(legacy.LegacyDataError, match=r"_Sender pickled without \['last_ms'\]"):
        legacy.loads(SENDER.replace(b"\x8c\x07last_ms", b"\x8c\x07replies"))
