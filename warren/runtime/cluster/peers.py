"""The transport between the nodes of a cluster: one TCP connection per node pair.

Theory of operation:
1. Links: for each pair of nodes, the node whose name sorts lower dials the other (at the
   address `set_address` gave), the other accepts; both directions share that one
   connection. A dialer that fails or loses its link tries again after a backoff that
   doubles from 0.1 s to 2 s. An acceptor takes a newer connection from the same node in
   place of the old one (the old one may be half-dead).
2. Handshake, before anything is unpickled: the dialer sends a hello (magic, its nonce,
   its name); the acceptor answers with its nonce, its name and an HMAC-SHA256 under the
   cookie over the dialer's nonce and both names; the dialer checks it and answers with
   its own HMAC over the acceptor's nonce; the acceptor checks it and says OK. Each side
   has then proved the cookie to the other. Anything else is refused and logged, and so is
   a dialer that should have been dialed (its name sorts higher) or that claims our name.
3. Frames: a 4-byte big-endian length, then a pickle (protocol 5) of a list of items.
   `send` only buffers; one callback per loop turn per link writes the whole buffer as
   one frame (batching). Items: a message, an RPC request, its response or its error.
   Delivery is best effort: a message for a node with no link is dropped.
4. RPC (`call`/`serve`) rides on the same link. A remote `AmqpError` comes back as the
   same class with the same code and text; any other remote failure as `RemoteError`. A
   call fails with `PeerUnavailable` if there is no link, the link goes down or the
   answer does not come in time.
5. `partition(nodes)` is a fault hook for tests: traffic to and from those nodes is
   dropped (links stay open), they report not connected and link handlers hear "down";
   `partition(set())` heals.
The peers are trusted once the cookie is proved: a frame is unpickled as it comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import logging
import pickle
import secrets
import struct
from collections.abc import Awaitable, Callable
from typing import Final

import warren.errors
from warren.errors import AmqpError, ReplyCode

CLOSE_TIMEOUT_S: Final = 2.0
log = logging.getLogger("warren.peers")

MAGIC: Final = b"WARREN-PEERS/1\n"
_NONCE_BYTES: Final = 16
_MAC_BYTES: Final = 32
_LENGTH: Final = struct.Struct(">I")
_HANDSHAKE_MAX_BYTES: Final = 4096
HANDSHAKE_TIMEOUT_S: Final = 5.0
BACKOFF_MIN_S: Final = 0.1
BACKOFF_MAX_S: Final = 2.0
_ACCEPTED: Final = b"OK"

# item tags in a frame's list
_MESSAGE: Final = 0
_REQUEST: Final = 1
_RESPONSE: Final = 2
_ERROR: Final = 3

MessageHandler = Callable[[str, object], None]
LinkHandler = Callable[[str, bool], None]
RequestHandler = Callable[[str, object], Awaitable[object]]


class PeerUnavailable(Exception):
    """No link to the node, it went down, or it did not answer in time."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"node {node} unavailable: {reason}")
        self.node = node


class RemoteError(Exception):
    """The remote request handler failed with something other than an `AmqpError`."""


class _Refused(Exception):
    """A handshake that did not prove the cookie, or broke the rules."""


