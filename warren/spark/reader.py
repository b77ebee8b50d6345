"""Reading a queue into Spark: a streaming reader that acknowledges after Spark commits, and a
batch reader that only peeks.

Theory of operation (streaming, `QueueStreamReader`):
1. Spark calls a stream reader's `initialOffset`, `latestOffset`, `partitions` and `commit` in
   one long-lived Python process on the driver, one call at a time. So one AMQP channel in
   that process sees every message of the query and can acknowledge by delivery tag. The
   reader connects lazily, on the first `latestOffset`, so it stays picklable.
2. A `Consumer` thread owns the pika connection: it consumes with `prefetch` and services
   heartbeats all the time, also while Spark is busy elsewhere. Deliveries go into a
   thread-safe buffer; acknowledgements go back to the thread through
   `add_callback_threadsafe`, the one pika call that is safe from another thread.
3. An offset is `{"session": S, "seq": N}`: S names this reader's connection, N counts the
   micro-batches it handed out. `latestOffset` takes up to `batchSize` messages (waiting at
   most `maxWaitMs`) and keeps them, as one Arrow record batch, with their highest delivery
   tag under the new seq. `partitions` puts those record batches into the partition itself,
   so a task reads exactly what the driver took from the queue, in any Python worker, and
   hands them to Spark without touching a row.
4. A message is acknowledged only once the batch holding it is safely written
   (at-least-once). Spark runs one micro-batch at a time: it asks `latestOffset(start)` for
   the next batch only after the batch ending at `start` ran and its sink committed. So
   `latestOffset` first acknowledges, with `multiple`, up to the tag of `start`'s seq; `commit`
   (which Spark calls later, after writing the next batch's offsets) acknowledges the same
   way and finds nothing left. An idle queue therefore costs no micro-batch: Spark's next
   `latestOffset` call acknowledges the last batch and gets `start` back (no new data).
5. After a crash or restart, Spark plans again the batches it wrote to its offset log but did
   not commit. Offsets of another session name messages that were never acknowledged: the
   broker requeued them when the old connection died and they arrive again, `redelivered`,
   in a later batch. So another session's range is planned with no rows, and nothing is
   lost.
6. `Trigger.AvailableNow`: `prepareForTriggerAvailableNow` notes the queue's ready-message count
   as the target. A batch then waits for `batchSize` messages (or what is left of the target)
   for as long as they keep arriving, closing only when the queue has been quiet for
   `maxWaitMs`: the batches are full and few. Once the target was handed out (or the queue
   stayed quiet), `latestOffset` acknowledges the last batch (rule 4) and reports no new
   data, so the query stops.

Batch reads (`QueuePeekReader`) run in a Spark task: they consume what is in the queue
without acknowledging, yield it as one record batch and close the channel, so the broker
requeues every message (RabbitMQ sets `redelivered` on them). A batch read never removes
messages; draining is a streaming query with `Trigger.AvailableNow`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pika
import pika.adapters.blocking_connection
import pika.exceptions
import pika.spec
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from warren.spark.message import record_batch, row_of
from warren.spark.options import ReadOptions, connection_parameters

NOBODY_WAITS = sys.maxsize
IO_SLICE_S = 0.05  # the consumer thread's longest wait for the socket before it checks for stop
CONNECT_TIMEOUT_S = 30.0

Delivery = tuple[int, tuple[Any, ...]]  # (delivery tag, row)


class Consumer:
    """A pika consumer on its own thread; see the module's rules 2 and 3."""

    def __init__(self, options: ReadOptions) -> None:
        self._options = options
        self._buffer: collections.deque[Delivery] = collections.deque()
        self._arrived = threading.Condition()
        self._wanted = NOBODY_WAITS  # buffered deliveries that wake the taker
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._connection: pika.BlockingConnection | None = None
        self._channel: pika.adapters.blocking_connection.BlockingChannel | None = None
        self.ready_at_start = 0
        self._thread = threading.Thread(target=self._run, name="warren-amqp-consumer", daemon=True)
        self._thread.start()
        if not self._ready.wait(CONNECT_TIMEOUT_S):
            raise TimeoutError(
                f"no AMQP connection to {options.queue!r} after {CONNECT_TIMEOUT_S}s"
            )
        self._raise_failure()

    def _run(self) -> None:
        try:
            self._connection = pika.BlockingConnection(
                connection_parameters(self._options.uri, self._options.heartbeat_s)
            )
            self._channel = self._connection.channel()
            declared = self._channel.queue_declare(self._options.queue, passive=True)
            self.ready_at_start = declared.method.message_count
            self._channel.basic_qos(prefetch_count=self._options.prefetch)
            self._channel.basic_consume(self._options.queue, self._on_message)
        except BaseException as error:  # handed to the Spark thread, which raises it
            self._failure = error
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stopping.is_set():
                self._connection.process_data_events(time_limit=IO_SLICE_S)
        except BaseException as error:
            self._failure = error
            with self._arrived:
                self._arrived.notify_all()
        finally:
            if self._connection.is_open:
                with contextlib.suppress(pika.exceptions.AMQPError):
                    self._connection.close()

    def _on_message(
        self,
        _channel: object,
        deliver: pika.spec.Basic.Deliver,
        properties: pika.spec.BasicProperties,
        body: bytes,
    ) -> None:
        self._buffer.append((deliver.delivery_tag, row_of(deliver, properties, body)))
        if len(self._buffer) >= self._wanted:
            with self._arrived:
                self._arrived.notify_all()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise ConnectionError(
                f"AMQP consumer on {self._options.queue!r} failed: {self._failure!r}"
            ) from self._failure

    def take(self, count_max: int, wait_s: float, while_arriving: bool = False) -> list[Delivery]:
        """Up to `count_max` deliveries, waiting until that many arrived or `wait_s` passed;
        `while_arriving`: or until `wait_s` passed without a new delivery (rule 6)."""
        deadline = time.monotonic() + wait_s
        with self._arrived:
            self._wanted = count_max
            buffered = len(self._buffer)
            while len(self._buffer) < count_max and self._failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if not while_arriving or len(self._buffer) == buffered:
                        break
                    buffered, deadline = len(self._buffer), time.monotonic() + wait_s
                    continue
                self._arrived.wait(remaining)
            self._wanted = NOBODY_WAITS
        self._raise_failure()
        taken: list[Delivery] = []
        while self._buffer and len(taken) < count_max:
            taken.append(self._buffer.popleft())
        return taken

    def ack_up_to(self, delivery_tag: int) -> None:
        assert self._connection is not None and self._channel is not None
        channel = self._channel
        self._connection.add_callback_threadsafe(
            lambda: channel.basic_ack(delivery_tag, multiple=True)
        )

    def stop(self) -> None:
        """Stop after the acknowledgements already asked for are sent, then close."""
        if self._connection is not None and self._failure is None:
            self._connection.add_callback_threadsafe(self._stopping.set)
        else:
            self._stopping.set()
        self._thread.join(timeout=CONNECT_TIMEOUT_S)


