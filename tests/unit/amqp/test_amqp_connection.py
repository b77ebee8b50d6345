"""ServerConnection as a scripted conversation: handshake, channels, content, errors."""

from __future__ import annotations

import pytest
from amqp_strategies import (
    HANDSHAKE,
    body_frame,
    chunked,
    drain,
    header_frame,
    method_frame,
    shortstrs,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from warren.amqp import methods as m
from warren.amqp.connection import (
    HEARTBEAT,
    NEED_DATA,
    PUBLISHES_KEPT,
    Content,
    Event,
    MethodReceived,
    ProtocolHeaderReceived,
    ServerConnection,
    State,
)
from warren.amqp.frames import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    FrameDecoder,
    build_frame,
)
from warren.amqp.methods import decode_method, encode_method
from warren.errors import HardError, ReplyCode

START_OK = m.ConnectionStartOk(mechanism="PLAIN", response=b"\x00guest\x00guest")
TUNE_OK = m.ConnectionTuneOk(2047, 131072, 60)
OPEN = m.ConnectionOpen("/")


def opened(*channels: int) -> ServerConnection:
    """A connection past the handshake, with the given channels open."""
    connection = ServerConnection()
    connection.receive_data(
        HANDSHAKE + b"".join(method_frame(c, m.ChannelOpen()) for c in channels)
    )
    drain(connection)
    assert connection.state is State.OPEN
    assert connection.open_channels == set(channels)
    return connection


def error_of(connection: ServerConnection, data: bytes) -> HardError:
    connection.receive_data(data)
    with pytest.raises(HardError) as raised:
        drain(connection)
    return raised.value


def contents(events: list[Event]) -> list[tuple[int, m.Method, bytes, bytes]]:
    """The Content events, as (channel, method, properties_raw, body)."""
    return [
        (e.channel, e.method, e.properties_raw, e.body) for e in events if isinstance(e, Content)
    ]


def publish(channel: int, body: bytes, frame_max: int = 131072, exchange: str = "") -> bytes:
    chunk = frame_max - 8
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]
    return (
        method_frame(channel, m.BasicPublish(0, exchange, "rk"))
        + header_frame(channel, len(body))
        + b"".join(body_frame(channel, piece) for piece in pieces)
    )


# --- the handshake -----------------------------------------------------------------------


def test_scripted_handshake() -> None:
    connection = ServerConnection()
    assert connection.next_event() is NEED_DATA
    connection.receive_data(PROTOCOL_HEADER)
    assert drain(connection) == [ProtocolHeaderReceived(ok=True)]
    assert connection.state is State.AWAITING_START_OK

    connection.receive_data(method_frame(0, START_OK))
    assert drain(connection) == [MethodReceived(0, START_OK)]
    assert connection.state is State.AWAITING_TUNE_OK

    connection.receive_data(method_frame(0, TUNE_OK))
    assert drain(connection) == [MethodReceived(0, TUNE_OK)]
    assert connection.state is State.AWAITING_OPEN
    connection.tune(TUNE_OK.frame_max, TUNE_OK.channel_max)

    connection.receive_data(method_frame(0, OPEN))
    assert drain(connection) == [MethodReceived(0, OPEN)]
    assert connection.state is State.OPEN

    connection.receive_data(method_frame(1, m.ChannelOpen()))
    assert drain(connection) == [MethodReceived(1, m.ChannelOpen())]
    assert connection.open_channels == {1}


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_handshake_in_any_chunks_gives_the_same_events(data: st.DataObject) -> None:
    stream = HANDSHAKE + method_frame(1, m.ChannelOpen()) + HEARTBEAT_FRAME
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=len(stream)))
    connection = ServerConnection()
    events: list[Event] = []
    for chunk in chunked(stream, cuts):
        connection.receive_data(chunk)
        events += drain(connection)
    assert events == [
        ProtocolHeaderReceived(ok=True),
        MethodReceived(0, START_OK),
        MethodReceived(0, TUNE_OK),
        MethodReceived(0, OPEN),
        MethodReceived(1, m.ChannelOpen()),
        HEARTBEAT,
    ]


