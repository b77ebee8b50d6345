"""The queue journal: liveness, retire and compaction never change what recovery returns."""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from warren.storage.journal import QueueJournal
from warren.storage.log import Log
from warren.storage.messages import (
    Contents,
    Delivered,
    Enqueued,
    QueueDeleted,
    decode,
    encode_route,
)

SEGMENT_MAX_BYTES = 400  # a handful of records per segment, so everything rolls and retires

Model = dict[str, dict[int, tuple[Enqueued, bool]]]


def message(queue_key: str, msg_id: int, body: bytes = b"body") -> Enqueued:
    return Enqueued(queue_key, msg_id, 1_000 + msg_id, None, 0, "ex", "rk", b"\x00\x00", body)


def contents(record: Enqueued) -> Contents:
    """What `QueueJournal.read` gives back of a message."""
    route = encode_route(record.exchange, record.routing_key)
    return (record.exchange, record.routing_key, record.properties_raw, record.body, route)


def recovered_as_model(recovered: dict[str, list]) -> Model:  # type: ignore[type-arg]
    return {
        key: {m.msg_id: (m.message, m.redelivered) for m in messages}
        for key, messages in recovered.items()
    }


def copy_model(model: Model) -> Model:
    return {key: dict(messages) for key, messages in model.items() if messages}


