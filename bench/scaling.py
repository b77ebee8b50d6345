"""Warren of 1 worker against 2, side by side with RabbitMQ (issue 19): `python -m bench.scaling`.

Owns one session: it starts Warren twice on free ports (``--workers 1`` and ``--workers
2``; with ``--builds``, the pure checkout and the compiled release build, both of
``--workers``), finds RabbitMQ, and runs each selected workload `--reps` times per broker,
alternating, each run one `python -m bench.loadgen` as `bench.run` makes it. It prints,
per workload, the median consumed msg/s (published where nothing consumes: W7) of each
broker with the broker's CPU per message (every process of it), the second Warren's ratios
of both to the first Warren's and to RabbitMQ's, the load average after the runs, and for
a node of several workers the crossings of messages between workers per published message
(a message crosses at most twice: to its queue and to its consumer): each worker logs its
count when sent SIGUSR1 (`warren.runtime.workers.worker`), before and
after every run, and the run second by second (the slowest and fastest second of the
measured window and the queues' greatest depth, from the load generator's `timeline`).
Records go to bench/results/<timestamp>-scaling.jsonl.

Each run also reports the load generator's CPU per message. With ``--loadgen-trees A,B``
every run happens once with the load generator of each source tree (a checkout, or a
`git archive` of an older commit), the trees taking turns to go first, and the table comes
once per tree: a change to the load generator, before and after, on the same brokers.

Last it checks issue 19's targets on the run's medians (`TARGETS`: the second Warren
against RabbitMQ, and W4 of the second Warren against the first), each met or not, and
the load generator's busiest run against each broker, which must stay well under a core
for RabbitMQ's figures to be RabbitMQ's: `python -m bench.scaling --only W1,W2,W4,W5,W7
--reps 5` gives the whole verdict from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import brokers, run, workloads
from bench.brokers import Broker

CROSSED = re.compile(r"worker (\d+): (\d+) messages crossed workers")
LOG_WAIT_S = 0.5
LOADGEN_BUSY_PCT = 70.0  # a load generator above this share of a core may be the limit


@dataclass(frozen=True)
class Target:
    """The second Warren's median `metric` over `over`'s ("rabbitmq", or "first": the first
    Warren's), at least `bound` (at most, for a latency)."""

    workload: str
    metric: str  # "rate" (`rate`) or a record's key
    over: str
    bound: float

    @property
    def at_most(self) -> bool:
        return self.metric.startswith("latency")


TARGETS = (
    Target("W1", "rate", "rabbitmq", 1.5),
    Target("W2", "rate", "rabbitmq", 1.5),
    Target("W4", "rate", "rabbitmq", 1.5),
    Target("W5", "latency_p99_ms", "rabbitmq", 1.0),
    Target("W7", "rate", "rabbitmq", 1.0),
    Target("W4", "rate", "first", 1.7),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    p.add_argument("--only", default="W1,W2,W3,W4", help="comma-separated workloads")
    p.add_argument("--duration", type=float, default=6.0, help="measured seconds per run")
    p.add_argument("--reps", type=int, default=3, help="repetitions per workload and broker")
    p.add_argument("--workers", type=int, default=2, help="the many-worker node's workers")
    p.add_argument("--no-rabbitmq", action="store_true", help="Warren only")
    p.add_argument(
        "--warren-python",
        default="",
        metavar="PYTHON",
        help="run the Warren installed for this interpreter (make bench: .venv-bench's, the "
        "compiled release build) instead of this checkout's",
    )
    p.add_argument(
        "--builds",
        action="store_true",
        help="compare builds, not workers: this checkout's pure Python against the compiled "
        "build --warren-python runs, both of --workers workers",
    )
    p.add_argument(
        "--loadgen-trees",
        default="",
        metavar="DIR,DIR",
        help="run the load generator of each of these source trees in turn (before and after "
        "a change to it), not this checkout's",
    )
    p.add_argument("--results-dir", type=Path, default=run.RESULTS_DIR)
    args = p.parse_args(argv)
    args.trees = [tree for tree in args.loadgen_trees.split(",") if tree] or [""]
    args.workloads = workloads.select(args.only)
    if args.builds and not args.warren_python:
        p.error("--builds needs --warren-python: the interpreter of the compiled build")
    args.quick, args.idle_wait = False, 0.0
    return args


def worker_pids(broker: Broker) -> list[int]:
    """The worker processes of a Warren this session started (their data lock names them)."""
    assert broker.workdir is not None
    locks = sorted((Path(broker.workdir.name) / "data" / "workers").glob("*/node.lock"))
    return [int(lock.read_text()) for lock in locks if lock.read_text().strip()]


def crossed(broker: Broker) -> int | None:
    """Messages that crossed workers so far (None for a broker of one process)."""
    if broker.workdir is None:
        return None
    pids = worker_pids(broker)
    if len(pids) < 2:
        return None
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
    time.sleep(LOG_WAIT_S)
    latest: dict[str, int] = {}
    for match in CROSSED.finditer((Path(broker.workdir.name) / "warren.log").read_text()):
        latest[match.group(1)] = int(match.group(2))
    return sum(latest.values())


def session(
    args: argparse.Namespace,
    targets: list[Broker],
    out: Path,
    count: Callable[[Broker], int | None] = crossed,
    show: Callable[[dict[str, Any]], str] | None = None,
    turns: bool = False,
    trees: Sequence[str] = ("",),
) -> list[dict[str, Any]]:
    """Every workload `args.reps` times on each target, the crossings `count`ed around each
    run, records appended to `out` and `show`n (`line`) as they come; with `turns` the
    targets take turns to go first. Each run once per load-generator source tree of `trees`
    ("": this checkout's), which always take turns."""
    records: list[dict[str, Any]] = []
    for workload in args.workloads:
        for rep in range(1, args.reps + 1):
            for broker in targets if rep % 2 or not turns else targets[::-1]:
                for tree in trees if rep % 2 else trees[::-1]:
                    run.wait_for_idle(0.0, [broker.pid])
                    before = count(broker)
                    record = run.run_one(workload, broker, rep, args, tree)
                    record["load_avg"] = os.getloadavg()[0]
                    after = count(broker)
                    if before is not None and after is not None:
                        record["crossed"] = after - before
                    records.append(record)
                    with out.open("a") as f:
                        f.write(json.dumps(record) + "\n")
                    print((show or line)(record), flush=True)
    return records


def line(record: dict[str, Any]) -> str:
    head = f"{record['workload']} {record['broker']} rep {record['rep']}:"
    if "loadgen" in record:
        head = f"{head[:-1]} (loadgen of {record['loadgen']}):"
    if "error" in record:
        return f"{head} error {record['error']}"
    parts = [f"{rate(record) or 0:,.0f} msg/s", f"load {record.get('load_avg', 0):.1f}"]
    us = cpu_us(record)
    if us is not None:
        parts.append(f"broker CPU {us:.1f} us/msg ({record.get('broker_cpu_pct', 0):.0f} %)")
    if record.get("loadgen_cpu_us_per_msg") is not None:
        parts.append(
            f"loadgen CPU {record['loadgen_cpu_us_per_msg']:.2f} us/msg "
            f"({record.get('loadgen_cpu_pct', 0):.0f} %)"
        )
    share = crossings(record)
    if share is not None:
        parts.append(f"crossings {share:.3f} per message")
    within = within_run(record)
    if within:
        parts.append(within)
    return f"{head} " + ", ".join(parts)


def within_run(record: dict[str, Any]) -> str:
    """The measured window second by second (the load generator's `timeline`): the slowest
    and fastest second and the deepest the queues were; "" without one."""
    timeline = record.get("timeline")
    if not timeline:
        return ""
    key = "consumed_per_s" if record.get("consumed") else "published_per_s"
    window = [i for i, s in enumerate(timeline["s"]) if s > 0]
    if not window:
        return ""
    rates = [timeline[key][i] for i in window]
    depth = max(timeline["depth"][i] for i in window)
    return f"per second {min(rates):,}-{max(rates):,}, depth up to {depth:,}"


def rate(record: dict[str, Any]) -> float | None:
    """Messages consumed per second; published where nothing consumes (W7)."""
    return record.get("consumed_per_s") or record.get("published_per_s")


def cpu_us(record: dict[str, Any]) -> float | None:
    """The broker's CPU per message consumed (published where nothing consumes)."""
    messages = record.get("consumed") or record.get("published")
    if "broker_cpu_s" not in record or not messages:
        return None
    return float(1e6 * record["broker_cpu_s"] / messages)


def crossings(record: dict[str, Any]) -> float | None:
    if "crossed" not in record or not record.get("published_total"):
        return None
    return float(record["crossed"] / record["published_total"])


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def table(records: list[dict[str, Any]], args: argparse.Namespace, names: list[str]) -> str:
    """Medians per broker, and the second Warren against the first and against RabbitMQ."""
    first, many = names[:2]
    rows = [
        "| | " + " | ".join(names) + f" | {many} / {first} | {many} / rabbitmq |",
        "|---" * (len(names) + 3) + "|",
    ]
    for workload in args.workloads:
        ok = [r for r in records if r["workload"] == workload.name and "error" not in r]
        rates = {n: _median([rate(r) for r in ok if r["broker"] == n]) for n in names}
        cpu = {n: _median([cpu_us(r) for r in ok if r["broker"] == n]) for n in names}
        load = [r["load_avg"] for r in ok if "load_avg" in r]
        share = _median([crossings(r) for r in ok if r["broker"] == many])

        def ratio(a: float | None, b: float | None) -> str:
            return f"{a / b:.2f}x" if a is not None and b else "-"

        cells = [
            f"{rates[n]:,.0f} ({cpu[n]:.1f} us)" if rates[n] and cpu[n] else "-" for n in names
        ]
        rows.append(
            f"| {workload.name} msg/s (broker CPU/msg) | "
            + " | ".join(cells)
            + f" | {ratio(rates.get(many), rates.get(first))}"
            + f" (CPU/msg {ratio(cpu.get(many), cpu.get(first))})"
            + f" | {ratio(rates.get(many), rates.get('rabbitmq'))}"
            + f" (CPU/msg {ratio(cpu.get(many), cpu.get('rabbitmq'))}) |"
        )
        loadgen = [
            _median([r.get("loadgen_cpu_us_per_msg") for r in ok if r["broker"] == n])
            for n in names
        ]
        if any(us is not None for us in loadgen):
            cells = [f"{us:.2f} us" if us is not None else "-" for us in loadgen]
            rows.append(f"| {workload.name} loadgen CPU/msg | " + " | ".join(cells) + " |")
        if "latency_p99_ms" in workload.metrics:
            p99 = {
                n: _median([r.get("latency_p99_ms") for r in ok if r["broker"] == n]) for n in names
            }
            cells = [f"{p99[n]:.3f} ms" if p99[n] is not None else "-" for n in names]
            rows.append(
                f"| {workload.name} latency p99 | "
                + " | ".join(cells)
                + f" | {ratio(p99.get(many), p99.get(first))}"
                + f" | {ratio(p99.get(many), p99.get('rabbitmq'))} |"
            )
        if load:
            rows.append(f"| {workload.name} load average | {min(load):.1f}-{max(load):.1f} |")
        if share is not None:
            rows.append(f"| {workload.name} crossings per message ({many}) | {share:.3f} |")
    return "\n".join(rows)


def verdict(records: list[dict[str, Any]], names: list[str]) -> str:
    """Each of `TARGETS` whose workload ran, on the medians of `records`, met or not; then
    the load generator's busiest run against each broker."""
    first, many = names[:2]
    lines = []
    for target in TARGETS:
        over = first if target.over == "first" else target.over
        mine, theirs = (
            _median(
                [
                    rate(r) if target.metric == "rate" else r.get(target.metric)
                    for r in records
                    if r["workload"] == target.workload
                    and r["broker"] == broker
                    and "error" not in r
                ]
            )
            for broker in (many, over)
        )
        if mine is None or not theirs:
            continue
        value = mine / theirs
        met = value <= target.bound if target.at_most else value >= target.bound
        what = "p99" if target.at_most else "msg/s"
        sign = "<=" if target.at_most else ">="
        lines.append(
            f"{target.workload} {what} {many} / {over}: {value:.2f}x "
            f"(target {sign} {target.bound}x): {'met' if met else 'NOT MET'}"
        )
    for broker in names:
        busy = [
            r["loadgen_cpu_pct"]
            for r in records
            if r["broker"] == broker and "loadgen_cpu_pct" in r
        ]
        if busy:
            flag = (
                ""
                if max(busy) < LOADGEN_BUSY_PCT
                else f": above {LOADGEN_BUSY_PCT:.0f} %, it may be the limit"
            )
            lines.append(
                f"load generator against {broker}: at most {max(busy):.0f} % of a core{flag}"
            )
    return "\n".join(lines)


def warren_nodes(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """The two Warren nodes compared (name, workers, interpreter; "" = this checkout's)."""
    if args.builds:
        return [
            ("warren-pure", args.workers, ""),
            ("warren-compiled", args.workers, args.warren_python),
        ]
    return [(f"warren-{n}", n, args.warren_python) for n in (1, args.workers)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    targets: list[Broker] = []
    try:
        for name, workers, python in warren_nodes(args):
            broker, why = brokers.start_warren(workers=workers, name=name, python=python)
            if broker is None:
                print(why, file=sys.stderr)
                return 1
            targets.append(broker)
            print(f"{name}: {broker.build}, {workers} worker(s)", flush=True)
        if args.builds and targets[-1].build == targets[0].build:
            print(f"{args.warren_python} runs {targets[-1].build} too", file=sys.stderr)
            return 1
        if not args.no_rabbitmq:
            broker, why = brokers.find_rabbitmq()
            if broker is None:
                print(f"RabbitMQ skipped: {why}", file=sys.stderr)
            else:
                targets.append(broker)
        args.results_dir.mkdir(parents=True, exist_ok=True)
        out = args.results_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-scaling.jsonl"
        records = session(args, targets, out, trees=args.trees)
    finally:
        for broker in targets:
            broker.stop()
    names = [broker.name for broker in targets]
    for tree in args.trees:
        if tree:
            print(f"load generator of {tree}:")
        mine = [r for r in records if r.get("loadgen", "") == tree]
        print(table(mine, args, names))
        print(verdict(mine, names))
    print(f"records: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
