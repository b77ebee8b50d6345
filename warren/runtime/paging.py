"""Bodies of long durable queues live in the message log, not in memory.

Theory of operation:
1. A persistent message in a durable queue is written whole to the log by the
   `QueueJournal`. Once that record is durable, the body the queue holds is a copy: the queue
   may let it go and read it back (one positioned read, `QueueJournal.read`) when it hands
   the message out. The queue machine never looks inside `Entry.message`, so the runtime
   may hold a `PageSlot` there instead of the `Message`.
2. Which messages: one that arrives while its queue already holds `queue_resident_messages_max`
   ready messages or `queue_resident_bytes_max` ready bytes is enqueued inside a `PageSlot`
   (`admit`). So the head of a long queue stays in memory and its tail goes to disk; once
   the queue is short again, new arrivals stay in memory. Transient messages always stay in
   memory (they are never written, as in RabbitMQ), and so do non-durable queues.
3. `Pager` empties a slot (``slot.message = None``) after the group commit that makes its
   record durable (it waits on the `Durability` driver as a publisher confirm does). Until
   then the record's bytes sit in the log's write buffer, so letting go earlier would save
   nothing.
4. Everything that hands a message out (a delivery, basic.get, dead-lettering) first calls
   `resident`, which puts the `Message` back into the entry, reading the log if the slot is
   empty. An unacked message therefore stays in memory until it is settled, like the
   deliveries a prefetch window allows.
5. Recovery restores messages without their bodies (`PAGED_OUT`), so a backlog larger than
   memory comes back with its index only; each body is read when it is handed out.

Memory then is a small index per message (the machine's `Entry` and the journal's ledger
entry), whatever the size of the bodies.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

from warren.amqp.content import PERSISTENT, Message, delivery_mode
from warren.queue import Enqueue, Entry

if TYPE_CHECKING:
    from warren.runtime.broker import QueueHost


class PageSlot:
    """A queue's hold on a message body that may go to disk: `message` is None once it did."""

    __slots__ = ("message",)

    def __init__(self, message: Message | None) -> None:
        self.message = message


# every message recovered from the log starts here; `resident` replaces it, never fills it
PAGED_OUT: Final = PageSlot(None)


def admit(host: QueueHost, command: Enqueue) -> Enqueue:
    """The command a durable queue's host applies: the message in a slot when the queue is
    already long and the message persistent (rule 2), else the command as it is."""
    machine = host.machine
    config = host.broker.config
    if (
        machine.ready_count < config.queue_resident_messages_max
        and machine.ready_bytes < config.queue_resident_bytes_max
    ):
        return command
    message = command.message
    assert isinstance(message, Message)
    if delivery_mode(message.properties_raw) != PERSISTENT:
        return command
    return Enqueue(PageSlot(message), command.size_bytes, command.ttl_ms, command.priority)


def resident(host: QueueHost, entry: Entry) -> Message:
    """The entry's message in memory, read back from the log if it was paged out."""
    slot = entry.message
    if type(slot) is Message:
        return slot
    assert isinstance(slot, PageSlot)
    message = slot.message
    if message is None:
        durability = host.broker.durability
        key = host.journal_key
        assert durability is not None and key is not None, "paged out, yet not durable"
        record = durability.journal.read(key, entry.msg_id)
        message = Message(record.exchange, record.routing_key, record.properties_raw, record.body)
    entry.message = message
    return message


class Pager:
    """Empties slots once their records are durable (rule 3)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: deque[tuple[int, PageSlot]] = deque()  # (log sequence, slot), in order

    def hold(self, sequence: int, slot: PageSlot) -> bool:
        """Page `slot` out once log record `sequence` is durable; True if the caller must
        have `durable_reached` called (nothing was held before)."""
        self._held.append((sequence, slot))
        return len(self._held) == 1

    def durable_reached(self, durable_sequence: int) -> bool:
        held = self._held
        while held and held[0][0] <= durable_sequence:
            held.popleft()[1].message = None
        return bool(held)