class JournalMachine(RuleBasedStateMachine):
    """Random queue traffic with syncs, maintenance and crashes, against a plain model."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="journal"))
        self.model: Model = {}
        self.durable_model: Model = {}
        self.next_id: dict[str, int] = {}

    @initialize()
    def open_log(self) -> None:
        self.log, _ = Log.open(self.directory, SEGMENT_MAX_BYTES)
        self.journal = QueueJournal(self.log)

    def teardown(self) -> None:
        self.log.close(flush=False)
        shutil.rmtree(self.directory, ignore_errors=True)

    def live_ids(self, key: str) -> list[int]:
        return sorted(self.model.get(key, {}))

    @rule(key=st.sampled_from(["a", "b", "c"]), body=st.binary(max_size=60))
    def enqueue(self, key: str, body: bytes) -> None:
        msg_id = self.next_id.get(key, 1)
        self.next_id[key] = msg_id + 1
        record = message(key, msg_id, body)
        self.journal.enqueue(record)
        self.model.setdefault(key, {})[msg_id] = (record, False)

    @rule(key=st.sampled_from(["a", "b", "c"]), bodies=st.lists(st.binary(max_size=60), max_size=8))
    def enqueue_run(self, key: str, bodies: list[bytes]) -> None:
        """Messages one after the other to one queue: one record, settled one by one."""
        for body in bodies:
            self.enqueue(key, body)

    @rule(key=st.sampled_from(["a", "b", "c"]), data=st.data())
    def deliver(self, key: str, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from([*self.live_ids(key), 99]), max_size=4))
        self.journal.deliver(key, ids)
        for msg_id in ids:
            if msg_id in self.model.get(key, {}):
                self.model[key][msg_id] = (self.model[key][msg_id][0], True)

    @rule(key=st.sampled_from(["a", "b", "c"]), data=st.data())
    def settle(self, key: str, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from([*self.live_ids(key), 99]), max_size=4))
        self.journal.settle(key, ids)
        for msg_id in ids:
            self.model.get(key, {}).pop(msg_id, None)

    @rule(key=st.sampled_from(["a", "b", "c"]))
    def ack_oldest(self, key: str) -> None:
        """FIFO consumption, the common case, which lets old segments go."""
        ids = self.live_ids(key)[:2]
        self.journal.settle(key, ids)
        for msg_id in ids:
            del self.model[key][msg_id]

    @rule(key=st.sampled_from(["a", "b", "c"]), data=st.data())
    def purge(self, key: str, data: st.DataObject) -> None:
        kept = data.draw(st.lists(st.sampled_from([*self.live_ids(key), 99]), max_size=3))
        self.journal.purge(key, kept)
        self.model[key] = {i: m for i, m in self.model.get(key, {}).items() if i in kept}

    @rule(key=st.sampled_from(["a", "b", "c"]))
    def delete_queue(self, key: str) -> None:
        self.journal.delete_queue(key)
        self.model.pop(key, None)
        self.next_id.pop(key, None)  # a queue declared again under the same key starts over

    @rule()
    def sync(self) -> None:
        self.log.flush_and_sync()
        self.durable_model = copy_model(self.model)

    @rule()
    def maintain(self) -> None:
        self.journal.maintain()

    @rule(key=st.sampled_from(["a", "b", "c"]))
    def compact_in_steps_while_traffic_goes_on(self, key: str) -> None:
        """The runtime's non-blocking compaction: plan, read elsewhere, ack, then apply."""
        self.sync()
        self.journal.maintain(compact=False)
        plan = self.journal.compaction_plan()
        if plan is None:
            return
        payloads = self.log.read(plan.segment_id, plan.sequences)
        self.journal.maintain(compact=False)  # must not retire the planned segment
        self.ack_oldest(key)
        self.journal.apply_compaction(plan, payloads)

    @rule()
    def sync_then_maintain(self) -> None:
        """What the runtime does after each group commit."""
        self.sync()
        self.journal.maintain()

    @precondition(lambda self: self.log.durable_sequence > 0)
    @rule(flush=st.booleans(), contents=st.booleans())
    def crash_and_recover(self, flush: bool, contents: bool) -> None:
        if flush:
            self.sync()
        self.log.close(flush=False)
        self.log, report = Log.open(self.directory, SEGMENT_MAX_BYTES)
        assert report.clean, report.summary()
        self.journal, recovered = QueueJournal.recover(self.log, contents=contents)
        expected = self.durable_model
        if not contents:  # sizes kept; `live_messages_read_back` checks the contents
            empty = {"exchange": "", "routing_key": "", "properties_raw": b"", "body": b""}
            expected = {
                key: {i: (replace(m, **empty), d) for i, (m, d) in messages.items()}
                for key, messages in expected.items()
            }
            sizes = {
                key: [len(m.body) for _, (m, _) in sorted(messages.items())]
                for key, messages in self.durable_model.items()
            }
            assert {k: [m.body_size_bytes for m in ms] for k, ms in recovered.items()} == sizes
        assert recovered_as_model(recovered) == expected
        # after recovery, every recovered message counts as delivered if it was
        self.model = copy_model(self.durable_model)
        for key, messages in self.model.items():
            self.next_id[key] = max(self.next_id.get(key, 1), max(messages) + 1)

    @invariant()
    def ledger_matches_model(self) -> None:
        if not hasattr(self, "journal"):
            return
        for key in ("a", "b", "c"):
            assert self.journal.live_count(key) == len(self.model.get(key, {}))
        segments = {s.segment_id for s in self.log.segments()}
        assert set(self.journal.live_by_segment()) <= segments

    @invariant()
    def live_messages_read_back(self) -> None:
        """Wherever a record is (durable, pending, moved by compaction), `read` finds it."""
        if not hasattr(self, "journal"):
            return
        for key, messages in self.model.items():
            for msg_id, (record, _delivered) in messages.items():
                assert self.journal.read(key, msg_id) == contents(record)


JournalMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=100, deadline=None)
test_journal_against_model = JournalMachine.TestCase


# --- scenarios -------------------------------------------------------------------------------


def test_settled_traffic_leaves_only_the_active_segment(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path, SEGMENT_MAX_BYTES)
    journal = QueueJournal(log)
    for msg_id in range(1, 201):
        journal.enqueue(message("q", msg_id))
        if msg_id % 10 == 0:
            journal.settle("q", range(msg_id - 9, msg_id + 1))
            log.flush_and_sync()
            journal.maintain()
    log.flush_and_sync()
    journal.maintain()
    assert [s.segment_id for s in log.segments()] == [log.active_segment_id]
    log.close()


