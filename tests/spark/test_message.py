"""Rows and messages without Spark or a broker: options, and the row shape both ways."""

from __future__ import annotations

import datetime
import pickle
import subprocess
import sys

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from warren.amqp.content import BasicProperties, decode_properties, encode_properties
from warren.amqp.table import Typed
from warren.spark.message import (
    SCHEMA,
    Deliveries,
    outgoing_of,
    property_values,
    record_batch,
)
from warren.spark.options import OptionError, ReadOptions, WriteOptions

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
DIED_AT = datetime.datetime(2026, 11, 22, 10, 30, tzinfo=datetime.UTC)


def test_option_names_are_case_insensitive_and_values_checked():
    options = ReadOptions.parse({"URI": URI, "Queue": "q", "BATCHSIZE": "7", "maxwaitms": "9"})
    assert (options.queues, options.batch_size, options.max_wait_ms) == (("q",), 7, 9)
    several = ReadOptions.parse({"uri": URI, "queue": "a, b", "maxMessagesPerTrigger": "5"})
    assert (several.queues, several.batch_size) == (("a", "b"), 5)
    with pytest.raises(OptionError, match="not both"):
        ReadOptions.parse(
            {"uri": URI, "queue": "q", "batchSize": "1", "maxMessagesPerTrigger": "1"}
        )
    with pytest.raises(OptionError, match="option 'queue' is required"):
        ReadOptions.parse({"uri": URI})
    with pytest.raises(OptionError, match="option 'uri' must be an AMQP URI"):
        ReadOptions.parse({"uri": "http://x", "queue": "q"})
    with pytest.raises(OptionError, match="option 'mandatory' must be true or false"):
        WriteOptions.parse({"uri": URI, "mandatory": "yes"})


def test_the_prefetch_fits_in_basic_qos():
    """prefetch-count is a short: twice a large batch's share is capped, not sent to fail
    the consumer's basic.qos with a struct error."""
    one = {"uri": URI, "queue": "q", "numPartitions": "1"}
    assert ReadOptions.parse({**one, "maxMessagesPerTrigger": "50000"}).prefetch == 65_535
    assert ReadOptions.parse({**one, "maxMessagesPerTrigger": "300"}).prefetch == 600
    with pytest.raises(OptionError, match="option 'prefetch' must be at most 65535, got 65536"):
        ReadOptions.parse({**one, "prefetch": "65536"})


def test_a_queue_pattern_needs_the_management_api_and_no_queue_list():
    mgmt = "http://guest:guest@127.0.0.1:15672"
    options = ReadOptions.parse({"uri": URI, "queuePattern": r"orders\..*", "managementUrl": mgmt})
    assert options.queues == ()
    assert options.queue_pattern is not None and options.queue_pattern.fullmatch("orders.new")
    with pytest.raises(OptionError, match="'queuePattern' needs 'managementUrl'"):
        ReadOptions.parse({"uri": URI, "queuePattern": "o.*"})
    with pytest.raises(OptionError, match="'queue' or 'queuePattern', not both"):
        ReadOptions.parse({"uri": URI, "queue": "q", "queuePattern": "o.*", "managementUrl": mgmt})
    with pytest.raises(OptionError, match="'queuePattern' is not a regular expression"):
        ReadOptions.parse({"uri": URI, "queuePattern": "(", "managementUrl": mgmt})


def dead_letter() -> bytes:
    """A dead letter's properties as they arrive, encoded."""
    death = {
        "queue": "orders",
        "reason": "expired",
        "count": Typed("l", 2),
        "exchange": "src",
        "routing-keys": ["a", "b"],
        "time": DIED_AT,
        "original-expiration": "100",
    }
    properties = BasicProperties(
        message_id="m1",
        delivery_mode=2,
        timestamp=int(DIED_AT.timestamp()),
        headers={"x-death": [death], "n": 5, "s": "text", "t": {"a": [1, True]}},
    )
    return encode_properties(properties)


