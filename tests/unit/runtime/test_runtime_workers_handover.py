"""The hand-over message between workers: what one worker encodes the other decodes, and
a message of another version (or none at all) is refused, not misread."""

from __future__ import annotations

import pytest

from warren.runtime.workers.handover import (
    MAGIC,
    VERSION,
    ChannelState,
    ConnectionState,
    decode,
    encode,
)


def _state(**changes: object) -> ConnectionState:
    fields: dict[str, object] = {
        "user": "guest",
        "vhost": "/",
        "auth_mechanism": "PLAIN",
        "client_properties": {"product": "pika", "capabilities": {"publisher_confirms": True}},
        "cancel_notify": True,
        "blocked_capability": False,
        "failure_close": True,
        "frame_max": 131072,
        "channel_max": 2047,
        "heartbeat": 60,
        "connected_at_ms": 1_790_000_000_000,
        "moves": 1,
        "channels": (
            ChannelState(1, 100, 0, True, False, "orders"),
            ChannelState(2, 0, 50, False, True, ""),
        ),
        "unread": b"\x01\x00\x01\x00\x00\x00\x05hello\xce",
    }
    fields.update(changes)
    return ConnectionState(**fields)  # type: ignore[arg-type]


def test_a_state_comes_back_as_it_was_encoded() -> None:
    state = _state()
    assert decode(encode(state)) == state


def test_unread_bytes_of_any_size_and_content_come_back() -> None:
    state = _state(unread=bytes(range(256)) * 4096, channels=())
    assert decode(encode(state)) == state


def test_another_version_is_refused() -> None:
    data = encode(_state())
    newer = MAGIC + bytes([VERSION + 1]) + data[len(MAGIC) + 1 :]
    with pytest.raises(ValueError, match=f"version {VERSION + 1}: expected {VERSION}"):
        decode(newer)


@pytest.mark.parametrize(
    ("data", "why"),
    [(b"", "too short"), (MAGIC, "too short"), (b"XXXX\x01" + bytes(8), "not a hand-over")],
)
def test_what_is_not_a_hand_over_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode(data)
