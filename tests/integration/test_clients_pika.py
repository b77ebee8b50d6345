"""pika against the broker: blocking and callback-style round trips, classic and direct RPC.

A round trip is: declare a queue, publish with publisher confirms and wait for the ack,
consume and ack by hand, then an RPC call (a request with reply_to and correlation_id, a
responder that answers, the caller receiving the answer).
"""

from __future__ import annotations

import pika
import pika.exceptions

DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"


def serve_doubling(channel, requests: str, seen_reply_to: list[str] | None = None) -> None:
    """Consume `requests`, answer each body n with 2n to its reply_to, then ack it."""

    def on_request(ch, method, props, body) -> None:
        if seen_reply_to is not None:
            seen_reply_to.append(props.reply_to)
        answer = pika.BasicProperties(correlation_id=props.correlation_id)
        ch.basic_publish("", props.reply_to, str(2 * int(body)).encode(), answer)
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(requests, on_request)


def test_blocking_publish_confirm_consume_ack(amqp):
    connection = amqp.connect()
    channel = connection.channel()
    queue = amqp.queue("work", channel, durable=True)
    channel.confirm_delivery()
    amqp.publish(channel, queue, "hello", delivery_mode=2, message_id="m-1")  # raises on nack
    got = []

    def on_message(ch, method, props, body) -> None:
        got.append((body, props.message_id, props.delivery_mode, method.redelivered))
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(queue, on_message)
    amqp.pump(connection, lambda: bool(got))
    channel.close()  # an unacked message would go back to the queue now
    assert got == [(b"hello", "m-1", 2, False)]
    assert amqp.passive_count(connection.channel(), queue) == (0, 0)


def test_blocking_rpc(amqp):
    caller, responder = amqp.connect(), amqp.connect()
    requests = amqp.queue("rpc", responder.channel())
    serve_doubling(responder.channel(), requests)
    channel = caller.channel()
    reply_queue = channel.queue_declare("", exclusive=True).method.queue
    replies = []
    channel.basic_consume(
        reply_queue,
        lambda ch, m, props, body: replies.append((props.correlation_id, body)),
        auto_ack=True,
    )
    amqp.publish(channel, requests, "21", reply_to=reply_queue, correlation_id="c-1")
    amqp.pump([caller, responder], lambda: bool(replies))
    assert replies == [("c-1", b"42")]


def test_direct_reply_to_rpc(amqp):
    caller, responder = amqp.connect(), amqp.connect()
    requests = amqp.queue("rpc", responder.channel())
    seen_reply_to: list[str] = []
    serve_doubling(responder.channel(), requests, seen_reply_to)
    channel = caller.channel()
    replies = []
    channel.basic_consume(
        DIRECT_REPLY_TO,
        lambda ch, method, props, body: replies.append((props.correlation_id, body)),
        auto_ack=True,
    )
    amqp.publish(channel, requests, "5", reply_to=DIRECT_REPLY_TO, correlation_id="c-2")
    amqp.pump([caller, responder], lambda: bool(replies))
    assert replies == [("c-2", b"10")]
    # The responder sees a per-channel pseudo queue name, not the well-known one.
    assert seen_reply_to[0].startswith(f"{DIRECT_REPLY_TO}.")


def test_direct_reply_to_needs_a_consumer_first(amqp):
    channel = amqp.channel()
    amqp.publish(channel, amqp.name("nobody"), "x", reply_to=DIRECT_REPLY_TO)
    assert amqp.attempt(lambda: amqp.sync(channel)) == {
        "closed": "channel",
        "code": 406,
        "text": "PRECONDITION_FAILED - fast reply consumer does not exist",
    }


def test_direct_reply_to_consumer_must_be_no_ack(amqp):
    channel = amqp.channel()

    def consume() -> None:
        channel.basic_consume(DIRECT_REPLY_TO, lambda *_: None, auto_ack=False)

    assert amqp.attempt(consume) == {
        "closed": "channel",
        "code": 406,
        "text": "PRECONDITION_FAILED - reply consumer cannot acknowledge",
    }


class SelectRoundTrip:
    """The round trip written in pika's callback style on one SelectConnection.

    Each callback starts the next step; the last one closes the connection, which stops
    the I/O loop. A timer stops it too, so `run` always returns.
    """

    def __init__(self, url: str, queue: str, requests: str) -> None:
        self.queue, self.requests = queue, requests
        self.events: list[object] = []
        self.connection = pika.SelectConnection(
            pika.URLParameters(url),
            on_open_callback=lambda conn: conn.channel(on_open_callback=self.on_channel),
            on_open_error_callback=lambda conn, error: self.finish(("open error", error)),
            on_close_callback=lambda conn, reason: conn.ioloop.stop(),
        )

    def run(self, timeout_s: float) -> list[object]:
        self.connection.ioloop.call_later(timeout_s, lambda: self.finish("timeout"))
        try:
            self.connection.ioloop.start()
        finally:
            self.connection.ioloop.close()  # its internal wake-up socket pair
        return self.events

    def finish(self, event: object) -> None:
        self.events.append(event)
        if self.connection.is_open:
            self.connection.close()
        else:
            self.connection.ioloop.stop()

    def on_channel(self, channel) -> None:
        self.channel = channel
        channel.queue_declare(self.queue, callback=self.on_declared)

    def on_declared(self, _frame) -> None:
        self.channel.confirm_delivery(self.on_confirm, callback=self.on_confirm_mode)

    def on_confirm_mode(self, _frame) -> None:
        self.channel.basic_publish("", self.queue, b"hello")

    def on_confirm(self, frame) -> None:
        self.events.append(("confirm", frame.method.NAME, frame.method.delivery_tag))
        self.channel.basic_consume(self.queue, self.on_message)

    def on_message(self, channel, method, props, body) -> None:
        self.events.append(("message", body, method.redelivered))
        channel.basic_ack(method.delivery_tag)
        self.connection.channel(on_open_callback=self.on_responder_channel)

    def on_responder_channel(self, channel) -> None:
        serve_doubling(channel, self.requests)
        self.connection.channel(on_open_callback=self.on_caller_channel)

    def on_caller_channel(self, channel) -> None:
        self.caller = channel
        channel.queue_declare("", exclusive=True, callback=self.on_reply_queue)

    def on_reply_queue(self, frame) -> None:
        reply_queue = frame.method.queue
        self.caller.basic_consume(reply_queue, self.on_reply, auto_ack=True)
        props = pika.BasicProperties(reply_to=reply_queue, correlation_id="c-3")
        self.caller.basic_publish("", self.requests, b"4", props)

    def on_reply(self, channel, method, props, body) -> None:
        self.finish(("reply", props.correlation_id, body))


def test_select_connection_round_trip(amqp):
    queue = amqp.name("work")
    requests = amqp.queue("rpc")  # exists before the responder consumes from it
    events = SelectRoundTrip(amqp.broker.url, queue, requests).run(timeout_s=10)
    assert events == [
        ("confirm", "Basic.Ack", 1),
        ("message", b"hello", False),
        ("reply", "c-3", b"8"),
    ]
    assert amqp.passive_count(amqp.channel(), queue) == (0, 0)
