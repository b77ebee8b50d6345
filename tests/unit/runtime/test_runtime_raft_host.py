"""Raft hosts on real loopback sockets and real WALs in one process: elections, replication
of many groups, leader loss, restart from the directory, snapshot catch-up, membership
changes and a failing WAL."""

from __future__ import annotations

import asyncio
import pickle
import random
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from warren.cluster.nodes import metadata_voter
from warren.runtime.cluster.peers import Peers
from warren.runtime.cluster.raft_host import (
    EntryMeta,
    HostStopped,
    NotLeader,
    RaftGroup,
    RaftHost,
    RaftTraffic,
    unstamp,
)
from warren.storage.log import Batch, LogFailed

COOKIE = "raft cookie"
TICK_MS = 20


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


class Recorder:
    """A machine that remembers what it applied, in order."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []
        self.metas: list[EntryMeta] = []
        self.restores = 0
        self.roles: list[tuple[bool, str | None]] = []

    def apply(self, meta: EntryMeta, data: bytes) -> object:
        self.applied.append((meta.index, data))
        self.metas.append(meta)
        return len(self.applied)

    def retained(self) -> int:
        return 0  # compacted by count alone, so the tests see snapshots early

    def kept_indexes(self) -> list[int]:
        return []  # reads no entry back

    def snapshot(self) -> bytes:
        return pickle.dumps(self.applied)

    def restore(self, data: bytes) -> None:
        self.applied = pickle.loads(data)
        self.restores += 1

    def role_changed(self, leader: bool, leader_node: str | None) -> None:
        self.roles.append((leader, leader_node))

    @property
    def payloads(self) -> list[bytes]:
        return [data for _index, data in self.applied]


class Holder(Recorder):
    """Reads back the entries whose data starts with "keep", as a queue its messages'."""

    def kept_indexes(self) -> list[int]:
        return [index for index, data in self.applied if data.startswith(b"keep")]


class Node:
    """One node: its Peers and its RaftHost on a directory of its own."""

    def __init__(self, name: str, directory: Path, snapshot_entries: int) -> None:
        self.name = name
        self.directory = directory
        self.snapshot_entries = snapshot_entries
        self.machines: dict[str, Recorder] = {}

    async def start(self) -> None:
        self.peers = Peers(self.name, COOKIE, "127.0.0.1", 0, {})
        await self.peers.start()
        self.host = RaftHost(
            self.name,
            self.peers,
            self.directory,
            tick_ms=TICK_MS,
            snapshot_entries=self.snapshot_entries,
            rng=random.Random(self.name),
        )
        await self.host.start()

    async def stop(self) -> None:
        await self.host.close()
        await self.peers.close()

    def add_group(
        self,
        group_id: str,
        members: list[str] | None,
        machine: Recorder | None = None,
        may_vote: Callable[[str], bool] | None = None,
    ) -> RaftGroup:
        self.machines[group_id] = machine if machine is not None else Recorder()
        return self.host.add_group(group_id, self.machines[group_id], members, may_vote)

    def group(self, group_id: str) -> RaftGroup:
        group = self.host.group(group_id)
        assert group is not None
        return group


async def cluster(
    tmp_path: Path, names: list[str], groups: list[str], snapshot_entries: int = 4096
) -> dict[str, Node]:
    nodes = {name: Node(name, tmp_path / name, snapshot_entries) for name in names}
    for node in nodes.values():
        await node.start()
    connect(list(nodes.values()))
    for node in nodes.values():
        for group_id in groups:
            node.add_group(group_id, names)
    return nodes


def connect(nodes: list[Node]) -> None:
    """Every node learns every other's address and name (as `ClusterNode.node_known`)."""
    for node in nodes:
        for other in nodes:
            node.peers.set_address(other.name, "127.0.0.1", other.peers.port)
            node.host.names.add(other.name)


async def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def leader_of(nodes: list[Node], group_id: str, timeout_s: float = 5.0) -> Node:
    def leaders() -> list[Node]:
        return [n for n in nodes if n.group(group_id).is_leader]

    await eventually(lambda: len(leaders()) == 1, timeout_s)
    return leaders()[0]


async def stop_all(nodes: dict[str, Node]) -> None:
    for node in nodes.values():
        await node.stop()


