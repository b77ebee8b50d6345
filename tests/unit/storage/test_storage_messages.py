"""Classic queue records: codec round trip and fuzz; `recover` against a naive model."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warren.storage.messages import (
    FAMILY,
    RECORD_VERSION,
    RUN_RECORD_VERSION,
    Delivered,
    Enqueued,
    EnqueuedRun,
    Purged,
    QueueDeleted,
    QueueRecord,
    RecordFormatError,
    RecoveredMessage,
    Settled,
    decode,
    decode_contents,
    decode_messages,
    encode,
    encode_route,
    encode_run_entry,
    encode_run_start,
    recover,
)

# Names as the AMQP codec produces them: any bytes, decoded with surrogateescape.
amqp_text = st.binary(max_size=255).map(lambda raw: raw.decode("utf-8", "surrogateescape"))
msg_ids = st.integers(min_value=0, max_value=2**64 - 1)
times_ms = st.integers(min_value=-(2**63), max_value=2**63 - 1)

enqueued_records = st.builds(
    Enqueued,
    queue_key=st.text(max_size=40),
    msg_id=msg_ids,
    enqueued_at_ms=times_ms,
    expires_at_ms=st.none() | times_ms,
    priority=st.integers(min_value=0, max_value=255),
    exchange=amqp_text,
    routing_key=amqp_text,
    properties_raw=st.binary(max_size=100),
    body=st.binary(max_size=300),
)
id_tuples = st.lists(msg_ids, max_size=20).map(tuple)
records = st.one_of(
    enqueued_records,
    st.builds(Settled, st.text(max_size=40), id_tuples),
    st.builds(Delivered, st.text(max_size=40), id_tuples),
    st.builds(Purged, st.text(max_size=40), id_tuples),
    st.builds(QueueDeleted, st.text(max_size=40)),
)


@given(records)
def test_every_record_survives_encode_and_decode(record: QueueRecord) -> None:
    payload = encode(record)
    assert payload[:3] == bytes([FAMILY, RECORD_VERSION, payload[2]])
    assert decode(payload) == record


@given(st.binary(max_size=200))
def test_decode_returns_a_record_or_raises_the_format_error(data: bytes) -> None:
    try:
        record = decode(data)
    except RecordFormatError:
        return
    assert decode(encode(record)) == record


@given(records, st.data())
def test_a_cut_record_never_decodes_silently_as_something_else(
    record: QueueRecord, data: st.DataObject
) -> None:
    payload = encode(record)
    cut = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
    try:
        decoded = decode(payload[:cut])
    except RecordFormatError:
        return
    # Only an Enqueued can lose bytes and still parse: its body is the rest of the record.
    assert isinstance(record, Enqueued) and isinstance(decoded, Enqueued)
    assert decoded.body == record.body[: len(decoded.body)]


runs = st.builds(
    lambda queue_key, messages: EnqueuedRun(
        queue_key, tuple(replace(m, queue_key=queue_key) for m in messages)
    ),
    st.text(max_size=40),
    st.lists(enqueued_records, min_size=1, max_size=5),
)


def contents_of(record: Enqueued | EnqueuedRun) -> dict[int, tuple[str, str, bytes, bytes, bytes]]:
    """What `decode_contents` should make of a record: each message by msg_id."""
    messages = record.messages if isinstance(record, EnqueuedRun) else (record,)
    return {
        m.msg_id: (
            m.exchange,
            m.routing_key,
            m.properties_raw,
            m.body,
            encode_route(m.exchange, m.routing_key),
        )
        for m in messages
    }


@given(enqueued_records | runs)
def test_contents_read_back_are_the_record_s_messages(record: Enqueued | EnqueuedRun) -> None:
    assert decode_contents(encode(record), record.queue_key) == contents_of(record)


@given(records | runs, st.text(max_size=40), st.data())
def test_contents_come_only_from_that_queue_s_whole_record(
    record: QueueRecord, queue_key: str, data: st.DataObject
) -> None:
    """Another queue's record, another kind, or a cut one: the format error."""
    payload = encode(record)
    payload = payload[: data.draw(st.integers(min_value=0, max_value=len(payload)))]
    if data.draw(st.booleans()):
        queue_key = record.queue_key
    try:
        contents = decode_contents(payload, queue_key)
    except RecordFormatError:
        return
    decoded = decode(payload)  # a cut run may still be a run, of fewer messages
    assert isinstance(decoded, Enqueued | EnqueuedRun)
    assert decoded.queue_key == queue_key
    assert contents == contents_of(decoded)


@given(st.binary(max_size=200), st.text(max_size=3))
def test_decode_contents_returns_or_raises_the_format_error(data: bytes, queue_key: str) -> None:
    try:
        decode_contents(data, queue_key)
    except RecordFormatError:
        return


