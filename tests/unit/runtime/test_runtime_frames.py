"""The peer link's frame codec: every message, request and reply crosses as its own type,
answers decode by their request's reply type, and what is not a frame raises FrameError."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warren
from warren.amqp.content import Message
from warren.cluster.metadata import ClassicQueue, PutBinding
from warren.cluster.queue_entries import message_record, to_record
from warren.errors import ReplyCode, SoftError, access_refused, queue_not_found
from warren.queue import Counters, Enqueue, Entry, Get, Got, Refused, Settle
from warren.runtime.cluster.calls import (
    RETRY,
    AddMember,
    Applied,
    AppliedThrough,
    Call,
    CallError,
    Campaign,
    CancelConsumer,
    Configuration,
    Consume,
    ConsumerCancelled,
    Consumers,
    Counts,
    Definitions,
    DeleteQueue,
    Delivery,
    EntryRecord,
    Forward,
    GroupStatus,
    LeaderCounters,
    Led,
    NodeDetails,
    Outcomes,
    PeerMessage,
    Propose,
    QueueCommand,
    QueueCounters,
    QueueCounts,
    RaftTraffic,
    Redirect,
    RemoveMember,
    Reply,
    ReplyLive,
    Request,
    Status,
    Transfer,
    call_reply,
    call_value,
    from_wire,
    reply_type,
    to_wire,
)
from warren.runtime.cluster.frames import (
    Answer,
    Ask,
    Failure,
    FrameError,
    Item,
    Send,
    answer,
    answer_value,
    decode_frame,
    encode_apart,
    encode_frame,
    failure,
    failure_exception,
    unsendable,
)
from warren.storage.definitions import BindingDefinition, QueueDefinition

KEY = ("n1", "0a1b2c3d", 7)
MESSAGE = Message("amq.direct", "rk", b"\x80\x00\x02", b"x" * 128)


def an_entry() -> Entry:
    entry = Entry(5, MESSAGE, 128, None, 2)
    entry.delivery_count = 3
    return entry


def same_entry(a: Entry, b: Entry) -> bool:
    fields = ("msg_id", "size_bytes", "level", "delivery_count")
    same_message = (a.message.exchange, a.message.routing_key, a.message.body) == (  # type: ignore[attr-defined]
        b.message.exchange,  # type: ignore[attr-defined]
        b.message.routing_key,  # type: ignore[attr-defined]
        b.message.body,  # type: ignore[attr-defined]
    )
    return same_message and all(getattr(a, f) == getattr(b, f) for f in fields)


QUEUE = QueueDefinition("/", "q1", durable=True, arguments=b"", type="classic")
MESSAGES: list[PeerMessage] = [
    RaftTraffic(b"\x01\x90"),
    Call(0, QueueCommand("/", "q1", to_record(Settle([1, 2])))),
    Call(3, QueueCommand("/", "q1", to_record(Enqueue(MESSAGE, 128, None, 0)))),
    Call(4, QueueCounts("/", "q1")),
    Call(5, QueueCounters("/", "q1")),
    Call(6, Consume("/", "q1", KEY, 10, False, True, 0)),
    Call(0, CancelConsumer("/", "q1", KEY, [4, 5])),
    Call(7, DeleteQueue("/", "q1", True, False)),
    call_reply(3, True),
    CallError(4, 404, "no queue 'q1' in vhost '/'"),
    Delivery("/", "q1", KEY, EntryRecord.of(an_entry()), 12),
    ConsumerCancelled("/", "q1", KEY),
    Reply("token", message_record(MESSAGE)),
    Definitions(
        [
            ClassicQueue(QUEUE, "n1", True, False),
            PutBinding(BindingDefinition("/", "amq.direct", "q1", "queue", "rk")),
        ],
        41,
    ),
]
REQUESTS: list[Request] = [
    Status(),
    NodeDetails(),
    GroupStatus("g"),
    AppliedThrough(9),
    ReplyLive("token"),
    Campaign("g"),
    Forward(AddMember("g", "n4", "127.0.0.1", 25673)),
    Propose("g", (b"\x01a", b"\x01b")),
    AddMember("g", "n4"),
    RemoveMember("g", "n4"),
    Transfer("g", "n2"),
    Counts("g"),
    Consumers("g"),
    LeaderCounters("g"),
]


def test_every_message_and_request_type_is_listed_here() -> None:
    assert {type(m) for m in MESSAGES} == set(get_args(PeerMessage))
    assert {type(r) for r in REQUESTS} == {get_origin_or_self(t) for t in get_args(Request)}


def get_origin_or_self(kind: Any) -> Any:
    return getattr(kind, "__origin__", kind)


def test_items_cross_a_frame_as_themselves() -> None:
    items: list[Item] = [Send(m) for m in MESSAGES]
    items += [Ask(i, r) for i, r in enumerate(REQUESTS)]
    items.append(failure(99, queue_not_found("q1", "/")))
    data = encode_frame(items)
    assert data[0] == 0x01
    decoded = decode_frame(data)
    assert [type(i) for i in decoded] == [type(i) for i in items]
    for before, after in zip(items, decoded, strict=True):
        if type(before) is Send and type(before.message) is Delivery:
            assert type(after) is Send and type(after.message) is Delivery
            assert same_entry(before.message.entry.entry(), after.message.entry.entry())
        elif type(before) is Send and type(before.message).__name__ == "CallReply":
            assert type(after) is Send
            assert bytes(after.message.value) == bytes(before.message.value)  # type: ignore[union-attr]
        else:
            assert after == before


@pytest.mark.parametrize(
    ("request_", "reply"),
    [
        (Status(), {"node": "n1", "nodes": ["n1", "n2"], "metadata": {"term": 3}}),
        (NodeDetails(), None),
        (GroupStatus("g"), {"role": "leader", "match_index": {"n2": 7}}),
        (AppliedThrough(9), True),
        (ReplyLive("token"), False),
        (Campaign("g"), None),
        (Forward(AddMember("g", "n4")), Configuration(["n1", "n4"], 12)),
        (AddMember("g", "n4"), Led(Configuration(["n1", "n4"], 12))),
        (RemoveMember("g", "n4"), Led(Configuration(["n1"], 14))),
        (Transfer("g", "n2"), Redirect("n3")),
        (Counts("g"), Led((3, 1))),
        (Consumers("g"), Led([KEY])),
        (LeaderCounters("g"), Led(Counters(2, 1, 12, 6, 1))),
        (Propose("g", (b"a",)), Led([True, None, 4, RETRY, Applied(3, None)])),
        (Propose("g", (b"a", b"b")), Led([Outcomes([True, None, 2]), RETRY])),
    ],
)
def test_an_answer_is_decoded_as_its_request_s_reply_type(request_: Request, reply: object) -> None:
    (item,) = decode_frame(encode_frame([answer(1, reply)]))
    assert type(item) is Answer
    assert answer_value(item, request_) == reply


def test_an_answer_of_another_type_is_a_frame_error() -> None:
    (item,) = decode_frame(encode_frame([answer(1, "a string")]))
    assert type(item) is Answer
    with pytest.raises(FrameError, match="malformed answer to Counts"):
        answer_value(item, Counts("g"))


def test_every_request_names_its_reply_type() -> None:
    assert reply_type(Status()) == dict[str, Any]
    assert reply_type(Counts("g")) == Led[tuple[int, int]] | Redirect
    assert reply_type(Forward(Counts("g"))) == tuple[int, int]
    assert reply_type(QueueCounters("/", "q")) is Counters
    for request in REQUESTS:
        msgspec.msgpack.Decoder(reply_type(request))  # a type msgspec decodes


def test_live_replies_cross_as_records_and_come_back() -> None:
    outcomes = [Got(an_entry(), 4), Refused(access_refused("in use")), None, 7, True]
    wire = msgspec.msgpack.encode(Led([to_wire(o) for o in outcomes]))
    led = msgspec.msgpack.decode(wire, type=reply_type(Propose("g", ())))
    assert type(led) is Led
    back = [from_wire(o) for o in led.value]
    assert type(back[0]) is Got and same_entry(back[0].entry, an_entry())
    assert back[0].remaining == 4
    assert type(back[1]) is Refused and back[1].error.code is ReplyCode.ACCESS_REFUSED
    assert back[2:] == [None, 7, True]


def test_a_batched_entry_s_replies_cross_as_one_list() -> None:
    replies = [True, Got(an_entry(), 0), None, 3]  # a format 2 entry's commands, in order
    wire = msgspec.msgpack.encode(Led([to_wire(replies)]))
    led = msgspec.msgpack.decode(wire, type=reply_type(Propose("g", ())))
    assert type(led) is Led
    (back,) = [from_wire(o) for o in led.value]
    assert type(back) is list and back[0] is True and back[2:] == [None, 3]
    assert type(back[1]) is Got and same_entry(back[1].entry, an_entry())
    refused = Applied(8, to_wire(queue_not_found("q", "/")))  # type: ignore[arg-type]
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(refused), type=Applied)
    error = from_wire(decoded.value)
    assert isinstance(error, SoftError) and error.code is ReplyCode.NOT_FOUND


def test_a_home_s_reply_decodes_by_its_call_s_request() -> None:
    get = QueueCommand("/", "q", to_record(Get(False)))
    value = call_value(call_reply(1, Got(an_entry(), 0)), get)
    assert type(value) is Got and same_entry(value.entry, an_entry())
    assert call_value(call_reply(2, None), get) is None
    counters = Counters(1, 2, 3, 4, 5)
    assert call_value(call_reply(3, counters), QueueCounters("/", "q")) == counters
    assert call_value(call_reply(4, (2, 1)), QueueCounts("/", "q")) == (2, 1)
    with pytest.raises(msgspec.ValidationError):
        call_value(call_reply(5, "no"), QueueCounts("/", "q"))


def test_failures_keep_amqp_errors_and_name_the_others() -> None:
    items = [failure(1, queue_not_found("q", "/")), failure(2, KeyError("oops"))]
    first, second = decode_frame(encode_frame(items))  # type: ignore[arg-type]
    assert type(first) is Failure and type(second) is Failure
    error = failure_exception(first)
    assert isinstance(error, SoftError) and error.text == "NOT_FOUND - no queue 'q' in vhost '/'"
    assert "oops" in str(failure_exception(second))


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (b"", "in format none"),
        (b"\x02\x90", "in format 02"),
        (b"\x80\x05K\x01.", "in format 80"),  # a pickle, as protocol 5 of WARREN-PEERS/5 sent
        (b"\x01", "malformed"),
        (b"\x01\x91\x92\x09\xc0", "malformed"),  # an item of no known tag
        (b"\x01\x91\x92\x01\x91\x0c", "malformed"),  # a Send of a request
        (b"\x01\x91\x93\x03\x01", "malformed"),  # truncated
    ],
)
def test_what_is_not_a_frame_raises_frame_error(data: bytes, complaint: str) -> None:
    with pytest.raises(FrameError, match=complaint):
        decode_frame(data)


@settings(deadline=None)  # CPU time on a shared machine is no property of the codec
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_frame_error(data: bytes) -> None:
    with contextlib.suppress(FrameError):
        decode_frame(b"\x01" + data)


def test_no_module_but_legacy_imports_pickle() -> None:
    root = Path(warren.__file__).parent
    importers = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if re.search(r"^\s*(import pickle|from pickle import)", path.read_text(), re.MULTILINE)
    )
    assert importers == ["legacy.py"]


def test_a_frame_encoded_apart_leaves_out_only_what_does_not_encode() -> None:
    """Point 5: the frame of the items that encode is the one they make on their own."""
    odd = b"q\xff".decode("utf-8", "surrogateescape")
    good: list[Item] = [Send(m) for m in MESSAGES[:3]] + [Ask(1, GroupStatus("g"))]
    bad: Item = Ask(2, GroupStatus(odd))
    with pytest.raises(UnicodeEncodeError):
        encode_frame([*good[:2], bad, *good[2:]])
    data, refused = encode_apart([*good[:2], bad, *good[2:]])
    assert data == encode_frame(good)
    assert [item for item, _ in refused] == [bad]
    error = unsendable(*refused[0])
    assert (error.code, type(error)) == (ReplyCode.INTERNAL_ERROR, SoftError)
    assert error.text.startswith("INTERNAL_ERROR - a GroupStatus for another node does not")
