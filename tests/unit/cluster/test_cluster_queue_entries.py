"""A quorum queue's Raft entries: every command round-trips, the layout is pinned, and the
pickles of earlier releases are still read (`warren.cluster.queue_entries`)."""

from __future__ import annotations

import pickle

import msgspec
import pytest

from warren.amqp.content import Message
from warren.cluster import queue_entries
from warren.model.settings import DeadLetterStrategy, Overflow, QueueSettings
from warren.queue import (
    Cancel,
    Checkout,
    Command,
    Configure,
    Discard,
    Enqueue,
    Get,
    Purge,
    Return,
    Sequenced,
    Settle,
    SettleDeadLetter,
    Tick,
    Touch,
)

KEY = ("rabbit@a", "3f2a", 4)
SETTINGS = QueueSettings(
    max_length=10,
    overflow=Overflow.REJECT_PUBLISH,
    dead_letter_exchange="dlx",
    dead_letter_strategy=DeadLetterStrategy.AT_LEAST_ONCE,
)
COMMANDS: list[Command] = [
    Checkout(KEY, KEY, prefetch_count=10, no_ack=False, exclusive=True, priority=-2),
    Cancel(KEY, requeue=True),
    Settle([1, 2, 3]),
    Return([4]),
    Discard([5, 6]),
    Get(no_ack=True),
    Get(no_ack=False, holder=KEY),
    SettleDeadLetter([7]),
    Purge(),
    Touch(),
    Tick(),
    Configure(SETTINGS),
]


def message(body: bytes = b"x" * 128) -> Message:
    return Message("ex", "rk.é", b"\x10\x00\x02", body)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: type(command).__name__)
def test_every_command_comes_back_equal(command: Command) -> None:
    data = queue_entries.encode(Sequenced(KEY, 9, command))
    assert data[0] == queue_entries.FORMAT
    assert queue_entries.decode(data) == Sequenced(KEY, 9, command)


def test_a_publish_comes_back_with_its_message_and_is_small() -> None:
    publish = Enqueue(message(), 128, ttl_ms=5000, priority=3)
    data = queue_entries.encode(Sequenced(KEY, 1, publish))
    decoded = queue_entries.decode(data)
    assert isinstance(decoded, Sequenced) and isinstance(decoded.command, Enqueue)
    copy = queue_entries.message(decoded.command.message)
    original = publish.message
    assert isinstance(original, Message)
    assert (copy.exchange, copy.routing_key, copy.properties_raw, copy.body, copy.route) == (
        original.exchange,
        original.routing_key,
        original.properties_raw,
        original.body,
        original.route,
    )
    assert (decoded.command.size_bytes, decoded.command.ttl_ms, decoded.command.priority) == (
        128,
        5000,
        3,
    )
    assert len(data) < 190


def test_the_layout_is_the_documented_one() -> None:
    """Version 1 (module doc, point 2): a format byte, then a MessagePack array."""
    data = queue_entries.encode(Sequenced(KEY, 7, Settle([1, 2])))
    assert data[:1] == b"\x01"
    assert msgspec.msgpack.decode(data[1:]) == [list(KEY), 7, [4, [1, 2]]]
    publish = Enqueue(Message("", "q", b"\x00\x00", b"hi"), 2)
    data = queue_entries.encode(Sequenced(KEY, 8, publish))
    assert msgspec.msgpack.decode(data[1:]) == [
        list(KEY),
        8,
        [1, ["", "q", b"\x00\x00", b"hi"], 2, None, 0],
    ]


def test_the_proposer_applies_the_command_it_still_holds() -> None:
    publish = Enqueue(message(), 128)
    sent: dict[int, Command] = {5: publish}
    data = queue_entries.encode(Sequenced(KEY, 5, publish))
    other = queue_entries.decode(data, ("rabbit@b", "77", 1), sent)
    assert isinstance(other, Sequenced) and other.command is not publish and sent
    mine = queue_entries.decode(data, KEY, sent)
    assert isinstance(mine, Sequenced) and mine.command is publish and not sent


@pytest.mark.interpreted  # compiled, the commands cannot be unpickled
def test_what_earlier_releases_pickled_is_read_through_legacy() -> None:
    numbered = Sequenced(KEY, 3, Cancel(KEY, requeue=True))
    assert queue_entries.decode(pickle.dumps(numbered, pickle.HIGHEST_PROTOCOL)) == numbered
    unstamped = (1_700_000_000_000, Settle([1]))  # Warren 0.1.0: (proposer's time, command)
    assert queue_entries.decode(pickle.dumps(unstamped, pickle.HIGHEST_PROTOCOL)) == unstamped


def test_unknown_or_broken_entries_are_refused() -> None:
    with pytest.raises(queue_entries.EntryError, match="unknown format 0x7f"):
        queue_entries.decode(b"\x7f\x00")
    with pytest.raises(queue_entries.EntryError, match="malformed"):
        queue_entries.decode(b"\x01\x93\xa1")
