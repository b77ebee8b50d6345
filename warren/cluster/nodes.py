"""Node names and the integer ids Raft knows them by.

Theory of operation:
1. A node is named by a string (`--node-name`); `warren.raft` wants positive ints. The id
   is the CRC-32 of the UTF-8 name plus one: stable across processes and versions (no hash
   seed), positive, and the same on every node without any exchange.
2. Two names may collide (one pair in about 2^32); `NodeNames` refuses the second name
   rather than confuse two nodes.
3. ``cluster_nodes`` names the nodes and their cluster listeners as ``name=host:port``
   entries (`parse_nodes`).
4. A node of several worker processes is in a cluster (and in its own internal one) as
   each of its workers (`warren.runtime.workers.layout`): worker 0 is ``<name>@<host>``
   (``<name>-w0@<host>`` on a node on its own), worker i is ``<name>-w<i>@<host>``.
   Only worker 0 votes in the metadata group; the others are its learners
   (`metadata_voter`), so a node's metadata needs one voter of it, and a dead worker
   other than 0 blocks no declare. A name ending in ``-w<i>`` (i >= 1) is therefore
   reserved for workers.
"""

from __future__ import annotations

import zlib
from typing import Final

# The Raft group every node of a cluster is in: the cluster's definitions.
METADATA_GROUP: Final = "metadata"


def worker_name(node_name: str, index: int) -> str:
    """``<name>-w<i>@<host>`` of node ``<name>@<host>`` (point 4; `worker_of`'s inverse)."""
    name, at, host = node_name.partition("@")
    return f"{name}-w{index}{at}{host}"


def worker_of(member: str) -> tuple[str, int] | None:
    """(``<name>@<host>``, i) of a member named ``<name>-w<i>@<host>``, i >= 1: worker 0
    of its node in a cluster of nodes, and its index (point 4); None for any other name."""
    name, at, host = member.partition("@")
    stem, dash_w, index = name.rpartition("-w")
    if not dash_w or not stem or not index.isdigit() or int(index) < 1:
        return None
    return f"{stem}{at}{host}", int(index)


def metadata_voter(name: str) -> bool:
    """Whether the member `name` may vote in the metadata group (point 4)."""
    return worker_of(name) is None


def node_id(name: str) -> int:
    return zlib.crc32(name.encode("utf-8")) + 1


class NodeNames:
    """The reverse map: ids back to the names seen so far."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._guessed: set[int] = set()  # ids named by `guess`, not yet seen

    def add(self, name: str) -> int:
        """Remember `name`; its id. ValueError if another known name has the same id."""
        identity = node_id(name)
        if identity in self._guessed:
            self._guessed.discard(identity)
            self._names[identity] = name
            return identity
        known = self._names.setdefault(identity, name)
        if known != name:
            raise ValueError(f"node names {known!r} and {name!r} have the same id {identity}")
        return identity

    def guess(self, name: str) -> None:
        """`name` for its id while no name is known for it: a name by convention (another
        node's worker, point 4), which the name then seen for that id replaces."""
        identity = node_id(name)
        if identity not in self._names:
            self._names[identity] = name
            self._guessed.add(identity)

    def name(self, identity: int) -> str | None:
        return self._names.get(identity)


def parse_nodes(entries: list[str]) -> dict[str, tuple[str, int]]:
    """``name=host:port`` entries of ``cluster_nodes``."""
    nodes: dict[str, tuple[str, int]] = {}
    for entry in entries:
        name, sep, address = entry.partition("=")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not name or not port.isdigit():
            raise ValueError(f"cluster_nodes entry {entry!r} is not name=host:port")
        nodes[name] = (host, int(port))
    return nodes
