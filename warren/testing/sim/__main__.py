"""Command line: ``python -m warren.testing.sim [--stack raft|quorum] --seeds N | --seed S
[--trace] [--plant BUG] [--workers W]``.

``--stack raft`` (the default) runs bare Raft nodes (`warren.testing.sim.world`);
``--stack quorum`` runs the whole quorum stack (`warren.testing.sim.stack`), optionally
with a planted bug (`warren.testing.sim.plants`), in `--workers` processes.

Standard output depends only on the seeds and options (it is the same under any
PYTHONHASHSEED); wall-clock figures go to standard error. The exit status is 1 if any seed
failed, and for each failure the output names the command that replays it with a trace.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator, Sequence

from warren.testing.sim.plants import PLANTS
from warren.testing.sim.stack import StackOptions, StackResult, run_stack_seed
from warren.testing.sim.world import SimOptions, run_seed

DEFAULTS = SimOptions()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m warren.testing.sim", description=__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seeds", type=int, help="run seeds first-seed .. first-seed + N - 1")
    which.add_argument("--seed", type=int, help="run one seed")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--trace", action="store_true", help="print every event of the run")
    parser.add_argument("--safety-ms", type=int, default=DEFAULTS.safety_ms)
    parser.add_argument("--nodes", type=int, default=DEFAULTS.node_count)
    parser.add_argument("--no-faults", action="store_true", help="a fault-free run")
    parser.add_argument("--quiet", action="store_true", help="only failures and the summary")
    parser.add_argument("--stack", choices=("raft", "quorum"), default="raft")
    parser.add_argument("--plant", choices=sorted(PLANTS), help="quorum stack: plant a bug")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="quorum stack: processes (default: one per core)",
    )
    return parser


def _replay_command(seed: int, arguments: argparse.Namespace) -> str:
    extra = ""
    if arguments.safety_ms != DEFAULTS.safety_ms:
        extra += f" --safety-ms {arguments.safety_ms}"
    if arguments.nodes != DEFAULTS.node_count:
        extra += f" --nodes {arguments.nodes}"
    if arguments.no_faults:
        extra += " --no-faults"
    return f"python -m warren.testing.sim --seed {seed}{extra} --trace"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    if arguments.seed is not None:
        seeds = range(arguments.seed, arguments.seed + 1)
    else:
        seeds = range(arguments.first_seed, arguments.first_seed + arguments.seeds)
    if arguments.stack == "quorum":
        return _quorum(seeds, arguments)
    options = SimOptions(
        node_count=arguments.nodes,
        safety_ms=arguments.safety_ms,
        faults=not arguments.no_faults,
        trace=arguments.trace,
    )
    started = time.perf_counter()
    steps = 0
    simulated_ms = 0
    failures = 0
    for seed in seeds:
        result = run_seed(seed, options)
        steps += result.steps
        simulated_ms += result.simulated_ms
        for line in result.trace:
            print(line)
        if result.ok:
            if not arguments.quiet:
                print(f"seed {seed}: ok steps={result.steps} simulated_ms={result.simulated_ms}")
            continue
        failures += 1
        print(f"seed {seed}: FAILED after {result.steps} steps at {result.simulated_ms} ms")
        print(f"  violation: {result.violation}")
        print(f"  replay: {_replay_command(seed, arguments)}")
    print(f"seeds={len(seeds)} steps={steps} simulated_ms={simulated_ms} violations={failures}")
    elapsed_s = time.perf_counter() - started
    print(
        f"elapsed_s={elapsed_s:.1f} steps_per_s={steps / max(elapsed_s, 1e-9):.0f}",
        file=sys.stderr,
    )
    return 1 if failures else 0


def _quorum(seeds: range, arguments: argparse.Namespace) -> int:
    """The whole quorum stack: seeds in `--workers` processes, printed in seed order as
    they finish."""
    options = StackOptions(
        faults=not arguments.no_faults, trace=arguments.trace, plant=arguments.plant
    )
    extra = (" --no-faults" if arguments.no_faults else "") + (
        f" --plant {arguments.plant}" if arguments.plant else ""
    )
    started = time.perf_counter()
    run = functools.partial(run_stack_seed, options=options)
    with contextlib.ExitStack() as stack:
        if arguments.workers > 1:
            pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(arguments.workers))
            results: Iterator[StackResult] = pool.imap(run, seeds)
        else:
            results = map(run, seeds)
        failures: list[int] = []
        confirmed = 0
        for result in results:
            confirmed += result.confirmed
            for line in result.trace:
                print(line)
            if result.ok:
                if not arguments.quiet:
                    print(f"seed {result.seed}: ok confirmed={result.confirmed}", flush=True)
                continue
            failures.append(result.seed)
            replay = f"python -m warren.testing.sim --stack quorum --seed {result.seed}{extra}"
            print(f"seed {result.seed}: FAILED at {result.simulated_ms} ms")
            print(f"  violation: {result.violation}")
            print(f"  replay: {replay} --trace", flush=True)
    print(f"seeds={len(seeds)} confirmed={confirmed} violations={len(failures)}")
    if failures:
        print(f"first failing seed: {failures[0]}")
    elapsed_s = time.perf_counter() - started
    print(f"elapsed_s={elapsed_s:.1f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
