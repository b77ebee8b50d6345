"""Cluster soak: faults again and again on a 3-node cluster under confirmed load on quorum queues.

A publisher (confirms, a window of unconfirmed messages) and a consumer (manual acks) run
the whole time, each connected to some running node and reconnecting to another when its
node dies. Meanwhile faults are injected one after another, at random:

- ``kill-leader``: SIGKILL the leader of a queue, start it again a little later;
- ``kill-follower``: the same with a node that leads nothing of the soak's queues;
- ``partition``: cut one node off from the others (TCP proxies), heal a little later;
- ``restart``: stop and start a node cleanly (SIGTERM);
- ``move-member``: remove a follower from a queue's members and add it back
  (``warren-queues delete_member`` then ``add_member``), so the replica is rebuilt from
  the leader's log or snapshot while the load goes on.

After the last fault everything is healed and started, a consumer drains the queues, and
the result is the same check as `bench.soak_durability`: lost (confirmed, never arrived;
must be 0), corrupt (0), out of order (0), duplicates (allowed). It also reports the
longest unavailability: the longest time without any confirm while the publisher was
trying, which includes elections and clients reconnecting.

    .venv/bin/python -m bench.soak_cluster --faults 30
    .venv/bin/python -m bench.soak_cluster --faults 20 --workers 2   # nodes of 2 workers
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.soak_durability import (
    Tally,
    add_publisher_arguments,
    consume,
    drain,
    publish,
    report,
)
from warren.testing.cluster import LocalCluster

NODES = ["warren-a", "warren-b", "warren-c"]
QUORUM = {"x-queue-type": "quorum"}
STOP_TIMEOUT_S = 15.0
FAULTS = ("kill-leader", "kill-follower", "partition", "restart", "move-member")


class Confirms(Tally):
    """The tally, plus when confirms came (for the longest unavailability)."""

    def __init__(self, queues: list[str]) -> None:
        super().__init__(
            published=dict.fromkeys(queues, 0),
            confirmed={queue: _Stamped(self) for queue in queues},
            arrivals={queue: [] for queue in queues},
        )
        self.last_confirm = time.monotonic()
        self.longest_gap_s = 0.0

    def stamp(self) -> None:
        now = time.monotonic()
        self.longest_gap_s = max(self.longest_gap_s, now - self.last_confirm)
        self.last_confirm = now


class _Stamped(set[int]):
    def __init__(self, tally: Confirms) -> None:
        super().__init__()
        self.tally = tally

    def add(self, sequence: int) -> None:
        super().add(sequence)
        self.tally.stamp()


async def keep_running(job: object, cluster: LocalCluster, rng: random.Random) -> None:
    """Run `job(url)` against some running node, again on another one whenever it ends."""
    while True:
        running = [name for name, node in cluster.nodes.items() if node.running]
        if running:
            with contextlib.suppress(Exception):
                await job(cluster.nodes[rng.choice(running)].url)  # type: ignore[operator]
        await asyncio.sleep(0.2)


async def inject(cluster: LocalCluster, fault: str, queues: list[str], rng: random.Random) -> str:
    loop = asyncio.get_running_loop()
    leaders = set()
    for queue in queues:
        leaders.add(await loop.run_in_executor(None, cluster.leader_of, queue))
    if fault == "kill-leader":
        victim = rng.choice(sorted(leaders))
    else:
        others = [name for name in NODES if name not in leaders] or NODES
        victim = rng.choice(others if fault == "kill-follower" else NODES)
    down_s = rng.uniform(1.0, 3.0)
    if fault == "move-member":
        queue = rng.choice(queues)
        leader = await loop.run_in_executor(None, cluster.leader_of, queue)
        victim = rng.choice([name for name in NODES if name != leader])
        members = f"/api/warren/quorum/%2F/{queue}/members"
        await loop.run_in_executor(
            None, lambda: cluster.api(leader, f"{members}/{victim}", "DELETE", timeout_s=30)
        )
        await asyncio.sleep(down_s)
        await loop.run_in_executor(
            None, lambda: cluster.api(leader, members, "POST", {"node": victim}, timeout_s=30)
        )
        return f"{fault} {victim} of {queue} for {down_s:.1f} s"
    if fault == "partition":
        cluster.isolate(victim)
        await asyncio.sleep(down_s)
        cluster.heal()
    else:
        if fault == "restart":
            process = cluster.nodes[victim].process
            assert process is not None
            process.terminate()
            try:
                await loop.run_in_executor(None, process.wait, STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:  # a node that does not stop is a bug: say so
                print(f"  {victim} did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM")
                await loop.run_in_executor(None, cluster.kill, victim)
        else:
            await loop.run_in_executor(None, cluster.kill, victim)
        await asyncio.sleep(down_s)
        await loop.run_in_executor(None, cluster.start, victim)
    return f"{fault} {victim} for {down_s:.1f} s"


async def soak(args: argparse.Namespace, directory: Path) -> bool:
    rng = random.Random(args.seed)
    queues = [f"soak-qq-{index}" for index in range(args.queues)]
    tally = Confirms(queues)
    cluster = LocalCluster(directory, NODES, raft_tick_ms=args.tick_ms, workers=args.workers)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, cluster.start_all)
    # unavailability counts from here: a confirm within the first 2 s (before the reset
    # below) measured from the tally's making, so the nodes' start counted as a gap
    tally.last_confirm = time.monotonic()
    try:
        tasks = [
            asyncio.create_task(
                keep_running(
                    lambda url: publish(url, queues, tally, rng, args, QUORUM), cluster, rng
                )
            ),
            asyncio.create_task(
                keep_running(
                    lambda url: consume(url, queues, tally, args.prefetch, QUORUM), cluster, rng
                )
            ),
        ]
        await asyncio.sleep(2.0)
        tally.last_confirm = time.monotonic()
        for number in range(1, args.faults + 1):
            await asyncio.sleep(rng.uniform(args.min_interval, args.max_interval))
            what = await inject(cluster, rng.choice(args.kinds), queues, rng)
            confirmed = sum(len(c) for c in tally.confirmed.values())
            print(
                f"fault {number}/{args.faults}: {what}; {confirmed} confirmed,"
                f" longest unavailability {tally.longest_gap_s:.2f} s",
                flush=True,
            )
        await asyncio.sleep(2.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await drain(cluster.nodes[NODES[0]].url, queues, tally, idle_s=2.0)
    finally:
        await loop.run_in_executor(None, cluster.stop_all)
    print(f"longest unavailability: {tally.longest_gap_s:.2f} s")
    return report(tally, queues, args.faults, "faults")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=10, help="faults injected (default 10)")
    parser.add_argument("--min-interval", type=float, default=1.0, help="seconds between")
    parser.add_argument("--max-interval", type=float, default=4.0, help="seconds between")
    parser.add_argument("--queues", type=int, default=2, help="quorum queues (default 2)")
    add_publisher_arguments(parser)
    parser.add_argument("--prefetch", type=int, default=200, help="of the consumer")
    parser.add_argument("--tick-ms", type=int, default=50, help="Raft tick of the nodes")
    parser.add_argument("--workers", type=int, default=1, help="worker processes per node")
    kinds = ",".join(FAULTS)
    parser.add_argument("--kinds", default=kinds, help=f"faults to draw from (default {kinds})")
    parser.add_argument("--seed", type=int, default=None, help="random seed (printed)")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temporary one")
    parser.add_argument("--timeout", type=float, default=1800.0, help="whole run, seconds")
    args = parser.parse_args()
    args.kinds = [kind for kind in args.kinds.split(",") if kind]
    unknown = sorted(set(args.kinds) - set(FAULTS))
    if unknown or not args.kinds:
        parser.error(f"unknown faults {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    logging.getLogger("aiormq").setLevel(logging.CRITICAL)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    print(f"seed {args.seed}")
    with tempfile.TemporaryDirectory(prefix="warren-soak-cluster-") as temporary:
        directory = args.data_dir or Path(temporary)
        ok = asyncio.run(asyncio.wait_for(soak(args, directory), args.timeout))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
