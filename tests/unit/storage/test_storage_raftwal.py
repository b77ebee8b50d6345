"""The Raft WAL: replay rules, crash safety of superseded records, space reclaim, and a
model check of random operation sequences against a naive twin."""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from warren.storage.raftwal import (
    GroupState,
    RaftWal,
    StoredEntry,
    StoredHardState,
    StoredSnapshot,
)

SMALL_SEGMENT_BYTES = 512


def entries(first: int, last: int, term: int, size: int = 4) -> list[StoredEntry]:
    return [StoredEntry(i, term, "normal", bytes([i % 256]) * size) for i in range(first, last + 1)]


def reopen(wal: RaftWal, directory: Path, *, flush: bool = True) -> RaftWal:
    wal.log.close(flush=flush)
    return RaftWal.open(directory, SMALL_SEGMENT_BYTES)


def test_replay_returns_entries_hard_state_and_snapshot_per_group(tmp_path: Path) -> None:
    wal = RaftWal.open(tmp_path)
    wal.save_snapshot("q1", 0, 0, b"1,2,3;", b"")
    wal.append_entries("q1", entries(1, 3, term=1))
    wal.save_hard_state("q1", 1, 2, 3)
    wal.append_entries("q2", entries(1, 1, term=4))
    wal.sync()
    wal = reopen(wal, tmp_path)
    recovered = wal.take_recovered()
    assert recovered == {
        "q1": GroupState(
            StoredHardState(1, 2, 3), StoredSnapshot(0, 0, b"1,2,3;", b""), entries(1, 3, 1)
        ),
        "q2": GroupState(StoredHardState(), None, entries(1, 1, 4)),
    }
    assert wal.take_recovered() == {}
    wal.close()


def test_a_later_append_replaces_the_stored_suffix(tmp_path: Path) -> None:
    wal = RaftWal.open(tmp_path)
    wal.append_entries("g", entries(1, 5, term=1))
    wal.append_entries("g", entries(3, 4, term=2))
    wal.sync()
    wal = reopen(wal, tmp_path)
    assert wal.take_recovered()["g"].entries == entries(1, 2, 1) + entries(3, 4, 2)
    wal.close()


def test_a_local_snapshot_keeps_later_entries_and_a_diverged_one_drops_all(
    tmp_path: Path,
) -> None:
    wal = RaftWal.open(tmp_path)
    wal.append_entries("local", entries(1, 6, term=1))
    wal.save_snapshot("local", 4, 1, b"m", b"state")
    wal.append_entries("diverged", entries(1, 6, term=1))
    wal.save_snapshot("diverged", 4, 2, b"m", b"leader's state")  # entry 4 has term 1 here
    wal.sync()
    wal = reopen(wal, tmp_path)
    recovered = wal.take_recovered()
    assert recovered["local"].entries == entries(5, 6, 1)
    assert recovered["local"].snapshot == StoredSnapshot(4, 1, b"m", b"state")
    assert recovered["diverged"].entries == []
    wal.close()


def test_the_latest_snapshot_is_read_back_once_durable_also_after_a_restart(
    tmp_path: Path,
) -> None:
    wal = RaftWal.open(tmp_path)
    assert wal.durable_snapshot_index("g") is None
    wal.append_entries("g", entries(1, 6, term=1))
    wal.save_snapshot("g", 3, 1, b"m", b"first")
    wal.sync()
    wal.save_snapshot("g", 5, 1, b"m", b"second")
    assert wal.durable_snapshot_index("g") is None  # not synced yet
    wal.sync()
    assert (wal.durable_snapshot_index("g"), wal.read_snapshot_data("g")) == (5, b"second")
    wal = reopen(wal, tmp_path)
    assert (wal.durable_snapshot_index("g"), wal.read_snapshot_data("g")) == (5, b"second")
    wal.close()


def test_a_dropped_group_is_forgotten_and_can_start_again(tmp_path: Path) -> None:
    wal = RaftWal.open(tmp_path)
    wal.append_entries("g", entries(1, 3, term=1))
    wal.save_hard_state("g", 1, 1, 3)
    wal.drop_group("g")
    wal.append_entries("h", entries(1, 1, term=1))
    wal.drop_group("h")
    wal.append_entries("h", entries(1, 2, term=5))
    wal.sync()
    wal = reopen(wal, tmp_path)
    assert wal.take_recovered() == {"h": GroupState(entries=entries(1, 2, 5))}
    wal.close()


