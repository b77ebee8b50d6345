"""Writing a DataFrame to AMQP: every row is one publish, confirmed before the task ends.

Theory of operation:
1. Each Spark task publishes its partition on its own connection and channel in confirm mode
   (RabbitMQ's "Publisher Confirms"), so a write publishes from every partition of the
   DataFrame at once. Up to `confirmWindow` messages may be unconfirmed at once. `Confirms`
   counts the settled delivery tags as runs, so a `multiple` `basic.ack`/`basic.nack` costs
   one step however many messages it settles. The task returns only when every message it
   published was confirmed.
2. Publishes are `mandatory` by default: a row no queue accepts comes back as `basic.return`
   (followed by its ack) and is reported instead of silently dropped. A returned or nacked
   message fails the task with an `UndeliveredError` listing the first few, so Spark reports
   the write as failed. Spark may retry the task, which publishes its rows again: the writer is
   at-least-once, never at-most-once.
3. Spark hands the task Arrow record batches (`DataSourceArrowWriter`); each becomes one
   buffer of frames (`warren.spark.publishes`), sent in slices as the window frees room: a
   slice is at least a quarter of the window (or the batch's rest), so the socket gets few
   large writes, and the blocking client (`warren.spark.wire`) reads confirms in bulk
   meanwhile. What was sent stays referenced until every message of its batch is settled, to
   name a nacked one. Messages are persistent unless the row or `deliveryMode` says
   otherwise.
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

from warren.amqp.methods import ConfirmSelect, ConfirmSelectOk
from warren.spark.message import MESSAGE_ID, Outgoing, body_preview, property_values
from warren.spark.options import WriteOptions
from warren.spark.publishes import Publishes, encode_batch
from warren.spark.wire import CHANNEL, Client

CONFIRM_WAIT_S = 1.0  # the longest wait for confirms before heartbeats are looked after
REFILL_PARTS = 4  # the window is refilled once a quarter of it is free (rule 3)
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


class Confirms:
    """The delivery tags of one confirm-mode channel: how many are published and which of
    them the broker settled (acked or nacked). Every tag below `_low` is settled, and so are
    `_singles`, settled one by one out of order; a `multiple` confirm settles a whole run in
    one step, so the bookkeeping costs per confirm, not per message."""

    def __init__(self) -> None:
        self.published = 0
        self._low = 1
        self._singles: set[int] = set()

    @property
    def low(self) -> int:
        """Every tag below this one is settled."""
        return self._low

    @property
    def unconfirmed(self) -> int:
        return self.published - (self._low - 1) - len(self._singles)

    def settle(self, delivery_tag: int, multiple: bool) -> list[range]:
        """Settle `delivery_tag` (and, with `multiple`, every tag below it); the runs of
        tags this newly settled."""
        if delivery_tag < self._low or delivery_tag in self._singles:
            return []
        if not multiple:
            self._singles.add(delivery_tag)
            self._advance()
            return [range(delivery_tag, delivery_tag + 1)]
        settled, start = [], self._low
        for single in sorted(tag for tag in self._singles if tag <= delivery_tag):
            if single > start:
                settled.append(range(start, single))
            start = single + 1
            self._singles.remove(single)
        if start <= delivery_tag:
            settled.append(range(start, delivery_tag + 1))
        self._low = delivery_tag + 1
        self._advance()
        return settled

    def _advance(self) -> None:
        """Move `_low` over the tags settled one by one right above it."""
        while self._low in self._singles:
            self._singles.remove(self._low)
            self._low += 1


class ConfirmedPublisher:
    """Publishes record batches with a window of unconfirmed messages; see the module's
    rules 1-3."""

    def __init__(self, options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> None:
        self._options = options
        self._batches = batches
        self._confirms = Confirms()
        # what was sent and is not all settled yet: (the first message's tag, the messages)
        self._sent: collections.deque[tuple[int, Publishes]] = collections.deque()
        self._undelivered: list[Undelivered] = []
        self._refill = max(1, options.confirm_window // REFILL_PARTS)

    def publish_all(self) -> int:
        """Publish every row, wait for every confirm; the number published."""
        client = Client(self._options.uri, self._options.heartbeat_s)
        try:
            client.on_confirm = self._on_confirm
            client.on_return = self._on_return
            client.call(ConfirmSelect(), ConfirmSelectOk)
            for batch in self._batches:
                self._publish(client, self._encode(batch, client.frame_max))
            while self._confirms.unconfirmed:
                client.receive(CONFIRM_WAIT_S)
        finally:
            client.close()
        if self._undelivered:
            raise UndeliveredError(self._undelivered, self._confirms.published)
        return self._confirms.published

    def _encode(self, batch: pa.RecordBatch, frame_max: int) -> Publishes:
        options = self._options
        return encode_batch(
            batch,
            options.exchange,
            options.routing_key,
            options.delivery_mode,
            options.mandatory,
            CHANNEL,
            frame_max,
        )

    def _publish(self, client: Client, publishes: Publishes) -> None:
        """Send `publishes` as the window allows, in slices of at least a refill (rule 3)."""
        if not len(publishes):
            return
        self._sent.append((self._confirms.published + 1, publishes))
        sent = 0
        while sent < len(publishes):
            room = self._options.confirm_window - self._confirms.unconfirmed
            if room < min(self._refill, len(publishes) - sent):
                client.receive(CONFIRM_WAIT_S)
                continue
            stop = min(sent + room, len(publishes))
            client.send(publishes.span(sent, stop))
            self._confirms.published += stop - sent
            sent = stop

    def _on_confirm(self, delivery_tag: int, multiple: bool, acked: bool) -> None:
        settled = self._confirms.settle(delivery_tag, multiple)
        if not acked:
            self._undelivered += [
                Undelivered(m.exchange, m.routing_key, "nacked", m.message_id, m.body)
                for tags in settled
                for m in map(self._message, tags)
            ]
        low = self._confirms.low
        while self._sent and self._sent[0][0] + len(self._sent[0][1]) <= low:
            self._sent.popleft()

    def _message(self, delivery_tag: int) -> Outgoing:
        for first, publishes in self._sent:
            if delivery_tag < first + len(publishes):
                return publishes.message(delivery_tag - first)
        raise AssertionError(f"delivery tag {delivery_tag} was never published")

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
    return Published(ConfirmedPublisher(options, batches).publish_all())


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