OUT_OF_ORDER = {
    "tune-ok-first": [(0, TUNE_OK)],
    "open-first": [(0, OPEN)],
    "open-before-tune-ok": [(0, START_OK), (0, OPEN)],
    "start-ok-twice": [(0, START_OK), (0, START_OK)],
    "secure-ok-unasked": [(0, m.ConnectionSecureOk(b"x"))],
    "start-ok-on-channel-1": [(1, START_OK)],
}


@pytest.mark.parametrize("script", OUT_OF_ORDER.values(), ids=OUT_OF_ORDER.keys())
def test_out_of_order_handshake_is_503(script: list[tuple[int, m.Method]]) -> None:
    """Before tune-ok (the runtime answers these with silence, but logs them)."""
    error = _error_after(script)
    assert error.code == ReplyCode.COMMAND_INVALID
    _, culprit = script[-1]
    assert (error.class_id, error.method_id) == (culprit.CLASS_ID, culprit.METHOD_ID)


OPENING = [(0, START_OK), (0, TUNE_OK)]
ON_CHANNEL_0 = {
    "tune-ok-twice": (OPENING, (0, TUNE_OK), "opening"),
    "basic-method-before-open": (OPENING, (0, m.BasicQos()), "opening"),
    "basic-method-once-open": ([*OPENING, (0, OPEN)], (0, m.BasicQos()), "running"),
    "open-twice": ([*OPENING, (0, OPEN)], (0, OPEN), "running"),
}


@pytest.mark.parametrize("case", ON_CHANNEL_0.values(), ids=ON_CHANNEL_0.keys())
def test_unexpected_method_on_channel_0_is_504(case) -> None:
    before, (channel, culprit), state = case
    error = _error_after([*before, (channel, culprit)])
    assert error.code == ReplyCode.CHANNEL_ERROR
    assert error.text == f"CHANNEL_ERROR - unexpected method in connection state {state}"
    assert (error.class_id, error.method_id) == (culprit.CLASS_ID, culprit.METHOD_ID)


@pytest.mark.parametrize("culprit", [m.ChannelOpen(), m.QueueDeclare()])
def test_channel_frame_before_open_is_505(culprit: m.Method) -> None:
    error = _error_after([*OPENING, (1, culprit)])
    assert error.code == ReplyCode.UNEXPECTED_FRAME
    assert (error.class_id, error.method_id) == (0, 0)


def test_connection_method_on_an_open_channel_is_503() -> None:
    error = _error_after([*OPENING, (0, OPEN), (1, m.ChannelOpen()), (1, OPEN)])
    assert error.text == "COMMAND_INVALID - unimplemented method"
    assert (error.class_id, error.method_id) == (10, 40)


def _error_after(script: list[tuple[int, m.Method]]) -> HardError:
    connection = ServerConnection()
    connection.receive_data(PROTOCOL_HEADER)
    drain(connection)
    *before, (channel, culprit) = script
    connection.receive_data(b"".join(method_frame(c, method) for c, method in before))
    drain(connection)
    return error_of(connection, method_frame(channel, culprit))


def test_heartbeats_are_accepted_during_the_handshake() -> None:
    connection = ServerConnection()
    connection.receive_data(PROTOCOL_HEADER + HEARTBEAT_FRAME + method_frame(0, START_OK))
    assert drain(connection) == [
        ProtocolHeaderReceived(ok=True),
        HEARTBEAT,
        MethodReceived(0, START_OK),
    ]


@pytest.mark.parametrize("close", [m.ConnectionClose(200, "bye"), m.ConnectionCloseOk()])
def test_close_during_the_handshake_ends_the_conversation(close: m.Method) -> None:
    connection = ServerConnection()
    connection.receive_data(PROTOCOL_HEADER + method_frame(0, START_OK) + method_frame(0, close))
    assert drain(connection)[-1] == MethodReceived(0, close)
    assert connection.state is State.CLOSED
    connection.receive_data(b"\xff" * 100)
    assert connection.next_event() is NEED_DATA


@pytest.mark.parametrize("header", [b"AMQP\x00\x00\x09\x00", b"AMQP\x01\x01\x00\x0a", b"GET / HT"])
def test_wrong_protocol_header_then_nothing(header: bytes) -> None:
    connection = ServerConnection()
    connection.receive_data(header + HANDSHAKE)
    assert drain(connection) == [ProtocolHeaderReceived(ok=False)]
    assert connection.state is State.CLOSED


