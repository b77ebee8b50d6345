"""Raft messages as versioned bytes for the node-to-node transport.

Theory of operation:
1. A Raft host sends one round's messages for one node at once
   (`warren.runtime.cluster.raft_host`, `calls.RaftTraffic`); `encode_messages` turns those
   (group id, `Message`) pairs into one byte string and `decode_messages` rebuilds them
   exactly. A pipelined leader sends many per round, so the layout is positional and flat
   (arrays of ints, strings and bytes, no field names, no objects per field): encoding
   and decoding cost about what the `Message` and `Entry` constructors cost.
2. Layout, version 1: the byte ``FORMAT`` (0x01), then one MessagePack array with one
   array per message::

       [group id, type, to, sender, term, index, log term, entries, commit, reject,
        reject hint, snapshot, context, transfer]

   ``type`` is the `MessageType`'s value (a string); ``entries`` an array of
   ``[term, index, kind, data]`` (``kind`` the `EntryKind`'s value); ``snapshot`` nil or
   ``[index, term, membership, data]`` (``membership`` as `Membership.encode` writes it).
   Decoding checks every field's type (msgspec), so the tuples are what they say.
3. A later layout gets the next format byte. What is not the format this release reads
   raises `RaftCodecError`; only authenticated peers send these, so that is a peer of
   another version or a bug there: the Raft host drops that batch with a logged error and
   goes on (Raft sends again what a lost message carried).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from warren.raft import Entry, EntryKind, Membership, Message, MessageType, Snapshot

FORMAT: Final = 1
_FORMAT_BYTE: Final = bytes([FORMAT])

_EncodedEntry = tuple[int, int, EntryKind, bytes]  # term, index, kind, data
_EncodedSnapshot = tuple[int, int, bytes, bytes]  # index, term, membership, data
_EncodedMessage = tuple[
    str,  # group id
    MessageType,
    int,  # to
    int,  # sender
    int,  # term
    int,  # index
    int,  # log term
    tuple[_EncodedEntry, ...],
    int,  # commit
    bool,  # reject
    int,  # reject hint
    _EncodedSnapshot | None,
    bytes,  # context
    bool,  # transfer
]
_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(tuple[_EncodedMessage, ...])


class RaftCodecError(ValueError):
    """Bytes that are not Raft messages in a format this release reads."""


def encode_messages(messages: Iterable[tuple[str, Message]]) -> bytes:
    return _FORMAT_BYTE + _ENCODER.encode([_encode(group_id, m) for group_id, m in messages])


def decode_messages(data: bytes) -> list[tuple[str, Message]]:
    if data[:1] != _FORMAT_BYTE:
        raise RaftCodecError(f"Raft messages in format {data[:1].hex() or 'none'}")
    try:
        encoded = _DECODER.decode(memoryview(data)[1:])
    except msgspec.DecodeError as error:
        raise RaftCodecError(f"malformed Raft messages: {error}") from None
    return [_decode(item) for item in encoded]


def _encode(group_id: str, m: Message) -> _EncodedMessage:
    snapshot = m.snapshot
    return (
        group_id,
        m.type,
        m.to,
        m.sender,
        m.term,
        m.index,
        m.log_term,
        tuple((e.term, e.index, e.kind, e.data) for e in m.entries),
        m.commit,
        m.reject,
        m.reject_hint,
        None
        if snapshot is None
        else (snapshot.index, snapshot.term, snapshot.membership.encode(), snapshot.data),
        m.context,
        m.transfer,
    )


def _decode(item: _EncodedMessage) -> tuple[str, Message]:
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
        kind,
        to,
        sender,
        term,
        index,
        log_term,
        tuple(Entry(t, i, k, d) for t, i, k, d in entries),
        commit,
        reject,
        reject_hint,
        None if snapshot is None else _decode_snapshot(snapshot),
        context,
        transfer,
    )


def _decode_snapshot(snapshot: _EncodedSnapshot) -> Snapshot:
    index, term, membership, data = snapshot
    return Snapshot(index, term, Membership.decode(membership), data)
