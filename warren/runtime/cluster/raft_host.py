"""Every Raft group of a node, driven on one write-ahead log and one transport.

Theory of operation:
1. A `RaftHost` owns the node's `RaftWal` (under `directory`), the `warren.raft` nodes of
   the groups it hosts (one `RaftGroup` each, with the application's `GroupMachine`) and
   uses the node's `Peers`. Raft knows nodes by int ids (`warren.cluster.nodes.node_id`);
   the host maps them back to names it has seen (its own, the peers', members it was
   given, senders of messages).
2. Rounds are `warren.raft.Round`s, the driver the simulator checks, over every group
   touched since the last round: `begin` takes each one's `ready()` and persists it
   through the group's `storage` (the WAL, `_WalStorage`); the host seals the WAL and
   syncs ONCE on a worker thread while the event loop goes on; a leader's appends and
   heartbeats go before that sync (`Round.send_early`), so its followers write while it
   does, and committed entries an earlier round made durable are applied before it
   (`Round.apply_early`), so a commit waits for no sync of its own. When the sync
   returns: the
   host reclaims WAL space, `Round.send` hands every other message to its group (`RaftGroup.send`
   batches them per destination node), the host sends one `RaftTraffic` per destination,
   and `Round.apply` restores snapshots and applies committed entries to the groups
   (resolving the proposers' futures) and advances them; then each group takes its
   queued inputs (`RaftGroup.advanced`) and the next round starts if anything is ready.
   At most one round is in flight.
3. The core forbids `step`, `tick` and `propose` between `ready()` and `advance()`. A
   group whose ready is in flight queues its inputs (messages, ticks, proposals,
   membership changes) in its inbox and steps them right after `advance`; other groups
   take inputs at once and join the next round.
4. Time: every group ticks every `tick_ms`; elections take `election_ticks` to
   2 * `election_ticks` ticks. A group whose only voter is this node (a node alone, a
   quorum queue of one replica) campaigns as soon as it is hosted, new or recovered (on
   the next turn of the loop, once `add_group`'s caller holds the group its leadership is
   announced to): no other node can lead it, so the timeout would only delay its first
   leader (by 1-2 s at the default tick, after every restart).
5. A group is compacted (`RaftNode.compact` with `machine.snapshot()`) once more than
   `snapshot_entries` applied entries, and more than a quarter of the entries the machine
   retains, follow its snapshot; the snapshot rides on the next round's sync and the WAL
   then retires the segments it made dead. A snapshot costs as much as the state it
   holds, so the quarter keeps the work linear (every entry of a growing queue is in
   about five snapshots). Between snapshots the log keeps in memory only the last
   `snapshot_entries` applied entries, or fewer when they would take more than about
   2 MiB (an entry may carry thousands of messages), and those not yet applied, stable
   or committed:
   older ones are released (`RaftLog.release`) and read from the WAL when needed, so a
   queue that only grows holds no whole entries in memory for its messages. Nor is the
   snapshot's data kept once its record is durable: sending it to a follower reads it
   back from the WAL.
6. Entries a machine still reads after a snapshot covers them (`GroupMachine.kept_indexes`: a
   quorum queue reads a message's body from the entry that enqueued it) stay on disk: the
   snapshot record names the lowest of them (``keep_from``), and `RaftGroup.entry_data`
   reads an entry from memory while the log holds it, else from the WAL. A follower that
   misses entries the WAL still keeps gets them from there as appends (the Raft log's
   `source`, `_WalEntries`); one that misses more needs a snapshot, and gets it with the
   entries the machine holds (`encode_install`), since its own WAL may lack them; it
   writes them as BODIES with the snapshot (`warren.storage.raftwal`, point 6), restores
   the machine, and keeps only the machine's data in memory.
7. A new group is bootstrapped with a snapshot at index 0 that holds its voters (and its
   learners: the members `add_group`'s `may_vote` bars from voting), so the
   membership survives a restart before anything is compacted. A recovered group waits in
   memory until `add_group` claims it (or `remove_group` drops it).
8. A machine applies a committed entry with its `EntryMeta`, as ra's machines do: the
   Raft index and term, and the time the leader stamped on it when the command reached
   it (`RaftGroup.propose` puts `STAMP` before the application's bytes, so every replica
   applies the same command with the same clock, whoever proposed it and however late a
   replica applies it). `entry_data` gives an entry's data without the stamp. An entry
   written before stamps existed (Warren 0.1.0's logs: a bare pickle, which opens with
   pickle's PROTO byte 0x80 where a stamp opens with 0x00) is applied with `time_ms`
   None: its machine kept the proposer's time in its own data and reads it from there.
9. A failed sync (`LogFailed`) or a bug while driving stops the host: it is logged as
   critical, nothing is sent, applied or acknowledged any more, every waiting proposal
   fails with the error, and `on_failure` is called: the node must stop and recover.
   Raft messages from a peer that do not decode (`RaftCodecError`) are no such bug here:
   that batch is dropped with a logged error, as a malformed AMQP frame closes only its
   connection, and Raft sends what matters again.
10. A replica dropped because its node left the group (`remove_group(keep_vote=True)`)
    leaves its term and vote behind, and the next replica of the group on this node
    (`add_group` with no members, once the node is added again) starts from them and
    writes them at once, as etcd and hashicorp/raft keep their Raft state per node: a
    replica made again at term 0 could take an old leader's term from the entries it is
    sent and vote a second time in a term its first incarnation voted in (two leaders).
    The WAL keeps them meanwhile (a LEFT record, `warren.storage.raftwal`), so a restart
    in between forgets nothing; removing the group without `keep_vote` (its queue was
    deleted) forgets them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import struct
import time
from array import array
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Protocol

from warren import legacy
from warren.cluster.nodes import NodeNames
from warren.cluster.raft_codec import decode_messages, encode_messages
from warren.raft import (
    NO_NODE,
    Entry,
    EntryKind,
    HardState,
    Membership,
    MembershipChange,
    Message,
    RaftConfig,
    RaftNode,
    RandomSource,
    ReadState,
    Role,
    Round,
    Snapshot,
    StateMachine,
    Transport,
    begin,
)
from warren.runtime.cluster.calls import PeerMessage, RaftTraffic
from warren.runtime.cluster.peers import PeerLinks
from warren.storage.log import SEGMENT_MAX_BYTES_DEFAULT
from warren.storage.raftwal import GroupState, RaftWal, StoredEntry, StoredHardState

log = logging.getLogger("warren.raft_host")

# the entries that go with an installed snapshot: count, then per entry index and length
_INSTALL_COUNT: Final = struct.Struct("<I")
_INSTALL_ENTRY: Final = struct.Struct("<QI")
# compact once the log holds more than this share of the entries the machine retains
_RETAINED_PER_SNAPSHOT: Final = 4
# about how many bytes of applied entries a group keeps in memory between snapshots (point 5)
_TAIL_BYTES: Final = 1 << 21


class NotLeader(Exception):
    """This node is not (or no longer) the group's leader; `leader` is the one it knows."""

    def __init__(self, leader: str | None) -> None:
        super().__init__(f"not the leader; the leader is {leader or 'unknown'}")
        self.leader = leader