def test_unknown_method_during_the_handshake_is_540() -> None:
    connection = ServerConnection()
    connection.receive_data(PROTOCOL_HEADER)
    drain(connection)
    error = error_of(connection, build_frame(FRAME_METHOD, 0, b"\x00\x0a\x00\x63"))
    assert error.code == ReplyCode.NOT_IMPLEMENTED


# --- tune --------------------------------------------------------------------------------


def test_tune_lowers_frame_max_for_later_frames() -> None:
    connection = opened(1)
    connection.tune(4096, 100)
    assert (connection.frame_max, connection.channel_max) == (4096, 100)
    error = error_of(connection, build_frame(FRAME_METHOD, 1, bytes(5000)))
    assert error.code == ReplyCode.FRAME_ERROR


def test_tune_with_zeros_is_for_servers_without_limits() -> None:
    connection = ServerConnection(frame_max=0, channel_max=0)
    connection.tune(0, 0)
    assert (connection.frame_max, connection.channel_max) == (0, 0)


@pytest.mark.parametrize(
    ("frame_max", "channel_max"),
    [(4095, 2047), (131073, 2047), (131072, 2048), (0, 2047), (131072, 0)],
)
def test_tune_beyond_the_limits_is_530(frame_max: int, channel_max: int) -> None:
    with pytest.raises(HardError) as raised:
        ServerConnection().tune(frame_max, channel_max)
    assert raised.value.code == ReplyCode.NOT_ALLOWED
    assert (raised.value.class_id, raised.value.method_id) == (10, 31)


# --- frame errors ------------------------------------------------------------------------


def test_bad_frame_end_is_501() -> None:
    frame = method_frame(1, m.ChannelOpen())[:-1] + b"\x00"
    assert error_of(opened(), frame).code == ReplyCode.FRAME_ERROR


def test_bad_frame_end_before_the_handshake_ends_is_501() -> None:
    connection = ServerConnection()
    frame = method_frame(0, START_OK)[:-1] + b"\xcd"
    assert error_of(connection, PROTOCOL_HEADER + frame).code == ReplyCode.FRAME_ERROR


def test_oversized_frame_is_501() -> None:
    connection = opened(1)
    frame = build_frame(FRAME_BODY, 1, bytes(connection.frame_max + 1))
    assert error_of(connection, frame[:7]).code == ReplyCode.FRAME_ERROR


def test_unknown_frame_type_is_501() -> None:
    assert error_of(opened(), build_frame(4, 0, b"")).code == ReplyCode.FRAME_ERROR


def test_heartbeat_on_a_channel_is_501() -> None:
    assert error_of(opened(1), build_frame(8, 1, b"")).code == ReplyCode.FRAME_ERROR


@pytest.mark.parametrize("cut", [-1, 1], ids=["bits-missing", "trailing-octet"])
def test_basic_publish_of_the_wrong_length_cannot_be_decoded(cut: int) -> None:
    payload = encode_method(m.BasicPublish(0, "", "rk"))
    payload = payload[:cut] if cut < 0 else payload + bytes(cut)
    error = error_of(opened(1), build_frame(FRAME_METHOD, 1, payload))
    assert error.code == ReplyCode.FRAME_ERROR
    assert error.text.startswith("FRAME_ERROR - cannot decode <<")
    assert (error.class_id, error.method_id) == (60, 40)


def test_a_repeated_publish_method_is_decoded_once_and_a_new_one_still_is() -> None:
    connection = opened(1)
    connection.receive_data(publish(1, b"a") + publish(1, b"b") + publish(1, b"c", exchange="x"))
    first, second, third = [event.method for event in drain(connection)]  # type: ignore[union-attr]
    assert first is second  # one BasicPublish for every publish of the same payload
    assert (third.exchange, third.routing_key) == ("x", "rk")
    for number in range(PUBLISHES_KEPT + 1):  # the memo is bounded
        connection.receive_data(publish(1, b"d", exchange=f"e{number}"))
        (event,) = drain(connection)
        assert event.method.exchange == f"e{number}"  # type: ignore[union-attr]
    assert len(connection._publishes) <= PUBLISHES_KEPT


# --- channels ----------------------------------------------------------------------------


def test_method_on_unopened_channel_is_504() -> None:
    error = error_of(opened(1), method_frame(5, m.QueueDeclare(queue="xyz")))
    assert error.code == ReplyCode.CHANNEL_ERROR
    assert (error.class_id, error.method_id) == (50, 10)


