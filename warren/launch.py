"""`warren-server` and `python -m warren`: which process this is, then its run.

Theory of operation:
1. A process is a node's one process (``workers = 1``), a worker of a node
   (``WARREN_WORKER_INDEX`` set by its supervisor) or the supervisor of a node of several
   workers. The first two serve (`warren.server.serve`); the supervisor only runs the
   workers (`warren.runtime.workers.supervisor`). Unless ``workers`` is given, a node runs
   as many as its data directory was made with, one per core for a new one
   (`warren.runtime.workers.layout.settle_workers`).
2. The node's code (the broker, the management API and its web framework, the cluster
   layer) is imported only by a process that serves it: the supervisor's start is then
   that much shorter, and its workers start that much sooner (`supervisor`, point 6).
3. The cyclic garbage collector runs less often than CPython's default (`GC_THRESHOLDS`).
   A queue's messages are many small objects (entries, slots, journal records) that live
   until they are consumed; with the default thresholds (700, 10, 10) each full collection
   walked all of them, finding nothing, whenever the heap had grown by a quarter: 8-13 us of
   the node's 34-51 us of CPU per message while 200,000 persistent messages were published
   into one queue with confirms, 2-3 us with these thresholds (docs/pipeline.md,
   "Throughput", round 8). Reference counting still frees everything that is not a cycle.
4. A start that fails on the operator's side is one line on stderr and exit status 1
   (`warren.runtime.start.StartError`); a worker's is status `START_FAILED`, by which its
   supervisor knows to stop the node rather than start it again (`supervisor`, point 2).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from warren.runtime import config as config_module
from warren.runtime.start import StartError
from warren.runtime.workers import layout as workers_layout
from warren.runtime.workers.supervisor import START_FAILED, die_with_supervisor, supervise

GC_THRESHOLDS = (10_000, 10, 100)  # rule 3; CPython's are (700, 10, 10)


def main(argv: Sequence[str] | None = None) -> None:
    """Run a node, a worker or a supervisor; exit status 1 with one line on stderr if it
    cannot start (rule 4)."""
    gc.set_threshold(*GC_THRESHOLDS)
    worker = workers_layout.worker_index(os.environ)
    if worker is not None:
        die_with_supervisor(os.environ)
    try:
        config = config_module.load(argv)
        if worker is not None:
            config = workers_layout.worker_config(config, worker)
        else:  # rule 1: how many processes this node runs
            config = workers_layout.settle_workers(config)
    except config_module.ConfigError as error:
        _cannot_start(error, worker)
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        run = asyncio.run
    else:
        run = uvloop.run
    try:
        if config.workers > 1 and worker is None:
            status = run(supervise(config, sys.argv[1:] if argv is None else argv))
        else:
            from warren.server import serve  # rule 2: only a process that serves loads it

            status = run(serve(config, worker))
    except StartError as error:
        _cannot_start(error, worker)
    if status:
        sys.exit(status)


def _cannot_start(error: Exception, worker: int | None) -> NoReturn:
    """Rule 4: one line on stderr, then the exit status of a node, or of a worker."""
    print(f"warren-server: {error}", file=sys.stderr)
    sys.exit(1 if worker is None else START_FAILED)
