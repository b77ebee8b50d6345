"""Encode + decode of one Raft round between two nodes (`python -m bench.raft_round`), issue #20.

A pipelined quorum leader sends each follower, per round, one `RaftTraffic`: an append
per group with the round's entries (a 128-byte publish is an entry of about 190 bytes).
Measured here, side by side, in one process, as CPU time per round for the sender's
encoding plus the receiver's decoding back into `Message` objects:

- ``pickle``: what Warren 0.4 sent (peer protocol 4): the messages as nested tuples
  (enums by value), pickled with the rest of the frame and unpickled by the receiver;
- ``raft_codec``: what it sends now (`warren.cluster.raft_codec`, format 1: the same
  positional layout as MessagePack behind a format byte, decoded with its types checked),
  as a `RaftTraffic` in the peer link's frame (`warren.runtime.cluster.frames`).

The candidates take turns in every repeat; the median over `--repeats` is kept.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import time
from collections.abc import Callable
from typing import Any

from warren.cluster import raft_codec
from warren.raft import Entry, EntryKind, Message, MessageType
from warren.runtime.cluster.calls import RaftTraffic
from warren.runtime.cluster.frames import Send, decode_frame, encode_frame


def a_round(groups: int, entries: int) -> list[tuple[str, Message]]:
    return [
        (
            f"quorum/%2F/q{group}",
            Message(
                MessageType.APPEND,
                2,
                1,
                3,
                index=100,
                log_term=3,
                entries=tuple(
                    Entry(3, 101 + i, EntryKind.NORMAL, bytes([group, i % 256]) * 95)
                    for i in range(entries)
                ),
                commit=99,
            ),
        )
        for group in range(groups)
    ]


def pickle_encode(messages: list[tuple[str, Message]]) -> bytes:
    tuples = tuple(
        (
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
            None,
            m.context,
            m.transfer,
        )
        for group_id, m in messages
    )
    return pickle.dumps([(0, tuples)], protocol=5)


def pickle_decode(data: bytes) -> list[tuple[str, Message]]:
    return [
        (
            group_id,
            Message(
                MessageType(kind),
                *numbers,
                tuple(Entry(t, i, EntryKind(k), d) for t, i, k, d in entries),
                commit,
                reject,
                hint,
                None,
                context,
                transfer,
            ),
        )
        for group_id, kind, *numbers, entries, commit, reject, hint, _, context, transfer in (
            pickle.loads(data)[0][1]
        )
    ]


def codec_encode(messages: list[tuple[str, Message]]) -> bytes:
    return encode_frame([Send(RaftTraffic(raft_codec.encode_messages(messages)))])


def codec_decode(data: bytes) -> list[tuple[str, Message]]:
    (item,) = decode_frame(data)
    assert type(item) is Send and type(item.message) is RaftTraffic
    return raft_codec.decode_messages(item.message.messages)


Candidate = tuple[str, Callable[[Any], bytes], Callable[[bytes], Any]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8, help="groups in a round")
    parser.add_argument("--entries", type=int, default=16, help="entries per append")
    parser.add_argument("--rounds", type=int, default=2000, help="rounds per repeat")
    parser.add_argument("--repeats", type=int, default=7, help="the median is kept")
    arguments = parser.parse_args()
    messages = a_round(arguments.groups, arguments.entries)
    candidates: list[Candidate] = [
        ("pickle", pickle_encode, pickle_decode),
        ("raft_codec", codec_encode, codec_decode),
    ]
    times: dict[str, list[float]] = {name: [] for name, _, _ in candidates}
    for name, encode, decode in candidates:
        assert decode(encode(messages)) == messages, name
    for _ in range(arguments.repeats):
        for name, encode, decode in candidates:
            started = time.process_time_ns()
            for _ in range(arguments.rounds):
                decode(encode(messages))
            times[name].append((time.process_time_ns() - started) / arguments.rounds)
    for name, encode, _ in candidates:
        figures = {
            "encoding": name,
            "frame_bytes": len(encode(messages)),
            "encode_decode_us_per_round": round(statistics.median(times[name]) / 1000, 1),
        }
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
