"""Node ids from names, and the Raft message codec's exact round trip."""

from __future__ import annotations

import pickle
import zlib

import pytest

from warren.cluster.nodes import NodeNames, node_id
from warren.cluster.raft_codec import decode_messages, encode_messages
from warren.raft import Entry, EntryKind, Membership, Message, MessageType, Snapshot


def test_node_ids_are_stable_positive_and_map_back_to_names() -> None:
    assert node_id("rabbit@a") == zlib.crc32(b"rabbit@a") + 1
    assert node_id("") == 1  # the CRC of nothing is 0: still positive
    names = NodeNames()
    assert names.add("a") == node_id("a")
    assert names.name(node_id("a")) == "a"
    assert names.name(node_id("b")) is None


def test_two_names_with_one_id_are_refused() -> None:
    names = NodeNames()
    names.add("plumless")
    with pytest.raises(ValueError, match="same id"):
        names.add("buckeroo")  # a known CRC-32 collision


def test_messages_survive_encoding_and_pickling_exactly() -> None:
    snapshot = Snapshot(9, 2, Membership(frozenset({1, 2}), frozenset({3})), b"state")
    messages = [
        (
            "q1",
            Message(
                MessageType.APPEND,
                2,
                1,
                3,
                index=4,
                log_term=2,
                entries=(Entry(3, 5, EntryKind.NORMAL, b"x"), Entry(3, 6, EntryKind.EMPTY)),
                commit=4,
            ),
        ),
        ("q2", Message(MessageType.SNAPSHOT, 3, 1, 3, snapshot=snapshot)),
        (
            "q1",
            Message(MessageType.APPEND_RESPONSE, 1, 2, 3, index=4, reject=True, reject_hint=2),
        ),
        ("q3", Message(MessageType.HEARTBEAT, 2, 1, 3, context=b"read-1")),
        ("q3", Message(MessageType.VOTE, 2, 1, 4, transfer=True)),
    ]
    wire = pickle.loads(pickle.dumps(encode_messages(messages), protocol=5))
    assert decode_messages(wire) == messages
