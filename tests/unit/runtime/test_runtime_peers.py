"""The node transport on real loopback sockets: links, the cookie handshake, batching of
messages, RPC with remote errors, reconnection and the partition hook."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import struct
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

import pytest

from warren.errors import ReplyCode, SoftError, queue_not_found
from warren.runtime.cluster import peers as peers_module
from warren.runtime.cluster.calls import (
    AppliedThrough,
    Call,
    CallError,
    GroupStatus,
    PeerMessage,
    QueueCounts,
    RaftTraffic,
    Request,
)
from warren.runtime.cluster.frames import Item, Send, encode_frame
from warren.runtime.cluster.peers import MAGIC, Peers, PeerUnavailable, RemoteError

COOKIE = "secret cookie"
STATUS: Final = GroupStatus("x")


def note(*words: str) -> RaftTraffic:
    """A message to send: any type of the link's would do."""
    return RaftTraffic(" ".join(words).encode())


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 15))


async def start_nodes(
    *names: str, cookie: str = COOKIE, local: dict[str, str] | None = None
) -> dict[str, Peers]:
    """Nodes `names`, each given every other's TCP address; those in `local` are the
    workers of one node, given each other's Unix sockets too (`Peers`' rule 7)."""
    local = local or {}
    nodes = {
        name: Peers(name, cookie, "127.0.0.1", 0, {}, local if name in local else None)
        for name in names
    }
    for peers in nodes.values():
        await peers.start()
    for peers in nodes.values():
        for other in nodes.values():
            peers.set_address(other.node, "127.0.0.1", other.port)
    return nodes


