"""Shared helpers for the integration suite: pika connections, names, observations, golden files.

Theory of operation:
1. `amqp` hands out pika blocking connections and channels to the `broker` and closes them
   after the test. Names come from `amqp.name(suffix)` (`<unique>.<suffix>`); every name
   handed out is deleted as a queue and as an exchange at teardown, on a fresh connection.
2. An observation has the shape of the golden files (`tests/golden/README.md`):
   `{"ok": True, ...}` or `{"closed": "channel"|"connection", "code": ..., "text": ...}`.
   `amqp.attempt(action)` runs one action and returns its observation, so a test can compare
   what it saw with what RabbitMQ 3.10.8 was recorded doing.
3. Waiting is always bounded: `amqp.pump(connection, until)` drives pika's I/O until a
   condition holds or `WAIT_S` passes, and then fails.
4. `raw_amqp()` is a client on a plain socket that builds every frame by hand (AMQP 0-9-1
   section 4.2.3 general frame format: type, channel, size, payload, frame-end 0xCE), for
   sending what no client library would: broken frames, unknown methods, wrong headers.
   `bystander` is a well-behaved pika connection opened before it, which must notice
   nothing of it.
5. `mgmt` talks to the broker's HTTP management API (policies, `GET /api/queues` columns);
   its address comes from `WARREN_TEST_MGMT_URL` or from a `management` fixture.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import json
import os
import re
import socket
import struct
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

import pika
import pika.exceptions
import pika.spec
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from tests.conftest import WarrenServer

WAIT_S = 5.0
# Recorded from a real RabbitMQ 3.10.8 (tests/golden/README.md says how); WARREN_GOLDEN_DIR
# points the suite at another recording.
GOLDEN_DIR = Path(
    os.environ.get(
        "WARREN_GOLDEN_DIR", Path(__file__).resolve().parents[1] / "golden" / "rabbitmq-3.10.8"
    )
)
REPLY_TEXT_MAX_BYTES = 255  # reply-text is a shortstr; RabbitMQ cuts longer texts to 252 + "..."

Observation = dict[str, Any]


PROPERTY_NAMES = (
    "content_type",
    "content_encoding",
    "headers",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
    "cluster_id",
)


def golden_value(value: Any) -> Any:
    """`value` as the golden files write it: bytes as UTF-8 text (else `{"$hex": ...}`) and
    every AMQP timestamp inside headers, such as x-death `time`, as `"<time>"`."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"$hex": value.hex()}
    if isinstance(value, datetime.datetime):
        return "<time>"
    if isinstance(value, list):
        return [golden_value(item) for item in value]
    if isinstance(value, dict):
        return {key: golden_value(item) for key, item in value.items()}
    return value


@contextlib.contextmanager
def connected(server: WarrenServer) -> Iterator[BlockingConnection]:
    """A pika connection to a private node (`server_factory`'s), closed after, unless the
    node went away under it."""
    connection = BlockingConnection(pika.URLParameters(server.broker.url))
    try:
        yield connection
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            connection.close()


def _renamed(observed: Any, rename: Callable[[str], str]) -> Any:
    """`observed` with `rename` applied to every string in it, through lists and dict values."""
    if isinstance(observed, str):
        return rename(observed)
    if isinstance(observed, list):
        return [_renamed(item, rename) for item in observed]
    if isinstance(observed, dict):
        return {key: _renamed(value, rename) for key, value in observed.items()}
    return observed


def reply_text(text: str) -> str:
    """`text` as RabbitMQ puts it on the wire: cut to fit a shortstr, ending in "..."."""
    if len(text.encode()) <= REPLY_TEXT_MAX_BYTES:
        return text
    return text.encode()[: REPLY_TEXT_MAX_BYTES - 3].decode(errors="ignore") + "..."


