"""A queue machine with something in every part of its state, for the snapshot tests
(and for writing `data/snapshot-v*.pickle` with the release that wrote pickles)."""

from __future__ import annotations

from warren.amqp.content import Message
from warren.model.settings import DeadLetterStrategy, Overflow, QueueSettings
from warren.queue import (
    Cancel,
    Checkout,
    Command,
    Discard,
    Enqueue,
    Get,
    Meta,
    QueueMachine,
    Return,
    Sequenced,
)

SENDER = ("rabbit@a", "5e1f", 1)
CONSUMER = ("rabbit@a", "5e1f", 2)
OTHER = ("rabbit@b", "77aa", 1)
GETTER = ("rabbit@a", "5e1f", 0)
SETTINGS = QueueSettings(
    max_length=8,
    overflow=Overflow.REJECT_PUBLISH,
    max_priority=2,
    dead_letter_exchange="dlx",
    dead_letter_strategy=DeadLetterStrategy.AT_LEAST_ONCE,
    dead_letter_prefetch=1,
)


def rich_machine(whole_messages: bool = False) -> QueueMachine:
    """Ready, returned, unacked, fetched, held dead letters (waiting and out), deadlines
    (one stale), consumers of two priorities, an exclusive-free ring, and a sender's
    replies of every kind (msg_id, Rejected, Got, Refused, bool)."""
    machine = QueueMachine("qq", "/v", settings=SETTINGS)
    seq = 0

    def send(now_ms: int, command: Command, index: int | None = None) -> object:
        nonlocal seq
        seq += 1
        reply, _effects = machine.apply(Meta(now_ms, index=index), Sequenced(SENDER, seq, command))
        return reply

    for n in range(1, 10):  # the ninth is rejected (max-length 8, reject-publish)
        message: object = Message("ex", f"rk{n}", b"\x00\x00", bytes(n)) if whole_messages else n
        ttl = 50 if n in (2, 3) else None
        send(
            10,
            Enqueue(message, 10 * n, ttl_ms=ttl, priority=n % 3),
            index=None if whole_messages else 100 + n,
        )
    send(11, Checkout(CONSUMER, CONSUMER, prefetch_count=2, priority=1))
    send(11, Checkout(OTHER, OTHER, prefetch_count=1))
    send(12, Get(no_ack=False, holder=GETTER))
    send(13, Return([1]))
    send(14, Discard([machine.unacked_msg_ids()[-1]]))
    send(15, Checkout(("rabbit@b", "77aa", 9), OTHER, exclusive=True))  # refused: in use
    send(16, Cancel(OTHER))
    return machine
