"""An append-only log of opaque records in segment files, with CRCs and group commit.

Theory of operation:
1. A log is a directory of segment files ``00000001.wal``, ``00000002.wal`` … and a ``LOCK``
   file (``flock``: one process per directory). A segment starts with a 32-byte header
   (magic, format version, its own id, the sequence number of its first record, header CRC)
   followed by records. A record is a 16-byte header (CRC32, payload length, sequence number)
   and the payload. The CRC (zlib's CRC-32) covers the length, the sequence number and the
   payload. Integers are little-endian.
   A *span* (segment format 2) is a record that takes a run of sequence numbers, one per
   item the caller packed into its payload: the length field's top bit is set and a
   20-byte header adds the count after the first sequence number (the CRC covers it too).
   Segments this code creates are format 2; format 1 segments (no spans) are still read.
2. Sequence numbers start at 1 and grow by exactly one per record (by its count for a span),
   across segments; the log never reorders or renumbers. A record's sequence number is its
   identity for the caller; any sequence number of a span finds that span.
3. `append` only encodes into memory and returns the sequence number. `flush_and_sync` writes
   everything appended since the last sync with one ``pwrite`` and one ``fdatasync`` per
   segment touched (normally one) and returns the highest sequence number now durable. This
   is group commit: the caller appends a batch, syncs once, and only then confirms.
   `append_span` starts a span and `extend_span` adds one item to it (the next sequence
   number) for as long as it is the last record and unsealed: its header and its one CRC
   are written when anything else is appended, or at the seal. For a
   caller that syncs on another thread, `seal` hands over the pending bytes as a `Batch` and
   `sync_batch` writes it: appends may go on while one batch is in flight (at most one).
4. The active segment (the last one) takes appends until the next record would take it past
   `segment_max_bytes`; then a new segment is started (a record larger than that gets a
   segment of its own). A new segment file is created, written and synced together with its
   first batch, then the directory is synced.
5. Recovery (`Log.open`) reads every segment in id order and checks every record: header
   complete, length within bounds, payload complete, CRC, and sequence number one more than
   the previous. The rules (`RecoveryReport` lists everything dropped):
   - The last segment: from its first bad record to the end of the file is a torn tail; the
     file is truncated there (and synced), and appends continue after the last good record.
   - An older segment: replay of that segment stops at its first bad record and the rest of
     it is dropped. The file is left as it is (evidence; it is deleted when retired). Replay
     goes on with the next segment: a later segment holds confirmed records too, and losing
     them is worse than a hole. The sequence numbers lost are reported as a gap.
   - A segment whose header is missing or invalid (torn at creation, foreign, or overlapping
     sequence numbers) is dropped whole and left untouched. If it was the last one, a fresh
     segment is started after it: the log never appends behind damage it did not cut off.
   The node always starts; nothing bad is silently accepted.
6. Space: the log does not know what records mean. The caller keeps live counts per segment
   (`segment_of`, `active_segment_id`) and calls `retire(segment_id)` when none of a sealed
   segment's records matters any more. Retired segments are deleted oldest first and only as
   a prefix of the log (a retired segment waits for every older segment to be deleted), and
   only once all their records are durable. The prefix rule is what lets a caller treat
   records that cancel earlier ones (acks, deletions) as dead the moment they are written:
   they are deleted only together with, or after, whatever they cancel.
   `compact(segment_id, live)` copies the still-live records of a mostly dead segment to the
   head (new sequence numbers), syncs, and retires the old segment; `read` alone is the
   building block for callers that compact without blocking on a sync.
7. Reading: `records` / `located_records` replay the durable records in order (recovery);
   `read_record(segment_id, offset, sequence)` fetches one record by the position
   `last_record_offset` gave right after its `append` (message bodies paged out of memory
   are read back this way), whether it is durable yet or not; `read` takes many records of
   one sealed segment (compaction). A durable record is read with the bytes after it, and
   the block is kept for the reads that follow: a long queue's messages are read back in
   the order they were appended, so one ``pread`` serves a run of them (records of other
   queues, or already settled, in between are read and never asked for). Blocks grow
   while their caller reads on (`READ_AHEAD_BYTES_MIN` to `_MAX`), at most
   `READ_AHEAD_BLOCKS_MAX` are kept, and a block serves only records that were durable
   before it was read, so a record never comes from bytes a sync was still writing. Every
   record read is checked (CRC, length, sequence) as it is handed out, from a block or not:
   a damaged one is `LogCorrupt`, and its neighbours in the block read back as they are.
8. A failed write or sync leaves the file in an unknown state (an fsync error may drop dirty
   pages and not report it again): the log marks itself failed and refuses all further
   appends and syncs with `LogFailed` (an append racing a failure on the sync thread may
   still be buffered, never to be written). Durability can no longer be promised; the node
   must stop and recover from disk.

Threads: none inside. The log is not thread-safe, with one allowance: while `sync_batch` runs
on one thread, `append`, `seal` (after it returned), `segment_of`, `active_segment_id`,
`read_record` and `read` of a sealed segment may run on another. `retire`, `reclaim`,
`compact` and `close` need that no batch is in flight.
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import errno
import fcntl
import os
import re
import struct
import zlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "RECORD_HEADER_BYTES",
    "RECORD_PAYLOAD_MAX_BYTES",
    "SEGMENT_HEADER_BYTES",
    "SEGMENT_MAX_BYTES_DEFAULT",
    "SPAN_HEADER_BYTES",
    "SPAN_PAYLOAD_MAX_BYTES",
    "Batch",
    "Damage",
    "DamageKind",
    "Log",
    "LogCorrupt",
    "LogError",
    "LogFailed",
    "RecoveryReport",
    "SegmentInfo",
]

SEGMENT_MAGIC: Final = b"WARRENLG"
# 2: may hold spans; format 1 segments (written before spans existed) are still read
SEGMENT_FORMAT_VERSION: Final = 2
_SEGMENT_FORMAT_VERSIONS: Final = (1, 2)
# magic, format version, segment id, first sequence number, reserved, CRC of the first 28 bytes
_SEGMENT_HEADER: Final = struct.Struct("<8sIIQII")
SEGMENT_HEADER_BYTES: Final = _SEGMENT_HEADER.size  # 32
# CRC, payload length, sequence number; the CRC covers bytes 4..16 and the payload
_RECORD_HEADER: Final = struct.Struct("<IIQ")
_RECORD_TAIL: Final = struct.Struct("<IQ")
RECORD_HEADER_BYTES: Final = _RECORD_HEADER.size  # 16
# A span: CRC, payload length with `_SPAN` set, first sequence number, count; the CRC covers
# bytes 4..20 and the payload
_SPAN: Final = 0x8000_0000
_SPAN_HEADER: Final = struct.Struct("<IIQI")
SPAN_HEADER_BYTES: Final = _SPAN_HEADER.size  # 20
_SPAN_PLACEHOLDER: Final = bytes(SPAN_HEADER_BYTES)
_CRC: Final = struct.Struct("<I")
# A span takes no more items once its payload is this long (a caller reads a span whole to
# get one item back, so spans stay short enough for that to be cheap)
SPAN_PAYLOAD_MAX_BYTES: Final = 256 * 1024
# RabbitMQ caps a message at 512 MiB; a length beyond this is garbage, not a record.
RECORD_PAYLOAD_MAX_BYTES: Final = 512 * 1024 * 1024
SEGMENT_MAX_BYTES_DEFAULT: Final = 64 * 1024 * 1024
SEGMENT_MAX_BYTES_MIN: Final = SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES
# `read_record` reads a durable record with the bytes after it (rule 7): this many at first,
# twice as many each time its caller reads on past the block, up to the max, and keeps that
# many blocks (several long queues read back side by side). A record larger than the max is
# read alone and not kept.
READ_AHEAD_BYTES_MIN: Final = 4096
READ_AHEAD_BYTES_MAX: Final = 128 * 1024
READ_AHEAD_BLOCKS_MAX: Final = 8
# A short write on a regular file is rare; more than this many in a row is a broken disk.
_WRITE_ATTEMPTS_MAX: Final = 1024

_SEGMENT_NAME: Final = re.compile(r"^(\d{8,})\.wal$")
LOCK_FILE_NAME: Final = "LOCK"


class LogError(Exception):
    """Base of the errors the log raises."""


class LogFailed(LogError):
    """A write or sync failed: durability can no longer be promised; the node must stop."""


class LogCorrupt(LogError):
    """A record that passed recovery no longer reads back intact."""


class DamageKind(enum.Enum):
    MISSING_HEADER = "segment header missing or torn"
    BAD_HEADER = "segment header invalid"
    OVERLAP = "segment overlaps the sequence numbers before it"
    SEQUENCE_GAP = "sequence numbers missing between segments"
    PARTIAL_RECORD = "partial record"
    BAD_LENGTH = "record length out of bounds"
    BAD_CHECKSUM = "record checksum mismatch"
    BAD_SEQUENCE = "record sequence number out of order"


@dataclass(frozen=True, slots=True)
class Damage:
    """One thing recovery did not accept."""

    segment_id: int
    kind: DamageKind
    offset: int  # byte offset in the segment file where the bad part starts
    bytes_dropped: int
    truncated: bool = False  # the bytes were cut off the file (torn tail of the last segment)
    sequences_lost: tuple[int, int] | None = None  # inclusive range, when it is known

    def describe(self) -> str:
        text = f"{segment_file_name(self.segment_id)} at offset {self.offset}: {self.kind.value}"
        if self.bytes_dropped:
            action = "cut off" if self.truncated else "dropped"
            text += f", {self.bytes_dropped} bytes {action}"
        if self.sequences_lost is not None:
            first, last = self.sequences_lost
            text += f", sequences {first}..{last} lost"
        return text


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What `Log.open` found on disk."""

    directory: str
    segments: int
    records: int
    first_sequence: int  # 0 when the log holds no record
    last_sequence: int
    bytes_kept: int
    damage: tuple[Damage, ...] = ()
    new_segment_id: int | None = None  # a segment started because the last one was unusable

    @property
    def clean(self) -> bool:
        return not self.damage

    @property
    def bytes_dropped(self) -> int:
        return sum(d.bytes_dropped for d in self.damage)

    @property
    def tail_bytes_truncated(self) -> int:
        return sum(d.bytes_dropped for d in self.damage if d.truncated)

    def summary(self) -> str:
        if self.records:
            held = f"{self.records} records (sequences {self.first_sequence}..{self.last_sequence})"
        else:
            held = "no records"
        text = f"log {self.directory}: {self.segments} segments, {held}, {self.bytes_kept} bytes"
        if self.clean:
            return text + "; clean"
        parts = "; ".join(d.describe() for d in self.damage)
        return f"{text}; {len(self.damage)} problems, {self.bytes_dropped} bytes dropped: {parts}"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    segment_id: int
    first_sequence: int
    last_sequence: int  # first_sequence - 1 when the segment holds no record
    size_bytes: int  # including appends not yet synced
    retired: bool

    @property
    def records(self) -> int:
        return self.last_sequence - self.first_sequence + 1