def test_delivered_properties_become_columns_with_typed_x_death():
    values = property_values(dead_letter())
    assert values[2] == 2  # delivery_mode
    assert values[7:9] == ("m1", DIED_AT)
    headers, x_death = values[12], values[13]
    assert {key: headers[key] for key in ("n", "s", "t")} == {
        "n": "5",
        "s": "text",
        "t": '{"a": [1, true]}',
    }
    assert x_death == [("orders", "expired", 2, "src", ["a", "b"], DIED_AT, "100")]


def test_a_record_batch_holds_each_message_with_its_own_properties(spark):
    """Distinct property strings are decoded once and repeated by index: every row still
    gets the properties it arrived with."""
    arrow = to_arrow_schema(spark.createDataFrame([], SCHEMA).schema, timezone="UTC")
    raws = [b"\x00\x00", dead_letter(), encode_properties(BasicProperties(message_id="m2"))]
    messages = Deliveries()
    for i in range(7):
        messages.append(f"q{i % 2}", i + 1, i % 3 == 0, "ex", f"rk{i}", raws[i % 3], b"%d" % i)
    rows = record_batch(messages, arrow).to_pylist()
    for (queue, _tag, redelivered, exchange, key, raw, body), row in zip(
        zip(*messages.columns(), strict=True), rows, strict=True
    ):
        values = property_values(raw)
        assert (row["queue"], row["redelivered"], row["exchange"]) == (queue, redelivered, exchange)
        assert (row["routing_key"], row["body"]) == (key, body)
        assert (row["message_id"], row["delivery_mode"]) == (values[7], values[2])
        assert dict(row["headers"] or []) == values[12]
        assert [tuple(death.values()) for death in row["x_death"] or []] == (values[13] or [])
    assert record_batch(Deliveries(), arrow).num_rows == 0


def test_a_row_becomes_a_publish_that_keeps_x_death_typed():
    fields = ("queue", "reason", "count", "exchange", "routing_keys", "time")
    death = dict(zip(fields, ("orders", "expired", 2, "src", ["a", "b"], DIED_AT), strict=True))
    row = {
        "body": "text body",
        "exchange": "from-column",
        "routing_key": "k",
        "message_id": "m1",
        "timestamp": DIED_AT,
        "headers": {"x-death": "[...json...]", "s": "text"},
        "x_death": [{**death, "original_expiration": None}],
        "cc": ["b"],
    }
    outgoing = outgoing_of(row, exchange="from-option", routing_key=None)
    assert (outgoing.exchange, outgoing.routing_key, outgoing.body) == (
        "from-option",
        "k",
        b"text body",
    )
    properties = decode_properties(outgoing.properties)
    assert (properties.timestamp, properties.delivery_mode) == (int(DIED_AT.timestamp()), 2)
    assert properties.headers == {
        "s": "text",
        "x-death": [
            {
                "queue": "orders",
                "reason": "expired",
                "count": 2,
                "exchange": "src",
                "routing-keys": ["a", "b"],
                "time": DIED_AT,
            }
        ],
        "CC": ["b"],
    }


def test_rows_are_persistent_unless_they_or_the_writer_say_otherwise():
    def mode(row, default=2):
        outgoing = outgoing_of({"body": b"x", **row}, "", "q", default)
        return decode_properties(outgoing.properties).delivery_mode

    assert (mode({}), mode({}, default=1)) == (2, 1)
    assert (mode({"delivery_mode": 1}), mode({"delivery_mode": None})) == (1, 2)
    with pytest.raises(OptionError, match="option 'deliveryMode' must be 1"):
        WriteOptions.parse({"uri": URI, "deliveryMode": "3"})
    assert WriteOptions.parse({"uri": URI, "deliverymode": "1"}).delivery_mode == 1


