"""This node's part in a cluster: its peers, its Raft groups, metadata and quorum queues.

Theory of operation:
1. A node is in a cluster when ``cluster_nodes`` names other nodes (``name=host:port``,
   their cluster listeners). `Peers` keeps one connection to each, `RaftHost` runs every
   Raft group of the node on one write-ahead log (``<data_dir>/raft``). The nodes it
   knows are those of ``cluster_nodes``, those whose address the metadata group carries
   (nodes that joined later) and any node that proved the cookie by dialing this one.
2. The metadata group has every node of ``cluster_nodes`` as a voter: nodes started with
   the same list bootstrap it together; a node joining later (`join`, through the first
   running node it reaches) is added by the leader as a learner and promoted when it has
   caught up. Of a node of several workers only worker 0 votes; the others stay learners
   (`warren.cluster.nodes.metadata_voter`), and a log written when they voted converges
   to that through membership changes (`warren.raft.node`, point 7).
3. A quorum queue is one Raft group named after the queue and a token chosen by the node
   that declared it (a queue deleted and declared again is a new group). Its replicas are
   the declaring node and ``x-quorum-initial-group-size - 1`` others chosen at random
   (`warren.cluster.placement`); the placement travels with the queue's metadata
   operation, so every member starts the group with the same voters.
4. `submit` gets a command to a group's leader: proposed here when this node leads,
   otherwise sent to the leader this node knows of (or to a member, which answers with
   the leader), retrying through elections until ``cluster_submit_timeout`` passes.
5. Classic queues live on the node that declared them; the other nodes use them through
   proxies (`warren.runtime.cluster.remote`), which also carry a quorum queue's
   deliveries to consumers on nodes that hold no replica of it.
6. In a cluster of nodes of several worker processes each (`warren.runtime.workers`),
   every worker is a member (`nodes_of` names this node's; another node's worker ``i``
   is ``<name>-w<i>@<host>``), and so is a quorum queue's replica: placement chooses
   nodes (two replicas never share a node), then each node's worker that hosts the
   fewest quorum replicas (`replica_member`: this worker, then the lowest, on a tie), so
   that a node's queues spread over its workers and their Raft WALs. Operators and the
   management API name nodes (`node_of`); replicas written when a node's replicas all
   lived on its worker 0 (its *front*, named after it) are members like any other. Only
   fronts found the metadata group; every other worker joins it as a learner (its node's
   front's address ``+ i`` is its address on every node: `node_known`), so a node learns
   how many workers each other node runs from the group, and nodes of a cluster may run
   different numbers of workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from warren.cluster.metadata import (
    NodeAddress,
    Operation,
    PutQueue,
    QueueDeclare,
    QueueDelete,
    QueueMembers,
)
from warren.cluster.nodes import (
    METADATA_GROUP,
    metadata_voter,
    node_id,
    parse_nodes,
    worker_name,
    worker_of,
)
from warren.cluster.placement import place_replicas
from warren.cluster.queue_entries import message_record
from warren.model import QueueRecord, QueueType
from warren.runtime.cluster import operations
from warren.runtime.cluster.calls import (
    RETRY,
    AddMember,
    Applied,
    AppliedThrough,
    Campaign,
    Configuration,
    Consumers,
    Counts,
    Forward,
    GroupStatus,
    LeaderCounters,
    LeaderRequest,
    Led,
    NodeDetails,
    NodeRequest,
    Propose,
    Redirect,
    RemoveMember,
    Reply,
    ReplyLive,
    Request,
    Retry,
    Status,
    Transfer,
    from_wire,
    to_wire,
)
from warren.runtime.cluster.metadata import (
    MetadataMachine,
    ReplicatedDefinitions,
    TransientDefinitions,
    logged,
)
from warren.runtime.cluster.peers import PeerLinks, Peers, PeerUnavailable, RemoteError
from warren.runtime.cluster.quorum import QuorumHost
from warren.runtime.cluster.raft_host import HostStopped, NotLeader, RaftGroup, RaftHost
from warren.runtime.cluster.remote import RemoteHost, RemoteQueues
from warren.runtime.durability import queue_definition
from warren.runtime.queues.classic import ClassicHost
from warren.runtime.queues.host import Placement, QueueHost

if TYPE_CHECKING:
    from warren.amqp.content import Message
    from warren.runtime.broker import Broker
    from warren.runtime.config import Config
    from warren.runtime.durability import Durability

log = logging.getLogger("warren.cluster")
R = TypeVar("R")

RETRY_S: Final = 0.05
RECHECK_S: Final = 1.0  # for a home to check again whether its queue is to go by itself
LEADER_WAIT_S: Final = 10.0
TRANSFER_WAIT_S: Final = 2.0  # for the leader the locator chose, when another won
JOIN_PROBE_S: Final = 10.0  # for a running peer to say the cluster exists
REAP_GRACE_TICKS: Final = 20  # two election timeouts
SETTLE_WAIT_S: Final = 2.0  # for a node to apply a metadata entry before an -ok goes anyway
REPLY_LIVE_WAIT_S: Final = 2.0  # for a node to say whether its reply-to address is live
CATCH_UP_WAIT_S: Final = 10.0  # for a restarted node to catch up before it listens
WORKERS_MAX: Final = 256  # the most workers a node is named for by the -w<i> convention


def group_prefix(vhost: str, name: str) -> str:
    return f"qq:{len(vhost)}:{vhost}:{len(name)}:{name}:"


class ClusterHosts:
    """The broker's `HostFactory` in a cluster: quorum queues get a `QuorumHost` and are
    declared through the metadata log; classic queues are this node's (other nodes' get a
    `RemoteHost` from the metadata log, `RemoteQueues.proxy`)."""

    __slots__ = ("cluster",)

    def __init__(self, cluster: ClusterNode) -> None:
        self.cluster = cluster

    def make(self, record: QueueRecord) -> QueueHost:
        if record.queue_type is QueueType.QUORUM:
            return self.cluster.quorum_host(record)
        return ClassicHost(self.cluster.broker, record, ClusterHome(self.cluster))

    def replicated_declare(self, record: QueueRecord) -> asyncio.Future[None] | None:
        cluster = self.cluster
        if record.queue_type is not QueueType.QUORUM or cluster.applying:
            return None
        return cluster.propose_declare(record)


class ClusterHome:
    """The home of a classic queue of this node, in a cluster (the `Home` its `ClassicHost`
    asks). The queue's delete goes through the metadata log whoever asks (metadata doc,
    2): a client, or the queue itself when it auto-deletes or expires, so every node
    deletes it, and what goes with it (its bindings, auto-deleted exchanges), in log
    order. While the delete is on its way the queue's timer does nothing (an expired
    queue would ask again at once); a delete the log did not take (no leader in time)
    leaves the queue as it was, and it checks again a little later whether it is still to
    go by itself."""

    __slots__ = ("_deleting", "cluster")

    def __init__(self, cluster: ClusterNode) -> None:
        self.cluster = cluster
        self._deleting: asyncio.Future[object] | None = None

    def forward_delete(
        self, host: ClassicHost, if_unused: bool, if_empty: bool
    ) -> asyncio.Future[int] | None:
        """The log's delete, on its way (None: the log's delete is being applied here, or
        the queue is exclusive)."""
        if self._deleting is not None and not self.cluster.applying:
            return cast("asyncio.Future[int]", self._deleting)  # asked again meanwhile
        pending = self.cluster.logged_delete(host)
        if pending is not None:
            self._deleting = pending
            pending.add_done_callback(lambda done: self._logged(host, done))
        return cast("asyncio.Future[int] | None", pending)

    def deleting(self) -> bool:
        return self._deleting is not None

    def _logged(self, host: ClassicHost, done: asyncio.Future[object]) -> None:
        self._deleting = None
        error = None if done.cancelled() else done.exception()
        if error is not None:
            log.warning("queue %r in vhost %r not deleted: %s", host.name, host.record.vhost, error)
            asyncio.get_running_loop().call_later(RECHECK_S, self._recheck, host)

    def _recheck(self, host: ClassicHost) -> None:
        self.cluster.broker.auto_delete(host)  # gone with its last consumer, if it had one
        host.on_timer()  # x-expires ran out, if it has one


class ClusterNode:
    def __init__(
        self,
        broker: Broker,
        config: Config,
        on_failure: Callable[[], None] = lambda: None,
        describe: Callable[[], dict[str, Any]] | None = None,
        *,
        links: PeerLinks | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        nodes_of: Mapping[str, str] | None = None,
        local_links: Mapping[str, str] | None = None,
    ) -> None:
        """`links`, `rng` and `clock` are the simulator's seams (`warren.testing.sim.stack`):
        by default the node talks TCP (`Peers`), draws from the OS's entropy and stamps
        entries with the wall clock. `nodes_of`: each member's node, when members are the
        workers of nodes of several (module doc, 6). `local_links`: the Unix socket of
        each worker of this node, this one's included, for a worker's `Peers` (its rule 7)."""
        self.broker = broker
        self.nodes_of: Mapping[str, str] = nodes_of or {}
        # the node as the management API shows it, for the other nodes' /api/nodes
        self.describe = describe
        self.config = config
        self.name = config.node_name
        self.nodes = parse_nodes(config.cluster_nodes)
        if not config.cluster_cookie:
            raise ValueError("a cluster needs cluster_cookie: the same secret on every node")
        addresses = {node: at for node, at in self.nodes.items() if node != self.name}
        host = self.nodes.get(self.name, (config.bind[0], config.cluster_port))[0]
        self.peers: PeerLinks = (
            links
            if links is not None
            else Peers(
                self.name, config.cluster_cookie, host, config.cluster_port, addresses, local_links
            )
        )
        self._rng = rng if rng is not None else random.Random()
        self.raft = RaftHost(
            self.name,
            self.peers,
            config.data_dir / "raft",
            tick_ms=config.raft_tick_ms,
            snapshot_entries=config.raft_snapshot_entries,
            segment_max_bytes=config.raft_wal_max_size_bytes,
            rng=self._rng,
            clock=clock,
            on_failure=lambda _error: on_failure(),  # logged by the host; the node stops
        )
        # a restarted worker's recovered quorum groups may list other nodes' workers before
        # it learns them from the metadata group: their ids read as names by convention
        # from the start, so a member list never holds a bare id (module doc, 6)
        for _front, worker in self._conventional_workers():
            self.raft.names.guess(worker)
        self.remote = RemoteQueues(self)
        self.metadata = MetadataMachine(self)
        self.transient = TransientDefinitions(self)
        self.meta: RaftGroup | None = None
        self.definitions: ReplicatedDefinitions
        self.queues: dict[str, QuorumHost] = {}  # group id -> host
        self._adopted: dict[tuple[str, str], tuple[str, list[str]]] = {}
        self._forwarders: dict[str, _Forwarder] = {}
        self._reaping: asyncio.TimerHandle | None = None
        self._checks: set[asyncio.Future[None]] = set()  # what a link that came up started
        # names this process's consumers: those of an earlier life of the node are stale
        self.incarnation = f"{self._rng.getrandbits(32):08x}"
        self._numbers = itertools.count(1)  # of this process's metadata operations
        broker.cluster = self
        broker.hosts = ClusterHosts(self)

    # --- life cycle --------------------------------------------------------------------------

    async def open(self) -> None:
        """The Raft log, before the broker's definitions are rebuilt (they find their groups)."""
        await self.raft.start()

    def attach(self, durability: Durability) -> None:
        """Replicate the definitions this node changes from now on."""
        self.definitions = ReplicatedDefinitions(durability.definitions, self)
        durability.definitions = self.definitions  # type: ignore[assignment]
        durability.observer = self.transient
        for node, (host, port) in self.definitions.store.cluster_nodes().items():
            self.node_known(node, host, port)  # joined after the cluster formed

    async def start(self) -> None:
        self.peers.serve(self._serve)
        self.peers.on_link(self._link)
        await self.peers.start()
        seed: str | None = None
        existing: list[str] = []
        members: list[str] | None = None
        restarted = METADATA_GROUP in self.raft.recovered_groups()
        if not restarted:
            founding = self._founding_members()
            seed, existing = await self._existing_members()
            if not existing and founding is None:
                log.info("node %s waits for the metadata group, to join it", self.name)
            while not existing and founding is None:
                await asyncio.sleep(RETRY_S)
                seed, existing = await self._existing_members()
            if not existing or self.name in existing:
                members = existing or founding
        self.meta = self.raft.add_group(METADATA_GROUP, self.metadata, members, metadata_voter)
        if seed is not None and self.name not in existing:
            await operations.join(self, seed)  # a new node in a running cluster
        elif restarted:
            self._name_workers(self.meta)
            await self._caught_up(self.meta)
        log.info("node %s in cluster with %s", self.name, ", ".join(sorted(self.nodes)))

    def _founding_members(self) -> list[str] | None:
        """Whom this node founds the metadata group with when none exists yet; None if it
        never does, but joins the group once one exists (module doc, 2 and 6). Nodes of
        one process: every node it knows. The workers of a node on its own: all of them,
        which each lists the same (the voter its worker 0, the others learners from the
        start). In a cluster of nodes of several workers: the fronts alone, as each node
        knows only its own workers; the others join."""
        known = sorted({*self.nodes, self.name})
        voters = [node for node in known if metadata_voter(node)]
        if len(voters) <= 1:
            return known
        return voters if metadata_voter(self.name) else None

    def _name_workers(self, meta: RaftGroup) -> None:
        """Other nodes' workers in the metadata group's configuration that this node has
        no name (nor address) for: a cluster formed by the layout before, where every
        worker listed every node's workers in its ``cluster_nodes`` and none joined (so the
        group recorded no address of theirs). Named by the ``-w<i>`` convention after the
        nodes this node knows (their ids are the names' CRC: `node_id`), at their front's
        address ``+ i`` (`node_known`); they then become learners (module doc, 2)."""
        ids = set(meta.node.membership.members)
        for front, worker in self._conventional_workers():
            if node_id(worker) in ids and worker not in self.nodes:
                self.node_known(worker, *self.nodes[front])

    def _conventional_workers(self) -> Iterator[tuple[str, str]]:
        """(node, name) of every name a worker of a node this one knows could have, by the
        ``-w<i>`` convention (module doc, 6), up to `WORKERS_MAX` a node."""
        for front in [node for node in self.nodes if worker_of(node) is None]:
            for index in range(1, WORKERS_MAX):
                yield front, worker_name(front, index)

    async def _caught_up(self, meta: RaftGroup) -> None:
        """After a restart, before the node listens (as RabbitMQ waits for its tables):
        until it applied what the metadata group's leader had committed when asked (the
        queues, exchanges and bindings made while it was down, other homes' classic
        queues among them), so that a client connecting at once finds them. Bounded by
        `CATCH_UP_WAIT_S`: with no leader to ask (most of the cluster is down), the node
        serves what it has, and learns the rest as the log comes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CATCH_UP_WAIT_S
        while loop.time() < deadline:
            leader = meta.leader
            if leader == self.name:
                return  # elected: it holds every committed entry
            if leader is not None and self.peers.connected(leader):
                with contextlib.suppress(PeerUnavailable, RemoteError):
                    status = await self.ask(leader, GroupStatus(METADATA_GROUP), 2.0)
                    if status is not None and status["role"] == "leader":
                        commit = cast("int", status["commit"])
                        # entries applied or a snapshot installed: the Raft log's count
                        while meta.node.log.applied < commit and loop.time() < deadline:
                            await asyncio.sleep(RETRY_S)
                        return
            await asyncio.sleep(RETRY_S)
        log.warning("node %s serves before it caught up with the metadata log", self.name)

    async def queues_known(self) -> None:
        """Until every other node has sent this one its own classic queues and bindings
        since their link came up (`RemoteQueues.heard`), so that what recovery
        dead-letters finds a dead-letter queue whose home is another node, as RabbitMQ's
        replicated queue table does. Bounded by `CATCH_UP_WAIT_S`: a node that is down
        has no queue to take a message anyway."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CATCH_UP_WAIT_S
        others = set(self.nodes) - {self.name}
        while not others <= self.remote.heard:
            if loop.time() >= deadline:
                missing = ", ".join(sorted(others - self.remote.heard))
                log.warning("node %s dead-letters before it heard from %s", self.name, missing)
                return
            await asyncio.sleep(RETRY_S)

    async def _existing_members(self) -> tuple[str | None, list[str]]:
        """A running peer and the metadata group's members as it knows them; (None, [])
        once every other node of ``cluster_nodes`` answered that it has no metadata group
        yet (the nodes are starting together and bootstrap it), or none said it has one
        within `JOIN_PROBE_S` (the others are not up yet)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + JOIN_PROBE_S
        others = {node for node in self.nodes if node != self.name}
        fresh: set[str] = set()
        while loop.time() < deadline and not others <= fresh:
            for node in sorted(others - fresh):
                if not self.peers.connected(node):
                    continue
                try:
                    status = await self.ask(node, Status(), 1.0)
                except PeerUnavailable:
                    continue
                members = status["metadata"].get("members") if status["metadata"] else None
                if members:
                    return node, list(members)
                fresh.add(node)
            await asyncio.sleep(RETRY_S)
        return None, []

    async def close(self) -> None:
        await self.raft.close()
        await self.peers.close()

    # --- quorum queues -------------------------------------------------------------------------

    @property
    def applying(self) -> bool:
        """A metadata operation is being applied (its changes are not proposed again)."""
        return self.definitions.applying

    def propose_declare(self, record: QueueRecord) -> asyncio.Future[None]:
        """A quorum queue declared on this node: out of the model again, into the metadata
        log with its placement; done once it exists here (from the log) with a leader."""
        vhost = self.broker.vhosts[record.vhost]
        vhost.delete_queue(record.name)
        size = _initial_size(record, self.config.quorum_cluster_size)
        nodes = place_replicas(self.front, self.node_names(), size, self._rng)
        members = [self.replica_member(node) for node in nodes]  # this node's first
        group_id = group_prefix(record.vhost, record.name) + f"{self._rng.getrandbits(32):08x}"
        operation = PutQueue(queue_definition(record), (group_id, members))
        leader = self._first_leader(record, members)
        return asyncio.ensure_future(self._declared(operation, group_id, leader))

    async def _elected_elsewhere(self, group_id: str, leader: str, deadline: float) -> None:
        """A queue declared here without a replica here: `leader` campaigns, and the
        declare is done once the group has a leader (or `deadline` passed); when another
        member's election timer came first, once it handed leadership to `leader` (or
        `TRANSFER_WAIT_S` passed), as `_declared` does with a replica here."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(PeerUnavailable, RemoteError):
            await self.ask(leader, Campaign(group_id), 2.0)
        transferring = False
        while loop.time() < deadline:
            with contextlib.suppress(PeerUnavailable, RemoteError):
                status = await self.ask(leader, GroupStatus(group_id), 2.0)
                elected = status["leader"] if status is not None else None
                if elected == leader:
                    return
                if elected is not None and not transferring:
                    await self.leader_call(Transfer(group_id, leader))
                    transferring = True
                    deadline = min(deadline, loop.time() + TRANSFER_WAIT_S)
            await asyncio.sleep(RETRY_S)

    def _first_leader(self, record: QueueRecord, members: list[str]) -> str:
        """RabbitMQ's leader locator: the x-queue-leader-locator argument, else the
        queue-leader-locator policy key, else the node's queue_leader_locator setting.
        client-local: this node; balanced (and the older least-leaders): the member that
        leads the fewest quorum queues; random: any member. `members` are the placement's,
        this node's first."""
        vhost = self.broker.vhosts[record.vhost]
        argument = record.arguments.get("x-queue-leader-locator")
        policy = vhost.policies.match_queue(record)
        locator = (
            str(argument.value)
            if argument is not None
            else str(policy.definition.get("queue-leader-locator", ""))
            if policy is not None and "queue-leader-locator" in policy.definition
            else self.config.queue_leader_locator
        )
        local = members[0]
        if locator in ("balanced", "least-leaders"):
            led = Counter(
                self.node_of(host.group.leader)
                for host in self.queues.values()
                if host.group is not None and host.group.leader is not None
            )
            return min(members, key=lambda m: (led[self.node_of(m)], m != local, m))
        if locator == "random":
            return self._rng.choice(members)
        return local

    async def _declared(self, operation: PutQueue, group_id: str, leader: str) -> None:
        await self.replicate(operation)
        stored = operation.queue
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_WAIT_S
        host = self.broker.queues.get((stored.vhost, stored.name))
        while host is None and loop.time() < deadline:  # this node applies it a bit later
            await asyncio.sleep(RETRY_S)
            host = self.broker.queues.get((stored.vhost, stored.name))
        if not isinstance(host, QuorumHost) or host.group_id != group_id:
            return  # another declare of the name came first: the caller checks it
        group = host.group
        if group is None:  # a worker that is not its node's front (module doc, 6)
            await self._elected_elsewhere(group_id, leader, deadline)
            return
        if leader == self.name:
            group.campaign()
        else:
            with contextlib.suppress(PeerUnavailable):
                await self.ask(leader, Campaign(group_id), 2.0)
        while group.leader is None and loop.time() < deadline:
            await asyncio.sleep(RETRY_S)
        if group.leader not in (None, leader):  # another member's election timer came first
            with contextlib.suppress(PeerUnavailable, RemoteError):
                await self.leader_call(Transfer(group_id, leader))
            deadline = min(deadline, loop.time() + TRANSFER_WAIT_S)
            while group.leader != leader and loop.time() < deadline:
                await asyncio.sleep(RETRY_S)

    def quorum_host(self, record: QueueRecord) -> QuorumHost:
        """The host of a quorum queue the model just got: from the metadata log (with the
        placement its declare chose, `adopt_placement`) or recovered from the Raft log."""
        key = (record.vhost, record.name)
        placement = self._adopted.pop(key, None)
        prefix = group_prefix(*key)
        found = [g for g in self.raft.recovered_groups() if g.startswith(prefix)]
        if placement is not None:  # a new queue: its members start the group together
            group_id, members = placement
            replica = self.name in members
        elif found:  # recovered: the group's membership is in the Raft log
            group_id, members, replica = found[0], [], True
        else:  # recovered, and this node holds no replica of it
            group_id, members, replica = prefix, [], False
        host = QuorumHost(self, record, group_id, members)
        if replica:
            host.group = self.raft.add_group(group_id, host.replica, members or None)
            host.members = host.group.members
        self.queues[group_id] = host
        return host

    def adopt_placement(self, vhost: str, name: str, placement: Any) -> None:
        if placement is not None:
            self._adopted[vhost, name] = placement

    def placements(self) -> dict[tuple[str, str], tuple[str, list[str]]]:
        return {
            (host.record.vhost, host.record.name): (host.group_id, list(host.members))
            for host in self.queues.values()
        }

    async def set_members(self, host: QuorumHost, configuration: Configuration) -> None:
        """Record a queue's new member list in the metadata group, tagged with the index
        of the configuration it comes from; back once applied here (or once a newer list
        came first: `warren.cluster.metadata`, point 6)."""
        record = host.record
        members = configuration.members
        await self.replicate(
            QueueMembers(record.vhost, record.name, host.group_id, members, configuration.index)
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_WAIT_S
        while (
            sorted(host.members) != sorted(members)
            and self.metadata.state.configurations.get(host.group_id, 0) <= configuration.index
            and loop.time() < deadline
        ):
            await asyncio.sleep(RETRY_S)

    async def learn_placement(self, host: QuorumHost) -> None:
        """A queue this node recovered without a replica knows neither its group nor its
        members (`quorum_host`): the first node that hosts the group says both
        (`GroupStatus` resolves the name's prefix there); `PeerUnavailable` if none does.
        Nothing to learn for any other queue, nor once the metadata log named the group
        while the question was on its way (`members_changed`): the answer is that node's
        Raft configuration, which lags the log's member list while a member is added (the
        list first, then the learner), so it would take a new member off its own list,
        and off the placements its metadata snapshots keep, for good."""
        prefix = group_prefix(host.record.vhost, host.record.name)
        if host.group_id != prefix:
            return
        for node in sorted(self.nodes):
            if node == self.name or not self.peers.connected(node):
                continue
            with contextlib.suppress(PeerUnavailable, RemoteError):
                status = await self.ask(node, GroupStatus(host.group_id), 2.0)
                if host.group_id != prefix:
                    return  # the log's word came first
                if status is not None:
                    self._learn_group_id(host, str(status["group"]))
                    host.members = [str(member) for member in cast("list[str]", status["members"])]
                    return
        raise PeerUnavailable("any", f"no node names the group of {host.group_id}")

    async def current_members(self, host: QuorumHost) -> Configuration:
        """A queue's members as its leader's Raft configuration has them (voters and
        learners), with its index: what a membership change starts from, since this node's
        member list
        may be stale (it restarted, it learned the group late, a change failed halfway).
        `PeerUnavailable` if no leader answers within ``cluster_submit_timeout``."""
        await self.learn_placement(host)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.cluster_submit_timeout / 1000
        hint: str | None = None
        while loop.time() < deadline:
            group = self.raft.group(host.group_id)
            if group is not None and group.is_leader:
                return Configuration(group.members, group.membership_index)
            known = hint or (group.leader if group is not None else None)
            hint = None
            for node in [known] if known else self._members_of(host.group_id):
                if node is None or node == self.name or not self.peers.connected(node):
                    continue
                with contextlib.suppress(PeerUnavailable, RemoteError):
                    status = await self.ask(node, GroupStatus(host.group_id), 2.0)
                    if status is not None and status["role"] == "leader":
                        members = [str(member) for member in cast("list[str]", status["members"])]
                        return Configuration(members, int(cast("int", status["configuration"])))
                    if status is not None and status["leader"] not in (None, node):
                        hint = str(status["leader"])
                        break
            if hint is None:
                await asyncio.sleep(RETRY_S)
        raise PeerUnavailable("any", f"no leader of {host.group_id} said its members in time")

    def members_changed(self, vhost: str, name: str, group_id: str, members: list[str]) -> None:
        """A queue's member list as the metadata group has it: start or drop the replica."""
        host = self.broker.queues.get((vhost, name))
        if not isinstance(host, QuorumHost) or group_id == group_prefix(vhost, name):
            return  # a bare prefix names no group (a node that did not know it wrote it)
        if host.group_id != group_id:
            if host.group_id != group_prefix(vhost, name) or not group_id.startswith(host.group_id):
                return  # another queue of the name (deleted and declared again)
            self._learn_group_id(host, group_id)
        gone = sorted(set(host.members) - set(members))
        host.members = list(members)
        for node in gone:  # its replica may not have delivered all it held: now the leader's
            host.hand_again(node)
        if self.name in members and host.group is None:
            host.group = self.raft.add_group(group_id, host.replica, None)
        elif self.name not in members and host.group is not None:
            self.raft.remove_group(group_id, keep_vote=True)  # for a replica made again
            host.group = None
            host.drop_replica()

    def _learn_group_id(self, host: QuorumHost, group_id: str) -> None:
        """A queue recovered on a node that held no replica knows only its name's prefix
        (`quorum_host`); the metadata log names its group, which it uses from now on (its
        commands still waiting go first, in order, and a leader resolves the prefix:
        `_hosted`)."""
        prefix = host.group_id
        self.queues.pop(prefix, None)
        host.group_id = group_id
        self.queues[group_id] = host
        forwarder = self._forwarders.pop(prefix, None)
        if forwarder is not None and group_id not in self._forwarders:
            forwarder.group_id = group_id  # its next batch goes to the group by its name
            self._forwarders[group_id] = forwarder

    def _hosted(self, group_id: str) -> RaftGroup | None:
        """The group `group_id` names here; a bare queue prefix (from a node that restarted
        without a replica of the queue and has not learned its group yet: `quorum_host`)
        names the one group this node hosts for that queue."""
        group = self.raft.group(group_id)
        if group is None and group_id.endswith(":"):
            for host in self.queues.values():
                if host.group is not None and host.group_id.startswith(group_id):
                    return host.group
        return group

    def node_known(self, node: str, host: str, port: int) -> None:
        """`node` is at `host`:`port`; a worker of a node this one knows is at that node's
        address (as this node dials it) ``+ i``, whatever it said (module doc, 6)."""
        worker = worker_of(node)
        if worker is not None and worker[0] != self.name and worker[0] in self.nodes:
            front_host, front_port = self.nodes[worker[0]]
            host, port = front_host, front_port + worker[1]
        self.nodes[node] = (host, port)
        self.raft.names.add(node)  # so that Raft's ids of it read as its name
        if node != self.name:
            self.peers.set_address(node, host, port)

    def forget_node(self, node: str) -> None:
        self.nodes.pop(node, None)
        if node != self.name:
            self.peers.forget(node)

    def forget_queue(self, host: QuorumHost) -> None:
        self._forwarders.pop(host.group_id, None)
        if self.queues.pop(host.group_id, None) is not None:
            self.raft.remove_group(host.group_id)  # a kept vote too, with no replica here
            host.group = None

    def queue_columns(self, host: object) -> dict[str, object]:
        """RabbitMQ's quorum columns of `GET /api/queues/...`: leader, members, online
        (for a classic queue of another node: its home, named as its node)."""
        if isinstance(host, RemoteHost):
            return {"node": self.node_of(host.home)}
        if not isinstance(host, QuorumHost):
            return {}
        group = host.group
        leader = group.leader if group is not None else None
        members = sorted(group.members if group is not None else host.members)
        running = {self.name} | {n for n in self.nodes if self.peers.connected(n)}
        return {
            "leader": leader,
            "node": leader or self.name,
            "members": members,
            "online": [m for m in members if m in running],
        }

    def unreachable(self) -> set[str]:
        return {node for node in self.nodes if node != self.name and not self.peers.connected(node)}

    def _link(self, node: str, up: bool) -> None:
        if not up:
            self.reap_soon()
            return
        if node not in self.nodes:  # it joined, and dialed this node first
            address = self.peers.address(node)
            if address is not None:
                self.node_known(node, *address)
        for host in list(self.queues.values()):
            if host.group_id == group_prefix(host.record.vhost, host.record.name):
                self._check(self._recover_placement(host))
            if host.group is None:  # consumers the leader serves from afar: still there?
                self._check(host.recheck_consumers())
            else:  # deliveries to its consumers lost with the link: sent again
                host.hand_again(node)

    def _check(self, check: Coroutine[object, object, None]) -> None:
        task = asyncio.ensure_future(check)
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _recover_placement(self, host: QuorumHost) -> None:
        """A queue recovered without a replica: its group and members from a node that hosts
        it, and the replica this node must hold if it is a member (made one just before it
        stopped, it wrote nothing of the group: it starts as a new member does)."""
        with contextlib.suppress(PeerUnavailable):
            await self.learn_placement(host)
            if self.name in host.members and host.group is None:
                host.group = self.raft.add_group(host.group_id, host.replica, None)

    def reap_soon(self) -> None:
        """In a grace period (a link that comes back at once keeps its consumers), cancel
        the consumers of every node still unreachable, on the queues this node leads."""
        if self._reaping is None:
            grace_s = REAP_GRACE_TICKS * self.config.raft_tick_ms / 1000
            self._reaping = asyncio.get_running_loop().call_later(grace_s, self._reap)

    def _reap(self) -> None:
        self._reaping = None
        gone = self.unreachable()
        if gone:
            for host in list(self.queues.values()):
                host.reap(gone)

    # --- getting commands to leaders -------------------------------------------------------------

    def logged_change(self, change: Operation) -> asyncio.Future[object]:
        return self.replicate(change)

    def logged_declare(self, record: QueueRecord) -> asyncio.Future[object]:
        self.broker.vhosts[record.vhost].delete_queue(record.name)
        return self.replicate(QueueDeclare(queue_definition(record), self.name, record.durable))

    def logged_delete(self, host: QueueHost) -> asyncio.Future[object] | None:
        record = host.record
        if host.placement is not Placement.LOCAL or record.exclusive or self.applying:
            return None
        deleted = self.replicate(QueueDelete(record.vhost, record.name, self.name))
        return asyncio.ensure_future(_counted(deleted, host.machine.ready_count))

    def replicate(self, operation: Operation) -> asyncio.Future[object]:
        """Propose a metadata operation (`warren.runtime.cluster.metadata`); the future has
        its result once every node applied it (metadata doc, point 7)."""
        data = logged(operation, f"{self.name}/{self.incarnation}", next(self._numbers))
        return asyncio.ensure_future(self._applied_everywhere(self.submit(METADATA_GROUP, data)))

    async def _applied_everywhere(self, submitted: asyncio.Future[object]) -> object:
        applied = cast("Applied", await submitted)
        peers = [node for node in self.nodes if node != self.name and self.peers.connected(node)]
        await asyncio.gather(
            self.metadata.reached(applied.index, SETTLE_WAIT_S),
            *(self._peer_applied(node, applied.index) for node in peers),
        )
        return from_wire(applied.value)

    async def _peer_applied(self, node: str, index: int) -> None:
        """Until `node` applied the metadata entry at `index` (or it cannot say in time)."""
        with contextlib.suppress(PeerUnavailable, RemoteError):
            await self.ask(node, AppliedThrough(index), SETTLE_WAIT_S + 1.0)

    def submit(self, group_id: str, data: bytes) -> asyncio.Future[object]:
        """The outcome of a command once its group's leader applied it.

        Commands of one group leave this node in order: proposed here while this node leads
        and nothing waits, otherwise through the group's `_Forwarder`, which sends them to
        the leader in batches, one batch at a time, and sends again from the first one a
        leader did not take. A leader that loses its leadership before a command commits
        hands it to the forwarder too; the next leader may then commit it twice, and the
        queue machine applies the copy as a no-op (`warren.queue.Sequenced`)."""
        group = self.raft.group(group_id)
        forwarder = self._forwarders.get(group_id)
        if group is None or not group.is_leader or (forwarder is not None and forwarder.busy):
            return self._forwarder(group_id).push(data)
        outcome = asyncio.get_running_loop().create_future()
        group.propose(data).add_done_callback(
            lambda done: self._proposed(outcome, done, group_id, data)
        )
        return outcome

    def _forwarder(self, group_id: str) -> _Forwarder:
        forwarder = self._forwarders.get(group_id)
        if forwarder is None:
            forwarder = self._forwarders[group_id] = _Forwarder(self, group_id)
        return forwarder

    def _proposed(
        self,
        outcome: asyncio.Future[object],
        done: asyncio.Future[object],
        group_id: str,
        data: bytes,
    ) -> None:
        if outcome.done():
            return
        error = done.exception()
        if error is None:
            outcome.set_result(done.result())
        elif isinstance(error, NotLeader):
            self._forwarder(group_id).push(data, outcome)
        else:
            outcome.set_exception(error)

    async def leader_call(self, request: LeaderRequest[R]) -> R:
        """Have the group's leader answer `request` (`_lead`), wherever it is, through
        elections, until ``cluster_submit_timeout``."""
        group_id = request.group_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.cluster_submit_timeout / 1000
        hint: str | None = None
        attempt = 0
        while True:
            group = self._hosted(group_id)
            target = hint or (group.leader if group is not None else None)
            if target is None:
                members = self._members_of(group_id)
                target = members[attempt % len(members)] if members else None
            attempt += 1
            hint = None
            if target == self.name:
                if group is not None and group.is_leader:
                    answer = await self._lead(request)
                    if isinstance(answer, Led):
                        return answer.value
                    hint = answer.leader
            elif target is not None:
                try:
                    remaining = self._remaining(deadline)
                    reply = await self.peers.call(
                        target, cast("Request", request), timeout=remaining
                    )
                    answer = cast("Led[R] | Redirect", reply)  # `_lead` on the other node
                except (PeerUnavailable, RemoteError) as error:
                    # gone, or stopping (its Raft host closed): ask again, maybe elsewhere
                    log.debug("%s: %s", group_id, error)
                else:
                    if isinstance(answer, Led):
                        return answer.value
                    hint = answer.leader if answer.leader != target else None
            if loop.time() >= deadline:
                raise PeerUnavailable(target or "none", f"no leader for {group_id} in time")
            if hint is None:
                await asyncio.sleep(RETRY_S)

    def send_reply(self, node: str, token: str, message: Message) -> None:
        self.peers.send(node, Reply(token, message_record(message)))

    def reply_live(self, node: str, token: str) -> asyncio.Future[bool]:
        return asyncio.ensure_future(self._reply_live(node, token))

    async def _reply_live(self, node: str, token: str) -> bool:
        try:
            return await self.ask(node, ReplyLive(token), REPLY_LIVE_WAIT_S)
        except (PeerUnavailable, RemoteError, TimeoutError):
            return False  # as RabbitMQ: a reply consumer on a node that is gone is not live

    async def ask(self, node: str, request: NodeRequest[R], timeout: float) -> R:
        """A request to another node; its answer is the type the request names (the link
        decodes it as that type: `warren.runtime.cluster.calls.reply_type`)."""
        return cast("R", await self.peers.call(node, cast("Request", request), timeout))

    def node_of(self, member: str) -> str:
        """The node a member is a worker of (module doc, 6); itself when a member is a node.
        A worker of another node (which joins the metadata group as it starts) is
        ``<name>-w<i>@<host>`` of a member ``<name>@<host>``
        (`warren.runtime.workers.layout.member_name`)."""
        node = self.nodes_of.get(member)
        if node is not None:
            return node
        worker = worker_of(member)
        if worker is not None and (worker[0] in self.nodes or worker[0] == self.name):
            return worker[0]
        return member

    def node_names(self) -> list[str]:
        """The cluster's nodes, each once however many workers it runs (module doc, 6)."""
        return sorted({self.node_of(member) for member in (*self.nodes, self.name)})

    @property
    def front(self) -> str:
        """This worker's node (module doc, 6): its worker 0's member name."""
        return self.node_of(self.name)

    def workers_of(self, node: str) -> list[str]:
        """The members that are `node`'s workers, worker 0 first (module doc, 6)."""
        return sorted(m for m in {*self.nodes, self.name} if self.node_of(m) == node)

    def member_on(self, members: list[str], node: str) -> str | None:
        """The member of `members` that is a worker of `node` (at most one is)."""
        return next((m for m in members if self.node_of(m) == node), None)

    def replica_member(self, node: str) -> str:
        """Where a new replica on `node` goes (module doc, 6): of its workers this one
        reaches, the one hosting the fewest quorum replicas, as the metadata log's member
        lists have them; this worker, then the lowest, on a tie."""
        hosting = Counter(m for host in self.queues.values() for m in host.members)
        return min(
            self.workers_of(node),
            key=lambda m: (
                m != self.name and not self.peers.connected(m),
                hosting[m],
                m != self.name,
                m,
            ),
        )

    def _remaining(self, deadline: float) -> float:
        return max(0.1, deadline - asyncio.get_running_loop().time())

    def _members_of(self, group_id: str) -> list[str]:
        if group_id == METADATA_GROUP:
            return sorted({*self.nodes, self.name})
        host = self.queues.get(group_id)
        members = host.members if host is not None and host.members else self.nodes
        return sorted(m for m in members if m != self.name)

    def _serve(self, sender: str, request: Request) -> Awaitable[object]:
        return self._handle(request)

    async def _handle(self, request: Request) -> object:
        """A request from a peer (`warren.runtime.cluster.calls`)."""
        kind = type(request)
        if kind is Status:
            return self.status()
        if kind is NodeDetails:
            return self.describe() if self.describe is not None else None
        if isinstance(request, ReplyLive):
            return request.token in self.broker.reply_to
        if isinstance(request, Forward):  # from a node that does not know the leader (join)
            return await self.leader_call(cast("LeaderRequest[object]", request.request))
        if isinstance(request, GroupStatus):
            group = self._hosted(request.group_id)
            return group.status() if group is not None else None
        if isinstance(request, AppliedThrough):
            return await self.metadata.reached(request.index, SETTLE_WAIT_S)
        if isinstance(request, Campaign):  # the locator chose this node to lead a new queue
            group = self.raft.group(request.group_id)
            if group is not None and group.leader is None:
                group.campaign()
            return None
        if isinstance(request, LeaderRequest):
            return await self._lead(cast("LeaderRequest[object]", request))
        raise ValueError(f"unknown cluster request {request!r}")

    async def _lead(self, request: LeaderRequest[R]) -> Led[R] | Redirect:
        """A request for a group's leader: `Led` on the leader, else `Redirect`. A node
        whose Raft host failed answers nothing: its groups still count themselves
        leaders, and what it refused as `RETRY` its own forwarder would ask it again
        at once, for good (stack sim seed 432); the caller gets the error (another
        node's `leader_call` tries again, maybe elsewhere)."""
        if self.raft.failure is not None:
            raise self.raft.stopped_error()
        group = self._hosted(request.group_id)
        if group is None:
            return Redirect(None)
        if not group.is_leader:
            return Redirect(group.leader)
        try:
            return Led(cast("R", await self._as_leader(group, request)))
        except NotLeader as error:
            return Redirect(error.leader)

    async def _as_leader(self, group: RaftGroup, request: LeaderRequest[Any]) -> object:
        if isinstance(request, Propose):
            proposals = [group.propose(data) for data in request.commands]
            outcomes = await asyncio.gather(*proposals, return_exceptions=True)
            return [to_wire(_outcome(outcome)) for outcome in outcomes]
        if isinstance(request, AddMember):
            if request.host is not None and request.port is not None:
                # a node joining: everyone learns its address
                await self.replicate(NodeAddress(request.node, request.host, request.port))
            await group.add_member(request.node, self.config.cluster_submit_timeout / 1000)
            return Configuration(sorted(group.members), group.membership_index)
        if isinstance(request, RemoveMember):
            await group.remove_member(request.node)
            return Configuration(sorted(group.members), group.membership_index)
        if isinstance(request, Transfer):
            return group.transfer(request.node)
        if isinstance(request, Counts):
            machine = self.queues[group.group_id].machine
            return (machine.ready_count, machine.consumer_count)
        if isinstance(request, Consumers):  # a node without a replica checks its consumers
            return self.queues[group.group_id].machine.consumers()
        if isinstance(request, LeaderCounters):  # the management API of a node without one
            return self.queues[group.group_id].machine.counters()
        raise ValueError(f"unknown leader request {request!r}")

    # --- what operators see ----------------------------------------------------------------

    def status(self) -> dict[str, object]:
        meta = self.meta
        return {
            "node": self.name,
            "nodes": sorted({*self.nodes, self.name}),
            "running": sorted({self.name} | {n for n in self.nodes if self.peers.connected(n)}),
            "metadata": meta.status() if meta is not None else {},
            "quorum_queues": len(self.queues),
        }


def _outcome(outcome: object) -> object:
    if isinstance(outcome, NotLeader | HostStopped):
        return RETRY
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


class _Forwarder:
    """One group's commands from this node to its leader, in order (see `submit`)."""

    BATCH_MAX: Final = 512

    def __init__(self, cluster: ClusterNode, group_id: str) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.pending: deque[tuple[bytes, asyncio.Future[object]]] = deque()
        self.task: asyncio.Future[None] | None = None  # sending, while anything is pending

    def push(
        self, data: bytes, outcome: asyncio.Future[object] | None = None
    ) -> asyncio.Future[object]:
        if outcome is None:
            outcome = asyncio.get_running_loop().create_future()
        self.pending.append((data, outcome))
        if self.task is None:
            self.task = asyncio.ensure_future(self._drain())
        return outcome

    @property
    def busy(self) -> bool:
        return self.task is not None

    async def _drain(self) -> None:
        pending = self.pending
        try:
            while pending:
                batch = [pending[i] for i in range(min(len(pending), self.BATCH_MAX))]
                request = Propose(self.group_id, tuple(data for data, _ in batch))
                try:
                    replies = await self.cluster.leader_call(request)
                except Exception as error:  # no leader in time: these commands fail
                    for _ in batch:
                        outcome = pending.popleft()[1]
                        if not outcome.done():
                            outcome.set_exception(error)
                    continue
                for reply in replies:
                    if type(reply) is Retry:  # this one and the rest again, in order
                        group = self.cluster.raft.group(self.group_id)
                        if group is not None and group.handing_over:
                            # this node leads and refuses them while it hands over: asked
                            # again at once, it would refuse them in the same instant
                            await asyncio.sleep(RETRY_S)
                        break
                    _, outcome = pending.popleft()
                    if not outcome.done():
                        outcome.set_result(from_wire(reply))
        finally:
            self.task = None


async def _counted(deleted: asyncio.Future[object], count: int) -> object:
    """A queue's delete answers the ready count the queue had when it was asked, as a
    RabbitMQ queue process answers before its record goes."""
    await deleted
    return count


def _initial_size(record: QueueRecord, default: int) -> int:
    value = record.arguments.get("x-quorum-initial-group-size")
    size = getattr(value, "value", value)
    return int(size) if isinstance(size, int) and size > 0 else default
