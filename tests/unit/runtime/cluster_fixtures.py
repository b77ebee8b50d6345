"""A `ClusterNode` on its own, for unit tests of what one node of a cluster decides: its
peers are `QuietLinks`, which report them connected (but those `down`) and carry
nothing, so a test drives the node by calling it and reads what it did. A test that needs
a peer's answer overrides `QuietLinks.call`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from warren.runtime.broker import Broker
from warren.runtime.cluster.calls import PeerMessage, Request
from warren.runtime.cluster.node import ClusterNode
from warren.runtime.cluster.peers import (
    LinkHandler,
    MessageHandler,
    PeerUnavailable,
    RequestHandler,
)
from warren.runtime.config import Config


class QuietLinks:
    """`PeerLinks` to `nodes` that send nothing and answer no call; every node reports
    connected but those `down`."""

    listen_address = ("127.0.0.1", 0)

    def __init__(self, nodes: Iterable[str], down: Iterable[str] = ()) -> None:
        self.nodes = sorted(nodes)
        self.down = set(down)

    def address(self, node: str) -> tuple[str, int] | None:
        return None

    def set_address(self, node: str, host: str, port: int) -> None: ...

    def forget(self, node: str) -> None: ...

    def on_message(self, handler: MessageHandler) -> None: ...

    def on_link(self, handler: LinkHandler) -> None: ...

    def serve(self, handler: RequestHandler) -> None: ...

    def connected(self, node: str) -> bool:
        return node not in self.down

    def send(self, node: str, message: PeerMessage) -> None: ...

    async def call(self, node: str, request: Request, timeout: float = 5.0) -> object:
        raise PeerUnavailable(node, "no peer answers in this test")

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def cluster_node(
    tmp_path: Path,
    name: str,
    members: list[str],
    links: QuietLinks | None = None,
    nodes_of: Mapping[str, str] | None = None,
) -> ClusterNode:
    """Member `name` of a cluster of `members` (each at its own port on loopback), its
    data in `tmp_path`, over `links` (by default quiet links to the other members, all
    connected); `nodes_of` as `ClusterNode` takes it."""
    config = Config(
        node_name=name,
        data_dir=tmp_path,
        cluster_nodes=[f"{member}=127.0.0.1:{port}" for port, member in enumerate(members, 1)],
        cluster_cookie="test",
    )
    if links is None:
        links = QuietLinks(member for member in members if member != name)
    return ClusterNode(Broker(config), config, links=links, nodes_of=nodes_of)
