"""The whole quorum stack under the simulator: real nodes, clients, faults and checks.

Theory of operation (FoundationDB's simulation, on the production code):
1. One process, one `SimLoop` (virtual time) and one `random.Random(seed)`. Each node is
   the production stack, started as `warren.server` starts it: a `Broker` with its
   durability (definitions, log), a `ClusterNode` with its metadata group, forwarding and
   numbered-command retries, a `RaftHost` on a real `RaftWal` (in a temporary directory
   on /dev/shm), and the `QuorumHost`s of two quorum queues (``q``, which dead-letters at
   least once to ``dlq``), declared through the metadata log as a channel declares them
   and recovered from the definitions after a restart. Only the seams differ: `SimLinks`
   for the TCP links, the seeded rng and the virtual clock. Each queue has three replicas
   of the four nodes, so some node holds none and gets deliveries from the leader.
2. Clients are what a channel does, with nothing in between: publishers on random nodes
   publish numbered bodies (``publisher:seq``) and count a confirm when the node's
   `SimPublisher` (the production `Confirms`, told by the queue as a channel is) acks
   it; consumers on random nodes (prefetch 10) ack, reject (dead-lettered:
   ``x-dead-letter-strategy: at-least-once``) or requeue after a random delay. A client
   lives on its node and dies with it (`loop.Life`).
3. Faults in the safety phase: node crashes and restarts (the batch whose sync was in
   flight is lost), failed syncs (`LogFailed`: the node stops, as production's does, and
   is restarted), partitions, link resets that drop what is in flight, slow links
   (reordering across links), and replicas added to and removed from ``q``.
4. Checks, as the events happen: a message delivered for the first time (not
   redelivered) must not have been delivered for the first time before (no message
   enqueued twice), a consumer gets each publisher's first deliveries in publish order,
   and every replica of a Raft group (metadata, ``q``, ``dlq``) that applies an index
   applies an entry of the same term there (`CommittedLogs`, watching `RaftGroup.apply`
   for the run as a plant patches a class: Raft's State Machine Safety). After the
   safety phase every fault is healed and crashed nodes come back; then, within
   `drain_s`: every queue has a leader and serves (a probe published through every node
   is confirmed and consumed), every confirmed message has been consumed and acked from
   ``q`` or reached ``dlq`` (no confirmed message lost; at-least-once dead-lettering),
   and no leader holds a message checked out that its consumer acked or rejected (no
   settle lost on its way: ``cluster_submit_timeout`` is short, so submits do fail).
5. A failure is a `StackResult` with the violation; the seed replays it exactly, with
   ``--trace`` to print every event.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import random
import shutil
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from warren.amqp import methods as m
from warren.amqp.content import BasicProperties, Message, encode_properties
from warren.amqp.table import Typed
from warren.queue import Checkout, Discard, Enqueue, Entry, Return, Settle
from warren.raft import Entry as RaftEntry
from warren.runtime.broker import Broker
from warren.runtime.cluster import operations
from warren.runtime.cluster.node import ClusterNode
from warren.runtime.cluster.peers import PeerUnavailable, RemoteError
from warren.runtime.cluster.quorum import QuorumHost
from warren.runtime.cluster.raft_host import RaftGroup
from warren.runtime.config import Config
from warren.runtime.confirms import Confirms
from warren.runtime.durability import Durability
from warren.runtime.queues.host import REPLICATING, QueueHost
from warren.runtime.recovery import recover
from warren.runtime.stats import MessageStats
from warren.storage.log import LogFailed
from warren.storage.raftwal import RaftWal
from warren.testing.sim.links import SimLinks, SimNet
from warren.testing.sim.loop import Life, SimDeadlock, SimLoop
from warren.testing.sim.plants import PLANTS, patched

QUEUE: Final = "q"
DEAD: Final = "dlq"
VHOST: Final = "/"
EPOCH_S: Final = 1_700_000_000.0  # the virtual wall clock at time 0
TICK_MS: Final = 50
PREFETCH: Final = 10
STARTUP_S_MAX: Final = 120.0  # start, declare, and restarts after the heal: 30 s each at most
_PROPERTIES: Final = encode_properties(BasicProperties(delivery_mode=2))
_ARGUMENTS: Final = {
    QUEUE: {
        "x-queue-type": Typed("S", "quorum"),
        "x-dead-letter-exchange": Typed("S", ""),
        "x-dead-letter-routing-key": Typed("S", DEAD),
        "x-dead-letter-strategy": Typed("S", "at-least-once"),
        "x-overflow": Typed("S", "reject-publish"),
        "x-delivery-limit": Typed("l", 4),
    },
    DEAD: {"x-queue-type": Typed("S", "quorum")},
}


class StackViolation(AssertionError):
    """A property of the quorum stack failed."""


@dataclass(slots=True)
class StackOptions:
    node_count: int = 4
    safety_s: float = 12.0
    drain_s: float = 60.0
    publishers: int = 3
    messages: int = 20  # per publisher
    consumers: int = 3
    faults: bool = True
    trace: bool = False
    plant: str | None = None  # a bug of `warren.testing.sim.plants` patched in for the run


@dataclass(slots=True)
class StackResult:
    seed: int
    violation: str | None
    steps: int
    simulated_ms: int
    confirmed: int
    trace: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.violation is None


Key = tuple[str, int]  # (publisher, seq)


class Ledger:
    """What clients saw, and the checks on it (module docstring, point 4)."""

    def __init__(self) -> None:
        self.confirmed: set[Key] = set()
        self.first: dict[Key, str] = {}  # first-time deliveries from `q`: to which consumer
        self.last_seq: dict[tuple[str, str], int] = {}  # (consumer, publisher): last first seq
        self.acked: set[Key] = set()  # acked from `q`
        self.dead: set[Key] = set()  # consumed from `dlq`
        # (queue, msg_id) a consumer acked or rejected, not delivered since: the queue
        # must not keep it checked out (a settle lost on its way to the leader)
        self.settled: dict[tuple[str, int], str] = {}

    def delivered(self, consumer: str, queue: str, key: Key, redelivered: bool) -> None:
        if queue == DEAD:
            self.dead.add(key)
            return
        if redelivered:
            return
        earlier = self.first.get(key)
        if earlier is not None:
            raise StackViolation(
                f"message {key[0]}:{key[1]} delivered as new twice (to {earlier}, then to "
                f"{consumer}): enqueued twice"
            )
        self.first[key] = consumer
        last = self.last_seq.get((consumer, key[0]), 0)
        if key[1] <= last:
            raise StackViolation(
                f"consumer {consumer} got {key[0]}:{key[1]} after {key[0]}:{last}: "
                "out of publish order"
            )
        self.last_seq[consumer, key[0]] = key[1]

    def missing(self) -> list[Key]:
        """Confirmed messages neither acked from `q` nor seen in `dlq`."""
        return sorted(self.confirmed - self.acked - self.dead)


class CommittedLogs:
    """Raft's State Machine Safety on every group (module docstring, point 4): all the
    replicas that apply an index apply an entry of the same term there."""

    def __init__(self) -> None:
        self.terms: dict[tuple[str, int], tuple[int, str]] = {}  # first applied: term, node

    def applied(self, node: str, group_id: str, entry: RaftEntry) -> None:
        first, where = self.terms.setdefault((group_id, entry.index), (entry.term, node))
        if first != entry.term:
            raise StackViolation(
                f"{group_id}: {where} applied index {entry.index} of term {first}, "
                f"{node} one of term {entry.term}"
            )


def _raise(text: str) -> None:
    raise StackViolation(text)


def _key(entry: Entry) -> Key:
    message = entry.message
    assert isinstance(message, Message), "a delivery carries its message"
    publisher, _, seq = message.body.decode().rpartition(":")
    return publisher, int(seq)


class SimConsumer:
    """A consumer on one node: the `Subscriber` a channel would be (point 2)."""

    def __init__(self, world: StackWorld, node: SimNode, queue: str, name: str) -> None:
        self.world = world
        self.node = node
        self.queue = queue
        self.name = name

    def credit(self) -> int | None:
        return None

    global_prefetch = 0

    def blocked(self) -> bool:
        return False

    def subscribe(self) -> None:
        host = self.node.host(self.queue)
        command = Checkout(consumer=self.name, channel=self.name, prefetch_count=PREFETCH)
        host.subscribe(self, self.name, command, False)
        self.world.log(f"{self.name} consumes {self.queue} on {self.node.name}")

    def deliver(self, consumer_tag: str, entry: Entry, host: QueueHost) -> None:
        key = _key(entry)
        redelivered = entry.delivery_count > 1
        world = self.world
        world.ledger.settled.pop((self.queue, entry.msg_id), None)
        world.log(f"{self.name} got {key[0]}:{key[1]}{' redelivered' if redelivered else ''}")
        world.check(lambda: world.ledger.delivered(self.name, self.queue, key, redelivered))
        self.node.life.soon(world.rng.uniform(0.0, 0.2), self._settle, host, entry.msg_id, key)

    def _settle(self, host: QueueHost, msg_id: int, key: Key) -> None:
        world = self.world
        roll = world.rng.random()
        if self.queue == DEAD or not world.safety or roll < 0.85:
            if self.queue == QUEUE:
                world.ledger.acked.add(key)
            world.ledger.settled[self.queue, msg_id] = self.name
            host.settle(Settle([msg_id]))
        elif roll < 0.95:
            world.log(f"{self.name} rejects {key[0]}:{key[1]}")
            world.ledger.settled[self.queue, msg_id] = self.name
            host.settle(Discard([msg_id]))
        else:
            world.log(f"{self.name} requeues {key[0]}:{key[1]}")
            host.settle(Return([msg_id]))

    def queue_deleted(self, consumer_tag: str) -> None:
        """The leader cancelled it (it took this node for gone): consume again, as a
        client told by consumer_cancel_notify does."""
        self.world.log(f"{self.name} cancelled by the queue")
        self.node.life.soon(0.1, self.subscribe)


class SimPublisher:
    """The publishers of one node life as one channel in confirm mode: the production
    `Confirms`, told by the quorum host as a channel is (`Publisher`), flushed on the next
    turn as a connection flushes; its acks and nacks go to the ledger."""

    def __init__(self, world: StackWorld, life: Life) -> None:
        self.world = world
        self.life = life
        self.keys: dict[int, Key] = {}  # tag -> message, in tag order, unconfirmed
        self._flushing = False
        self.confirms = Confirms(None, self._ready, self._sent, MessageStats())

    def publish(self, host: QuorumHost, key: Key, enqueue: Enqueue) -> None:
        confirms = self.confirms
        self.keys[confirms.next_tag] = key
        if host.publish(enqueue, self, confirms.next_tag) is REPLICATING:
            confirms.expect(host)
        confirms.published(False, None, 0)

    def replicated(self, host: QueueHost, upto: int, count: int, refused: list[int] | None) -> None:
        self.confirms.replicated(host, upto, refused)

    def _ready(self) -> None:
        if not self._flushing:
            self._flushing = True
            self.life.soon(0, self._flush)

    def _flush(self) -> None:
        self._flushing = False
        for method in self.confirms.pending():
            self._sent(method)

    def _sent(self, method: m.Method) -> None:
        assert isinstance(method, m.BasicAck | m.BasicNack)
        keys = self.keys
        while keys and (tag := next(iter(keys))) <= method.delivery_tag:
            nacked = type(method) is m.BasicNack and tag == method.delivery_tag
            self.world.answered(keys.pop(tag), not nacked)


class SimNode:
    """One life of one node process: the production stack with the simulator's seams."""

    def __init__(self, world: StackWorld, name: str) -> None:
        self.world = world
        self.name = name
        self.life = Life(name)
        self.publisher = SimPublisher(world, self.life)
        self.cluster: ClusterNode | None = None
        self.durability: Durability | None = None
        self.ready = False

    def host(self, queue: str) -> QuorumHost:
        assert self.cluster is not None
        host = self.cluster.broker.queues[VHOST, queue]
        assert isinstance(host, QuorumHost)
        return host

    async def boot(self) -> None:
        world = self.world
        names = world.names
        config = Config(
            node_name=self.name,
            data_dir=world.directory / self.name,
            cluster_nodes=[f"{name}=sim:{number}" for number, name in enumerate(names, 1)],
            cluster_cookie="sim",
            raft_tick_ms=TICK_MS,
            raft_snapshot_entries=64,
            # short: submits fail in elections and partitions, and what must not be lost
            # (settles, cancels) is sent again; the channel's nack covers a publish
            cluster_submit_timeout=1_000,
            password_hashing_module="rabbit_password_hashing_sha256",  # PBKDF2: no time to lose
        )
        broker = Broker(config)
        links = SimLinks(world.net, self.life, names)
        rng = random.Random(world.rng.getrandbits(64))
        cluster = ClusterNode(
            broker, config, self._failed, links=links, rng=rng, clock=world.wall_clock
        )
        self.cluster = cluster
        # as `warren.server` starts a node: the Raft log, the definitions (recovered quorum
        # queues find their groups), then the cluster's metadata group
        await cluster.open()
        recovered = recover(broker, config.data_dir, self._failed)
        self.durability = recovered.durability
        cluster.attach(self.durability)
        await cluster.start()
        if recovered.dead_letters:  # then what expired while it was down
            await cluster.queues_known()
        recovered.carry_out()
        self.ready = True
        world.log(f"{self.name} up")

    def _failed(self) -> None:
        """The Raft host stopped (a failed sync): the node must stop and recover."""
        self.world.log(f"{self.name} stops: its Raft host failed")
        self.world.crash(self.name, restart_s=self.world.rng.uniform(0.2, 2.0))

    def kill(self) -> None:
        """The process dies: nothing it scheduled runs again, its unsynced writes are lost."""
        self.life.alive = False
        self.ready = False
        self.world.net.detach(self.name)
        self.close_files()

    def close_files(self) -> None:
        """What the OS does for a dead process: its files close, unsynced appends dropped."""
        cluster = self.cluster
        if cluster is not None:
            wal = cluster.raft._wal
            if wal is not None:
                wal.log.close(flush=False)
        if self.durability is not None:
            self.durability.log.close(flush=False)
            self.durability.definitions.close()


