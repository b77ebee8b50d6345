"""The peer link over loopback TCP against over a Unix socket, in one process (issue 19).

    python -m bench.local_link [--messages 20000] [--calls 2000] [--reps 5]

Owns one comparison of the transport alone, what the workers of a node swapped (their
links were loopback TCP, now a Unix socket each: `warren.runtime.cluster.peers`, rule 7):
1. Two pairs of `Peers` in this process's uvloop loop, one linked over TCP on 127.0.0.1,
   one over Unix sockets; the same handshake, framing and per-turn batching.
2. One-way: `--messages` small messages (`RaftTraffic` of 128 bytes) from one end to the
   other, `--batch` of them a loop turn (so a frame and a write each); both ends' CPU
   (this process's user and system time) per message.
3. Round trip: `--calls` calls one after another (`GroupStatus`, answered at once); the
   median wall time of one.
The transports take turns, and turns to go first, `--reps` times; the medians are shown.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from warren.runtime.cluster.calls import GroupStatus, PeerMessage, RaftTraffic, Request
from warren.runtime.cluster.peers import Peers

COOKIE = "bench cookie"
BODY = bytes(128)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.local_link", description=__doc__)
    p.add_argument("--messages", type=int, default=20_000, help="one-way messages a run")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 64], help="messages a turn")
    p.add_argument("--calls", type=int, default=2_000, help="round trips a run")
    p.add_argument("--reps", type=int, default=5)
    return p.parse_args(argv)


async def _pair(local: dict[str, str] | None) -> tuple[Peers, Peers, list[int]]:
    a = Peers("a", COOKIE, "127.0.0.1", 0, {}, local)
    b = Peers("b", COOKIE, "127.0.0.1", 0, {}, local)
    got = [0]

    def count(_sender: str, _message: PeerMessage) -> None:
        got[0] += 1

    async def status(_sender: str, _request: Request) -> object:
        return None

    b.on_message(count)
    b.serve(status)
    for peers in (a, b):
        await peers.start()
    a.set_address("b", "127.0.0.1", b.port)
    while not (a.connected("b") and b.connected("a")):
        await asyncio.sleep(0.01)
    return a, b, got


async def _one_way(a: Peers, got: list[int], messages: int, batch: int) -> float:
    """Both ends' CPU per message, in microseconds."""
    got[0] = 0
    message = RaftTraffic(BODY)
    cpu = time.process_time()
    for _ in range(messages // batch):
        for _ in range(batch):
            a.send("b", message)
        await asyncio.sleep(0)
    while got[0] < messages // batch * batch:
        await asyncio.sleep(0)
    return (time.process_time() - cpu) / messages * 1e6


async def _round_trips(a: Peers, calls: int) -> float:
    """The median round trip, in microseconds."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await a.call("b", GroupStatus("bench"))
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


async def compare(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    with tempfile.TemporaryDirectory(prefix="warren-link-") as directory:
        local = {name: str(Path(directory) / f"{name}.link") for name in ("a", "b")}
        pairs = {"tcp": await _pair(None), "unix": await _pair(local)}
        figures: dict[str, dict[str, list[float]]] = {name: {} for name in pairs}
        for rep in range(args.reps):
            for name in list(pairs)[:: 1 if rep % 2 == 0 else -1]:
                a, _b, got = pairs[name]
                for batch in args.batch:
                    cpu = await _one_way(a, got, args.messages, batch)
                    figures[name].setdefault(f"CPU us/msg, {batch} a turn", []).append(cpu)
                trip = await _round_trips(a, args.calls)
                figures[name].setdefault("round trip us (median)", []).append(trip)
        for a, b, _got in pairs.values():
            await a.close()
            await b.close()
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    figures = uvloop.run(compare(args))
    print("| | loopback TCP | Unix socket | Unix / TCP |\n|---|---|---|---|")
    for label in figures["tcp"]:
        tcp, unix = (statistics.median(figures[name][label]) for name in ("tcp", "unix"))
        runs = [", ".join(f"{v:.2f}" for v in figures[name][label]) for name in ("tcp", "unix")]
        print(f"| {label} | {runs[0]} | {runs[1]} | {unix / tcp:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
