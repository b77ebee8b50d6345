"""Broker CPU per message of two source trees side by side (`python -m bench.compiled`).

Made for the mypyc build (issue 19): a tree built with `make mypyc` against the same source
in pure Python, but any two trees compare. Owns one comparison:
1. One Warren node per tree (`brokers.start_warren`, the tree first on PYTHONPATH), both
   running for the whole comparison. Each is a one-node cluster (`--cluster-nodes` naming
   itself, `--quorum-cluster-size 1`), so that a quorum queue (W3) takes the Raft path;
   on a standalone node it would run as a classic queue.
2. Rounds: in each, every workload runs once on each node (`bench.loadgen` with the
   workload's standard arguments, `--duration`), the trees in turn, the first tree first in
   even rounds and last in odd ones, so that drift in the machine's load hits both alike.
3. The figure is the broker's CPU (user + system of its process tree) per message
   consumed (published, for a workload without consumers: W7), which a busy shared
   machine disturbs far less than msg/s; the summary gives the median of the rounds for
   each tree and the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import brokers, workloads
from warren.runtime.ports import unused_port


def one_node_cluster() -> list[str]:
    port = unused_port()
    return [
        "--node-name",
        "bench@localhost",
        "--cluster-nodes",
        f"bench@localhost=127.0.0.1:{port}",
        "--cluster-port",
        str(port),
        "--cluster-cookie",
        "bench-compiled",
        "--quorum-cluster-size",
        "1",
    ]


def run_workload(broker: brokers.Broker, workload: workloads.Workload, duration: float) -> Any:
    command = [sys.executable, "-m", "bench.loadgen", "--url", broker.url]
    command += ["--broker-pid", str(broker.pid), *workload.loadgen_args(duration, quick=False)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    return json.loads(lines[-1])


def compare(trees: list[str], names: list[str], rounds: int, duration: float) -> None:
    nodes: list[brokers.Broker] = []
    try:
        for tree in trees:
            broker, why = brokers.start_warren(one_node_cluster(), tree=tree)
            if broker is None:
                raise SystemExit(why)
            nodes.append(broker)
        figures: dict[tuple[str, int], list[float]] = {}
        for round_ in range(rounds):
            order = list(range(len(trees)))
            if round_ % 2:
                order.reverse()
            for workload in workloads.select(",".join(names)):
                for index in order:
                    result = run_workload(nodes[index], workload, duration)
                    # per message consumed; a workload without consumers (W7): published
                    side = "consumed" if result.get("consumed") else "published"
                    us = 1e6 * result["broker_cpu_s"] / max(result.get(side, 0), 1)
                    figures.setdefault((workload.name, index), []).append(us)
                    print(
                        f"round {round_} {workload.name} {trees[index]}: "
                        f"{result.get(f'{side}_per_s', 0):,.0f} msg/s {side}, "
                        f"{us:.2f} us CPU per message",
                        flush=True,
                    )
        summary(trees, names, figures)
    finally:
        for broker in nodes:
            broker.stop()


def summary(
    trees: list[str], names: list[str], figures: dict[tuple[str, int], list[float]]
) -> None:
    for name in names:
        runs = [figures[name, index] for index in range(len(trees))]
        for tree, us in zip(trees, runs, strict=True):
            each = ", ".join(f"{x:.2f}" for x in us)
            print(f"{name} {tree}: median {statistics.median(us):.2f} us per message ({each})")
        ratios = [later / first for first, later in zip(runs[0], runs[-1], strict=True)]
        print(
            f"{name} {trees[-1]} / {trees[0]}: median of per-round ratios "
            f"{statistics.median(ratios):.2f}, ratio of medians "
            f"{statistics.median(runs[-1]) / statistics.median(runs[0]):.2f}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compiled", description=__doc__)
    parser.add_argument("trees", nargs=2, help="two source trees, e.g. a pure and a compiled one")
    parser.add_argument("--workloads", default="W1,W3")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds measured per run")
    args = parser.parse_args(argv)
    trees = [str(Path(tree).resolve()) for tree in args.trees]
    names = [workload.name for workload in workloads.select(args.workloads)]
    compare(trees, names, args.rounds, args.duration)


if __name__ == "__main__":
    main()
