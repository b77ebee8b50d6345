"""Reading queues into Spark: a streaming reader that acknowledges after Spark commits, and a
batch reader that only peeks.

Theory of operation (streaming, `QueueStreamReader`):
1. Spark calls a stream reader's `initialOffset`, `latestOffset`, `partitions` and `commit` in
   one long-lived Python process on the driver, one call at a time. AMQP acknowledges a
   message on the channel that received it, and only this process learns that Spark
   committed a batch, so the consumers live here: `numPartitions` connections, each with a
   `Consumer` thread that consumes every queue of the read (one consumer tag per queue, so a
   delivery names its queue). The reader connects lazily, on first use, so it stays
   picklable.
2. A consumer thread reads its socket in large chunks and parses them in bulk into columns
   (`warren.spark.wire`), services heartbeats, and puts each read's deliveries, properties
   still raw, into one `Inbox` shared by all consumers (one lock per read, not per message;
   `take` splits a read's columns where a micro-batch ends). Acknowledgements are written
   from Spark's thread (the client's writes are locked).
3. An offset is `{"session": S, "seq": N}`: S names this reader's connections, N counts the
   micro-batches it handed out. `latestOffset` takes up to `maxMessagesPerTrigger` messages
   (waiting at most `maxWaitMs`), turns them into `numPartitions` Arrow record batches of
   about equal size, and keeps them with the highest delivery tag it took from each consumer
   under the new seq. `partitions` puts each record batch into a partition of its own, so N
   tasks hand a micro-batch to Spark side by side, exactly what the driver took.
4. A message is acknowledged only once the batch holding it is safely written
   (at-least-once). Spark runs one micro-batch at a time: it asks `latestOffset(start)` for
   the next batch only after the batch ending at `start` ran and its sink committed. So
   `latestOffset` first acknowledges, on each consumer with `multiple`, up to that consumer's
   highest tag in `start`'s batches; `commit` (which Spark calls later) does the same and
   finds nothing left. An idle queue therefore costs no micro-batch.
5. After a crash or restart, Spark plans again the batches it wrote to its offset log but did
   not commit. Offsets of another session name messages that were never acknowledged: the
   broker requeued them when the old connections died and they arrive again, `redelivered`,
   in a later batch. So another session's range is planned with no rows, and nothing is
   lost.
6. `Trigger.AvailableNow`: `prepareForTriggerAvailableNow` notes the queues' ready-message
   count as the target (counted before any consumer starts). A batch then waits for
   `maxMessagesPerTrigger` messages (or what is left of the target) for as long as they keep
   arriving, closing only when the queues have been quiet for `maxWaitMs`. Once the target
   was handed out (or the queues stayed quiet), `latestOffset` acknowledges the last batch
   (rule 4) and reports no new data, so the query stops.
7. Start-up. A query's first micro-batch costs Spark seconds whatever its size (the tasks'
   Python workers, code generation), so it does not wait to fill: it hands out what has
   arrived as soon as anything has, and the consumers keep receiving (up to `prefetch`)
   while Spark runs it; the batches after it fill as rule 3 says. Its record batches are
   made from buffers, so the planner does not import pandas on the way
   (`warren.spark.message`, rule 2). The connections are opened side by side: one after
   the other, the second shook hands with a broker already busy delivering to the first.

Batch reads (`QueuePeekReader`) peek, as a streaming read consumes, on the driver: when
Spark plans the read, `partitions` consumes every queue of the read on one connection without
acknowledging (prefetch unlimited) until it holds the messages the queues held when it asked
(or they stayed quiet for `maxWaitMs`), closes the connection, so the broker requeues every
message (RabbitMQ sets `redelivered` on them), and hands them out as `numPartitions` record
batches of about equal size, one per partition: N tasks carry the read, as they carry a
micro-batch. A batch read never removes messages, so it has nothing to acknowledge; draining
is a streaming query with `Trigger.AvailableNow`. The peek is not done by several consumers
in the tasks: the first to close its connection would hand its messages back to the others,
read twice.
"""

