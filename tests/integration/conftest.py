"""Shared helpers for the integration suite: pika connections, names, observations, golden files.

Theory of operation:
1. `amqp` hands out pika blocking connections and channels to the `broker` and closes them
   after the test. Names come from `amqp.name(suffix)` (`<unique>.<suffix>`); every name
   handed out is deleted as a queue and as an exchange at teardown, on a fresh connection.
2. An observation has the shape of the golden files (`golden/README.md` in the shared folder):
   `{"ok": True, ...}` or `{"closed": "channel"|"connection", "code": ..., "text": ...}`.
   `amqp.attempt(action)` runs one action and returns its observation, so a test can compare
   what it saw with what RabbitMQ 3.10.8 was recorded doing.
3. Waiting is always bounded: `amqp.pump(connection, until)` drives pika's I/O until a
   condition holds or `WAIT_S` passes, and then fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

WAIT_S = 5.0
GOLDEN_DIR = Path(
    os.environ.get(
        "WARREN_GOLDEN_DIR",
        Path(__file__).resolve().parents[3] / "shared" / "golden" / "rabbitmq-3.10.8",
    )
)
REPLY_TEXT_MAX_BYTES = 255  # reply-text is a shortstr; RabbitMQ cuts longer texts to 252 + "..."

Observation = dict[str, Any]


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
    def passive_count(channel: BlockingChannel, queue: str) -> tuple[int, int]:
        """(message_count, consumer_count) from a passive queue.declare."""
        ok = channel.queue_declare(queue, passive=True).method
        return ok.message_count, ok.consumer_count

    @staticmethod
    def pump(
        connection: BlockingConnection, until: Callable[[], bool], timeout_s: float = WAIT_S
    ) -> None:
        """Process I/O until `until()` is true; fail after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout_s} s")
            connection.process_data_events(time_limit=0.02)

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
        if isinstance(observed, str):
            return observed.replace(f"{self.prefix}.", f"g.{scenario}.")
        if isinstance(observed, list):
            return [self.normalise(item, scenario) for item in observed]
        if isinstance(observed, dict):
            return {key: self.normalise(value, scenario) for key, value in observed.items()}
        return observed


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
        if not path.exists():
            pytest.skip(f"golden file {path} not found (set WARREN_GOLDEN_DIR)")
        observed: Observation = json.loads(path.read_text())["observed"]
        return observed

    return load
