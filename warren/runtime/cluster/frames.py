"""What a link between two nodes carries: the items of a frame, and the frame's bytes.

Theory of operation:
1. A frame is a list of items, in the order they were sent: `Send` (a message for the
   other node's message handlers), `Ask` (an RPC request and its call id), `Answer` (the
   response to one) and `Failure` (why one failed). `warren.runtime.cluster.peers` writes
   one frame per link per loop turn; the simulator (`warren.testing.sim.links`) one per
   item. Both go through `encode_frame` and `decode_frame`, so the simulator runs the
   encoding the cluster runs.
2. A failure carries an `AmqpError` as `warren.errors.error_fields` (the same class,
   code and text come back, `failure_exception`), anything else as its ``repr``, which
   comes back as `RemoteError`.
3. What the items carry is `warren.runtime.cluster.calls` (and `RaftTraffic`, whose Raft
   messages are already the versioned bytes of `warren.cluster.raft_codec`). The frame
   itself is still a pickle (protocol 5) of the item list: the last pickle on the peer
   link (issue #20); `MAGIC` in `peers` names the protocol, and the handshake refuses a
   node of another one before anything is unpickled.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import cast

from warren.errors import AmqpError, ErrorFields, error_fields, error_from_fields


class RemoteError(Exception):
    """The remote request handler failed with something other than an `AmqpError`."""


@dataclass(frozen=True, slots=True)
class Send:
    message: object


@dataclass(frozen=True, slots=True)
class Ask:
    call_id: int
    request: object


@dataclass(frozen=True, slots=True)
class Answer:
    call_id: int
    value: object


@dataclass(frozen=True, slots=True)
class Failure:
    call_id: int
    error: ErrorFields | str  # an `AmqpError`'s fields, or another failure's repr


Item = Send | Ask | Answer | Failure


def failure(call_id: int, error: Exception) -> Failure:
    return Failure(call_id, error_fields(error) if isinstance(error, AmqpError) else repr(error))


def failure_exception(item: Failure) -> Exception:
    if isinstance(item.error, str):
        return RemoteError(f"remote request failed: {item.error}")
    return error_from_fields(item.error)


def encode_frame(items: list[Item]) -> bytes:
    return pickle.dumps(items, protocol=5)


def decode_frame(data: bytes) -> list[Item]:
    return cast("list[Item]", pickle.loads(data))
