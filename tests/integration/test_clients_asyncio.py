"""asyncio clients against the broker: aio-pika (plain and robust connections) and aiormq.

Each test runs one coroutine under `asyncio.run` with an overall deadline: declare a queue,
publish with publisher confirms and get the ack, consume and ack by hand, then an RPC call
through a server-named exclusive reply queue answered by a responder on its own channel.
"""

from __future__ import annotations

import asyncio

import aio_pika
import aiormq
import pytest
from pamqp.commands import Basic

DEADLINE_S = 15.0


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, DEADLINE_S))


# -- aio-pika ---------------------------------------------------------------------------------


async def aio_pika_round_trip(connection, queue_name: str, requests_name: str) -> list:
    seen = []
    channel = await connection.channel()  # publisher confirms are on by default
    queue = await channel.declare_queue(queue_name, durable=True)
    message = aio_pika.Message(b"hello", message_id="m-1")
    confirmation = await channel.default_exchange.publish(message, routing_key=queue_name)
    seen.append(type(confirmation).__name__)
    async with queue.iterator() as messages:
        async for delivered in messages:
            seen.append((delivered.body, delivered.message_id, delivered.redelivered))
            await delivered.ack()
            break
    seen.append(await aio_pika_rpc(connection, channel, requests_name))
    seen.append((await queue.declare()).message_count)  # the ack emptied the queue
    return seen


async def aio_pika_serve_doubling(connection, requests_name: str) -> None:
    channel = await connection.channel()
    requests = await channel.declare_queue(requests_name)

    async def on_request(request: aio_pika.abc.AbstractIncomingMessage) -> None:
        answer = aio_pika.Message(
            str(2 * int(request.body)).encode(), correlation_id=request.correlation_id
        )
        await channel.default_exchange.publish(answer, routing_key=request.reply_to)
        await request.ack()

    await requests.consume(on_request)


async def aio_pika_rpc(connection, channel, requests_name: str) -> tuple:
    await aio_pika_serve_doubling(connection, requests_name)
    reply_queue = await channel.declare_queue(exclusive=True)
    replies: asyncio.Queue = asyncio.Queue()
    await reply_queue.consume(replies.put, no_ack=True)
    request = aio_pika.Message(b"21", reply_to=reply_queue.name, correlation_id="c-1")
    await channel.default_exchange.publish(request, routing_key=requests_name)
    reply = await replies.get()
    return reply.correlation_id, reply.body


@pytest.mark.parametrize(
    "connect", [aio_pika.connect, aio_pika.connect_robust], ids=["plain", "robust"]
)
def test_aio_pika_round_trip(amqp, connect):
    queue, requests = amqp.name("work"), amqp.name("rpc")

    async def scenario() -> list:
        async with await connect(amqp.broker.url) as connection:
            return await aio_pika_round_trip(connection, queue, requests)

    assert run(scenario()) == ["Ack", (b"hello", "m-1", False), ("c-1", b"42"), 0]


# -- aiormq -----------------------------------------------------------------------------------


async def aiormq_round_trip(url: str, queue: str, requests: str) -> list:
    seen = []
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()  # publisher confirms are on by default
        await channel.queue_declare(queue, durable=True)
        properties = aiormq.spec.Basic.Properties(message_id="m-1")
        confirmation = await channel.basic_publish(
            b"hello", routing_key=queue, properties=properties
        )
        seen.append(isinstance(confirmation, Basic.Ack))
        seen.append(await aiormq_consume_one(channel, queue))
        seen.append(await aiormq_rpc(connection, channel, requests))
        seen.append((await channel.queue_declare(queue, passive=True)).message_count)
    finally:
        await connection.close()
    return seen


async def aiormq_consume_one(channel, queue: str) -> tuple:
    delivered: asyncio.Queue = asyncio.Queue()
    consume_ok = await channel.basic_consume(queue, delivered.put, no_ack=False)
    message = await delivered.get()
    await channel.basic_ack(message.delivery_tag)
    await channel.basic_cancel(consume_ok.consumer_tag)
    return message.body, message.header.properties.message_id, message.delivery.redelivered


async def aiormq_serve_doubling(connection, requests: str) -> None:
    channel = await connection.channel()
    await channel.queue_declare(requests)

    async def on_request(request) -> None:
        props = request.header.properties
        answer = aiormq.spec.Basic.Properties(correlation_id=props.correlation_id)
        body = str(2 * int(request.body)).encode()
        await channel.basic_publish(body, routing_key=props.reply_to, properties=answer)
        await channel.basic_ack(request.delivery_tag)

    await channel.basic_consume(requests, on_request)


async def aiormq_rpc(connection, channel, requests: str) -> tuple:
    await aiormq_serve_doubling(connection, requests)
    reply_queue = (await channel.queue_declare("", exclusive=True)).queue
    replies: asyncio.Queue = asyncio.Queue()
    await channel.basic_consume(reply_queue, replies.put, no_ack=True)
    props = aiormq.spec.Basic.Properties(reply_to=reply_queue, correlation_id="c-2")
    await channel.basic_publish(b"8", routing_key=requests, properties=props)
    reply = await replies.get()
    return reply.header.properties.correlation_id, reply.body


def test_aiormq_round_trip(amqp):
    queue, requests = amqp.name("work"), amqp.name("rpc")
    seen = run(aiormq_round_trip(amqp.broker.url, queue, requests))
    assert seen == [True, (b"hello", "m-1", False), ("c-2", b"16"), 0]