class HostStopped(Exception):
    """The Raft host was closed, or stopped because its WAL failed."""


# the leader's wall-clock time in ms, before a NORMAL entry's application bytes (point 8)
STAMP: Final = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class EntryMeta:
    """What a machine applies an entry with, besides its data (point 8)."""

    index: int
    term: int
    time_ms: int | None  # the leader's clock when the command reached it; None: unstamped


def unstamp(data: bytes) -> tuple[int | None, bytes]:
    """A NORMAL entry's leader time and the application's bytes (None and the bytes as they
    are for an entry written before stamps, point 8)."""
    if legacy.is_pickle(data):  # written before stamps (point 8)
        return None, data
    return STAMP.unpack_from(data)[0], data[STAMP.size :]


class GroupMachine(Protocol):
    def apply(self, meta: EntryMeta, data: bytes) -> object:
        """Apply a committed NORMAL entry; on the proposing node the result resolves the
        proposal's future. Called in index order on every replica; must not raise."""

    def retained(self) -> int:
        """About how many entries' worth of data a snapshot would hold now."""

    def kept_indexes(self) -> list[int]:
        """The indexes, up to the last applied, of the entries the machine still reads
        (`RaftGroup.entry_data`) after a snapshot covers them; any order."""

    def snapshot(self) -> bytes:
        """The state as of the last applied entry."""

    def restore(self, data: bytes) -> None:
        """Replace the state by a snapshot's."""

    def role_changed(self, leader: bool, leader_node: str | None) -> None:
        """This node became or stopped being the leader, or the known leader changed."""


_Input = Message | Callable[[], object]