def test_a_long_lived_message_is_moved_forward_and_keeps_its_delivered_mark(
    tmp_path: Path,
) -> None:
    log, _ = Log.open(tmp_path, SEGMENT_MAX_BYTES)
    journal = QueueJournal(log)
    old = message("q", 1, b"old and delivered")
    journal.enqueue(old)
    journal.deliver("q", [1])
    for msg_id in range(2, 200):  # traffic that is acked at once
        journal.enqueue(message("q", msg_id))
        journal.settle("q", [msg_id])
        log.flush_and_sync()
        journal.maintain()
    log.flush_and_sync()
    journal.maintain()
    first_segment = log.segments()[0].segment_id
    assert first_segment > 1 and len(log.segments()) <= 4
    log.close(flush=False)
    log, report = Log.open(tmp_path, SEGMENT_MAX_BYTES)
    assert report.clean
    journal, recovered = QueueJournal.recover(log)
    assert [(m.message, m.redelivered) for m in recovered["q"]] == [(old, True)]
    log.close()


def test_recovery_drops_queues_the_caller_no_longer_has_and_remarks_deliveries(
    tmp_path: Path,
) -> None:
    log, _ = Log.open(tmp_path, SEGMENT_MAX_BYTES)
    journal = QueueJournal(log)
    journal.enqueue(message("kept", 1))
    journal.enqueue(message("kept", 2))
    journal.deliver("kept", [2])
    journal.enqueue(message("orphan", 1))
    log.close()
    log, _ = Log.open(tmp_path, SEGMENT_MAX_BYTES)
    journal, recovered = QueueJournal.recover(log, keep=lambda key: key != "orphan")
    assert list(recovered) == ["kept"] and journal.live_count() == 2
    tail = [decode(payload) for _, payload in list(log.records())[-2:]]
    assert tail == [Delivered("kept", (2,)), QueueDeleted("orphan")]
    log.close()
    log, _ = Log.open(tmp_path, SEGMENT_MAX_BYTES)
    _, recovered = QueueJournal.recover(log)
    assert list(recovered) == ["kept"]
    log.close()