class _Link:
    """One authenticated connection to a node, and what waits to be written to it."""

    def __init__(
        self, node: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.node = node
        self.reader = reader
        self.writer = writer
        self.outbox: list[tuple[object, ...]] = []
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
    ) -> None:
        self.node = node
        self._cookie = cookie.encode("utf-8")
        self._listen = (listen_host, listen_port)
        self._addresses = {name: addr for name, addr in addresses.items() if name != node}
        self._server: asyncio.Server | None = None
        self._links: dict[str, _Link] = {}
        self._dialers: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # accepted links, RPC handlers
        self._flushing: set[_Link] = set()  # links with a flush queued for this turn
        self._calls: dict[int, tuple[str, asyncio.Future[object]]] = {}
        self._call_ids = itertools.count(1)
        self._message_handlers: list[MessageHandler] = []
        self._link_handlers: list[LinkHandler] = []
        self._request_handler: RequestHandler | None = None
        self._partitioned: frozenset[str] = frozenset()
        self._started = False

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, *self._listen)
        self._started = True
        for node in sorted(self._addresses):
            self._maybe_dial(node)

    async def close(self) -> None:
        self._started = False
        if self._server is not None:
            self._server.close()
        tasks = [*self._dialers.values(), *self._tasks]
        for link in list(self._links.values()):
            link.close()
        for task in tasks:
            task.cancel()
        if tasks:
            # bounded: a task whose handshake finished as it was cancelled may go on
            # (asyncio.wait_for can swallow the cancellation); `_run_link` stops it
            await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
        for link in list(self._links.values()):
            link.close()
        if self._server is not None:
            # uvloop waits here for every connection it accepted; none may hold the node
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), CLOSE_TIMEOUT_S)

    @property
    def port(self) -> int:
        if self._server is None:
            return self._listen[1]
        port: int = self._server.sockets[0].getsockname()[1]
        return port

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

    def send(self, node: str, message: object) -> None:
        """Best effort: buffered for this loop turn's frame, dropped if not connected."""
        self._enqueue(node, (_MESSAGE, message))

    async def call(self, node: str, request: object, timeout: float = 5.0) -> object:
        if not self.connected(node):
            raise PeerUnavailable(node, "not connected")
        call_id = next(self._call_ids)
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = (node, future)
        self._enqueue(node, (_REQUEST, call_id, request))
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

    def _enqueue(self, node: str, item: tuple[object, ...]) -> None:
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
            payload = pickle.dumps(items, protocol=5)
        except Exception:
            log.exception(
                "dropping %s items for node %s: they do not pickle", len(items), link.node
            )
            return
        link.writer.writelines((_LENGTH.pack(len(payload)), payload))

    # --- links -----------------------------------------------------------------------------

    def _maybe_dial(self, node: str) -> None:
        if self._started and self.node < node and node not in self._dialers:
            self._dialers[node] = asyncio.get_running_loop().create_task(self._dial_loop(node))

    async def _dial_loop(self, node: str) -> None:
        backoff = BACKOFF_MIN_S
        while node in self._addresses:
            link = await self._dial(node, *self._addresses[node])
            if link is None:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            backoff = BACKOFF_MIN_S
            await self._run_link(link)
            await asyncio.sleep(BACKOFF_MIN_S)

    async def _dial(self, node: str, host: str, port: int) -> _Link | None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), HANDSHAKE_TIMEOUT_S
            )
        except (OSError, TimeoutError) as error:
            log.debug("dialing node %s at %s:%s failed: %r", node, host, port, error)
            return None
        try:
            await asyncio.wait_for(self._handshake_dial(node, reader, writer), HANDSHAKE_TIMEOUT_S)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, _Refused) as error:
            log.warning("handshake with node %s at %s:%s failed: %r", node, host, port, error)
            writer.transport.abort()
            return None
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        return _Link(node, reader, writer)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._started:  # accepted just before `close` stopped the server
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                node = await asyncio.wait_for(
                    self._handshake_accept(reader, writer), HANDSHAKE_TIMEOUT_S
                )
            except (OSError, TimeoutError, asyncio.IncompleteReadError, _Refused) as error:
                peer = writer.get_extra_info("peername")
                log.warning("refused a node connection from %s: %r", peer, error)
                writer.transport.abort()
                return
            old = self._links.get(node)
            if old is not None:
                old.close()
                self._fail_calls(node, "link replaced")
            await self._run_link(_Link(node, reader, writer))
        except asyncio.CancelledError:
            # `close` cancels; asyncio's server callback would report a cancelled task
            writer.transport.abort()
        finally:
            self._tasks.discard(task)

    async def _handshake_dial(
        self, node: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        _write_handshake(writer, MAGIC + nonce + self.node.encode("utf-8"))
        answer = await _read_handshake(reader)
        if not answer.startswith(MAGIC):
            raise _Refused("not a Warren node")
        body = answer[len(MAGIC) :]
        their_nonce = body[:_NONCE_BYTES]
        their_mac = body[_NONCE_BYTES : _NONCE_BYTES + _MAC_BYTES]
        their_name = body[_NONCE_BYTES + _MAC_BYTES :].decode("utf-8", "replace")
        if their_name != node:
            raise _Refused(f"expected node {node}, found {their_name!r}")
        if not hmac.compare_digest(their_mac, self._mac(b"accept", nonce, self.node, node)):
            raise _Refused("the node did not prove the cookie")
        _write_handshake(writer, self._mac(b"dial", their_nonce, self.node, node))
        if await _read_handshake(reader) != _ACCEPTED:
            raise _Refused("the node refused our cookie")

    async def _handshake_accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> str:
        hello = await _read_handshake(reader)
        if not hello.startswith(MAGIC) or len(hello) <= len(MAGIC) + _NONCE_BYTES:
            raise _Refused("not a Warren node")
        body = hello[len(MAGIC) :]
        their_nonce = body[:_NONCE_BYTES]
        node = body[_NONCE_BYTES:].decode("utf-8", "replace")
        if not node < self.node:
            raise _Refused(f"node {node!r} must be dialed by {self.node}, not dial it")
        nonce = secrets.token_bytes(_NONCE_BYTES)
        mac = self._mac(b"accept", their_nonce, node, self.node)
        _write_handshake(writer, MAGIC + nonce + mac + self.node.encode("utf-8"))
        their_mac = await _read_handshake(reader)
        if not hmac.compare_digest(their_mac, self._mac(b"dial", nonce, node, self.node)):
            raise _Refused(f"node {node!r} did not prove the cookie")
        _write_handshake(writer, _ACCEPTED)
        return node

    def _mac(self, role: bytes, nonce: bytes, dialer: str, acceptor: str) -> bytes:
        text = b"\0".join((role, nonce, dialer.encode("utf-8"), acceptor.encode("utf-8")))
        return hmac.new(self._cookie, text, hashlib.sha256).digest()

    async def _run_link(self, link: _Link) -> None:
        node = link.node
        if not self._started:  # the handshake finished while `close` ran
            link.close()
            return
        self._links[node] = link
        log.info("link to node %s up", node)
        if node not in self._partitioned:
            self._notify_link(node, True)
        try:
            await self._read_frames(link)
        except (OSError, asyncio.IncompleteReadError) as error:
            log.debug("link to node %s lost: %r", node, error)
        except Exception:
            log.exception("link to node %s dropped: a frame does not unpickle", node)
        finally:
            link.close()
            if self._links.get(node) is link:
                del self._links[node]
                log.info("link to node %s down", node)
                self._fail_calls(node, "link down")
                if node not in self._partitioned:
                    self._notify_link(node, False)

    async def _read_frames(self, link: _Link) -> None:
        reader = link.reader
        while not link.closed:
            (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            items = pickle.loads(await reader.readexactly(length))
            if link.node in self._partitioned:
                continue
            for item in items:
                self._dispatch(link.node, item)

    def _dispatch(self, node: str, item: tuple[object, ...]) -> None:
        tag = item[0]
        if tag == _MESSAGE:
            for handler in self._message_handlers:
                try:
                    handler(node, item[1])
                except Exception:
                    log.exception("message handler failed on a message from node %s", node)
        elif tag == _REQUEST:
            task = asyncio.get_running_loop().create_task(self._answer(node, item[1], item[2]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            call_id = item[1]
            call = self._calls.get(call_id) if isinstance(call_id, int) else None
            if call is None or call[1].done():
                return  # the caller gave up
            if tag == _RESPONSE:
                call[1].set_result(item[2])
            else:
                call[1].set_exception(_decode_error(item[2]))

    async def _answer(self, node: str, call_id: object, request: object) -> None:
        handler = self._request_handler
        try:
            if handler is None:
                raise RemoteError(f"node {self.node} serves no requests")
            response = await handler(node, request)
            pickle.dumps(response, protocol=5)  # an unpicklable answer is the handler's error
        except Exception as error:
            if not isinstance(error, AmqpError):
                log.warning("request from node %s failed: %r", node, error)
            self._enqueue(node, (_ERROR, call_id, _encode_error(error)))
            return
        self._enqueue(node, (_RESPONSE, call_id, response))

    def _fail_calls(self, node: str, reason: str) -> None:
        for call_node, future in list(self._calls.values()):
            if call_node == node and not future.done():
                future.set_exception(PeerUnavailable(node, reason))

    def _notify_link(self, node: str, up: bool) -> None:
        for handler in self._link_handlers:
            try:
                handler(node, up)
            except Exception:
                log.exception("link handler failed for node %s", node)


def _write_handshake(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(_LENGTH.pack(len(data)) + data)


async def _read_handshake(reader: asyncio.StreamReader) -> bytes:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length > _HANDSHAKE_MAX_BYTES:
        raise _Refused(f"handshake message of {length} bytes")
    return await reader.readexactly(length)


def _encode_error(error: Exception) -> tuple[object, ...]:
    if isinstance(error, AmqpError):
        detail = error.text.partition(" - ")[2]
        return (
            "amqp",
            type(error).__name__,
            int(error.code),
            detail,
            error.class_id,
            error.method_id,
        )
    return ("other", repr(error))


def _decode_error(encoded: object) -> Exception:
    if isinstance(encoded, tuple) and encoded[0] == "amqp":
        _, name, code, detail, class_id, method_id = encoded
        cls = getattr(warren.errors, name, None)
        if not (isinstance(cls, type) and issubclass(cls, AmqpError)):
            cls = AmqpError
        error: Exception = cls(ReplyCode(code), detail, class_id, method_id)
        return error
    return RemoteError(
        f"remote request failed: {encoded[1] if isinstance(encoded, tuple) else encoded}"
    )
