"""Frame splitting: any chunking gives the same frames; frame errors are 501."""

from __future__ import annotations

import pytest
from amqp_strategies import chunked
from hypothesis import given, settings
from hypothesis import strategies as st

from warren.amqp.frames import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    HEARTBEAT_FRAME,
    NEED_DATA,
    PROTOCOL_HEADER,
    Frame,
    FrameDecoder,
    ProtocolHeader,
    build_frame,
)
from warren.errors import HardError, ReplyCode

FRAME_MAX = 4096

frames = st.lists(
    st.tuples(
        st.sampled_from([FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT]),
        st.integers(0, 65535),
        st.binary(max_size=300),
    ),
    max_size=12,
)


def read_all(decoder: FrameDecoder) -> list[Frame]:
    out: list[Frame] = []
    while True:
        frame = decoder.next_frame()
        if frame is NEED_DATA:
            return out
        assert isinstance(frame, tuple)
        out.append(frame)


def stream_of(items: list[Frame]) -> bytes:
    return b"".join(build_frame(*item) for item in items)


def test_build_frame_layout() -> None:
    assert build_frame(FRAME_BODY, 5, b"ab") == b"\x03\x00\x05\x00\x00\x00\x02ab\xce"
    assert build_frame(FRAME_HEARTBEAT, 0, b"") == HEARTBEAT_FRAME


@settings(max_examples=50, deadline=None)
@given(frames)
def test_whole_stream_gives_every_frame(items: list[Frame]) -> None:
    decoder = FrameDecoder(FRAME_MAX)
    decoder.feed(stream_of(items))
    assert read_all(decoder) == items
    assert decoder.buffered == 0


@settings(max_examples=75, deadline=None)
@given(frames, st.data())
def test_any_chunking_gives_the_same_frames(items: list[Frame], data: st.DataObject) -> None:
    stream = stream_of(items)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=30))
    compact = data.draw(st.booleans())
    decoder = FrameDecoder(FRAME_MAX)
    seen: list[Frame] = []
    for chunk in chunked(stream, cuts):
        decoder.feed(chunk)
        seen += read_all(decoder)
        if compact:
            decoder.compact()
    assert seen == items


@settings(max_examples=20, deadline=None)
@given(frames)
def test_byte_by_byte_gives_the_same_frames(items: list[Frame]) -> None:
    decoder = FrameDecoder(FRAME_MAX)
    seen: list[Frame] = []
    for byte in stream_of(items):
        decoder.feed(bytes((byte,)))
        seen += read_all(decoder)
    assert seen == items


def test_partial_frame_is_need_data_and_keeps_the_bytes() -> None:
    frame = build_frame(FRAME_METHOD, 1, b"abcdef")
    decoder = FrameDecoder(FRAME_MAX)
    decoder.feed(frame[:-1])
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered == len(frame) - 1
    decoder.feed(frame[-1:])
    assert decoder.next_frame() == (FRAME_METHOD, 1, b"abcdef")


def test_a_frame_in_many_reads_joins_the_buffer_once_and_comes_out_as_bytes() -> None:
    """Reads that do not complete the next frame wait aside (a trickle of small reads
    costs no copy of the buffer each), and every payload read is `bytes`."""
    body = bytes(range(256)) * 8
    frame = build_frame(FRAME_BODY, 1, body)
    decoder = FrameDecoder(FRAME_MAX)
    decoder.feed(frame[:100])
    assert decoder.next_frame() is NEED_DATA
    buffer = decoder._buffer
    for start in range(100, len(frame) - 1, 7):
        decoder.feed(frame[start : min(start + 7, len(frame) - 1)])
        assert decoder._buffer is buffer  # not joined: the frame is still incomplete
    assert decoder.buffered == len(frame) - 1
    assert decoder.unread() == frame[:-1]
    decoder.feed(frame[-1:])
    payload = decoder.next_frame()
    assert payload == (FRAME_BODY, 1, body)
    assert type(payload[2]) is bytes  # type: ignore[index]


def frame_error_of(data: bytes, frame_max: int = FRAME_MAX) -> HardError:
    decoder = FrameDecoder(frame_max)
    decoder.feed(data)
    with pytest.raises(HardError) as raised:
        read_all(decoder)
    return raised.value


@pytest.mark.parametrize("end", [0x00, 0xCD, 0xCF, 0xFF])
def test_bad_frame_end_is_501(end: int) -> None:
    frame = build_frame(FRAME_METHOD, 1, b"abc")[:-1] + bytes((end,))
    error = frame_error_of(frame)
    assert error.code == ReplyCode.FRAME_ERROR


