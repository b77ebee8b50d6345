"""A seeded world of real Raft nodes: simulated clock, network, disks, faults and a workload.

Theory of operation (after TigerBeetle's VOPR):
1. Everything random comes from one `random.Random(seed)`; time is `SimClock.now_ms`, moved
   only by the event queue (a heap ordered by time, then by insertion). So a seed is a
   complete description of a run: same seed, same events, same output, whatever the
   process's hash seed.
2. Each node is a real `RaftNode` driven by the real `warren.raft.run_ready` (the driver's
   `Round` for one group, the runtime's `RaftHost` runs many), over a `SimDisk` and the
   `SimNetwork`. Events: a node's tick, a message delivery, a workload
   action (propose, read, membership change, leadership transfer), a fault, a restart.
3. Safety phase (`safety_ms`): faults on — loss, duplication, slow messages (reordering),
   symmetric and asymmetric partitions, crashes that keep a random part of the unsynced
   writes and may tear the last one, crashes inside a sync. After every event the
   `SafetyChecker` checks the nodes touched.
4. Liveness phase: faults off, network healed, every node restarted. Within
   `liveness_ms_max` a leader must be elected and every member must apply the whole log,
   including a final marker entry proposed in this phase.
5. A failure raises `Violation`; `run_seed` turns it into a `SimResult` that names the seed.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from warren.raft import (
    Entry,
    EntryKind,
    HardState,
    Membership,
    MembershipChange,
    Message,
    NodeId,
    RaftConfig,
    RaftNode,
    ReadState,
    Role,
    Snapshot,
    compact,
    run_ready,
)
from warren.testing.sim.checkers import SafetyChecker, Violation
from warren.testing.sim.disk import DiskCrash, SimDisk
from warren.testing.sim.network import NetworkFaults, SimNetwork

READY_ROUNDS_MAX = 64  # a node needs a handful of Ready rounds per event; more is a loop


@dataclass(slots=True)
class SimOptions:
    node_count: int = 5
    safety_ms: int = 2_000
    # Generous: elections without pre-vote may need several rounds to settle.
    liveness_ms_max: int = 10_000
    tick_ms: int = 10  # each node's clock runs up to 20% fast or slow around this
    faults: bool = True
    membership_changes: bool = True
    compact_every_entries: int = 24
    tear_probability: float = 0.5
    trace: bool = False
    # a hook for tests that plant a bug: called with every node the world builds
    node_factory: Callable[..., RaftNode] | None = None


@dataclass(frozen=True, slots=True)
class Swarm:
    """Per-seed knobs drawn from the seed ("swarm testing"): each seed explores a different
    corner — with or without pre-vote and check-quorum, fast or slow networks, short or long
    timeouts — instead of every seed probing the same average configuration."""

    initial_voter_count: int
    pre_vote: bool
    check_quorum: bool
    election_ticks: int
    heartbeat_ticks: int
    delay_ms_max: int
    slow_probability: float
    slow_delay_ms_max: int
    fault_interval_ms_max: int
    downtime_ms_max: int
    max_entries_per_append: int
    max_inflight_appends: int

    @classmethod
    def draw(cls, rng: random.Random, node_count: int) -> Swarm:
        election_ticks = rng.choice((4, 6, 10))
        return cls(
            initial_voter_count=min(node_count, rng.choice((3, 3, 5))),
            pre_vote=rng.random() < 0.5,
            check_quorum=rng.random() < 0.5,
            election_ticks=election_ticks,
            heartbeat_ticks=rng.randint(1, max(1, election_ticks // 3)),
            delay_ms_max=rng.choice((5, 20, 40)),
            slow_probability=rng.choice((0.0, 0.01, 0.05)),
            slow_delay_ms_max=rng.choice((100, 300)),
            fault_interval_ms_max=rng.choice((60, 150, 300)),
            downtime_ms_max=rng.choice((30, 100, 400)),
            max_entries_per_append=rng.choice((1, 4, 64)),
            max_inflight_appends=rng.choice((1, 4, 16)),
        )


@dataclass(slots=True)
class SimResult:
    seed: int
    steps: int
    simulated_ms: int
    violation: str | None = None
    trace: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.violation is None


class SimClock:
    __slots__ = ("now_ms",)

    def __init__(self) -> None:
        self.now_ms = 0


class _App:
    """The replicated state machine: a digest of everything applied, checked as it goes."""

    def __init__(self, world: SimWorld, node_id: NodeId, snapshot: Snapshot | None):
        self.world = world
        self.node_id = node_id
        self.applied_index = 0
        self.digest = 0
        if snapshot is not None:
            self.restore(snapshot)

    def snapshot_data(self) -> bytes:
        return f"{self.applied_index}:{self.digest}".encode()

    # warren.raft.StateMachine
    def restore(self, snapshot: Snapshot) -> None:
        index_text, _, digest_text = snapshot.data.decode().partition(":")
        if int(index_text) != snapshot.index:
            raise Violation(f"node {self.node_id}: snapshot data is not of index {snapshot.index}")
        self.world.checker.on_restore(self.node_id, snapshot.index, int(digest_text))
        self.applied_index = snapshot.index
        self.digest = int(digest_text)

    def apply(self, entry: Entry) -> None:
        if entry.index != self.applied_index + 1:
            raise Violation(f"node {self.node_id} applied {entry.index} after {self.applied_index}")
        self.digest = self.world.checker.on_apply(self.node_id, entry)
        self.applied_index = entry.index
        if entry.kind is EntryKind.NORMAL:
            self.world.on_value_applied(entry)

    def read(self, read_state: ReadState) -> None:
        applied_before = self.world.reads.pop(read_state.context, None)
        if applied_before is not None:
            self.world.checker.on_read(
                self.node_id, read_state.index, applied_before, self.applied_index
            )


class _Host:
    """One machine: its disk survives crashes; its node and state machine do not."""

    def __init__(self, world: SimWorld, node_id: NodeId):
        self.world = world
        self.id = node_id
        self.disk = SimDisk()
        self.node: RaftNode | None = None
        self.app: _App | None = None
        self.incarnation = 0
        self.leader_terms_checked: set[int] = set()
        self.seen_role = (Role.FOLLOWER, 0)
        self.tick_ms = world.options.tick_ms
        self.unsynced_hard_state: HardState | None = None

    # warren.raft.Storage, checked on the way to the disk
    def save_snapshot(self, snapshot: Snapshot) -> None:
        self.disk.save_snapshot(snapshot)

    def append_entries(self, entries: Sequence[Entry]) -> None:
        assert self.node is not None
        prev_term = self.node.log.term_at(entries[0].index - 1)
        if prev_term is None:
            raise Violation(f"node {self.id} persists {entries[0].index} after a hole")
        self.world.checker.on_persist(self.id, prev_term, tuple(entries))
        self.disk.append_entries(entries)

    def save_hard_state(self, hard_state: HardState) -> None:
        self.disk.save_hard_state(hard_state)
        self.unsynced_hard_state = hard_state

    def sync(self) -> None:
        hard_state, self.unsynced_hard_state = self.unsynced_hard_state, None
        self.disk.sync()
        if hard_state is not None:
            self.world.checker.on_hard_state_synced(self.id, hard_state)

    # warren.raft.Transport
    def send(self, message: Message) -> None:
        self.world.send(message)


class SimWorld:
    def __init__(self, seed: int, options: SimOptions | None = None):
        self.seed = seed
        self.options = options or SimOptions()
        self.rng = random.Random(seed)
        self.clock = SimClock()
        self.faults = NetworkFaults()
        self.network = SimNetwork(self.rng, self.faults)
        self.checker = SafetyChecker()
        self.steps = 0
        self.trace: list[str] = []
        self._queue: list[tuple[int, int, str, object]] = []
        self._sequence = 0
        self.swarm = Swarm.draw(self.rng, self.options.node_count)
        self.faults.delay_ms_max = self.swarm.delay_ms_max
        self.faults.slow_delay_ms_max = self.swarm.slow_delay_ms_max
        self.faults.slow_probability = self.swarm.slow_probability
        ids = list(range(1, self.options.node_count + 1))
        self.initial_membership = Membership(frozenset(ids[: self.swarm.initial_voter_count]))
        self.hosts = {node_id: _Host(self, node_id) for node_id in ids}
        tick_ms = self.options.tick_ms
        for host in self.hosts.values():
            host.tick_ms = self.rng.randint(tick_ms - tick_ms // 5, tick_ms + tick_ms // 5)
        self.reads: dict[bytes, int] = {}  # read context -> entries applied when asked
        self.value_index: dict[bytes, int] = {}
        self._next_value = 0
        self._next_read = 0
        self.in_liveness = False
        self._markers = 0
        self._marker_applied = False

    # ----------------------------------------------------------------- running

    def run(self) -> None:
        options = self.options
        self._log(f"seed {self.seed} {self.swarm}")
        for host in self.hosts.values():
            self._start(host)
        self._schedule(self.rng.randint(1, 20), "propose", None)
        self._schedule(self.rng.randint(1, 50), "read", None)
        if options.faults:
            self._schedule(self.rng.randint(20, 200), "fault", None)
        if options.membership_changes:
            self._schedule(self.rng.randint(100, 400), "membership", None)
        self._schedule(options.safety_ms, "liveness", None)
        deadline_ms = options.safety_ms + options.liveness_ms_max
        while self._queue:
            time_ms, _, kind, payload = heapq.heappop(self._queue)
            if time_ms > deadline_ms:
                break
            self.clock.now_ms = time_ms
            self.steps += 1
            self._dispatch(kind, payload)
            if self.in_liveness and kind == "tick" and self._converged():
                return
        raise Violation(f"liveness: not converged {options.liveness_ms_max} ms after healing")

    def _schedule(self, delay_ms: int, kind: str, payload: object) -> None:
        self._sequence += 1
        heapq.heappush(self._queue, (self.clock.now_ms + delay_ms, self._sequence, kind, payload))

    def _dispatch(self, kind: str, payload: object) -> None:
        if kind == "deliver":
            assert isinstance(payload, Message)
            self._deliver(payload)
        elif kind == "tick":
            assert isinstance(payload, tuple)
            self._tick(*payload)
        elif kind == "propose":
            self._propose()
        elif kind == "read":
            self._read()
        elif kind == "fault":
            self._fault()
        elif kind == "membership":
            self._membership()
        elif kind == "restart":
            assert isinstance(payload, tuple)
            host = self.hosts[payload[0]]
            if host.node is None and host.incarnation == payload[1]:
                self._start(host)
        elif kind == "liveness":
            self._start_liveness()

    def _log(self, text: str) -> None:
        if self.options.trace:
            self.trace.append(f"{self.clock.now_ms:7d} {text}")

    # ----------------------------------------------------------------- nodes

    def _start(self, host: _Host) -> None:
        hard_state, snapshot, entries = host.disk.recover()
        if hard_state is not None:
            # what a crash kept of the unsynced writes is durable from now on
            self.checker.on_hard_state_synced(host.id, hard_state)
        host.unsynced_hard_state = None
        host.incarnation += 1
        config = RaftConfig(
            node_id=host.id,
            election_ticks=self.swarm.election_ticks,
            heartbeat_ticks=self.swarm.heartbeat_ticks,
            max_entries_per_append=self.swarm.max_entries_per_append,
            max_inflight_appends=self.swarm.max_inflight_appends,
            pre_vote=self.swarm.pre_vote,
            check_quorum=self.swarm.check_quorum,
        )
        bootstrap = self.initial_membership if host.id in self.initial_membership.voters else None
        factory = self.options.node_factory or RaftNode
        host.node = factory(
            config,
            random.Random(self.rng.getrandbits(64)),
            membership=bootstrap,
            hard_state=hard_state,
            snapshot=snapshot,
            entries=entries,
        )
        host.app = _App(self, host.id, snapshot)
        self._log(
            f"n{host.id} start #{host.incarnation} term={host.node.term} "
            f"last={host.node.log.last_index} commit={host.node.log.commit_index}"
        )
        self._schedule(self.rng.randint(1, host.tick_ms), "tick", (host.id, host.incarnation))
        self._drive(host)

    def _crash(self, host: _Host, why: str) -> None:
        if host.node is None:
            return
        host.disk.crash(self.rng, self.options.tear_probability)
        host.node = None
        host.app = None
        self._log(f"n{host.id} crash ({why})")
        if not self.in_liveness:
            self._schedule(
                self.rng.randint(1, self.swarm.downtime_ms_max),
                "restart",
                (host.id, host.incarnation),
            )

    def _tick(self, node_id: NodeId, incarnation: int) -> None:
        host = self.hosts[node_id]
        if host.node is None or host.incarnation != incarnation:
            return
        host.node.tick()
        self._drive(host)
        self._schedule(host.tick_ms, "tick", (node_id, incarnation))

    def _deliver(self, message: Message) -> None:
        host = self.hosts[message.to]
        if host.node is None:
            return
        if self.options.trace:
            self._log(
                f"n{message.sender}->n{message.to} {message.type.value} term={message.term} "
                f"index={message.index} log_term={message.log_term} "
                f"entries={len(message.entries)} commit={message.commit}"
                f"{' reject' if message.reject else ''}"
            )
        host.node.step(message)
        self._drive(host)

    def send(self, message: Message) -> None:
        for delay_ms in self.network.route(message.sender, message.to):
            self._schedule(delay_ms, "deliver", message)

    def _drive(self, host: _Host) -> None:
        """Run the node's Ready batches through the shared driver, then check it."""
        node, app = host.node, host.app
        assert node is not None and app is not None
        try:
            for _ in range(READY_ROUNDS_MAX):
                if not run_ready(node, host, host, app):
                    break
                if (
                    app.applied_index - node.log.snapshot_index
                    >= self.options.compact_every_entries
                ):
                    compact(node, host, app.applied_index, app.snapshot_data())
            else:
                raise Violation(f"node {host.id} never stops producing Ready batches")
        except DiskCrash:
            self._crash(host, "during sync")
            return
        if (node.role, node.term) != host.seen_role:
            host.seen_role = (node.role, node.term)
            self._log(f"n{host.id} {node.role.value} term={node.term}")
        if node.role is Role.LEADER and node.term not in host.leader_terms_checked:
            host.leader_terms_checked.add(node.term)
            self.checker.on_leader(host.id, node.term, node.log, node.membership)

    def leaders(self) -> list[RaftNode]:
        nodes = [host.node for host in self.hosts.values() if host.node is not None]
        return sorted(
            (node for node in nodes if node.role is Role.LEADER), key=lambda node: -node.term
        )

    # ----------------------------------------------------------------- workload

    def on_value_applied(self, entry: Entry) -> None:
        index = self.value_index.setdefault(entry.data, entry.index)
        if self.in_liveness and entry.data.startswith(b"marker"):
            self._marker_applied = True
        if index != entry.index:
            raise Violation(f"value {entry.data!r} applied at {index} and at {entry.index}")

    def _propose(self) -> None:
        leaders = self.leaders()
        if leaders and not self.in_liveness:
            self._next_value += 1
            value = b"v%d" % self._next_value
            index = leaders[0].propose(value)
            self._log(f"propose {value.decode()} to n{leaders[0].id} -> {index}")
            self._drive(self.hosts[leaders[0].id])
        if not self.in_liveness:
            self._schedule(self.rng.randint(2, 30), "propose", None)

    def _read(self) -> None:
        leaders = self.leaders()
        if leaders:
            self._next_read += 1
            context = b"r%d" % self._next_read
            self.reads[context] = len(self.checker.applied)
            leaders[0].read_index(context)
            self._drive(self.hosts[leaders[0].id])
        self._schedule(self.rng.randint(5, 60), "read", None)

    def _membership(self) -> None:
        leaders = self.leaders()
        if leaders and not self.in_liveness:
            leader = leaders[0]
            membership = leader.membership
            outsiders = [i for i in sorted(self.hosts) if i not in membership.members]
            choice = self.rng.random()
            if choice < 0.35:
                voters = sorted(membership.voters - {leader.id})
                if voters:
                    target = self.rng.choice(voters)
                    self._log(f"transfer n{leader.id} -> n{target}")
                    leader.transfer_leadership(target)
            elif outsiders and (choice < 0.7 or len(membership.voters) <= 3):
                target = self.rng.choice(outsiders)
                index = leader.propose_membership(MembershipChange.ADD_LEARNER, target)
                self._log(f"add learner n{target} via n{leader.id} -> {index}")
            elif len(membership.voters) > 3:
                target = self.rng.choice(sorted(membership.voters))
                index = leader.propose_membership(MembershipChange.REMOVE, target)
                self._log(f"remove n{target} via n{leader.id} -> {index}")
            self._drive(self.hosts[leader.id])
        if not self.in_liveness:
            self._schedule(self.rng.randint(100, 500), "membership", None)

    # ----------------------------------------------------------------- faults

    def _fault(self) -> None:
        if self.in_liveness:
            return
        rng = self.rng
        ids = sorted(self.hosts)
        choice = rng.random()
        leaders = self.leaders()
        if choice < 0.15:
            self.network.heal()
            self._log("heal")
        elif choice < 0.3:
            shuffled = ids[:]
            rng.shuffle(shuffled)
            cut = rng.randint(1, len(ids) - 1)
            self.network.heal()
            self.network.partition(shuffled[:cut], shuffled[cut:], symmetric=True)
            self._log(f"partition {sorted(shuffled[:cut])} | {sorted(shuffled[cut:])}")
        elif choice < 0.4:
            sender, receiver = rng.sample(ids, 2)
            self.network.partition([sender], [receiver], symmetric=False)
            self._log(f"block n{sender}->n{receiver}")
        elif choice < 0.55:
            if leaders:
                leader = leaders[0].id
                others = [i for i in ids if i != leader]
                symmetric = rng.random() < 0.5
                self.network.partition([leader], others, symmetric=symmetric)
                self._log(f"isolate leader n{leader} {'both ways' if symmetric else 'outbound'}")
        elif choice < 0.65:
            if leaders:
                self._crash(self.hosts[leaders[0].id], "leader power cut")
        elif choice < 0.75:
            alive = [i for i in ids if self.hosts[i].node is not None]
            if alive:
                self._crash(self.hosts[rng.choice(alive)], "power cut")
        elif choice < 0.85:
            target = rng.choice(ids)
            self.hosts[target].disk.fail_next_sync = True
            self._log(f"n{target} will crash in its next sync")
        else:
            self.faults.loss_probability = rng.choice((0.0, 0.01, 0.05, 0.2))
            self.faults.duplicate_probability = rng.choice((0.0, 0.01, 0.05))
            self.faults.slow_probability = rng.choice((0.0, 0.02, 0.1, 0.3))
            self._log(
                f"network loss={self.faults.loss_probability} "
                f"dup={self.faults.duplicate_probability} slow={self.faults.slow_probability}"
            )
        self._schedule(rng.randint(10, self.swarm.fault_interval_ms_max), "fault", None)

    def _start_liveness(self) -> None:
        self.in_liveness = True
        self.network.heal()
        self.faults.loss_probability = 0.0
        self.faults.duplicate_probability = 0.0
        self.faults.slow_probability = 0.0
        self._log("liveness: faults off, network healed, every node up")
        for host in self.hosts.values():
            host.disk.fail_next_sync = False
            if host.node is None:
                self._start(host)

    def _converged(self) -> bool:
        leaders = self.leaders()
        if not leaders:
            return False
        leader = leaders[0]
        log = leader.log
        if not self._marker_applied:
            # Each attempt proposes a fresh marker: an earlier one may still commit later.
            if not self._marker_pending(leader):
                self._markers += 1
                index = leader.propose(b"marker%d" % self._markers)
                self._log(f"propose marker{self._markers} to n{leader.id} -> {index}")
                self._drive(self.hosts[leader.id])
            return False
        if log.commit_index != log.last_index:
            return False
        for node_id in leader.membership.members:
            node = self.hosts[node_id].node
            if node is None or node.log.applied != log.last_index:
                return False
        self._log(f"converged: leader n{leader.id} term={leader.term} index={log.last_index}")
        return True

    def _marker_pending(self, leader: RaftNode) -> bool:
        """Is a marker in this leader's log, not yet applied there?"""
        log = leader.log
        for index in range(max(log.applied, log.snapshot_index) + 1, log.last_index + 1):
            if log.entry_at(index).data.startswith(b"marker"):
                return True
        return False


def run_seed(seed: int, options: SimOptions | None = None) -> SimResult:
    world = SimWorld(seed, options)
    try:
        world.run()
    except Violation as violation:
        return SimResult(seed, world.steps, world.clock.now_ms, str(violation), world.trace)
    return SimResult(seed, world.steps, world.clock.now_ms, None, world.trace)
