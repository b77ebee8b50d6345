"""The durable classic queues' view of the log: write records, know which ones are live.

Theory of operation:
1. `QueueJournal` is the only writer of classic queue records (`messages.py`) to the node's
   `Log`. Each method appends one record and updates an in-memory ledger of the live
   persistent messages: queue key → msg_id → (sequence number, segment, delivered).
   Messages the journal never saw (transient ones) are ignored by every method, so the
   runtime may pass msg_ids without filtering them.
2. Liveness, which decides when a segment can go:
   - an `Enqueued` record is live while its message is (not settled, purged or deleted);
   - every other record is dead the moment it is written. This is safe because the log
     deletes segments only as a prefix: a `Settled`, `Purged` or `QueueDeleted` is deleted
     only with or after the records it cancels. A `Delivered` for a live message is never
     in a segment older than that message's `Enqueued` (invariant D below), and that
     segment is not deleted while the message lives.
   Invariant D: every live message marked delivered has a `Delivered` naming it after its
   current `Enqueued`. Compaction re-appends the marks of the messages it moves, and
   recovery re-appends the marks of every recovered delivered message.
   A segment with no live record is retired only once the records that killed its
   messages are durable. Then recovery always returns exactly the state of the durable
   prefix of the log; deleting earlier would let a crash apply half a kill (a `Settled`
   whose messages sit in two segments, one deleted, the record itself lost).
3. `maintain` (call it between syncs, never while a batch is in flight) retires sealed
   segments with no live record, and compacts the oldest segment when less than
   `compaction_live_ratio_max` of its records are live: it reads that segment, appends
   copies of the live `Enqueued` records (and `Delivered` marks for those delivered) and
   retires the segment once the copies are durable, at a later `maintain`. It never syncs;
   the copies ride on the caller's next group commit. Compaction only ever takes the
   oldest segment, because only a prefix of the log can be deleted. For a caller that must
   not block on reading a segment, compaction splits into `compaction_plan` (which segment,
   which records), `Log.read` (any thread) and `apply_compaction` (copies what is still
   live by then).
4. `QueueJournal.recover` rebuilds the ledger from the log at startup with `messages.recover`,
   writes `QueueDeleted` for queue keys the caller no longer has (deleted in the definitions
   store before the crash let the log say so), re-appends delivered marks, and syncs. With
   ``contents=False`` it returns the messages without route, properties and body, so that
   a backlog need not fit in memory to be recovered.
5. The ledger knows where each live message's `Enqueued` record lies (segment, offset), so
   `read` brings a message back from the log (`Log.read_record`, which reads a block at
   once and serves the records after it from there): the broker keeps only a small index
   of a long queue in memory and reads bodies as they are delivered. It decodes only what
   a delivery needs (`messages.decode_contents`).

The journal assumes it is the only user of its log. When Raft groups share the log, the
per-segment live counts of every user must be added up before a segment is retired.
"""

from __future__ import annotations

import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from warren.storage.log import Log
from warren.storage.messages import (
    Contents,
    Delivered,
    Enqueued,
    Purged,
    QueueDeleted,
    RecordFormatError,
    RecoveredMessage,
    decode_contents,
    encode,
    encode_delivered,
    encode_enqueued,
    encode_route,
    encode_settled,
    recover,
)

__all__ = ["CompactionPlan", "Maintenance", "QueueJournal"]

COMPACTION_LIVE_RATIO_MAX_DEFAULT: Final = 0.5


class _Entry:
    __slots__ = ("delivered", "msg_id", "offset", "queue_key", "segment_id", "sequence")

    def __init__(
        self,
        queue_key: str,
        msg_id: int,
        sequence: int,
        segment_id: int,
        offset: int,
        delivered: bool,
    ) -> None:
        self.queue_key = queue_key
        self.msg_id = msg_id
        self.sequence = sequence
        self.segment_id = segment_id
        self.offset = offset  # of its `Enqueued` record in the segment, for `read`
        self.delivered = delivered


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """Which records of which segment to copy (see `QueueJournal.compaction_plan`)."""

    segment_id: int
    sequences: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Maintenance:
    """What one `maintain` call did."""

    retired: tuple[int, ...] = ()
    deleted: tuple[int, ...] = ()
    compacting: int | None = None  # segment whose live records were just copied
    copied_records: int = 0


