"""The transport between the nodes of a cluster: one connection per node pair, TCP between
machines and a Unix socket between the workers of one node.

Theory of operation:
1. Links: a node dials every node it has an address for (`set_address`, or learned from
   a hello, rule 3) and has no link with; the other accepts. Both directions share that
   one connection. A dialer that fails or loses its link tries again after a backoff that
   doubles from 0.1 s to 2 s; a node whose accepted link goes down dials back.
2. One link per pair: when both nodes dial at once, the connection dialed by the node
   whose name sorts lower wins on both sides. A node keeps a newly authenticated
   connection in place of the link it has (the old one may be half-dead) unless the old
   one wins, the new one does not, and both come from the same life of the other node
   (each side of a handshake names its process's incarnation: a node that restarted
   always replaces the links of its previous life). An acceptor answers a dialer that
   lost "already linked", which is no failure. Both ends apply the same rule, so they
   agree on the link, and a winning connection is never given up for a losing one.
3. Handshake, before any frame is decoded: the dialer sends a hello (magic, its nonce,
   its incarnation, its name, the address of its cluster listener); the acceptor answers
   with its nonce, its incarnation, its name and an HMAC-SHA256 under the cookie over the
   dialer's nonce, both names and its incarnation; the dialer checks it and answers with
   its own HMAC over the acceptor's nonce, both names, its incarnation and its address;
   the acceptor checks it, learns the address if it had none for that node (so a node
   that joins is reached again after the link drops, even by nodes that never had it in
   their configuration), and says OK or "already linked" (rule 2). Each side has then
   proved the cookie to the other. Anything else is refused and logged, and so is a
   dialer that claims our name. A link is made current in the same step as the decision,
   so no other connection can slip in between.
4. Frames: a 4-byte big-endian length, then a list of items encoded by
   `warren.runtime.cluster.frames` (a message, an RPC request, its response or its
   failure). `send` only buffers; one callback per loop turn per link writes the whole
   buffer as one frame (batching). Delivery is best effort: a message for a node with no
   link is dropped. A frame that does not decode (`FrameError`) drops that link, which
   is dialed again; the node keeps running. An item that does not encode (`frames`,
   point 5) is left out of its frame, logged, and the request behind it fails with 541
   INTERNAL_ERROR: a call's caller at once, the peer's caller for an answer or failure,
   a queue's caller (a `Call` with a number) as if its home had refused it, and the
   peer's queue caller for a `CallReply` or `CallError`; the rest of the frame goes.
5. RPC (`call`/`serve`) rides on the same link. A remote `AmqpError` comes back as the
   same class with the same code and text; any other remote failure as `RemoteError`. A
   call fails with `PeerUnavailable` if there is no link, the link goes down or is
   replaced, or the answer does not come in time.
6. `partition(nodes)` is a fault hook for tests: traffic to and from those nodes is
   dropped (links stay open), they report not connected and link handlers hear "down";
   `partition(set())` heals. Link handlers hear "up" when a node gets a link, "down"
   when it has none any more, and "up" again when one link replaces another: what was
   sent on the old one may never have been read (when both nodes dial at once, the
   acceptor of the losing connection may admit it and send on it before the other side
   refuses it), so what a node sends as a link comes up is sent again.
7. Local links: the workers of one node (`warren.runtime.workers.layout.link_addresses`)
   are given each one's Unix socket (``local``). Each listens on its own beside its TCP
   listener and dials the others there, with the same handshake, rules and frames: only
   the socket differs (no TCP/IP stack on the path, one copy a write); other nodes, and
   anything that dials the TCP listener, are reached over TCP as before. A path is a
   stream socket in a directory private to the user; a stale one of an earlier life of
   the worker is replaced at start, and this one's is removed at close. A worker binds
   its socket before its TCP listener, so a worker whose socket is missing while it
   listens on TCP lost it (to a cleaner of the temporary directory): it is dialed over
   TCP then, as another node is.
The peers are trusted once the cookie is proved: a frame is decoded as it comes, into
the typed messages of `warren.runtime.cluster.calls` (no pickle: nothing a peer sends is
run). Those types and the frame's layout are the protocol: `MAGIC` names its version,
and a node of another version is refused in the handshake, before any frame is decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import logging
import os
import secrets
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Protocol

from warren.errors import AmqpError, SoftError
from warren.runtime.cluster.calls import Call, CallError, CallReply, PeerMessage, Request
from warren.runtime.cluster.frames import (
    Answer,
    Ask,
    Failure,
    FrameError,
    Item,
    Send,
    answer,
    answer_value,
    decode_frame,
    encode_apart,
    encode_frame,
    failure,
    failure_exception,
    unsendable,
)
from warren.runtime.cluster.frames import (
    RemoteError as RemoteError,  # where the runtime catches it
)

CLOSE_TIMEOUT_S: Final = 2.0
log = logging.getLogger("warren.peers")

# 3: the messages of `warren.runtime.cluster.calls`; 4: Raft entries of quorum queues in the
# versioned encoding of `warren.cluster.queue_entries`, which a node of 3 cannot apply;
# 5: Raft messages as the versioned bytes of `warren.cluster.raft_codec`; 6: frames in
# the versioned encoding of `warren.runtime.cluster.frames` (no pickle); 7: membership
# changes answered with the configuration's index (`calls.Configuration`); 8: `Definitions`
# says through which metadata index it holds
MAGIC: Final = b"WARREN-PEERS/8\n"
_NONCE_BYTES: Final = 16
_INCARNATION_BYTES: Final = 8
_MAC_BYTES: Final = 32
_LENGTH: Final = struct.Struct(">I")
_HANDSHAKE_MAX_BYTES: Final = 4096
HANDSHAKE_TIMEOUT_S: Final = 5.0
BACKOFF_MIN_S: Final = 0.1
BACKOFF_MAX_S: Final = 2.0
_ACCEPTED: Final = b"OK"
_LINKED: Final = b"LINKED"  # rule 2: the link the acceptor has wins

MessageHandler = Callable[[str, PeerMessage], None]
LinkHandler = Callable[[str, bool], None]
RequestHandler = Callable[[str, Request], Awaitable[object]]


class PeerLinks(Protocol):
    """What the runtime uses of a transport between nodes: `Peers` over TCP, or the
    simulator's in-memory network (`warren.testing.sim.links`), which keeps the same
    contract: per-link order, best effort, calls that fail with `PeerUnavailable`."""

    @property
    def nodes(self) -> list[str]: ...

    @property
    def listen_address(self) -> tuple[str, int]: ...

    def address(self, node: str) -> tuple[str, int] | None: ...

    def set_address(self, node: str, host: str, port: int) -> None: ...

    def forget(self, node: str) -> None: ...

    def on_message(self, handler: MessageHandler) -> None: ...

    def on_link(self, handler: LinkHandler) -> None: ...

    def serve(self, handler: RequestHandler) -> None: ...

    def connected(self, node: str) -> bool: ...

    def send(self, node: str, message: PeerMessage) -> None: ...

    async def call(self, node: str, request: Request, timeout: float = 5.0) -> object: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class PeerUnavailable(Exception):
    """No link to the node, it went down, or it did not answer in time."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"node {node} unavailable: {reason}")
        self.node = node


