"""Direct reply-to (`amq.rabbitmq.reply-to`) as RabbitMQ 3.10.8's channel answers it.

RabbitMQ answers any queue.declare of the pseudo-queue, passive or not, as for a queue with
no messages and one consumer, and a declare of a reply address (``amq.rabbitmq.reply-to.``
and a token) likewise while its consumer lives; every other method treats the names as
queues that do not exist. FastStream's RPC checks the pseudo-queue with a passive declare
before it consumes from it, which is what the last test does with aio-pika.
"""

from __future__ import annotations

import asyncio

import aio_pika
import pika
import pytest

REPLY_TO = "amq.rabbitmq.reply-to"


def _declare_ok(channel, queue: str, **kw) -> dict:
    ok = channel.queue_declare(queue, **kw).method
    return {"queue": ok.queue, "message_count": ok.message_count, "consumers": ok.consumer_count}


@pytest.mark.parametrize(
    "flags",
    [{"passive": True}, {}, {"durable": True, "exclusive": True, "auto_delete": True}],
    ids=["passive", "plain", "durable-exclusive"],
)
def test_declare_of_the_pseudo_queue(amqp, flags):
    observed = amqp.attempt(lambda: _declare_ok(amqp.channel(), REPLY_TO, **flags))
    assert observed == {"ok": True, "queue": REPLY_TO, "message_count": 0, "consumers": 1}


@pytest.mark.parametrize("name", [REPLY_TO + "x", REPLY_TO + ".no-such-token"])
def test_declare_of_other_reply_names_is_404(amqp, name):
    observed = amqp.attempt(lambda: _declare_ok(amqp.channel(), name, passive=True))
    text = f"NOT_FOUND - no queue '{name}' in vhost '/'"
    assert observed == {"closed": "channel", "code": 404, "text": text}


def _reply_address(amqp, responder) -> str:
    """The address a publish with reply_to = the pseudo-queue on `responder` is given."""
    probe = amqp.queue("probe")
    responder.basic_publish("", probe, b"", pika.BasicProperties(reply_to=REPLY_TO))
    channel = amqp.channel()
    for _ in range(250):
        method, properties, _body = channel.basic_get(probe, auto_ack=True)
        if method is not None:
            return str(properties.reply_to)
        amqp.settle(channel.connection, 0.02)
    raise AssertionError("the probe message did not arrive")


def test_declare_of_a_live_reply_address(amqp):
    requester = amqp.channel()
    tag = requester.basic_consume(REPLY_TO, lambda *args: None, auto_ack=True)
    address = _reply_address(amqp, requester)
    assert address.startswith(REPLY_TO + ".")
    observed = amqp.attempt(lambda: _declare_ok(amqp.channel(), address, passive=True))
    assert observed == {"ok": True, "queue": address, "message_count": 0, "consumers": 1}
    requester.basic_cancel(tag)
    observed = amqp.attempt(lambda: _declare_ok(amqp.channel(), address, passive=True))
    text = f"NOT_FOUND - no queue '{address}' in vhost '/'"
    assert observed == {"closed": "channel", "code": 404, "text": text}


@pytest.mark.parametrize("action", ["bind", "purge", "get"])
def test_other_methods_find_no_such_queue(amqp, action):
    channel = amqp.channel()
    operations = {
        "bind": lambda: channel.queue_bind(REPLY_TO, "amq.direct", "k"),
        "purge": lambda: channel.queue_purge(REPLY_TO),
        "get": lambda: channel.basic_get(REPLY_TO),
    }
    observed = amqp.attempt(operations[action])
    text = f"NOT_FOUND - no queue '{REPLY_TO}' in vhost '/'"
    assert observed == {"closed": "channel", "code": 404, "text": text}


def test_delete_of_the_pseudo_queue_is_a_no_op(amqp):
    channel = amqp.channel()
    assert channel.queue_delete(REPLY_TO).method.message_count == 0


def test_reply_to_without_a_reply_consumer_is_406(amqp):
    channel = amqp.channel()
    observed = amqp.attempt(
        lambda: (
            channel.basic_publish("", "nowhere", b"", pika.BasicProperties(reply_to=REPLY_TO)),
            amqp.sync(channel),
        )
    )
    text = "PRECONDITION_FAILED - fast reply consumer does not exist"
    assert observed == {"closed": "channel", "code": 406, "text": text}


async def _faststream_style_rpc(url: str, requests_name: str) -> list[bytes]:
    connection = await aio_pika.connect(url)
    async with connection:
        server = await connection.channel()
        requests = await server.declare_queue(requests_name, auto_delete=True)

        async def answer(request: aio_pika.abc.AbstractIncomingMessage) -> None:
            reply = aio_pika.Message(request.body.upper(), correlation_id=request.correlation_id)
            await server.default_exchange.publish(reply, routing_key=str(request.reply_to))
            await request.ack()

        await requests.consume(answer)
        client = await connection.channel()
        pseudo = await client.declare_queue(REPLY_TO, passive=True)
        replies: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await replies.put(message.body)

        await pseudo.consume(on_reply, no_ack=True)
        answers = []
        for word in (b"ping", b"pong"):
            request = aio_pika.Message(word, reply_to=REPLY_TO, correlation_id=word.decode())
            await client.default_exchange.publish(request, routing_key=requests_name)
            answers.append(await replies.get())
        return answers


def test_faststream_style_rpc_over_direct_reply_to(amqp):
    coroutine = _faststream_style_rpc(amqp.broker.url, amqp.name("rpc"))
    answers = asyncio.run(asyncio.wait_for(coroutine, 15.0))
    assert answers == [b"PING", b"PONG"]
