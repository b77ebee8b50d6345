"""Where a quorum queue's replicas go (RabbitMQ's ``x-quorum-initial-group-size``).

The declaring node always holds a replica (it leads first: ``client-local``); the others
are drawn at random from the rest of the cluster, so queues spread over the nodes. The
caller passes the random source, so a seed replays a placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Sampler(Protocol):
    def sample(self, population: Sequence[str], k: int, /) -> list[str]: ...


def place_replicas(local: str, nodes: Sequence[str], size: int, rng: Sampler) -> list[str]:
    """`size` members (at most the cluster's size), `local` first."""
    others = sorted(node for node in nodes if node != local)
    count = max(0, min(size, len(others) + 1) - 1)
    return [local, *sorted(rng.sample(others, count))]
