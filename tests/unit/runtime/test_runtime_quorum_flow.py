"""Flow control of publishes to quorum queues (`Channel._count_replicating`): the
connection stops reading past `quorum_commands_soft_limit` uncommitted publishes and reads
again as soon as fewer wait, as rabbit_fifo_client blocks and unblocks around its soft
limit."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from warren.runtime.channel import Channel

LIMIT = 4


class _Connection:
    """What a channel asks of its connection here: whether it may read."""

    def __init__(self) -> None:
        config = SimpleNamespace(quorum_commands_soft_limit=LIMIT, max_message_size=1 << 20)
        self.broker = SimpleNamespace(config=config, durability=None, access=None)
        self.vhost = None
        self.reading = True

    def hold_flow(self, channel: Channel, held: bool) -> None:
        self.reading = not held


def test_reading_stops_past_the_limit_and_resumes_below_it() -> None:
    async def scenario() -> list[bool]:
        connection = _Connection()
        channel = Channel(cast(Any, connection), 1)
        loop = asyncio.get_running_loop()
        commits = [loop.create_future() for _ in range(LIMIT + 1)]
        seen = []
        for commit in commits:
            channel._count_replicating(commit)
        seen.append(connection.reading)  # LIMIT + 1 wait: held
        commits[0].set_result(True)
        await asyncio.sleep(0)
        seen.append(connection.reading)  # LIMIT wait: still held
        commits[1].set_result(True)
        await asyncio.sleep(0)
        seen.append(connection.reading)  # fewer than LIMIT: read again, not at LIMIT // 2
        return seen

    assert asyncio.run(scenario()) == [False, False, True]