async def propose_all(node: Node, group_id: str, payloads: list[bytes]) -> list[object]:
    group = node.group(group_id)
    return list(await asyncio.gather(*(group.propose(p) for p in payloads)))


async def catch_up_after_a_cut(
    tmp_path: Path, payloads: list[bytes], machine: type[Recorder] = Recorder
) -> tuple[dict[str, Node], Node, Node]:
    """Three nodes that compact every 40 entries and one group "g": a follower is cut off
    while the leader commits `payloads` (compacting), then linked again; back with the
    nodes, the leader and that follower once it has applied them all."""
    names = ["a", "b", "c"]
    nodes = await cluster(tmp_path, names, [], snapshot_entries=40)
    every = list(nodes.values())
    for node in every:
        node.add_group("g", names, machine())
    leader = await leader_of(every, "g")
    behind = next(n for n in every if n is not leader)
    for node in every:
        node.peers.partition({behind.name} if node is not behind else {*nodes} - {behind.name})
    await propose_all(leader, "g", payloads[:-1])
    await propose_all(leader, "g", payloads[-1:])  # a round after the snapshot's sync
    assert leader.group("g").status()["snapshot_index"] > 40  # type: ignore[operator]
    # the snapshot's data left memory once durable: the follower gets it from the WAL
    snapshot = leader.group("g").node.snapshot
    assert snapshot is not None and snapshot.data == b""
    for node in every:
        node.peers.partition(set())
    await eventually(lambda: behind.machines["g"].payloads == payloads)
    return nodes, leader, behind


