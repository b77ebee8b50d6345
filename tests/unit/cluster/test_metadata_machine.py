"""The metadata group's pure side (`warren.cluster.metadata`): the typed operations, the
versioned encoding of log entries and snapshots, the reading of what earlier releases
pickled, and the transition, all without a broker, a store or a network."""

from __future__ import annotations

import pickle
from typing import Any

import msgspec
import pytest

from warren.cluster import metadata
from warren.cluster.metadata import (
    OPERATIONS,
    Bind,
    Change,
    ClassicQueue,
    DeleteBinding,
    DeleteClassicQueue,
    DeleteExchange,
    DeleteOperatorPolicy,
    DeletePermission,
    DeletePolicy,
    DeleteQueue,
    DeleteTopicPermissions,
    DeleteUser,
    DeleteVHost,
    Entry,
    ExchangeDeclare,
    ExchangeDelete,
    Meta,
    MetadataFormatError,
    NodeAddress,
    NodeForgotten,
    Operation,
    PutBinding,
    PutExchange,
    PutGlobalParameter,
    PutOperatorPolicy,
    PutPermission,
    PutPolicy,
    PutQueue,
    PutTopicPermission,
    PutUser,
    PutVHost,
    QueueDeclare,
    QueueDelete,
    QueueMembers,
    Recorded,
    Snapshot,
    State,
    TransientExchange,
    Unbind,
)
from warren.legacy import LegacyDataError
from warren.storage.definitions import (
    BindingDefinition,
    Definitions,
    ExchangeDefinition,
    PermissionDefinition,
    PolicyDefinition,
    QueueDefinition,
    TopicPermissionDefinition,
    UserDefinition,
    VHostDefinition,
)

TABLE = b"\x00\x00\x00\x00"
QUEUE = QueueDefinition("/", "q", True, False, TABLE, "classic", 0)
QUORUM = QueueDefinition("/", "qq", True, False, TABLE, "quorum", 0)
BINDING = BindingDefinition("/", "x", "q", "queue", "k", TABLE)
POLICY = PolicyDefinition("/", "ha", "^q", "queues", 1, {"max-length": 10})

# name -> (the arguments an earlier release logged for it, the operation they are now)
OLD_SHAPES: dict[str, tuple[tuple[Any, ...], Operation]] = {
    "exchange_declare": (
        ("/", "x", "topic", (True, False, True), TABLE),
        ExchangeDeclare("/", "x", "topic", True, False, True, TABLE),
    ),
    "exchange_delete": (("/", "x", True), ExchangeDelete("/", "x", True)),
    "bind": (("/", "q", "queue", "x", "k", TABLE), Bind("/", "q", "queue", "x", "k", TABLE)),
    "unbind": (("/", "q", "queue", "x", "k", b""), Unbind("/", "q", "queue", "x", "k", b"")),
    "queue_declare": ((QUEUE, "rabbit@a", True), QueueDeclare(QUEUE, "rabbit@a", True)),
    "queue_delete": (("/", "q", "rabbit@a"), QueueDelete("/", "q", "rabbit@a")),
    "put_vhost": (
        (VHostDefinition("v", "d", ("t",)),),
        PutVHost(VHostDefinition("v", "d", ("t",))),
    ),
    "delete_vhost": (("v",), DeleteVHost("v")),
    "put_user": ((UserDefinition("ann", "h"),), PutUser(UserDefinition("ann", "h"))),
    "delete_user": (("ann",), DeleteUser("ann")),
    "put_permission": (
        (PermissionDefinition("ann", "/", ".*", ".*", ""),),
        PutPermission(PermissionDefinition("ann", "/", ".*", ".*", "")),
    ),
    "delete_permission": (("ann", "/"), DeletePermission("ann", "/")),
    "put_topic_permission": (
        (TopicPermissionDefinition("ann", "/", "amq.topic", "^a", "^b"),),
        PutTopicPermission(TopicPermissionDefinition("ann", "/", "amq.topic", "^a", "^b")),
    ),
    "delete_topic_permissions": (("ann", "/", None), DeleteTopicPermissions("ann", "/", None)),
    "put_global_parameter": (
        ("cluster_name", "blue"),
        PutGlobalParameter("cluster_name", "blue"),
    ),
    "put_policy": ((POLICY,), PutPolicy(POLICY)),
    "delete_policy": (("/", "ha"), DeletePolicy("/", "ha")),
    "put_operator_policy": ((POLICY,), PutOperatorPolicy(POLICY)),
    "delete_operator_policy": (("/", "ha"), DeleteOperatorPolicy("/", "ha")),
    "put_exchange": (
        (ExchangeDefinition("/", "x", "direct"),),
        PutExchange(ExchangeDefinition("/", "x", "direct")),
    ),
    "delete_exchange": (("/", "x"), DeleteExchange("/", "x")),
    "transient_exchange": (
        ("/", "t", "fanout", True, False, TABLE),
        TransientExchange("/", "t", "fanout", True, False, TABLE),
    ),
    "put_binding": ((BINDING,), PutBinding(BINDING)),
    "delete_binding": ((BINDING,), DeleteBinding(BINDING)),
    "classic_queue": (
        (QUEUE, "rabbit@b", True, False),
        ClassicQueue(QUEUE, "rabbit@b", True, False),
    ),
    "delete_classic_queue": (("/", "q", "rabbit@b"), DeleteClassicQueue("/", "q", "rabbit@b")),
    "put_queue": (
        (QUORUM, ("/:qq:1", ["rabbit@a", "rabbit@b"])),
        PutQueue(QUORUM, ("/:qq:1", ["rabbit@a", "rabbit@b"])),
    ),
    "delete_queue": (("/", "qq", "/:qq:1"), DeleteQueue("/", "qq", "/:qq:1")),
    "queue_members": (
        ("/", "qq", "/:qq:1", ["rabbit@a"]),
        QueueMembers("/", "qq", "/:qq:1", ["rabbit@a"]),
    ),
    "node_address": (("rabbit@c", "127.0.0.1", 25673), NodeAddress("rabbit@c", "127.0.0.1", 25673)),
    "node_forgotten": (("rabbit@c",), NodeForgotten("rabbit@c")),
}


