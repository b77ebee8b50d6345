"""A queue machine's snapshot form (`warren.queue.snapshot`); the queue model test also
snapshots and restores its machine as one of its random steps."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from tests.unit.queue.snapshot_state import SENDER, rich_machine
from warren.amqp.content import Message
from warren.errors import SoftError
from warren.queue import (
    Checkout,
    Enqueue,
    Got,
    Meta,
    QueueMachine,
    Refused,
    Rejected,
    Sequenced,
    snapshot,
)

DATA = Path(__file__).parent / "data"


def test_raft_indexes_come_back_as_they_were_and_delivery_goes_on_in_order() -> None:
    machine = QueueMachine("q")
    for index in range(10, 20):
        machine.apply(Meta(0), Enqueue(index, 128, ttl_ms=1000 if index % 2 else None))
    machine.apply(Meta(1), Checkout("c", "ch", prefetch_count=3))
    restored = snapshot.loads(snapshot.dumps(machine))
    assert [e.message for e in restored.held_entries()] == [
        e.message for e in machine.held_entries()
    ]
    assert restored.unacked_msg_ids() == machine.unacked_msg_ids() == [1, 2, 3]
    assert restored.timer_at_ms == machine.timer_at_ms
    _reply, later = restored.apply(Meta(2000), Checkout("d", "ch2", prefetch_count=10))
    assert [type(e).__name__ for e in later].count("Deliver") == 3  # 4..9, odd ones expired


def test_every_part_of_the_state_comes_back() -> None:
    machine = rich_machine()
    data = snapshot.dumps(machine)
    restored = snapshot.loads(data)
    assert snapshot.dumps(restored) == data
    replies = restored._senders[SENDER].replies
    assert replies[9] == Rejected() and replies[16] is True and replies[14] == 1
    got = replies[12]
    assert isinstance(got, Got) and (got.entry.msg_id, got.remaining) == (1, 4)
    refused = replies[15]
    assert isinstance(refused, Refused) and isinstance(refused.error, SoftError)
    assert refused.error.text == "ACCESS_REFUSED - queue 'qq' in vhost '/v' in exclusive use"
    assert restored.unacked_msg_ids() == machine.unacked_msg_ids()
    assert [d.entry.msg_id for d in restored.dead_letters_in_flight()] == [
        d.entry.msg_id for d in machine.dead_letters_in_flight()
    ]


def test_whole_messages_come_back_whole() -> None:
    """A machine restored from a version 1 snapshot holds `Message`s (module doc, point 2)."""
    machine = rich_machine(whole_messages=True)
    restored = snapshot.loads(snapshot.dumps(machine))

    def fields(queue: QueueMachine) -> list[tuple[str, str, bytes, bytes]]:
        messages = [e.message for e in queue.held_entries()]
        assert messages and all(isinstance(m, Message) for m in messages)
        return [(m.exchange, m.routing_key, m.properties_raw, m.body) for m in messages]  # type: ignore[union-attr]

    assert fields(restored) == fields(machine)


def test_names_that_are_not_utf8_come_back_as_they_came() -> None:
    """Point 2: AMQP allows any bytes in an exchange name or routing key; the broker holds
    them with lone surrogates, which a MessagePack str cannot carry: such a name is bin."""
    odd = b"k\xff\xfe".decode("utf-8", "surrogateescape")
    machine = QueueMachine("qq")
    for exchange, routing_key in ((odd, odd + ".é"), ("ex", "é")):
        message = Message(exchange, routing_key, b"\x00\x00", b"hi")
        machine.apply(Meta(1), Sequenced(SENDER, 1 if exchange == "ex" else 2, Enqueue(message, 2)))
    data = snapshot.dumps(machine)
    restored = snapshot.loads(data)
    held = [(e.message.exchange, e.message.routing_key) for e in restored.held_entries()]  # type: ignore[union-attr]
    assert held == [(odd, odd + ".é"), ("ex", "é")]
    assert b"\xc4\x03k\xff\xfe" in data  # bin 8 of the bytes that came


def test_a_snapshot_of_whole_messages_written_before_reads_as_it_did() -> None:
    """`data/snapshot-f1-whole.bin` is `rich_machine(whole_messages=True)` as `dumps`
    wrote it at 1d4e2eb, every name a str."""
    written = (DATA / "snapshot-f1-whole.bin").read_bytes()
    expected = rich_machine(whole_messages=True)
    assert snapshot.dumps(snapshot.loads(written)) == written == snapshot.dumps(expected)


def test_the_layout_is_the_documented_one() -> None:
    data = snapshot.dumps(QueueMachine("q"))
    assert data[:1] == b"\x01"
    record = msgspec.msgpack.decode(data[1:])
    assert record[:2] == ["q", "/"] and len(record) == 26


@pytest.mark.parametrize("version", [1, 2])
def test_what_earlier_releases_pickled_is_read_whole(version: int) -> None:
    """`data/snapshot-v1.pickle` is `rich_machine(whole_messages=True)` pickled (machine
    version 1), `snapshot-v2.pickle` `rich_machine()` as `snapshot.dumps` wrote it at
    a1ce253 (machine version 2): both come back as the same state."""
    written = (DATA / f"snapshot-v{version}.pickle").read_bytes()
    assert written[0] == 0x80
    expected = rich_machine(whole_messages=version == 1)
    assert snapshot.dumps(snapshot.loads(written)) == snapshot.dumps(expected)


def test_unknown_or_broken_snapshots_are_refused() -> None:
    with pytest.raises(snapshot.SnapshotError, match="unknown format 0x02"):
        snapshot.loads(b"\x02")
    with pytest.raises(snapshot.SnapshotError, match="malformed"):
        snapshot.loads(b"\x01\x91")