def test_three_hosts_elect_one_leader_that_everyone_knows_and_it_can_hand_over(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        leader = await leader_of(list(nodes.values()), "g")
        await eventually(lambda: all(n.group("g").leader == leader.name for n in nodes.values()))
        assert leader.machines["g"].roles[-1] == (True, leader.name)
        for node in nodes.values():
            assert node.group("g").members == ["a", "b", "c"]
            if node is not leader:
                assert node.machines["g"].roles[-1] == (False, leader.name)
                with pytest.raises(NotLeader) as raised:
                    await node.group("g").propose(b"x")
                assert raised.value.leader == leader.name
        status = leader.group("g").status()
        assert status["role"] == "leader" and status["leader"] == leader.name
        match_index = status["match_index"]
        assert isinstance(match_index, dict) and set(match_index) == {"a", "b", "c"}
        target = next(n for n in nodes.values() if n is not leader)
        assert not target.group("g").transfer(leader.name)  # only the leader hands over
        assert leader.group("g").transfer(target.name)
        await eventually(lambda: target.group("g").is_leader)
        await stop_all(nodes)

    run(body)


def test_two_groups_commit_1000_proposals_each_in_the_same_order_everywhere(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g1", "g2"])
        every = list(nodes.values())
        leaders = [await leader_of(every, "g1"), await leader_of(every, "g2")]
        payloads = {g: [b"%s-%d" % (g.encode(), i) for i in range(1000)] for g in ("g1", "g2")}
        results = await asyncio.gather(
            propose_all(leaders[0], "g1", payloads["g1"]),
            propose_all(leaders[1], "g2", payloads["g2"]),
        )
        for group_id, result in zip(("g1", "g2"), results, strict=True):
            assert result == list(range(1, 1001))  # apply's return value, on the leader
            machines = [n.machines[group_id] for n in every]
            await eventually(lambda m=machines: all(len(x.applied) == 1000 for x in m))  # type: ignore[misc]
            sequences = [machine.applied for machine in machines]
            assert sequences[0] == sequences[1] == sequences[2]
            assert [data for _i, data in sequences[0]] == payloads[group_id]
        await stop_all(nodes)

    run(body)


def test_every_replica_applies_an_entry_with_its_index_term_and_the_leaders_time(
    tmp_path: Path,
) -> None:
    """As ra's machines: the meta of an entry is the same on every replica, and its time
    is the leader's when the command reached it, not the applying node's."""

    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        every = list(nodes.values())
        leader = await leader_of(every, "g")
        before = int(time.time() * 1000)
        await propose_all(leader, "g", [b"one", b"two"])
        after = int(time.time() * 1000)
        await eventually(lambda: all(len(n.machines["g"].metas) == 2 for n in every))
        metas = [node.machines["g"].metas for node in every]
        assert metas[0] == metas[1] == metas[2]
        raft = leader.group("g").node
        last = raft.log.last_index  # after the leader's own empty entry
        assert [(m.index, m.term) for m in metas[0]] == [(last - 1, raft.term), (last, raft.term)]
        assert all(m.time_ms is not None and before <= m.time_ms <= after for m in metas[0])
        await stop_all(nodes)

    run(body)


def test_an_entry_written_before_stamps_is_applied_with_no_leader_time() -> None:
    """Logs of Warren 0.1.0 hold bare pickles (the quorum host's `(time, command)`): they
    are read back as they are, so a data directory of the previous release recovers."""
    legacy = pickle.dumps((1_700_000_000_000, "command"), pickle.HIGHEST_PROTOCOL)
    assert unstamp(legacy) == (None, legacy)
    stamped = (1_700_000_000_123).to_bytes(8, "big") + legacy
    assert unstamp(stamped) == (1_700_000_000_123, legacy)


def test_a_new_leader_takes_over_when_the_leader_is_cut_off(tmp_path: Path) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        every = list(nodes.values())
        old = await leader_of(every, "g")
        await propose_all(old, "g", [b"before"])
        others = [n for n in every if n is not old]
        old.peers.partition({n.name for n in others})
        for node in others:
            node.peers.partition({old.name})
        stranded = old.group("g").propose(b"stranded")
        new = await leader_of(others, "g", timeout_s=2.0)
        assert await propose_all(new, "g", [b"after"]) == [2]
        with pytest.raises(NotLeader):
            await stranded  # check-quorum: the cut-off leader steps down
        for node in every:
            node.peers.partition(set())
        await eventually(
            lambda: all(n.machines["g"].payloads == [b"before", b"after"] for n in every)
        )
        await stop_all(nodes)

    run(body)


def test_proposals_go_on_when_the_leader_host_stops(tmp_path: Path) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        every = list(nodes.values())
        old = await leader_of(every, "g")
        await propose_all(old, "g", [b"one"])
        await old.stop()
        others = [n for n in every if n is not old]
        new = await leader_of(others, "g", timeout_s=2.0)
        await propose_all(new, "g", [b"two", b"three"])
        await eventually(
            lambda: all(n.machines["g"].payloads == [b"one", b"two", b"three"] for n in others)
        )
        for node in others:
            await node.stop()

    run(body)


def test_a_restarted_host_recovers_its_groups_and_catches_up(tmp_path: Path) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g", "h"], snapshot_entries=50)
        every = list(nodes.values())
        leader = await leader_of(every, "g")
        follower = next(n for n in every if n is not leader)
        first = [b"%d" % i for i in range(120)]
        await propose_all(leader, "g", first)
        await eventually(lambda: follower.machines["g"].payloads == first)
        # compacted after the round that applied the last entries: that round may apply
        # them before its sync (what an earlier round made durable) and compact after it
        await eventually(lambda: follower.group("g").status()["snapshot_index"] > 0)  # type: ignore[operator]
        await follower.stop()
        second = [b"x%d" % i for i in range(30)]
        await propose_all(leader, "g", second)

        await follower.start()
        connect(every)
        assert follower.host.recovered_groups() == ["g", "h"]
        follower.add_group("g", None)
        machine = follower.machines["g"]
        assert machine.restores == 1  # from the WAL's snapshot, before any message
        await eventually(lambda: machine.payloads == first + second)
        assert follower.host.recovered_groups() == ["h"]
        follower.host.remove_group("h")
        assert follower.host.recovered_groups() == []
        await stop_all(nodes)

    run(body)


def test_a_far_behind_follower_catches_up_by_snapshot(tmp_path: Path) -> None:
    async def body() -> None:
        nodes, _leader, behind = await catch_up_after_a_cut(
            tmp_path, [b"%d" % i for i in range(200)]
        )
        assert behind.machines["g"].restores == 1
        await stop_all(nodes)

    run(body)


def test_held_entries_are_read_back_on_every_node_after_snapshots_and_a_restart(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        # held from entry 150 on: the WAL keeps no earlier one, so a snapshot is needed
        payloads = [b"keep %d" % i if i >= 150 and i % 7 == 0 else b"%d" % i for i in range(200)]
        nodes, _leader, behind = await catch_up_after_a_cut(tmp_path, payloads, Holder)
        every = list(nodes.values())
        assert behind.machines["g"].restores == 1  # the snapshot came with the held entries
        kept = [data for data in payloads if data.startswith(b"keep")]

        def read_back(node: Node) -> list[bytes]:
            group = node.group("g")
            held = node.machines["g"].kept_indexes()
            assert group.status()["snapshot_index"] > held[0]  # type: ignore[operator]
            return [group.entry_data(index) for index in held]

        for node in every:
            assert read_back(node) == kept
        await behind.stop()
        await behind.start()
        connect(every)
        behind.add_group("g", None, Holder())
        await eventually(lambda: behind.machines["g"].payloads == payloads)
        assert read_back(behind) == kept  # from its WAL
        await stop_all(nodes)

    run(body)


def test_a_follower_behind_the_compaction_gets_the_entries_the_wal_keeps(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        payloads = [b"keep %d" % i for i in range(200)]  # all held: the WAL keeps them all
        nodes, _leader, behind = await catch_up_after_a_cut(tmp_path, payloads, Holder)
        assert behind.machines["g"].restores == 0  # appends read from the leader's WAL
        await stop_all(nodes)

    run(body)


class Growing(Holder):
    """Holds everything it applied and claims to hold so much that it is never snapshotted."""

    def retained(self) -> int:
        return 1 << 40


async def _grown(
    tmp_path: Path, snapshot_entries: int, payloads: list[bytes], per_round: int
) -> dict[str, Node]:
    """Three nodes whose group "g" (a `Growing` machine) applied `payloads`, proposed
    `per_round` at a time, and then one more round: "keep last", appended to `payloads`."""
    names = ["a", "b", "c"]
    nodes = await cluster(tmp_path, names, [], snapshot_entries=snapshot_entries)
    every = list(nodes.values())
    for node in every:
        node.add_group("g", names, Growing())
    leader = await leader_of(every, "g")
    for start in range(0, len(payloads), per_round):  # many rounds
        await propose_all(leader, "g", payloads[start : start + per_round])
    await propose_all(leader, "g", [b"keep last"])  # one more round after those
    payloads.append(b"keep last")
    for node in every:
        await eventually(lambda node=node: node.machines["g"].payloads == payloads)
    return nodes


def _read_back(node: Node) -> list[bytes]:
    group = node.group("g")
    return [group.entry_data(index) for index in node.machines["g"].kept_indexes()]


def test_applied_entries_leave_memory_between_snapshots_and_are_read_from_the_wal(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        payloads = [b"keep %d" % i for i in range(300)]
        nodes = await _grown(tmp_path, 20, payloads, 30)
        for node in nodes.values():
            raft_log = node.group("g").node.log
            assert raft_log.snapshot_index == 0 and raft_log.released_index > 250
            assert len(raft_log.entries) <= 2 * 20 + 1
            assert _read_back(node) == payloads
        await stop_all(nodes)

    run(body)


def test_large_entries_leave_memory_by_their_size_not_only_their_count(tmp_path: Path) -> None:
    """An entry may carry a loop turn's thousands of messages: 4,096 of them held in memory
    between snapshots would be most of a long queue's bodies."""

    async def body() -> None:
        payloads = [b"keep" + bytes([i % 256]) * 65536 for i in range(160)]
        nodes = await _grown(tmp_path, 4096, payloads, 16)
        for node in nodes.values():
            raft_log = node.group("g").node.log
            held = sum(len(entry.data) for entry in raft_log.entries)
            assert raft_log.snapshot_index == 0 and held <= 6 << 20
            assert _read_back(node) == payloads
        await stop_all(nodes)

    run(body)


def test_a_member_joins_as_learner_is_promoted_and_another_leaves(tmp_path: Path) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        every = list(nodes.values())
        leader = await leader_of(every, "g")
        await propose_all(leader, "g", [b"early"])
        newcomer = Node("d", tmp_path / "d", 4096)
        await newcomer.start()
        every.append(newcomer)
        connect(every)
        newcomer.add_group("g", None)
        await asyncio.wait_for(leader.group("g").add_member("d", 5), 5)
        assert leader.group("g").status()["voters"] == ["a", "b", "c", "d"]
        leaving = next(n for n in every if n is not leader and n is not newcomer)
        await asyncio.wait_for(leader.group("g").remove_member(leaving.name), 5)
        await propose_all(leader, "g", [b"late"])
        await eventually(lambda: newcomer.machines["g"].payloads == [b"early", b"late"])
        assert leader.group("g").members == sorted({"a", "b", "c", "d"} - {leaving.name})
        for node in every:
            await node.stop()

    run(body)


def test_adding_a_member_that_never_catches_up_ends_in_time(tmp_path: Path) -> None:
    """A node that is not there stays a learner; the leader's add does not wait for it
    for ever (nobody waits for its answer after ``cluster_submit_timeout``)."""

    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        leader = await leader_of(list(nodes.values()), "g")
        group = leader.group("g")
        await asyncio.wait_for(group.add_member("d", 0.5), 5)
        assert group.status()["learners"] == ["d"]
        await stop_all(nodes)

    run(body)


def test_an_add_whose_change_commits_late_still_answers_the_new_learner(tmp_path: Path) -> None:
    """A change takes effect once committed: the add waits for its own change rather
    than take the node, no learner a tick after it was proposed, for one removed since
    (the caller would record a member list without it; stack sim seed 661)."""

    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        every = list(nodes.values())
        leader = await leader_of(every, "g")
        await propose_all(leader, "g", [b"first"])
        others = {n.name for n in every if n is not leader}
        leader.peers.partition(others)  # no commit for a few ticks, shorter than an election
        adding = asyncio.ensure_future(leader.group("g").add_member("d", 0.5))
        await asyncio.sleep(3 * leader.host.tick_s)
        leader.peers.partition(set())
        await asyncio.wait_for(adding, 5)
        assert "d" in leader.group("g").members
        await stop_all(nodes)

    run(body)


def test_a_member_deleted_while_being_added_is_not_added_again(tmp_path: Path) -> None:
    """add_member waits for the learner to catch up; a delete_member meanwhile removes
    it, and the add ends rather than making it a learner again."""

    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        leader = await leader_of(list(nodes.values()), "g")
        group = leader.group("g")
        adding = asyncio.ensure_future(group.add_member("d", 30))
        await eventually(lambda: group.status()["learners"] == ["d"])
        await asyncio.wait_for(group.remove_member("d"), 5)
        await asyncio.wait_for(adding, 5)
        for _ in range(10):  # ticks later, still out
            await asyncio.sleep(leader.host.tick_s)
            assert "d" not in group.members
        await stop_all(nodes)

    run(body)


def test_a_failed_wal_sync_stops_the_host_without_acknowledging(tmp_path: Path) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        every = list(nodes.values())
        leader = await leader_of(every, "g")
        failures: list[BaseException] = []
        sent: list[object] = []

        def stopped(error: BaseException) -> None:
            failures.append(error)
            sent.clear()  # what was sent before the failure was promised by earlier syncs

        leader.host._on_failure = stopped

        def broken_sync(batch: object) -> int:
            raise LogFailed("disk gone")

        leader.host.wal.sync_batch = broken_sync  # type: ignore[method-assign]
        leader.peers.send = lambda node, message: sent.append(message)  # type: ignore[method-assign]
        proposal = leader.group("g").propose(b"never")
        with pytest.raises(HostStopped, match="disk gone"):
            await proposal
        assert isinstance(failures[0], LogFailed)
        await asyncio.sleep(5 * TICK_MS / 1000)
        assert sent == []  # not even heartbeats once the host stopped
        assert leader.machines["g"].payloads == []
        with pytest.raises(HostStopped):
            await leader.group("g").propose(b"later")
        await stop_all(nodes)

    run(body)


def test_a_group_removed_while_its_round_syncs_leaves_the_round_and_the_others_finish(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, ["a"], ["g1", "g2"])
        (node,) = nodes.values()
        await leader_of([node], "g1")
        await leader_of([node], "g2")
        wal = node.host.wal
        release = threading.Event()
        syncing = threading.Event()
        sync_batch = wal.sync_batch

        def held_sync(batch: Batch) -> int:
            syncing.set()
            release.wait(10)
            return sync_batch(batch)

        wal.sync_batch = held_sync  # type: ignore[method-assign]
        removed = node.group("g1").propose(b"removed")
        kept = node.group("g2").propose(b"kept")
        await asyncio.get_running_loop().run_in_executor(None, syncing.wait, 10)
        node.host.remove_group("g1")
        release.set()
        assert await kept == 1
        with pytest.raises(HostStopped):
            await removed
        assert node.machines["g1"].payloads == [] and node.machines["g2"].payloads == [b"kept"]
        await stop_all(nodes)

    run(body)


def test_malformed_raft_messages_from_a_peer_are_dropped_and_the_host_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As a malformed AMQP frame closes only its connection: the batch that does not decode
    # is dropped with a logged error; the host (every group of the node) goes on.
    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        every = list(nodes.values())
        leader = await leader_of(every, "g")
        follower = next(node for node in every if node is not leader)
        failures: list[BaseException] = []
        follower.host._on_failure = failures.append
        for garbage in (b"", b"\x09later format", b"\x01\xc1", b"\x01\x91\x93\x01\x02\x03"):
            leader.peers.send(follower.name, RaftTraffic(garbage))
        await propose_all(leader, "g", [b"after"])
        await eventually(lambda: follower.machines["g"].payloads == [b"after"])
        assert follower.host.failure is None and failures == []
        dropped = [r for r in caplog.records if "Raft messages from node" in r.getMessage()]
        assert len(dropped) == 4 and all(r.levelname == "ERROR" for r in dropped)
        await stop_all(nodes)

    with caplog.at_level("ERROR", logger="warren.raft_host"):
        run(body)


def test_a_leader_asked_to_remove_itself_hands_over_and_the_new_leader_removes_it(
    tmp_path: Path,
) -> None:
    """A leader that removed itself stepped down as the change committed, before the
    others learned it had: once its node dropped its replica they waited for its vote for
    good (stack simulator seed 870). It hands over first; the new leader removes it."""

    async def body() -> None:
        nodes = await cluster(tmp_path, ["a", "b", "c"], ["g"])
        every = list(nodes.values())
        leader = await leader_of(every, "g")
        with pytest.raises(NotLeader):
            await asyncio.wait_for(leader.group("g").remove_member(leader.name), 5)
        others = [n for n in every if n is not leader]
        successor = await leader_of(others, "g")
        await asyncio.wait_for(successor.group("g").remove_member(leader.name), 5)
        leader.host.remove_group("g")  # its node drops its replica, as the metadata says
        await asyncio.wait_for(propose_all(successor, "g", [b"after"]), 5)
        remaining = sorted(n.name for n in others)
        await eventually(lambda: all(n.group("g").members == remaining for n in others))
        await stop_all(nodes)

    run(body)


def test_a_replica_made_again_starts_from_the_term_and_vote_of_the_one_removed(
    tmp_path: Path,
) -> None:
    """Point 10: a replica of a node that left the group leaves its term and vote to the
    next one, across a restart in between, and the next one writes them at once (they
    survive its restart); a group forgotten whole (its queue deleted) leaves nothing."""

    async def body() -> None:
        nodes = await cluster(tmp_path, ["a"], ["g"])
        node = nodes["a"]
        await leader_of([node], "g")
        voted = node.group("g").node.hard_state
        assert voted.term > 0 and voted.vote == node.host.node_id
        node.host.remove_group("g", keep_vote=True)
        await node.stop()
        await node.start()
        assert node.host.recovered_groups() == []  # no replica to recover
        again = node.add_group("g", None).node
        assert (again.term, again.vote, again.log.commit_index) == (voted.term, voted.vote, 0)
        await node.stop()
        await node.start()
        assert node.host.recovered_groups() == ["g"]
        recovered = node.add_group("g", None).node
        assert (recovered.term, recovered.vote) == (voted.term, voted.vote)
        node.host.remove_group("g", keep_vote=True)
        node.host.remove_group("g")  # the queue is deleted: the kept vote goes too
        fresh = node.add_group("g", None).node
        assert (fresh.term, fresh.vote) == (0, 0)
        await node.stop()

    run(body)


def test_a_group_whose_only_voter_is_this_node_leads_at_once_new_or_recovered(
    tmp_path: Path,
) -> None:
    # ticks of 1 s: an election timeout would take 10-20 s, past the 2 s allowed here
    async def started() -> tuple[Peers, RaftHost]:
        peers = Peers("a", COOKIE, "127.0.0.1", 0, {})
        await peers.start()
        host = RaftHost("a", peers, tmp_path / "a", tick_ms=1000, rng=random.Random(1))
        await host.start()
        return peers, host

    async def body() -> None:
        peers, host = await started()
        machine = Recorder()
        group = host.add_group("g", machine, ["a"])
        # announced once add_group returned: a quorum queue holds its group by then
        assert machine.roles == []
        await eventually(lambda: group.is_leader, 2.0)
        assert machine.roles == [(True, "a")]
        assert await group.propose(b"one") == 1
        await host.close()
        await peers.close()

        peers, host = await started()
        assert host.recovered_groups() == ["g"]
        group = host.add_group("g", Recorder(), None)
        await eventually(lambda: group.is_leader, 2.0)
        await host.close()
        await peers.close()

    run(body)


WORKERS = ["n-w0", "n-w1", "n-w2"]  # a node of 3 workers: worker 0 alone may vote


def test_a_group_of_workers_has_worker_0_as_its_only_voter_and_commits_without_the_rest(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, WORKERS, [])
        for node in nodes.values():
            node.add_group("meta", WORKERS, may_vote=metadata_voter)
        front = await leader_of(list(nodes.values()), "meta")
        assert front.name == "n-w0"
        status = front.group("meta").status()
        assert (status["voters"], status["learners"]) == (["n-w0"], ["n-w1", "n-w2"])
        await nodes["n-w1"].stop()
        await nodes["n-w2"].stop()
        assert await asyncio.wait_for(propose_all(front, "meta", [b"alone"]), 2) == [1]
        await front.stop()

    run(body)


def test_a_group_where_every_worker_voted_converges_to_worker_0_alone(tmp_path: Path) -> None:
    """A log written by the layout before (every worker a voter) starts on the rule and
    converges to it through membership changes, whichever worker led: from then on a
    proposal commits with worker 0 alone."""

    async def body() -> None:
        nodes = await cluster(tmp_path, WORKERS, ["meta"])
        every = list(nodes.values())
        old = await leader_of(every, "meta")
        if old.name == "n-w0":  # the case to cover is the harder one: a learner-to-be leads
            assert old.group("meta").transfer("n-w1")
            await eventually(lambda: nodes["n-w1"].group("meta").is_leader)
            old = nodes["n-w1"]
        await propose_all(old, "meta", [b"before"])
        for node in every:
            await node.stop()
        for node in every:
            await node.start()
        connect(every)
        for node in every:
            assert node.host.recovered_groups() == ["meta"]
            node.add_group("meta", None, may_vote=metadata_voter)

        def converged() -> bool:
            statuses = [node.group("meta").status() for node in every]
            return all(
                (status["voters"], status["learners"]) == (["n-w0"], ["n-w1", "n-w2"])
                for status in statuses
            )

        await eventually(converged, 10)
        front = await leader_of(every, "meta")
        assert front.name == "n-w0"
        await nodes["n-w1"].stop()
        await nodes["n-w2"].stop()
        await asyncio.wait_for(propose_all(front, "meta", [b"after"]), 2)
        assert front.machines["meta"].payloads[-2:] == [b"before", b"after"]
        await front.stop()

    run(body)


def test_a_worker_that_joins_later_stays_a_learner(tmp_path: Path) -> None:
    async def body() -> None:
        nodes = await cluster(tmp_path, ["n-w0"], [])
        front = nodes["n-w0"]
        front.add_group("meta", ["n-w0"], may_vote=metadata_voter)
        await leader_of([front], "meta")
        joining = Node("n-w1", tmp_path / "n-w1", 4096)
        await joining.start()
        connect([front, joining])
        joining.add_group("meta", None, may_vote=metadata_voter)
        await asyncio.wait_for(front.group("meta").add_member("n-w1", 5), 2)  # not 5 s
        await propose_all(front, "meta", [b"seen"])
        await eventually(lambda: joining.machines["meta"].payloads[-1:] == [b"seen"])
        assert front.group("meta").status()["learners"] == ["n-w1"]
        await front.stop()
        await joining.stop()

    run(body)