@dataclass(slots=True)
class _Segment:
    segment_id: int
    first_sequence: int
    last_sequence: int
    size_bytes: int  # valid bytes on disk plus pending appends
    retired: bool = False
    version: int = SEGMENT_FORMAT_VERSION  # 1: a segment from before spans, which takes none

    def info(self) -> SegmentInfo:
        return SegmentInfo(
            self.segment_id, self.first_sequence, self.last_sequence, self.size_bytes, self.retired
        )


@dataclass(slots=True)
class _Chunk:
    """Pending bytes for one segment, to be written at `offset`."""

    segment_id: int
    offset: int
    create: bool  # the file does not exist yet; `data` starts with its header
    data: bytearray = field(default_factory=bytearray)


@dataclass(frozen=True, slots=True)
class Batch:
    """Appends sealed for one write and sync (`Log.seal` → `Log.sync_batch`)."""

    chunks: tuple[_Chunk, ...]
    first_sequence: int
    last_sequence: int

    @property
    def records(self) -> int:
        return self.last_sequence - self.first_sequence + 1

    @property
    def size_bytes(self) -> int:
        return sum(len(c.data) for c in self.chunks)


class _ReadAhead:
    """Bytes of a segment file from `offset` on, read at once by `read_record`; the records
    up to `durable_sequence` in them were whole in the file when they were read."""

    __slots__ = ("data", "durable_sequence", "offset", "segment_id")

    def __init__(self, segment_id: int, offset: int, data: bytes, durable_sequence: int) -> None:
        self.segment_id = segment_id
        self.offset = offset
        self.data = data
        self.durable_sequence = durable_sequence

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