def test_every_operation_has_an_old_shape_here() -> None:
    assert sorted(OLD_SHAPES) == sorted(OPERATIONS)


@pytest.mark.parametrize("name", sorted(OLD_SHAPES))
def test_a_pickled_operation_of_each_old_shape_is_read_as_its_typed_operation(name: str) -> None:
    arguments, expected = OLD_SHAPES[name]
    unnumbered = pickle.dumps(("rabbit@a", name, arguments), pickle.HIGHEST_PROTOCOL)
    numbered = pickle.dumps(("", name, arguments, "rabbit@a/1f", 7), pickle.HIGHEST_PROTOCOL)
    assert metadata.decode_entry(unnumbered) == Entry("", 0, expected)
    assert metadata.decode_entry(numbered) == Entry("rabbit@a/1f", 7, expected)


@pytest.mark.parametrize("name", sorted(OLD_SHAPES))
def test_an_operation_reads_back_as_written(name: str) -> None:
    entry = Entry("rabbit@a/1f", 3, OLD_SHAPES[name][1])
    data = metadata.encode_entry(entry)
    assert data[0] == metadata.FORMAT
    assert metadata.decode_entry(data) == entry


def test_an_entry_is_smaller_than_its_pickle() -> None:
    _, operation = OLD_SHAPES["bind"]
    old = pickle.dumps(("rabbit@a", "bind", OLD_SHAPES["bind"][0], "rabbit@a/1f", 3), 5)
    assert len(metadata.encode_entry(Entry("rabbit@a/1f", 3, operation))) < len(old) / 2


def test_pickled_snapshots_with_and_without_senders_are_read() -> None:
    stored = Definitions(vhosts=(VHostDefinition("v"),), queues=(QUORUM,))
    placements = {("/", "qq"): ("/:qq:1", ["rabbit@a"])}
    transient = [("transient_exchange", ("/", "t", "fanout", True, False, TABLE))]
    old = pickle.dumps((stored, placements, transient), pickle.HIGHEST_PROTOCOL)
    numbered = pickle.dumps((stored, placements, transient, {"rabbit@a/1": 4}), 5)
    expected = Snapshot(
        stored,
        [("/", "qq", "/:qq:1", ["rabbit@a"])],
        [TransientExchange("/", "t", "fanout", True, False, TABLE)],
        {},
    )
    assert metadata.decode_snapshot(old) == expected
    with_senders = metadata.decode_snapshot(numbered)
    assert with_senders.numbered == {"rabbit@a/1": 4}
    assert metadata.decode_snapshot(metadata.encode_snapshot(with_senders)) == with_senders


def test_a_member_list_and_a_snapshot_written_before_the_configuration_tag_read_untagged() -> None:
    members = ["queue_members", "/", "qq", "/:qq:1", ["rabbit@a"]]
    entry = bytes([metadata.FORMAT]) + msgspec.msgpack.encode(["a/1", 2, members])
    assert metadata.decode_entry(entry) == Entry(
        "a/1", 2, QueueMembers("/", "qq", "/:qq:1", ["rabbit@a"], configuration=0)
    )
    snapshot = [Definitions(), [["/", "qq", "/:qq:1", ["rabbit@a"]]], [], {"a/1": 2}]
    data = bytes([metadata.FORMAT]) + msgspec.msgpack.encode(snapshot)
    assert metadata.decode_snapshot(data).configurations == {}


