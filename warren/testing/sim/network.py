"""The simulated network: every message is delayed, and may be lost, duplicated or blocked.

Theory of operation:
1. `SimNetwork.route(message)` decides a message's fate at the moment it is sent and returns
   the delivery times (none if lost or blocked, two if duplicated). Delays are drawn per
   message, so messages overtake each other: that is the reordering.
2. Partitions are a set of blocked directed links (sender, receiver). A symmetric partition
   blocks both directions between two groups; an asymmetric one blocks one direction only,
   which is how a node can hear its leader but not be heard (or the reverse).
3. All randomness comes from the world's seeded `random.Random`; the network keeps no
   other state, so a seed replays it exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from warren.raft import NodeId


@dataclass(slots=True)
class NetworkFaults:
    loss_probability: float = 0.0
    duplicate_probability: float = 0.0
    delay_ms_min: int = 1
    delay_ms_max: int = 10
    # now and then a message takes far longer, which is what reorders a stream
    slow_probability: float = 0.0
    slow_delay_ms_max: int = 200


class SimNetwork:
    def __init__(self, rng: random.Random, faults: NetworkFaults):
        self._rng = rng
        self.faults = faults
        self.blocked: set[tuple[NodeId, NodeId]] = set()

    def route(self, sender: NodeId, receiver: NodeId) -> list[int]:
        """Delays (ms) after which copies of a message from `sender` reach `receiver`."""
        if (sender, receiver) in self.blocked:
            return []
        faults = self.faults
        rng = self._rng
        if faults.loss_probability and rng.random() < faults.loss_probability:
            return []
        copies = (
            2 if faults.duplicate_probability and rng.random() < faults.duplicate_probability else 1
        )
        delays = []
        for _ in range(copies):
            if faults.slow_probability and rng.random() < faults.slow_probability:
                delays.append(rng.randint(faults.delay_ms_max, faults.slow_delay_ms_max))
            else:
                delays.append(rng.randint(faults.delay_ms_min, faults.delay_ms_max))
        return delays

    def heal(self) -> None:
        self.blocked.clear()

    def partition(self, group: list[NodeId], others: list[NodeId], *, symmetric: bool) -> None:
        """Block messages from `group` to `others` (and back, if symmetric)."""
        for a in group:
            for b in others:
                self.blocked.add((a, b))
                if symmetric:
                    self.blocked.add((b, a))