def test_an_enqueued_record_is_compact() -> None:
    record = Enqueued("q", 1, 1_700_000_000_000, None, 0, "amq.direct", "rk", b"\x00\x00", b"x")
    # prefix 5 + key 1 + fixed 30 + route 14 + properties 2 + body 1
    assert len(encode(record)) == 53


@pytest.mark.parametrize("route", [b"", b"\x00", b"\x01a", b"\x00\x02a", b"\x00\x00x"])
def test_a_route_that_is_not_two_shortstrs_is_refused(route: bytes) -> None:
    with pytest.raises(ValueError, match="route"):
        encode_run_entry(1, 0, None, 0, route, b"", b"")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "too short"),
        (bytes([FAMILY, 9, 1, 0, 0]), "version 9"),
        (bytes([FAMILY, RECORD_VERSION, 77, 0, 0]), "unknown record kind 77"),
        (bytes([0x52, RECORD_VERSION, 1, 0, 0]), "not a classic queue record"),
        (bytes([FAMILY, RECORD_VERSION, 2, 5, 0]) + b"ab", "queue key"),
        (bytes([FAMILY, RECORD_VERSION, 2, 0, 0]) + struct.pack("<I", 3), "do not fill"),
        (bytes([FAMILY, RECORD_VERSION, 5, 0, 0, 0]), "trailing bytes"),
    ],
)
def test_malformed_records_are_named(payload: bytes, message: str) -> None:
    with pytest.raises(RecordFormatError, match=message):
        decode(payload)


@pytest.mark.parametrize(
    "record",
    [
        Enqueued("q", -1, 0, None, 0, "", "", b"", b""),
        Enqueued("q", 1, 0, None, 256, "", "", b"", b""),
        Enqueued("q", 1, 0, None, 0, "x" * 256, "", b"", b""),
        Enqueued("q", 1, 0, None, 0, "", "é" * 128, b"", b""),
        Settled("q", (2**64,)),
        QueueDeleted("k" * 70_000),
    ],
)
def test_values_out_of_range_are_refused_when_encoding(record: QueueRecord) -> None:
    with pytest.raises(ValueError):
        encode(record)


# --- recover ---------------------------------------------------------------------------------


def naive_recover(log: list[tuple[int, QueueRecord]]) -> dict[str, list[RecoveredMessage]]:
    """The meaning of `recover` as the module docstring states it, one message at a time."""
    result: dict[str, list[RecoveredMessage]] = {}
    keys = sorted({record.queue_key for _, record in log})
    for key in keys:
        mine = [(i, r) for i, (_, r) in enumerate(log) if r.queue_key == key]
        deletions = [i for i, r in mine if isinstance(r, QueueDeleted)]
        epoch = [(i, r) for i, r in mine if i > (deletions[-1] if deletions else -1)]
        ids = sorted({r.msg_id for _, r in epoch if isinstance(r, Enqueued)})
        live: list[RecoveredMessage] = []
        for msg_id in ids:
            kills = [
                i
                for i, r in epoch
                if (isinstance(r, Settled) and msg_id in r.msg_ids)
                or (isinstance(r, Purged) and msg_id not in r.kept_msg_ids)
            ]
            last_kill = kills[-1] if kills else -1
            enqueues = [
                i
                for i, r in epoch
                if isinstance(r, Enqueued) and r.msg_id == msg_id and i > last_kill
            ]
            if not enqueues:
                continue
            delivered = any(
                isinstance(r, Delivered) and msg_id in r.msg_ids and i > last_kill for i, r in epoch
            )
            record = log[enqueues[-1]][1]
            assert isinstance(record, Enqueued)
            live.append(RecoveredMessage(record, delivered, log[enqueues[-1]][0], len(record.body)))
        if live:
            result[key] = live
    return result


small_keys = st.sampled_from(["a", "b"])
small_ids = st.integers(min_value=1, max_value=6)
small_id_tuples = st.lists(small_ids, max_size=4).map(tuple)
small_records = st.one_of(
    st.builds(
        Enqueued,
        queue_key=small_keys,
        msg_id=small_ids,
        enqueued_at_ms=st.integers(0, 3),
        expires_at_ms=st.none() | st.integers(0, 3),
        priority=st.integers(0, 2),
        exchange=st.just("x"),
        routing_key=st.sampled_from(["r", "s"]),
        properties_raw=st.just(b""),
        body=st.binary(max_size=2),
    ),
    st.builds(Settled, small_keys, small_id_tuples),
    st.builds(Delivered, small_keys, small_id_tuples),
    st.builds(Purged, small_keys, small_id_tuples),
    st.builds(QueueDeleted, small_keys),
)


@settings(max_examples=300)
@given(st.lists(small_records, max_size=40))
def test_recover_agrees_with_the_naive_model(history: list[QueueRecord]) -> None:
    log = [(sequence, record) for sequence, record in enumerate(history, start=100)]
    payloads = [(sequence, encode(record)) for sequence, record in log]
    assert recover(payloads) == naive_recover(log)


