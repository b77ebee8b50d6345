"""Flow control of publishes to quorum queues (`Channel._count_replicating`): the
connection stops reading past `quorum_commands_soft_limit` uncommitted publishes and reads
again as soon as fewer wait, as rabbit_fifo_client blocks and unblocks around its soft
limit."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from warren.model import VHost
from warren.runtime.channel import Channel

LIMIT = 4


class _Connection:
    """What a channel asks of its connection here: whether it may read."""

    def __init__(self) -> None:
        config = SimpleNamespace(quorum_commands_soft_limit=LIMIT, max_message_size=1 << 20)
        self.broker = SimpleNamespace(config=config, durability=None, access=None)
        self.vhost = VHost()  # a channel's annotations hold, compiled (setup.py's COMPILED)
        self.reading = True

    def hold_flow(self, channel: Channel, held: bool) -> None:
        self.reading = not held


def test_reading_stops_past_the_limit_and_resumes_below_it() -> None:
    connection = _Connection()
    channel = Channel(cast(Any, connection), 1)
    host = cast(Any, object())
    seen = []
    for _ in range(LIMIT + 1):
        channel._count_replicating()
    seen.append(connection.reading)  # LIMIT + 1 wait: held
    channel.replicated(host, 0, 1, None)
    seen.append(connection.reading)  # LIMIT wait: still held
    channel.replicated(host, 0, 1, None)
    seen.append(connection.reading)  # fewer than LIMIT: read again, not at LIMIT // 2
    assert seen == [False, False, True]


def test_a_batch_told_at_once_releases_all_it_counts() -> None:
    connection = _Connection()
    channel = Channel(cast(Any, connection), 1)
    for _ in range(3 * LIMIT):
        channel._count_replicating()
    assert not connection.reading
    channel.replicated(cast(Any, object()), 0, 3 * LIMIT, None)  # one call per batch
    assert connection.reading
    assert channel.replicating == 0