def test_transient_messages_are_ignored_and_double_enqueue_refused(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    journal = QueueJournal(log)
    assert journal.settle("q", [1, 2]) is None
    assert journal.deliver("q", [1]) is None
    assert journal.purge("q") is None
    assert journal.delete_queue("q") is None
    assert log.pending_records == 0
    journal.enqueue(message("q", 1))
    with pytest.raises(ValueError, match="already live"):
        journal.enqueue(message("q", 1))
    assert journal.deliver("q", [1, 5]) is not None
    assert journal.deliver("q", [1]) is None  # only the first delivery is logged
    log.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_long_random_traffic_with_crashes_recovers_exactly_and_stays_small(
    tmp_path: Path, seed: int
) -> None:
    """Thousands of steps (the state machine above takes few): compaction happens often."""
    rng = random.Random(seed)
    log, _ = Log.open(tmp_path, SEGMENT_MAX_BYTES)
    journal = QueueJournal(log)
    model: Model = {}
    durable: Model = {}
    next_id = dict.fromkeys("abc", 1)
    compactions = 0
    for step in range(4000):
        key = rng.choice("abc")
        live = sorted(model.get(key, {}))
        roll = rng.random()
        if roll < 0.4:
            record = message(key, next_id[key], b"x" * rng.randrange(60))
            next_id[key] += 1
            journal.enqueue(record)
            model.setdefault(key, {})[record.msg_id] = (record, False)
        elif roll < 0.65:
            acked = live[:2] if rng.random() < 0.9 else live[-1:]  # mostly FIFO
            journal.settle(key, acked)
            for msg_id in acked:
                del model[key][msg_id]
        elif roll < 0.75:
            delivered = live[:3]
            journal.deliver(key, delivered)
            for msg_id in delivered:
                model[key][msg_id] = (model[key][msg_id][0], True)
        elif roll < 0.76:
            journal.purge(key, live[:1])
            model[key] = {i: m for i, m in model.get(key, {}).items() if i in live[:1]}
        else:
            log.flush_and_sync()
            durable = copy_model(model)
            compactions += journal.maintain().compacting is not None
        if step % 500 == 499:
            log.close(flush=False)
            log, report = Log.open(tmp_path, SEGMENT_MAX_BYTES)
            assert report.clean, report.summary()
            journal, recovered = QueueJournal.recover(log)
            assert recovered_as_model(recovered) == durable
            model = copy_model(durable)
            for queue_key, messages in model.items():
                next_id[queue_key] = max(next_id[queue_key], max(messages) + 1)
    assert compactions > 20
    assert len(log.segments()) < 20  # live data is a few dozen messages: so is the log
    log.close()


def test_a_run_of_publishes_is_one_record_settled_message_by_message(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    journal = QueueJournal(log)
    sequences = [journal.enqueue(message("q", msg_id)) for msg_id in range(1, 6)]
    assert sequences == [1, 2, 3, 4, 5]
    journal.settle("q", [2, 4])
    log.flush_and_sync()
    records = [decode(payload) for _, payload in log.records()]
    assert [type(r).__name__ for r in records] == ["EnqueuedRun", "Settled"]
    assert journal.live_by_segment() == {1: 3}
    assert journal.read("q", 5) == contents(message("q", 5))
    log.close()
    log, _ = Log.open(tmp_path, SEGMENT_MAX_BYTES)
    journal, recovered = QueueJournal.recover(log)
    assert [(m.msg_id, m.sequence) for m in recovered["q"]] == [(1, 1), (3, 3), (5, 5)]
    assert [journal.read("q", msg_id) for msg_id in (1, 3, 5)] == [
        contents(message("q", msg_id)) for msg_id in (1, 3, 5)
    ]
    log.close()


def test_runs_of_two_queues_read_back_in_any_order_and_more_than_once(tmp_path: Path) -> None:
    log, _ = Log.open(tmp_path)
    journal = QueueJournal(log)
    for key in ("a", "b"):
        for msg_id in (1, 2, 3):
            journal.enqueue(message(key, msg_id, b"%s%d" % (key.encode(), msg_id)))
    log.flush_and_sync()
    for msg_id in (1, 2, 2, 3, 1):
        for key in ("a", "b"):
            assert journal.read(key, msg_id) == contents(
                message(key, msg_id, b"%s%d" % (key.encode(), msg_id))
            )
    log.close()


def test_a_run_is_read_back_once_and_single_records_a_block_at_a_time(
    tmp_path: Path, preads: list[int]
) -> None:
    """The two read paths together: a run's record is read and decoded once for all its
    messages (the journal keeps the rest; the run is too large for the log to keep as a
    block), records of one message each come from blocks of the log (one ``pread``
    serves many)."""
    log, _ = Log.open(tmp_path)
    journal = QueueJournal(log)
    large = {msg_id: b"%03d" % msg_id * 500 for msg_id in range(1, 101)}  # 150 KiB
    for msg_id, body in large.items():
        journal.enqueue(message("run", msg_id, body))
    for msg_id in range(1, 101):
        for key in ("a", "b"):  # the queues take turns: a record per message
            journal.enqueue(message(key, msg_id))
    log.flush_and_sync()
    assert len(list(log.records())) == 201
    for msg_id, body in large.items():
        assert journal.read("run", msg_id) == contents(message("run", msg_id, body))
    assert len(preads) == 2  # a block, then the rest of the record
    for msg_id in range(1, 101):
        assert journal.read("a", msg_id) == contents(message("a", msg_id))
    assert len(preads) <= 2 + 4  # blocks of 4, 8, 16 ... KiB
    log.close()
