"""Raft messages as plain tuples for the node-to-node transport.

Theory of operation:
1. `warren.runtime.cluster.peers` pickles what it sends. Pickling frozen dataclasses goes
   through `dataclasses` state helpers per object, which cost more than the rest of a
   round's CPU for a pipelined leader; tuples of ints, strings and bytes pickle in C.
2. `encode_messages` turns (group id, `Message`) pairs into nested tuples and
   `decode_messages` rebuilds them exactly: enums travel by value, a membership by
   `Membership.encode`. Nothing else is interpreted.
3. A malformed tuple raises (TypeError, ValueError, IndexError); only authenticated peers
   send these.
"""

from __future__ import annotations

from collections.abc import Iterable

from warren.raft import Entry, EntryKind, Membership, Message, MessageType, Snapshot

EncodedEntry = tuple[int, int, str, bytes]  # term, index, kind, data
EncodedSnapshot = tuple[int, int, bytes, bytes]  # index, term, membership, data
EncodedMessage = tuple[
    str,  # group id
    str,  # type
    int,  # to
    int,  # sender
    int,  # term
    int,  # index
    int,  # log term
    tuple[EncodedEntry, ...],
    int,  # commit
    bool,  # reject
    int,  # reject hint
    EncodedSnapshot | None,
    bytes,  # context
    bool,  # transfer
]


def encode_messages(messages: Iterable[tuple[str, Message]]) -> tuple[EncodedMessage, ...]:
    return tuple(_encode(group_id, message) for group_id, message in messages)


def decode_messages(encoded: Iterable[EncodedMessage]) -> list[tuple[str, Message]]:
    return [_decode(item) for item in encoded]


def _encode(group_id: str, m: Message) -> EncodedMessage:
    snapshot = m.snapshot
    return (
        group_id,
        m.type.value,
        m.to,
        m.sender,
        m.term,
        m.index,
        m.log_term,
        tuple((e.term, e.index, e.kind.value, e.data) for e in m.entries),
        m.commit,
        m.reject,
        m.reject_hint,
        None
        if snapshot is None
        else (snapshot.index, snapshot.term, snapshot.membership.encode(), snapshot.data),
        m.context,
        m.transfer,
    )


def _decode(item: EncodedMessage) -> tuple[str, Message]:
    (
        group_id,
        kind,
        to,
        sender,
        term,
        index,
        log_term,
        entries,
        commit,
        reject,
        reject_hint,
        snapshot,
        context,
        transfer,
    ) = item
    return group_id, Message(
        MessageType(kind),
        to,
        sender,
        term,
        index,
        log_term,
        tuple(Entry(t, i, EntryKind(k), d) for t, i, k, d in entries),
        commit,
        reject,
        reject_hint,
        None if snapshot is None else _decode_snapshot(snapshot),
        context,
        transfer,
    )


def _decode_snapshot(snapshot: EncodedSnapshot) -> Snapshot:
    index, term, membership, data = snapshot
    return Snapshot(index, term, Membership.decode(membership), data)