def test_publish_on_unopened_channel_is_504() -> None:
    error = error_of(opened(1), publish(2, b"hello"))
    assert error.code == ReplyCode.CHANNEL_ERROR
    assert (error.class_id, error.method_id) == (60, 40)


def test_method_after_channel_close_is_504() -> None:
    connection = opened(1)
    connection.receive_data(method_frame(1, m.ChannelClose(200, "", 0, 0)))
    assert drain(connection) == [MethodReceived(1, m.ChannelClose(200, "", 0, 0))]
    assert connection.open_channels == set()
    assert error_of(connection, method_frame(1, m.BasicQos())).code == ReplyCode.CHANNEL_ERROR


def test_second_channel_open_is_504() -> None:
    error = error_of(opened(1), method_frame(1, m.ChannelOpen()))
    assert error.code == ReplyCode.CHANNEL_ERROR
    assert (error.class_id, error.method_id) == (20, 10)


def test_channel_max_counts_open_channels_not_numbers() -> None:
    connection = opened()
    connection.tune(connection.frame_max, 2)
    connection.receive_data(method_frame(65535, m.ChannelOpen()) + method_frame(9, m.ChannelOpen()))
    assert drain(connection) == [
        MethodReceived(65535, m.ChannelOpen()),
        MethodReceived(9, m.ChannelOpen()),
    ]
    error = error_of(connection, method_frame(1, m.ChannelOpen()))
    assert (error.code, error.text) == (
        ReplyCode.NOT_ALLOWED,
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)",
    )


def test_channel_open_on_channel_0_is_504() -> None:
    assert error_of(opened(), method_frame(0, m.ChannelOpen())).code == ReplyCode.CHANNEL_ERROR


def test_connection_method_on_a_channel_is_503() -> None:
    error = error_of(opened(1), method_frame(1, m.ConnectionClose(200, "", 0, 0)))
    assert error.code == ReplyCode.COMMAND_INVALID


def test_unknown_method_is_540() -> None:
    error = error_of(opened(1), build_frame(FRAME_METHOD, 1, b"\x00\x3c\x03\xe7"))
    assert error.code == ReplyCode.NOT_IMPLEMENTED
    assert (error.class_id, error.method_id) == (60, 999)


def test_truncated_method_is_501() -> None:
    payload = encode_method(m.QueueDeclare(queue="q"))[:-3]
    error = error_of(opened(1), build_frame(FRAME_METHOD, 1, payload))
    assert error.code == ReplyCode.FRAME_ERROR


@pytest.mark.parametrize("method", [m.BasicDeliver(), m.BasicGetOk(), m.BasicReturn()])
def test_server_only_content_method_from_the_client_is_505(method: m.Method) -> None:
    assert error_of(opened(1), method_frame(1, method)).code == ReplyCode.UNEXPECTED_FRAME


def test_close_channel_drops_frames_until_close_ok() -> None:
    connection = opened(1, 2)
    connection.close_channel(1)
    assert connection.open_channels == {2}
    connection.receive_data(
        method_frame(1, m.QueueDeclare(queue="dropped"))
        + publish(1, b"dropped too")
        + body_frame(1, b"stray")
        + method_frame(2, m.BasicQos())
        + method_frame(1, m.ChannelCloseOk())
    )
    assert drain(connection) == [
        MethodReceived(2, m.BasicQos()),
        MethodReceived(1, m.ChannelCloseOk()),
    ]
    assert error_of(connection, method_frame(1, m.BasicQos())).code == ReplyCode.CHANNEL_ERROR


def test_close_channel_crossing_the_clients_close() -> None:
    connection = opened(1)
    connection.close_channel(1)
    close = m.ChannelClose(200, "client", 0, 0)
    connection.receive_data(method_frame(1, close) + method_frame(1, m.ChannelOpen()))
    assert drain(connection) == [MethodReceived(1, close), MethodReceived(1, m.ChannelOpen())]


def test_close_channel_mid_content_drops_the_rest_of_the_message() -> None:
    connection = opened(1)
    frames = publish(1, b"abcdef", frame_max=4096)
    connection.receive_data(frames[: len(frames) - len(body_frame(1, b"abcdef"))])
    assert drain(connection) == []
    connection.close_channel(1)
    connection.receive_data(body_frame(1, b"abcdef") + method_frame(1, m.ChannelCloseOk()))
    assert drain(connection) == [MethodReceived(1, m.ChannelCloseOk())]


