"""h11's fuzz rule for the AMQP connection, shared by the hypothesis tests and the atheris
harness: whatever bytes arrive, `ServerConnection.next_event` gives events, NEED_DATA or a
`HardError` with a hard reply code, and nothing else (a `KeyError` or `struct.error` would
reach the runtime's last-resort boundary and close with 541 instead of the right code)."""

from __future__ import annotations

from collections.abc import Iterable

from warren.amqp.connection import ServerConnection
from warren.amqp.frames import NEED_DATA
from warren.errors import HardError


def feed_all(connection: ServerConnection, chunks: Iterable[bytes]) -> None:
    """Feed chunk by chunk, reading every event; stop at the first HardError as the runtime
    does. Raises AssertionError if the rule is broken."""
    try:
        for chunk in chunks:
            connection.receive_data(chunk)
            # Each event consumes at least one byte, so this bound is never reached honestly.
            for _ in range(len(chunk) + 2):
                if connection.next_event() is NEED_DATA:
                    break
            else:
                raise AssertionError("next_event never returned NEED_DATA")
    except HardError as error:
        if not error.code.is_hard:
            raise AssertionError(f"HardError with the soft code {error.code}") from error
