"""The deterministic cluster simulators: `python -m warren.testing.sim --seeds N`.

Bare Raft (`--stack raft`): see `warren.testing.sim.world` for the theory of operation and
docs/internals/raft.md for how to replay a seed. The whole quorum stack (`--stack quorum`):
`warren.testing.sim.stack`, `loop`, `links`, `plants` and docs/internals/simulation.md.
"""

from warren.testing.sim.checkers import SafetyChecker, Violation
from warren.testing.sim.disk import DiskCrash, SimDisk
from warren.testing.sim.network import NetworkFaults, SimNetwork
from warren.testing.sim.world import SimClock, SimOptions, SimResult, SimWorld, run_seed

__all__ = [
    "DiskCrash",
    "NetworkFaults",
    "SafetyChecker",
    "SimClock",
    "SimDisk",
    "SimNetwork",
    "SimOptions",
    "SimResult",
    "SimWorld",
    "Violation",
    "run_seed",
]
