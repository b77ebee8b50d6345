"""Throughput of one Raft group on three `RaftHost`s over loopback (`python -m bench.raft_host`).

Owns a self-contained measurement of the Raft runtime alone (no AMQP): the leader runs in
this process and proposes 128-byte payloads with many proposals outstanding; each follower
is a process of its own with its own WAL directory. Prints one JSON line: proposals
committed (applied on the leader) per second, WAL syncs per second on each node, and CPU
time per committed entry (the figure to compare on a shared, loaded machine; a follower's
CPU includes its idle wait for the leader's election).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from warren.runtime.cluster.peers import Peers
from warren.runtime.cluster.raft_host import EntryMeta, RaftHost

COOKIE = "bench"
NODES = ("a", "b", "c")  # "a" leads: the followers' elections are slow to start
FOLLOWER_ELECTION_TICKS = 100


class Counter:
    """A machine that counts what it applied."""

    def __init__(self) -> None:
        self.applied = 0

    def apply(self, meta: EntryMeta, data: bytes) -> object:
        self.applied += 1
        return None

    def retained(self) -> int:
        return 0

    def held(self) -> list[int]:
        return []  # reads no entry back

    def snapshot(self) -> bytes:
        return b"%d" % self.applied

    def restore(self, data: bytes) -> None:
        self.applied = int(data)

    def role_changed(self, leader: bool, leader_node: str | None) -> None:
        pass


async def start_node(
    name: str, directory: Path, election_ticks: int, tick_ms: int
) -> tuple[Peers, RaftHost]:
    peers = Peers(name, COOKIE, "127.0.0.1", 0, {})
    await peers.start()
    host = RaftHost(name, peers, directory, tick_ms=tick_ms, election_ticks=election_ticks)
    await host.start()
    return peers, host


def follower(name: str, directory: str, tick_ms: int, pipe: Connection) -> None:
    async def body() -> None:
        peers, host = await start_node(name, Path(directory), FOLLOWER_ELECTION_TICKS, tick_ms)
        pipe.send(peers.port)
        for node, port in pipe.recv().items():
            peers.set_address(node, "127.0.0.1", port)
        host.add_group("bench", Counter(), NODES)
        cpu_before = time.process_time()
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)  # "stop"
        pipe.send((host.syncs, time.process_time() - cpu_before))
        await host.close()
        await peers.close()

    asyncio.run(body())


async def measure(seconds: float, outstanding: int, payload_bytes: int, tick_ms: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        context = multiprocessing.get_context("spawn")
        pipes, processes = [], []
        for name in NODES[1:]:
            parent, child = context.Pipe()
            process = context.Process(
                target=follower, args=(name, f"{root}/{name}", tick_ms, child)
            )
            process.start()
            pipes.append(parent)
            processes.append(process)
        peers, host = await start_node("a", Path(root) / "a", 10, tick_ms)
        ports = {"a": peers.port}
        for name, pipe in zip(NODES[1:], pipes, strict=True):
            ports[name] = await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
        for pipe in pipes:
            pipe.send(ports)
        for name, port in ports.items():
            peers.set_address(name, "127.0.0.1", port)
        group = host.add_group("bench", Counter(), NODES)
        while not group.is_leader:
            await asyncio.sleep(0.05)

        payload = b"p" * payload_bytes
        committed = 0
        slots = asyncio.Semaphore(outstanding)

        def done(_future: asyncio.Future[object]) -> None:
            nonlocal committed
            committed += 1
            slots.release()

        syncs_before = host.syncs
        cpu_before = time.process_time()
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            await slots.acquire()
            group.propose(payload).add_done_callback(done)
        for _ in range(outstanding):
            await slots.acquire()
        elapsed = time.perf_counter() - started
        leader_cpu_s = time.process_time() - cpu_before
        leader_syncs = host.syncs - syncs_before
        followers = []  # (syncs, CPU seconds) since the follower joined
        for pipe in pipes:
            pipe.send("stop")
            followers.append(await asyncio.get_running_loop().run_in_executor(None, pipe.recv))
        await host.close()
        await peers.close()
        for process in processes:
            process.join()
        print(
            json.dumps(
                {
                    "payload_bytes": payload_bytes,
                    "outstanding": outstanding,
                    "seconds": round(elapsed, 2),
                    "committed": committed,
                    "committed_per_s": round(committed / elapsed),
                    "leader_syncs_per_s": round(leader_syncs / elapsed),
                    "follower_syncs_per_s": [round(s / elapsed) for s, _cpu in followers],
                    "entries_per_leader_sync": round(committed / max(leader_syncs, 1), 1),
                    "leader_cpu_us_per_entry": round(leader_cpu_s / committed * 1e6, 1),
                    "follower_cpu_us_per_entry": [
                        round(cpu / committed * 1e6, 1) for _s, cpu in followers
                    ],
                }
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--outstanding", type=int, default=1000)
    parser.add_argument("--payload-bytes", type=int, default=128)
    parser.add_argument("--tick-ms", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(measure(args.seconds, args.outstanding, args.payload_bytes, args.tick_ms))


if __name__ == "__main__":
    main()