# --- content -----------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    body=st.binary(max_size=20_000),
    piece=st.integers(1, 3000),
    exchange=shortstrs,
    data=st.data(),
)
def test_content_across_many_body_frames_is_one_event(
    body: bytes, piece: int, exchange: str, data: st.DataObject
) -> None:
    connection = opened(1, 2)
    pieces = [body[i : i + piece] for i in range(0, len(body), piece)]
    stream = (
        method_frame(1, m.BasicPublish(0, exchange, "rk", mandatory=True))
        + header_frame(1, len(body), b"\x10\x00\x02")
        + HEARTBEAT_FRAME
        + method_frame(2, m.BasicQos(0, 5, False))  # other channels go on meanwhile
        + b"".join(body_frame(1, p) + HEARTBEAT_FRAME for p in pieces)
    )
    events: list[Event] = []
    for chunk in chunked(stream, data.draw(st.lists(st.integers(0, len(stream)), max_size=20))):
        connection.receive_data(chunk)
        events += drain(connection)
    publish = m.BasicPublish(0, exchange, "rk", mandatory=True)
    assert contents(events) == [(1, publish, b"\x10\x00\x02", body)]
    assert events.count(MethodReceived(2, m.BasicQos(0, 5, False))) == 1
    assert events.count(HEARTBEAT) == 1 + len(pieces)


@settings(max_examples=50, deadline=None)
@given(
    ticketless=st.builds(
        m.BasicPublish, st.just(0), shortstrs, shortstrs, st.booleans(), st.booleans()
    )
)
def test_unrolled_publish_decoder_matches_the_table(ticketless: m.BasicPublish) -> None:
    connection = opened(1)
    payload = encode_method(ticketless)
    connection.receive_data(build_frame(FRAME_METHOD, 1, payload) + header_frame(1, 0))
    [content] = drain(connection)
    assert isinstance(content, Content)
    assert content.method == ticketless == m.decode_method(payload)


def test_empty_body_is_complete_at_the_header() -> None:
    connection = opened(1)
    connection.receive_data(method_frame(1, m.BasicPublish(0, "", "q")) + header_frame(1, 0))
    events = drain(connection)
    assert len(events) == 1
    assert contents(events) == [(1, m.BasicPublish(0, "", "q"), b"\x00\x00", b"")]


def test_consecutive_messages_on_one_channel() -> None:
    connection = opened(1)
    connection.receive_data(publish(1, b"one") + publish(1, b"") + publish(1, b"three"))
    assert [e.body for e in drain(connection) if isinstance(e, Content)] == [b"one", b"", b"three"]


def test_interleaved_content_on_two_channels() -> None:
    connection = opened(1, 2)
    a, b = publish(1, b"aaaa", 4096), publish(2, b"bb", 4096)
    first_a, first_b = len(a) - len(body_frame(1, b"aaaa")), len(b) - len(body_frame(2, b"bb"))
    connection.receive_data(a[:first_a] + b[:first_b] + b[first_b:] + a[first_a:])
    assert [(e.channel, e.body) for e in drain(connection) if isinstance(e, Content)] == [
        (2, b"bb"),
        (1, b"aaaa"),
    ]


def test_body_frame_without_a_method_is_505() -> None:
    assert error_of(opened(1), body_frame(1, b"hello")).code == ReplyCode.UNEXPECTED_FRAME


def test_header_frame_without_a_method_is_505() -> None:
    assert error_of(opened(1), header_frame(1, 5)).code == ReplyCode.UNEXPECTED_FRAME


def test_body_frame_on_channel_0_is_505() -> None:
    assert error_of(opened(), body_frame(0, b"hello")).code == ReplyCode.UNEXPECTED_FRAME


def test_method_where_a_header_is_due_is_505() -> None:
    connection = opened(1)
    stream = method_frame(1, m.BasicPublish()) + method_frame(1, m.BasicQos())
    assert error_of(connection, stream).code == ReplyCode.UNEXPECTED_FRAME


def test_method_where_a_body_is_due_is_505() -> None:
    connection = opened(1)
    stream = method_frame(1, m.BasicPublish()) + header_frame(1, 5) + method_frame(1, m.BasicQos())
    assert error_of(connection, stream).code == ReplyCode.UNEXPECTED_FRAME


