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
    data = queue_entries.encode(KEY, [(9, command)])
    assert data[0] == queue_entries.BATCH
    assert queue_entries.decode(data) == [Sequenced(KEY, 9, command)]


def test_a_batch_comes_back_in_order_with_its_numbers() -> None:
    """Point 1: the commands a host sent in one turn, numbers not necessarily in a row
    (a command sent again keeps its number)."""
    commands = [(3, Settle([1])), (10, Enqueue(message(), 128)), (11, Tick())]
    data = queue_entries.encode(KEY, commands)
    assert queue_entries.batched(data)
    decoded = queue_entries.decode(data)
    assert [(n.seq, type(n.command)) for n in decoded if isinstance(n, Sequenced)] == [
        (3, Settle),
        (10, Enqueue),
        (11, Tick),
    ]


def test_a_publish_comes_back_with_its_message_and_is_small() -> None:
    publish = Enqueue(message(), 128, ttl_ms=5000, priority=3)
    data = queue_entries.encode(KEY, [(1, publish)])
    (decoded,) = queue_entries.decode(data)
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
    many = queue_entries.encode(KEY, [(seq, publish) for seq in range(100)])
    assert len(many) < 100 * 170  # the sender once for all


def test_names_that_are_not_utf8_come_back_as_the_bytes_that_came() -> None:
    """Point 2: AMQP allows any bytes in a routing key or exchange name; the broker holds
    them with lone surrogates, which a MessagePack str cannot carry: such a name is bin."""
    odd = b"k\xff\xfe".decode("utf-8", "surrogateescape")
    publish = Enqueue(Message(odd, odd + ".é", b"\x00\x00", b"hi"), 2)
    data = queue_entries.encode(KEY, [(1, publish)])
    assert msgspec.msgpack.decode(data[1:])[2][0][1][:2] == [b"k\xff\xfe", b"k\xff\xfe.\xc3\xa9"]
    (decoded,) = queue_entries.decode(data)
    assert isinstance(decoded, Sequenced) and isinstance(decoded.command, Enqueue)
    copy = queue_entries.message(decoded.command.message)
    assert (copy.exchange, copy.routing_key) == (odd, odd + ".é")


def test_the_layout_is_the_documented_one() -> None:
    """Version 2 (module doc, point 2): a format byte, then a MessagePack array."""
    data = queue_entries.encode(KEY, [(7, Settle([1, 2]))])
    assert data[:1] == b"\x02"
    assert msgspec.msgpack.decode(data[1:]) == [list(KEY), [7], [[4, [1, 2]]]]
    publish = Enqueue(Message("", "q", b"\x00\x00", b"hi"), 2)
    data = queue_entries.encode(KEY, [(8, publish), (9, Tick())])
    assert msgspec.msgpack.decode(data[1:]) == [
        list(KEY),
        [8, 9],
        [[1, ["", "q", b"\x00\x00", b"hi"], 2, None, 0], [11]],
    ]


def test_version_1_entries_are_still_read_as_a_batch_of_one() -> None:
    """Point 3: what the release before wrote, one command per entry."""
    data = b"\x01" + msgspec.msgpack.encode([list(KEY), 7, [4, [1, 2]]])
    assert not queue_entries.batched(data)
    assert queue_entries.decode(data) == [Sequenced(KEY, 7, Settle([1, 2]))]
    data = b"\x01" + msgspec.msgpack.encode(
        [list(KEY), 8, [1, ["", "q", b"\x00", b"hi"], 2, None, 0]]
    )
    (numbered,) = queue_entries.decode(data)
    assert isinstance(numbered, Sequenced) and isinstance(numbered.command, Enqueue)
    assert queue_entries.message(numbered.command.message).body == b"hi"


def test_the_proposer_applies_the_commands_it_still_holds() -> None:
    publish = Enqueue(message(), 128)
    settle = Settle([1])
    sent: dict[int, Command] = {5: publish, 6: settle}
    data = queue_entries.encode(KEY, [(5, publish), (6, settle)])
    other = queue_entries.decode(data, ("rabbit@b", "77", 1), sent)
    assert isinstance(other[0], Sequenced) and other[0].command is not publish and sent
    mine = queue_entries.decode(data, KEY, sent)
    assert [n.command for n in mine if isinstance(n, Sequenced)] == [publish, settle]
    assert isinstance(mine[0], Sequenced) and mine[0].command is publish and not sent


def test_a_proposer_that_lost_one_of_its_commands_decodes_them_all() -> None:
    publish = Enqueue(message(), 128)
    sent: dict[int, Command] = {5: publish}  # 6 was answered already (failed, sent again)
    data = queue_entries.encode(KEY, [(5, publish), (6, Settle([1]))])
    decoded = queue_entries.decode(data, KEY, sent)
    assert decoded[1] == Sequenced(KEY, 6, Settle([1]))


def test_a_position_is_the_index_and_the_slot() -> None:
    """Point 5: slot 0 is the index itself (what the release before kept)."""
    assert queue_entries.position(12345, 0) == 12345
    held = queue_entries.position(2**40 + 3, queue_entries.BATCH_MAX - 1)
    assert queue_entries.index_of(held) == 2**40 + 3
    assert queue_entries.slot_of(held) == queue_entries.BATCH_MAX - 1
    assert held < 2**63  # fits the snapshot's int64 columns


@pytest.mark.interpreted  # pickles here: compiled classes write another form than 0.3
def test_what_earlier_releases_pickled_is_read_through_legacy() -> None:
    numbered = Sequenced(KEY, 3, Cancel(KEY, requeue=True))
    assert queue_entries.decode(pickle.dumps(numbered, pickle.HIGHEST_PROTOCOL)) == [numbered]
    unstamped = (1_700_000_000_000, Settle([1]))  # Warren 0.1.0: (proposer's time, command)
    assert queue_entries.decode(pickle.dumps(unstamped, pickle.HIGHEST_PROTOCOL)) == [unstamped]


def test_unknown_or_broken_entries_are_refused() -> None:
    with pytest.raises(queue_entries.EntryError, match="unknown format 0x7f"):
        queue_entries.decode(b"\x7f\x00")
    with pytest.raises(queue_entries.EntryError, match="malformed"):
        queue_entries.decode(b"\x01\x93\xa1")
    with pytest.raises(queue_entries.EntryError, match="malformed"):
        queue_entries.decode(b"\x02\x93\xa1")
    uneven = b"\x02" + msgspec.msgpack.encode([list(KEY), [1, 2], [[11]]])
    with pytest.raises(queue_entries.EntryError, match="a number for every command"):
        queue_entries.decode(uneven)
