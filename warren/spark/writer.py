"""Writing a DataFrame to AMQP: every row is one publish, confirmed before the task ends.

Theory of operation:
1. Each Spark task publishes its partition on its own connection and channel in confirm mode
   (RabbitMQ's "Publisher Confirms"). Up to `confirmWindow` messages may be unconfirmed at
   once; the next row is published when a `basic.ack`/`basic.nack` (single or `multiple`)
   frees room. The task returns only when every message it published was confirmed.
2. Publishes are `mandatory` by default: a row no queue accepts comes back as `basic.return`
   (followed by its ack) and is reported instead of silently dropped. A returned or nacked
   message fails the task with an `UndeliveredError` listing the first few, so Spark reports
   the write as failed. Spark may retry the task, which publishes its rows again: the writer is
   at-least-once, never at-most-once.
3. pika's `SelectConnection` runs the I/O loop in the task's thread; its heartbeats are
   serviced while rows are pulled from Spark. pika hands the socket each frame on its own
   (three per message: method, header, body) and sends each with its own `send()`;
   `CoalescingConnection` joins the frames of all the publishes one refill of the window
   makes into one buffer, so the socket sees one write per refill. Spark hands the task
   Arrow record batches (`DataSourceArrowWriter`): a batch becomes Python values column by
   column, without a `Row` object per row. An exception raised while pulling a row closes
   the connection and is raised from `publish_all`.
4. Nothing can be taken back after a confirm, so `commit` and `abort` have nothing to undo.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import pika
import pika.channel
import pika.connection
import pika.frame
import pika.spec
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from warren.spark.message import Outgoing, body_preview, outgoing_of
from warren.spark.options import WriteOptions, connection_parameters

REPORTED_MAX = 5  # undelivered messages named in an error; the rest are counted


@dataclasses.dataclass(frozen=True, slots=True)
class Undelivered:
    exchange: str
    routing_key: str
    why: str  # "returned: 312 NO_ROUTE" or "nacked"
    message_id: str | None
    body: bytes

    def __str__(self) -> str:
        return (
            f"exchange={self.exchange!r} routing_key={self.routing_key!r} {self.why} "
            f"message_id={self.message_id!r} body={body_preview(self.body)!r}"
        )


class UndeliveredError(RuntimeError):
    """Some published rows were returned as unroutable or nacked by the broker."""

    def __init__(self, undelivered: list[Undelivered], published: int) -> None:
        self.undelivered = undelivered
        named = "; ".join(str(message) for message in undelivered[:REPORTED_MAX])
        more = len(undelivered) - REPORTED_MAX
        super().__init__(
            f"{len(undelivered)} of {published} published messages were not delivered: {named}"
            + (f"; and {more} more" if more > 0 else "")
        )


class CoalescingConnection(pika.SelectConnection):  # type: ignore[misc]  # pika is untyped
    """A `SelectConnection` that can hold back frames and write them as one buffer (rule 3).

    `_adapter_emit_data` is the hook pika's adapters implement to hand frames to the socket.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._held: list[bytes] | None = None
        super().__init__(*args, **kwargs)

    def _adapter_emit_data(self, data: bytes) -> None:
        if self._held is None:
            super()._adapter_emit_data(data)
        else:
            self._held.append(data)

    @contextlib.contextmanager
    def coalesced(self) -> Iterator[None]:
        """Frames written inside go to the socket together when the block ends."""
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            if held and self.is_open:
                super()._adapter_emit_data(b"".join(held))


class ConfirmedPublisher:
    """Publishes messages with a window of unconfirmed ones; see the module's rules 1-3."""

    def __init__(self, options: WriteOptions, messages: Iterator[Outgoing]) -> None:
        self._options = options
        self._messages = messages
        self._exhausted = False
        self._closing = False
        self._unconfirmed: collections.OrderedDict[int, Outgoing] = collections.OrderedDict()
        self._delivery_tag = 0
        self._undelivered: list[Undelivered] = []
        self._failure: BaseException | None = None
        self._channel: pika.channel.Channel | None = None
        parameters = connection_parameters(options.uri, options.heartbeat_s)
        self._connection = CoalescingConnection(
            parameters,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_failure,
            on_close_callback=self._on_failure,
        )

    def publish_all(self) -> int:
        """Publish every message, wait for every confirm; the number published."""
        self._connection.ioloop.start()
        if self._failure is not None:
            raise self._failure
        if self._undelivered:
            raise UndeliveredError(self._undelivered, self._delivery_tag)
        return self._delivery_tag

    def _on_open(self, connection: pika.connection.Connection) -> None:
        connection.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel: pika.channel.Channel) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(self._on_confirm, callback=lambda _frame: self._fill())

    def _fill(self) -> None:
        assert self._channel is not None
        try:
            with self._connection.coalesced():
                self._publish_while_room(self._channel)
        except BaseException as error:
            self._fail(error)
            return
        if self._exhausted and not self._unconfirmed:
            self._close()

    def _publish_while_room(self, channel: pika.channel.Channel) -> None:
        while not self._exhausted and len(self._unconfirmed) < self._options.confirm_window:
            message = next(self._messages, None)
            if message is None:
                self._exhausted = True
                return
            channel.basic_publish(
                message.exchange,
                message.routing_key,
                message.body,
                message.properties,
                mandatory=self._options.mandatory,
            )
            self._delivery_tag += 1
            self._unconfirmed[self._delivery_tag] = message

    def _on_confirm(self, frame: pika.frame.Method[Any]) -> None:
        method = frame.method
        nacked = isinstance(method, pika.spec.Basic.Nack)
        settled = []
        if method.multiple:
            while self._unconfirmed and next(iter(self._unconfirmed)) <= method.delivery_tag:
                settled.append(self._unconfirmed.popitem(last=False)[1])
        elif method.delivery_tag in self._unconfirmed:
            settled.append(self._unconfirmed.pop(method.delivery_tag))
        if nacked:
            self._undelivered += [
                Undelivered(m.exchange, m.routing_key, "nacked", m.properties.message_id, m.body)
                for m in settled
            ]
        self._fill()

    def _on_return(
        self,
        _channel: pika.channel.Channel,
        method: pika.spec.Basic.Return,
        properties: pika.spec.BasicProperties,
        body: bytes,
    ) -> None:
        why = f"returned: {method.reply_code} {method.reply_text}"
        self._undelivered.append(
            Undelivered(method.exchange, method.routing_key, why, properties.message_id, body)
        )

    def _on_channel_closed(self, _channel: pika.channel.Channel, reason: BaseException) -> None:
        if not self._closing:
            self._fail(reason)

    def _fail(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._close()

    def _close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._connection.is_open:
            self._connection.close()
        else:
            self._connection.ioloop.stop()

    def _on_failure(self, _connection: pika.connection.Connection, error: BaseException) -> None:
        if not self._closing and self._failure is None:
            self._failure = error
        self._connection.ioloop.stop()


@dataclasses.dataclass(frozen=True)
class Published(WriterCommitMessage):
    count: int


def publish_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> Published:
    messages = (
        outgoing_of(row, options.exchange, options.routing_key)
        for batch in batches
        for row in batch.to_pylist()
    )
    return Published(ConfirmedPublisher(options, messages).publish_all())


class AmqpWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self._options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return publish_batches(self._options, iterator)


class AmqpStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self._options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return publish_batches(self._options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every row was confirmed when its task ended (rule 4)."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Confirmed rows cannot be taken back (rule 4); failed tasks raised already."""
