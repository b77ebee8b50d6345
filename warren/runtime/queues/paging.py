"""Message bodies out of memory: long durable queues, and any queue under memory pressure.

Theory of operation:
1. A persistent message in a durable queue is written whole to the log by the
   `QueueJournal`. Once that record is durable, the body the queue holds is a copy: the queue
   may let it go and read it back (`QueueJournal.read`) when it hands the message out. A
   long queue's records lie one after the other in the log, so the log reads a run of them
   with one ``pread`` and serves the next ones from that block (`warren.storage.log`,
   rule 7); each record is still checked as it is read back. The queue machine never
   looks inside `Entry.message`, so the runtime may hold a `PageSlot` or a `PageRef` there
   instead of the `Message`.
2. Which messages (`admit`):
   - a persistent message arriving in a durable queue that already holds
     `queue_resident_messages_max` ready messages or `queue_resident_bytes_max` ready
     bytes is enqueued inside a `PageSlot`: the head of a long queue stays in memory, its
     tail goes to the log; once the queue is short again, new arrivals stay in memory;
   - while the node is under memory pressure (memory use above
     `vm_memory_high_watermark_paging_ratio` of the high watermark, see
     `warren.runtime.alarms`), any message arriving in a queue that already holds
     `PRESSURE_RESIDENT_MESSAGES` ready messages leaves memory at once: persistent ones in
     durable queues as above, all others (transient messages, non-durable queues) to the
     node's scratch `PageStore`, which never survives a restart, as RabbitMQ pages
     transient messages only when memory runs short.
3. The durability empties a `PageSlot` (``slot.message = None``) as soon as it has appended
   the message's record: until the next group commit that record is read back from the
   log's write buffer (`Log.read_record`), so nothing waits for the sync to let the body go.
   A scratch page is written at once and the entry holds only its `PageRef`.
4. Everything that hands a message out (a delivery, basic.get, dead-lettering) first calls
   `resident`, which puts the `Message` back into the entry, reading the log or the scratch
   page (and freeing that page). A quorum queue's entry holds the Raft index of the entry
   that enqueued it (an int): its host reads that back (`BodyReader.read_body`) and the
   machine's entry keeps the index. An unacked message therefore stays in memory until it is
   settled, like the deliveries a prefetch window allows. A scratch page whose message
   leaves otherwise (dropped, purged, its queue deleted) is freed by `release`.
5. Recovery restores messages without their contents (`PAGED_OUT`), so a backlog larger
   than memory comes back with its index only; each message is read when it is handed out.

Memory then is a small index per message (the machine's `Entry` and the journal's ledger
entry or a `PageRef`), whatever the size of the bodies.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, Protocol, cast

from warren.amqp.content import Message
from warren.queue import Enqueue, Entry
from warren.storage.pages import PageRef

if TYPE_CHECKING:
    from warren.runtime.queues.host import QueueHost

# Under memory pressure a queue keeps this many ready messages in memory at most.
PRESSURE_RESIDENT_MESSAGES: Final = 64
_PAGE_HEAD: Final = struct.Struct(">BBI")  # exchange, routing key, properties lengths
_TEXT: Final = "surrogateescape"


class BodyReader(Protocol):
    """A host whose entries name their bodies by an index (a quorum queue's)."""

    def read_body(self, index: int) -> Message: ...


class PageSlot:
    """A queue's hold on a message body that may go to disk: `message` is None once it did."""

    __slots__ = ("message",)

    def __init__(self, message: Message | None) -> None:
        self.message = message


# every message recovered from the log starts here; `resident` replaces it, never fills it
PAGED_OUT: Final = PageSlot(None)


def admit(host: QueueHost, command: Enqueue) -> Enqueue:
    """The command a host applies: the message in a `PageSlot` or a scratch page when it
    should leave memory (rule 2), else the command as it is."""
    machine = host.machine
    broker = host.broker
    config = broker.config
    pressed = broker.memory_pressure and machine.ready_count >= PRESSURE_RESIDENT_MESSAGES
    if (
        not pressed
        and machine.ready_count < config.queue_resident_messages_max
        and machine.ready_bytes < config.queue_resident_bytes_max
    ):
        return command
    message = command.message
    assert isinstance(message, Message)
    if host.journal_key is not None and message.persistent:
        held: object = PageSlot(message)
    elif pressed and broker.durability is not None:
        held = broker.durability.pages.write(encode_page(message))
        host.scratch_paged = True
    else:
        return command
    return Enqueue(held, command.size_bytes, command.ttl_ms, command.priority)


def resident(host: QueueHost, entry: Entry) -> Message:
    """The entry's message in memory, read back from the log or a scratch page."""
    held = entry.message
    if type(held) is Message:
        return held
    if type(held) is int:
        return cast("BodyReader", host).read_body(held)
    durability = host.broker.durability
    assert durability is not None, "paged out, yet the node keeps nothing on disk"
    if type(held) is PageRef:
        message = decode_page(durability.pages.read(held))
        durability.pages.free(held)
    else:
        assert isinstance(held, PageSlot)
        found = held.message
        if found is None:
            key = host.journal_key
            assert key is not None, "paged out to the log, yet the queue is not durable"
            found = Message(*durability.journal.read(key, entry.msg_id))
        message = found
    entry.message = message
    return message


def release(host: QueueHost, entries: Iterable[Entry]) -> None:
    """Free the scratch pages of messages that leave without being handed out."""
    durability = host.broker.durability
    for entry in entries:
        held = entry.message
        if type(held) is PageRef and durability is not None:
            durability.pages.free(held)
            entry.message = PAGED_OUT


def encode_page(message: Message) -> bytes:
    exchange = message.exchange.encode("utf-8", _TEXT)
    routing_key = message.routing_key.encode("utf-8", _TEXT)
    head = _PAGE_HEAD.pack(len(exchange), len(routing_key), len(message.properties_raw))
    return b"".join((head, exchange, routing_key, message.properties_raw, message.body))


def decode_page(data: bytes) -> Message:
    exchange_length, routing_key_length, properties_length = _PAGE_HEAD.unpack_from(data)
    start = _PAGE_HEAD.size
    routing_key_start = start + exchange_length
    properties_start = routing_key_start + routing_key_length
    body_start = properties_start + properties_length
    return Message(
        data[start:routing_key_start].decode("utf-8", _TEXT),
        data[routing_key_start:properties_start].decode("utf-8", _TEXT),
        data[properties_start:body_start],
        data[body_start:],
    )