class RaftGroup:
    """One hosted Raft group. See the module docstring; create with `RaftHost.add_group`."""

    def __init__(
        self,
        host: RaftHost,
        group_id: str,
        machine: GroupMachine,
        node: RaftNode,
        kept: list[int],
    ) -> None:
        self.group_id = group_id
        self.machine = machine
        self.node = node
        self._host = host
        self.storage = _WalStorage(host.wal, group_id)
        self.transport: Transport = self
        self.state_machine: StateMachine = self
        self._in_flight = False  # in a round between `begin` and `advanced`
        self._installed: tuple[int, bytes, list[int]] | None = None  # restored this round
        self._inbox: deque[_Input] = deque()
        self._proposals: dict[int, tuple[int, asyncio.Future[object]]] = {}  # index: term, future
        self._role = (False, NO_NODE)  # (leader, leader id) as the machine last heard
        self.removed = False
        # `machine.kept_indexes()` as of the snapshot; as an array: a long queue's are many
        self._snapshot_kept = array("q", kept)

    def entry_data(self, index: int) -> bytes:
        """The application's data of the applied entry at `index` that the machine holds
        (`kept`), from the log in memory or else from the WAL."""
        return unstamp(self._stored(index))[1]

    def _stored(self, index: int) -> bytes:
        """The entry at `index` as the log has it (stamped, point 8)."""
        raft_log = self.node.log
        if raft_log.in_memory(index):
            return raft_log.entry_at(index).data
        data = self._host.wal.read_entry(self.group_id, index)
        if data is None:
            raise LookupError(f"{self.group_id}: entry {index} is neither in memory nor on disk")
        return data

    def install_data(self, snapshot: Snapshot) -> bytes:
        """What a follower gets for `snapshot`: its data and the entries it holds (built
        for every send, rare enough: a long queue's copy is as large as its bodies)."""
        kept = sorted(index for index in self._snapshot_kept if index <= snapshot.index)
        data = snapshot.data or self._host.wal.read_snapshot_data(self.group_id)
        return encode_install(data, [(index, self._stored(index)) for index in kept])

    # --- the application's side ------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.node.role is Role.LEADER

    @property
    def leader(self) -> str | None:
        return self._host.name_of(self.node.leader_id)

    @property
    def handing_over(self) -> bool:
        """This node leads and is handing leadership over (`transfer`): it refuses
        proposals meanwhile."""
        return self.is_leader and self.node.transfer_target != NO_NODE

    @property
    def members(self) -> list[str]:
        return self._names(self.node.membership.members)

    @property
    def membership_index(self) -> int:
        """Orders the configurations `members` reads (`RaftNode.membership_index`)."""
        return self.node.membership_index

    def propose(self, data: bytes) -> asyncio.Future[object]:
        """Replicate `data`; the future resolves with `machine.apply`'s result once the
        entry is committed and applied here. It fails at once with `NotLeader` on a
        follower, and with `NotLeader` if this node loses leadership before the entry is
        applied: the entry may still commit later under the next leader, so a retry may
        apply it twice (commands must tolerate that, as RabbitMQ's do)."""
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if self._host.failure is not None or self.removed:
            future.set_exception(self._host.stopped_error())
        elif not self.is_leader:
            future.set_exception(NotLeader(self.leader))
        else:
            self.step_or_queue(lambda: self._propose(data, future))
        return future

    async def add_member(self, node: str, timeout_s: float) -> None:
        """Add `node` as a learner and return once the leader has promoted it to voter
        (once added, when it may not vote: `add_group`), or after `timeout_s` (a learner
        that has not caught up stays one: the leader promotes it when it has), or once it
        left the configuration after it was added (a delete won: it is not added again).
        One change at a time: waits while another is in progress. `NotLeader` off the leader."""
        target = self._host.names.add(node)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        added = False  # seen a learner
        proposed = 0  # the index of the change proposed here
        while True:
            membership = self.node.membership
            if target in membership.voters:
                return
            self._require_leader()
            if target in membership.learners:
                if not self.node.config.may_vote(target):
                    return  # it stays a learner
                added = True
            elif added or 0 < proposed <= self.node.log.commit_index:
                return  # removed since it was added
            elif not proposed:
                # a change takes effect once committed: until then the node is no learner
                # yet (stack sim seed 661: taken for one removed, the list recorded then
                # left out a node the group added)
                proposed = self._try_change(MembershipChange.ADD_LEARNER, target)
            if loop.time() >= deadline:
                log.info("%s: %s still a learner after %.0f s", self.group_id, node, timeout_s)
                return
            await asyncio.sleep(self._host.tick_s)

    async def remove_member(self, node: str) -> None:
        """Remove `node` and return once the change is committed (as `add_member`). A
        leader asked to remove itself first hands leadership to another voter, then fails
        with `NotLeader` naming it (the caller asks it instead): a leader that removed
        itself would step down as the change committed, before telling the others, and
        they, the change still uncommitted in their logs, would wait for its vote for good
        once its node dropped its replica."""
        target = self._host.names.add(node)
        while target in self.node.membership.members:
            self._require_leader()
            successor = self._successor() if target == self.node.id else None
            if successor is None:
                self._try_change(MembershipChange.REMOVE, target)
            elif self.node.transfer_target == NO_NODE:
                self.transfer(successor)
            await asyncio.sleep(self._host.tick_s)

    def _successor(self) -> str | None:
        """The voter, other than this leader, with the most of its log; None if none."""
        node = self.node
        others = [voter for voter in node.membership.voters if voter != node.id]
        if not others:
            return None
        best = max(others, key=lambda voter: (node.progress[voter].match_index, voter))
        return self._host.name_of(best)

    def campaign(self) -> None:
        """Start an election now, skipping the election timeout (a queue's first leader
        is the node that declared it: RabbitMQ's client-local leader locator)."""
        if self.node.is_voter and not self.removed:
            self.step_or_queue(self.node.campaign)

    def transfer(self, node: str) -> bool:
        """Hand leadership to voter `node`; False if this node is not the leader or `node`
        is no voter. True means the transfer started (it is abandoned after an election
        timeout if the target does not take over)."""
        target = self._host.names.add(node)
        if not self.is_leader or target not in self.node.membership.voters:
            return False
        if target == self.node.id:
            return False
        if self._in_flight:
            self._inbox.append(lambda: self.node.transfer_leadership(target))
            return True
        started = self.node.transfer_leadership(target)
        self._after_input()
        return started

    def status(self) -> dict[str, object]:
        node = self.node
        raft_log = node.log
        status: dict[str, object] = {
            "group": self.group_id,
            "role": node.role.value,
            "term": node.term,
            "leader": self.leader,
            "commit": raft_log.commit_index,
            "applied": raft_log.applied,
            "last_index": raft_log.last_index,
            "snapshot_index": raft_log.snapshot_index,
            "members": self.members,
            "configuration": node.membership_index,
            "voters": self._names(node.membership.voters),
            "learners": self._names(node.membership.learners),
        }
        if self.is_leader:
            status["match_index"] = {
                self._host.name_of(node_id) or str(node_id): progress.match_index
                for node_id, progress in sorted(node.progress.items())
            }
        return status

    # --- inputs ----------------------------------------------------------------------------

    def step_or_queue(self, item: _Input) -> None:
        if self._in_flight:
            self._inbox.append(item)
            return
        self._do(item)
        self._after_input()

    def _do(self, item: _Input) -> None:
        if isinstance(item, Message):
            self.node.step(item)
        else:
            item()

    def _after_input(self) -> None:
        self._check_role()
        self._host.touch(self)

    def _propose(self, data: bytes, future: asyncio.Future[object]) -> None:
        if future.done():
            return  # the proposer gave up while the proposal waited in the inbox
        index = self.node.propose(STAMP.pack(int(self._host.clock() * 1000)) + data)
        if index is None:
            future.set_exception(NotLeader(self.leader))
        else:
            self._proposals[index] = (self.node.term, future)

    def _try_change(self, change: MembershipChange, target: int) -> int:
        """The change's index once proposed; 0 while refused: another change is
        uncommitted (the caller polls again)."""
        index = None if self._in_flight else self.node.propose_membership(change, target)
        if index is None:
            return 0
        self._after_input()
        return index

    def _require_leader(self) -> None:
        if self._host.failure is not None or self.removed:
            raise self._host.stopped_error()
        if not self.is_leader:
            raise NotLeader(self.leader)

    # --- rounds ----------------------------------------------------------------------------

    def taken(self) -> None:
        """`begin` took this group's ready: inputs wait in the inbox until `advanced`."""
        self._in_flight = True

    def send(self, message: Message) -> None:
        """`warren.raft.Transport`: into the host's batch for the message's node."""
        if message.snapshot is not None:
            installed = replace(message.snapshot, data=self.install_data(message.snapshot))
            message = replace(message, snapshot=installed)
        self._host.outgoing.setdefault(message.to, []).append((self.group_id, message))

    def restore(self, snapshot: Snapshot) -> None:
        """`warren.raft.StateMachine`: a snapshot installed from the leader."""
        data, bodies = decode_install(snapshot.data)
        self.machine.restore(data)
        self._installed = (snapshot.index, data, [index for index, _body in bodies])

    def apply(self, entry: Entry) -> None:
        """`warren.raft.StateMachine`: a committed entry; resolves its proposal's future."""
        result = None
        if entry.kind is EntryKind.NORMAL:
            time_ms, data = unstamp(entry.data)
            result = self.machine.apply(EntryMeta(entry.index, entry.term, time_ms), data)
        proposals = self._proposals
        proposal = proposals.pop(entry.index, None) if proposals else None
        if proposal is not None and not proposal[1].done():
            if proposal[0] == entry.term:
                proposal[1].set_result(result)
            else:
                proposal[1].set_exception(NotLeader(self.leader))

    def read(self, read_state: ReadState) -> None:
        """`warren.raft.StateMachine`: never called, the host asks for no read index."""
        raise RuntimeError(f"{self.group_id}: read state {read_state} nobody asked for")

    def advanced(self) -> None:
        """After the round's `apply` advanced the node: take queued inputs, compact."""
        installed, self._installed = self._installed, None
        if installed is not None:  # keep only the machine's part in memory
            index, data, kept = installed
            self.node.compact(index, data)
            self._snapshot_kept = array("q", kept)
        self._in_flight = False
        inbox = self._inbox
        for _ in range(len(inbox)):
            self._do(inbox.popleft())
        self._maybe_compact()
        self._maybe_release()
        self._after_input()

    def _maybe_compact(self) -> None:
        raft_log = self.node.log
        applied = raft_log.applied
        # module docstring, point 5
        retained = self.machine.retained() // _RETAINED_PER_SNAPSHOT
        if applied - raft_log.snapshot_index <= max(self._host.snapshot_entries, retained):
            return
        if applied > raft_log.stable_index:
            return  # not yet: compaction needs the entry on disk
        machine = self.machine
        snapshot = self.node.compact(applied, machine.snapshot())
        self._snapshot_kept = kept = array("q", machine.kept_indexes())
        # from the entry before the oldest kept one: a follower's append needs its term
        self._host.save_snapshot(self.group_id, snapshot, min(kept, default=applied + 2) - 1)

    def _maybe_release(self) -> None:
        """Keep the last applied entries in memory (`snapshot_entries` of them, or fewer
        if they would take more than `_TAIL_BYTES`), at most twice that, and no snapshot
        data that the WAL has (point 5)."""
        raft_log = self.node.log
        newest = min(raft_log.applied, raft_log.stable_index)
        if newest > raft_log.released_index:
            # sized by the newest entry: a quorum entry carries one loop turn's commands,
            # from one to thousands of messages
            size = len(raft_log.entry_at(newest).data) or 1
            tail = max(1, min(self._host.snapshot_entries, _TAIL_BYTES // size))
            floor = newest - tail
            if floor - raft_log.released_index >= tail:
                raft_log.release(floor)
        snapshot = self.node.snapshot
        if (
            snapshot is not None
            and snapshot.data
            and self._host.wal.durable_snapshot_index(self.group_id) == snapshot.index
        ):
            self.node.snapshot = replace(snapshot, data=b"")

    def _check_role(self) -> None:
        role = (self.node.role is Role.LEADER, self.node.leader_id)
        if role == self._role:
            return
        was_leader = self._role[0]
        self._role = role
        if was_leader and not role[0]:
            self.fail_proposals(NotLeader(self.leader))
        self.machine.role_changed(role[0], self.leader)

    def fail_proposals(self, error: Exception) -> None:
        proposals, self._proposals = self._proposals, {}
        for _term, future in proposals.values():
            if not future.done():
                future.set_exception(error)

    def _names(self, node_ids: Collection[int]) -> list[str]:
        return sorted(self._host.name_of(node_id) or str(node_id) for node_id in node_ids)


class RaftHost:
    """See the module docstring."""

    def __init__(
        self,
        node: str,
        peers: PeerLinks,
        directory: Path,
        *,
        tick_ms: int = 100,
        election_ticks: int = 10,
        snapshot_entries: int = 4096,
        segment_max_bytes: int = SEGMENT_MAX_BYTES_DEFAULT,
        rng: RandomSource | None = None,
        clock: Callable[[], float] = time.time,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.node = node
        self.segment_max_bytes = segment_max_bytes
        self.peers = peers
        self.directory = Path(directory)
        self.tick_s = tick_ms / 1000
        self.election_ticks = election_ticks
        self.snapshot_entries = snapshot_entries
        self.names = NodeNames()
        self.node_id = self.names.add(node)
        self._rng: RandomSource = rng if rng is not None else random.Random()
        self.clock = clock  # stamped on entries (point 8); virtual in the simulator
        self._on_failure = on_failure
        self._wal: RaftWal | None = None
        self._recovered: dict[str, GroupState] = {}
        # term and vote of groups whose replica left for good until made again (point 10)
        self._retired: dict[str, HardState] = {}
        self._groups: dict[str, RaftGroup] = {}
        self._touched: dict[RaftGroup, None] = {}  # groups that may have a ready, in order
        # the round's messages by destination node, in order (`RaftGroup.send`, `_flush`)
        self.outgoing: dict[int, list[tuple[str, Message]]] = {}
        self._scheduled = False  # a `_start_round` callback is queued
        self._syncing: asyncio.Future[int] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="raft-wal")
        self._ticker: asyncio.Task[None] | None = None
        self._closed = False
        self.failure: BaseException | None = None
        self.syncs = 0

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._wal = wal = await loop.run_in_executor(
            self._executor, RaftWal.open, self.directory, self.segment_max_bytes
        )
        if not wal.report.clean:
            log.warning("Raft WAL recovered with damage: %s", wal.report.summary())
        self._recovered = wal.take_recovered()
        self._retired = {
            group_id: HardState(left.term, left.vote) for group_id, left in wal.take_left().items()
        }
        for name in self.peers.nodes:
            self.names.add(name)
        self.peers.on_message(self._on_message)
        self._ticker = loop.create_task(self._tick_loop())

    def recovered_groups(self) -> list[str]:
        """Groups found in the WAL that no `add_group` has claimed yet."""
        return sorted(self._recovered)

    async def close(self) -> None:
        """Stop ticking, finish the round in flight, sync and close the WAL. Waiting
        proposals fail with `HostStopped`."""
        if self._closed:
            return
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        if self._syncing is not None:
            await asyncio.wait([self._syncing])
        for group in self._groups.values():
            group.fail_proposals(HostStopped(f"Raft host {self.node} closed"))
        if self._wal is not None:
            wal = self._wal
            closing = wal.close if self.failure is None else lambda: wal.log.close(flush=False)
            await asyncio.get_running_loop().run_in_executor(self._executor, closing)
        self._executor.shutdown(wait=False)

    # --- groups ----------------------------------------------------------------------------

    def add_group(
        self,
        group_id: str,
        machine: GroupMachine,
        members: Collection[str] | None,
        may_vote: Callable[[str], bool] | None = None,
    ) -> RaftGroup:
        """Host a group: as recovered from the WAL if it was; else a new group with
        `members` as its voters; else (None) as a node that learns the membership from the
        leader (it is added with `add_member` there). `may_vote`: which members may be
        voters (`RaftConfig.may_vote`, by name; a name this host never saw may): a new
        group's other members start as learners, and a recovered configuration converges
        to the rule through membership changes."""
        if group_id in self._groups:
            raise ValueError(f"group {group_id!r} is already hosted")
        if self._wal is None:
            raise RuntimeError("RaftHost.start has not run")
        config = RaftConfig(node_id=self.node_id, election_ticks=self.election_ticks)
        if may_vote is not None:
            rule = may_vote
            config = replace(config, may_vote=lambda node_id: rule(self.name_of(node_id) or ""))
        state = self._recovered.pop(group_id, None)
        retired = self._retired.pop(group_id, None)
        kept: list[int] = []
        source = _WalEntries(self.wal, group_id)
        if state is not None:
            node = _recovered_node(config, self._rng, state)
            if node.snapshot is not None and node.snapshot.index > 0:
                machine.restore(node.snapshot.data)
                kept = machine.kept_indexes()
        elif members is not None:
            ids = frozenset(self.names.add(name) for name in members)
            voters = frozenset(node_id for node_id in ids if config.may_vote(node_id)) or ids
            snapshot = Snapshot(0, 0, Membership(voters, ids - voters))
            node = RaftNode(config, self._rng, snapshot=snapshot, hard_state=retired)
            self.save_snapshot(group_id, snapshot)
        else:
            node = RaftNode(config, self._rng, hard_state=retired)
            if retired is not None:
                self.wal.save_hard_state(group_id, retired.term, retired.vote, 0)
        node.log.source = source
        group = RaftGroup(self, group_id, machine, node, kept)
        self._groups[group_id] = group
        self.touch(group)
        if node.membership.voters == {node.id}:  # point 4, once the caller holds the group
            asyncio.get_running_loop().call_soon(self._lead_alone, group)
        return group

    def _lead_alone(self, group: RaftGroup) -> None:
        """A group whose only voter is this node: its election now, not after a timeout."""
        if not self._closed:
            group.campaign()

    def remove_group(self, group_id: str, *, keep_vote: bool = False) -> None:
        """Stop hosting the group and drop its WAL records; waiting proposals fail.
        `keep_vote`: this node left the group and may join it again; the term and vote
        stay for its next replica (point 10). Without it the group is forgotten whole,
        a kept vote too."""
        group = self._groups.pop(group_id, None)
        recovered = self._recovered.pop(group_id, None)
        retired = self._retired.pop(group_id, None)
        last: HardState | StoredHardState | None = retired
        if group is not None:
            last = group.node.hard_state
            group.removed = True
            self._touched.pop(group, None)
            group.fail_proposals(HostStopped(f"group {group_id} removed from {self.node}"))
        elif recovered is not None:
            last = recovered.hard_state
        if last is None:
            return
        if keep_vote:
            self._retired[group_id] = HardState(last.term, last.vote)
            self.wal.leave_group(group_id, last.term, last.vote)
        else:
            self.wal.drop_group(group_id)
        self._kick()

    def group(self, group_id: str) -> RaftGroup | None:
        return self._groups.get(group_id)

    # --- for the groups --------------------------------------------------------------------

    def name_of(self, node_id: int) -> str | None:
        return self.names.name(node_id) if node_id != NO_NODE else None

    def touch(self, group: RaftGroup) -> None:
        self._touched[group] = None
        self._kick()

    def save_snapshot(
        self, group_id: str, snapshot: Snapshot, keep_from: int | None = None
    ) -> None:
        self.wal.save_snapshot(
            group_id,
            snapshot.index,
            snapshot.term,
            snapshot.membership.encode(),
            snapshot.data,
            keep_from,
        )
        self._kick()

    def stopped_error(self) -> Exception:
        if self.failure is not None:
            return HostStopped(f"Raft host {self.node} failed: {self.failure!r}")
        return HostStopped(f"Raft host {self.node} closed, or the group was removed")

    @property
    def wal(self) -> RaftWal:
        if self._wal is None:
            raise RuntimeError("RaftHost.start has not run")
        return self._wal

    # --- inputs from outside ---------------------------------------------------------------

    def _on_message(self, sender: str, payload: PeerMessage) -> None:
        if type(payload) is not RaftTraffic or self._closed or self.failure is not None:
            return
        self.names.add(sender)
        try:
            messages = decode_messages(payload.messages)
        except ValueError as error:  # `RaftCodecError`, or a membership that does not decode
            log.error("Raft messages from node %s dropped: %s", sender, error)
            return
        groups = self._groups
        node_id = self.node_id
        try:
            for group_id, message in messages:
                group = groups.get(group_id)
                if group is not None and message.to == node_id:
                    group.step_or_queue(message)
        except Exception as error:
            self._fail(error)

    async def _tick_loop(self) -> None:
        while self.failure is None:
            await asyncio.sleep(self.tick_s)
            try:
                for group in list(self._groups.values()):
                    group.step_or_queue(group.node.tick)
            except Exception as error:
                self._fail(error)

    # --- rounds ----------------------------------------------------------------------------

    def _kick(self) -> None:
        if not self._scheduled and self._syncing is None:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._start_round)

    def _start_round(self) -> None:
        self._scheduled = False
        if self._syncing is not None or self.failure is not None or self._closed:
            return
        wal = self.wal
        touched, self._touched = self._touched, {}
        try:
            round_ = begin(touched)
            for group in round_.groups:
                group.taken()
            batch = wal.seal()
            if batch is not None:  # the followers write while this node syncs
                round_.send_early()
                self._flush()
                round_.apply_early()  # what an earlier round made durable
        except Exception as error:
            self._fail(error)
            return
        if batch is None:
            if round_.groups:
                self._finish_round(round_)
            return
        self._syncing = syncing = asyncio.get_running_loop().run_in_executor(
            self._executor, wal.sync_batch, batch
        )
        syncing.add_done_callback(lambda done: self._synced(round_, done))

    def _synced(self, round_: Round[RaftGroup], done: asyncio.Future[int]) -> None:
        self._syncing = None
        try:
            done.result()
        except BaseException as error:  # LogFailed, or a bug: durability is gone either way
            self._fail(error)
            return
        self.syncs += 1
        self._finish_round(round_)

    def _finish_round(self, round_: Round[RaftGroup]) -> None:
        try:
            self.wal.reclaim()
            for group in round_.groups:
                if group.removed:
                    round_.drop(group)
            round_.send()
            self._flush()
            round_.apply()
            for group in round_.groups:
                group.advanced()
        except Exception as error:
            self._fail(error)
            return
        if not self._closed:
            self._kick()

    def _flush(self) -> None:
        """Send the round's messages (`RaftGroup.send`): one `RaftTraffic` per node."""
        outgoing, self.outgoing = self.outgoing, {}
        for node_id, messages in outgoing.items():
            name = self.names.name(node_id)
            if name is None:
                log.debug(
                    "no name known for Raft node %s: %s messages dropped", node_id, len(messages)
                )
                continue
            self.peers.send(name, RaftTraffic(encode_messages(messages)))

    def _fail(self, error: BaseException) -> None:
        if self.failure is not None:
            return
        self.failure = error
        log.critical(
            "Raft host %s stopped: %r; nothing more is sent, applied or acknowledged",
            self.node,
            error,
            exc_info=error,
        )
        stopped = self.stopped_error()
        for group in self._groups.values():
            group.fail_proposals(stopped)
        if self._on_failure is not None:
            self._on_failure(error)


class _WalEntries:
    """A group's compacted entries that the WAL still keeps, for its Raft log's `source`
    (a follower a little behind gets them instead of a snapshot)."""

    __slots__ = ("group_id", "wal")

    def __init__(self, wal: RaftWal, group_id: str) -> None:
        self.wal = wal
        self.group_id = group_id

    def entry(self, index: int) -> Entry | None:
        stored = self.wal.read_stored(self.group_id, index)
        if stored is None:
            return None
        return Entry(stored.term, stored.index, EntryKind(stored.kind), stored.data)


def encode_install(data: bytes, bodies: list[tuple[int, bytes]]) -> bytes:
    """A snapshot's data as a follower gets it: the entries the machine holds, then the
    machine's own data (module docstring, point 6)."""
    parts = [_INSTALL_COUNT.pack(len(bodies))]
    for index, body in bodies:
        parts.append(_INSTALL_ENTRY.pack(index, len(body)))
        parts.append(body)
    parts.append(data)
    return b"".join(parts)


def decode_install(encoded: bytes) -> tuple[bytes, list[tuple[int, memoryview]]]:
    """`encode_install`'s (data, bodies); the bodies are views into `encoded`."""
    view = memoryview(encoded)
    (count,) = _INSTALL_COUNT.unpack_from(view, 0)
    position = _INSTALL_COUNT.size
    bodies = []
    for _ in range(count):
        index, length = _INSTALL_ENTRY.unpack_from(view, position)
        position += _INSTALL_ENTRY.size
        bodies.append((index, view[position : position + length]))
        position += length
    return bytes(view[position:]), bodies


class _WalStorage:
    """A group's `warren.raft.Storage` on the node's WAL (the host syncs it per round)."""

    __slots__ = ("group_id", "wal")

    def __init__(self, wal: RaftWal, group_id: str) -> None:
        self.wal = wal
        self.group_id = group_id

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """A snapshot installed from the leader: `encode_install`d (point 6)."""
        data, bodies = decode_install(snapshot.data)
        self.wal.save_snapshot(
            self.group_id,
            snapshot.index,
            snapshot.term,
            snapshot.membership.encode(),
            data,
            min((index for index, _body in bodies), default=snapshot.index + 1),
            [StoredEntry(index, 0, EntryKind.NORMAL.value, bytes(body)) for index, body in bodies],
        )

    def append_entries(self, entries: Sequence[Entry]) -> None:
        self.wal.append_entries(
            self.group_id, [StoredEntry(e.index, e.term, e.kind.value, e.data) for e in entries]
        )

    def save_hard_state(self, hard_state: HardState) -> None:
        self.wal.save_hard_state(self.group_id, hard_state.term, hard_state.vote, hard_state.commit)


def _recovered_node(config: RaftConfig, rng: RandomSource, state: GroupState) -> RaftNode:
    stored = state.snapshot
    snapshot = (
        Snapshot(stored.index, stored.term, Membership.decode(stored.membership), stored.data)
        if stored is not None
        else None
    )
    hard = state.hard_state
    return RaftNode(
        config,
        rng,
        hard_state=HardState(hard.term, hard.vote, hard.commit),
        snapshot=snapshot,
        entries=[Entry(e.term, e.index, EntryKind(e.kind), e.data) for e in state.entries],
    )