class _Refused(Exception):
    """A handshake that did not prove the cookie, or broke the rules."""


class _AlreadyLinked(Exception):
    """A connection that lost to the link the two nodes have (rule 2): no failure."""


class _Link:
    """One authenticated connection to a node, and what waits to be written to it."""

    def __init__(
        self,
        node: str,
        incarnation: bytes,
        dialer: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.node = node
        self.incarnation = incarnation  # the node's process at the other end (rule 2)
        self.dialer = dialer  # the name of the node that dialed it
        self.reader = reader
        self.writer = writer
        self.outbox: list[Item] = []
        self.closed = False

    def close(self) -> None:
        """Drop the connection at once: what is still buffered is best effort anyway."""
        self.closed = True
        self.writer.transport.abort()


class Peers:
    """See the module docstring."""

    def __init__(
        self,
        node: str,
        cookie: str,
        listen_host: str,
        listen_port: int,
        addresses: dict[str, tuple[str, int]],
        local: Mapping[str, str] | None = None,
    ) -> None:
        """`local`: the Unix socket of each worker of this node, this one's included
        (rule 7); those workers are dialed there, every other node at its address."""
        self.node = node
        self._cookie = cookie.encode("utf-8")
        self._incarnation = secrets.token_bytes(_INCARNATION_BYTES)  # this process's life
        self._listen = (listen_host, listen_port)
        self._addresses = {name: addr for name, addr in addresses.items() if name != node}
        self._local = dict(local or {})
        self._server: asyncio.Server | None = None
        self._local_server: asyncio.Server | None = None
        self._links: dict[str, _Link] = {}
        self._dialers: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # accepted links, RPC handlers
        self._flushing: set[_Link] = set()  # links with a flush queued for this turn
        self._calls: dict[int, tuple[str, asyncio.Future[object], Request]] = {}
        self._call_ids = itertools.count(1)
        self._message_handlers: list[MessageHandler] = []
        self._link_handlers: list[LinkHandler] = []
        self._request_handler: RequestHandler | None = None
        self._partitioned: frozenset[str] = frozenset()
        self._started = False

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        path = self._local.get(self.node)
        if path is not None:  # replaces a stale socket of an earlier life (rule 7)
            self._local_server = await asyncio.start_unix_server(self._accept, path)
        self._server = await asyncio.start_server(self._accept, *self._listen)
        self._started = True
        for node in sorted(self._addresses):
            self._maybe_dial(node)

    async def close(self) -> None:
        self._started = False
        servers = [server for server in (self._server, self._local_server) if server is not None]
        for server in servers:
            server.close()
        if self._local_server is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._local[self.node])
        tasks = [*self._dialers.values(), *self._tasks]
        for link in list(self._links.values()):
            link.close()
        for task in tasks:
            task.cancel()
        if tasks:
            # bounded; a link admitted as this node stopped is closed below
            await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
        for link in list(self._links.values()):
            link.close()
        for server in servers:
            # uvloop waits here for every connection it accepted; none may hold the node
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), CLOSE_TIMEOUT_S)

    @property
    def port(self) -> int:
        if self._server is None:
            return self._listen[1]
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def listen_address(self) -> tuple[str, int]:
        """Where the other nodes reach this one: what its hello tells them."""
        return self._listen[0], self.port

    def address(self, node: str) -> tuple[str, int] | None:
        """The address this node dials `node` at: given, or learned from its hello."""
        return self._addresses.get(node)

    @property
    def nodes(self) -> list[str]:
        """Every other node this one has an address for, or a link with."""
        return sorted(set(self._addresses) | set(self._links))

    def set_address(self, node: str, host: str, port: int) -> None:
        if node == self.node:
            return
        self._addresses[node] = (host, port)
        self._maybe_dial(node)

    def forget(self, node: str) -> None:
        self._addresses.pop(node, None)
        dialer = self._dialers.pop(node, None)
        if dialer is not None:
            dialer.cancel()
        link = self._links.get(node)
        if link is not None:
            link.close()

    # --- handlers --------------------------------------------------------------------------

    def on_message(self, handler: MessageHandler) -> None:
        """Add a handler for every message (sender, message); handlers ignore what is not
        theirs."""
        self._message_handlers.append(handler)

    def on_link(self, handler: LinkHandler) -> None:
        self._link_handlers.append(handler)

    def serve(self, handler: RequestHandler) -> None:
        self._request_handler = handler

    # --- traffic ---------------------------------------------------------------------------

    def connected(self, node: str) -> bool:
        return node in self._links and node not in self._partitioned

    def send(self, node: str, message: PeerMessage) -> None:
        """Best effort: buffered for this loop turn's frame, dropped if not connected."""
        self._enqueue(node, Send(message))

    async def call(self, node: str, request: Request, timeout: float = 5.0) -> object:
        if not self.connected(node):
            raise PeerUnavailable(node, "not connected")
        call_id = next(self._call_ids)
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = (node, future, request)
        self._enqueue(node, Ask(call_id, request))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise PeerUnavailable(node, f"no answer within {timeout} s") from None
        finally:
            self._calls.pop(call_id, None)

    def partition(self, nodes: set[str]) -> None:
        before, self._partitioned = self._partitioned, frozenset(nodes)
        for node in sorted(before ^ self._partitioned):
            if node in self._links:
                healed = node in before
                if not healed:
                    self._fail_calls(node, "partitioned")
                self._notify_link(node, healed)

    def _enqueue(self, node: str, item: Item) -> None:
        link = self._links.get(node)
        if link is None or node in self._partitioned:
            return
        link.outbox.append(item)
        if link not in self._flushing:
            self._flushing.add(link)
            asyncio.get_running_loop().call_soon(self._flush, link)

    def _flush(self, link: _Link) -> None:
        self._flushing.discard(link)
        items, link.outbox = link.outbox, []
        if link.closed or link.writer.is_closing() or not items:
            return
        try:
            payload = encode_frame(items)
        except (TypeError, ValueError, OverflowError):  # one item spoils it: rule 4
            payload, refused = encode_apart(items)
            for item, error in refused:
                self._refuse(link.node, item, unsendable(item, error))
        link.writer.writelines((_LENGTH.pack(len(payload)), payload))

    def _refuse(self, node: str, item: Item, error: SoftError) -> None:
        """The request behind an item that does not encode fails, as its peer would have
        failed it, and the rest of its frame goes (rule 4)."""
        log.error("not sent to node %s: %s", node, error.text)
        if isinstance(item, Ask):
            call = self._calls.get(item.call_id)
            if call is not None and not call[1].done():
                call[1].set_exception(error)
        elif isinstance(item, Answer | Failure):
            self._enqueue(node, failure(item.call_id, error))
        elif type(item.message) is Call and item.message.number:  # a queue's caller, here
            self._dispatch(node, Send(_call_error(item.message.number, error)))
        elif type(item.message) is CallReply or type(item.message) is CallError:  # there
            self._enqueue(node, Send(_call_error(item.message.number, error)))

    # --- links -----------------------------------------------------------------------------

    def _maybe_dial(self, node: str) -> None:
        if (
            self._started
            and node in self._addresses
            and node not in self._links
            and node not in self._dialers
        ):
            self._dialers[node] = asyncio.get_running_loop().create_task(self._dial_loop(node))

    async def _dial_loop(self, node: str) -> None:
        """Dial until the node has a link (this one's or one it accepted), then run ours."""
        backoff = BACKOFF_MIN_S
        try:
            while node in self._addresses and node not in self._links:
                link = await self._dial(node, *self._addresses[node])
                if link is None:
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                    continue
                backoff = BACKOFF_MIN_S
                await self._run_link(link)
                await asyncio.sleep(BACKOFF_MIN_S)
        finally:
            if self._dialers.get(node) is asyncio.current_task():
                del self._dialers[node]

    async def _dial(self, node: str, host: str, port: int) -> _Link | None:
        """A link to `node`, already current; None if it failed or lost (rule 2). A worker
        of this node is dialed at its Unix socket (rule 7)."""
        path = self._local.get(node)
        if path is not None and not os.path.exists(path):  # removed under it: rule 7
            path = None
        where = path if path is not None else f"{host}:{port}"
        # asyncio.timeout, not wait_for: a connection made as the dialer is cancelled
        # must not be dropped unclosed
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                if path is not None:
                    reader, writer = await asyncio.open_unix_connection(path)
                else:
                    reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as error:
            log.debug("dialing node %s at %s failed: %r", node, where, error)
            return None
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                return await self._handshake_dial(node, reader, writer)
        except _AlreadyLinked as already:
            log.debug("%s", already)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, _Refused) as error:
            log.warning("handshake with node %s at %s failed: %r", node, where, error)
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        writer.transport.abort()
        return None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._started:  # accepted just before `close` stopped the server
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                    link = await self._handshake_accept(reader, writer)
            except _AlreadyLinked as already:
                log.debug("%s", already)
                writer.close()  # after the answer that says so
                return
            except (OSError, TimeoutError, asyncio.IncompleteReadError, _Refused) as error:
                peer = writer.get_extra_info("peername")
                log.warning("refused a node connection from %s: %r", peer, error)
                writer.transport.abort()
                return
            await self._run_link(link)
        except asyncio.CancelledError:
            # `close` cancels; asyncio's server callback would report a cancelled task
            writer.transport.abort()
        finally:
            self._tasks.discard(task)

    async def _handshake_dial(
        self, node: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> _Link:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        host, port = self.listen_address
        address = f"{host}:{port}".encode()
        mine = self._incarnation
        hello = MAGIC + nonce + mine + self.node.encode("utf-8") + b"\0" + address
        _write_handshake(writer, hello)
        answer = await _read_handshake(reader)
        if not answer.startswith(MAGIC):
            raise _Refused("not a Warren node")
        body = answer[len(MAGIC) :]
        their_nonce, body = body[:_NONCE_BYTES], body[_NONCE_BYTES:]
        theirs, body = body[:_INCARNATION_BYTES], body[_INCARNATION_BYTES:]
        their_mac = body[:_MAC_BYTES]
        their_name = body[_MAC_BYTES:].decode("utf-8", "replace")
        if their_name != node:
            raise _Refused(f"expected node {node}, found {their_name!r}")
        expected = self._mac(b"accept", nonce, self.node, node, theirs)
        if not hmac.compare_digest(their_mac, expected):
            raise _Refused("the node did not prove the cookie")
        _write_handshake(writer, self._mac(b"dial", their_nonce, self.node, node, mine, address))
        verdict = await _read_handshake(reader)
        if verdict == _LINKED:
            raise _AlreadyLinked(f"node {node} has the link that wins already")
        if verdict != _ACCEPTED:
            raise _Refused("the node refused our cookie")
        link = _Link(node, theirs, self.node, reader, writer)
        if not self._admit(link):
            raise _AlreadyLinked(f"node {node} accepted, but the link it dialed wins")
        return link

    async def _handshake_accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> _Link:
        hello = await _read_handshake(reader)
        fixed = len(MAGIC) + _NONCE_BYTES + _INCARNATION_BYTES
        if not hello.startswith(MAGIC) or len(hello) <= fixed:
            raise _Refused("not a Warren node")
        body = hello[len(MAGIC) :]
        their_nonce, body = body[:_NONCE_BYTES], body[_NONCE_BYTES:]
        theirs, body = body[:_INCARNATION_BYTES], body[_INCARNATION_BYTES:]
        name, _, address = body.partition(b"\0")
        node = name.decode("utf-8", "replace")
        if node == self.node:
            raise _Refused(f"a node dialed in with this node's name {node!r}")
        nonce = secrets.token_bytes(_NONCE_BYTES)
        mine = self._incarnation
        mac = self._mac(b"accept", their_nonce, node, self.node, mine)
        _write_handshake(writer, MAGIC + nonce + mine + mac + self.node.encode("utf-8"))
        their_mac = await _read_handshake(reader)
        expected = self._mac(b"dial", nonce, node, self.node, theirs, address)
        if not hmac.compare_digest(their_mac, expected):
            raise _Refused(f"node {node!r} did not prove the cookie")
        self._learn(node, address)
        link = _Link(node, theirs, node, reader, writer)
        if not self._admit(link):
            _write_handshake(writer, _LINKED)
            raise _AlreadyLinked(f"node {node} dialed, but the link this node dialed wins")
        _write_handshake(writer, _ACCEPTED)
        return link

    def _learn(self, node: str, address: bytes) -> None:
        """The address of a node that dialed in, unless this node was given one (it may
        reach the node another way, e.g. through a proxy)."""
        host, colon, port = address.decode("utf-8", "replace").rpartition(":")
        if node not in self._addresses and colon and port.isdigit():
            self._addresses[node] = (host, int(port))

    def _admit(self, link: _Link) -> bool:
        """Make `link` the node's link, in place of the one it has unless that one wins,
        this one does not, and both reach the same life of the node (rule 2); False if it
        lost."""
        if not self._started:
            raise _Refused("this node is stopping")
        node = link.node
        old = self._links.get(node)
        if (
            old is not None
            and old.incarnation == link.incarnation
            and self._wins(old)
            and not self._wins(link)
        ):
            return False
        self._links[node] = link
        if old is not None:
            old.close()
            self._fail_calls(node, "link replaced")
        else:
            log.info("link to node %s up", node)
        if node not in self._partitioned:  # "up" again on a replacement (rule 6)
            self._notify_link(node, True)
        return True

    def _wins(self, link: _Link) -> bool:
        return link.dialer == min(self.node, link.node)

    def _mac(self, role: bytes, nonce: bytes, dialer: str, acceptor: str, *more: bytes) -> bytes:
        fields = (role, nonce, dialer.encode("utf-8"), acceptor.encode("utf-8"), *more)
        return hmac.new(self._cookie, b"\0".join(fields), hashlib.sha256).digest()

    async def _run_link(self, link: _Link) -> None:
        """Read the link's frames until it goes; then, if it was current, the node has
        no link: calls fail, handlers hear "down", and this node dials it again."""
        node = link.node
        try:
            await self._read_frames(link)
        except (OSError, asyncio.IncompleteReadError) as error:
            log.debug("link to node %s lost: %r", node, error)
        except FrameError as error:
            log.error("link to node %s dropped: %s", node, error)
        except Exception:
            log.exception("link to node %s dropped: a frame does not decode", node)
        finally:
            link.close()
            if self._links.get(node) is link:
                del self._links[node]
                log.info("link to node %s down", node)
                self._fail_calls(node, "link down")
                if node not in self._partitioned:
                    self._notify_link(node, False)
                self._maybe_dial(node)

    async def _read_frames(self, link: _Link) -> None:
        reader = link.reader
        while not link.closed:
            (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            items = decode_frame(await reader.readexactly(length))
            if link.node in self._partitioned:
                continue
            for item in items:
                self._dispatch(link.node, item)

    def _dispatch(self, node: str, item: Item) -> None:
        if isinstance(item, Send):
            for handler in self._message_handlers:
                try:
                    handler(node, item.message)
                except Exception:
                    log.exception("message handler failed on a message from node %s", node)
        elif isinstance(item, Ask):
            task = asyncio.get_running_loop().create_task(
                self._answer(node, item.call_id, item.request)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            call = self._calls.get(item.call_id)
            if call is None or call[1].done():
                return  # the caller gave up
            if isinstance(item, Failure):
                call[1].set_exception(failure_exception(item))
            else:
                call[1].set_result(answer_value(item, call[2]))  # FrameError: drop the link

    async def _answer(self, node: str, call_id: int, request: Request) -> None:
        handler = self._request_handler
        try:
            if handler is None:
                raise RemoteError(f"node {self.node} serves no requests")
            reply = answer(call_id, await handler(node, request))  # what does not encode fails
        except Exception as error:
            if not isinstance(error, AmqpError):
                log.warning("request from node %s failed: %r", node, error)
            self._enqueue(node, failure(call_id, error))
            return
        self._enqueue(node, reply)

    def _fail_calls(self, node: str, reason: str) -> None:
        for call_node, future, _ in list(self._calls.values()):
            if call_node == node and not future.done():
                future.set_exception(PeerUnavailable(node, reason))

    def _notify_link(self, node: str, up: bool) -> None:
        for handler in self._link_handlers:
            try:
                handler(node, up)
            except Exception:
                log.exception("link handler failed for node %s", node)


def _call_error(number: int, error: SoftError) -> CallError:
    return CallError(number, int(error.code), error.text.partition(" - ")[2])


def _write_handshake(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(_LENGTH.pack(len(data)) + data)


async def _read_handshake(reader: asyncio.StreamReader) -> bytes:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length > _HANDSHAKE_MAX_BYTES:
        raise _Refused(f"handshake message of {length} bytes")
    return await reader.readexactly(length)