def test_a_group_left_keeps_its_term_and_vote_until_stored_again_or_dropped(
    tmp_path: Path,
) -> None:
    wal = RaftWal.open(tmp_path, SMALL_SEGMENT_BYTES)
    for group in ("g", "h", "k"):
        wal.append_entries(group, entries(1, 3, term=2))
        wal.save_hard_state(group, 4, 7, 3)
        wal.leave_group(group, 4, 7)
    wal.drop_group("h")  # its queue deleted: the vote goes too
    wal.save_hard_state("k", 4, 7, 0)  # made again: its records from now on count
    wal.sync()
    wal = reopen(wal, tmp_path)
    assert wal.take_left() == {"g": StoredHardState(4, 7)}
    assert wal.take_recovered() == {"k": GroupState(StoredHardState(4, 7, 0))}
    # the LEFT record stays live while it is the group's latest word, then goes
    for round_number in range(1, 20):
        wal.append_entries("other", entries(round_number, round_number, 1, size=100))
        wal.save_snapshot("other", round_number, 1, b"", b"")
        wal.sync()
    wal = reopen(wal, tmp_path)
    assert wal.take_left() == {"g": StoredHardState(4, 7)}
    wal.append_entries("g", entries(1, 1, term=5))  # stored again before a hard state
    wal.save_hard_state("g", 5, 0, 0)
    wal.sync()
    wal = reopen(wal, tmp_path)
    assert wal.take_left() == {}
    assert wal.take_recovered()["g"] == GroupState(StoredHardState(5, 0, 0), None, entries(1, 1, 5))
    # superseded, the LEFT record is dead: with every group gone, old segments are too
    wal.drop_group("g")
    wal.drop_group("k")
    for round_number in range(20, 40):
        wal.append_entries("other", entries(round_number, round_number, 1, size=100))
        wal.save_snapshot("other", round_number, 1, b"", b"")
        wal.sync()
    assert wal.segment_count <= 3
    wal.close()


def test_unsynced_records_are_lost_in_a_crash_and_the_old_ones_survive(tmp_path: Path) -> None:
    wal = RaftWal.open(tmp_path, SMALL_SEGMENT_BYTES)
    wal.save_hard_state("g", 1, 7, 0)
    wal.sync()
    # Fill segments so the hard state's segment is sealed, then supersede it without a sync.
    for round_number in range(1, 20):
        wal.append_entries("other", entries(round_number, round_number, 1, size=100))
        wal.save_snapshot("other", round_number, 1, b"", b"")
        wal.sync()
    wal.save_hard_state("g", 2, 9, 0)
    wal.reclaim()  # the new hard state is not durable: the old one's segment must stay
    wal = reopen(wal, tmp_path, flush=False)
    assert wal.take_recovered()["g"].hard_state == StoredHardState(1, 7, 0)
    wal.close()


def test_space_is_reclaimed_as_snapshots_and_hard_states_supersede_records(
    tmp_path: Path,
) -> None:
    wal = RaftWal.open(tmp_path, SMALL_SEGMENT_BYTES)
    for index in range(1, 401):
        for group in ("a", "b"):
            wal.append_entries(group, entries(index, index, term=1, size=60))
            wal.save_hard_state(group, 1, 1, index)
            if index % 10 == 0:
                wal.save_snapshot(group, index, 1, b"1;", b"state %d" % index)
        wal.sync()
        assert wal.segment_count <= 12
    wal.drop_group("a")
    wal.sync()
    wal = reopen(wal, tmp_path)
    recovered = wal.take_recovered()
    assert list(recovered) == ["b"]
    assert recovered["b"].snapshot == StoredSnapshot(400, 1, b"1;", b"state 400")
    assert recovered["b"].hard_state == StoredHardState(1, 1, 400)
    assert recovered["b"].entries == []
    wal.close()