def test_bad_frame_end_of_a_heartbeat_is_501() -> None:
    assert frame_error_of(HEARTBEAT_FRAME[:-1] + b"\x00").code == ReplyCode.FRAME_ERROR


def test_bad_frame_end_after_good_frames_still_yields_the_good_ones() -> None:
    good = build_frame(FRAME_BODY, 1, b"x")
    decoder = FrameDecoder(FRAME_MAX)
    decoder.feed(good + good[:-1] + b"\x00")
    assert decoder.next_frame() == (FRAME_BODY, 1, b"x")
    with pytest.raises(HardError):
        decoder.next_frame()


BAD_STREAMS = {
    "end octet": build_frame(FRAME_BODY, 1, b"x")[:-1] + b"\x00",
    "frame type": build_frame(9, 0, b""),
    "frame size": build_frame(FRAME_BODY, 1, bytes(FRAME_MAX + 1)),
}


@pytest.mark.parametrize("bad", BAD_STREAMS.values(), ids=BAD_STREAMS.keys())
def test_after_a_frame_error_the_decoder_drops_everything(bad: bytes) -> None:
    # one error, one close: nothing read after it, buffered or fed later, becomes a frame
    good = build_frame(FRAME_BODY, 1, b"y")
    decoder = FrameDecoder(FRAME_MAX)
    decoder.feed(bad + good)
    with pytest.raises(HardError):
        decoder.next_frame()
    assert decoder.broken
    decoder.feed(good)
    assert decoder.next_frame() is NEED_DATA


@pytest.mark.parametrize("frame_type", [0, 4, 7, 9, 65, 255])
def test_unknown_frame_type_is_501(frame_type: int) -> None:
    assert frame_error_of(build_frame(frame_type, 0, b"")).code == ReplyCode.FRAME_ERROR


def test_frame_of_frame_max_is_accepted() -> None:
    decoder = FrameDecoder(FRAME_MAX)
    decoder.feed(build_frame(FRAME_BODY, 1, bytes(FRAME_MAX - 8)))
    assert decoder.next_frame() == (FRAME_BODY, 1, bytes(FRAME_MAX - 8))


def test_payload_larger_than_frame_max_is_501() -> None:
    # RabbitMQ allows eight octets of slack over frame_max; past that it is a frame error.
    error = frame_error_of(build_frame(FRAME_BODY, 1, bytes(FRAME_MAX + 1)))
    assert error.code == ReplyCode.FRAME_ERROR


def test_oversized_frame_is_refused_from_its_header_alone() -> None:
    # The decoder must not buffer up to 4 GiB before saying no.
    header = build_frame(FRAME_BODY, 1, b"")[:3] + (2**32 - 1).to_bytes(4, "big")
    assert frame_error_of(header).code == ReplyCode.FRAME_ERROR


def test_frame_max_can_shrink_between_frames() -> None:
    decoder = FrameDecoder(131072)
    decoder.feed(build_frame(FRAME_BODY, 1, bytes(5000)))
    assert decoder.next_frame() != NEED_DATA
    decoder.frame_max = FRAME_MAX
    decoder.feed(build_frame(FRAME_BODY, 1, bytes(5000)))
    with pytest.raises(HardError):
        decoder.next_frame()


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=8))
def test_any_bytes_give_frames_need_data_or_501(stream: bytes, cuts: list[int]) -> None:
    decoder = FrameDecoder(FRAME_MAX)
    try:
        for chunk in chunked(stream, cuts):
            decoder.feed(chunk)
            for frame_type, _channel, payload in read_all(decoder):
                assert frame_type in (FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT)
                assert len(payload) <= FRAME_MAX
    except HardError as error:
        assert error.code == ReplyCode.FRAME_ERROR


# --- the protocol header -----------------------------------------------------------------


def test_protocol_header_is_read_once() -> None:
    decoder = FrameDecoder(FRAME_MAX)
    decoder.feed(PROTOCOL_HEADER[:5])
    assert decoder.read_protocol_header() is ProtocolHeader.INCOMPLETE
    decoder.feed(PROTOCOL_HEADER[5:] + HEARTBEAT_FRAME)
    assert decoder.read_protocol_header() is ProtocolHeader.OK
    assert decoder.next_frame() == (FRAME_HEARTBEAT, 0, b"")


@pytest.mark.parametrize(
    "header",
    [b"AMQP\x00\x00\x09\x00", b"AMQP\x01\x01\x00\x09", b"AMQP\x00\x00\x08\x00", b"GET / HT"],
)
def test_other_protocol_headers_are_wrong(header: bytes) -> None:
    decoder = FrameDecoder(FRAME_MAX)
    decoder.feed(header)
    assert decoder.read_protocol_header() is ProtocolHeader.WRONG
