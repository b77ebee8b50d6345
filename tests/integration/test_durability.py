"""Durability of a private Warren node: what a confirm, a declare-ok and a policy promise
survives SIGKILL; what was never promised (transient objects) does not come back.

Each test starts its own node (`server_factory`), stops or kills it, maybe damages its
data directory, and starts a new node on the same directory. The crash test prints the
seed of its random kill moments; `WARREN_DURABILITY_SEED` replays one.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import struct
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Any

import aiormq
import pika
import pika.exceptions
import pytest
from pamqp.commands import Basic
from pika.adapters.blocking_connection import BlockingConnection

from tests.integration.conftest import connected

pytestmark = pytest.mark.warren_only

PERSISTENT = pika.BasicProperties(delivery_mode=2)
SEED_ENV = "WARREN_DURABILITY_SEED"
PAGING = {"queue_resident_messages_max": 20}


def bodies(connection: BlockingConnection, queue: str) -> list[str]:
    channel = connection.channel()
    found = []
    while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
        found.append(got[2].decode())
    return found


def exists(connection: BlockingConnection, kind: str, name: str) -> bool:
    channel = connection.channel()
    try:
        if kind == "queue":
            channel.queue_declare(name, passive=True)
        else:
            channel.exchange_declare(name, passive=True)
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert closed.reply_code == 404
        return False
    channel.close()
    return True


def last_segment(data_dir: Path) -> Path:
    """The last segment of the node's message log; of a node of workers, the one of the
    worker that holds the test's one queue (the others hold no message: the smaller)."""
    logs = [data_dir / "log", *sorted(data_dir.glob("workers/*/log"))]
    lasts = [sorted(log.glob("*.wal"))[-1] for log in logs if any(log.glob("*.wal"))]
    return max(lasts, key=lambda segment: segment.stat().st_size)


# --- (a) confirmed messages survive SIGKILL at random moments --------------------------------

CRASH_QUEUES = ("crash-a", "crash-b")
CONFIRM_WINDOW = 100
KILLS = 3
_HEAD = struct.Struct(">QI")  # sequence number in its queue, CRC-32 of the rest


def crash_body(rng: random.Random, sequence: int) -> bytes:
    payload = rng.randbytes(rng.randint(0, 300))
    return _HEAD.pack(sequence, zlib.crc32(payload)) + payload


def crash_sequence(body: bytes) -> int:
    """The body's sequence number; fails the test if the body is corrupt."""
    sequence, crc = _HEAD.unpack_from(body)
    assert zlib.crc32(body[_HEAD.size :]) == crc, f"corrupt body of message {sequence}"
    return int(sequence)