def test_second_header_is_505() -> None:
    connection = opened(1)
    stream = method_frame(1, m.BasicPublish()) + header_frame(1, 5) + header_frame(1, 5)
    assert error_of(connection, stream).code == ReplyCode.UNEXPECTED_FRAME


def test_body_larger_than_declared_is_an_error() -> None:
    connection = opened(1)
    stream = method_frame(1, m.BasicPublish()) + header_frame(1, 3) + body_frame(1, b"four")
    assert error_of(connection, stream).code == ReplyCode.FRAME_ERROR


def test_short_content_header_is_502() -> None:
    connection = opened(1)
    stream = method_frame(1, m.BasicPublish()) + build_frame(FRAME_HEADER, 1, b"\x00\x3c\x00")
    assert error_of(connection, stream).code == ReplyCode.SYNTAX_ERROR


def test_content_header_of_another_class_is_505() -> None:
    connection = opened(1)
    header = (50).to_bytes(2, "big") + bytes(10) + b"\x00\x00"
    stream = method_frame(1, m.BasicPublish()) + build_frame(FRAME_HEADER, 1, header)
    assert error_of(connection, stream).code == ReplyCode.UNEXPECTED_FRAME


def test_method_where_a_header_is_due_names_basic_publish() -> None:
    connection = opened(1)
    stream = method_frame(1, m.BasicPublish()) + method_frame(1, m.BasicQos())
    error = error_of(connection, stream)
    assert (error.code, error.class_id, error.method_id) == (ReplyCode.UNEXPECTED_FRAME, 60, 40)


@pytest.mark.parametrize(
    "payload",
    [b"\x00\x3c\x00\x28", b"\x00\x3c\x00\x28\x00\x00", b"\x00\x3c\x00\x28\x00\x00\x05ab"],
)
def test_truncated_publish_is_501(payload: bytes) -> None:
    error = error_of(opened(1), build_frame(FRAME_METHOD, 1, payload))
    assert error.code == ReplyCode.FRAME_ERROR
    assert (error.class_id, error.method_id) == (60, 40)


# --- closing -----------------------------------------------------------------------------


def test_connection_close_from_the_client_ends_the_conversation() -> None:
    connection = opened(1)
    close = m.ConnectionClose(200, "bye", 0, 0)
    connection.receive_data(method_frame(0, close) + method_frame(1, m.BasicQos()))
    assert drain(connection) == [MethodReceived(0, close)]
    assert connection.state is State.CLOSED


def test_after_the_servers_close_only_close_ok_matters() -> None:
    connection = opened(1)
    connection.close()
    connection.receive_data(
        method_frame(1, m.QueueDeclare(queue="q")) + method_frame(0, m.ConnectionCloseOk())
    )
    events = drain(connection)
    assert events[-1] == MethodReceived(0, m.ConnectionCloseOk())
    assert not any(isinstance(e, MethodReceived) and e.channel == 1 for e in events)
    assert connection.state is State.CLOSED


def test_after_the_servers_close_content_frames_are_discarded() -> None:
    # Spec, connection.close: "After sending this method, any received methods except Close
    # and Close-OK MUST be discarded." A client mid-publish keeps sending body frames.
    connection = opened(1)
    frames = publish(1, b"abcdef", frame_max=4096)
    cut = len(frames) - len(body_frame(1, b"abcdef"))
    connection.receive_data(frames[:cut])
    assert drain(connection) == []
    connection.close()
    connection.receive_data(
        frames[cut:]
        + publish(1, b"more")
        + method_frame(1, m.BasicPublish())  # a method where a header would be due
        + method_frame(1, m.BasicAck(1))
        + method_frame(0, m.ConnectionCloseOk())
    )
    events = drain(connection)
    assert not any(isinstance(e, Content) for e in events)
    assert events[-1] == MethodReceived(0, m.ConnectionCloseOk())


# --- whole messages in one read and frame by frame agree -----------------------------------


def outcome(chunks: list[bytes]) -> tuple[list[object], ReplyCode | None]:
    """What a connection makes of the chunks: its events, then the error code if any."""
    connection = opened(1, 2)
    seen: list[object] = []
    try:
        for chunk in chunks:
            connection.receive_data(chunk)
            while (event := connection.next_event()) is not NEED_DATA:
                seen.append(contents([event])[0] if isinstance(event, Content) else event)
    except HardError as error:
        return seen, error.code
    return seen, None