class QueueJournal:
    """See the module docstring."""

    def __init__(
        self, log: Log, compaction_live_ratio_max: float = COMPACTION_LIVE_RATIO_MAX_DEFAULT
    ) -> None:
        self.log = log
        self.compaction_live_ratio_max = compaction_live_ratio_max
        self._queues: dict[str, dict[int, _Entry]] = {}
        # segment id -> sequence number -> entry: the live records of each segment
        self._by_segment: dict[int, dict[int, _Entry]] = {}
        # segments whose live records were copied: retire once this sequence is durable
        self._compacted: dict[int, int] = {}
        self._compacting: int | None = None  # planned, copies not yet appended
        # segment id -> the latest record that killed one of its messages: the segment may
        # go only once that record is durable (see the module docstring, point 2)
        self._killed_by: dict[int, int] = {}

    # --- recovery --------------------------------------------------------------------------

    @classmethod
    def recover(
        cls,
        log: Log,
        keep: Callable[[str], bool] = lambda queue_key: True,
        compaction_live_ratio_max: float = COMPACTION_LIVE_RATIO_MAX_DEFAULT,
        on_undecodable: Callable[[int, RecordFormatError], None] | None = None,
        *,
        contents: bool = True,
    ) -> tuple[QueueJournal, dict[str, list[RecoveredMessage]]]:
        """Rebuild the ledger from `log` (just opened); return the live messages per queue.

        Queue keys for which `keep` is false are dropped and a `QueueDeleted` written. An
        undecodable record raises `RecordFormatError` unless `on_undecodable` takes it.
        Without `contents`, messages come back without route, properties and body: `read`
        fetches them.
        Syncs before it returns.
        """
        journal = cls(log, compaction_live_ratio_max)
        # the offset of every record, by sequence number: 8 bytes a record, for this call only
        offsets = array.array("Q")
        first_sequence = log.durable_sequence + 1

        def located() -> Iterator[tuple[int, bytes]]:
            nonlocal first_sequence
            for sequence, _segment_id, offset, payload in log.located_records():
                if not offsets:
                    first_sequence = sequence
                # a gap left by damage: keep the index arithmetic true
                offsets.extend([0] * (sequence - first_sequence - len(offsets)))
                offsets.append(offset)
                yield sequence, payload

        recovered = recover(located(), on_undecodable, contents=contents)
        kept: dict[str, list[RecoveredMessage]] = {}
        for queue_key, messages in recovered.items():
            if not keep(queue_key):
                log.append(encode(QueueDeleted(queue_key)))
                continue
            kept[queue_key] = messages
            journal._adopt(queue_key, messages, offsets, first_sequence)
        log.flush_and_sync()
        return journal, kept

    def _adopt(
        self,
        queue_key: str,
        messages: list[RecoveredMessage],
        offsets: Sequence[int],
        first_sequence: int,
    ) -> None:
        queue = self._queues.setdefault(queue_key, {})
        delivered: list[int] = []
        for message in messages:
            entry = _Entry(
                queue_key,
                message.msg_id,
                message.sequence,
                self.log.segment_of(message.sequence),
                offsets[message.sequence - first_sequence],
                message.redelivered,
            )
            queue[message.msg_id] = entry
            self._by_segment.setdefault(entry.segment_id, {})[entry.sequence] = entry
            if message.redelivered:
                delivered.append(message.msg_id)
        if delivered:
            self.log.append(encode(Delivered(queue_key, tuple(delivered))))

    # --- queries ---------------------------------------------------------------------------

    def is_live(self, queue_key: str, msg_id: int) -> bool:
        queue = self._queues.get(queue_key)
        return queue is not None and msg_id in queue

    def live_count(self, queue_key: str | None = None) -> int:
        if queue_key is not None:
            return len(self._queues.get(queue_key, ()))
        return sum(len(queue) for queue in self._queues.values())

    def live_by_segment(self) -> dict[int, int]:
        return {s: len(entries) for s, entries in sorted(self._by_segment.items()) if entries}

    def read(self, queue_key: str, msg_id: int) -> Contents:
        """A live message's route, properties and body, read back from its record in the
        log (`KeyError` if the message is not live; `LogCorrupt` if its record is damaged,
        `RecordFormatError` if it is not that message's)."""
        entry = self._queues[queue_key][msg_id]
        payload = self.log.read_record(entry.segment_id, entry.offset, entry.sequence)
        try:
            return decode_contents(payload, queue_key, msg_id)
        except RecordFormatError as error:
            raise RecordFormatError(f"log record {entry.sequence}: {error}") from None

    # --- records ---------------------------------------------------------------------------

    def enqueue(self, record: Enqueued) -> int:
        """Log a persistent message; return its sequence number (confirm once durable)."""
        return self.enqueue_fields(
            record.queue_key,
            record.msg_id,
            record.enqueued_at_ms,
            record.expires_at_ms,
            record.priority,
            encode_route(record.exchange, record.routing_key),
            record.properties_raw,
            record.body,
        )

    def enqueue_fields(
        self,
        queue_key: str,
        msg_id: int,
        enqueued_at_ms: int,
        expires_at_ms: int | None,
        priority: int,
        route: bytes,
        properties_raw: bytes,
        body: bytes,
    ) -> int:
        """`enqueue` from the fields the broker holds (`route` as in ``Message.route``)."""
        payload = encode_enqueued(
            queue_key, msg_id, enqueued_at_ms, expires_at_ms, priority, route, properties_raw, body
        )
        queue = self._queues.get(queue_key)
        if queue is None:
            queue = self._queues[queue_key] = {}
        elif msg_id in queue:
            raise ValueError(f"msg_id {msg_id} of {queue_key!r} is already live")
        sequence = self.log.append(payload)
        self._track(queue, queue_key, msg_id, sequence, delivered=False)
        return sequence

    def _track(
        self, queue: dict[int, _Entry], queue_key: str, msg_id: int, sequence: int, delivered: bool
    ) -> None:
        """Record the message whose `Enqueued` was the log's last append."""
        log = self.log
        segment_id = log.active_segment_id
        entry = _Entry(queue_key, msg_id, sequence, segment_id, log.last_record_offset, delivered)
        queue[msg_id] = entry
        segment = self._by_segment.get(segment_id)
        if segment is None:
            segment = self._by_segment[segment_id] = {}
        segment[sequence] = entry

    def deliver(self, queue_key: str, msg_ids: Iterable[int]) -> int | None:
        """Log the first delivery of these messages; None if there was nothing to log."""
        queue = self._queues.get(queue_key)
        if not queue:
            return None
        first_time = []
        for msg_id in msg_ids:
            entry = queue.get(msg_id)
            if entry is not None and not entry.delivered:
                entry.delivered = True
                first_time.append(msg_id)
        if not first_time:
            return None
        return self.log.append(encode_delivered(queue_key, first_time))

    def settle(self, queue_key: str, msg_ids: Iterable[int]) -> int | None:
        """Log that these messages are gone (acked, dropped, expired, dead-lettered)."""
        queue = self._queues.get(queue_key)
        if not queue:
            return None
        gone = []
        for msg_id in msg_ids:
            entry = queue.pop(msg_id, None)
            if entry is not None:
                gone.append(entry)
        if not gone:
            return None
        sequence = self.log.append(encode_settled(queue_key, [entry.msg_id for entry in gone]))
        self._kill(gone, sequence)
        return sequence

    def _untrack(self, entry: _Entry) -> None:
        segment = self._by_segment[entry.segment_id]
        del segment[entry.sequence]
        if not segment:
            del self._by_segment[entry.segment_id]

    def _kill(self, entries: Iterable[_Entry], sequence: int) -> None:
        """`entries` died by record `sequence`; their segments wait for it to be durable."""
        by_segment = self._by_segment
        killed_by = self._killed_by
        for entry in entries:
            segment = by_segment[entry.segment_id]
            del segment[entry.sequence]
            if not segment:
                del by_segment[entry.segment_id]
            killed_by[entry.segment_id] = sequence

    def purge(self, queue_key: str, kept_msg_ids: Collection[int] = ()) -> int | None:
        """Log queue.purge: all messages are gone except `kept_msg_ids` (the unacked ones)."""
        queue = self._queues.get(queue_key)
        if not queue:
            return None
        kept = set(kept_msg_ids)
        gone = [queue.pop(msg_id) for msg_id in list(queue) if msg_id not in kept]
        if not gone:
            return None
        sequence = self.log.append(encode(Purged(queue_key, tuple(sorted(queue)))))
        self._kill(gone, sequence)
        return sequence

    def delete_queue(self, queue_key: str) -> int | None:
        """Log that the queue is gone with all its messages."""
        queue = self._queues.pop(queue_key, None)
        if not queue:
            return None
        sequence = self.log.append(encode(QueueDeleted(queue_key)))
        self._kill(queue.values(), sequence)
        return sequence

    # --- space -----------------------------------------------------------------------------

    def maintain(self, compact: bool = True) -> Maintenance:
        """Retire dead segments; with `compact`, also compact the oldest if mostly dead.

        Call between syncs (no batch in flight). Appends copies but never syncs. Compaction
        here reads the old segment on the calling thread; a caller that must not block
        passes ``compact=False`` and uses `compaction_plan`, `Log.read` on another thread,
        then `apply_compaction`.
        """
        log = self.log
        durable = log.durable_sequence
        retired: list[int] = []
        for segment_id, needed in list(self._compacted.items()):
            if needed <= durable:
                del self._compacted[segment_id]
                retired.append(segment_id)
        active_id = log.active_segment_id
        for info in log.segments():
            if (
                info.segment_id != active_id
                and not info.retired
                and info.segment_id not in self._compacted
                and info.segment_id != self._compacting
                and info.segment_id not in self._by_segment
                and info.segment_id not in retired
                and self._killed_by.get(info.segment_id, 0) <= durable
            ):
                retired.append(info.segment_id)
        deleted: list[int] = []
        for segment_id in retired:
            self._killed_by.pop(segment_id, None)
            deleted += log.retire(segment_id)
        deleted += log.reclaim()  # segments retired earlier whose records became durable
        compacting, copied = None, 0
        if compact:
            plan = self.compaction_plan()
            if plan is not None:
                compacting = plan.segment_id
                copied = self.apply_compaction(plan, log.read(plan.segment_id, plan.sequences))
        return Maintenance(tuple(retired), tuple(deleted), compacting, copied)

    def compaction_plan(self) -> CompactionPlan | None:
        """The oldest sealed segment, if less than the ratio of its records is live.

        Until `apply_compaction` or `cancel_compaction`, that segment is not retired, so
        `Log.read(plan.segment_id, plan.sequences)` may run on another thread meanwhile.
        """
        if self._compacted or self._compacting is not None:
            return None  # one compaction at a time
        log = self.log
        candidates = [
            info
            for info in log.segments()
            if info.segment_id != log.active_segment_id and not info.retired
        ]
        if not candidates:
            return None
        oldest = candidates[0]
        live = self._by_segment.get(oldest.segment_id)
        if not live or oldest.last_sequence > log.durable_sequence:
            return None  # nothing live: `maintain` retires it once its kills are durable
        if len(live) >= self.compaction_live_ratio_max * oldest.records:
            return None
        self._compacting = oldest.segment_id
        return CompactionPlan(oldest.segment_id, tuple(sorted(live)))

    def apply_compaction(self, plan: CompactionPlan, payloads: Mapping[int, bytes]) -> int:
        """Append copies of the planned records that are still live; return how many.

        The old segment is retired by a later `maintain` once the copies are durable.
        """
        if self._compacting != plan.segment_id:
            raise ValueError(f"segment {plan.segment_id} is not being compacted")
        self._compacting = None
        log = self.log
        live = self._by_segment.get(plan.segment_id, {})
        moved = [live[sequence] for sequence in plan.sequences if sequence in live]
        delivered: dict[str, list[int]] = {}
        for entry in moved:
            self._untrack(entry)
            sequence = log.append(payloads[entry.sequence])
            queue = self._queues[entry.queue_key]
            self._track(queue, entry.queue_key, entry.msg_id, sequence, entry.delivered)
            if entry.delivered:
                delivered.setdefault(entry.queue_key, []).append(entry.msg_id)
        for queue_key, msg_ids in delivered.items():
            log.append(encode_delivered(queue_key, msg_ids))  # invariant D
        self._compacted[plan.segment_id] = log.next_sequence - 1
        return len(moved)

    def cancel_compaction(self) -> None:
        """Give up the planned compaction (reading the segment failed)."""
        self._compacting = None