def test_a_record_with_entries_after_the_snapshot_keeps_its_segment(tmp_path: Path) -> None:
    wal = RaftWal.open(tmp_path, SMALL_SEGMENT_BYTES)
    wal.append_entries("g", entries(1, 6, term=1, size=50))  # one record straddles index 3
    wal.save_snapshot("g", 3, 1, b"", b"")
    for index in range(1, 20):  # later segments; the first has only the straddling record
        wal.save_hard_state("g", 1, 0, index)
        wal.append_entries("pad", entries(index, index, 1, size=200))
        wal.sync()
    wal = reopen(wal, tmp_path)
    assert wal.take_recovered()["g"].entries == entries(4, 6, 1, size=50)
    wal.close()


def test_entries_from_keep_from_stay_readable_across_a_restart_and_then_go(
    tmp_path: Path,
) -> None:
    wal = RaftWal.open(tmp_path, SMALL_SEGMENT_BYTES)
    stored = entries(1, 40, term=1, size=60)
    for entry in stored:
        wal.append_entries("q", [entry])
        wal.sync()
    segments = wal.segment_count
    wal.save_snapshot("q", 40, 1, b"m", b"state", keep_from=30)
    wal.sync()
    wal = reopen(wal, tmp_path)
    assert wal.take_recovered()["q"].entries == []
    assert [wal.read_entry("q", i) for i in (29, 30, 40, 41)] == [
        None,
        *(e.data for e in stored[29:40:10]),
        None,
    ]
    assert wal.segment_count < segments  # what is before entry 30 went
    wal.save_snapshot("q", 40, 1, b"m", b"state", keep_from=41)
    wal.sync()
    assert wal.read_entry("q", 30) is None
    assert wal.segment_count <= 2
    wal.close()


def test_an_installed_snapshot_brings_its_bodies_and_replaces_what_was_readable(
    tmp_path: Path,
) -> None:
    wal = RaftWal.open(tmp_path, SMALL_SEGMENT_BYTES)
    wal.append_entries("q", entries(1, 8, term=1))  # diverged from the leader's log
    bodies = [StoredEntry(i, 0, "normal", b"leader's %d" % i) for i in (3, 9, 12)]
    wal.save_snapshot("q", 20, 2, b"m", b"state", keep_from=3, bodies=bodies)
    wal.append_entries("q", entries(21, 22, term=2))
    wal.sync()
    for current in (wal, reopen(wal, tmp_path)):
        found = [current.read_entry("q", i) for i in range(1, 24)]
        expected = {3: b"leader's 3", 9: b"leader's 9", 12: b"leader's 12"}
        expected.update({e.index: e.data for e in entries(21, 22, term=2)})
        assert found == [expected.get(i) for i in range(1, 24)]
        wal = current
    wal.close()


def test_appends_go_on_while_a_batch_syncs_on_another_thread(tmp_path: Path) -> None:
    wal = RaftWal.open(tmp_path)
    wal.append_entries("g", entries(1, 2, term=1))
    batch = wal.seal()
    assert batch is not None
    syncer = threading.Thread(target=wal.sync_batch, args=(batch,))
    syncer.start()
    wal.append_entries("g", entries(3, 4, term=1))
    syncer.join()
    wal.reclaim()
    wal.sync()
    wal = reopen(wal, tmp_path)
    assert wal.take_recovered()["g"].entries == entries(1, 4, 1)
    wal.close()


# --- a model check -------------------------------------------------------------------------


@dataclass
class ModelGroup:
    hard_state: StoredHardState = field(default_factory=StoredHardState)
    snapshot: StoredSnapshot | None = None
    entries: list[StoredEntry] = field(default_factory=list)
    readable: dict[int, bytes] = field(default_factory=dict)  # what `read_entry` gives

    def first_free(self) -> int:
        base = self.snapshot.index if self.snapshot is not None else 0
        return self.entries[-1].index + 1 if self.entries else base + 1

    def term_at(self, index: int) -> int | None:
        if self.snapshot is not None and self.snapshot.index == index:
            return self.snapshot.term
        for entry in self.entries:
            if entry.index == index:
                return entry.term
        return None


GROUPS = ("a", "b", "c")
operation = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(GROUPS), st.integers(0, 4), st.integers(1, 4)),
    st.tuples(st.just("hard_state"), st.sampled_from(GROUPS), st.integers(0, 9)),
    st.tuples(
        st.just("snapshot"),
        st.sampled_from(GROUPS),
        st.integers(0, 6),
        st.booleans(),
        st.integers(0, 4),  # how far before the snapshot entries stay readable
    ),
    st.tuples(st.just("drop"), st.sampled_from(GROUPS)),
    st.tuples(st.just("leave"), st.sampled_from(GROUPS), st.integers(0, 9)),
    st.tuples(st.just("sync")),
    st.tuples(st.just("reopen")),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(operation, max_size=60))