def raw_frame(frame_type: int, channel: int, payload: bytes, end: int) -> bytes:
    return build_frame(frame_type, channel, payload)[:-1] + bytes((end,))


@settings(max_examples=150, deadline=None)
@given(
    body=st.binary(max_size=30),
    class_id=st.sampled_from([60, 60, 50]),
    weight=st.sampled_from([0, 0, 1]),
    size_error=st.sampled_from([0, 0, 0, -1, 1]),
    header_channel=st.sampled_from([1, 1, 2, 3]),
    body_channel=st.sampled_from([1, 1, 2, 3]),
    header_end=st.sampled_from([0xCE, 0xCE, 0x00]),
    body_end=st.sampled_from([0xCE, 0xCE, 0x00]),
    split_body=st.booleans(),
)
def test_one_read_and_byte_by_byte_agree_on_any_publish(
    body: bytes,
    class_id: int,
    weight: int,
    size_error: int,
    header_channel: int,
    body_channel: int,
    header_end: int,
    body_end: int,
    split_body: bool,
) -> None:
    declared = max(0, len(body) + size_error)
    header = class_id.to_bytes(2, "big") + weight.to_bytes(2, "big") + declared.to_bytes(8, "big")
    pieces = [body[:1], body[1:]] if split_body else [body]
    stream = (
        method_frame(1, m.BasicPublish(0, "ex", "rk"))
        + raw_frame(FRAME_HEADER, header_channel, header + b"\x00\x00", header_end)
        + b"".join(raw_frame(FRAME_BODY, body_channel, p, body_end) for p in pieces if p)
        + method_frame(2, m.BasicQos())
    )
    whole = outcome([stream])
    assert whole == outcome([bytes((byte,)) for byte in stream])
    if (class_id, weight, size_error, header_channel, body_channel) == (60, 0, 0, 1, 1) and (
        header_end == body_end == 0xCE
    ):
        assert whole == (
            [
                (1, m.BasicPublish(0, "ex", "rk"), b"\x00\x00", body),
                MethodReceived(2, m.BasicQos()),
            ],
            None,
        )


# -- a connection taken over by another process (`warren.runtime.workers`) ----------------


def test_a_connection_with_a_message_half_received_is_not_settled() -> None:
    connection = opened(1)
    assert connection.settled()
    publish = method_frame(1, m.BasicPublish(0, "", "q"))
    connection.receive_data(publish)
    assert drain(connection) == []
    assert not connection.settled()  # the content header is still to come


def test_what_is_not_read_yet_is_unread_and_another_connection_reads_it_after_resume() -> None:
    connection = opened(1, 2)
    qos, declare = method_frame(1, m.BasicQos(0, 10)), method_frame(2, m.QueueDeclare(0, "q"))
    connection.receive_data(qos + declare)
    assert connection.next_event() == MethodReceived(1, m.BasicQos(0, 10))
    assert connection.unread() == declare
    taken = ServerConnection()
    taken.tune(TUNE_OK.frame_max, TUNE_OK.channel_max)
    taken.resume([1, 2])
    taken.receive_data(connection.unread())
    assert drain(taken) == [MethodReceived(2, m.QueueDeclare(0, "q"))]
    assert taken.state is State.OPEN and taken.settled()


def test_take_publish_consumes_a_whole_publish_on_a_given_channel_or_nothing() -> None:
    decoder = FrameDecoder(4096)
    whole = publish(1, b"abc", frame_max=4096, exchange="x")
    decoder.feed(whole + whole[:-1])  # the second publish lacks its last byte
    assert decoder.take_publish({2}) is None  # not a channel it may take
    assert decoder.buffered == 2 * len(whole) - 1
    channel, payload, properties_raw, body = decoder.take_publish({1, 2}) or (0, b"", b"", b"")
    assert (channel, body) == (1, b"abc")
    assert decode_method(payload) == m.BasicPublish(0, "x", "rk")
    assert properties_raw == b"\x00\x00"
    assert decoder.take_publish({1}) is None  # incomplete: left to `next_frame`
    assert decoder.buffered == len(whole) - 1