def segment_file_name(segment_id: int) -> str:
    return f"{segment_id:08d}.wal"


def encode_segment_header(segment_id: int, first_sequence: int) -> bytes:
    head = _SEGMENT_HEADER.pack(
        SEGMENT_MAGIC, SEGMENT_FORMAT_VERSION, segment_id, first_sequence, 0, 0
    )
    crc = zlib.crc32(head[: SEGMENT_HEADER_BYTES - 4])
    return head[: SEGMENT_HEADER_BYTES - 4] + crc.to_bytes(4, "little")


def encode_record(sequence: int, payload: bytes) -> bytes:
    """One record's bytes, as `append` writes them (for tests and tools)."""
    tail = _RECORD_TAIL.pack(len(payload), sequence)
    crc = zlib.crc32(payload, zlib.crc32(tail))
    return _RECORD_HEADER.pack(crc, len(payload), sequence) + payload


def encode_span(sequence: int, count: int, payload: bytes) -> bytes:
    """A span's bytes, as `append_span` and `extend_span` leave them (for tests and tools)."""
    head = _SPAN_HEADER.pack(0, len(payload) | _SPAN, sequence, count)
    crc = zlib.crc32(payload, zlib.crc32(head[4:]))
    return _CRC.pack(crc) + head[4:] + payload


@dataclass(frozen=True, slots=True)
class _Header:
    """A record's header as read: a plain record has `count` 1 and 16 header bytes."""

    crc: int
    length: int
    sequence: int
    count: int
    size: int  # header bytes


def _header(data: bytes | bytearray, position: int, spans: bool) -> _Header | DamageKind:
    """The header of the record at `position`, or why there is none: too short for one
    (`PARTIAL_RECORD`), or a length out of bounds (a span's where `spans` is false)."""
    end = len(data)
    if end - position < RECORD_HEADER_BYTES:
        return DamageKind.PARTIAL_RECORD
    crc, length, sequence = _RECORD_HEADER.unpack_from(data, position)
    if not length & _SPAN:
        if length > RECORD_PAYLOAD_MAX_BYTES:
            return DamageKind.BAD_LENGTH
        return _Header(crc, length, sequence, 1, RECORD_HEADER_BYTES)
    if not spans:
        return DamageKind.BAD_LENGTH
    if end - position < SPAN_HEADER_BYTES:
        return DamageKind.PARTIAL_RECORD
    count = _CRC.unpack_from(data, position + RECORD_HEADER_BYTES)[0]
    length &= ~_SPAN
    if length > RECORD_PAYLOAD_MAX_BYTES or count < 1:
        return DamageKind.BAD_LENGTH
    return _Header(crc, length, sequence, count, SPAN_HEADER_BYTES)


def _decode_segment_header(data: bytes, segment_id: int) -> tuple[int, int] | DamageKind:
    """The segment's first sequence number and format, or why its header is not acceptable."""
    if len(data) < SEGMENT_HEADER_BYTES:
        return DamageKind.MISSING_HEADER
    magic, version, header_segment_id, first_sequence, _reserved, crc = _SEGMENT_HEADER.unpack_from(
        data, 0
    )
    if zlib.crc32(data[: SEGMENT_HEADER_BYTES - 4]) != crc:
        return DamageKind.BAD_HEADER if magic == SEGMENT_MAGIC else DamageKind.MISSING_HEADER
    if magic != SEGMENT_MAGIC or version not in _SEGMENT_FORMAT_VERSIONS:
        return DamageKind.BAD_HEADER
    if header_segment_id != segment_id or first_sequence < 1:
        return DamageKind.BAD_HEADER
    return int(first_sequence), int(version)


@dataclass(frozen=True, slots=True)
class _Scan:
    valid_bytes: int  # the good prefix of the file, header included
    last_sequence: int
    damage: DamageKind | None


