"""Node ids from names, and the Raft message codec's exact round trip."""

from __future__ import annotations

import zlib

import pytest

from warren.cluster.nodes import NodeNames, node_id
from warren.cluster.raft_codec import RaftCodecError, decode_messages, encode_messages
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


def test_messages_survive_encoding_exactly() -> None:
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
    wire = encode_messages(messages)
    assert wire[0] == 1  # the format byte
    assert decode_messages(wire) == messages


@pytest.mark.parametrize(
    "wire",
    [
        b"",
        b"\x02" + encode_messages([])[1:],  # a format this release does not know
        b"\x80\x05",  # a pickle, as Warren 0.4 sent
        b"\x01\x91\x91\xa1q",  # a message that is too short
        encode_messages([("q", Message(MessageType.VOTE, 2, 1, 4))]).replace(b"vote", b"veto"),
    ],
)
def test_what_is_not_raft_messages_is_refused(wire: bytes) -> None:
    with pytest.raises(RaftCodecError):
        decode_messages(wire)


def test_a_guessed_name_reads_for_its_id_until_the_name_seen_replaces_it() -> None:
    names = NodeNames()
    names.guess("a-w1@h")
    assert names.name(node_id("a-w1@h")) == "a-w1@h"  # a worker known by convention only
    names.guess("other")
    names.add("a@h")
    names.guess("a@h")  # a name seen is never replaced by a guess
    assert names.name(node_id("a@h")) == "a@h"
    assert names.add("a-w1@h") == node_id("a-w1@h")  # seen after the guess: no clash