def test_record_batch_columns_from_buffers_hold_what_arrived(spark):
    """Rule 2's buffers: text columns by their UTF-8 bytes (offsets count bytes), empty
    bodies, a property some messages have and others lack, ints and flags."""
    arrow = to_arrow_schema(spark.createDataFrame([], SCHEMA).schema, timezone="UTC")
    raws = [
        encode_properties(BasicProperties(delivery_mode=2, priority=i % 2, message_id=f"m{i}"))
        for i in range(3)
    ] + [b"\x00\x00"]
    messages = Deliveries()
    for i in range(9):
        body = b"" if i % 4 == 0 else "é%d".encode() % i
        messages.append("qé", i + 1, i % 2 == 1, "ex→", f"rk{i % 3}ü", raws[i % 4], body)
    rows = record_batch(messages, arrow).to_pylist()
    assert [
        (row["queue"], row["exchange"], row["routing_key"], row["redelivered"], row["body"])
        for row in rows
    ] == [
        ("qé", "ex→", f"rk{i % 3}ü", i % 2 == 1, b"" if i % 4 == 0 else "é%d".encode() % i)
        for i in range(9)
    ]
    assert [(row["message_id"], row["priority"], row["delivery_mode"]) for row in rows] == [
        (None, None, None) if i % 4 == 3 else (f"m{i % 4}", i % 4 % 2, 2) for i in range(9)
    ]
    assert {row["headers"] is not None and len(row["headers"]) == 0 for row in rows} == {True}


def test_record_batch_columns_of_one_value_repeat_it(spark):
    """Rule 2: messages alike in their properties, exchange, routing key and queue (one
    queue's traffic) make columns of one value from buffers; each row still holds it."""
    arrow = to_arrow_schema(spark.createDataFrame([], SCHEMA).schema, timezone="UTC")
    raw = encode_properties(
        BasicProperties(content_type="text/é", delivery_mode=2, headers={}, app_id="")
    )
    messages = Deliveries()
    for tag in range(1, 6):
        messages.append("qé", tag, False, "", "rk→", raw, b"%d" % tag)
    rows = record_batch(messages, arrow).to_pylist()
    assert [row["body"] for row in rows] == [b"1", b"2", b"3", b"4", b"5"]
    assert {
        (
            row["queue"],
            row["exchange"],
            row["routing_key"],
            row["content_type"],
            row["delivery_mode"],
            row["app_id"],
            row["priority"],
            row["message_id"],
            row["timestamp"],
            row["x_death"],
            len(row["headers"]),
        )
        for row in rows
    } == {("qé", "", "rk→", "text/é", 2, "", None, None, None, None, 0)}
    # values buffers do not carry simply (a timestamp, a header map) are repeated by index
    moment = datetime.datetime(2026, 11, 27, 15, 0, tzinfo=datetime.UTC)
    raw = encode_properties(BasicProperties(timestamp=int(moment.timestamp()), headers={"n": 1}))
    messages = Deliveries()
    for tag in range(1, 4):
        messages.append("q", tag, True, "ex", "rk", raw, b"")
    rows = record_batch(messages, arrow).to_pylist()
    assert [(row["timestamp"], row["headers"], row["redelivered"]) for row in rows] == [
        (moment, [("n", "1")], True)
    ] * 3


def test_a_record_batch_of_plain_messages_does_not_import_pandas(spark):
    """pyarrow imports pandas on the first array it builds from Python values: a reader's
    planner process would pay that in its first micro-batch (rule 2)."""
    arrow = to_arrow_schema(spark.createDataFrame([], SCHEMA).schema, timezone="UTC")
    script = (
        "import pickle, sys\n"
        "from warren.spark.message import Deliveries, record_batch\n"
        "schema = pickle.loads(sys.stdin.buffer.read())\n"
        "messages = Deliveries()\n"
        "for tag in range(1, 100):\n"
        "    messages.append('q', tag, tag == 7, '', 'q', b'\\x10\\x00\\x02', b'x' * tag)\n"
        "assert record_batch(messages, schema).num_rows == 99\n"
        "print('pandas' in sys.modules)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(arrow), capture_output=True, check=True
    )
    assert ran.stdout.decode().strip() == "False"