class StackWorld:
    """One seed's run (see the module docstring)."""

    def __init__(self, seed: int, options: StackOptions, directory: Path) -> None:
        self.seed = seed
        self.options = options
        self.directory = directory
        self.rng = random.Random(seed)
        self.loop = SimLoop(self.rng)
        self.loop.set_exception_handler(self._unhandled)
        self._context = contextvars.Context()  # the world's callbacks: part of no node's life
        self.net = SimNet(self.loop, self.rng)
        self.net.on_event = self.log
        self.names = [f"n{number}" for number in range(1, options.node_count + 1)]
        self.nodes: dict[str, SimNode] = {}
        self.ledger = Ledger()
        self.commits = CommittedLogs()
        self.trace: list[str] = []
        self.steps = 0
        self.violation: str | None = None
        self._publishers = 0
        self._consumers = 0
        self.safety = True
        self.phase = "start"  # for a run that hangs: where
        self._probes: dict[str, list[Key]] = {}  # node: its probes, after the heal
        self._armed: list[RaftWal] = []  # logs whose next sync fails

    def _unhandled(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        """An error no one handled in the runtime's callbacks or tasks is a finding; a
        dead node's tasks, dropped pending, are not."""
        message = str(context.get("message"))
        if message.startswith("Task was destroyed but it is pending"):
            return
        if "never retrieved" in message:
            # a failure no one waited for, reported when the garbage collector takes the
            # future: when that happens is no part of the seed, so not even the trace has it
            return
        error = context.get("exception")
        self.log(f"unhandled: {message} {error!r}")
        self.check(lambda: _raise(f"unhandled error in the runtime: {message} {error!r}"))

    def wall_clock(self) -> float:
        return EPOCH_S + self.loop.time()

    def log(self, text: str) -> None:
        self.steps += 1
        if self.options.trace:
            self.trace.append(f"{self.loop.time() * 1000:10.1f} {text}")

    def check(self, check: Callable[[], None]) -> None:
        try:
            check()
        except StackViolation as violation:
            if self.violation is None:
                self.violation = str(violation)
                self.log(f"VIOLATION {violation}")

    # --- nodes -------------------------------------------------------------------------------

    def start(self, name: str) -> SimNode:
        node = self.nodes[name] = SimNode(self, name)
        node.life.spawn(node.boot())
        return node

    def crash(self, name: str, restart_s: float | None) -> None:
        node = self.nodes.get(name)
        if node is None or not node.life.alive:
            return
        self.log(f"{name} crashes")
        node.kill()
        if restart_s is not None:  # scheduled by the world: the node's own life is over
            self.loop.call_later(restart_s, self._restart, name, context=self._context)

    def _restart(self, name: str) -> None:
        if self.nodes[name].life.alive:
            return
        self.log(f"{name} restarts")
        node = self.start(name)
        if self.safety:
            node.life.spawn(self._clients_on(node, publishers=1, consumers=1))
        else:
            node.life.spawn(self._drain_clients(node))

    def running(self) -> list[SimNode]:
        return [node for node in self.nodes.values() if node.ready and node.life.alive]

    # --- clients -----------------------------------------------------------------------------

    async def _clients_on(self, node: SimNode, publishers: int, consumers: int) -> None:
        while not node.ready:
            await asyncio.sleep(0.05)
        for _ in range(consumers):
            self.consumer(node, QUEUE)
        for _ in range(publishers):
            self._publishers += 1
            node.life.spawn(self._publish(node, f"p{self._publishers}", self.options.messages))

    def consumer(self, node: SimNode, queue: str) -> SimConsumer:
        self._consumers += 1
        consumer = SimConsumer(self, node, queue, f"c{self._consumers}@{node.name}")
        consumer.subscribe()
        return consumer

    async def _publish(self, node: SimNode, publisher: str, count: int) -> None:
        for seq in range(1, count + 1):
            await asyncio.sleep(self.rng.uniform(0.01, 0.3))
            self.publish(node, (publisher, seq))

    def publish(self, node: SimNode, key: Key) -> None:
        body = f"{key[0]}:{key[1]}".encode()
        message = Message("", QUEUE, _PROPERTIES, body)
        self.log(f"{key[0]} publishes {key[0]}:{key[1]} on {node.name}")
        node.publisher.publish(node.host(QUEUE), key, Enqueue(message, len(body)))

    def answered(self, key: Key, confirmed: bool) -> None:
        if confirmed:
            self.ledger.confirmed.add(key)
            self.log(f"confirm {key[0]}:{key[1]}")
        else:
            self.log(f"nack {key[0]}:{key[1]}")

    # --- faults ------------------------------------------------------------------------------

    async def _faults(self, until: float) -> None:
        rng = self.rng
        loop = self.loop
        while loop.time() < until:
            await asyncio.sleep(rng.uniform(0.2, 1.2))
            running = self.running()
            kind = rng.choice(
                ("crash", "crash", "disk", "partition", "reset", "slow", "membership")
            )
            if kind == "crash" and len(running) == len(self.names):
                self.crash(rng.choice(running).name, restart_s=rng.uniform(0.3, 3.0))
            elif kind == "disk" and running:
                self._fail_next_sync(rng.choice(running))
            elif kind == "partition":
                shuffled = rng.sample(self.names, len(self.names))
                cut = rng.randint(1, len(shuffled) - 1)
                self.log(f"partition {shuffled[:cut]} | {shuffled[cut:]}")
                self.net.partition(shuffled[:cut], shuffled[cut:])
                loop.call_later(rng.uniform(0.3, 3.0), self._heal)
            elif kind == "reset" and len(running) > 1:
                a, b = rng.sample(running, 2)
                self.net.reset(a.name, b.name)
            elif kind == "slow":
                self.log("links slow")
                self.net.slow_probability = 0.2
                loop.call_later(rng.uniform(0.5, 2.0), self._fast)
            elif kind == "membership" and running:
                node = rng.choice(running)
                node.life.spawn(self._change_members(node))

    def _heal(self) -> None:
        self.log("network heals")
        self.net.heal()

    def _fast(self) -> None:
        self.net.slow_probability = 0.0

    def _fail_next_sync(self, node: SimNode) -> None:
        assert node.cluster is not None
        wal = node.cluster.raft.wal
        self.log(f"{node.name}: the next sync fails")

        def failing(batch: object) -> int:
            raise LogFailed(f"simulated disk fault on {node.name}")

        wal.sync_batch = failing  # type: ignore[method-assign]
        self._armed.append(wal)

    async def _change_members(self, node: SimNode) -> None:
        """Add a replica of `q` on a node without one, or remove one (keeping three), as
        ``warrenctl add_member`` / ``delete_member`` do (`warren.runtime.cluster.operations`)."""
        assert node.cluster is not None
        members = sorted(node.host(QUEUE).members)
        others = [name for name in self.names if name not in members]
        adding = bool(others) and (len(members) <= 3 or self.rng.random() < 0.5)
        target = self.rng.choice(others if adding else members)
        self.log(f"{'add' if adding else 'delete'} member {target} of {QUEUE} via {node.name}")
        change = operations.add_member if adding else operations.delete_member
        try:
            voters = await change(node.cluster, VHOST, QUEUE, target)
        except (operations.MembershipError, PeerUnavailable, RemoteError) as error:
            self.log(f"membership change failed: {error}")
            return
        self.log(f"{QUEUE} voters now {voters}")

    # --- the run -----------------------------------------------------------------------------

    async def run(self) -> None:
        options = self.options
        loop = self.loop
        for name in self.names:
            self.start(name)
        await self._until(lambda: len(self.running()) == len(self.names), 30.0, "start")
        self.phase = "declare"
        for queue in (DEAD, QUEUE):
            if self.violation is None:
                await self._declare(self.rng.choice(self.running()), queue)
        await self._until(self._declared_everywhere, 30.0, "declare")
        if self.violation is not None:
            return
        self.phase = "safety"
        self.log(f"replicas of {QUEUE}: {sorted(self.running()[0].host(QUEUE).members)}")
        nodes = self.running()
        rng = self.rng
        for _ in range(options.consumers):
            node = rng.choice(nodes)
            node.life.spawn(self._clients_on(node, publishers=0, consumers=1))
        node = rng.choice(nodes)
        node.life.spawn(self._clients_on_dead_letters(node))
        for _ in range(options.publishers):
            node = rng.choice(nodes)
            node.life.spawn(self._clients_on(node, publishers=1, consumers=0))
        until = loop.time() + options.safety_s
        if options.faults:
            await self._faults(until)
        await asyncio.sleep(max(0.0, until - loop.time()))
        if self.violation is not None:
            return
        await self._drain()

    async def _declare(self, node: SimNode, queue: str) -> None:
        """queue.declare on `node`, as a channel does it: through the metadata log."""
        assert node.cluster is not None
        broker = node.cluster.broker
        record, _ = broker.vhosts[VHOST].declare_queue(
            queue,
            owner=None,
            passive=False,
            durable=True,
            exclusive=False,
            auto_delete=False,
            arguments=dict(_ARGUMENTS[queue]),
        )
        declared = broker.replicated_declare(record)
        assert declared is not None, "a quorum queue in a cluster is declared through the log"
        self.log(f"declare {queue} on {node.name}")
        try:
            await declared
        except PeerUnavailable as error:  # no metadata leader in time yet: a client retries
            self.log(f"declare {queue} failed: {error}")
            await asyncio.sleep(0.2)
            await self._declare(node, queue)

    def _declared_everywhere(self) -> bool:
        return all(
            (VHOST, queue) in node.cluster.broker.queues
            for node in self.running()
            for queue in (QUEUE, DEAD)
            if node.cluster is not None
        )

    async def _clients_on_dead_letters(self, node: SimNode) -> None:
        while not node.ready:
            await asyncio.sleep(0.05)
        self.consumer(node, DEAD)

    async def _drain(self) -> None:
        """Heal everything; then every queue must serve and every confirmed message come
        out (point 4)."""
        self.safety = False
        self.phase = "heal"
        self.log("heal: faults stop, crashed nodes restart")
        self.net.heal()
        self.net.slow_probability = 0.0
        for wal in self._armed:  # a disk fault not yet hit is one no more
            vars(wal).pop("sync_batch", None)
        for node in list(self.nodes.values()):
            if node.life.alive:
                node.life.spawn(self._drain_clients(node))
            else:
                self._restart(node.name)  # with its drain clients
        await self._until(lambda: len(self.running()) == len(self.names), 30.0, "restart")
        self.phase = "drain"

        def drained() -> bool:
            return not self.ledger.missing() and not self._unprobed() and not self._lost_settles()

        await self._until(drained, self.options.drain_s, "drain")

    async def _drain_clients(self, node: SimNode) -> None:
        """After the heal, on every node (again if it restarts): consumers of both queues,
        and a probe published until one is confirmed and consumed (a probe lost with a
        crash or nacked goes again, as the next of its numbers)."""
        while not node.ready:
            await asyncio.sleep(0.05)
        self.consumer(node, QUEUE)
        self.consumer(node, DEAD)
        probes = self._probes.setdefault(node.name, [])
        while node.name in self._unprobed():
            probes.append((f"probe-{node.name}", len(probes) + 1))
            self.publish(node, probes[-1])
            for _ in range(50):
                await asyncio.sleep(0.1)
                if node.name not in self._unprobed():
                    return

    def _unprobed(self) -> list[str]:
        """Nodes none of whose probes is yet confirmed and consumed."""
        ledger = self.ledger
        through = ledger.confirmed & (ledger.acked | ledger.dead)
        return [name for name in self.names if not through.intersection(self._probes.get(name, ()))]

    async def _until(self, condition: Callable[[], bool], timeout_s: float, phase: str) -> None:
        deadline = self.loop.time() + timeout_s
        while not condition():
            if self.violation is not None:
                return
            if self.loop.time() >= deadline:
                self.violation = self._stuck(phase, timeout_s)
                self.log(f"VIOLATION {self.violation}")
                return
            await asyncio.sleep(0.1)

    def _lost_settles(self) -> list[str]:
        """Messages a queue's leader holds checked out that their consumer acked or
        rejected (and nobody got since): the settle never reached the queue, so the
        message stays with a consumer that will not settle it again."""
        settled = self.ledger.settled
        lost = []
        for queue in (QUEUE, DEAD):
            for node in self.running():
                host = node.host(queue)
                if not host.leader:
                    continue
                machine = host.machine
                for consumer in machine.consumers():
                    for entry in machine.checked_out_entries(consumer):
                        by = settled.get((queue, entry.msg_id))
                        if by is not None:
                            lost.append(f"{queue}#{entry.msg_id} settled by {by}")
        return lost

    @contextmanager
    def observing_commits(self) -> Iterator[None]:
        """Every entry any group's replica applies goes to `CommittedLogs` too."""
        original = RaftGroup.apply
        world = self

        def apply(group: RaftGroup, entry: RaftEntry) -> None:
            original(group, entry)
            applied = world.commits.applied
            world.check(functools.partial(applied, group._host.node, group.group_id, entry))

        with patched(RaftGroup, "apply", apply):
            yield

    def _groups(self, queue: str) -> list[RaftGroup]:
        groups = (node.host(queue).group for node in self.running())
        return [group for group in groups if group is not None]

    def _stuck(self, phase: str, timeout_s: float) -> str:
        missing = self.ledger.missing()
        leaders = {
            queue: sorted({str(group.leader) for group in self._groups(queue)})
            for queue in (QUEUE, DEAD)
        }
        probes = self._unprobed()
        shown = ", ".join(f"{p}:{s}" for p, s in missing[:10])
        lost = self._lost_settles()
        return (
            f"{phase} not done after {timeout_s} s: {len(missing)} confirmed messages neither "
            f"acked nor dead-lettered ({shown}); running {[n.name for n in self.running()]}; "
            f"leaders {leaders}; no probe through from {probes}; "
            f"{len(lost)} settled messages still checked out ({', '.join(lost[:10])})"
        )


@contextmanager
def _quiet() -> Iterator[None]:
    """The runtime logs every fault the simulator injects: not worth printing."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


def run_stack_seed(
    seed: int,
    options: StackOptions | None = None,
    scenario: Callable[[StackWorld], Coroutine[object, object, None]] | None = None,
) -> StackResult:
    """One seed's run: the default scenario (`StackWorld.run`), or a test's own."""
    options = options if options is not None else StackOptions()
    shm = Path("/dev/shm")
    directory = Path(tempfile.mkdtemp(prefix="warren-sim-", dir=shm if shm.is_dir() else None))
    world = StackWorld(seed, options, directory)
    loop = world.loop
    try:
        plant = PLANTS[options.plant]() if options.plant is not None else nullcontext()
        with _quiet(), plant, world.observing_commits():
            asyncio.set_event_loop(loop)
            # every phase has its bound; this one catches a wait that has none
            run_s_max = STARTUP_S_MAX + options.safety_s + options.drain_s
            try:
                run = world.run() if scenario is None else scenario(world)
                loop.run_until_complete(asyncio.wait_for(run, run_s_max))
            except SimDeadlock as error:
                world.violation = world.violation or f"deadlock: {error}"
            except TimeoutError:
                world.violation = world.violation or (
                    f"the run did not end in {run_s_max:.0f} simulated s: {world.phase} hangs"
                )
            except Exception as error:  # a seed reports, whatever it found
                world.violation = world.violation or f"{world.phase}: {error!r}"
    finally:
        for node in world.nodes.values():
            node.life.alive = False
        for node in world.nodes.values():
            node.close_files()
        asyncio.set_event_loop(None)
        loop.close()
        shutil.rmtree(directory, ignore_errors=True)
    return StackResult(
        seed=seed,
        violation=world.violation,
        steps=world.steps,
        simulated_ms=int(loop.time() * 1000),
        confirmed=len(world.ledger.confirmed),
        trace=world.trace,
    )