@dataclasses.dataclass
class HandedOut:
    """A micro-batch whose messages are not acknowledged yet."""

    seq: int
    last_delivery_tag: int
    messages: pa.RecordBatch


class Messages(InputPartition):
    """Micro-batches' messages, carried to the task that hands them to Spark (rule 3)."""

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        super().__init__(None)
        self.batches = batches


class QueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The `amqp` streaming reader; see the module's theory of operation."""

    def __init__(self, options: ReadOptions, schema: pa.Schema) -> None:
        self._options = options
        self._schema = schema
        self._session = secrets.token_hex(8)
        self._seq = 0
        self._consumer: Consumer | None = None
        self._handed_out: list[HandedOut] = []
        self._remaining: int | None = None  # messages left to read under Trigger.AvailableNow

    def _connected(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._options)
        return self._consumer

    def _offset(self) -> dict[str, Any]:
        return {"session": self._session, "seq": self._seq}

    def initialOffset(self) -> dict[str, Any]:
        # Spark asks again when it plans the first batch: always the same answer.
        return {"session": self._session, "seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._options.batch_size)

    def prepareForTriggerAvailableNow(self) -> None:
        self._remaining = self._connected().ready_at_start

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._acknowledge_through(start)  # rule 4: the batch ending at `start` is written
        count_max = self._options.batch_size
        if isinstance(limit, ReadMaxRows):
            count_max = min(count_max, limit.max_rows)
        if self._remaining is not None:
            count_max = min(count_max, self._remaining)
        deliveries = []
        if count_max > 0:
            available_now = self._remaining is not None
            wait_s = self._options.max_wait_ms / 1000
            deliveries = self._connected().take(count_max, wait_s, while_arriving=available_now)
        if self._remaining is not None:
            # Under AvailableNow a quiet queue ends the run: what was there has been read.
            self._remaining = self._remaining - len(deliveries) if deliveries else 0
        if not deliveries:
            return start
        self._seq += 1
        rows = record_batch([row for _tag, row in deliveries], self._schema)
        self._handed_out.append(HandedOut(self._seq, deliveries[-1][0], rows))
        return self._offset()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if end.get("session") != self._session:
            return []  # rule 5: the broker redelivers these
        first = start["seq"] if start.get("session") == self._session else 0
        batches = [entry.messages for entry in self._handed_out if first < entry.seq <= end["seq"]]
        return [Messages(batches)] if batches else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Messages)
        return iter(partition.batches)

    def commit(self, end: dict[str, Any]) -> None:
        self._acknowledge_through(end)  # rule 4: mostly done by latestOffset already

    def _acknowledge_through(self, offset: dict[str, Any]) -> None:
        """Acknowledge the messages of every batch of this session up to `offset`'s seq."""
        if offset.get("session") != self._session:
            return
        written = [entry for entry in self._handed_out if entry.seq <= offset["seq"]]
        if written:
            self._handed_out = self._handed_out[len(written) :]
            self._connected().ack_up_to(written[-1].last_delivery_tag)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.stop()


class QueuePeekReader(DataSourceReader):
    """The `amqp` batch reader: every message in the queue, none removed."""

    def __init__(self, options: ReadOptions, schema: pa.Schema) -> None:
        self._options = options
        self._schema = schema

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        parameters = connection_parameters(self._options.uri, self._options.heartbeat_s)
        rows = []
        with pika.BlockingConnection(parameters) as connection:
            channel = connection.channel()
            declared = channel.queue_declare(self._options.queue, passive=True)
            expected = declared.method.message_count
            if expected == 0:
                return
            channel.basic_qos(prefetch_count=0)  # all of them, unacknowledged, at once
            inactivity_timeout_s = self._options.max_wait_ms / 1000
            for deliver, properties, body in channel.consume(
                self._options.queue, inactivity_timeout=inactivity_timeout_s
            ):
                if deliver is None or properties is None or body is None:
                    break  # quiet for maxWaitMs: what was there has arrived
                rows.append(row_of(deliver, properties, body))
                if len(rows) >= expected:
                    break
        # Closing the connection without acknowledging returns every message to the queue.
        yield record_batch(rows, self._schema)
