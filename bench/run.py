"""The benchmark runner (`python -m bench.run`): W1..W7 against Warren and RabbitMQ.

Owns one benchmark session: it starts Warren (or uses `--warren-url`), finds RabbitMQ,
runs every selected workload `--reps` times per broker, alternating brokers, each run as a
`python -m bench.loadgen` subprocess; it appends every JSON record to
bench/results/<timestamp>.jsonl, then prints the medians table with the Warren/RabbitMQ
ratio and the CPU table, and draws bench/results/<timestamp>.png.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench import brokers, report, stats, workloads
from bench.brokers import Broker
from bench.workloads import METRICS, Workload

RESULTS_DIR = Path(__file__).resolve().parent / "results"
QUICK_DURATION_S = 3.0
SETTLE_S = 1.0
IDLE_CORES = 0.25  # other processes' CPU (in cores) below which the machine counts as idle
err = Console(stderr=True, soft_wrap=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    p.add_argument("--only", help="comma-separated workloads, e.g. W1,W5")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    p.add_argument("--reps", type=int, default=3, help="repetitions per workload and broker")
    p.add_argument("--quick", action="store_true", help="3 s runs, 1 rep, W6 with 100,000")
    p.add_argument("--brokers", default="warren,rabbitmq", help="which of warren,rabbitmq")
    p.add_argument("--warren-url", help="use this running Warren instead of starting one")
    p.add_argument(
        "--warren-python",
        default="",
        metavar="PYTHON",
        help="start the Warren installed for this interpreter (make bench: .venv-bench's, the "
        "compiled release build) instead of this checkout's",
    )
    p.add_argument("--warren-pid", type=int, default=0, help="its PID, for CPU/RSS accounting")
    p.add_argument("--rabbitmq-pid", type=int, default=0, help="default: pgrep beam.smp")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    p.add_argument(
        "--cluster",
        type=int,
        default=1,
        metavar="N",
        help="start N-node clusters of both brokers (RabbitMQ from Debian's package) and "
        "drive the first node of each",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="worker processes of each Warren node this run starts (issue 19). Default 1, "
        "passed as --workers 1 (a node told no number runs one per core): W5 and W7 drive "
        "one queue, which one worker serves however many the node runs, so they are "
        "measured at one; python -m bench.scaling compares 1 worker with several",
    )
    p.add_argument(
        "--idle-wait",
        type=float,
        default=30.0,
        help="before each run wait up to this many seconds for other processes to go quiet",
    )
    args = p.parse_args(argv)
    if args.cluster > 1 and args.warren_python:
        p.error(
            "--cluster starts Warren's nodes from this checkout, not --warren-python's install "
            "(make bench PURE=1 BENCH_ARGS='--cluster 3')"
        )
    if args.quick:
        args.duration, args.reps = min(args.duration, QUICK_DURATION_S), 1
    try:
        args.workloads = workloads.select(args.only)
    except ValueError as exc:
        p.error(str(exc))
    return args


# ---------------------------------------------------------------------------- brokers


def prepare_brokers(args: argparse.Namespace) -> list[Broker]:
    wanted = {b.strip().lower() for b in args.brokers.split(",")}
    found: list[Broker] = []
    if args.cluster > 1:
        for name in (b for b in report.BROKERS if b in wanted):
            err.print(f"[bold]{report.LABELS[name]}:[/] starting {args.cluster} nodes")
            broker, why = (
                brokers.start_warren_cluster(args.cluster, args.workers)
                if name == "warren"
                else brokers.start_rabbitmq_cluster(args.cluster)
            )
            _add(found, broker, f"[yellow]{report.LABELS[name]} skipped:[/] {why}")
        return found
    if "warren" in wanted:
        python = args.warren_python or "this checkout"
        err.print(f"[bold]Warren:[/] {args.warren_url or f'starting python -m warren ({python})'}")
        if args.warren_url:
            broker, why = brokers.given_warren(args.warren_url, args.warren_pid)
        else:
            broker, why = brokers.start_warren(workers=args.workers, python=args.warren_python)
        _add(found, broker, f"[yellow]Warren skipped:[/] {why}")
    if "rabbitmq" in wanted:
        broker, why = brokers.find_rabbitmq(args.rabbitmq_pid)
        _add(found, broker, f"[yellow]RabbitMQ skipped:[/] {why}")
    return found


def _add(found: list[Broker], broker: Broker | None, why: str) -> None:
    if broker is None:
        err.print(why, markup=True, highlight=False)
        return
    api = f", management API {broker.memory_api}" if broker.memory_api else ""
    peers = f", other nodes {list(broker.peer_pids)}" if broker.peer_pids else ""
    build = f", {broker.build}" if broker.build else ""
    err.print(f"  {broker.name} at {broker.url} (pid {broker.pid or 'unknown'}{build}{api}{peers})")
    found.append(broker)


# ---------------------------------------------------------------------------- runs


def loadgen_command(workload: Workload, broker: Broker, args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "bench.loadgen", "--url", broker.url]
    command += workload.loadgen_args(args.duration, args.quick)
    if broker.memory_api:
        command += ["--memory-api", broker.memory_api]
    for pid in broker.peer_pids:
        command += ["--peer-pid", str(pid)]
    return command + (["--broker-pid", str(broker.pid)] if broker.pid else [])


def run_one(
    workload: Workload, broker: Broker, rep: int, args: argparse.Namespace, tree: str = ""
) -> dict[str, Any]:
    """One loadgen subprocess; its JSON record tagged with workload, broker and rep. With a
    source `tree`, the load generator is that tree's (`-m` looks in the working directory
    first), tagged as `loadgen`."""
    tag: dict[str, Any] = {"workload": workload.name, "broker": broker.name, "rep": rep}
    if broker.build:
        tag["build"] = broker.build
    if tree:
        tag["loadgen"] = tree
    timeout = 1800.0 if workload.counted else args.duration + 120.0
    command = loadgen_command(workload, broker, args)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=tree or None
        )
    except subprocess.TimeoutExpired:
        return dict(tag, error=f"loadgen did not finish within {timeout:.0f} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return dict(tag, error=f"loadgen exited {done.returncode}: {done.stderr[-800:]}")
    return dict(json.loads(lines[-1]), **tag)


def summary_line(record: dict[str, Any], workload: Workload) -> str:
    head = f"{record['workload']} {record['broker']} rep {record['rep']}:"
    if "error" in record:
        return f"{head} [red]error[/] {record['error']}"
    parts = []
    for key in workload.metrics:
        metric, value = METRICS[key], record.get(key)
        parts.append(f"{metric.label} {report.fmt(value, metric)} {metric.unit}")
    shares = ("loadgen", "broker", "other")
    cpu = " / ".join(f"{who} {record.get(f'{who}_cpu_pct', 0):.0f} %" for who in shares)
    if "node_cpu_us_per_msg" in record:
        per_node = " / ".join(f"{us:.0f}" for us in record["node_cpu_us_per_msg"])
        cpu += f"; per node {per_node} us/msg"
    return f"{head} " + ", ".join(parts) + f" (CPU: {cpu})"


def session(args: argparse.Namespace, targets: list[Broker], out: Path) -> list[dict]:
    """Every workload, rep and broker (brokers alternate); records appended to `out`."""
    records: list[dict[str, Any]] = []
    skipped: set[tuple[str | None, str]] = set()
    plan = [(w, rep, b) for w in args.workloads for rep in range(1, args.reps + 1) for b in targets]
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=err) as progress:
        task = progress.add_task("benchmark", total=len(plan))
        for workload, rep, broker in plan:
            label = f"{workload.name} {broker.name} rep {rep}"
            if not _skip(workload, broker, skipped, progress.console):
                progress.update(task, description=f"{label}: waiting for an idle machine")
                waited = wait_for_idle(args.idle_wait, [broker.pid, *broker.peer_pids])
                progress.update(task, description=label)
                record = dict(run_one(workload, broker, rep, args), idle_wait_s=waited)
                records.append(record)
                with out.open("a") as f:
                    f.write(json.dumps(record) + "\n")
                progress.console.print(summary_line(record, workload), highlight=False)
                if str(record.get("error", "")).startswith("queue.declare failed"):
                    skipped.add((workload.name, broker.name))
            progress.advance(task)
    return records


def _skip(
    workload: Workload, broker: Broker, skipped: set[tuple[str | None, str]], console: Console
) -> bool:
    """True when this run cannot happen: the broker exited or the declare failed before."""
    exited = broker.exited()
    if exited and (None, broker.name) not in skipped:
        skipped.add((None, broker.name))
        console.print(f"[red]{exited}[/]\n[yellow]skipping the rest of {broker.name}[/]")
    if (None, broker.name) in skipped:
        return True
    if (workload.name, broker.name) in skipped:
        console.print(f"  [yellow]{workload.name} skipped for {broker.name} (declare failed)[/]")
        return True
    return False


def wait_for_idle(max_wait: float, broker_pids: list[int]) -> float:
    """Wait (up to `max_wait` s) until other processes use < IDLE_CORES; seconds waited."""
    started = time.monotonic()
    time.sleep(SETTLE_S)  # let the broker finish the previous run's cleanup
    while time.monotonic() - started < max_wait:
        if stats.foreign_cpu_share(broker_pids) < IDLE_CORES:
            break
    return round(time.monotonic() - started, 1)


def notes(records: list[dict[str, Any]]) -> list[str]:
    seen, out = set(), []
    for r in records:
        key = (r["workload"], r["broker"])
        if "error" in r and key not in seen:
            seen.add(key)
            out.append(f"{r['workload']} on {report.LABELS[r['broker']]}: {r['error']}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # a SIGTERM unwinds like an exception, so the brokers this run started are stopped
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    targets = prepare_brokers(args)
    if not targets:
        err.print("[red]no broker to benchmark[/]")
        return 1
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jsonl, png = args.results_dir / f"{stamp}.jsonl", args.results_dir / f"{stamp}.png"
    try:
        records = session(args, targets, jsonl)
    finally:
        for broker in targets:
            broker.stop()
    console = Console(width=None if sys.stdout.isatty() else 120)
    console.print(report.comparison_table(records, args.workloads))
    console.print(report.cpu_table(records, args.workloads))
    if args.cluster > 1:
        console.print(report.node_cpu_table(records, args.workloads))
    for broker in targets:
        if broker.build:
            console.print(f"{report.LABELS[broker.name]} measured: {broker.build}", highlight=False)
    for note in notes(records):
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    report.chart(records, args.workloads, png)
    console.print(f"records: {jsonl}\nchart:   {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
