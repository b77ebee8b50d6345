"""Clusters of several-worker nodes from two source trees, side by side (issue 19).

    python -m bench.cluster_workers BEFORE_TREE AFTER_TREE [--only W3] [--reps 3]

Made for quorum replicas spreading over a node's workers, but any two trees compare.
Owns one comparison:
1. One Warren cluster per tree (`--cluster` nodes of `--workers` processes each, no fault
   proxies, Warren's default Raft tick: `brokers.start_warren_cluster`), both running for
   the whole comparison; the load generator drives each cluster's first node.
2. Each workload runs `--reps` times per tree (`bench.scaling.session`), the trees
   alternating and taking turns to go first, so that drift in the machine's load hits
   both alike.
3. The figures: consumed msg/s, the CPU of every node's processes per consumed message,
   and the messages that crossed workers per published message, every node's workers'
   counts (`warren.runtime.workers.worker`, logged when a supervisor gets SIGUSR1) read
   from the nodes' logs before and after each run, as `bench.scaling` does for one node.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import brokers, run, scaling, workloads
from bench.brokers import Broker
from bench.scaling import CROSSED, LOG_WAIT_S, crossings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.cluster_workers", description=__doc__)
    p.add_argument("trees", nargs=2, type=Path, help="the source trees, before and after")
    p.add_argument("--only", default="W3", help="comma-separated workloads")
    p.add_argument("--cluster", type=int, default=3, help="nodes per cluster")
    p.add_argument("--workers", type=int, default=2, help="worker processes per node")
    p.add_argument("--duration", type=float, default=6.0, help="measured seconds per run")
    p.add_argument("--reps", type=int, default=3, help="repetitions per workload and tree")
    p.add_argument("--results-dir", type=Path, default=run.RESULTS_DIR)
    args = p.parse_args(argv)
    if args.workers < 2:
        p.error("--workers must be at least 2: the figures are about crossing workers")
    args.workloads = workloads.select(args.only)
    args.quick, args.idle_wait = False, 0.0
    return args


def crossed(broker: Broker) -> int:
    """Messages that crossed workers so far, on every node of the cluster."""
    assert broker.workdir is not None
    for pid in (broker.pid, *broker.peer_pids):
        os.kill(pid, signal.SIGUSR1)  # each supervisor passes it on to its workers
    time.sleep(LOG_WAIT_S)
    latest: dict[tuple[Path, str], int] = {}
    for log in Path(broker.workdir.name).glob("*.log"):
        for match in CROSSED.finditer(log.read_text(errors="replace")):
            latest[log, match.group(1)] = int(match.group(2))
    return sum(latest.values())


def cluster_cpu_us(record: dict[str, Any]) -> float | None:
    """Every node's CPU per consumed message (`bench.loadgen`'s per-node figures)."""
    per_node = record.get("node_cpu_us_per_msg")
    return float(sum(per_node)) if per_node else None


def line(record: dict[str, Any]) -> str:
    head = f"{record['workload']} {record['broker']} rep {record['rep']}:"
    if "error" in record:
        return f"{head} error {record['error']}"
    us, share = cluster_cpu_us(record), crossings(record)
    return (
        f"{head} consumed {record.get('consumed_per_s', 0):,.0f} msg/s, cluster CPU "
        + (f"{us:.1f} us/msg" if us is not None else "-")
        + (f", crossings {share:.3f} per message" if share is not None else "")
    )


def table(records: list[dict[str, Any]], args: argparse.Namespace, names: list[str]) -> str:
    rows = [
        "| | " + " | ".join(names) + f" | {names[1]} / {names[0]} |",
        "|---" * (len(names) + 2) + "|",
    ]
    for workload in args.workloads:
        ok = [r for r in records if r["workload"] == workload.name and "error" not in r]
        for label, figure, shown in (
            ("consumed msg/s", lambda r: r.get("consumed_per_s"), "{:,.0f}"),
            ("cluster CPU us/msg", cluster_cpu_us, "{:.1f}"),
            ("crossings per message", crossings, "{:.3f}"),
        ):
            values = [[figure(r) for r in ok if r["broker"] == n] for n in names]
            runs = [", ".join(shown.format(v) for v in each if v is not None) for each in values]
            medians = [statistics.median(v) if v and None not in v else None for v in values]
            ratio = f"{medians[1] / medians[0]:.2f}x" if medians[0] and medians[1] else "-"
            rows.append(f"| {workload.name} {label} (runs) | " + " | ".join(runs) + f" | {ratio} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    targets: list[Broker] = []
    names = ["before", "after"]
    try:
        for name, tree in zip(names, args.trees, strict=True):
            broker, why = brokers.start_warren_cluster(
                args.cluster, args.workers, tree.resolve(), name
            )
            if broker is None:
                print(why, file=sys.stderr)
                return 1
            targets.append(broker)
        args.results_dir.mkdir(parents=True, exist_ok=True)
        out = args.results_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-cluster-workers.jsonl"
        records = scaling.session(args, targets, out, crossed, line, turns=True)
    finally:
        for broker in targets:
            broker.stop()
    print(table(records, args, names))
    print(f"records: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