def test_bytes_of_no_known_format_are_refused() -> None:
    with pytest.raises(MetadataFormatError):
        metadata.decode_entry(b"\x7fnot an entry")
    with pytest.raises(MetadataFormatError):
        metadata.decode_entry(bytes([metadata.FORMAT]) + b"\xc1")
    with pytest.raises(LegacyDataError):  # a pickle that names a class Warren never wrote
        metadata.decode_entry(pickle.dumps(("", "put_vhost", (pytest.raises,)), 5))


# --- the transition ---------------------------------------------------------------------------


def test_a_new_entry_is_made_and_recorded() -> None:
    operation = DeleteVHost("v")
    state, effects = metadata.apply(Meta(5, 2), Entry("a/1", 1, operation), State(4, {}))
    assert effects == [Change(operation), Recorded(5)]
    assert state == State(5, {"a/1": 1})


def test_a_copy_committed_again_is_skipped_and_changes_nothing_else() -> None:
    """A new leader may commit again what its predecessor had: the sender's number says."""
    state = State(7, {"a/1": 3, "b/1": 1})
    skipped, effects = metadata.apply(Meta(8, 3), Entry("a/1", 3, DeleteVHost("v")), state)
    assert effects == []
    assert skipped == state
    _, later = metadata.apply(Meta(9, 3), Entry("a/1", 4, DeleteVHost("v")), skipped)
    assert later == [Change(DeleteVHost("v")), Recorded(9)]


def test_an_entry_the_store_applied_before_a_restart_is_not_made_again() -> None:
    """The log replays from its last snapshot: what the store has is skipped, but its
    sender's number still counts (a copy later in the log is a copy)."""
    state, effects = metadata.apply(Meta(3, 1), Entry("a/1", 2, DeleteVHost("v")), State(6, {}))
    assert effects == []
    assert state == State(6, {"a/1": 2})


def test_an_unnumbered_entry_is_made_once_by_its_index() -> None:
    state, effects = metadata.apply(Meta(1, 1), Entry("", 0, NodeForgotten("c")), State(0, {}))
    assert effects == [Change(NodeForgotten("c")), Recorded(1)]
    assert state.numbered == {}


def test_the_transition_leaves_its_input_state_alone() -> None:
    numbered = {"a/1": 1}
    before = State(0, numbered)
    metadata.apply(Meta(1, 1), Entry("a/1", 2, DeleteVHost("v")), before)
    assert before == State(0, {"a/1": 1})


def test_a_member_list_read_from_an_older_configuration_does_not_replace_a_newer_one() -> None:
    """delete_member and add_member record the lists they read after their changes; the
    two recordings can commit in either order. Untagged (older) lists apply in log order."""
    newer = QueueMembers("/", "qq", "g", ["a", "b", "c"], configuration=9)
    older = QueueMembers("/", "qq", "g", ["a", "b"], configuration=5)
    state, made = State(0, {}), []
    for index, operation in enumerate([newer, older], 1):
        state, effects = metadata.apply(Meta(index, 1), Entry("", 0, operation), state)
        made += [effect.operation for effect in effects if isinstance(effect, Change)]
    assert made == [newer]  # the older list is skipped
    assert state == State(2, {}, {"g": 9})  # and its index still recorded as applied
    same = QueueMembers("/", "qq", "g", ["a", "b", "c", "d"], configuration=9)
    untagged = QueueMembers("/", "qq", "g", ["a"])
    other = QueueMembers("/", "qq", "h", ["a"], configuration=1)
    for index, operation in enumerate([same, untagged, other], 3):
        state, effects = metadata.apply(Meta(index, 1), Entry("", 0, operation), state)
        assert effects == [Change(operation), Recorded(index)]
    assert state.configurations == {"g": 9, "h": 1}


def test_a_snapshot_is_restored_dependencies_first() -> None:
    stored = Definitions(
        vhosts=(VHostDefinition("v"),),
        users=(UserDefinition("ann", "h"),),
        permissions=(PermissionDefinition("ann", "v", ".*", ".*", ".*"),),
        exchanges=(ExchangeDefinition("v", "x", "direct"),),
        queues=(QUEUE, QUORUM),
        bindings=(BINDING,),
        policies=(POLICY,),
        global_parameters={"cluster_name": "blue"},
    )
    transient = TransientExchange("/", "t", "fanout", True, False, TABLE)
    snapshot = Snapshot(stored, [("/", "qq", "/:qq:1", ["rabbit@a"])], [transient], {})
    assert metadata.restoring(snapshot) == [
        PutVHost(VHostDefinition("v")),
        PutUser(UserDefinition("ann", "h")),
        PutPermission(PermissionDefinition("ann", "v", ".*", ".*", ".*")),
        PutGlobalParameter("cluster_name", "blue"),
        PutPolicy(POLICY),
        PutExchange(ExchangeDefinition("v", "x", "direct")),
        PutQueue(QUORUM, ("/:qq:1", ["rabbit@a"])),  # a classic queue comes with its home
        PutBinding(BINDING),
        transient,
    ]