def _scan_records(data: bytes, first_sequence: int, spans: bool) -> _Scan:
    """Check the records after the segment header; stop at the first bad one. Spans are
    bad where `spans` is false (a format 1 segment)."""
    view = memoryview(data)
    end = len(data)
    position = SEGMENT_HEADER_BYTES
    sequence_expected = first_sequence
    crc32 = zlib.crc32
    # Every iteration consumes at least one record header, so this bounds the loop.
    for _ in range(end // RECORD_HEADER_BYTES + 1):
        if position == end:
            return _Scan(position, sequence_expected - 1, None)
        header = _header(data, position, spans)
        if isinstance(header, DamageKind):
            return _Scan(position, sequence_expected - 1, header)
        payload_start = position + header.size
        payload_end = payload_start + header.length
        if payload_end > end:
            return _Scan(position, sequence_expected - 1, DamageKind.PARTIAL_RECORD)
        actual = crc32(view[payload_start:payload_end], crc32(view[position + 4 : payload_start]))
        if actual != header.crc:
            return _Scan(position, sequence_expected - 1, DamageKind.BAD_CHECKSUM)
        if header.sequence != sequence_expected:
            return _Scan(position, sequence_expected - 1, DamageKind.BAD_SEQUENCE)
        position = payload_end
        sequence_expected += header.count
    raise AssertionError("unreachable: the record scan is bounded by the data length")


def _iter_records(
    data: bytes, segment_id: int, first_sequence: int, last_sequence: int
) -> Iterator[tuple[int, int, int, memoryview]]:
    """Records first..last of a segment recovery already checked, as (sequence, count,
    offset, payload); a mismatch is `LogCorrupt`."""
    view = memoryview(data)
    position = SEGMENT_HEADER_BYTES
    sequence_expected = first_sequence
    crc32 = zlib.crc32
    end = len(data)
    for _ in range(end // RECORD_HEADER_BYTES + 1):
        if sequence_expected > last_sequence:
            return
        header = _header(data, position, True)
        if isinstance(header, DamageKind):
            raise LogCorrupt(
                f"{segment_file_name(segment_id)}: record {sequence_expected} is missing"
            )
        payload_start = position + header.size
        payload_end = payload_start + header.length
        payload = view[payload_start:payload_end]
        if (
            payload_end > end
            or header.sequence != sequence_expected
            or crc32(payload, crc32(view[position + 4 : payload_start])) != header.crc
        ):
            raise LogCorrupt(
                f"{segment_file_name(segment_id)} at offset {position}: record {sequence_expected}"
                " no longer reads back intact"
            )
        yield sequence_expected, header.count, position, payload
        position = payload_end
        sequence_expected += header.count
    if sequence_expected <= last_sequence:
        raise LogCorrupt(f"{segment_file_name(segment_id)}: record {sequence_expected} is missing")


def _record_in_chunks(chunks: list[_Chunk], segment_id: int, offset: int) -> bytes:
    """The bytes of the record at `offset` of a segment, from chunks not yet written."""
    for chunk in chunks:
        start = offset - chunk.offset
        if chunk.segment_id == segment_id and 0 <= start < len(chunk.data):
            data = chunk.data
            header = _header(data, start, True)
            if isinstance(header, DamageKind):
                break
            return bytes(data[start : start + header.size + header.length])
    raise LogCorrupt(f"{segment_file_name(segment_id)}: no pending record at {offset}")


def _payload_at(
    data: bytes, start: int, segment_id: int, offset: int, sequence: int
) -> bytes | None:
    """The payload of the record holding `sequence` (a span's, if it is one of its) at
    `start` of `data` (at `offset` of its segment): None if the record is not whole in
    `data`, `LogCorrupt` if it is and does not check out (length, CRC, sequence)."""
    if start < 0:
        return None
    header = _header(data, start, True)
    if header is DamageKind.PARTIAL_RECORD:
        return None
    if isinstance(header, DamageKind):
        raise _unreadable(segment_id, offset, sequence)
    end = start + header.size + header.length
    if end > len(data):
        return None
    # the CRC covers the header after itself (a span's count too) and the payload: one run
    # of bytes
    found = header.sequence
    if (
        not found <= sequence < found + header.count
        or zlib.crc32(memoryview(data)[start + 4 : end]) != header.crc
    ):
        raise _unreadable(segment_id, offset, sequence)
    return data[start + header.size : end]


def _checked_payload(data: bytes, segment_id: int, offset: int, sequence: int) -> bytes:
    """`_payload_at` the start of `data`, which must hold the whole record."""
    payload = _payload_at(data, 0, segment_id, offset, sequence)
    if payload is None:
        raise _unreadable(segment_id, offset, sequence)
    return payload


def _unreadable(segment_id: int, offset: int, sequence: int) -> LogCorrupt:
    return LogCorrupt(
        f"{segment_file_name(segment_id)} at offset {offset}: record {sequence} does not read back"
    )


def _read_file(path: Path) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _pwrite_all(fd: int, data: bytearray, offset: int) -> None:
    view = memoryview(data)
    written = 0
    for _ in range(_WRITE_ATTEMPTS_MAX):
        if written == len(data):
            return
        count = os.pwrite(fd, view[written:], offset + written)
        if count <= 0:
            raise OSError(errno.EIO, "pwrite wrote nothing")
        written += count
    if written != len(data):
        raise OSError(errno.EIO, f"pwrite still short after {_WRITE_ATTEMPTS_MAX} attempts")


_datasync = getattr(os, "fdatasync", os.fsync)


class Log:
    """See the module docstring. Create with `Log.open`."""

    def __init__(
        self,
        directory: Path,
        segment_max_bytes: int,
        segments: list[_Segment],
        lock_fd: int,
        directory_fd: int,
    ) -> None:
        self._directory = directory
        self._segment_max_bytes = segment_max_bytes
        self._segments = segments  # ordered by id; the last is the active one
        self._firsts = [s.first_sequence for s in segments]  # for bisect in `segment_of`
        self._lock_fd = lock_fd
        self._directory_fd = directory_fd
        active = segments[-1]
        # Read by callers on every message, so attributes rather than properties; only the
        # log assigns them.
        self.next_sequence = active.last_sequence + 1
        # every record up to this sequence number is on disk and synced
        self.durable_sequence = active.last_sequence
        # the segment the last appended record went to (the next one goes here or after)
        self.active_segment_id = active.segment_id
        # the byte offset, in the active segment, of the record `append` returned last
        self.last_record_offset = 0
        # the first sequence number of the span `extend_span` adds to (0: none is open),
        # and where its header starts in the tail
        self.span_sequence = 0
        self._span_start = 0
        # the span's bytes may grow to this length of the tail (its own bound, the segment's)
        self._span_end = 0
        self._pending: list[_Chunk] = []
        # The bytes of the last pending chunk while it belongs to the active segment and the
        # log takes appends: `append` adds to it with no other check while a record fits.
        self._tail: bytearray | None = None
        self._tail_limit = min(segment_max_bytes, RECORD_PAYLOAD_MAX_BYTES)
        # the first sequence number not sealed into a batch yet: the records from here on
        # become durable together, with the next batch
        self.unsealed_from = self.next_sequence
        self._in_flight = False
        self._flight: Batch | None = None  # the batch `sync_batch` is writing, for `read_record`
        self._read_fds: dict[int, int] = {}  # segment id -> descriptor for `read_record`
        self._read_ahead: list[_ReadAhead] = []  # oldest first, at most READ_AHEAD_BLOCKS_MAX
        self._failed: BaseException | None = None
        self._closed = False
        # Writer state: touched only by `sync_batch` (possibly on another thread).
        self._write_segment_id = 0
        self._write_fd = -1

    # --- opening and recovery --------------------------------------------------------------

    @classmethod
    def open(
        cls, directory: str | os.PathLike[str], segment_max_bytes: int = SEGMENT_MAX_BYTES_DEFAULT
    ) -> tuple[Log, RecoveryReport]:
        """Open (or create) the log in `directory`, recover it, and report what was found."""
        if segment_max_bytes < SEGMENT_MAX_BYTES_MIN:
            raise ValueError(f"segment_max_bytes must be at least {SEGMENT_MAX_BYTES_MIN}")
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(path / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise LogError(f"log directory {path} is in use by another process") from None
        directory_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            segments, report = _recover(path, directory_fd)
        except BaseException:
            os.close(directory_fd)
            os.close(lock_fd)
            raise
        return cls(path, segment_max_bytes, segments, lock_fd, directory_fd), report

    # --- queries ---------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def pending_records(self) -> int:
        """Appended and not yet sealed for a sync."""
        return self.next_sequence - self.unsealed_from

    @property
    def failed(self) -> bool:
        return self._failed is not None

    def segments(self) -> list[SegmentInfo]:
        return [s.info() for s in self._segments]

    def segment_of(self, sequence: int) -> int:
        """The id of the segment that holds record `sequence` (KeyError if none does)."""
        index = bisect.bisect_right(self._firsts, sequence) - 1
        if index >= 0:
            segment = self._segments[index]
            if segment.first_sequence <= sequence <= segment.last_sequence:
                return segment.segment_id
        raise KeyError(sequence)

    # --- appending and group commit --------------------------------------------------------

    def append(self, payload: bytes | bytearray | memoryview) -> int:
        """Buffer one record; return its sequence number. Durable only after a sync."""
        if self.span_sequence:
            self._close_span()
        length = len(payload)
        active = self._segments[-1]
        offset = active.size_bytes
        data = self._tail
        if data is None or offset + RECORD_HEADER_BYTES + length > self._tail_limit:
            data = self._open_tail(length, RECORD_HEADER_BYTES)
            active = self._segments[-1]
            offset = active.size_bytes
        sequence = self.next_sequence
        crc = zlib.crc32(payload, zlib.crc32(_RECORD_TAIL.pack(length, sequence)))
        data += _RECORD_HEADER.pack(crc, length, sequence)
        data += payload
        active.size_bytes = offset + RECORD_HEADER_BYTES + length
        active.last_sequence = sequence
        self.last_record_offset = offset
        self.next_sequence = sequence + 1
        return sequence

    def append_span(self, payload: bytes | bytearray | memoryview) -> int:
        """Buffer a span holding one item, `payload`; return its sequence number. The span
        takes more items (`extend_span`) until anything else is appended or it is sealed."""
        if self.span_sequence:
            self._close_span()
        length = len(payload)
        active = self._segments[-1]
        offset = active.size_bytes
        data = self._tail
        if (
            data is None
            or active.version != SEGMENT_FORMAT_VERSION
            or offset + SPAN_HEADER_BYTES + length > self._tail_limit
        ):
            data = self._open_tail(length, SPAN_HEADER_BYTES)
            active = self._segments[-1]
            offset = active.size_bytes
        sequence = self.next_sequence
        start = self._span_start = len(data)
        data += _SPAN_PLACEHOLDER  # written by `_close_span`
        data += payload
        self._span_end = (
            start
            + SPAN_HEADER_BYTES
            + min(SPAN_PAYLOAD_MAX_BYTES, self._segment_max_bytes - offset - SPAN_HEADER_BYTES)
        )
        active.size_bytes = offset + SPAN_HEADER_BYTES + length
        active.last_sequence = sequence
        self.last_record_offset = offset
        self.next_sequence = sequence + 1
        self.span_sequence = sequence
        return sequence

    def extend_span(self, payload: bytes | bytearray | memoryview) -> int:
        """Add one item to the open span (the last record, unsealed); return its sequence
        number, or 0 if there is no open span or it has no room for `payload`."""
        data = self._tail
        length = len(payload)
        if not self.span_sequence or data is None or len(data) + length > self._span_end:
            return 0
        data += payload
        sequence = self.next_sequence
        active = self._segments[-1]
        active.size_bytes += length
        active.last_sequence = sequence
        self.next_sequence = sequence + 1
        return sequence

    def _close_span(self) -> None:
        """Write the open span's header and CRC; it takes no more items."""
        data = self._tail  # the span's until it is closed, unless the log failed meanwhile
        if data is not None:
            start = self._span_start
            length = len(data) - start - SPAN_HEADER_BYTES
            count = self.next_sequence - self.span_sequence
            _SPAN_HEADER.pack_into(data, start, 0, length | _SPAN, self.span_sequence, count)
            view = memoryview(data)
            crc = zlib.crc32(view[start + 4 :])
            view.release()  # the tail grows again: no view may hold it
            _CRC.pack_into(data, start, crc)
        self.span_sequence = 0

    def _open_tail(self, length: int, header_bytes: int) -> bytearray:
        """The pending bytes the next record of `length` bytes (after a header of
        `header_bytes`) goes to, after every check `append` leaves out while it has a tail
        with room: the log still takes appends, the record's size, and the segment's (a
        new one once the active one is full, or for a span in a format 1 segment)."""
        if self._failed is not None or self._closed:
            self._refuse()
        if length > RECORD_PAYLOAD_MAX_BYTES:
            raise ValueError(f"record of {length} bytes exceeds {RECORD_PAYLOAD_MAX_BYTES}")
        active = self._segments[-1]
        pending = self._pending
        if (
            active.size_bytes + header_bytes + length > self._segment_max_bytes
            and active.last_sequence >= active.first_sequence
        ) or (header_bytes == SPAN_HEADER_BYTES and active.version != SEGMENT_FORMAT_VERSION):
            self._roll()
            chunk = pending[-1]
        elif pending and pending[-1].segment_id == active.segment_id:
            chunk = pending[-1]
        else:
            chunk = _Chunk(active.segment_id, active.size_bytes, create=False)
            pending.append(chunk)
        self._tail = chunk.data
        return chunk.data

    def _roll(self) -> None:
        sequence = self.next_sequence
        segment = _Segment(
            self._segments[-1].segment_id + 1,
            first_sequence=sequence,
            last_sequence=sequence - 1,
            size_bytes=SEGMENT_HEADER_BYTES,
        )
        chunk = _Chunk(segment.segment_id, 0, create=True)
        chunk.data += encode_segment_header(segment.segment_id, sequence)
        self._pending.append(chunk)
        self._segments.append(segment)
        self._firsts.append(sequence)
        self.active_segment_id = segment.segment_id

    def seal(self) -> Batch | None:
        """Take the pending appends as a batch for `sync_batch`; None if there are none."""
        if self._failed is not None or self._closed:
            self._refuse()
        if self._in_flight:
            raise LogError("a batch is already in flight; sync it before sealing another")
        if not self._pending:
            return None
        if self.span_sequence:
            self._close_span()
        batch = Batch(tuple(self._pending), self.unsealed_from, self.next_sequence - 1)
        self._pending = []
        self._tail = None
        self.unsealed_from = self.next_sequence
        self._in_flight = True
        self._flight = batch
        return batch

    def sync_batch(self, batch: Batch) -> int:
        """Write and sync a sealed batch; return the highest durable sequence number.

        May run on a thread of its own (see the module docstring). Raises `LogFailed` if
        the disk refused; the log is then unusable.
        """
        if self._failed is not None:
            self._refuse()
        if batch.first_sequence != self.durable_sequence + 1:
            raise LogError(
                f"batch {batch.first_sequence}..{batch.last_sequence} does not follow"
                f" durable sequence {self.durable_sequence}"
            )
        try:
            for chunk in batch.chunks:
                fd = self._writer_fd(chunk)
                _pwrite_all(fd, chunk.data, chunk.offset)
                _datasync(fd)
                if chunk.create:
                    os.fsync(self._directory_fd)
        except OSError as error:
            self._failed = error
            self._tail = None  # appends go through `_open_tail`, which refuses them
            raise LogFailed(f"log write failed, durability lost: {error}") from error
        self.durable_sequence = batch.last_sequence
        self._in_flight = False
        self._flight = None  # after the durable sequence moved: see `read_record`
        return batch.last_sequence

    def _writer_fd(self, chunk: _Chunk) -> int:
        if chunk.segment_id == self._write_segment_id:
            return self._write_fd
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1
        path = self._directory / segment_file_name(chunk.segment_id)
        flags = os.O_WRONLY | (os.O_CREAT | os.O_EXCL if chunk.create else 0)
        self._write_fd = os.open(path, flags, 0o644)
        self._write_segment_id = chunk.segment_id
        return self._write_fd

    def flush_and_sync(self) -> int:
        """Write and sync all pending appends; return the highest durable sequence number."""
        batch = self.seal()
        if batch is None:
            return self.durable_sequence
        return self.sync_batch(batch)

    def _refuse(self) -> None:
        if self._closed:
            raise LogError("log is closed")
        raise LogFailed(f"log failed earlier, durability lost: {self._failed}")

    # --- reading ---------------------------------------------------------------------------

    def records(self) -> Iterator[tuple[int, bytes]]:
        """Every durable record in order, as (sequence number, payload), reading the files."""
        for sequence, _segment_id, _offset, payload in self.located_records():
            yield sequence, payload

    def located_records(self) -> Iterator[tuple[int, int, int, bytes]]:
        """`records` with where each one lies: (sequence, segment id, offset, payload)."""
        for segment in list(self._segments):
            last = min(segment.last_sequence, self.durable_sequence)
            if last < segment.first_sequence:
                continue
            data = _read_file(self._directory / segment_file_name(segment.segment_id))
            for sequence, _count, offset, payload in _iter_records(
                data, segment.segment_id, segment.first_sequence, last
            ):
                yield sequence, segment.segment_id, offset, bytes(payload)

    def read_record(self, segment_id: int, offset: int, sequence: int) -> bytes:
        """The payload of one record, by where `append` (or `located_records`) put it.

        A durable record is read from its file, with the bytes after it (`_ReadAhead`): a
        record read back is most often followed by the next ones its caller wants, appended
        after it. A newer one is read from the bytes waiting to be written (pending, or in
        the batch `sync_batch` is writing on another thread: that batch is taken before the
        durable sequence is looked at, so the record is in one place or the other). The CRC
        and sequence are checked: `LogCorrupt` if they do not match.
        """
        flight = self._flight
        if self.span_sequence and sequence >= self.span_sequence:
            self._close_span()  # the one asked for: its header says how long it is
        if sequence <= self.durable_sequence:
            return self._read_durable(segment_id, offset, sequence)
        chunks = [*(flight.chunks if flight is not None else ()), *self._pending]
        record = _record_in_chunks(chunks, segment_id, offset)
        return _checked_payload(record, segment_id, offset, sequence)

    def _read_durable(self, segment_id: int, offset: int, sequence: int) -> bytes:
        """A durable record's payload: from a block read before, or read now with the bytes
        that follow it (one ``pread``)."""
        blocks = self._read_ahead
        for block in blocks:
            if block.segment_id == segment_id and sequence <= block.durable_sequence:
                start = offset - block.offset
                payload = _payload_at(block.data, start, segment_id, offset, sequence)
                if payload is not None:
                    return payload
        size_bytes = READ_AHEAD_BYTES_MIN
        for block in blocks:
            if block.segment_id == segment_id and block.offset <= offset <= block.end:
                # the caller reads on past a block: read more at once next time
                size_bytes = min(2 * len(block.data), READ_AHEAD_BYTES_MAX)
                blocks.remove(block)
                break
        else:
            if len(blocks) >= READ_AHEAD_BLOCKS_MAX:
                del blocks[0]
        fd = self._read_fds.get(segment_id)
        if fd is None:
            self._segment(segment_id)  # KeyError for a segment the log does not have
            path = self._directory / segment_file_name(segment_id)
            fd = self._read_fds[segment_id] = os.open(path, os.O_RDONLY)
        # taken before reading: every record up to it is whole in the file by now
        durable_sequence = self.durable_sequence
        data = os.pread(fd, size_bytes, offset)
        header = _header(data, 0, True)
        if not isinstance(header, DamageKind):
            wanted = header.size + header.length
            # a record larger than the block: the rest of it (a length out of bounds is
            # damage, refused below without reading that much)
            if len(data) < wanted:
                data += os.pread(fd, wanted - len(data), offset + len(data))
        if len(data) <= READ_AHEAD_BYTES_MAX:  # a larger record is not kept
            blocks.append(_ReadAhead(segment_id, offset, data, durable_sequence))
        return _checked_payload(data, segment_id, offset, sequence)

    def read(self, segment_id: int, sequences: Collection[int]) -> dict[int, bytes]:
        """The payloads of the given records of a sealed, durable segment (a span's under
        each of its sequence numbers asked for)."""
        segment = self._segment(segment_id)
        if segment is self._segments[-1] or segment.last_sequence > self.durable_sequence:
            raise ValueError(f"segment {segment_id} is still being written")
        wanted = set(sequences)
        for sequence in wanted:
            if not segment.first_sequence <= sequence <= segment.last_sequence:
                raise ValueError(f"record {sequence} is not in segment {segment_id}")
        found: dict[int, bytes] = {}
        if not wanted:
            return found
        data = _read_file(self._directory / segment_file_name(segment_id))
        for sequence, count, _offset, payload in _iter_records(
            data, segment_id, segment.first_sequence, segment.last_sequence
        ):
            if count == 1:
                if sequence in wanted:
                    found[sequence] = bytes(payload)
                continue
            hits = [s for s in wanted if sequence <= s < sequence + count]
            if hits:
                copy = bytes(payload)
                for hit in hits:
                    found[hit] = copy
        return found

    def _segment(self, segment_id: int) -> _Segment:
        for segment in self._segments:
            if segment.segment_id == segment_id:
                return segment
        raise KeyError(segment_id)

    # --- space reclaim ---------------------------------------------------------------------

    def retire(self, segment_id: int) -> list[int]:
        """Declare every record of a sealed segment dead; return the segment ids deleted now.

        Deletion follows the prefix rule of the module docstring, so a retired segment may
        wait for older ones; `reclaim` (also run here) deletes what has become deletable.
        """
        segment = self._segment(segment_id)
        if segment is self._segments[-1]:
            raise ValueError(f"segment {segment_id} is the active segment")
        segment.retired = True
        return self.reclaim()

    def reclaim(self) -> list[int]:
        """Delete the oldest segments while they are retired, sealed and durable."""
        if self._in_flight:
            raise LogError("cannot delete segments while a batch is in flight")
        deleted: list[int] = []
        # Bounded by the number of segments; the active one is never deleted.
        for _ in range(len(self._segments)):
            oldest = self._segments[0]
            if (
                not oldest.retired
                or len(self._segments) == 1
                or oldest.last_sequence > self.durable_sequence
            ):
                break
            try:
                os.unlink(self._directory / segment_file_name(oldest.segment_id))
                # Sync each unlink before the next so no newer segment is gone while an
                # older one could come back after a crash.
                os.fsync(self._directory_fd)
            except FileNotFoundError:
                pass
            except OSError as error:
                self._failed = error
                self._tail = None
                raise LogFailed(f"deleting a segment failed: {error}") from error
            del self._segments[0]
            del self._firsts[0]
            fd = self._read_fds.pop(oldest.segment_id, None)
            if fd is not None:
                os.close(fd)
            self._read_ahead = [b for b in self._read_ahead if b.segment_id != oldest.segment_id]
            deleted.append(oldest.segment_id)
        return deleted

    def compact(self, segment_id: int, live_sequences: Collection[int]) -> dict[int, int]:
        """Copy the live records of a sealed segment to the head, sync, retire the segment.

        Returns old sequence number → new sequence number. The copies come after every
        record written so far; the caller must make sure that moving a record later does not
        change its meaning (see `warren.storage.journal`). Blocks for one sync. A span is
        copied as a plain record, so this is for callers that append none (the journal
        compacts itself: `QueueJournal.apply_compaction`).
        """
        if self._in_flight:
            raise LogError("cannot compact while a batch is in flight")
        payloads = self.read(segment_id, live_sequences)
        moved = {old: self.append(payloads[old]) for old in sorted(payloads)}
        self.flush_and_sync()
        self.retire(segment_id)
        return moved

    # --- closing ---------------------------------------------------------------------------

    def close(self, flush: bool = True) -> None:
        """Sync pending appends (unless `flush` is false: they are dropped, as in a crash)."""
        if self._closed:
            return
        try:
            if flush and self._failed is None and not self._in_flight:
                self.flush_and_sync()
        finally:
            self._closed = True
            self._tail = None
            if self._write_fd >= 0:
                os.close(self._write_fd)
                self._write_fd = -1
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
            self._read_ahead.clear()
            os.close(self._directory_fd)
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(flush=exc_info[0] is None)


# --- recovery --------------------------------------------------------------------------------


def _list_segment_ids(path: Path) -> list[int]:
    ids = []
    for entry in os.listdir(path):
        match = _SEGMENT_NAME.match(entry)
        if match is not None and int(match.group(1)) > 0:
            ids.append(int(match.group(1)))
    return sorted(ids)


def _recover(path: Path, directory_fd: int) -> tuple[list[_Segment], RecoveryReport]:
    ids = _list_segment_ids(path)
    segments: list[_Segment] = []
    damage: list[Damage] = []
    next_sequence = 0  # 0: no expectation yet (first segment sets it)
    first_record_sequence = 0
    last_record_sequence = 0
    records = 0
    bytes_kept = 0
    for index, segment_id in enumerate(ids):
        is_last = index == len(ids) - 1
        file_path = path / segment_file_name(segment_id)
        data = _read_file(file_path)
        header = _decode_segment_header(data, segment_id)
        if not isinstance(header, DamageKind) and next_sequence and header[0] < next_sequence:
            header = DamageKind.OVERLAP
        if isinstance(header, DamageKind):
            damage.append(Damage(segment_id, header, 0, len(data)))
            expected = max(next_sequence, 1)
            segments.append(_Segment(segment_id, expected, expected - 1, len(data)))
            continue
        first_sequence, version = header
        if next_sequence and first_sequence > next_sequence:
            lost = (next_sequence, first_sequence - 1)
            damage.append(Damage(segment_id, DamageKind.SEQUENCE_GAP, 0, 0, sequences_lost=lost))
        scan = _scan_records(data, first_sequence, version >= 2)
        if scan.damage is not None:
            dropped = len(data) - scan.valid_bytes
            damage.append(Damage(segment_id, scan.damage, scan.valid_bytes, dropped, is_last))
            if is_last:
                _truncate(file_path, scan.valid_bytes)
        segments.append(
            _Segment(
                segment_id, first_sequence, scan.last_sequence, scan.valid_bytes, False, version
            )
        )
        count = scan.last_sequence - first_sequence + 1
        if count and not first_record_sequence:
            first_record_sequence = first_sequence
        if count:
            last_record_sequence = scan.last_sequence
        records += count
        bytes_kept += scan.valid_bytes
        next_sequence = scan.last_sequence + 1
    new_segment_id = None
    if not segments or _unusable_as_active(segments[-1], damage):
        new_segment_id = ids[-1] + 1 if ids else 1
        first_sequence = max(next_sequence, 1)
        _create_segment(path, directory_fd, new_segment_id, first_sequence)
        segments.append(
            _Segment(new_segment_id, first_sequence, first_sequence - 1, SEGMENT_HEADER_BYTES)
        )
        if not ids:
            new_segment_id = None  # a new log, not a repair
    report = RecoveryReport(
        directory=str(path),
        segments=len(segments),
        records=records,
        first_sequence=first_record_sequence,
        last_sequence=last_record_sequence,
        bytes_kept=bytes_kept,
        damage=tuple(damage),
        new_segment_id=new_segment_id,
    )
    return segments, report


def _unusable_as_active(segment: _Segment, damage: list[Damage]) -> bool:
    """A last segment dropped whole (bad header) takes no appends."""
    return any(
        d.segment_id == segment.segment_id
        and d.kind in (DamageKind.MISSING_HEADER, DamageKind.BAD_HEADER, DamageKind.OVERLAP)
        for d in damage
    )


def _truncate(file_path: Path, size_bytes: int) -> None:
    fd = os.open(file_path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size_bytes)
        _datasync(fd)
    finally:
        os.close(fd)


def _create_segment(path: Path, directory_fd: int, segment_id: int, first_sequence: int) -> None:
    fd = os.open(path / segment_file_name(segment_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _pwrite_all(fd, bytearray(encode_segment_header(segment_id, first_sequence)), 0)
        _datasync(fd)
    finally:
        os.close(fd)
    os.fsync(directory_fd)
