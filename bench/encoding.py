"""Candidate encodings of a quorum queue's publish entry (`python -m bench.encoding`), issue #20.

The entry a 128-byte persistent publish put in the Raft log up to Warren 0.3 was
``pickle.dumps(Sequenced(sender, seq, Enqueue(Message(...), size, ttl, priority)))``,
unpickled by every replica's `apply_entry`. Measured here, side by side:

- ``pickle``: exactly that, decoded back into the same objects (since the quorum path
  stopped pickling, the classes lost their ``__reduce__`` shortcuts: this pickle is now
  361 bytes, where the previous release wrote 305);
- ``msgspec``: msgspec Structs (array-like, tagged for a version and a kind) with
  MessagePack, decoded into the Structs only; ``msgspec+objects`` decodes on into
  `Message`, `Enqueue` and `Sequenced`;
- ``queue_entries``: what Warren writes now (`warren.cluster.queue_entries`, format 1:
  the msgspec candidate behind a format byte), decoded as a follower does: into
  `Enqueue` and `Sequenced`, the message left as its record until handed out (the
  proposer itself applies the command it kept);
- ``struct``: a hand-written layout (version, kind, fixed-width numbers, length-prefixed
  strings and bytes), decoded back into today's objects; the route of a `Message` is left
  out of the entry (it is rebuilt from exchange and routing key).

For each: the entry's size, and the median over `--repeats` rounds (the candidates take
turns in each) of the CPU time per encode and per decode of `--count` entries.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any, Final

from warren.amqp.content import BasicProperties, Message, encode_properties
from warren.cluster import queue_entries
from warren.queue.machine import Enqueue, Sequenced

BODY_BYTES = 128
SENDER = ("warren-a", "5e1f09c2", 7)  # (node, incarnation, host number) as quorum.py
PROPERTIES = encode_properties(BasicProperties(delivery_mode=2))
VERSION: Final = 1
KIND_ENQUEUE: Final = 1


def today_entry(seq: int) -> Sequenced:
    message = Message("", "bench.qq", PROPERTIES, bytes(BODY_BYTES))
    return Sequenced(SENDER, seq, Enqueue(message, BODY_BYTES, None, 0))


# --- pickle, as quorum.py ---------------------------------------------------------------------


def pickle_encode(entry: Sequenced) -> bytes:
    return pickle.dumps(entry, pickle.HIGHEST_PROTOCOL)


def pickle_decode(data: bytes) -> Any:
    return pickle.loads(data)


# --- hand-written struct layout ---------------------------------------------------------------
# version B, kind B, incarnation I (its 8 hex digits), host number I, seq Q, size I,
# ttl q (-1: none), priority B, then node, exchange and routing key (length B + UTF-8),
# properties (length I), body (rest)
_HEAD = struct.Struct("<BBIIQIqB")


def struct_encode(entry: Sequenced) -> bytes:
    node, incarnation, host = entry.sender  # type: ignore[misc]
    enqueue = entry.command
    assert isinstance(enqueue, Enqueue)
    message = enqueue.message
    assert isinstance(message, Message)
    ttl = -1 if enqueue.ttl_ms is None else enqueue.ttl_ms
    names = [text.encode() for text in (node, message.exchange, message.routing_key)]
    return b"".join(
        (
            _HEAD.pack(
                VERSION,
                KIND_ENQUEUE,
                int(incarnation, 16),
                host,
                entry.seq,
                enqueue.size_bytes,
                ttl,
                enqueue.priority,
            ),
            bytes((len(names[0]),)),
            names[0],
            bytes((len(names[1]),)),
            names[1],
            bytes((len(names[2]),)),
            names[2],
            len(message.properties_raw).to_bytes(4, "little"),
            message.properties_raw,
            message.body,
        )
    )


def struct_decode(data: bytes) -> Sequenced:
    version, kind, incarnation, host, seq, size, ttl, priority = _HEAD.unpack_from(data)
    if version != VERSION or kind != KIND_ENQUEUE:
        raise ValueError(f"entry version {version} kind {kind}")
    position = _HEAD.size
    texts = []
    for _ in range(3):
        length = data[position]
        texts.append(data[position + 1 : position + 1 + length].decode())
        position += 1 + length
    properties_length = int.from_bytes(data[position : position + 4], "little")
    position += 4
    properties = data[position : position + properties_length]
    body = data[position + properties_length :]
    message = Message(texts[1], texts[2], properties, body)
    enqueue = Enqueue(message, size, None if ttl < 0 else ttl, priority)
    return Sequenced((texts[0], f"{incarnation:08x}", host), seq, enqueue)


# --- msgspec Structs with MessagePack (when installed) ----------------------------------------


try:
    import msgspec
except ImportError:
    msgspec = None

if msgspec is not None:

    class MessageStruct(msgspec.Struct, array_like=True):
        exchange: str
        routing_key: str
        properties_raw: bytes
        body: bytes

    class EnqueueStruct(msgspec.Struct, array_like=True, tag=KIND_ENQUEUE):
        sender: tuple[str, str, int]
        seq: int
        message: MessageStruct
        size_bytes: int
        ttl_ms: int | None
        priority: int
        version: int = VERSION


def msgspec_codec() -> tuple[Callable[[Sequenced], bytes], Callable[[bytes], Any]] | None:
    if msgspec is None:
        return None
    encoder = msgspec.msgpack.Encoder()
    decoder = msgspec.msgpack.Decoder(EnqueueStruct)

    def encode(entry: Sequenced) -> bytes:
        enqueue = entry.command
        assert isinstance(enqueue, Enqueue)
        message = enqueue.message
        assert isinstance(message, Message)
        fields = MessageStruct(
            message.exchange, message.routing_key, message.properties_raw, message.body
        )
        command = EnqueueStruct(
            entry.sender,  # type: ignore[arg-type]
            entry.seq,
            fields,
            enqueue.size_bytes,
            enqueue.ttl_ms,
            enqueue.priority,
        )
        return encoder.encode(command)

    return encode, decoder.decode


def msgspec_objects_codec() -> tuple[Callable[[Sequenced], bytes], Callable[[bytes], Any]] | None:
    """msgspec, decoded on into today's objects: what the Structs save if the machine keeps
    using `Message`, `Enqueue` and `Sequenced`."""
    codec = msgspec_codec()
    if codec is None:
        return None
    encode, decode_struct = codec

    def decode(data: bytes) -> Sequenced:
        command = decode_struct(data)
        fields = command.message
        message = Message(fields.exchange, fields.routing_key, fields.properties_raw, fields.body)
        enqueue = Enqueue(message, command.size_bytes, command.ttl_ms, command.priority)
        return Sequenced(command.sender, command.seq, enqueue)

    return encode, decode


# --- measurement ------------------------------------------------------------------------------


def per_call_ns(function: Callable[[Any], Any], inputs: list[Any]) -> float:
    """CPU time of this process per call of `function` over `inputs` (CPU, not wall time:
    the machine is shared, and waiting for a core is not the encoding's cost)."""
    started = time.process_time_ns()
    for item in inputs:
        function(item)
    return (time.process_time_ns() - started) / len(inputs)


Candidate = tuple[str, Callable[[Sequenced], bytes], Callable[[bytes], Any]]


def measure(candidates: list[Candidate], count: int, repeats: int) -> list[dict[str, Any]]:
    """Per candidate: entry size, median encode and decode time; the candidates take turns
    in every round, so that a change of the machine's load falls on all of them."""
    entries = [today_entry(seq) for seq in range(1, count + 1)]
    encoded = {name: [encode(entry) for entry in entries] for name, encode, _ in candidates}
    encode_ns: dict[str, list[float]] = {name: [] for name, _, _ in candidates}
    decode_ns: dict[str, list[float]] = {name: [] for name, _, _ in candidates}
    for _ in range(repeats):
        for name, encode, decode in candidates:
            encode_ns[name].append(per_call_ns(encode, entries))
            decode_ns[name].append(per_call_ns(decode, encoded[name]))
    return [
        {
            "encoding": name,
            "entry_bytes": len(encoded[name][0]),
            "encode_us": round(statistics.median(encode_ns[name]) / 1000, 3),
            "decode_us": round(statistics.median(decode_ns[name]) / 1000, 3),
        }
        for name, _, _ in candidates
    ]


def queue_entries_encode(numbered: Sequenced) -> bytes:
    """The entry format the runtime writes, a batch of one command."""
    return queue_entries.encode(numbered.sender, [(numbered.seq, numbered.command)])  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000, help="entries per round")
    parser.add_argument("--repeats", type=int, default=7, help="rounds; the median is kept")
    arguments = parser.parse_args()
    roundtrip = struct_decode(struct_encode(today_entry(1)))
    assert pickle_encode(roundtrip) == pickle_encode(today_entry(1)), "struct loses a field"
    candidates: list[Candidate] = [
        ("pickle", pickle_encode, pickle_decode),
        ("queue_entries", queue_entries_encode, queue_entries.decode),
        ("struct", struct_encode, struct_decode),
    ]
    for name, make in (("msgspec+objects", msgspec_objects_codec), ("msgspec", msgspec_codec)):
        codec = make()
        if codec is not None:
            candidates.insert(1, (name, *codec))
    for figures in measure(candidates, arguments.count, arguments.repeats):
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
