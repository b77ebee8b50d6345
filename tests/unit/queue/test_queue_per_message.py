"""The classes made for every message write their `__init__` out (issue 19).

mypyc compiles the methods a class's source has, not the ones `dataclass` generates when
the module is imported: a generated `__init__` (its code's file is ``<string>``) runs as
interpreted bytecode even in the release build, once per publish or delivery. These
tests hold in a checkout and on a `make mypyc` build alike.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from warren.amqp.connection import Content
from warren.amqp.content import BasicProperties
from warren.amqp.methods import BasicPublish
from warren.queue import Deliver, Enqueue, Entry, Meta

PER_MESSAGE = [Meta, Enqueue, Deliver, Content, BasicProperties]


@pytest.mark.parametrize("cls", PER_MESSAGE, ids=lambda cls: cls.__name__)
def test_no_generated_init(cls: type) -> None:
    code = getattr(cls.__init__, "__code__", None)  # a compiled method has none
    assert code is None or code.co_filename != "<string>", f"{cls.__name__}: dataclass's"


def test_written_out_inits_keep_the_fields_and_defaults() -> None:
    entry = Entry(1, b"m", 1, None, 0)
    made = [
        Meta(5),
        Enqueue(b"m", 1),
        Deliver("c", entry),
        Content(1, BasicPublish(0, "x", "k", False, False), b"", b"body"),
        BasicProperties(),
    ]
    for value in made:
        for field in fields(value):
            assert hasattr(value, field.name), (type(value).__name__, field.name)
    assert made[0] == Meta(5, None, (), None, True)
    assert made[1] == Enqueue(b"m", 1, None, 0)
    assert made[3].route == b""
    assert BasicProperties(delivery_mode=2).delivery_mode == 2
    assert all(getattr(made[4], field.name) is None for field in fields(BasicProperties))
