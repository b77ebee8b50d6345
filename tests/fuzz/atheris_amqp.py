"""Coverage-guided fuzzing of the AMQP codec and connection state machine with atheris.

The rule is h11's, as in tests/unit/amqp/test_amqp_connection_fuzz.py: whatever bytes a
client sends, `ServerConnection.next_event` returns events, NEED_DATA or raises
`HardError` with a hard reply code; anything else is a crash that atheris reports with the
input that caused it. The first input byte picks the starting point (raw bytes, after the
protocol header, or on an open connection with channel 1 open) and the rest is cut into
chunks at positions the input also chooses, so partial reads are covered.

    .venv/bin/python tests/fuzz/atheris_amqp.py -runs=1000000    # a long run
    .venv/bin/python tests/fuzz/atheris_amqp.py -max_total_time=600 corpus_dir

The suite runs a short, seeded run (tests/fuzz/test_atheris.py).
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from warren.amqp import methods as m
    from warren.amqp.connection import ServerConnection
    from warren.amqp.content import method_frame
    from warren.amqp.frames import PROTOCOL_HEADER
    from warren.testing.amqp_fuzz import feed_all

OPEN = b"".join(
    [
        PROTOCOL_HEADER,
        method_frame(0, m.ConnectionStartOk(response=b"\x00guest\x00guest")),
        method_frame(0, m.ConnectionTuneOk(2047, 131072, 0)),
        method_frame(0, m.ConnectionOpen()),
        method_frame(1, m.ChannelOpen()),
    ]
)
STARTS = (b"", PROTOCOL_HEADER, OPEN)


def one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    start = STARTS[provider.ConsumeIntInRange(0, len(STARTS) - 1)]
    cuts = sorted(provider.ConsumeIntListInRange(provider.ConsumeIntInRange(0, 4), 0, 400))
    payload = start + provider.ConsumeBytes(provider.remaining_bytes())
    previous, chunks = 0, []
    for cut in [*cuts, len(payload)]:
        chunks.append(payload[previous : max(previous, cut)])
        previous = max(previous, cut)
    feed_all(ServerConnection(), chunks)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