def test_replay_after_reclaim_matches_a_naive_model(operations: list[tuple[object, ...]]) -> None:
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        wal = RaftWal.open(directory, SMALL_SEGMENT_BYTES)
        model: dict[str, ModelGroup] = {}
        left: dict[str, StoredHardState] = {}  # groups left: their term and vote
        term = 1
        for op in operations:
            term += 1
            if op[0] == "reopen":
                wal.take_recovered()
                wal = reopen(wal, directory)
                assert wal.take_recovered() == {g: as_state(m) for g, m in model.items()}
                assert wal.take_left() == left
            elif op[0] == "sync":
                wal.sync()
            else:
                apply_operation(wal, model, left, op, term)
            assert_readable(wal, model)
        wal = reopen(wal, directory)
        assert wal.take_recovered() == {g: as_state(m) for g, m in model.items()}
        assert wal.take_left() == left
        assert_readable(wal, model)
        wal.close()


def assert_readable(wal: RaftWal, model: dict[str, ModelGroup]) -> None:
    for group in GROUPS:
        readable = model[group].readable if group in model else {}
        top = max([0, *readable, *(e.index for e in model.get(group, ModelGroup()).entries)])
        for index in range(top + 2):
            assert wal.read_entry(group, index) == readable.get(index), (group, index)


def apply_operation(
    wal: RaftWal,
    model: dict[str, ModelGroup],
    left: dict[str, StoredHardState],
    op: tuple[object, ...],
    term: int,
) -> None:
    kind, group = op[0], str(op[1])
    if kind == "leave":
        model.pop(group, None)
        left[group] = StoredHardState(term, int(str(op[2])))
        wal.leave_group(group, term, int(str(op[2])))
        return
    if kind == "drop":
        model.pop(group, None)
        left.pop(group, None)
        wal.drop_group(group)
        return
    if group not in model:  # stored again after it was left: from its term and vote
        model[group] = ModelGroup(hard_state=left.pop(group, StoredHardState()))
    state = model[group]
    if kind == "append":
        back, count = int(str(op[2])), int(str(op[3]))
        floor = state.snapshot.index + 1 if state.snapshot is not None else 1
        first = max(floor, state.first_free() - back)
        new = entries(first, first + count - 1, term, size=30)
        state.entries = [e for e in state.entries if e.index < first] + new
        state.readable = {i: d for i, d in state.readable.items() if i < first}
        state.readable.update((e.index, e.data) for e in new)
        wal.append_entries(group, new)
    elif kind == "hard_state":
        state.hard_state = StoredHardState(term, int(str(op[2])), 0)
        wal.save_hard_state(group, term, int(str(op[2])), 0)
    elif kind == "snapshot":
        index = state.first_free() - 1 + int(str(op[2])) - 3
        index = max(index, state.snapshot.index if state.snapshot is not None else 0)
        local = bool(op[3])
        keep_from = max(1, index + 1 - int(str(op[4])))
        snapshot_term = (state.term_at(index) or term) if local else term
        keeps = state.term_at(index) == snapshot_term
        state.entries = [e for e in state.entries if keeps and e.index > index]
        state.snapshot = StoredSnapshot(index, snapshot_term, b"m", b"s%d" % term)
        bodies: list[StoredEntry] = []
        if local:  # a local compaction: the entries from `keep_from` on stay readable
            state.readable = {
                i: d for i, d in state.readable.items() if i >= keep_from and (keeps or i <= index)
            }
        else:  # installed from a leader, with every other entry from `keep_from` on
            bodies = [
                StoredEntry(i, 0, "normal", b"body %d" % term)
                for i in range(keep_from, index + 1, 2)
            ]
            keep_from = bodies[0].index if bodies else index + 1
            state.readable = {e.index: e.data for e in bodies}
        wal.save_snapshot(group, index, snapshot_term, b"m", b"s%d" % term, keep_from, bodies)


def as_state(group: ModelGroup) -> GroupState:
    return GroupState(group.hard_state, group.snapshot, list(group.entries))
