"""Rows and messages without Spark or a broker: options, and the row shape both ways."""

from __future__ import annotations

import datetime

import pika
import pika.spec
import pytest

from warren.spark.message import outgoing_of, row_of
from warren.spark.options import OptionError, ReadOptions, WriteOptions

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
DIED_AT = datetime.datetime(2026, 11, 22, 10, 30, tzinfo=datetime.UTC)


def test_option_names_are_case_insensitive_and_values_checked():
    options = ReadOptions.parse({"URI": URI, "Queue": "q", "BATCHSIZE": "7", "maxwaitms": "9"})
    assert (options.queue, options.batch_size, options.max_wait_ms) == ("q", 7, 9)
    with pytest.raises(OptionError, match="option 'queue' is required"):
        ReadOptions.parse({"uri": URI})
    with pytest.raises(OptionError, match="option 'uri' must be an AMQP URI"):
        ReadOptions.parse({"uri": "http://x", "queue": "q"})
    with pytest.raises(OptionError, match="option 'mandatory' must be true or false"):
        WriteOptions.parse({"uri": URI, "mandatory": "yes"})


def dead_letter() -> tuple[pika.spec.Basic.Deliver, pika.BasicProperties, bytes]:
    deliver = pika.spec.Basic.Deliver(
        delivery_tag=1, redelivered=True, exchange="dlx", routing_key="k"
    )
    death = {
        "queue": "orders",
        "reason": "expired",
        "count": 2,
        "exchange": "src",
        "routing-keys": ["a", "b"],
        "time": DIED_AT.replace(tzinfo=None),  # pika decodes timestamps as naive UTC
        "original-expiration": "100",
    }
    properties = pika.BasicProperties(
        message_id="m1",
        delivery_mode=2,
        timestamp=int(DIED_AT.timestamp()),
        headers={"x-death": [death], "n": 5, "s": "text", "t": {"a": [1, True]}},
    )
    return deliver, properties, b"body"


def test_a_delivered_message_becomes_a_row_with_typed_x_death():
    row = row_of(*dead_letter())
    assert row[:4] == (b"body", "dlx", "k", True)
    assert row[11:13] == ("m1", DIED_AT)
    headers, x_death = row[16], row[17]
    assert {key: headers[key] for key in ("n", "s", "t")} == {
        "n": "5",
        "s": "text",
        "t": '{"a": [1, true]}',
    }
    assert x_death == [("orders", "expired", 2, "src", ["a", "b"], DIED_AT, "100")]


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
    assert outgoing.properties.timestamp == int(DIED_AT.timestamp())
    assert outgoing.properties.headers == {
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
