"""What a link between two nodes carries: the items of a frame, and the frame's bytes.

Theory of operation:
1. A frame is a list of items, in the order they were sent: `Send` (a message for the
   other node's message handlers), `Ask` (an RPC request and its call id), `Answer` (the
   response to one) and `Failure` (why one failed). `warren.runtime.cluster.peers` writes
   one frame per link per loop turn; the simulator (`warren.testing.sim.links`) one per
   item. Both go through `encode_frame` and `decode_frame`, so the simulator runs the
   encoding the cluster runs.
2. Layout, version 1: the byte ``FORMAT`` (0x01), then one MessagePack array of items,
   each an array ``[tag, field, ...]`` (1 Send, 2 Ask, 3 Answer, 4 Failure) written by
   msgspec. What a `Send` and an `Ask` carry are the tagged types of
   `warren.runtime.cluster.calls` (`PeerMessage`, `Request`), decoded with the frame. An
   `Answer`'s value is the reply already encoded (``answer``), kept as raw MessagePack
   when the frame is decoded and decoded by the asking side with the reply type of the
   request it sent (``answer_value``, `calls.reply_decoder`): the frame decoder needs no
   union of every reply.
3. A failure carries an `AmqpError` as `warren.errors.error_fields` (the same class,
   code and text come back, `failure_exception`), anything else as its ``repr``, which
   comes back as `RemoteError`.
4. Bytes that are not a frame of this format, or an answer that is not its request's
   reply type, raise `FrameError`: the peers are authenticated and of the same protocol
   (`MAGIC` in `peers`), so that is a bug or a corrupt link, and the receiver drops that
   link (it comes back; the node keeps running). A later layout takes the next format byte.
5. An item msgspec cannot encode (a str with lone surrogates, a value of no wire type)
   must not take the items sent with it along: `encode_frame` encodes the whole list at
   once (the normal case, one call), and when that raises, `encode_apart` encodes item
   by item and gives the frame of those that encode (the same bytes a list of them
   encodes to) and each refused item with its error; the sender answers the request
   behind each (`unsendable`) and carries on.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from warren.errors import (
    AmqpError,
    ErrorFields,
    ReplyCode,
    SoftError,
    error_fields,
    error_from_fields,
)
from warren.runtime.cluster.calls import NodeRequest, PeerMessage, Request, reply_decoder

FORMAT: Final = 0x01
_FORMAT_BYTE: Final = bytes((FORMAT,))


class RemoteError(Exception):
    """The remote request handler failed with something other than an `AmqpError`."""


class FrameError(ValueError):
    """Bytes from a peer that are not a frame this release reads (point 4)."""


class Send(msgspec.Struct, frozen=True, array_like=True, tag=1):
    message: PeerMessage


class Ask(msgspec.Struct, frozen=True, array_like=True, tag=2):
    call_id: int
    request: Request


class Answer(msgspec.Struct, frozen=True, array_like=True, tag=3):
    call_id: int
    value: msgspec.Raw  # the request's reply type, encoded (point 2)


class Failure(msgspec.Struct, frozen=True, array_like=True, tag=4):
    call_id: int
    error: ErrorFields | str  # an `AmqpError`'s fields, or another failure's repr


Item = Send | Ask | Answer | Failure
_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(list[Item])


def answer(call_id: int, value: object) -> Answer:
    """The answer to call `call_id` (raises if `value` is no wire type)."""
    return Answer(call_id, msgspec.Raw(_ENCODER.encode(value)))


def answer_value(item: Answer, request: NodeRequest[Any]) -> object:
    """The value of the answer to `request` (point 2)."""
    try:
        return reply_decoder(request).decode(item.value)
    except msgspec.DecodeError as error:
        raise FrameError(f"malformed answer to {type(request).__name__}: {error}") from None


def failure(call_id: int, error: Exception) -> Failure:
    return Failure(call_id, error_fields(error) if isinstance(error, AmqpError) else repr(error))


def failure_exception(item: Failure) -> Exception:
    if isinstance(item.error, str):
        return RemoteError(f"remote request failed: {item.error}")
    return error_from_fields(item.error)


def encode_frame(items: list[Item]) -> bytes:
    return _FORMAT_BYTE + _ENCODER.encode(items)


def decode_frame(data: bytes | memoryview) -> list[Item]:
    if data[:1] != _FORMAT_BYTE:
        raise FrameError(f"peer frame in format {bytes(data[:1]).hex() or 'none'}")
    try:
        return _DECODER.decode(memoryview(data)[1:])
    except msgspec.DecodeError as error:
        raise FrameError(f"malformed peer frame: {error}") from None


def encode_apart(items: list[Item]) -> tuple[bytes, list[tuple[Item, Exception]]]:
    """The frame of the items that encode, and each that does not with why (point 5)."""
    encoded: list[msgspec.Raw] = []
    refused: list[tuple[Item, Exception]] = []
    for item in items:
        try:
            encoded.append(msgspec.Raw(_ENCODER.encode(item)))
        except (TypeError, ValueError, OverflowError) as error:  # msgspec's refusals
            refused.append((item, error))
    return _FORMAT_BYTE + _ENCODER.encode(encoded), refused


def unsendable(item: Item, error: Exception) -> SoftError:
    """What the request behind an item that does not encode fails with (point 5)."""
    what = (
        item.message if isinstance(item, Send) else item.request if isinstance(item, Ask) else item
    )
    detail = f"a {type(what).__name__} for another node does not encode: {error}"
    return SoftError(ReplyCode.INTERNAL_ERROR, detail)
