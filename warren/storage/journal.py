"""The durable classic queues' view of the log: write records, know which ones are live.

Theory of operation:
1. `QueueJournal` is the only writer of classic queue records (`messages.py`) to the node's
   `Log`. Each method appends one record and updates an in-memory ledger of the live
   persistent messages: queue key → msg_id → the record that holds it (`_Record`: its
   sequence number, segment and offset, how many of its messages live, which of them were
   delivered). Messages the journal never saw (transient ones) are ignored by every
   method, so the runtime may pass msg_ids without filtering them.
   Persistent messages go into `EnqueuedRun` records, one log span each: a message to the
   queue the open span is for, with nothing appended since, joins that span (`extend_span`:
   its sequence number is the next one, the span's header and CRC are written once, at
   the next append or seal) and shares its ledger record; otherwise it starts a new span.
   So the Spark writer's hundreds of publishes to one queue a read become one record, and
   a run is settled message by message inside it: it is live while one of them is.
2. Liveness, which decides when a segment can go:
   - an `Enqueued` record is live while its message is (not settled, purged or deleted), an
     `EnqueuedRun` while one of its messages is;
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
   `compaction_live_ratio_max` of its sequence numbers hold a live message: it reads that
   segment, appends copies of the live messages, in runs (and `Delivered` marks for those
   delivered), and
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
5. The ledger knows where each live message's record lies (segment, offset), so `read`
   brings a message back from the log (`Log.read_record`, which reads a block at once and
   serves the records after it from there): the broker keeps only a small index of a long
   queue in memory and reads bodies as they are delivered. A run is read and decoded
   whole; for each queue, the messages not read yet of the last one read are kept, so
   reading queues in order (each message once) reads each run once. It decodes only what
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
    decode_messages,
    encode,
    encode_delivered,
    encode_route,
    encode_run_entry,
    encode_run_start,
    encode_settled,
    recover,
)

__all__ = ["CompactionPlan", "Maintenance", "QueueJournal"]

COMPACTION_LIVE_RATIO_MAX_DEFAULT: Final = 0.5


class _Record:
    """A record holding live messages of one queue: an `Enqueued` or an `EnqueuedRun`."""

    __slots__ = ("delivered", "live", "offset", "queue_key", "segment_id", "sequence")

    def __init__(self, queue_key: str, sequence: int, segment_id: int, offset: int) -> None:
        self.queue_key = queue_key
        self.sequence = sequence  # one of its sequence numbers (a span's first, when written)
        self.segment_id = segment_id
        self.offset = offset  # in the segment, for `read`
        self.live = 0  # its messages not settled, purged or deleted
        self.delivered: set[int] | None = None  # the msg_ids of those marked delivered


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
        self._queues: dict[str, dict[int, _Record]] = {}
        # segment id -> sequence number -> record: the live records of each segment
        self._by_segment: dict[int, dict[int, _Record]] = {}
        self._run: _Record | None = None  # the record of the latest span started
        # per queue, the record `read` read last and its messages not read yet
        self._read: dict[str, tuple[_Record, dict[int, Contents]]] = {}
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
        # the offset of every record, by sequence number: 8 bytes a sequence number, for
        # this call only
        offsets = array.array("Q")
        first_sequence = log.durable_sequence + 1

        def located() -> Iterator[tuple[int, bytes]]:
            nonlocal first_sequence
            for sequence, _segment_id, offset, payload in log.located_records():
                if not offsets:
                    first_sequence = sequence
                # the rest of the span before (or a gap left by damage, where no message is)
                offsets.extend(
                    [offsets[-1] if offsets else 0] * (sequence - first_sequence - len(offsets))
                )
                offsets.append(offset)
                yield sequence, payload

        recovered = recover(located(), on_undecodable, contents=contents)
        if offsets:  # the rest of the last span
            offsets.extend(
                [offsets[-1]] * (log.durable_sequence - first_sequence + 1 - len(offsets))
            )
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
        records: dict[tuple[int, int], _Record] = {}  # by segment and offset: a run's messages
        for message in messages:
            segment_id = self.log.segment_of(message.sequence)
            offset = offsets[message.sequence - first_sequence]
            record = records.get((segment_id, offset))
            if record is None:
                record = records[segment_id, offset] = _Record(
                    queue_key, message.sequence, segment_id, offset
                )
                self._by_segment.setdefault(segment_id, {})[record.sequence] = record
            record.live += 1
            queue[message.msg_id] = record
            if message.redelivered:
                _mark(record, message.msg_id)
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
        """Live messages per segment."""
        return {
            segment_id: sum(record.live for record in records.values())
            for segment_id, records in sorted(self._by_segment.items())
            if records
        }

    def read(self, queue_key: str, msg_id: int) -> Contents:
        """A live message's route, properties and body, read back from its record in the
        log (`KeyError` if the message is not live; `LogCorrupt` if its record is damaged,
        `RecordFormatError` if it does not hold that message)."""
        record = self._queues[queue_key][msg_id]
        cached = self._read.get(queue_key)
        if cached is not None and cached[0] is record:
            contents = cached[1].pop(msg_id, None)
            if contents is not None:
                if not cached[1]:
                    del self._read[queue_key]
                return contents
        payload = self.log.read_record(record.segment_id, record.offset, record.sequence)
        try:
            messages = decode_contents(payload, queue_key)
        except RecordFormatError as error:
            raise RecordFormatError(f"log record {record.sequence}: {error}") from None
        contents = messages.pop(msg_id, None)
        if contents is None:
            raise RecordFormatError(f"log record {record.sequence} does not hold message {msg_id}")
        if messages:  # the rest of a run
            self._read[queue_key] = (record, messages)
        elif cached is not None:
            del self._read[queue_key]
        return contents

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
        entry = encode_run_entry(
            msg_id, enqueued_at_ms, expires_at_ms, priority, route, properties_raw, body
        )
        queue = self._queues.get(queue_key)
        if queue is None:
            queue = self._queues[queue_key] = {}
        elif msg_id in queue:
            raise ValueError(f"msg_id {msg_id} of {queue_key!r} is already live")
        log = self.log
        run = self._run
        if run is not None and run.sequence == log.span_sequence and run.queue_key == queue_key:
            sequence = log.extend_span(entry)
            if sequence:
                # the span is open, so it was never settled whole: still in the ledger
                run.live += 1
                queue[msg_id] = run
                return sequence
        sequence = log.append_span(encode_run_start(queue_key) + entry)
        run = self._run = _Record(
            queue_key, sequence, log.active_segment_id, log.last_record_offset
        )
        run.live = 1
        queue[msg_id] = run
        segment = self._by_segment.get(run.segment_id)
        if segment is None:
            segment = self._by_segment[run.segment_id] = {}
        segment[sequence] = run
        return sequence

    def deliver(self, queue_key: str, msg_ids: Iterable[int]) -> int | None:
        """Log the first delivery of these messages; None if there was nothing to log."""
        queue = self._queues.get(queue_key)
        if not queue:
            return None
        first_time = []
        for msg_id in msg_ids:
            record = queue.get(msg_id)
            if record is not None and (record.delivered is None or msg_id not in record.delivered):
                _mark(record, msg_id)
                first_time.append(msg_id)
        if not first_time:
            return None
        return self.log.append(encode_delivered(queue_key, first_time))

    def settle(self, queue_key: str, msg_ids: Iterable[int]) -> int | None:
        """Log that these messages are gone (acked, dropped, expired, dead-lettered)."""
        queue = self._queues.get(queue_key)
        if not queue:
            return None
        gone_ids = []
        gone = []
        for msg_id in msg_ids:
            record = queue.pop(msg_id, None)
            if record is not None:
                gone_ids.append(msg_id)
                gone.append(record)
        if not gone:
            return None
        sequence = self.log.append(encode_settled(queue_key, gone_ids))
        self._kill(gone, sequence)
        return sequence

    def _untrack(self, record: _Record) -> None:
        segment = self._by_segment[record.segment_id]
        del segment[record.sequence]
        if not segment:
            del self._by_segment[record.segment_id]

    def _kill(self, records: Iterable[_Record], sequence: int) -> None:
        """A message of each of `records` (one per message, a record as many times as it
        lost messages) died by record `sequence`; their segments wait for it to be durable."""
        killed_by = self._killed_by
        for record in records:
            record.live -= 1
            if not record.live:
                self._untrack(record)
            killed_by[record.segment_id] = sequence

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
        self._read.pop(queue_key, None)
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
        """The oldest sealed segment, if less than the ratio of its sequence numbers holds
        a live message.

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
        if sum(record.live for record in live.values()) >= (
            self.compaction_live_ratio_max * oldest.records
        ):
            return None
        self._compacting = oldest.segment_id
        return CompactionPlan(oldest.segment_id, tuple(sorted(live)))

    def apply_compaction(self, plan: CompactionPlan, payloads: Mapping[int, bytes]) -> int:
        """Append copies of the planned records' messages that are still live, in runs;
        return how many messages moved.

        The old segment is retired by a later `maintain` once the copies are durable.
        """
        if self._compacting != plan.segment_id:
            raise ValueError(f"segment {plan.segment_id} is not being compacted")
        self._compacting = None
        log = self.log
        live = self._by_segment.get(plan.segment_id, {})
        records = [live[sequence] for sequence in plan.sequences if sequence in live]
        delivered: dict[str, list[int]] = {}
        moved = 0
        for record in records:
            self._untrack(record)
            queue = self._queues[record.queue_key]
            for message in decode_messages(payloads[record.sequence]):
                msg_id = message.msg_id
                if queue.get(msg_id) is not record:
                    continue  # settled since
                del queue[msg_id]
                self.enqueue(message)
                moved += 1
                if record.delivered is not None and msg_id in record.delivered:
                    _mark(queue[msg_id], msg_id)
                    delivered.setdefault(record.queue_key, []).append(msg_id)
        for queue_key, msg_ids in delivered.items():
            log.append(encode_delivered(queue_key, msg_ids))  # invariant D
        self._compacted[plan.segment_id] = log.next_sequence - 1
        return moved

    def cancel_compaction(self) -> None:
        """Give up the planned compaction (reading the segment failed)."""
        self._compacting = None


def _mark(record: _Record, msg_id: int) -> None:
    """Message `msg_id` of `record` is marked delivered."""
    if record.delivered is None:
        record.delivered = {msg_id}
    else:
        record.delivered.add(msg_id)