from __future__ import annotations

import collections
import dataclasses
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from warren.amqp.content import method_frame
from warren.amqp.methods import (
    BasicAck,
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    BasicQosOk,
    QueueDeclare,
    QueueDeclareOk,
)
from warren.spark.message import Deliveries, record_batch
from warren.spark.options import ReadOptions
from warren.spark.wire import CHANNEL, Client

NOBODY_WAITS = 1 << 62
IO_SLICE_S = 0.05  # the consumer thread's longest wait for the socket before it checks for stop
CONNECT_TIMEOUT_S = 30.0

Taken = tuple[int, Deliveries]  # (consumer index, messages it received in one read)


def _connect(options: ReadOptions, count: int) -> list[Client]:
    """`count` connections, opened side by side (rule 7): a handshake is round trips, and
    a consumer already receiving keeps the broker busy while the next one shakes hands."""
    with ThreadPoolExecutor(count, thread_name_prefix="warren-amqp-connect") as pool:
        opening = [pool.submit(Client, options.uri, options.heartbeat_s) for _ in range(count)]
    opened = [future.result() for future in opening if future.exception() is None]
    failures = [error for future in opening if (error := future.exception()) is not None]
    if failures:
        for client in opened:
            client.close()
        raise failures[0]
    return opened


def _ready(client: Client, queues: tuple[str, ...]) -> int:
    """The messages `queues` hold (a passive declare each)."""
    return sum(
        client.call(QueueDeclare(queue=queue, passive=True), QueueDeclareOk).message_count
        for queue in queues
    )


def _consume(client: Client, queues: tuple[str, ...], prefetch: int) -> None:
    """Consume every queue on `client`'s channel, consumer tag = the queue's name."""
    client.delivered = Deliveries()
    client.call(BasicQos(prefetch_count=prefetch), BasicQosOk)
    for queue in queues:
        client.call(BasicConsume(queue=queue, consumer_tag=queue), BasicConsumeOk)


class Inbox:
    """Deliveries of all of a reader's consumers, a read's worth at a time, in arrival order
    (rule 2)."""

    def __init__(self) -> None:
        self._taken: collections.deque[Taken] = collections.deque()
        self._count = 0  # messages in `_taken`
        self._arrived = threading.Condition()
        self._wanted = NOBODY_WAITS  # buffered deliveries that wake the taker
        self.failure: BaseException | None = None

    def __len__(self) -> int:
        return self._count

    def put(self, index: int, delivered: Deliveries) -> None:
        if not delivered:
            return
        with self._arrived:
            self._taken.append((index, delivered))
            self._count += len(delivered)
            if self._count >= self._wanted:
                self._arrived.notify_all()

    def fail(self, error: BaseException) -> None:
        self.failure = error
        with self._arrived:
            self._arrived.notify_all()

    def take(
        self,
        count_max: int,
        wait_s: float,
        while_arriving: bool = False,
        enough: int | None = None,
    ) -> list[Taken]:
        """Up to `count_max` deliveries, waiting until `enough` (default `count_max`) arrived
        or `wait_s` passed; `while_arriving`: or until `wait_s` passed without a new
        delivery (rule 6)."""
        enough = count_max if enough is None else min(enough, count_max)
        deadline = time.monotonic() + wait_s
        with self._arrived:
            self._wanted = enough
            buffered = self._count
            while self._count < enough and self.failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if not while_arriving or self._count == buffered:
                        break
                    buffered, deadline = self._count, time.monotonic() + wait_s
                    continue
                self._arrived.wait(remaining)
            self._wanted = NOBODY_WAITS
            if self.failure is not None:
                raise ConnectionError(f"AMQP consumer failed: {self.failure!r}") from self.failure
            taken: list[Taken] = []
            wanted = count_max
            while wanted and self._taken:
                index, delivered = self._taken.popleft()
                if len(delivered) > wanted:  # the rest stays first in line
                    rest = delivered.sliced(wanted, len(delivered))
                    self._taken.appendleft((index, rest))
                    delivered = delivered.sliced(0, wanted)
                taken.append((index, delivered))
                wanted -= len(delivered)
            self._count -= count_max - wanted
        return taken


