"""Writing a DataFrame to AMQP: every row is one publish, confirmed before the task ends.

Theory of operation:
1. Each Spark task publishes its partition on its own connection and channel in confirm mode
   (RabbitMQ's "Publisher Confirms"), so a write publishes from every partition of the
   DataFrame at once. Up to `confirmWindow` messages may be unconfirmed at once; whenever a
   `basic.ack`/`basic.nack` (single or `multiple`) frees room, the task refills the window.
   The task returns only when every message it published was confirmed.
2. Publishes are `mandatory` by default: a row no queue accepts comes back as `basic.return`
   (followed by its ack) and is reported instead of silently dropped. A returned or nacked
   message fails the task with an `UndeliveredError` listing the first few, so Spark reports
   the write as failed. Spark may retry the task, which publishes its rows again: the writer is
   at-least-once, never at-most-once.
3. A refill is encoded as one buffer (method, header and body frames of every publish, by
   `warren.amqp`'s content framing) and written with one `sendall`; the blocking client
   (`warren.spark.wire`) reads confirms in bulk. Spark hands the task Arrow record batches
   (`DataSourceArrowWriter`): a batch becomes Python values column by column, without a `Row`
   object per row, and rows alike but for their body share their encoded properties
   (`warren.spark.message`, rule 4). Messages are persistent unless the row or
   `deliveryMode` says otherwise.
4. Nothing can be taken back after a confirm, so `commit` and `abort` have nothing to undo.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from warren.amqp.content import content_frames, shortstr
from warren.amqp.methods import ConfirmSelect, ConfirmSelectOk
from warren.spark.message import (
    MESSAGE_ID,
    Outgoing,
    body_preview,
    outgoing_of_batch,
    property_values,
)
from warren.spark.options import WriteOptions
from warren.spark.wire import CHANNEL, Client

_PUBLISH_ID = b"\x00\x3c\x00\x28\x00\x00"  # basic.publish, ticket 0
CONFIRM_WAIT_S = 1.0  # the longest wait for confirms before heartbeats are looked after
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


class ConfirmedPublisher:
    """Publishes messages with a window of unconfirmed ones; see the module's rules 1-3."""

    def __init__(self, options: WriteOptions, messages: Iterator[Outgoing]) -> None:
        self._options = options
        self._messages = messages
        self._unconfirmed: collections.OrderedDict[int, Outgoing] = collections.OrderedDict()
        self._delivery_tag = 0
        self._undelivered: list[Undelivered] = []
        self._routes: dict[tuple[str, str], bytes] = {}  # encoded basic.publish by route

    def publish_all(self) -> int:
        """Publish every message, wait for every confirm; the number published."""
        client = Client(self._options.uri, self._options.heartbeat_s)
        try:
            client.on_confirm = self._on_confirm
            client.on_return = self._on_return
            client.call(ConfirmSelect(), ConfirmSelectOk)
            exhausted = False
            while not exhausted or self._unconfirmed:
                if not exhausted:
                    exhausted = self._fill(client)
                if self._unconfirmed:
                    client.receive(CONFIRM_WAIT_S)
        finally:
            client.close()
        if self._undelivered:
            raise UndeliveredError(self._undelivered, self._delivery_tag)
        return self._delivery_tag

    def _fill(self, client: Client) -> bool:
        """Publish while the window has room, as one write; True once every message was."""
        room = self._options.confirm_window - len(self._unconfirmed)
        frames = []
        exhausted = False
        mandatory = b"\x01" if self._options.mandatory else b"\x00"
        for _ in range(room):
            message = next(self._messages, None)
            if message is None:
                exhausted = True
                break
            route = (message.exchange, message.routing_key)
            method = self._routes.get(route)
            if method is None:
                method = _PUBLISH_ID + shortstr(route[0]) + shortstr(route[1]) + mandatory
                self._routes[route] = method
            frames.append(
                content_frames(CHANNEL, method, message.properties, message.body, client.frame_max)
            )
            self._delivery_tag += 1
            self._unconfirmed[self._delivery_tag] = message
        if frames:
            client.send(b"".join(frames))
        return exhausted

    def _on_confirm(self, delivery_tag: int, multiple: bool, acked: bool) -> None:
        settled = []
        if multiple:
            while self._unconfirmed and next(iter(self._unconfirmed)) <= delivery_tag:
                settled.append(self._unconfirmed.popitem(last=False)[1])
        elif delivery_tag in self._unconfirmed:
            settled.append(self._unconfirmed.pop(delivery_tag))
        if not acked:
            self._undelivered += [
                Undelivered(m.exchange, m.routing_key, "nacked", m.message_id, m.body)
                for m in settled
            ]

    def _on_return(
        self, reason: str, exchange: str, routing_key: str, properties: bytes, body: bytes
    ) -> None:
        message_id = property_values(properties)[MESSAGE_ID]
        self._undelivered.append(
            Undelivered(exchange, routing_key, f"returned: {reason}", message_id, body)
        )


@dataclasses.dataclass(frozen=True)
class Published(WriterCommitMessage):
    count: int


def publish_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> Published:
    messages = (
        message
        for batch in batches
        for message in outgoing_of_batch(
            batch, options.exchange, options.routing_key, options.delivery_mode
        )
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