async def eventually(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def linked(nodes: dict[str, Peers]) -> None:
    """Wait until every pair holds one link at both ends and no dial is under way that may
    replace it. `connected` is true as soon as either end admitted a connection: when
    both nodes dial at once, the losing one may be in use a moment before the winner
    replaces it, and then what was sent on it may be lost and the calls on it fail with
    "link replaced"."""

    def settled(x: str, y: str) -> bool:
        if not (nodes[x].connected(y) and nodes[y].connected(x)):
            return False
        if link_ends(nodes[x], y) != link_ends(nodes[y], x)[::-1]:
            return False
        # a node's dialer either runs the link it dialed or may still replace it
        return all(
            node not in nodes[dialer]._dialers or nodes[dialer]._links[node].dialer == dialer
            for dialer, node in ((x, y), (y, x))
        )

    await eventually(lambda: all(settled(x, y) for x in nodes for y in nodes if x < y))


async def close_all(nodes: dict[str, Peers]) -> None:
    for peers in nodes.values():
        await peers.close()


def test_messages_flow_both_ways_on_one_link_per_pair() -> None:
    async def body() -> None:
        nodes = await start_nodes("a", "b", "c")
        received: list[tuple[str, str, str]] = []
        for name, peers in nodes.items():
            peers.on_message(functools.partial(record, received, name))
        await linked(nodes)
        for x in nodes:  # every node dialed every other: the lower name's connection won
            for y in nodes:
                if x < y:
                    assert link_ends(nodes[x], y)[1] == ("127.0.0.1", nodes[y].port)
        for x in nodes:
            for y in nodes:
                if x != y:
                    nodes[x].send(y, note("hello", x, y))
                    nodes[x].send(y, note("again", x, y))
        await eventually(lambda: len(received) == 12)
        assert sorted(received) == sorted(
            (y, x, f"{word} {x} {y}")
            for x in nodes
            for y in nodes
            if x != y
            for word in ("hello", "again")
        )
        # per sender, order holds
        assert [m for r, s, m in received if (r, s) == ("b", "a")] == [
            "hello a b",
            "again a b",
        ]
        await close_all(nodes)

    run(body)


def link_ends(peers: Peers, node: str) -> tuple[object, object]:
    """The local and remote socket addresses of the node's link (one TCP connection)."""
    writer = peers._links[node].writer
    return writer.get_extra_info("sockname"), writer.get_extra_info("peername")


def record(into: list[tuple[str, str, str]], name: str, sender: str, message: PeerMessage) -> None:
    assert type(message) is RaftTraffic
    into.append((name, sender, message.messages.decode()))


@pytest.fixture
def sockets_dir() -> Iterator[Path]:
    """A short directory for Unix sockets (a socket's path has at most 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="warren-peers-") as directory:
        yield Path(directory)


def sockets(directory: Path, *names: str) -> dict[str, str]:
    return {name: str(directory / f"{name}.link") for name in names}


def family(peers: Peers, node: str) -> int:
    return int(peers._links[node].writer.get_extra_info("socket").family)


def test_the_workers_of_a_node_link_over_unix_sockets_and_other_nodes_over_tcp(
    sockets_dir: Path,
) -> None:
    async def body() -> None:
        stale = socket.socket(socket.AF_UNIX)  # a worker killed -9 leaves its socket behind
        stale.bind(str(sockets_dir / "b.link"))
        stale.close()
        # a and b are the workers of one node, c another node of the cluster
        nodes = await start_nodes("a", "b", "c", local=sockets(sockets_dir, "a", "b"))
        await eventually(lambda: all(nodes[x].connected(y) for x in nodes for y in nodes if x != y))
        assert family(nodes["a"], "b") == family(nodes["b"], "a") == socket.AF_UNIX
        for x, y in (("a", "c"), ("c", "a"), ("b", "c"), ("c", "b")):
            assert family(nodes[x], y) == socket.AF_INET
        received: list[tuple[str, str, str]] = []
        nodes["b"].on_message(functools.partial(record, received, "b"))
        nodes["b"].serve(lambda sender, request: asyncio.sleep(0, result={"from": sender}))
        nodes["a"].send("b", note("over the unix socket"))
        assert await nodes["a"].call("b", STATUS) == {"from": "a"}
        await eventually(lambda: received == [("b", "a", "over the unix socket")])
        # a socket removed under a worker (a cleaner of /tmp): it is dialed over TCP
        os.unlink(sockets_dir / "b.link")
        nodes["b"].forget("a")  # drops the link; a alone dials again
        a = nodes["a"]
        await eventually(lambda: a.connected("b") and family(a, "b") == socket.AF_INET)
        nodes["a"].send("b", note("over tcp"))
        await eventually(lambda: len(received) == 2)
        await close_all(nodes)
        assert sorted(os.listdir(sockets_dir)) == []  # each removed its own

    run(body)


class CountingWriter:
    """A link's writer that counts the writes it is asked for."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.writes = 0

    def writelines(self, data: Iterable[bytes]) -> None:
        self.writes += 1
        self.writer.writelines(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.writer, name)


def test_a_turn_s_items_for_a_peer_go_in_one_write_and_are_decoded_in_one_pass(
    sockets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[int] = []  # the items of each frame b decodes

    def decode_frame(data: bytes | memoryview) -> list[Item]:
        items = encoded(data)
        decoded.append(len(items))
        return items

    encoded = peers_module.decode_frame
    monkeypatch.setattr(peers_module, "decode_frame", decode_frame)

    async def body() -> None:
        nodes = await start_nodes("a", "b", local=sockets(sockets_dir, "a", "b"))
        a, b = nodes["a"], nodes["b"]
        received: list[tuple[str, str, str]] = []
        b.on_message(functools.partial(record, received, "b"))
        b.serve(lambda sender, request: asyncio.sleep(0, result={"from": sender}))
        await eventually(lambda: a.connected("b") and b.connected("a"))
        writer = CountingWriter(a._links["b"].writer)
        a._links["b"].writer = writer  # type: ignore[assignment]
        decoded.clear()
        # one loop turn: the call's task runs (and asks) before the flush the first send
        # queued, so the 300 messages and the request go in one frame
        answer = asyncio.ensure_future(a.call("b", STATUS))
        for number in range(300):
            a.send("b", note(str(number)))
        assert writer.writes == 0
        await asyncio.sleep(0)
        assert writer.writes == 1
        assert await answer == {"from": "a"}
        await eventually(lambda: len(received) == 300)
        assert writer.writes == 1
        assert decoded[0] == 301  # the messages and the call: one frame, one decode
        assert [words for _, _, words in received] == [str(n) for n in range(300)]
        a.send("b", note("next turn"))
        await eventually(lambda: len(received) == 301)
        assert writer.writes == 2
        await close_all(nodes)

    run(body)


def test_rpc_answers_and_raises_remote_amqp_errors_as_themselves() -> None:
    async def body() -> None:
        nodes = await start_nodes("a", "b")

        async def handler(sender: str, request: Request) -> object:
            if request == GroupStatus("missing"):
                raise queue_not_found("q", "/")
            if request == GroupStatus("bug"):
                raise KeyError("oops")
            if type(request) is AppliedThrough:
                return request.index == 42
            assert type(request) is GroupStatus
            return {"from": sender, "group": request.group_id, "members": ("a", "b")}

        nodes["a"].serve(handler)
        nodes["b"].serve(handler)
        await linked(nodes)
        # the answer comes back as the type the request names (a map of plain values)
        assert await nodes["b"].call("a", GroupStatus("work")) == {
            "from": "b",
            "group": "work",
            "members": ["a", "b"],
        }
        assert await nodes["a"].call("b", AppliedThrough(42)) is True
        with pytest.raises(SoftError) as raised:
            await nodes["b"].call("a", GroupStatus("missing"))
        assert raised.value.code is ReplyCode.NOT_FOUND
        assert raised.value.text == "NOT_FOUND - no queue 'q' in vhost '/'"
        with pytest.raises(RemoteError, match="oops"):
            await nodes["a"].call("b", GroupStatus("bug"))
        await close_all(nodes)

    run(body)


def test_a_call_to_a_dead_node_raises_peer_unavailable() -> None:
    async def body() -> None:
        nodes = await start_nodes("a", "b")

        async def slow(sender: str, request: Request) -> object:
            await asyncio.sleep(10)
            return None

        nodes["b"].serve(slow)
        await linked(nodes)
        with pytest.raises(PeerUnavailable, match="no answer"):
            await nodes["a"].call("b", STATUS, timeout=0.1)
        pending = asyncio.ensure_future(nodes["a"].call("b", STATUS))
        await asyncio.sleep(0.05)
        await nodes["b"].close()
        with pytest.raises(PeerUnavailable, match="link down"):
            await pending
        await eventually(lambda: not nodes["a"].connected("b"))
        with pytest.raises(PeerUnavailable, match="not connected"):
            await nodes["a"].call("b", STATUS)
        with pytest.raises(PeerUnavailable, match="not connected"):
            await nodes["a"].call("nobody", STATUS)
        await nodes["a"].close()

    run(body)


def test_a_node_without_the_cookie_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        good = await start_nodes("b", "c")
        bad = Peers("a", "wrong cookie", "127.0.0.1", 0, {"b": ("127.0.0.1", good["b"].port)})
        await bad.start()
        received: list[object] = []
        good["b"].on_message(lambda sender, message: received.append(message))
        await eventually(lambda: good["b"].connected("c"))
        await asyncio.sleep(0.3)  # several dial attempts
        assert not bad.connected("b") and not good["b"].connected("a")
        bad.send("b", note("let me in"))
        # Something that does not check the acceptor's proof and sends a wrong one of its own.
        reader, writer = await asyncio.open_connection("127.0.0.1", good["b"].port)
        hello = MAGIC + b"n" * 16 + b"i" * 8 + b"a"
        writer.write(struct.pack(">I", len(hello)) + hello)
        await reader.readexactly(struct.unpack(">I", await reader.readexactly(4))[0])
        writer.write(struct.pack(">I", 32) + b"m" * 32 + frame([Send(note("let me in"))]))
        assert await reader.read() == b""  # closed, nothing decoded
        writer.close()
        assert received == [] and not good["b"].connected("a")
        await bad.close()
        await close_all(good)

    with caplog.at_level(logging.WARNING, logger="warren.peers"):
        run(body)
    messages = [r.getMessage() for r in caplog.records]
    assert any("handshake with node b" in m and "did not prove the cookie" in m for m in messages)
    assert any("refused a node connection" in m and "did not prove" in m for m in messages)


def test_a_connection_that_skips_the_handshake_is_refused() -> None:
    async def body() -> None:
        nodes = await start_nodes("b")
        received: list[object] = []
        nodes["b"].on_message(lambda sender, message: received.append(message))
        reader, writer = await asyncio.open_connection("127.0.0.1", nodes["b"].port)
        writer.write(frame([Send(note("hello"))]))
        assert await reader.read() == b""
        writer.close()
        assert received == []
        await close_all(nodes)

    run(body)


def frame(items: list[Send]) -> bytes:
    payload = encode_frame(list(items))
    return struct.pack(">I", len(payload)) + payload


def test_a_dialer_reconnects_when_the_node_comes_back() -> None:
    async def body() -> None:
        nodes = await start_nodes("a", "b")
        changes: list[tuple[str, bool]] = []
        nodes["a"].on_link(lambda node, up: changes.append((node, up)))
        await eventually(lambda: nodes["a"].connected("b"))
        port = nodes["b"].port
        await nodes["b"].close()
        await eventually(lambda: not nodes["a"].connected("b"))
        await asyncio.sleep(0.3)  # a few failed dials with backoff
        again = Peers("b", COOKIE, "127.0.0.1", port, {})
        got: list[object] = []
        again.on_message(lambda sender, message: got.append(message))
        await again.start()
        await eventually(lambda: nodes["a"].connected("b"))
        nodes["a"].send("b", note("welcome back"))
        await eventually(lambda: got == [note("welcome back")])
        assert transitions(changes)[:3] == [("b", True), ("b", False), ("b", True)]
        await again.close()
        await nodes["a"].close()

    run(body)


def test_a_partition_drops_traffic_until_it_heals() -> None:
    async def body() -> None:
        nodes = await start_nodes("a", "b")
        got: list[object] = []
        changes: list[tuple[str, bool]] = []
        nodes["b"].on_message(lambda sender, message: got.append(message))
        nodes["a"].on_link(lambda node, up: changes.append((node, up)))
        await linked(nodes)
        nodes["b"].partition({"a"})  # b drops what a sends
        nodes["a"].send("b", note("lost"))
        nodes["a"].partition({"b"})
        nodes["a"].send("b", note("not sent"))
        assert not nodes["a"].connected("b")
        with pytest.raises(PeerUnavailable):
            await nodes["a"].call("b", STATUS)
        await asyncio.sleep(0.05)
        nodes["a"].partition(set())
        nodes["b"].partition(set())
        nodes["a"].send("b", note("after"))
        await eventually(lambda: got == [note("after")])
        assert transitions(changes) == [("b", True), ("b", False), ("b", True)]
        await close_all(nodes)

    run(body)


def transitions(changes: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """`changes` without repeats in a row: a link that replaced another (both nodes dialed
    at once) is "up" again."""
    return [change for i, change in enumerate(changes) if i == 0 or changes[i - 1] != change]


def test_a_node_nobody_knows_dials_in_and_is_dialed_back_after_a_restart() -> None:
    # z sorts last and knows only a; a has no address for it. The hello carries z's
    # address, so once z restarts (knowing nobody now) a dials it back.
    async def body() -> None:
        a = Peers("a", COOKIE, "127.0.0.1", 0, {})
        await a.start()
        z = Peers("z", COOKIE, "127.0.0.1", 0, {"a": ("127.0.0.1", a.port)})
        await z.start()
        changes: list[tuple[str, bool]] = []
        a.on_link(lambda node, up: changes.append((node, up)))
        await eventually(lambda: a.connected("z") and z.connected("a"))
        assert a.address("z") == z.listen_address and a.nodes == ["z"]
        port = z.port
        await z.close()
        await eventually(lambda: not a.connected("z"))
        again = Peers("z", COOKIE, "127.0.0.1", port, {})
        got: list[object] = []
        again.on_message(lambda sender, message: got.append(message))
        await again.start()
        await eventually(lambda: again.connected("a"))
        assert again.address("a") == a.listen_address
        a.send("z", note("found you"))
        await eventually(lambda: got == [note("found you")])
        assert changes == [("z", True), ("z", False), ("z", True)]
        await again.close()
        await a.close()

    run(body)


def test_nodes_that_dial_each_other_at_once_agree_on_one_link() -> None:
    async def one_pair() -> None:
        nodes = await start_nodes("a", "b")  # both dial, in the same loop turn
        changes: list[tuple[str, str, bool]] = []
        for name, peers in nodes.items():
            peers.on_link(functools.partial(note_link, changes, name))
        await linked(nodes)
        assert link_ends(nodes["a"], "b")[1] == ("127.0.0.1", nodes["b"].port)  # a dialed it
        # no "down" on the way ("up" again where a link replaced the one that lost)
        assert set(changes) == {("a", "b", True), ("b", "a", True)}
        await close_all(nodes)

    async def body() -> None:
        for _ in range(10):
            await one_pair()

    run(body)


def note_link(into: list[tuple[str, str, bool]], name: str, node: str, up: bool) -> None:
    into.append((name, node, up))


class Freezer:
    """A TCP forwarder that can go silent without closing anything: what a node sees of
    a peer whose host crashed (its end of the link stays open)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = False
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target_reader, target_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, target_writer]
        await asyncio.gather(self._pipe(reader, target_writer), self._pipe(target_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not self.frozen:
            data = await reader.read(65536)
            if not data or self.frozen:
                return  # nothing is closed
            writer.write(data)

    async def close(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.server.close()
        await self.server.wait_closed()


def test_a_node_back_from_a_crash_replaces_the_half_open_link_of_its_previous_life() -> None:
    # a's link to b was dialed by a, so it wins against b's dial of the same life of b;
    # b's next life dials in while a still holds the old link open, and takes its place.
    async def body() -> None:
        a = Peers("a", COOKIE, "127.0.0.1", 0, {})
        b = Peers("b", COOKIE, "127.0.0.1", 0, {})
        await a.start()
        await b.start()
        proxy = Freezer(b.port)
        a.set_address("b", "127.0.0.1", await proxy.start())
        await eventually(lambda: a.connected("b") and b.connected("a"))
        proxy.frozen = True
        await b.close()  # a's end of the link stays open: it still thinks b is there
        again = Peers("b", COOKIE, "127.0.0.1", 0, {"a": ("127.0.0.1", a.port)})
        await again.start()
        await eventually(lambda: again.connected("a"))
        assert link_ends(a, "b") == link_ends(again, "a")[::-1]
        await again.close()
        await a.close()
        await proxy.close()

    run(body)


def test_a_frame_that_does_not_decode_drops_that_link_not_the_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        nodes = await start_nodes("a", "b", "c")
        got: list[tuple[str, PeerMessage]] = []
        nodes["b"].on_message(lambda sender, message: got.append((sender, message)))
        await linked(nodes)
        changes: list[tuple[str, bool]] = []
        nodes["b"].on_link(lambda node, up: changes.append((node, up)))
        writer = nodes["a"]._links["b"].writer
        garbage = b"\x01\x91\x92\x09\xc0"  # format 1, one item of an unknown tag
        writer.write(struct.pack(">I", len(garbage)) + garbage)
        await eventually(lambda: ("a", False) in changes)
        nodes["c"].send("b", note("still here"))  # b's other links carry on
        await eventually(lambda: ("c", note("still here")) in got)
        await linked(nodes)  # both dial again
        nodes["a"].send("b", note("back"))  # the dropped link is dialed again
        await eventually(lambda: ("a", note("back")) in got)
        await close_all(nodes)

    with caplog.at_level(logging.ERROR, logger="warren.peers"):
        run(body)
    assert any(
        "link to node a dropped: malformed peer frame" in r.getMessage() for r in caplog.records
    )


def test_an_answer_that_is_not_its_request_s_reply_type_drops_the_link() -> None:
    async def body() -> None:
        nodes = await start_nodes("a", "b")

        async def wrong(sender: str, request: Request) -> object:
            return "not a map"  # GroupStatus is answered with a map or None

        nodes["b"].serve(wrong)
        await linked(nodes)
        with pytest.raises(PeerUnavailable, match="link down"):
            await nodes["a"].call("b", STATUS)
        await close_all(nodes)

    run(body)


def test_what_a_node_sends_as_a_link_comes_up_arrives_when_both_dial_at_once() -> None:
    # Both nodes dial in the same loop turn: the acceptor of the losing connection may
    # admit it, hear "up" and send on it before its own dial's link replaces it, while the
    # other side never reads it. The handlers hear "up" again with the winning link, so a
    # message sent on "up" (the classic queues a node owns: `RemoteQueues._link`) arrives.
    async def one_pair() -> None:
        nodes = {name: Peers(name, COOKIE, "127.0.0.1", 0, {}) for name in ("a", "b")}
        received: list[tuple[str, str, str]] = []
        for name, peers in nodes.items():
            await peers.start()
            peers.on_message(functools.partial(record, received, name))
            peers.on_link(functools.partial(greet, peers))
        for peers in nodes.values():
            for other in nodes.values():
                peers.set_address(other.node, "127.0.0.1", other.port)
        await eventually(lambda: {(r, s) for r, s, _ in received} == {("a", "b"), ("b", "a")})
        await close_all(nodes)

    async def body() -> None:
        for _ in range(20):
            await one_pair()

    run(body)


def greet(peers: Peers, node: str, up: bool) -> None:
    if up:
        peers.send(node, note("hello from", peers.node))


def test_an_item_that_does_not_encode_fails_its_request_and_the_rest_of_its_frame_goes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A name AMQP allows but a MessagePack str cannot carry (lone surrogates) once made
    the link drop the whole frame: the calls batched with it were never answered."""
    odd = b"q\xff".decode("utf-8", "surrogateescape")

    async def body() -> None:
        nodes = await start_nodes("a", "b")
        a, b = nodes["a"], nodes["b"]
        got: list[tuple[str, PeerMessage]] = []
        a.on_message(lambda sender, message: got.append((sender, message)))
        b.on_message(lambda sender, message: got.append((sender, message)))

        async def handler(sender: str, request: Request) -> object:
            assert type(request) is GroupStatus
            if request.group_id == "missing":  # its failure does not encode either
                raise queue_not_found(odd, "/")
            return {"group": request.group_id}

        b.serve(handler)
        await linked(nodes)

        async def sends() -> None:
            b.send("a", CallError(8, ReplyCode.NOT_FOUND, odd))  # a's queue call 8 waits
            a.send("b", note("before"))
            a.send("b", Call(7, QueueCounts("/", odd)))  # a queue's call waits on number 7
            a.send("b", note("after"))

        # one loop turn: every item goes in one frame
        turn = [
            asyncio.ensure_future(a.call("b", GroupStatus(name)))
            for name in ("one", odd, "missing", "two")
        ]
        turn.append(asyncio.ensure_future(sends()))
        one, bad, missing, two, _ = await asyncio.gather(*turn, return_exceptions=True)
        assert (one, two) == ({"group": "one"}, {"group": "two"})
        for error in (bad, missing):
            assert isinstance(error, SoftError) and error.code == ReplyCode.INTERNAL_ERROR
        assert isinstance(bad, SoftError) and "GroupStatus for another node" in bad.text
        await eventually(lambda: ("a", note("after")) in got)
        assert [m for s, m in got if s == "a"] == [note("before"), note("after")]

        # a queue's caller hears a refusal for its number: 7 as if from its home, 8 from it
        def refusals() -> list[tuple[int, int, str]]:
            return sorted(
                (m.number, m.code, m.detail) for s, m in got if s == "b" and type(m) is CallError
            )

        await eventually(lambda: len(refusals()) == 2)
        cannot = "does not encode: 'utf-8' codec can't encode character '\\udcff'"
        assert refusals() == [
            (
                7,
                ReplyCode.INTERNAL_ERROR,
                f"a Call for another node {cannot} in position 1: surrogates not allowed",
            ),
            (
                8,
                ReplyCode.INTERNAL_ERROR,
                f"a CallError for another node {cannot} in position 1: surrogates not allowed",
            ),
        ]
        await close_all(nodes)

    with caplog.at_level(logging.ERROR, logger="warren.peers"):
        run(body)
    assert any("not sent to node b: INTERNAL_ERROR" in r.getMessage() for r in caplog.records)
    assert any("not sent to node a: INTERNAL_ERROR" in r.getMessage() for r in caplog.records)