def record_batches(taken: list[Taken], partitions: int, schema: pa.Schema) -> list[pa.RecordBatch]:
    """`taken` as up to `partitions` record batches of about equal size, in arrival order."""
    whole = Deliveries()
    for _index, delivered in taken:
        whole.extend(delivered)
    share = max(1, -(-len(whole) // partitions))
    return [
        record_batch(whole.sliced(at, at + share), schema) for at in range(0, len(whole), share)
    ]


class Consumer:
    """One connection consuming every queue of the read on its own thread (rules 1 and 2)."""

    def __init__(self, client: Client, options: ReadOptions, index: int, inbox: Inbox) -> None:
        self._index = index
        self._inbox = inbox
        self._stopping = threading.Event()
        self._client = client
        _consume(client, options.queues, options.prefetch)
        self._thread = threading.Thread(target=self._run, name=f"warren-amqp-consumer-{index}")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._client.receive(IO_SLICE_S)
                # also what arrived with basic.consume-ok, before this thread's first read
                self._inbox.put(self._index, self._client.take_delivered())
        except BaseException as error:  # handed to Spark's thread, which raises it
            self._inbox.fail(error)
        finally:
            self._client.close()

    def ack_up_to(self, delivery_tag: int) -> None:
        self._client.send(method_frame(CHANNEL, BasicAck(delivery_tag, multiple=True)))

    def stop_soon(self) -> None:
        """Have the thread close the connection, after the acknowledgements already written,
        once it wakes (within `IO_SLICE_S`)."""
        self._stopping.set()

    def stop(self) -> None:
        self.stop_soon()
        self._thread.join(timeout=CONNECT_TIMEOUT_S)


@dataclasses.dataclass
class HandedOut:
    """A micro-batch whose messages are not acknowledged yet."""

    seq: int
    last_delivery_tags: dict[int, int]  # by consumer
    messages: list[pa.RecordBatch]  # one per partition


class Messages(InputPartition):
    """Messages carried to the task that hands them to Spark: a part of micro-batches (rule 3)
    or of a peek."""

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        super().__init__(None)
        self.batches = batches


class ReadsMessages:
    """A reader whose tasks hand Spark the record batches their `Messages` partition carries."""

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Messages)
        return iter(partition.batches)


class QueueStreamReader(ReadsMessages, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The `amqp` streaming reader; see the module's theory of operation."""

    def __init__(self, options: ReadOptions, schema: pa.Schema) -> None:
        self._options = options
        self._schema = schema
        self._session = secrets.token_hex(8)
        self._seq = 0
        self._inbox: Inbox | None = None  # made with the consumers: it does not pickle
        self._consumers: list[Consumer] = []
        self._ready_at_start = 0
        self._handed_out: list[HandedOut] = []
        self._remaining: int | None = None  # messages left to read under Trigger.AvailableNow

    def _connected(self) -> Inbox:
        if self._inbox is None:
            inbox = Inbox()
            clients = _connect(self._options, self._options.partitions)
            try:
                # counted before anyone consumes (rule 6)
                self._ready_at_start = _ready(clients[0], self._options.queues)
                for index, client in enumerate(clients):
                    self._consumers.append(Consumer(client, self._options, index, inbox))
            except BaseException:
                # e.g. no such queue: the query fails, no connection is left behind
                self.stop()
                for client in clients[len(self._consumers) :]:
                    client.close()
                self._consumers = []
                raise
            self._inbox = inbox
        return self._inbox

    def _offset(self) -> dict[str, Any]:
        return {"session": self._session, "seq": self._seq}

    def initialOffset(self) -> dict[str, Any]:
        # Spark asks again when it plans the first batch: always the same answer.
        return {"session": self._session, "seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._options.batch_size)

    def prepareForTriggerAvailableNow(self) -> None:
        self._connected()
        self._remaining = self._ready_at_start

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._acknowledge_through(start)  # rule 4: the batch ending at `start` is written
        inbox = self._connected()
        count_max = self._options.batch_size
        if isinstance(limit, ReadMaxRows):
            count_max = min(count_max, limit.max_rows)
        if self._remaining is not None:
            count_max = min(count_max, self._remaining)
        taken: list[Taken] = []
        if count_max > 0:
            available_now = self._remaining is not None
            wait_s = self._options.max_wait_ms / 1000
            enough = 1 if self._seq == 0 else count_max  # rule 7: a first batch does not fill
            taken = inbox.take(count_max, wait_s, while_arriving=available_now, enough=enough)
        if self._remaining is not None:
            # Under AvailableNow a quiet queue ends the run: what was there has been read.
            handed_out = sum(len(delivered) for _index, delivered in taken)
            self._remaining = self._remaining - handed_out if taken else 0
        if not taken:
            return start
        self._seq += 1
        last_tags: dict[int, int] = {}
        for index, delivered in taken:
            last_tags[index] = delivered.delivery_tags[-1]  # tags grow on each channel
        batches = record_batches(taken, self._options.partitions, self._schema)
        self._handed_out.append(HandedOut(self._seq, last_tags, batches))
        return self._offset()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if end.get("session") != self._session:
            return []  # rule 5: the broker redelivers these
        first = start["seq"] if start.get("session") == self._session else 0
        handed_out = [entry for entry in self._handed_out if first < entry.seq <= end["seq"]]
        return [Messages([batch]) for entry in handed_out for batch in entry.messages]

    def commit(self, end: dict[str, Any]) -> None:
        self._acknowledge_through(end)  # rule 4: mostly done by latestOffset already

    def _acknowledge_through(self, offset: dict[str, Any]) -> None:
        """Acknowledge the messages of every batch of this session up to `offset`'s seq."""
        if offset.get("session") != self._session:
            return
        written = [entry for entry in self._handed_out if entry.seq <= offset["seq"]]
        if not written:
            return
        self._handed_out = self._handed_out[len(written) :]
        last_tags: dict[int, int] = {}
        for entry in written:
            last_tags.update(entry.last_delivery_tags)
        for index, tag in last_tags.items():
            self._consumers[index].ack_up_to(tag)

    def stop(self) -> None:
        for consumer in self._consumers:  # side by side: each wakes and closes on its own
            consumer.stop_soon()
        for consumer in self._consumers:
            consumer.stop()


class QueuePeekReader(ReadsMessages, DataSourceReader):
    """The `amqp` batch reader: every message in the queues, none removed."""

    def __init__(self, options: ReadOptions, schema: pa.Schema) -> None:
        self._options = options
        self._schema = schema

    def partitions(self) -> list[InputPartition]:
        inbox = Inbox()
        client = Client(self._options.uri, self._options.heartbeat_s)
        try:
            expected = _ready(client, self._options.queues)
            _consume(client, self._options.queues, prefetch=0)  # all, unacknowledged
            quiet_s = self._options.max_wait_ms / 1000
            inbox.put(0, client.take_delivered())  # what arrived with basic.consume-ok
            while len(inbox) < expected and client.receive(quiet_s):
                inbox.put(0, client.take_delivered())  # until quiet for maxWaitMs
        finally:
            client.close()  # without acknowledging: the broker requeues every message
        taken = inbox.take(len(inbox), 0)
        batches = record_batches(taken, self._options.partitions, self._schema)
        return [Messages([batch]) for batch in batches] or [Messages([])]