def test_a_recovered_message_that_was_delivered_comes_back_redelivered() -> None:
    first = Enqueued("q", 1, 0, None, 0, "", "q", b"", b"one")
    second = Enqueued("q", 2, 0, None, 0, "", "q", b"", b"two")
    third = Enqueued("q", 3, 0, None, 0, "", "q", b"", b"three")
    history: list[QueueRecord] = [
        first,
        second,
        third,
        Delivered("q", (1, 2)),
        Settled("q", (1,)),
    ]
    recovered = recover((s, encode(r)) for s, r in enumerate(history, start=1))
    assert recovered == {
        "q": [
            RecoveredMessage(second, True, 2, len(second.body)),
            RecoveredMessage(third, False, 3, len(third.body)),
        ]
    }


def test_a_compaction_copy_after_its_delivered_mark_keeps_the_mark() -> None:
    message = Enqueued("q", 7, 0, None, 0, "", "q", b"", b"body")
    history: list[QueueRecord] = [message, Delivered("q", (7,)), message]  # copy at 3
    assert recover((s, encode(r)) for s, r in enumerate(history, start=1)) == {
        "q": [RecoveredMessage(message, True, 3, len(message.body))]
    }
    # ... and when the original is gone (segment deleted), the mark comes before the copy
    assert recover((s, encode(r)) for s, r in enumerate(history[1:], start=2)) == {
        "q": [RecoveredMessage(message, True, 3, len(message.body))]
    }


def test_purge_keeps_the_unacked_messages_it_names() -> None:
    records: list[QueueRecord] = [
        Enqueued("q", i, 0, None, 0, "", "q", b"", b"%d" % i) for i in (1, 2, 3)
    ]
    records.append(Purged("q", (2,)))
    recovered = recover((s, encode(r)) for s, r in enumerate(records, start=1))
    assert [m.msg_id for m in recovered["q"]] == [2]


def test_records_of_other_families_are_skipped_and_bad_ones_reported() -> None:
    good = encode(Enqueued("q", 1, 0, None, 0, "", "q", b"", b""))
    foreign = b"R\x01raft entry"
    bad = bytes([FAMILY, RECORD_VERSION, 99, 0, 0])
    with pytest.raises(RecordFormatError, match="log record 3"):
        recover([(1, good), (2, foreign), (3, bad)])
    seen: list[int] = []
    recovered = recover(
        [(1, good), (2, foreign), (3, bad)], on_undecodable=lambda s, _error: seen.append(s)
    )
    assert seen == [3] and [m.msg_id for m in recovered["q"]] == [1]


# --- runs --------------------------------------------------------------------------------------


@given(st.text(max_size=40), st.lists(enqueued_records, min_size=1, max_size=5))
def test_a_run_survives_encode_and_decode(queue_key: str, messages: list[Enqueued]) -> None:
    run = EnqueuedRun(queue_key, tuple(replace(m, queue_key=queue_key) for m in messages))
    payload = encode(run)
    assert payload[:3] == bytes([FAMILY, RUN_RECORD_VERSION, payload[2]])
    assert decode(payload) == run
    assert decode_messages(payload) == run.messages
    assert payload == encode_run_start(queue_key) + b"".join(
        encode_run_entry(
            m.msg_id,
            m.enqueued_at_ms,
            m.expires_at_ms,
            m.priority,
            encode_route(m.exchange, m.routing_key),
            m.properties_raw,
            m.body,
        )
        for m in run.messages
    )


def test_a_run_is_only_of_its_version_and_holds_a_message() -> None:
    run = encode(EnqueuedRun("q", (Enqueued("q", 1, 0, None, 0, "", "", b"", b"body"),)))
    with pytest.raises(RecordFormatError, match="kind 6 is not one of version 1"):
        decode(run[:1] + bytes([RECORD_VERSION]) + run[2:])
    settled = encode(Settled("q", (1,)))
    with pytest.raises(RecordFormatError, match="kind 2 is not one of version 2"):
        decode(settled[:1] + bytes([RUN_RECORD_VERSION]) + settled[2:])
    with pytest.raises(RecordFormatError, match="holds no message"):
        decode(encode_run_start("q"))
    with pytest.raises(RecordFormatError, match="run past"):
        decode(run[:-1])
    with pytest.raises(RecordFormatError, match="holds no message"):
        decode_messages(settled)


def test_a_run_recovers_as_its_messages_at_consecutive_sequence_numbers() -> None:
    messages = tuple(Enqueued("q", i, 0, None, 0, "ex", "rk", b"", b"m%d" % i) for i in (4, 5, 6))
    recovered = recover(
        [(10, encode(EnqueuedRun("q", messages))), (13, encode(Settled("q", (5,))))],
        contents=False,
    )
    assert [(m.msg_id, m.sequence, m.body_size_bytes) for m in recovered["q"]] == [
        (4, 10, 2),
        (6, 12, 2),
    ]
