"""The writer without Spark: record batches encoded as frames, the confirm bookkeeping, and a
publisher against the test broker (so also against a real RabbitMQ with `WARREN_TEST_URL`)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from warren.amqp.content import content_frames, shortstr
from warren.spark.message import outgoing_of
from warren.spark.options import WriteOptions
from warren.spark.publishes import encode_batch
from warren.spark.writer import Confirms, UndeliveredError, publish_batches

ROWS = {
    "body": [b"a", "\u00e9", b"", b"x" * 300, b"d", b"", b"y" * 5_000],
    "message_id": ["m1", "m1", "m2", None, None, "m1", "m3"],
    "routing_key": ["q"] * 7,
    "headers": [None, None, [("k", "v")], None, None, None, [("a", "b")]],
}


def row_by_row(batch: pa.RecordBatch, frame_max: int) -> list[bytes]:
    """Each row framed on its own, the plain way."""
    framed = []
    for row in batch.to_pylist():
        message = outgoing_of(row, None, None, 2)
        route = shortstr(message.exchange) + shortstr(message.routing_key)
        method = b"\x00\x3c\x00\x28\x00\x00" + route + b"\x01"
        framed.append(content_frames(1, method, message.properties, message.body, frame_max))
    return framed


@pytest.mark.parametrize("frame_max", [4_096, 131_072])  # the last body in two frames, or one
@pytest.mark.parametrize(
    "batch",
    [
        pa.RecordBatch.from_pydict(ROWS),
        pa.RecordBatch.from_pydict(ROWS).slice(2, 4),  # Arrow buffers with an offset
        pa.RecordBatch.from_pydict({"body": ROWS["body"]}),
        pa.RecordBatch.from_pydict({"body": [b"z" * 128] * 5}),
        pa.RecordBatch.from_pydict(
            {"body": pa.array(["\u00e9", "", "t" * 5_000], pa.large_string())}
        ),
    ],
    ids=["groups", "sliced", "bodies", "alike", "large-text"],
)
def test_a_batch_is_framed_as_its_rows_one_by_one(batch: pa.RecordBatch, frame_max: int):
    publishes = encode_batch(batch, None, None, 2, True, 1, frame_max)
    expected = row_by_row(batch, frame_max)
    assert publishes.buffer == b"".join(expected)
    assert [bytes(publishes.span(i, i + 1)) for i in range(len(publishes))] == expected
    assert bytes(publishes.span(1, 3)) == expected[1] + expected[2]
    rows = batch.to_pylist()
    assert [publishes.message(i) for i in range(len(rows))] == [
        outgoing_of(row, None, None, 2) for row in rows
    ]


def test_a_batch_needs_bodies_that_are_bytes_or_text():
    with pytest.raises(ValueError, match="needs a column 'body'"):
        encode_batch(pa.RecordBatch.from_pydict({"message_id": ["m"]}), "", "q", 2, True, 1, 4096)
    with pytest.raises(ValueError, match="column 'body' must be binary or string, got a null"):
        encode_batch(pa.RecordBatch.from_pydict({"body": [b"x", None]}), "", "q", 2, True, 1, 4096)
    with pytest.raises(ValueError, match="column 'body' must be binary or string, got int64"):
        encode_batch(pa.RecordBatch.from_pydict({"body": [1]}), "", "q", 2, True, 1, 4096)


def test_confirms_settle_runs_of_tags_single_or_multiple():
    confirms = Confirms()
    confirms.published = 10
    assert confirms.settle(3, multiple=False) == [range(3, 4)]
    assert confirms.settle(5, multiple=False) == [range(5, 6)]
    assert confirms.unconfirmed == 8
    assert confirms.settle(4, multiple=True) == [range(1, 3), range(4, 5)]
    assert (confirms.low, confirms.unconfirmed) == (6, 5)  # 5 was settled on its own
    assert confirms.settle(7, multiple=False) == [range(7, 8)]
    assert confirms.settle(6, multiple=False) == [range(6, 7)]
    assert (confirms.low, confirms.unconfirmed) == (8, 3)
    assert confirms.settle(7, multiple=True) == []  # nothing new
    assert confirms.settle(10, multiple=True) == [range(8, 11)]
    assert confirms.unconfirmed == 0


def test_a_publisher_sends_every_batch_through_a_small_window(amqp):
    queue = amqp.queue("q")
    batches = [
        pa.RecordBatch.from_pydict(
            {"body": pa.array([b"%d" % n for n in range(count)], pa.binary())}
        )
        for count in (40, 0, 3, 57)
    ]
    options = WriteOptions.parse({"uri": amqp.url, "routingKey": queue, "confirmWindow": "7"})
    assert publish_batches(options, iter(batches)).count == 100
    assert amqp.ready(queue) == 100


def test_a_publisher_names_each_nacked_row(amqp):
    full = amqp.queue("full", **{"x-max-length": 2, "x-overflow": "reject-publish"})
    batch = pa.RecordBatch.from_pydict(
        {"body": [b"a", b"b", b"c", b"d"], "message_id": ["m0", "m1", "m2", "m3"]}
    )
    options = WriteOptions.parse({"uri": amqp.url, "routingKey": full, "confirmWindow": "1"})
    with pytest.raises(UndeliveredError) as raised:
        publish_batches(options, iter([batch]))
    assert [(m.message_id, m.why) for m in raised.value.undelivered] == [
        ("m2", "nacked"),
        ("m3", "nacked"),
    ]
    assert amqp.ready(full) == 2
