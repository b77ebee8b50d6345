"""One worker of a node of several: connections follow their queues, and crossings are counted.

Theory of operation:
1. Every worker accepts connections on the shared AMQP port (SO_REUSEPORT), so a
   connection lands on a worker at random, and a queue lives on one worker, its home.
   Until a connection is *bound*, its worker looks at each event it reads
   (`AmqpConnection.placing`, `Worker.place`) for the queue the event is about: a publish
   to the default exchange (its routing key), basic.consume and basic.get (their queue),
   queue.declare (an existing queue's home; for a new named queue the worker homing the
   fewest queues, ties to this one, so that queues spread over the workers). A quorum
   queue's home is the one worker of this node that holds a replica of it: its only
   replica on a node on its own (``quorum_cluster_size = 1``, the workers' default), the
   node's replica in a cluster of nodes (`warren.runtime.cluster.node`, module doc 6),
   the only worker of the node that can lead the queue. A queue with no replica here, or
   with replicas on several workers of a node on its own, has none, and binds the
   connection where it is.
2. When that home is another worker and the connection is quiet
   (`warren.runtime.workers.handover`), the worker hands it there before handling the
   event: the client's socket and a memfd holding the connection's state go with
   SCM_RIGHTS to the home's inbox, and this worker forgets the connection without closing
   the socket. The home handles the event, so a client that publishes to or consumes
   from the queues of one worker has every message hop-free.
3. A publish, consume or get binds the connection where it is then: it never moves
   again, so nothing it published or holds can be overtaken by what it does next. So
   does a method with nowait (what it asked for may still be on its way to another
   worker), an event while it is not quiet, `MOVES_MAX` moves, and a hand-over that
   cannot be sent (the home's inbox full or gone). A publish to another exchange binds it
   too: its queues are known only by routing.
4. Inboxes: the supervisor makes one Unix datagram socket pair per worker and every
   worker inherits them all (`warren.runtime.workers.layout.inboxes`), so no address is
   to be found or guarded, and a restarted worker reads the same inbox.
5. Messages that still cross workers (publishes to another worker's queue, a quorum
   queue's among them when its leader is on another worker, and deliveries from one:
   `RemoteQueues.sent` and ``received``) are logged every `REPORT_S` while they change,
   at stop, and at once on SIGUSR1 (`bench.scaling` asks so around a run; sent to the
   supervisor, it goes on to every worker).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
from typing import TYPE_CHECKING, Final

from warren.amqp import methods as m
from warren.amqp.connection import Content, MethodReceived
from warren.runtime.cluster.quorum import QuorumHost
from warren.runtime.cluster.remote import RemoteHost
from warren.runtime.connection import AmqpConnection
from warren.runtime.queues.host import QueueHost
from warren.runtime.workers.handover import capture, decode, encode, quiet, taken_over
from warren.runtime.workers.layout import worker_names

if TYPE_CHECKING:
    from warren.runtime.broker import Broker
    from warren.runtime.cluster.node import ClusterNode

log = logging.getLogger("warren.workers")

MOVES_MAX: Final = 8  # a connection that declares queue after queue stops following them
REPORT_S: Final = 10.0
_HANDED: Final = b"H"  # the datagram beside the two descriptors


class Worker:
    """This worker's part in placing connections (module doc)."""

    def __init__(
        self,
        broker: Broker,
        cluster: ClusterNode,
        index: int,
        inbox: socket.socket,
        outboxes: list[socket.socket],
    ) -> None:
        self.broker = broker
        self.cluster = cluster
        self.index = index
        self.names = worker_names(broker.config, broker.node_name)  # by index
        self.inbox = inbox
        self.outboxes = outboxes
        self.handed = self.taken = 0
        self._reported = (0, 0, 0, 0)
        self._report: asyncio.TimerHandle | None = None
        self._starting: set[asyncio.Future[object]] = set()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.inbox.fileno(), self._receive)
        loop.add_signal_handler(signal.SIGUSR1, self._log_crossings, True)
        self._report = loop.call_later(REPORT_S, self._report_crossings)

    def stop(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(self.inbox.fileno())
        loop.remove_signal_handler(signal.SIGUSR1)
        if self._report is not None:
            self._report.cancel()
        self._log_crossings()

    def connection(self) -> AmqpConnection:
        """The listener's protocol factory: a connection that follows its queues."""
        return self._following(AmqpConnection(self.broker), 0)

    def _following(self, connection: AmqpConnection, moves: int) -> AmqpConnection:
        connection.placing = functools.partial(self.place, connection, moves=moves)
        return connection

    # --- placing (module doc, 1-3) ------------------------------------------------------------

    def place(self, connection: AmqpConnection, event: object, moves: int) -> bool:
        """True when `event` made this worker hand `connection` over (with the event)."""
        home, binds = self._home(connection, event)
        if home is not None and home != self.index:
            if (
                moves < MOVES_MAX
                and self.cluster.peers.connected(self.names[home])
                and quiet(connection)
                and self._hand(connection, event, home, moves)
            ):
                return True
            binds = True
        if binds:
            connection.placing = None
        return False

    def _home(self, connection: AmqpConnection, event: object) -> tuple[int | None, bool]:
        """The worker `event` would best be handled on (None: here, or no queue) and whether
        it binds the connection."""
        if type(event) is Content:
            if event.method.exchange:
                return None, True
            return self._queue_home(connection, event.method.routing_key), True
        if type(event) is not MethodReceived:
            return None, False
        method = event.method
        channel = connection.channels.get(event.channel)
        if channel is None:
            return None, False
        if isinstance(method, m.BasicConsume | m.BasicGet):
            return self._queue_home(connection, method.queue or channel.last_queue), True
        if getattr(method, "nowait", False):
            return None, True
        if isinstance(method, m.QueueDeclare) and method.queue:
            home = self._queue_home(connection, method.queue)
            if home is None and not method.passive and not self._exists(connection, method.queue):
                home = self._emptiest()
            return home, False
        return None, False

    def _exists(self, connection: AmqpConnection, queue: str) -> bool:
        return (connection.vhost.name, queue) in self.broker.queues

    def _queue_home(self, connection: AmqpConnection, queue: str) -> int | None:
        host = self.broker.queues.get((connection.vhost.name, queue))
        home = None if host is None else self._home_of(host)
        return None if home is None else self.names.index(home)

    def _home_of(self, host: QueueHost) -> str | None:
        """The worker of this node whose process runs the queue's machine: a classic
        queue's home, a quorum queue's one replica here (module doc, 1)."""
        if isinstance(host, QuorumHost):
            here = [member for member in host.members if member in self.names]
            return here[0] if len(here) == 1 else None
        home = host.home if isinstance(host, RemoteHost) else self.cluster.name
        return home if home in self.names else None

    def _emptiest(self) -> int:
        """The worker homing the fewest queues (this one on a tie), of those reachable."""
        homes = [0] * len(self.names)
        for host in self.broker.queues.values():
            home = self._home_of(host)
            if home is not None:
                homes[self.names.index(home)] += 1
        reachable = [
            index
            for index, name in enumerate(self.names)
            if index == self.index or self.cluster.peers.connected(name)
        ]
        return min(reachable, key=lambda index: (homes[index], index != self.index))

    def _hand(self, connection: AmqpConnection, event: object, home: int, moves: int) -> bool:
        """Send the connection to worker `home`'s inbox; False (and nothing changed) when
        it cannot go."""
        transport = connection.transport
        assert transport is not None
        data = encode(capture(connection, event, moves + 1))
        state = os.memfd_create("warren-handover", os.MFD_CLOEXEC)
        try:
            written = 0
            while written < len(data):
                written += os.write(state, data[written:])
            client = transport.get_extra_info("socket").fileno()
            socket.send_fds(self.outboxes[home], [_HANDED], [client, state])
        except OSError as error:
            log.warning("connection %s stays: worker %d's inbox: %s", connection.peer, home, error)
            return False
        finally:
            os.close(state)
        log.debug("connection %s handed to worker %d", connection.peer, home)
        self.handed += 1
        connection.placing = None
        connection._release()  # forgotten here; its channels held nothing (`quiet`)
        transport.abort()  # closes this process's descriptor only: the home has its own
        return True

    def _receive(self) -> None:
        """Take over the connections other workers handed here."""
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(self.inbox, len(_HANDED), 2)
            except BlockingIOError:
                return
            if len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                log.warning("dropped a hand-over with %d descriptors", len(fds))
                continue
            client, state = fds
            try:
                size = os.fstat(state).st_size
                taken = decode(os.pread(state, size, 0))
            except ValueError as error:
                os.close(client)
                log.warning("dropped a hand-over: %s", error)
                continue
            finally:
                os.close(state)
            sock = socket.socket(fileno=client)
            sock.setblocking(False)
            self.taken += 1
            connection = self._following(taken_over(self.broker, taken), taken.moves)
            self._take(connection, sock)

    def _take(self, connection: AmqpConnection, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        starting: asyncio.Future[object] = asyncio.ensure_future(
            loop.connect_accepted_socket(lambda: connection, sock)
        )
        self._starting.add(starting)
        starting.add_done_callback(self._started)

    def _started(self, done: asyncio.Future[object]) -> None:
        self._starting.discard(done)
        if not done.cancelled() and done.exception() is not None:
            log.warning("a connection handed here was lost: %s", done.exception())

    # --- crossings (module doc, 5) ------------------------------------------------------------

    def _report_crossings(self) -> None:
        self._log_crossings()
        self._report = asyncio.get_running_loop().call_later(REPORT_S, self._report_crossings)

    def _log_crossings(self, always: bool = False) -> None:
        remote = self.cluster.remote
        now = (remote.sent, remote.received, self.handed, self.taken)
        if always or now != self._reported:
            self._reported = now
            log.info(
                "worker %d: %d messages crossed workers (%d publishes to other workers'"
                " queues, %d deliveries from them); connections handed over %d, taken over %d",
                self.index,
                remote.sent + remote.received,
                *now,
            )
