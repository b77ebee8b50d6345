"""The simulator's node transport (`warren.testing.sim.links`) keeps each node's work in
that node's life (`warren.testing.sim.loop`), so a crash stops all of it."""

from __future__ import annotations

import asyncio
import random

from warren.testing.sim.links import SimLinks, SimNet
from warren.testing.sim.loop import Life, SimLoop


def test_what_a_link_handler_schedules_dies_with_its_node() -> None:
    """Links come up and go down by another node's doing (it starts, crashes) or the
    world's (a partition heals): a node's link handlers run as part of its own life
    anyway, so what they schedule stops when it crashes."""
    loop = SimLoop(random.Random(1))
    net = SimNet(loop, random.Random(2))
    lives = {name: Life(name) for name in ("a", "b")}
    ends = {name: SimLinks(net, life, list(lives)) for name, life in lives.items()}
    fired: list[str] = []

    def up(node: str, is_up: bool) -> None:
        if is_up:  # a handler that works later, as the runtime's do (retries, hand-overs)
            asyncio.get_running_loop().call_later(1.0, fired.append, f"b saw {node}")

    ends["b"].on_link(up)

    async def world() -> None:
        await lives["b"].spawn(ends["b"].start())
        await lives["a"].spawn(ends["a"].start())  # b's link to a comes up now
        lives["b"].alive = False  # b crashes before its handler's work is due
        net.detach("b")
        await asyncio.sleep(2.0)

    loop.run_until_complete(world())
    loop.close()
    assert fired == []
