"""The segmented log: framing, group commit, roll-over, recovery rules, retire, compaction."""

from __future__ import annotations

import os
import shutil
import struct
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warren.storage import log as log_module
from warren.storage.log import (
    RECORD_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
    SPAN_HEADER_BYTES,
    DamageKind,
    Log,
    LogCorrupt,
    LogError,
    LogFailed,
    encode_record,
    encode_segment_header,
    encode_span,
    segment_file_name,
)


def payload_for(sequence: int) -> bytes:
    """Deterministic content of varying length, so any mix-up shows."""
    return (b"%d:" % sequence) * (sequence % 7)


def write_log(directory: Path, count: int, segment_max_bytes: int = 1 << 20) -> None:
    log, _ = Log.open(directory, segment_max_bytes)
    for sequence in range(1, count + 1):
        assert log.append(payload_for(sequence)) == sequence
    assert log.flush_and_sync() == count
    log.close()


def read_all(directory: Path, segment_max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
    log, _ = Log.open(directory, segment_max_bytes)
    try:
        return list(log.records())
    finally:
        log.close()


def segment_path(directory: Path, segment_id: int) -> Path:
    return directory / segment_file_name(segment_id)


# --- framing ---------------------------------------------------------------------------------


def test_record_bytes_are_crc_length_sequence_payload() -> None:
    record = encode_record(7, b"hello")
    crc, length, sequence = struct.unpack_from("<IIQ", record)
    assert (length, sequence, record[RECORD_HEADER_BYTES:]) == (5, 7, b"hello")
    assert crc == zlib.crc32(record[4:])


def test_a_new_log_is_one_segment_with_a_header_and_no_records(tmp_path: Path) -> None:
    log, report = Log.open(tmp_path)
    assert report.clean and report.records == 0 and report.segments == 1
    assert report.summary().endswith("no records, 0 bytes; clean")
    assert log.next_sequence == 1 and log.durable_sequence == 0
    log.close()
    assert segment_path(tmp_path, 1).read_bytes() == encode_segment_header(1, 1)


def test_appended_records_are_on_disk_in_the_documented_framing(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    log.append(b"a")
    log.append(b"")
    log.append(b"ccc")
    log.flush_and_sync()
    log.close()
    expected = encode_segment_header(1, 1) + b"".join(
        encode_record(s, p) for s, p in [(1, b"a"), (2, b""), (3, b"ccc")]
    )
    assert segment_path(tmp_path, 1).read_bytes() == expected


@settings(max_examples=50, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=40),
    segment_max_bytes=st.integers(min_value=48, max_value=2000),
)
def test_what_was_synced_reads_back_in_order_after_reopening(
    tmp_path_factory: pytest.TempPathFactory, payloads: list[bytes], segment_max_bytes: int
) -> None:
    directory = tmp_path_factory.mktemp("log")
    log, _ = Log.open(directory, segment_max_bytes)
    sequences = [log.append(p) for p in payloads]
    assert sequences == list(range(1, len(payloads) + 1))
    assert log.flush_and_sync() == len(payloads)
    log.close()
    log, report = Log.open(directory, segment_max_bytes)
    assert report.clean and report.records == len(payloads)
    assert list(log.records()) == list(enumerate(payloads, start=1))
    log.close()


# --- group commit ----------------------------------------------------------------------------


def test_flush_and_sync_returns_the_highest_durable_sequence(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    assert log.flush_and_sync() == 0  # nothing pending: no write, same answer
    for _ in range(10):
        log.append(b"x" * 128)
    assert log.durable_sequence == 0 and log.pending_records == 10
    assert log.flush_and_sync() == 10
    assert log.durable_sequence == 10 and log.pending_records == 0
    assert log.flush_and_sync() == 10
    log.append(b"y")
    assert log.flush_and_sync() == 11
    log.close()


def test_one_batch_is_one_write_and_one_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_pwrite, real_sync = os.pwrite, log_module._datasync

    def counting_pwrite(fd: int, data: bytes, offset: int) -> int:
        calls.append("write")
        return real_pwrite(fd, data, offset)

    def counting_sync(fd: int) -> None:
        calls.append("sync")
        real_sync(fd)

    log, _ = Log.open(tmp_path)
    monkeypatch.setattr(log_module.os, "pwrite", counting_pwrite)
    monkeypatch.setattr(log_module, "_datasync", counting_sync)
    for _ in range(1000):
        log.append(b"m" * 128)
    assert log.flush_and_sync() == 1000
    assert calls == ["write", "sync"]
    log.close()


def test_appends_go_on_while_a_sealed_batch_syncs_on_another_thread(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path, segment_max_bytes=4096)
    for sequence in range(1, 101):
        log.append(payload_for(sequence))
    batch = log.seal()
    assert batch is not None and (batch.first_sequence, batch.last_sequence) == (1, 100)
    with pytest.raises(LogError, match="in flight"):
        log.seal()
    result: list[int] = []
    syncer = threading.Thread(target=lambda: result.append(log.sync_batch(batch)))
    syncer.start()
    for sequence in range(101, 201):  # crosses segment boundaries while the sync runs
        log.append(payload_for(sequence))
    syncer.join()
    assert result == [100] and log.durable_sequence == 100
    assert log.flush_and_sync() == 200
    log.close()
    assert read_all(tmp_path, 4096) == [(s, payload_for(s)) for s in range(1, 201)]


def test_a_record_reads_back_by_position_pending_in_flight_and_durable(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path, segment_max_bytes=4096)
    positions = {}
    for sequence in range(1, 151):  # several segments
        assert log.append(payload_for(sequence)) == sequence
        positions[sequence] = (log.active_segment_id, log.last_record_offset)

    def reads_back(sequences: range) -> bool:
        return all(log.read_record(*positions[s], s) == payload_for(s) for s in sequences)

    assert reads_back(range(1, 151))  # pending
    batch = log.seal()
    assert batch is not None
    for sequence in range(151, 171):
        log.append(payload_for(sequence))
        positions[sequence] = (log.active_segment_id, log.last_record_offset)
    assert reads_back(range(1, 171))  # in flight and pending
    log.sync_batch(batch)
    assert reads_back(range(1, 171))  # durable and pending
    log.flush_and_sync()
    assert reads_back(range(1, 171))
    with pytest.raises(LogCorrupt):
        log.read_record(*positions[5], 6)  # the record there is another one
    log.close()
    located = Log.open(tmp_path, segment_max_bytes=4096)[0]
    assert [(s, (g, o)) for s, g, o, _ in located.located_records()] == sorted(positions.items())
    located.close()


def test_a_damaged_record_does_not_read_back(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    log.append(b"first")
    log.append(b"second")
    offset = log.last_record_offset
    log.flush_and_sync()
    with open(tmp_path / segment_file_name(1), "r+b") as segment:
        segment.seek(offset + RECORD_HEADER_BYTES)
        segment.write(b"S")
    with pytest.raises(LogCorrupt, match="record 2 does not read back"):
        log.read_record(1, offset, 2)
    log.close()


def append_located(log: Log, count: int) -> dict[int, tuple[int, int]]:
    """Append records `payload_for` the next `count` sequence numbers; where each went."""
    positions = {}
    for _ in range(count):
        sequence = log.append(payload_for(log.next_sequence))
        positions[sequence] = (log.active_segment_id, log.last_record_offset)
    return positions


def test_a_run_read_back_crosses_segment_ends_with_one_read_per_block(
    tmp_path: Path, preads: list[int]
) -> None:
    log, _ = Log.open(tmp_path, segment_max_bytes=4096)
    positions = append_located(log, 600)  # records of 16-43 bytes: 5 segments
    log.flush_and_sync()
    assert len({segment_id for segment_id, _ in positions.values()}) > 3
    for sequence, (segment_id, offset) in positions.items():
        assert log.read_record(segment_id, offset, sequence) == payload_for(sequence)
    # a segment holds 4 KiB: one block each (the first read takes the minimum block)
    assert len(preads) == len({segment_id for segment_id, _ in positions.values()})
    log.close()


def test_a_run_with_settled_holes_reads_only_what_is_asked(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    positions = append_located(log, 2000)
    log.flush_and_sync()
    asked = [s for s in positions if s % 3 == 0 or s % 7 == 0]  # the rest settled
    assert all(log.read_record(*positions[s], s) == payload_for(s) for s in asked)
    # blocks grew while the reads went on, and memory stays bounded
    blocks = log._read_ahead  # the bound is the point of this test
    assert len(blocks) <= log_module.READ_AHEAD_BLOCKS_MAX
    assert all(len(b.data) <= log_module.READ_AHEAD_BYTES_MAX for b in blocks)
    log.close()


@pytest.mark.parametrize("spans", [False, True])
def test_a_damaged_record_in_a_block_is_refused_and_its_neighbours_read_back(
    tmp_path: Path, spans: bool
) -> None:
    """A record's payload, or a span's count (its CRC covers it too), damaged in the file:
    that record does not read back under any of its sequence numbers, the rest of the
    block it was read with does."""
    log, _ = Log.open(tmp_path)
    if spans:
        placed = append_spans_and_records(log, 20)
    else:
        located = append_located(log, 50)
        placed = {s: (*where, payload_for(s)) for s, where in located.items()}
    log.flush_and_sync()
    by_offset: dict[int, list[int]] = {}
    for sequence, (_, offset, _) in placed.items():
        by_offset.setdefault(offset, []).append(sequence)
    damaged, refused = [(o, items) for o, items in by_offset.items() if len(items) > spans][4]
    segment_id = placed[refused[0]][0]
    with open(tmp_path / segment_file_name(segment_id), "r+b") as segment:
        segment.seek(damaged + RECORD_HEADER_BYTES)
        segment.write(b"\x09")
    for sequence, (segment_id, offset, payload) in placed.items():  # the first reads a block
        if sequence in refused:
            with pytest.raises(LogCorrupt, match=f"record {sequence} does not read back"):
                log.read_record(segment_id, offset, sequence)
        else:
            assert log.read_record(segment_id, offset, sequence) == payload
    log.close()


def test_a_block_serves_only_records_durable_when_it_was_read(tmp_path: Path) -> None:
    """A block read while a sync was writing may hold a torn record past the durable end;
    that record is read again once durable, never taken from the block."""
    log, _ = Log.open(tmp_path)
    positions = append_located(log, 10)
    log.flush_and_sync()
    positions |= append_located(log, 10)
    batch = log.seal()
    assert batch is not None
    chunk = batch.chunks[0]
    torn = bytes(chunk.data[: len(chunk.data) // 2]) + b"\0" * (len(chunk.data) // 2)
    os.pwrite(log._writer_fd(chunk), torn, chunk.offset)  # the sync, mid-write
    assert log.read_record(*positions[10], 10) == payload_for(10)  # the block takes the tear
    log.sync_batch(batch)
    for sequence in range(11, 21):
        assert log.read_record(*positions[sequence], sequence) == payload_for(sequence)
    log.close()


def test_a_record_larger_than_a_block_reads_back_whole_and_is_not_kept(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    large = b"L" * (log_module.READ_AHEAD_BYTES_MAX + 1000)
    log.append(b"small")
    first = log.last_record_offset
    log.append(large)
    offset = log.last_record_offset
    log.flush_and_sync()
    assert log.read_record(1, first, 1) == b"small"
    assert log.read_record(1, offset, 2) == large
    blocks = log._read_ahead  # what stays in memory is the point
    assert all(len(b.data) <= log_module.READ_AHEAD_BYTES_MAX for b in blocks)
    log.close()


def test_a_batch_out_of_order_is_refused(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    log.append(b"a")
    first = log.seal()
    assert first is not None
    log.sync_batch(first)
    with pytest.raises(LogError, match="does not follow"):
        log.sync_batch(first)
    log.close()


def test_a_failed_sync_fails_the_log_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, _ = Log.open(tmp_path)
    log.append(b"a")
    assert log.flush_and_sync() == 1

    def failing_sync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_module, "_datasync", failing_sync)
    log.append(b"b")
    with pytest.raises(LogFailed, match="durability lost"):
        log.flush_and_sync()
    monkeypatch.undo()
    assert log.failed and log.durable_sequence == 1
    with pytest.raises(LogFailed):
        log.append(b"c")
    with pytest.raises(LogFailed):
        log.flush_and_sync()
    log.close()


def test_closing_without_flush_drops_what_was_not_synced(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    log.append(b"kept")
    log.flush_and_sync()
    log.append(b"lost")
    log.close(flush=False)
    assert read_all(tmp_path) == [(1, b"kept")]


def test_a_directory_is_used_by_one_log_at_a_time(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    with pytest.raises(LogError, match="in use"):
        Log.open(tmp_path)
    log.close()
    again, _ = Log.open(tmp_path)
    again.close()


def test_a_payload_over_the_bound_is_refused(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)

    class Huge(bytes):
        def __len__(self) -> int:
            return log_module.RECORD_PAYLOAD_MAX_BYTES + 1

    with pytest.raises(ValueError, match="exceeds"):
        log.append(Huge())
    log.close()


# --- roll-over -------------------------------------------------------------------------------


def test_segments_roll_over_at_segment_max_bytes(tmp_path: Path) -> None:
    record_bytes = RECORD_HEADER_BYTES + 100
    segment_max_bytes = SEGMENT_HEADER_BYTES + 3 * record_bytes
    log, _ = Log.open(tmp_path, segment_max_bytes)
    for sequence in range(1, 11):
        log.append(bytes([sequence]) * 100)
        assert log.active_segment_id == (sequence - 1) // 3 + 1
        assert log.segment_of(sequence) == log.active_segment_id
    log.flush_and_sync()
    log.close()
    files = sorted(p.name for p in tmp_path.glob("*.wal"))
    assert files == ["00000001.wal", "00000002.wal", "00000003.wal", "00000004.wal"]
    assert [p.stat().st_size for p in sorted(tmp_path.glob("*.wal"))] == [
        segment_max_bytes,
        segment_max_bytes,
        segment_max_bytes,
        SEGMENT_HEADER_BYTES + record_bytes,
    ]
    assert segment_path(tmp_path, 3).read_bytes()[:SEGMENT_HEADER_BYTES] == encode_segment_header(
        3, 7
    )
    assert read_all(tmp_path, segment_max_bytes) == [(s, bytes([s]) * 100) for s in range(1, 11)]


def test_a_record_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path, segment_max_bytes=100)
    log.append(b"small")
    log.append(b"L" * 500)
    log.append(b"small again")
    log.flush_and_sync()
    assert [(s.first_sequence, s.last_sequence) for s in log.segments()] == [(1, 1), (2, 2), (3, 3)]
    log.close()
    assert [p for _, p in read_all(tmp_path, 100)] == [b"small", b"L" * 500, b"small again"]


# --- recovery: the last segment ----------------------------------------------------------------


def test_a_torn_last_record_is_cut_off_at_every_byte_offset(tmp_path: Path) -> None:
    source = tmp_path / "source"
    write_log(source, 5)
    path = segment_path(source, 1)
    whole = path.read_bytes()
    last_start = len(whole) - len(encode_record(5, payload_for(5)))
    for cut in range(last_start, len(whole)):
        directory = tmp_path / f"cut{cut}"
        shutil.copytree(source, directory)
        with open(segment_path(directory, 1), "r+b") as file:
            file.truncate(cut)
        log, report = Log.open(directory)
        assert report.records == 4 and report.last_sequence == 4
        if cut == last_start:
            assert report.clean  # the cut fell between records: nothing torn
        else:
            (damage,) = report.damage
            assert damage.kind in (DamageKind.PARTIAL_RECORD, DamageKind.BAD_CHECKSUM)
            assert (damage.offset, damage.bytes_dropped, damage.truncated) == (
                last_start,
                cut - last_start,
                True,
            )
            assert report.tail_bytes_truncated == cut - last_start
            assert "cut off" in report.summary()
        assert segment_path(directory, 1).stat().st_size == last_start
        assert list(log.records()) == [(s, payload_for(s)) for s in range(1, 5)]
        assert log.append(b"after") == 5
        log.close()
        assert read_all(directory)[-1] == (5, b"after")
        reopened, report = Log.open(directory)
        assert report.clean
        reopened.close()


def test_a_flipped_byte_in_the_last_record_drops_it_and_says_so(tmp_path: Path) -> None:
    source = tmp_path / "source"
    write_log(source, 5)
    whole = segment_path(source, 1).read_bytes()
    last_start = len(whole) - len(encode_record(5, payload_for(5)))
    for position in range(last_start, len(whole)):
        directory = tmp_path / f"flip{position}"
        shutil.copytree(source, directory)
        damaged = bytearray(whole)
        damaged[position] ^= 0x40
        segment_path(directory, 1).write_bytes(damaged)
        log, report = Log.open(directory)
        assert report.records == 4 and not report.clean
        (damage,) = report.damage
        assert damage.kind in (
            DamageKind.BAD_CHECKSUM,
            DamageKind.PARTIAL_RECORD,
            DamageKind.BAD_LENGTH,
        )
        assert damage.truncated and damage.bytes_dropped == len(whole) - last_start
        assert list(log.records()) == [(s, payload_for(s)) for s in range(1, 5)]
        log.close()


def test_garbage_after_the_last_record_is_cut_off(tmp_path: Path) -> None:
    write_log(tmp_path, 3)
    path = segment_path(tmp_path, 1)
    size = path.stat().st_size
    with open(path, "ab") as file:
        file.write(b"\x00" * 4096)
    log, report = Log.open(tmp_path)
    assert report.records == 3 and report.tail_bytes_truncated == 4096
    assert path.stat().st_size == size
    log.close()


def test_a_record_with_a_wrong_sequence_number_ends_the_log(tmp_path: Path) -> None:
    write_log(tmp_path, 2)
    with open(segment_path(tmp_path, 1), "ab") as file:
        file.write(encode_record(9, b"stale"))
    log, report = Log.open(tmp_path)
    assert [d.kind for d in report.damage] == [DamageKind.BAD_SEQUENCE]
    assert report.records == 2 and log.next_sequence == 3
    log.close()


@pytest.mark.parametrize("size", [0, 1, SEGMENT_HEADER_BYTES - 1])
def test_a_last_segment_torn_at_creation_is_left_and_a_new_one_started(
    tmp_path: Path, size: int
) -> None:
    write_log(tmp_path, 3)
    segment_path(tmp_path, 2).write_bytes(encode_segment_header(2, 4)[:size])
    log, report = Log.open(tmp_path)
    (damage,) = report.damage
    assert (damage.segment_id, damage.kind, damage.bytes_dropped) == (
        2,
        DamageKind.MISSING_HEADER,
        size,
    )
    assert report.new_segment_id == 3 and log.active_segment_id == 3
    assert log.append(b"next") == 4
    log.flush_and_sync()
    log.close()
    assert read_all(tmp_path)[-2:] == [(3, payload_for(3)), (4, b"next")]


# --- recovery: older segments ---------------------------------------------------------------


def three_segments(directory: Path) -> int:
    """Thirty records in three segments of ten; returns segment_max_bytes."""
    record_bytes = RECORD_HEADER_BYTES + 40
    segment_max_bytes = SEGMENT_HEADER_BYTES + 10 * record_bytes
    log, _ = Log.open(directory, segment_max_bytes)
    for sequence in range(1, 31):
        log.append(b"%040d" % sequence)
    log.flush_and_sync()
    assert [s.segment_id for s in log.segments()] == [1, 2, 3]
    log.close()
    return segment_max_bytes


def test_corruption_in_an_older_segment_drops_the_rest_of_that_segment_only(
    tmp_path: Path,
) -> None:
    segment_max_bytes = three_segments(tmp_path)
    record_bytes = RECORD_HEADER_BYTES + 40
    path = segment_path(tmp_path, 1)
    original = path.read_bytes()
    damaged = bytearray(original)
    offset = SEGMENT_HEADER_BYTES + 4 * record_bytes + 20  # inside record 5
    damaged[offset] ^= 0xFF
    path.write_bytes(damaged)
    for _ in range(2):  # the damage is reported at every open until the segment is retired
        log, report = Log.open(tmp_path, segment_max_bytes)
        assert [d.kind for d in report.damage] == [
            DamageKind.BAD_CHECKSUM,
            DamageKind.SEQUENCE_GAP,
        ]
        corrupt, gap = report.damage
        assert (corrupt.segment_id, corrupt.offset, corrupt.truncated) == (
            1,
            SEGMENT_HEADER_BYTES + 4 * record_bytes,
            False,
        )
        assert corrupt.bytes_dropped == 6 * record_bytes
        assert (gap.segment_id, gap.sequences_lost) == (2, (5, 10))
        assert "sequences 5..10 lost" in report.summary()
        assert [s for s, _ in log.records()] == [1, 2, 3, 4, *range(11, 31)]
        assert path.read_bytes() == bytes(damaged)  # evidence left in place
        log.close()
    log, _ = Log.open(tmp_path, segment_max_bytes)
    assert log.append(b"next") == 31 and log.active_segment_id == 4  # 3 is full
    assert log.retire(1) == [1]
    log.close()
    log, report = Log.open(tmp_path, segment_max_bytes)
    assert report.clean and report.first_sequence == 11 and report.last_sequence == 31
    log.close()


def test_an_older_segment_with_a_bad_header_is_dropped_whole(tmp_path: Path) -> None:
    segment_max_bytes = three_segments(tmp_path)
    path = segment_path(tmp_path, 2)
    damaged = bytearray(path.read_bytes())
    damaged[0] ^= 0x01  # magic
    path.write_bytes(damaged)
    log, report = Log.open(tmp_path, segment_max_bytes)
    assert [(d.segment_id, d.kind) for d in report.damage] == [
        (2, DamageKind.MISSING_HEADER),
        (3, DamageKind.SEQUENCE_GAP),
    ]
    assert report.damage[1].sequences_lost == (11, 20)
    assert [s for s, _ in log.records()] == [*range(1, 11), *range(21, 31)]
    assert log.active_segment_id == 3 and log.next_sequence == 31
    log.close()


def test_a_segment_overlapping_the_one_before_is_dropped(tmp_path: Path) -> None:
    segment_max_bytes = three_segments(tmp_path)
    stale = encode_segment_header(4, 25) + encode_record(25, b"stale")
    segment_path(tmp_path, 4).write_bytes(stale)
    log, report = Log.open(tmp_path, segment_max_bytes)
    assert [(d.segment_id, d.kind) for d in report.damage] == [(4, DamageKind.OVERLAP)]
    assert report.new_segment_id == 5 and log.next_sequence == 31
    assert [s for s, _ in log.records()] == list(range(1, 31))
    log.close()


# --- retire and compact ------------------------------------------------------------------------


def test_retired_segments_are_deleted_oldest_first_only(tmp_path: Path) -> None:
    segment_max_bytes = three_segments(tmp_path)
    log, _ = Log.open(tmp_path, segment_max_bytes)
    with pytest.raises(ValueError, match="active"):
        log.retire(3)
    assert log.retire(2) == []  # segment 1 is still there: 2 waits
    assert segment_path(tmp_path, 2).exists()
    assert log.retire(1) == [1, 2]
    assert not segment_path(tmp_path, 1).exists() and not segment_path(tmp_path, 2).exists()
    assert [s for s, _ in log.records()] == list(range(21, 31))
    with pytest.raises(KeyError):
        log.segment_of(5)
    log.close()
    log, report = Log.open(tmp_path, segment_max_bytes)
    assert report.clean and (report.first_sequence, report.last_sequence) == (21, 30)
    assert log.append(b"x") == 31
    log.close()


def test_a_retired_segment_with_unsynced_records_waits_for_the_sync(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path, segment_max_bytes=SEGMENT_HEADER_BYTES + 2 * 20)
    for _ in range(3):
        log.append(b"abcd")  # two records fit a segment: the third starts segment 2
    assert log.active_segment_id == 2
    assert log.retire(1) == []
    log.flush_and_sync()
    assert log.reclaim() == [1]
    log.close()


def test_the_next_sequence_survives_when_every_record_is_retired(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path, segment_max_bytes=SEGMENT_HEADER_BYTES + 20)
    for _ in range(3):
        log.append(b"abcd")
    log.flush_and_sync()
    assert log.retire(1) == [1] and log.retire(2) == [2]
    log.close()
    log, report = Log.open(tmp_path, segment_max_bytes=SEGMENT_HEADER_BYTES + 20)
    assert report.records == 1 and log.next_sequence == 4
    log.close()


def test_compaction_keeps_exactly_the_live_records(tmp_path: Path) -> None:
    segment_max_bytes = three_segments(tmp_path)
    log, _ = Log.open(tmp_path, segment_max_bytes)
    moved = log.compact(1, [2, 7, 9])
    assert moved == {2: 31, 7: 32, 9: 33}
    assert log.durable_sequence == 33
    assert not segment_path(tmp_path, 1).exists()
    log.close()
    records = read_all(tmp_path, segment_max_bytes)
    assert [s for s, _ in records] == list(range(11, 34))
    assert [p for s, p in records if s > 30] == [b"%040d" % 2, b"%040d" % 7, b"%040d" % 9]


def test_compaction_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    segment_max_bytes = three_segments(tmp_path)
    log, _ = Log.open(tmp_path, segment_max_bytes)
    with pytest.raises(ValueError, match="not in segment"):
        log.compact(1, [15])
    with pytest.raises(ValueError, match="still being written"):
        log.compact(3, [25])
    log.close()


# --- spans -------------------------------------------------------------------------------------


def test_a_span_takes_a_sequence_number_per_item_and_one_header_and_crc(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    assert log.append(b"before") == 1
    assert log.append_span(b"a") == 2
    assert log.extend_span(b"bb") == 3
    assert log.extend_span(b"ccc") == 4
    assert log.span_sequence == 2 and log.next_sequence == 5
    assert log.flush_and_sync() == 4
    assert log.span_sequence == 0 and log.extend_span(b"d") == 0  # sealed: closed
    log.close()
    data = segment_path(tmp_path, 1).read_bytes()
    start = SEGMENT_HEADER_BYTES + len(encode_record(1, b"before"))
    assert data[start:] == encode_span(2, 3, b"abbccc")
    assert len(data) - start == SPAN_HEADER_BYTES + 6
    assert read_all(tmp_path) == [(1, b"before"), (2, b"abbccc")]


def test_a_span_closes_when_anything_else_is_appended(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    log.append_span(b"x")
    log.append(b"other")
    assert log.extend_span(b"y") == 0
    assert log.append_span(b"y") == 3
    log.close()
    assert read_all(tmp_path) == [(1, b"x"), (2, b"other"), (3, b"y")]


def test_every_sequence_number_of_a_span_reads_it_back(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    log.append_span(b"one")
    log.extend_span(b"two")
    offset = log.last_record_offset
    assert log.read_record(1, offset, 2) == b"onetwo"  # pending: closes the span
    assert log.extend_span(b"three") == 0
    log.flush_and_sync()
    assert log.read_record(1, offset, 1) == log.read_record(1, offset, 2) == b"onetwo"
    with pytest.raises(LogCorrupt):
        log.read_record(1, offset, 3)
    log.close()


def test_reading_a_record_before_the_open_span_leaves_it_open(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    log.append(b"durable")
    durable_offset = log.last_record_offset
    log.flush_and_sync()
    log.append(b"pending")
    pending_offset = log.last_record_offset
    log.append_span(b"a")
    assert log.read_record(1, durable_offset, 1) == b"durable"
    assert log.read_record(1, pending_offset, 2) == b"pending"
    assert log.extend_span(b"b") == 4  # a paged-out body read back does not end a run
    log.close()
    assert read_all(tmp_path) == [(1, b"durable"), (2, b"pending"), (3, b"ab")]


def append_spans_and_records(log: Log, count: int) -> dict[int, tuple[int, int, bytes]]:
    """Append `count` records and spans of three or four items, by turns; where each
    sequence number went and the payload it reads back as (its span's, for a span)."""
    placed: dict[int, tuple[int, int, bytes]] = {}
    for index in range(count):
        sequence = log.next_sequence
        if index % 2:
            log.append(payload_for(sequence))
            items = [sequence]
        else:
            log.append_span(payload_for(sequence))
            items = [sequence]
            for _ in range(2 + index % 3 // 2):
                items.append(log.extend_span(payload_for(log.next_sequence)))
        payload = b"".join(payload_for(item) for item in items)
        for item in items:
            placed[item] = (log.active_segment_id, log.last_record_offset, payload)
    return placed


def test_spans_read_back_from_blocks_under_any_of_their_sequence_numbers(
    tmp_path: Path, preads: list[int]
) -> None:
    log, _ = Log.open(tmp_path)
    placed = append_spans_and_records(log, 200)
    log.flush_and_sync()
    for sequence, (segment_id, offset, payload) in placed.items():
        assert log.read_record(segment_id, offset, sequence) == payload
    # blocks of 4, 8, 16 KiB ... cover the segment: a handful of reads, not one a record
    assert len(preads) <= 6 < len(placed)
    log.close()


def test_a_span_fills_a_segment_and_the_next_one_starts_a_new_segment(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path, 200)
    log.append_span(b"s" * 50)
    sequence = 2
    while log.extend_span(b"t" * 50):
        sequence += 1
    assert log.active_segment_id == 1
    assert log.append_span(b"u" * 50) == sequence
    assert log.active_segment_id == 2
    log.close()
    assert [s for s, _ in read_all(tmp_path, 200)] == [1, sequence]


def test_a_torn_span_is_cut_off_with_all_its_sequence_numbers(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    log.append(b"kept")
    log.append_span(b"a")
    log.extend_span(b"b")
    log.close()
    path = segment_path(tmp_path, 1)
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    log, report = Log.open(tmp_path)
    assert [d.kind for d in report.damage] == [DamageKind.PARTIAL_RECORD]
    assert log.next_sequence == 2 and list(log.records()) == [(1, b"kept")]
    log.close()


def test_a_format_1_segment_is_read_and_a_span_goes_to_a_new_segment(tmp_path: Path) -> None:
    """A log written before spans existed: its records read back; spans start a segment of
    format 2, and a span in a format 1 segment is damage, not a record."""
    header = bytearray(encode_segment_header(1, 1))
    struct.pack_into("<I", header, 8, 1)  # the format version
    struct.pack_into("<I", header, SEGMENT_HEADER_BYTES - 4, zlib.crc32(header[:-4]))
    segment_path(tmp_path, 1).write_bytes(bytes(header) + encode_record(1, b"old"))
    log, report = Log.open(tmp_path)
    assert report.clean and list(log.records()) == [(1, b"old")]
    assert log.append(b"plain") == 2 and log.active_segment_id == 1
    assert log.append_span(b"run") == 3 and log.active_segment_id == 2
    log.close()
    assert read_all(tmp_path) == [(1, b"old"), (2, b"plain"), (3, b"run")]
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    segment_path(tmp_path, 1).write_bytes(bytes(header) + encode_span(1, 2, b"ab"))
    log, report = Log.open(tmp_path)
    assert [d.kind for d in report.damage] == [DamageKind.BAD_LENGTH]
    log.close()


def test_a_span_open_when_a_sync_fails_refuses_more_like_any_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, _ = Log.open(tmp_path)
    log.append(b"a")
    batch = log.seal()
    assert batch is not None
    log.append_span(b"run")

    def failing_sync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_module, "_datasync", failing_sync)
    with pytest.raises(LogFailed):
        log.sync_batch(batch)
    monkeypatch.undo()
    assert log.extend_span(b"more") == 0
    with pytest.raises(LogFailed):
        log.append_span(b"next")
    with pytest.raises(LogFailed):
        log.append(b"plain")
    log.close()