class Amqp:
    """pika helpers bound to one test's broker and name prefix."""

    def __init__(self, broker: Any, unique: str) -> None:
        self.broker = broker
        self.prefix = unique
        self._connections: list[BlockingConnection] = []
        self._names: list[str] = []

    # -- connections and names -------------------------------------------------------------

    def connect(self, **parameters: Any) -> BlockingConnection:
        params = pika.URLParameters(self.broker.url)
        for key, value in parameters.items():
            setattr(params, key, value)
        connection = BlockingConnection(params)
        self._connections.append(connection)
        return connection

    def channel(self) -> BlockingChannel:
        """A channel on a connection of its own."""
        return self.connect().channel()

    def name(self, suffix: str) -> str:
        return self.track(f"{self.prefix}.{suffix}")

    def track(self, name: str) -> str:
        """Have `name` deleted (as a queue and as an exchange) after the test."""
        self._names.append(name)
        return name

    def queue(self, suffix: str = "q", channel: BlockingChannel | None = None, **kw: Any) -> str:
        """Declare `<unique>.<suffix>` (non-durable unless told) and return its name."""
        name = self.name(suffix)
        (channel or self.channel()).queue_declare(name, **kw)
        return name

    def exchange(
        self,
        suffix: str,
        exchange_type: str = "direct",
        channel: BlockingChannel | None = None,
        **kw: Any,
    ) -> str:
        name = self.name(suffix)
        (channel or self.channel()).exchange_declare(name, exchange_type, **kw)
        return name

    def close(self) -> None:
        for connection in self._connections:
            with contextlib.suppress(Exception):
                connection.close()
        if not self._names:
            return
        connection = BlockingConnection(pika.URLParameters(self.broker.url))
        try:
            channel = connection.channel()
            for name in self._names:
                for operation in ("queue_delete", "exchange_delete"):
                    try:
                        getattr(channel, operation)(name)
                    except pika.exceptions.ChannelClosedByBroker:
                        channel = connection.channel()
        finally:
            connection.close()

    # -- publishing, fetching, waiting ------------------------------------------------------

    @staticmethod
    def publish(
        channel: BlockingChannel,
        routing_key: str,
        body: str | bytes,
        exchange: str = "",
        mandatory: bool = False,
        **properties: Any,
    ) -> None:
        payload = body.encode() if isinstance(body, str) else body
        props = pika.BasicProperties(**properties)
        channel.basic_publish(exchange, routing_key, payload, props, mandatory=mandatory)

    def fill(self, queue: str, count: int) -> list[str]:
        """Publish m1..m<count> to `queue` with confirms, so all are in it; the bodies."""
        channel = self.channel()
        channel.confirm_delivery()
        bodies = [f"m{n}" for n in range(1, count + 1)]
        for body in bodies:
            self.publish(channel, queue, body)
        channel.close()
        return bodies

    @staticmethod
    def sync(channel: BlockingChannel) -> None:
        """A round trip on `channel`, so that an asynchronous channel error shows up."""
        channel.exchange_declare("amq.direct", passive=True)

    @staticmethod
    def bodies(channel: BlockingChannel, queue: str) -> list[str]:
        """basic.get with ack until get-empty: the bodies left in `queue`, in order."""
        found: list[str] = []
        for _ in range(10_000):
            method, _props, body = channel.basic_get(queue)
            if method is None:
                return found
            channel.basic_ack(method.delivery_tag)
            found.append(body.decode())
        raise AssertionError(f"{queue} did not run empty")

    @staticmethod
    def drain(channel: BlockingChannel, queue: str) -> list[tuple[str, bool]]:
        """basic.get with no-ack until get-empty: (body, redelivered) of each, in order."""
        found: list[tuple[str, bool]] = []
        for _ in range(10_000):
            method, _props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return found
            found.append((body.decode(), method.redelivered))
        raise AssertionError(f"{queue} did not run empty")

    @staticmethod
    def record(method: Any, properties: pika.BasicProperties, body: bytes) -> Observation:
        """A delivery or get-ok in the golden files' message shape (see `golden_value`)."""
        record: Observation = {
            "body": golden_value(body),
            "exchange": method.exchange,
            "routing_key": method.routing_key,
            "redelivered": method.redelivered,
        }
        if isinstance(method, pika.spec.Basic.GetOk):
            record["message_count"] = method.message_count
        record["props"] = {
            name: golden_value(getattr(properties, name))
            for name in PROPERTY_NAMES
            if getattr(properties, name) is not None
        }
        return record

    def get_record(
        self, channel: BlockingChannel, queue: str, ack: bool = True
    ) -> tuple[Observation | None, int | None]:
        """One basic.get (manual ack): its record and delivery tag, acked if `ack`."""
        method, properties, body = channel.basic_get(queue)
        if method is None:
            return None, None
        if ack:
            channel.basic_ack(method.delivery_tag)
        return self.record(method, properties, body), method.delivery_tag

    def drain_records(self, channel: BlockingChannel, queue: str) -> list[Observation]:
        """`get_record` with ack until get-empty: the records of what was left, in order."""
        found: list[Observation] = []
        for _ in range(10_000):
            record, _tag = self.get_record(channel, queue)
            if record is None:
                return found
            found.append(record)
        raise AssertionError(f"{queue} did not run empty")

    def confirm(
        self, channel: BlockingChannel, routing_key: str, body: str, exchange: str = "", **kw: Any
    ) -> str:
        """One publish on a confirm channel: "ack", "nack" or "returned" (mandatory)."""
        try:
            self.publish(channel, routing_key, body, exchange=exchange, **kw)
        except pika.exceptions.NackError:
            return "nack"
        except pika.exceptions.UnroutableError:
            return "returned"
        return "ack"

    @staticmethod
    def passive_count(channel: BlockingChannel, queue: str) -> tuple[int, int]:
        """(message_count, consumer_count) from a passive queue.declare.

        RabbitMQ answers a declare ahead of publishes the queue has not taken in yet, so
        publish with confirms before counting.
        """
        ok = channel.queue_declare(queue, passive=True).method
        return ok.message_count, ok.consumer_count

    def passive(self, channel: BlockingChannel, queue: str) -> Observation:
        """`passive_count` in the golden files' shape: {"message_count", "consumer_count"}."""
        message_count, consumer_count = self.passive_count(channel, queue)
        return {"message_count": message_count, "consumer_count": consumer_count}

    def await_count(
        self, channel: BlockingChannel, queue: str, count: int, timeout_s: float = WAIT_S
    ) -> Observation:
        """`passive` polled until its message_count is `count` or `timeout_s` passes; the
        last reading either way, for the caller to compare."""
        deadline = time.monotonic() + timeout_s
        while True:
            observed = self.passive(channel, queue)
            if observed["message_count"] == count or time.monotonic() > deadline:
                return observed
            time.sleep(0.02)

    @staticmethod
    def pump(
        connections: BlockingConnection | Sequence[BlockingConnection],
        until: Callable[[], bool],
        timeout_s: float = WAIT_S,
    ) -> None:
        """Process I/O on one or more connections until `until()`; fail after `timeout_s`."""
        if isinstance(connections, BlockingConnection):
            connections = [connections]
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout_s} s")
            for connection in connections:
                connection.process_data_events(time_limit=0.01)

    @staticmethod
    def eventually(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        """Poll `condition` (which does its own I/O) until true; fail after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout_s} s")
            time.sleep(0.02)

    @staticmethod
    def settle(connection: BlockingConnection, duration_s: float = 0.2) -> None:
        """Process I/O for a short while: for asserting that nothing (more) arrives."""
        deadline = time.monotonic() + duration_s
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.02)

    # -- observations ------------------------------------------------------------------------

    reply_text = staticmethod(reply_text)

    @staticmethod
    def attempt(action: Callable[[], Any]) -> Observation:
        """Run `action`: `{"ok": True}` plus its result if that is a dict, or the close."""
        try:
            result = action()
        except pika.exceptions.ChannelClosedByBroker as closed:
            return {"closed": "channel", "code": closed.reply_code, "text": closed.reply_text}
        except pika.exceptions.ConnectionClosedByBroker as closed:
            return {"closed": "connection", "code": closed.reply_code, "text": closed.reply_text}
        return {"ok": True, **(result if isinstance(result, dict) else {})}

    def attempt_on(
        self, connection: BlockingConnection, action: Callable[[BlockingChannel], Any]
    ) -> Observation:
        """`attempt(action)` on a new channel of `connection`."""
        channel = connection.channel()
        return self.attempt(lambda: action(channel))

    def declare_counts(self, channel: BlockingChannel, queue: str, **kw: Any) -> Observation:
        """Observation of a queue.declare, with the declare-ok counts as in the golden files."""

        def declare() -> Observation:
            ok = channel.queue_declare(queue, **kw).method
            return {"message_count": ok.message_count, "consumer_count": ok.consumer_count}

        return self.attempt(declare)

    def normalise(self, observed: Any, scenario: str) -> Any:
        """`observed` with this test's prefix renamed to the golden one, `g.<scenario>`."""
        return _renamed(observed, lambda text: text.replace(f"{self.prefix}.", f"g.{scenario}."))


@pytest.fixture
def amqp(broker: Any, unique: str) -> Iterator[Amqp]:
    helper = Amqp(broker, unique)
    yield helper
    helper.close()


@pytest.fixture
def golden() -> Callable[[str], Observation]:
    """`golden(scenario)`: the `observed` part of a recorded RabbitMQ 3.10.8 scenario."""

    def load(scenario: str) -> Observation:
        path = GOLDEN_DIR / f"{scenario}.json"
        observed: Observation = json.loads(path.read_text())["observed"]
        return observed

    return load


# -- management HTTP API --------------------------------------------------------------------

QUEUE_INFO_FIELDS = (
    "type",
    "durable",
    "auto_delete",
    "exclusive",
    "arguments",
    "policy",
    "operator_policy",
    "effective_policy_definition",
)
STATS_FIELDS = ("messages_ready", "messages_unacknowledged", "message_bytes_ready", "messages")
POLICY_FIELDS = ("vhost", "name", "pattern", "apply-to", "definition", "priority")
RABBITMQ_STATS_INTERVAL_S = 5.0  # collect_statistics_interval: how stale RabbitMQ's columns are
STATS_SETTLE_S = 15.0


class Management:
    """The broker's HTTP management API, for policies and the columns of `GET /api/queues`.

    Policies are named `<unique>-<suffix>` and match `^<unique>\\.<regex>`; every policy set
    is deleted after the test. `normalise` renames them (and queue names) to the golden
    `g-<scenario>-<suffix>` and `^g\\.<scenario>\\.<regex>`.
    """

    STATS_FIELDS = STATS_FIELDS
    QUEUE_INFO_FIELDS = QUEUE_INFO_FIELDS

    def __init__(self, base_url: str, user: str, password: str, amqp: Amqp) -> None:
        self.base_url = base_url.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._auth = f"Basic {token}"
        self.amqp = amqp
        self.prefix = amqp.prefix
        self._policies: list[tuple[str, bool]] = []

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, decoded JSON or None); HTTP errors are returned, not raised."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": self._auth, "Content-Type": "application/json"}
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=WAIT_S) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    @staticmethod
    def _policy_path(name: str, operator: bool) -> str:
        kind = "operator-policies" if operator else "policies"
        return f"/api/{kind}/%2F/{urllib.parse.quote(name, safe='')}"

    def set_policy(
        self,
        suffix: str,
        regex: str,
        definition: dict[str, Any],
        priority: int = 0,
        apply_to: str = "queues",
        operator: bool = False,
    ) -> str:
        """PUT a policy matching `^<unique>\\.<regex>`; returns its name."""
        name = f"{self.prefix}-{suffix}"
        body = {
            "pattern": "^" + re.escape(f"{self.prefix}.") + regex,
            "definition": definition,
            "priority": priority,
            "apply-to": apply_to,
        }
        self._policies.append((name, operator))
        status, reply = self.request("PUT", self._policy_path(name, operator), body)
        assert status in (200, 201, 204), (status, reply)
        return name

    def clear_policy(self, name: str, operator: bool = False) -> None:
        status, reply = self.request("DELETE", self._policy_path(name, operator))
        assert status in (200, 204), (status, reply)

    def get_policy(self, name: str, operator: bool = False) -> Observation:
        status, reply = self.request("GET", self._policy_path(name, operator))
        assert status == 200, (status, reply)
        return {key: reply.get(key) for key in POLICY_FIELDS}

    def queue(self, name: str) -> dict[str, Any] | None:
        """`GET /api/queues/%2F/<name>`, or None for a 404."""
        status, reply = self.request("GET", f"/api/queues/%2F/{urllib.parse.quote(name, safe='')}")
        if status == 404:
            return None
        assert status == 200, (status, reply)
        return dict(reply)

    def queue_info(self, name: str, fields: Sequence[str] = QUEUE_INFO_FIELDS) -> Observation:
        """The queue's type, flags, arguments and policies, once settled (see `stats`)."""
        return self.stats(name, fields)

    def stats(self, name: str, fields: Sequence[str] = STATS_FIELDS) -> Observation:
        """The columns once they settle: two reads in a row agree and `messages_ready` (if
        asked for) equals a passive declare's count. RabbitMQ's columns, policies included,
        lag by up to its statistics interval, so against RabbitMQ the reads also start that
        long after the call; Warren's are current.
        """
        channel = self.amqp.channel()
        rabbitmq = self.amqp.broker.is_rabbitmq
        start = time.monotonic()
        not_before = start + (RABBITMQ_STATS_INTERVAL_S + 0.5 if rabbitmq else 0.0)
        previous: Observation | None = None
        while True:
            queue = self.queue(name)
            assert queue is not None, f"queue {name} not found"
            current = {key: queue.get(key) for key in fields}
            ready, _consumers = self.amqp.passive_count(channel, name)
            settled = current == previous and current.get("messages_ready", ready) == ready
            if settled and time.monotonic() >= not_before:
                return current
            if time.monotonic() > start + STATS_SETTLE_S:
                raise AssertionError(f"columns of {name} did not settle: {current}")
            previous = current
            time.sleep(0.5 if rabbitmq else 0.02)

    def normalise(self, observed: Any, scenario: str) -> Any:
        """`amqp.normalise`, and policy names and patterns renamed to the golden ones."""
        escaped, golden_escaped = re.escape(f"{self.prefix}."), re.escape(f"g.{scenario}.")

        def rename(text: str) -> str:
            text = text.replace(escaped, golden_escaped)
            text = text.replace(f"{self.prefix}-", f"g-{scenario}-")
            return text.replace(f"{self.prefix}.", f"g.{scenario}.")

        return _renamed(observed, rename)

    def close(self) -> None:
        for name, operator in self._policies:
            with contextlib.suppress(Exception):
                self.request("DELETE", self._policy_path(name, operator))


