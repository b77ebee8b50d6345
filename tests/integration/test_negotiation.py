"""Connection negotiation and channel 0, on a raw socket, as RabbitMQ 3.10.8 answers them.

Before `tune-ok` is accepted RabbitMQ trusts the client with nothing: a failure there (limits
out of range, an unknown mechanism, a malformed response, a method out of turn) sends no
frame, and the socket closes about three seconds later. A refused login is the one
exception, and only for a client that announced the `authentication_failure_close`
capability: it hears 403. Once tuned, every violation is a `connection.close`:
504 for what channel 0 does not take in the current state, 503 for connection methods on a
channel, 505 for another channel's frames before `connection.open`.

The silent cases are all sent at the start of the module (`silent_closes`), so that their
three-second waits overlap; each test then reads its own connection until it closes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import pytest

from tests.integration.conftest import (
    CLIENT_PROPERTIES,
    PROTOCOL_HEADER,
    RawAmqp,
    longstr,
    shortstr,
)

NO_PROPERTIES = struct.pack(">I", 0)
ACCESS_REFUSED = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism {}. "
    "For details see the broker logfile."
)
CONNECTION_OPEN = shortstr("/") + shortstr("") + b"\x00"
Violation = Callable[[RawAmqp], None]  # what a client sends up to where it breaks the rules


def start_ok(
    raw: RawAmqp,
    mechanism: str = "PLAIN",
    response: bytes = b"\x00guest\x00guest",
    capability: bool = True,
    locale: str = "en_US",
) -> None:
    raw.send(PROTOCOL_HEADER)
    raw.expect_method(0, (10, 10))
    properties = CLIENT_PROPERTIES if capability else NO_PROPERTIES
    arguments = properties + shortstr(mechanism) + longstr(response) + shortstr(locale)
    raw.send_method(0, 10, 11, arguments)


def tune_ok(raw: RawAmqp, channel_max: int | None, frame_max: int | None) -> tuple[int, int]:
    """Answer connection.tune with the given limits (None: the server's); return the server's."""
    tune = raw.expect_method(0, (10, 30)).payload
    server_channel_max, server_frame_max, _ = struct.unpack(">HIH", tune[4:12])
    channel_max = server_channel_max if channel_max is None else channel_max
    frame_max = server_frame_max if frame_max is None else frame_max
    raw.send_method(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, 0))
    return server_channel_max, server_frame_max


def bad_tune_ok(channel_max: int | str | None, frame_max: int | str | None) -> Violation:
    """Tune-ok with a limit out of range: "above" is one more than the server's, None its own."""

    def violate(raw: RawAmqp) -> None:
        start_ok(raw)
        tune = raw.expect_method(0, (10, 30)).payload
        server_channel_max, server_frame_max, _ = struct.unpack(">HIH", tune[4:12])
        channel = server_channel_max + 1 if channel_max == "above" else channel_max
        frame = server_frame_max + 1 if frame_max == "above" else frame_max
        channel = server_channel_max if channel is None else channel
        frame = server_frame_max if frame is None else frame
        raw.send_method(0, 10, 31, struct.pack(">HIH", channel, frame, 0))

    return violate


def bad_start_ok(mechanism: str, response: bytes, capability: bool) -> Violation:
    return lambda raw: start_ok(raw, mechanism, response, capability)


def out_of_turn(stage: str) -> Violation:
    """channel.open before tune-ok, or before start-ok."""

    def violate(raw: RawAmqp) -> None:
        if stage == "before-tune-ok":
            start_ok(raw)
            raw.expect_method(0, (10, 30))
        else:
            raw.send(PROTOCOL_HEADER)
            raw.expect_method(0, (10, 10))
        raw.send_method(1, 20, 10, shortstr(""))

    return violate


BAD_TUNE_OKS = {
    "channel_max-0": bad_tune_ok(0, None),
    "channel_max-above": bad_tune_ok("above", None),
    "frame_max-0": bad_tune_ok(None, 0),
    "frame_max-4095": bad_tune_ok(None, 4095),
    "frame_max-8": bad_tune_ok(None, 8),
    "frame_max-above": bad_tune_ok(None, "above"),
}
BAD_MECHANISMS_OR_RESPONSES = {
    "unknown": ("FOO", b"\x00guest\x00guest"),
    "lower-case": ("plain", b"\x00guest\x00guest"),
    "empty": ("", b"\x00guest\x00guest"),
    "external-without-tls": ("EXTERNAL", b""),
    "plain-malformed": ("PLAIN", b"guest"),
    "amqplain-malformed": ("AMQPLAIN", b"\x05LOG"),
}
BAD_START_OKS = {
    f"{case}-{capability_id}": bad_start_ok(mechanism, response, capability)
    for case, (mechanism, response) in BAD_MECHANISMS_OR_RESPONSES.items()
    for capability_id, capability in (("capability", True), ("no-capability", False))
}
REFUSED_WITHOUT_CAPABILITY = "refused-login-without-capability"
OUT_OF_TURN = {stage: out_of_turn(stage) for stage in ("before-tune-ok", "before-start-ok")}
SILENT_CLOSES: dict[str, Violation] = {
    **{f"tune-ok/{case}": violate for case, violate in BAD_TUNE_OKS.items()},
    **{f"start-ok/{case}": violate for case, violate in BAD_START_OKS.items()},
    REFUSED_WITHOUT_CAPABILITY: bad_start_ok("PLAIN", b"\x00guest\x00wrong", False),
    **{f"out-of-turn/{stage}": violate for stage, violate in OUT_OF_TURN.items()},
}


@pytest.fixture(scope="module")
def silent_closes(broker) -> Iterator[dict[str, RawAmqp | Exception]]:
    """A raw connection past its violation for every case of `SILENT_CLOSES`, all made at
    once: the server closes each about three seconds later, so the cases wait out that
    delay together rather than one after another. A case whose violation could not be
    sent keeps the error, for its test to raise."""
    started: dict[str, RawAmqp | Exception] = {}
    for case, violate in SILENT_CLOSES.items():
        raw = RawAmqp(broker.url)
        try:
            violate(raw)
        except Exception as error:
            raw.close()
            started[case] = error
        else:
            started[case] = raw
    yield started
    for raw in started.values():
        if isinstance(raw, RawAmqp):
            raw.close()


def assert_closed_silently(silent_closes: dict[str, RawAmqp | Exception], case: str) -> None:
    raw = silent_closes[case]
    if isinstance(raw, Exception):
        raise raw
    assert raw.read_until_closed() == b""


@pytest.mark.parametrize("case", BAD_TUNE_OKS)
def test_tune_ok_out_of_range_closes_silently(silent_closes, case):
    assert_closed_silently(silent_closes, f"tune-ok/{case}")


@pytest.mark.parametrize(
    ("channel_max", "frame_max"), [(1, 4096), (None, None)], ids=["minimum", "server's"]
)
def test_tune_ok_within_range_opens(raw_amqp, channel_max, frame_max):
    raw = raw_amqp(handshake=False)
    start_ok(raw)
    tune_ok(raw, channel_max, frame_max)
    raw.open()
    raw.open_channel(1)


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_refused_login_with_capability_hears_403(raw_amqp, mechanism):
    raw = raw_amqp(handshake=False)
    response = (
        b"\x00guest\x00wrong"
        if mechanism == "PLAIN"
        else shortstr("LOGIN")
        + b"S"
        + longstr(b"guest")
        + shortstr("PASSWORD")
        + b"S"
        + longstr(b"wrong")
    )
    start_ok(raw, mechanism, response)
    assert raw.read_connection_close() == (403, ACCESS_REFUSED.format(mechanism), 0, 0)
    assert raw.read_until_closed() == b""


def test_refused_login_without_capability_closes_silently(silent_closes):
    assert_closed_silently(silent_closes, REFUSED_WITHOUT_CAPABILITY)


@pytest.mark.parametrize("case", BAD_START_OKS)
def test_bad_mechanism_or_response_closes_silently(silent_closes, case):
    assert_closed_silently(silent_closes, f"start-ok/{case}")


@pytest.mark.parametrize("locale", ["", "xx_XX"])
def test_any_locale_is_accepted(raw_amqp, locale):
    raw = raw_amqp(handshake=False)
    start_ok(raw, locale=locale)
    tune_ok(raw, None, None)
    raw.open()


@pytest.mark.parametrize("stage", OUT_OF_TURN)
def test_method_out_of_turn_before_tune_ok_closes_silently(silent_closes, stage):
    assert_closed_silently(silent_closes, f"out-of-turn/{stage}")


def _opening(raw_amqp) -> RawAmqp:
    raw = raw_amqp(handshake=False)
    start_ok(raw)
    tune_ok(raw, None, None)
    return raw


def test_channel_frame_before_open_is_an_unexpected_frame(raw_amqp):
    raw = _opening(raw_amqp)
    raw.send_method(1, 20, 10, shortstr(""))
    text = "UNEXPECTED_FRAME - type 1, all octets = <<0,20,0,10,0>>"
    assert raw.read_connection_close() == (505, text, 0, 0)


def test_other_method_before_open_is_a_channel_error(raw_amqp):
    raw = _opening(raw_amqp)
    raw.send_method(0, 90, 10)  # tx.select
    text = "CHANNEL_ERROR - unexpected method in connection state opening"
    assert raw.read_connection_close() == (504, text, 90, 10)


RUNNING = "CHANNEL_ERROR - unexpected method in connection state running"
CHANNEL_0_METHODS = {
    "channel.open": (20, 10, shortstr("")),
    "channel.flow": (20, 20, b"\x01"),
    "channel.close": (20, 40, struct.pack(">H", 200) + shortstr("") + struct.pack(">HH", 0, 0)),
    "queue.declare": (50, 10, struct.pack(">H", 0) + shortstr("q") + b"\x00" + NO_PROPERTIES),
    "basic.qos": (60, 10, struct.pack(">IHB", 0, 10, 0)),
    "basic.publish": (60, 40, struct.pack(">H", 0) + shortstr("") + shortstr("q") + b"\x00"),
    "tx.select": (90, 10, b""),
    "confirm.select": (85, 10, b"\x00"),
    "connection.start-ok": (
        10,
        11,
        NO_PROPERTIES + shortstr("PLAIN") + longstr(b"\x00guest\x00guest") + shortstr("en_US"),
    ),
    "connection.secure-ok": (10, 21, longstr(b"")),
    "connection.tune-ok": (10, 31, struct.pack(">HIH", 0, 131072, 0)),
    "connection.open": (10, 40, CONNECTION_OPEN),
    "connection.blocked": (10, 60, shortstr("x")),
}


@pytest.mark.parametrize("method", CHANNEL_0_METHODS)
def test_channel_0_takes_only_close_once_open(raw_amqp, method):
    raw = raw_amqp()
    class_id, method_id, arguments = CHANNEL_0_METHODS[method]
    raw.send_method(0, class_id, method_id, arguments)
    assert raw.read_connection_close() == (504, RUNNING, class_id, method_id)


CONNECTION_METHODS = {
    "connection.open": (10, 40, CONNECTION_OPEN),
    "connection.close": (10, 50, struct.pack(">H", 200) + shortstr("") + struct.pack(">HH", 0, 0)),
    "connection.close-ok": (10, 51, b""),
    "connection.tune-ok": (10, 31, struct.pack(">HIH", 0, 131072, 0)),
}


@pytest.mark.parametrize("method", CONNECTION_METHODS)
def test_connection_method_on_a_channel(raw_amqp, method):
    raw = raw_amqp()
    raw.open_channel(1)
    class_id, method_id, arguments = CONNECTION_METHODS[method]
    raw.send_method(1, class_id, method_id, arguments)
    text = "COMMAND_INVALID - unimplemented method"
    assert raw.read_connection_close() == (503, text, class_id, method_id)


@pytest.mark.parametrize("method", CONNECTION_METHODS)
def test_connection_method_on_an_unopened_channel(raw_amqp, method):
    raw = raw_amqp()
    class_id, method_id, arguments = CONNECTION_METHODS[method]
    raw.send_method(2, class_id, method_id, arguments)
    text = "CHANNEL_ERROR - expected 'channel.open'"
    assert raw.read_connection_close() == (504, text, class_id, method_id)


def tuned_with_heartbeats(broker, heartbeat_s: int) -> RawAmqp:
    """A raw connection that answered the tune with `heartbeat_s` and nothing else yet."""
    raw = RawAmqp(broker.url)
    raw.start()
    tune = raw.expect_method(0, (10, 30)).payload
    channel_max, frame_max = struct.unpack(">HI", tune[4:10])
    raw.send_method(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, heartbeat_s))
    return raw


def test_heartbeats_start_at_tune_ok(broker):
    # RabbitMQ starts its heartbeater when tune-ok arrives, not at connection.open: a
    # client that tuned one-second heartbeats hears them before it opens a vhost.
    raw = tuned_with_heartbeats(broker, 1)
    frame = raw.read_frame()
    assert (frame.frame_type, frame.channel, frame.payload) == (8, 0, b"")
    raw.close()


def test_a_silent_client_is_dropped_after_missed_heartbeats(broker):
    # One-second heartbeats, then nothing from the client: the server sends heartbeats,
    # and closes the socket (no connection.close) once two intervals passed unheard.
    raw = tuned_with_heartbeats(broker, 1)
    raw.open()
    heard = raw.read_until_closed()
    heartbeat = b"\x08\x00\x00\x00\x00\x00\x00\xce"
    assert heard and heard == heartbeat * (len(heard) // len(heartbeat))
    raw.close()