class Publisher:
    """Publishes persistent messages round robin to the crash queues with a window of
    unconfirmed ones, across node restarts; remembers which were confirmed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_sequence = dict.fromkeys(CRASH_QUEUES, 1)
        self.confirmed: dict[str, set[int]] = {queue: set() for queue in CRASH_QUEUES}

    async def run_until_killed(self, url: str, kill_after_s: float, kill) -> None:
        connection = await asyncio.wait_for(aiormq.connect(url), 5)
        channel = await connection.channel(publisher_confirms=True)
        for queue in CRASH_QUEUES:
            await channel.queue_declare(queue, durable=True)
        window = asyncio.Semaphore(CONFIRM_WINDOW)
        pending: set[asyncio.Task[None]] = set()
        deadline = asyncio.get_running_loop().time() + kill_after_s
        index = 0
        while asyncio.get_running_loop().time() < deadline:
            await window.acquire()
            queue = CRASH_QUEUES[index % len(CRASH_QUEUES)]
            index += 1
            sequence = self.next_sequence[queue]
            self.next_sequence[queue] = sequence + 1
            body = crash_body(self.rng, sequence)
            task = asyncio.create_task(self._publish(channel, window, queue, sequence, body))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.get_running_loop().run_in_executor(None, kill)
        # what was confirmed before the kill counts; everything else fails with the socket
        if pending:
            await asyncio.wait(pending, timeout=5)
        for task in pending:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connection.close(), 1)

    async def _publish(self, channel, window, queue: str, sequence: int, body: bytes) -> None:
        try:
            confirmation = await channel.basic_publish(
                body, routing_key=queue, properties=aiormq.spec.Basic.Properties(delivery_mode=2)
            )
            if isinstance(confirmation, Basic.Ack):
                self.confirmed[queue].add(sequence)
        except (Exception, asyncio.CancelledError):
            pass
        finally:
            window.release()


def drain_crash_queue(connection: BlockingConnection, queue: str) -> list[int]:
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)
    ready = channel.queue_declare(queue, durable=True).method.message_count
    arrived = []
    for method, _properties, body in channel.consume(queue, inactivity_timeout=2):
        if method is None:
            break
        arrived.append(crash_sequence(body))
        channel.basic_ack(method.delivery_tag)
        if len(arrived) >= ready:
            break
    channel.cancel()
    return arrived


def test_confirmed_persistent_messages_survive_sigkill_at_random_moments(server_factory):
    seed = int(os.environ.get(SEED_ENV, random.randrange(2**32)))
    rng = random.Random(seed)
    publisher = Publisher(rng)
    # a low resident bound, so that most bodies are read back from the log after a while
    server = server_factory(**PAGING)
    for _ in range(KILLS):
        asyncio.run(
            asyncio.wait_for(
                publisher.run_until_killed(server.broker.url, rng.uniform(0.3, 1.5), server.kill),
                20,
            )
        )
        server = server_factory(data_dir=server.data_dir, **PAGING)
    context = f"seed {seed} ({SEED_ENV}={seed} replays it)"
    with connected(server) as connection:
        for queue in CRASH_QUEUES:
            arrived = drain_crash_queue(connection, queue)
            first_arrivals = list(dict.fromkeys(arrived))
            assert first_arrivals == sorted(first_arrivals), f"{queue} out of order, {context}"
            lost = publisher.confirmed[queue] - set(arrived)
            assert not lost, f"{queue} lost confirmed {sorted(lost)[:10]}, {context}"
            assert publisher.confirmed[queue], f"nothing was confirmed, {context}"


# --- (b) a message TTL keeps counting while the node is down ---------------------------------


def test_message_ttl_counts_from_the_original_publish_across_a_restart(server_factory):
    server = server_factory()
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_declare("ttl", durable=True, arguments={"x-message-ttl": 60_000})
        channel.confirm_delivery()
        published_at = time.monotonic()
        short = pika.BasicProperties(delivery_mode=2, expiration="1500")
        channel.basic_publish("", "ttl", b"short", short)
        channel.basic_publish("", "ttl", b"long", PERSISTENT)
    server.stop()
    # Down for longer than the short TTL: if the countdown restarted at node start, the
    # message would still be there right after the restart.
    time.sleep(max(0.0, published_at + 2.0 - time.monotonic()))
    restarted = server_factory(data_dir=server.data_dir)
    with connected(restarted) as connection:
        assert bodies(connection, "ttl") == ["long"]


# --- (c) damaged log files: the node starts, says what it dropped, keeps the rest -----------


def publish_numbered(server, queue: str, count: int) -> None:
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        for number in range(count):
            channel.basic_publish("", queue, f"m{number:03d}".encode() * 20, PERSISTENT)


def test_recovery_cuts_a_torn_last_record_and_keeps_the_rest(server_factory):
    server = server_factory()
    publish_numbered(server, "torn", 10)
    server.kill()
    segment = last_segment(server.data_dir)
    with open(segment, "r+b") as file:
        file.truncate(segment.stat().st_size - 5)
    restarted = server_factory(data_dir=server.data_dir)
    with connected(restarted) as connection:
        assert bodies(connection, "torn") == [f"m{n:03d}" * 20 for n in range(9)]
    restarted.stop()
    log = restarted.log()
    assert "WARNING" in log and "partial record" in log and "cut off" in log, log


def test_recovery_stops_at_a_corrupt_record_in_the_last_segment(server_factory):
    server = server_factory()
    publish_numbered(server, "corrupt", 20)
    server.kill()
    segment = last_segment(server.data_dir)
    middle = segment.stat().st_size // 2
    with open(segment, "r+b") as file:
        file.seek(middle)
        byte = file.read(1)
        file.seek(middle)
        file.write(bytes([byte[0] ^ 0xFF]))
    restarted = server_factory(data_dir=server.data_dir)
    with connected(restarted) as connection:
        kept = bodies(connection, "corrupt")
    assert 0 < len(kept) < 20
    assert kept == [f"m{n:03d}" * 20 for n in range(len(kept))]  # everything before it
    restarted.stop()
    log = restarted.log()
    assert "WARNING" in log and "problems" in log and "bytes dropped" in log, log


# --- (d) delivered before the crash, redelivered after it ------------------------------------


def test_a_message_delivered_and_not_acked_is_redelivered_after_a_crash(server_factory):
    server = server_factory()
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_declare("redeliver", durable=True)
        channel.queue_declare("marker", durable=True)
        channel.confirm_delivery()
        channel.basic_publish("", "redeliver", b"first", PERSISTENT)
        channel.basic_publish("", "redeliver", b"second", PERSISTENT)
        method, _, body = channel.basic_get("redeliver", auto_ack=False)
        assert (body, method.redelivered) == (b"first", False)
        # The log is synced as a prefix: once this is confirmed, the delivery mark is durable.
        channel.basic_publish("", "marker", b"marker", PERSISTENT)
        server.kill()
    restarted = server_factory(data_dir=server.data_dir)
    with connected(restarted) as connection:
        channel = connection.channel()
        seen = []
        while (got := channel.basic_get("redeliver", auto_ack=True))[0] is not None:
            seen.append((got[2], got[0].redelivered))
    assert seen == [(b"first", True), (b"second", False)]


# --- settlements: whatever left a queue before the crash stays gone after it ---------------


def test_messages_that_left_a_queue_stay_gone_and_dead_letters_stay(server_factory):
    server = server_factory()
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_declare("dead", durable=True)
        dlx = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}
        channel.queue_declare("rejecting", durable=True, arguments=dlx)
        channel.queue_declare("expiring", durable=True, arguments={**dlx, "x-message-ttl": 1000})
        channel.queue_declare("capped", durable=True, arguments={"x-max-length": 2})
        channel.queue_declare("purged", durable=True)
        channel.queue_declare("fetched", durable=True)
        channel.confirm_delivery()
        for queue, body in [
            ("rejecting", "rejected"),
            ("expiring", "expired"),
            ("capped", "c1"),
            ("capped", "c2"),
            ("capped", "c3"),
            ("purged", "p1"),
            ("fetched", "f1"),
            ("fetched", "f2"),
        ]:
            properties = pika.BasicProperties(delivery_mode=2, headers={"mine": body})
            channel.basic_publish("", queue, body.encode(), properties)
        method, _, _ = channel.basic_get("rejecting", auto_ack=False)
        channel.basic_reject(method.delivery_tag, requeue=False)
        channel.queue_purge("purged")
        assert channel.basic_get("fetched", auto_ack=True)[2] == b"f1"
        channel.basic_publish("", "dead", b"marker", PERSISTENT)  # the log is durable to here
        server.kill()
    time.sleep(1.0)  # "expired" is due while the node is down: dead-lettered at startup
    restarted = server_factory(data_dir=server.data_dir)
    with connected(restarted) as connection:
        channel = connection.channel()
        dead = []
        while (got := channel.basic_get("dead", auto_ack=True))[0] is not None:
            headers = got[1].headers or {}
            reasons = [death["reason"] for death in headers.get("x-death", [])]
            dead.append((got[2].decode(), reasons, headers.get("mine")))
        assert dead == [
            ("rejected", ["rejected"], "rejected"),
            ("marker", [], None),
            ("expired", ["expired"], "expired"),
        ]
        assert bodies(connection, "capped") == ["c2", "c3"]
        assert bodies(connection, "purged") == []
        assert bodies(connection, "fetched") == ["f2"]
        assert bodies(connection, "rejecting") == bodies(connection, "expiring") == []


# --- (e) definitions: durable ones survive, transient and exclusive ones do not -------------


def test_durable_definitions_survive_and_transient_ones_do_not(server_factory):
    server = server_factory()
    with connected(server) as connection:
        channel = connection.channel()
        channel.exchange_declare("x.durable", "topic", durable=True)
        channel.exchange_declare("x.next", "fanout", durable=True)
        channel.exchange_declare("x.transient", "direct", durable=False)
        channel.queue_declare("q.durable", durable=True)
        channel.queue_declare("q.transient", durable=False)
        channel.queue_declare("q.exclusive", durable=True, exclusive=True)
        channel.queue_bind("q.durable", "x.durable", "a.*", arguments={"k": 1})
        channel.exchange_bind("x.next", "x.durable", "b.#")
        channel.queue_bind("q.durable", "x.next")
        channel.queue_bind("q.transient", "x.durable", "t.*")  # not stored: transient end
        channel.queue_bind("q.durable", "x.transient", "t")  # not stored: transient source
        # auto-delete exchanges that go with their last binding, in the model and on disk
        channel.exchange_declare("x.auto1", "direct", durable=True, auto_delete=True)
        channel.queue_bind("q.transient", "x.auto1", "k")
        channel.queue_delete("q.transient")
        channel.exchange_declare("x.auto2", "direct", durable=True, auto_delete=True)
        channel.queue_bind("q.durable", "x.auto2", "k")
        channel.queue_unbind("q.durable", "x.auto2", "k")
        channel.exchange_declare("x.deleted", "direct", durable=True)
        channel.exchange_delete("x.deleted")
        channel.queue_declare("q.transient", durable=False)
    durable_policy = {"pattern": "^q\\.durable$", "definition": {"max-length": 7}}
    assert management(server, "PUT", "/api/policies/%2F/p.durable", durable_policy)[0] == 201
    cleared_policy = {"pattern": "^none$", "definition": {"max-length": 1}}
    assert management(server, "PUT", "/api/policies/%2F/p.cleared", cleared_policy)[0] == 201
    assert management(server, "DELETE", "/api/policies/%2F/p.cleared")[0] == 204
    server.kill()

    restarted = server_factory(data_dir=server.data_dir)
    with connected(restarted) as connection:
        present = {
            name: exists(connection, kind, name)
            for kind, name in [
                ("exchange", "x.durable"),
                ("exchange", "x.next"),
                ("exchange", "x.transient"),
                ("exchange", "x.auto1"),
                ("exchange", "x.auto2"),
                ("exchange", "x.deleted"),
                ("queue", "q.durable"),
                ("queue", "q.transient"),
                ("queue", "q.exclusive"),
            ]
        }
        assert present == {
            "x.durable": True,
            "x.next": True,
            "x.transient": False,
            "x.auto1": False,
            "x.auto2": False,
            "x.deleted": False,
            "q.durable": True,
            "q.transient": False,
            "q.exclusive": False,
        }
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("x.durable", "a.direct", b"via binding")
        channel.basic_publish("x.durable", "b.via.exchange", b"via exchange binding")
        channel.basic_publish("x.durable", "t.nowhere", b"unrouted")
        assert bodies(connection, "q.durable") == ["via binding", "via exchange binding"]
    status, policies = management(restarted, "GET", "/api/policies/%2F")
    assert status == 200
    assert [(p["name"], p["definition"]) for p in policies] == [("p.durable", {"max-length": 7})]
    status, queue = management(restarted, "GET", "/api/queues/%2F/q.durable")
    assert (status, queue["policy"]) == (200, "p.durable")


def test_a_queue_deleted_and_declared_again_starts_empty(server_factory):
    server = server_factory()
    publish_numbered(server, "again", 3)
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_delete("again")
        channel.queue_declare("again", durable=True)
        channel.confirm_delivery()
        channel.basic_publish("", "again", b"new", PERSISTENT)
    server.kill()
    restarted = server_factory(data_dir=server.data_dir)
    with connected(restarted) as connection:
        assert bodies(connection, "again") == ["new"]


def test_a_committed_transaction_survives_a_crash(server_factory):
    server = server_factory()
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_declare("tx", durable=True)
        channel.tx_select()
        channel.basic_publish("", "tx", b"committed", PERSISTENT)
        channel.tx_commit()
        channel.basic_publish("", "tx", b"not committed", PERSISTENT)
        server.kill()
    restarted = server_factory(data_dir=server.data_dir)
    with connected(restarted) as connection:
        assert bodies(connection, "tx") == ["committed"]


# --- (f) a queue longer than its resident bound keeps the bodies of its tail in the log ------


def numbered_body(number: int) -> bytes:
    return f"{number:05d}:".encode() * (1 + number % 50)


def consume(channel, queue: str, count: int) -> list[bytes]:
    """`count` bodies through a consumer with a prefetch window and manual acks."""
    channel.basic_qos(prefetch_count=100)
    found: list[bytes] = []
    for method, _properties, body in channel.consume(queue, inactivity_timeout=10):
        assert method is not None, f"only {len(found)} of {count} arrived"
        found.append(body)
        channel.basic_ack(method.delivery_tag)
        if len(found) == count:
            break
    channel.cancel()
    return found


def test_a_long_queue_delivers_every_body_from_the_log_across_a_crash(server_factory):
    server = server_factory(queue_resident_messages_max=100)
    expected = [numbered_body(number) for number in range(2_000)]
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_declare("long", durable=True)
        channel.confirm_delivery()
        for body in expected:
            channel.basic_publish("", "long", body, PERSISTENT)
        assert consume(channel, "long", 1_000) == expected[:1_000]
        server.kill()
    restarted = server_factory(data_dir=server.data_dir, queue_resident_messages_max=100)
    with connected(restarted) as connection:
        channel = connection.channel()
        remaining = channel.queue_declare("long", durable=True, passive=True).method
        remaining_count = remaining.message_count
        # Acks still on their way to the disk when the node died come back (delivery is at
        # least once, as in RabbitMQ): what is left is a suffix of the queue, never less
        # than the 1,000 messages nobody acked.
        assert 1_000 <= remaining_count <= 2_000
        assert consume(channel, "long", remaining_count) == expected[-remaining_count:]


def test_paged_out_messages_are_dead_lettered_with_their_bodies(server_factory):
    server = server_factory(queue_resident_messages_max=10)
    expected = [numbered_body(number) for number in range(300)]
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_declare("dead", durable=True)
        arguments = {"x-message-ttl": 500, "x-dead-letter-exchange": ""}
        arguments["x-dead-letter-routing-key"] = "dead"
        channel.queue_declare("expiring", durable=True, arguments=arguments)
        channel.confirm_delivery()
        for body in expected:
            channel.basic_publish("", "expiring", body, PERSISTENT)
        time.sleep(1.0)
        assert consume(channel, "dead", 300) == expected


def test_under_memory_pressure_transient_messages_page_out_and_come_back(server_factory):
    # a paging threshold a millionth of the watermark: the node is under pressure at once
    server = server_factory(vm_memory_high_watermark_paging_ratio=0.000001)
    expected = [numbered_body(number) for number in range(1_000)]
    with connected(server) as connection:
        channel = connection.channel()
        channel.queue_declare("pressed", durable=False)
        channel.confirm_delivery()
        for body in expected:
            channel.basic_publish("", "pressed", body)
        assert consume(channel, "pressed", 1_000) == expected
    assert "memory pressure on" in server.log()


# --- management API ------------------------------------------------------------------------


def management(server, method: str, path: str, body: object = None) -> tuple[int, Any]:
    """One request to the node's HTTP API as guest: (status, decoded JSON or None)."""
    data = None if body is None else json.dumps(body).encode()
    url = f"{server.broker.management_url}{path}"
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        return error.code, None