@pytest.fixture
def mgmt(management: tuple[str, str, str], amqp: Amqp) -> Iterator[Management]:
    """The management API of the broker under test (see `Management`)."""
    api = Management(*management, amqp)
    yield api
    api.close()


# -- raw frames ------------------------------------------------------------------------------

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD, FRAME_HEADER, FRAME_BODY = 1, 2, 3
FRAME_END = 0xCE
CONNECTION_CLOSE, CONNECTION_CLOSE_OK = (10, 50), (10, 51)


def shortstr(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">B", len(data)) + data


def longstr(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def method_payload(class_id: int, method_id: int, arguments: bytes = b"") -> bytes:
    return struct.pack(">HH", class_id, method_id) + arguments


def frame_bytes(frame_type: int, channel: int, payload: bytes, frame_end: int = FRAME_END) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([frame_end])


def publish_frames(channel: int, exchange: str, routing_key: str, body: bytes) -> bytes:
    """basic.publish, a content header without properties, and one body frame."""
    arguments = struct.pack(">H", 0) + shortstr(exchange) + shortstr(routing_key) + b"\x00"
    header = struct.pack(">HHQH", 60, 0, len(body), 0)
    return (
        frame_bytes(FRAME_METHOD, channel, method_payload(60, 40, arguments))
        + frame_bytes(FRAME_HEADER, channel, header)
        + frame_bytes(FRAME_BODY, channel, body)
    )


def _client_properties() -> bytes:
    """{capabilities: {authentication_failure_close: true}}, so a failed login is a close."""
    flag = shortstr("authentication_failure_close") + b"t\x01"
    capabilities = shortstr("capabilities") + b"F" + struct.pack(">I", len(flag)) + flag
    return struct.pack(">I", len(capabilities)) + capabilities


CLIENT_PROPERTIES = _client_properties()


@dataclasses.dataclass(frozen=True)
class Frame:
    frame_type: int
    channel: int
    payload: bytes

    @property
    def method(self) -> tuple[int, int]:
        class_id, method_id = struct.unpack(">HH", self.payload[:4])
        return class_id, method_id


class Close(NamedTuple):
    """The arguments of a connection.close or channel.close; compares equal to a tuple."""

    code: int
    text: str
    class_id: int
    method_id: int

    @classmethod
    def parse(cls, payload: bytes) -> Close:
        (code,) = struct.unpack(">H", payload[4:6])
        text_end = 7 + payload[6]
        class_id, method_id = struct.unpack(">HH", payload[text_end : text_end + 4])
        return cls(code, payload[7:text_end].decode(), class_id, method_id)


class RawAmqp:
    """One AMQP connection on a plain socket; every read waits at most `WAIT_S`."""

    # Frame builders, for tests that assemble frames themselves.
    shortstr = staticmethod(shortstr)
    publish_frames = staticmethod(publish_frames)

    def __init__(self, url: str) -> None:
        self.url = urlsplit(url)
        address = (self.url.hostname or "127.0.0.1", self.url.port or 5672)
        self.sock = socket.create_connection(address, timeout=WAIT_S)
        self.frame_max = 0

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(
        self, frame_type: int, channel: int, payload: bytes, frame_end: int = FRAME_END
    ) -> None:
        self.send(frame_bytes(frame_type, channel, payload, frame_end))

    def send_method(
        self, channel: int, class_id: int, method_id: int, arguments: bytes = b""
    ) -> None:
        self.send_frame(FRAME_METHOD, channel, method_payload(class_id, method_id, arguments))

    def publish(self, channel: int, routing_key: str, body: bytes, exchange: str = "") -> None:
        self.send(publish_frames(channel, exchange, routing_key, body))

    def _read_exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise EOFError(f"connection closed after {data!r}")
            data += chunk
        return data

    def read_frame(self) -> Frame:
        frame_type, channel, size = struct.unpack(">BHI", self._read_exactly(7))
        payload = self._read_exactly(size)
        assert self._read_exactly(1) == bytes([FRAME_END])
        return Frame(frame_type, channel, payload)

    def expect_method(self, channel: int, method: tuple[int, int]) -> Frame:
        frame = self.read_frame()
        assert (frame.frame_type, frame.channel, frame.method) == (FRAME_METHOD, channel, method)
        return frame

    def handshake(self) -> None:
        """Protocol header, start-ok (PLAIN), tune-ok (no heartbeats), connection.open."""
        self.start()
        self.tune()
        self.open()

    def start(self, password: str | None = None) -> bytes:
        """Header, connection.start, start-ok; returns the start's arguments."""
        self.send(PROTOCOL_HEADER)
        start = self.expect_method(0, (10, 10)).payload[4:]
        user = unquote(self.url.username or "")
        password = unquote(self.url.password or "") if password is None else password
        response = f"\x00{user}\x00{password}".encode()
        start_ok = CLIENT_PROPERTIES + shortstr("PLAIN") + longstr(response) + shortstr("en_US")
        self.send_method(0, 10, 11, start_ok)
        return start

    def tune(self) -> tuple[int, int, int]:
        """connection.tune, answered with the same limits and heartbeats off."""
        tune = self.expect_method(0, (10, 30)).payload
        channel_max, self.frame_max, heartbeat_s = struct.unpack(">HIH", tune[4:12])
        self.send_method(0, 10, 31, struct.pack(">HIH", channel_max, self.frame_max, 0))
        return channel_max, self.frame_max, heartbeat_s

    def open(self, vhost: str | None = None, expect_ok: bool = True) -> None:
        if vhost is None:
            vhost = unquote(self.url.path[1:]) or "/"
        self.send_method(0, 10, 40, shortstr(vhost) + shortstr("") + b"\x00")
        if expect_ok:
            self.expect_method(0, (10, 41))

    def open_channel(self, channel: int) -> None:
        self.send_method(channel, 20, 10, shortstr(""))
        self.expect_method(channel, (20, 11))

    def read_connection_close(self) -> Close:
        """The next frame must be connection.close; answer it with close-ok."""
        frame = self.expect_method(0, CONNECTION_CLOSE)
        with contextlib.suppress(OSError):
            self.send_method(0, *CONNECTION_CLOSE_OK)
        return Close.parse(frame.payload)

    def read_until_closed(self) -> bytes:
        """Everything the server sends until it closes the socket (EOF or reset)."""
        data = b""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return data
            except TimeoutError:
                break
            if not chunk:
                return data
            data += chunk
        raise AssertionError(f"server kept the connection open; it sent {data!r}")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw_amqp(broker: Any) -> Iterator[Callable[..., RawAmqp]]:
    """`raw_amqp(handshake=True)`: a raw connection, by default already open."""
    connections: list[RawAmqp] = []

    def connect(handshake: bool = True) -> RawAmqp:
        raw = RawAmqp(broker.url)
        connections.append(raw)
        if handshake:
            raw.handshake()
        return raw

    yield connect
    for raw in connections:
        raw.close()


class Bystander:
    """A pika connection opened before a misbehaving one, with one message queued: after
    the misbehaviour it must still publish and consume, and find its message."""

    def __init__(self, amqp: Amqp) -> None:
        self.amqp = amqp
        self.connection = amqp.connect()
        self.channel = self.connection.channel()
        self.queue = amqp.queue("bystander", self.channel)
        amqp.publish(self.channel, self.queue, "before")
        amqp.sync(self.channel)

    def assert_unharmed(self) -> None:
        self.amqp.publish(self.channel, self.queue, "after")
        got: list[str] = []

        def on_message(channel: Any, method: Any, properties: Any, body: bytes) -> None:
            got.append(body.decode())
            channel.basic_ack(method.delivery_tag)

        tag = self.channel.basic_consume(self.queue, on_message)
        self.amqp.pump(self.connection, lambda: len(got) >= 2)
        self.channel.basic_cancel(tag)
        assert got == ["before", "after"]


@pytest.fixture
def bystander(amqp: Amqp) -> Bystander:
    return Bystander(amqp)
