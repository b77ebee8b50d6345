"""The metadata group's machine on a real broker and definitions store, without sockets or
Raft: the log's stored forms (entries and snapshots must stay readable by every later
version), and what concurrent changes converge to.

The hex bytes below are what the metadata log stored: pickles of an operation and of a
snapshot's ``(Definitions, placements, transient operations)`` (written up to Warren 0.3),
and the versioned MessagePack encoding written since (`warren.cluster.metadata`). A change
to what the metadata log stores must keep applying them all."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from warren.cluster import metadata as metadata_format
from warren.cluster.metadata import Operation
from warren.runtime.broker import Broker
from warren.runtime.cluster import metadata
from warren.runtime.cluster.metadata import (
    MetadataMachine,
    ReplicatedDefinitions,
    TransientDefinitions,
)
from warren.runtime.cluster.raft_host import EntryMeta
from warren.runtime.config import Config
from warren.storage.definitions import DefinitionsStore, PolicyDefinition

# ("rabbit@a", "put_policy", (PolicyDefinition("/", "ha", "^q\\.", "queues", 3,
# {"max-length": 10}),)), pickle protocol 5
ENTRY = bytes.fromhex(
    "80059584000000000000008c087261626269744061948c0a7075745f706f6c696379948c1a77617272"
    "656e2e73746f726167652e646566696e6974696f6e73948c10506f6c696379446566696e6974696f6e"
    "9493942981945d94288c012f948c026861948c045e715c2e948c06717565756573944b037d948c0a6d"
    "61782d6c656e677468944b0a736562859487942e"
)
# ("rabbit@a/1", 1, PutPolicy(the policy above)), format 1
ENTRY_V1 = bytes.fromhex(
    "0193aa72616262697440612f310192aa7075745f706f6c69637986a576686f7374a12fa46e616d65a26861"
    "a77061747465726ea45e715c2ea86170706c795f746fa6717565756573a87072696f7269747903aa6465"
    "66696e6974696f6e81aa6d61782d6c656e6774680a"
)
# (Definitions(vhosts=(VHostDefinition("v1", "a vhost"),), users=(UserDefinition("ann",
# "hash", ("administrator",)),), policies=(the policy above,), global_parameters=
# {"cluster_name": "warren-test"}), {}, []), pickle protocol 5
SNAPSHOT = bytes.fromhex(
    "80059540010000000000008c1a77617272656e2e73746f726167652e646566696e6974696f6e73948c"
    "0b446566696e6974696f6e739493942981945d942868008c0f56486f7374446566696e6974696f6e94"
    "93942981945d94288c027631948c07612076686f737494294e6562859468008c0e5573657244656669"
    "6e6974696f6e9493942981945d94288c03616e6e948c0468617368948c0d61646d696e697374726174"
    "6f729485948c1e7261626269745f70617373776f72645f68617368696e675f73686132353694656285"
    "942929292968008c10506f6c696379446566696e6974696f6e9493942981945d94288c012f948c0268"
    "61948c045e715c2e948c06717565756573944b037d948c0a6d61782d6c656e677468944b0a73656285"
    "9429297d948c0c636c75737465725f6e616d65948c0b77617272656e2d74657374947365627d945d94"
    "87942e"
)

# Snapshot(the definitions above, [], [], {"rabbit@a/1": 1}), format 1
SNAPSHOT_V1 = bytes.fromhex(
    "01948aa676686f7374739184a46e616d65a27631ab6465736372697074696f6ea7612076686f7374a474"
    "61677390b264656661756c745f71756575655f74797065c0a575736572739184a46e616d65a3616e6ead"
    "70617373776f72645f68617368a468617368a47461677391ad61646d696e6973747261746f72b1686173"
    "68696e675f616c676f726974686dbe7261626269745f70617373776f72645f68617368696e675f736861"
    "323536ab7065726d697373696f6e7390a965786368616e67657390a671756575657390a862696e64696e"
    "677390a8706f6c69636965739186a576686f7374a12fa46e616d65a26861a77061747465726ea45e715c"
    "2ea86170706c795f746fa6717565756573a87072696f7269747903aa646566696e6974696f6e81aa6d61"
    "782d6c656e6774680ab16f70657261746f725f706f6c696369657390b1746f7069635f7065726d697373"
    "696f6e7390b1676c6f62616c5f706172616d657465727381ac636c75737465725f6e616d65ab77617272"
    "656e2d74657374909081aa72616262697440612f3101"
)


class Node:
    """What the metadata machine reaches of a `ClusterNode`: its name, broker and
    replicated store; proposals are recorded (the test decides the log's order)."""

    def __init__(self, name: str, data_dir: Path, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.broker = Broker(Config(data_dir=data_dir, node_name=name))
        self.definitions = ReplicatedDefinitions(
            DefinitionsStore.open(data_dir / "definitions.db"), self
        )
        self.machine = MetadataMachine(self)
        self.transient = TransientDefinitions(self)
        self.proposed: list[Operation] = []
        self.loop = loop
        self.index = 0

    def replicate(self, operation: Operation) -> asyncio.Future[object]:
        self.proposed.append(operation)
        return self.loop.create_future()

    def apply(self, data: bytes) -> object:
        self.index += 1
        return self.machine.apply(EntryMeta(self.index, 1, None), data)

    def placements(self) -> dict[tuple[str, str], tuple[str, list[str]]]:
        return {}  # no quorum queues here

    def policies(self) -> list[tuple[str, Any]]:
        stored = self.definitions.store.load().policies
        return [(policy.name, dict(policy.definition)) for policy in stored]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def logged(operation: Operation) -> bytes:
    """An operation in the log with no sender (as entries written before numbering)."""
    return metadata.logged(operation, "", 0)


def logged_as(operation: Operation, sender: str, number: int) -> bytes:
    """An operation as `ClusterNode.replicate` stores it in the log now."""
    return metadata.logged(operation, sender, number)


def node(name: str, tmp_path: Path, loop: asyncio.AbstractEventLoop) -> Node:
    return Node(name, tmp_path / name, loop)


@pytest.mark.parametrize("entry", [ENTRY, ENTRY_V1], ids=["pickle", "format-1"])
def test_an_entry_of_every_format_is_applied(
    tmp_path: Path, loop: asyncio.AbstractEventLoop, entry: bytes
) -> None:
    b = node("rabbit@b", tmp_path, loop)
    b.apply(entry)
    assert b.policies() == [("ha", {"max-length": 10})]
    assert b.broker.vhosts["/"].policies.get("ha") is not None
    assert b.definitions.store.applied_index() == 1


@pytest.mark.parametrize("snapshot", [SNAPSHOT, SNAPSHOT_V1], ids=["pickle", "format-1"])
def test_a_snapshot_of_every_format_is_restored(
    tmp_path: Path, loop: asyncio.AbstractEventLoop, snapshot: bytes
) -> None:
    b = node("rabbit@b", tmp_path, loop)
    b.machine.restore(snapshot)
    assert "v1" in b.broker.vhosts
    assert "ann" in b.broker.access.users
    assert b.broker.cluster_name == "warren-test"
    assert b.policies() == [("ha", {"max-length": 10})]


def test_a_snapshot_is_written_in_the_current_format(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    b = node("rabbit@b", tmp_path, loop)
    b.machine.restore(SNAPSHOT)
    written = b.machine.snapshot()
    assert written[0] == metadata_format.FORMAT
    c = node("rabbit@c", tmp_path, loop)
    c.machine.restore(written)
    assert c.policies() == b.policies()
    assert c.broker.cluster_name == "warren-test"


def policy(value: int) -> PolicyDefinition:
    return PolicyDefinition("/", "limit", "^q", "queues", 0, {"max-length": value})


def changed_at_once(tmp_path: Path, loop: asyncio.AbstractEventLoop) -> tuple[Node, Node]:
    """Two nodes that each changed one policy before the log brought the other's change."""
    a, b = node("rabbit@a", tmp_path, loop), node("rabbit@b", tmp_path, loop)
    a.definitions.put_policy(policy(1))
    b.definitions.put_policy(policy(2))
    return a, b


@pytest.mark.parametrize("a_first", [True, False])
def test_concurrent_changes_end_with_the_last_in_the_log_everywhere(
    tmp_path: Path, loop: asyncio.AbstractEventLoop, a_first: bool
) -> None:
    a, b = changed_at_once(tmp_path, loop)
    log = [*a.proposed, *b.proposed] if a_first else [*b.proposed, *a.proposed]
    for entry in log:
        data = logged(entry)
        a.apply(data)
        b.apply(data)
    last = 2 if a_first else 1
    assert a.policies() == b.policies() == [("limit", {"max-length": last})]


def test_an_operation_committed_twice_leaves_every_node_the_same(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """A new leader may commit again an operation its proposer's leader had taken: the copy
    is skipped on every node, so both keep the change that came after it."""
    a, b = changed_at_once(tmp_path, loop)
    numbered = [
        *(logged_as(entry, "rabbit@a/1", 1) for entry in a.proposed),
        *(logged_as(entry, "rabbit@b/1", 1) for entry in b.proposed),
        *(logged_as(entry, "rabbit@a/1", 1) for entry in a.proposed),
    ]
    for data in numbered:
        a.apply(data)
        b.apply(data)
    assert a.policies() == b.policies() == [("limit", {"max-length": 2})]


def test_a_copy_committed_again_is_skipped_after_a_snapshot_too(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """The senders' last numbers travel in the snapshot: a node restored from one skips a
    copy of an operation the snapshot already holds."""
    a, b = changed_at_once(tmp_path, loop)
    first = logged_as(a.proposed[0], "rabbit@a/1", 1)
    a.apply(first)
    a.apply(logged_as(b.proposed[0], "rabbit@b/1", 1))
    c = node("rabbit@c", tmp_path, loop)
    c.machine.restore(a.machine.snapshot())
    c.index = a.index
    for later in (a, c):
        later.apply(first)
    assert a.policies() == c.policies() == [("limit", {"max-length": 2})]
