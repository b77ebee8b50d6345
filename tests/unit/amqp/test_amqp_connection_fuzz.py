"""h11's fuzz rule for ServerConnection: any input gives events, NEED_DATA or a HardError.

Nothing else may escape `next_event`: a `KeyError` or `struct.error` would reach the
runtime's last-resort boundary and close the connection with 541 instead of the reply
code RabbitMQ uses.
"""

from __future__ import annotations

from amqp_strategies import HANDSHAKE, any_method, body_frame, chunked, header_frame, method_frame
from hypothesis import given, settings
from hypothesis import strategies as st

from warren.amqp import methods as m
from warren.amqp.connection import ServerConnection
from warren.amqp.frames import HEARTBEAT_FRAME, PROTOCOL_HEADER, build_frame
from warren.testing.amqp_fuzz import feed_all

FUZZ = settings(max_examples=80, deadline=None)


@FUZZ
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=6))
def test_any_bytes_from_the_first_byte(data: bytes, cuts: list[int]) -> None:
    feed_all(ServerConnection(), chunked(data, cuts))


@FUZZ
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=6))
def test_any_bytes_after_the_protocol_header(data: bytes, cuts: list[int]) -> None:
    feed_all(ServerConnection(), [PROTOCOL_HEADER, *chunked(data, cuts)])


@FUZZ
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=6))
def test_any_bytes_on_an_open_connection(data: bytes, cuts: list[int]) -> None:
    opening = HANDSHAKE + method_frame(1, m.ChannelOpen())
    feed_all(ServerConnection(), [opening, *chunked(data, cuts)])


# Frames with a valid envelope and any payload reach the method and content decoders.
frame_payloads = st.tuples(
    st.sampled_from([1, 2, 3, 8]), st.sampled_from([0, 1, 2]), st.binary(max_size=60)
)


@FUZZ
@given(st.lists(frame_payloads, max_size=8))
def test_well_framed_garbage_on_an_open_connection(frames: list[tuple[int, int, bytes]]) -> None:
    stream = b"".join(build_frame(*frame) for frame in frames)
    feed_all(ServerConnection(), [HANDSHAKE + method_frame(1, m.ChannelOpen()), stream])


def valid_frames() -> st.SearchStrategy[list[bytes]]:
    """Frames a client could send after the handshake, one list item per frame."""
    publish = st.tuples(st.sampled_from([1, 2]), st.binary(max_size=40)).map(
        lambda pair: [
            method_frame(pair[0], m.BasicPublish(0, "ex", "rk")),
            header_frame(pair[0], len(pair[1])),
            *([body_frame(pair[0], pair[1])] if pair[1] else []),
        ]
    )
    method = st.tuples(st.sampled_from([0, 1, 2, 3]), any_method).map(
        lambda pair: [method_frame(*pair)]
    )
    heartbeat = st.just([HEARTBEAT_FRAME])
    return st.lists(publish | method | heartbeat, max_size=6).map(
        lambda items: [frame for item in items for frame in item]
    )


Changes = list[tuple[str, int, int]]
mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "delete", "insert", "truncate"]),
        st.integers(0, 10**6),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: bytes, changes: Changes) -> bytes:
    buffer = bytearray(data)
    for kind, where, value in changes:
        if not buffer:
            break
        position = where % len(buffer)
        if kind == "flip":
            buffer[position] ^= 1 << (value % 8)
        elif kind == "set":
            buffer[position] = value
        elif kind == "delete":
            del buffer[position : position + 1 + value % 8]
        elif kind == "insert":
            buffer[position:position] = bytes((value,)) * (1 + value % 5)
        else:
            del buffer[position:]
    return bytes(buffer)


@FUZZ
@given(valid_frames(), mutations, st.lists(st.integers(0, 2000), max_size=6))
def test_mutated_valid_streams(frames: list[bytes], changes: Changes, cuts: list[int]) -> None:
    opening = HANDSHAKE + method_frame(1, m.ChannelOpen()) + method_frame(2, m.ChannelOpen())
    stream = mutate(opening + b"".join(frames), changes)
    feed_all(ServerConnection(), chunked(stream, cuts))


@settings(max_examples=50, deadline=None)
@given(valid_frames(), mutations)
def test_mutated_streams_after_the_servers_close(frames: list[bytes], changes: Changes) -> None:
    connection = ServerConnection()
    feed_all(connection, [HANDSHAKE + method_frame(1, m.ChannelOpen())])
    connection.close()
    feed_all(connection, [mutate(b"".join(frames) + HEARTBEAT_FRAME, changes)])


@settings(max_examples=50, deadline=None)
@given(valid_frames(), mutations)
def test_mutated_streams_on_a_closing_channel(frames: list[bytes], changes: Changes) -> None:
    connection = ServerConnection()
    feed_all(connection, [HANDSHAKE + method_frame(1, m.ChannelOpen())])
    connection.close_channel(1)
    feed_all(connection, [mutate(b"".join(frames) + HEARTBEAT_FRAME, changes)])
