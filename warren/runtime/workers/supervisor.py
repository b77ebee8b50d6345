"""The supervisor of a node with ``workers > 1``: it runs the workers and restarts a dead one.

Theory of operation:
1. The supervisor is the process the operator started (``warren-server --workers N``). It
   holds the node's data directory lock, and runs each worker as ``python -m warren`` with
   the same arguments and environment plus ``WARREN_WORKER_INDEX``
   (`warren.runtime.workers.layout`), so a worker reads the settings the operator gave.
2. A worker that exits while the node runs is started again, after a delay that doubles
   from `RESTART_DELAY_S` up to `RESTART_DELAY_MAX_S` while it keeps dying young (it ran
   for less than `STARTUP_S`); the others carry on. A worker whose first start fails
   (a port in use, a bad setting: it says why on stderr and exits with `START_FAILED`),
   however long it took on a busy machine, stops the node with status 1, as a node of
   one process stops; so does one that exits by itself (not by a signal) within
   `STARTUP_S` of the node's start. Either failure is the operator's to fix. A worker
   killed by a signal is restarted however young the node is.
3. It makes each worker's inbox, the Unix socket pair the workers hand connections over
   with (`warren.runtime.workers.layout`), and the board of figures they share
   (`warren.runtime.workers.board`), and holds them for the node's life, so a restarted
   worker inherits the same ones. It clears a worker's slot of the board once the worker
   exited: its connections and memory went with it.
4. SIGINT and SIGTERM stop the node: each worker gets SIGTERM and the supervisor waits for
   them all. Its exit status is 0 when every worker stopped cleanly. SIGUSR1 goes on to
   every running worker (each logs the messages that crossed workers).
5. A worker dies with its supervisor (`die_with_supervisor`: the kernel's parent-death
   signal, SIGKILL), so kill -9 of the node kills all of it, as it does a one-process
   node: no orphaned worker keeps its data directory locked or writes on after the crash.
6. It imports none of a node's own code (the broker, the management API, the cluster
   layer: `warren.server`), only what it runs (`supervise`): every module a process
   imports is CPU time before its workers even start (0.15-0.2 s for these, 0.75 s
   for a whole node's, on the shared 2-core machine), and a node of 2 workers runs three
   processes.
7. The workers' Unix sockets (`warren.runtime.workers.layout` point 8) go with the node:
   the supervisor removes them once its workers stopped, and at its start those a node
   of the same data directory killed with SIGKILL left, under the data directory's lock.
It never touches a worker's data: recovery is each worker's own start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from warren.runtime.config import Config
from warren.runtime.start import StartError, bind_listeners, lock_data_dir
from warren.runtime.tls import server_context
from warren.runtime.workers.board import BOARD_VARIABLE, Board
from warren.runtime.workers.layout import (
    INBOXES_VARIABLE,
    WORKER_INDEX_VARIABLE,
    WORKERS_DIR,
    inboxes_setting,
    load_or_create,
    make_inboxes,
    remove_sockets,
)

SUPERVISOR_VARIABLE = "WARREN_SUPERVISOR_PID"  # set by the supervisor for each worker
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies

log = logging.getLogger("warren.workers")

STARTUP_S = 5.0  # a worker that exits sooner than this after it started died young
START_FAILED = 78  # a worker's exit status when it cannot start (sysexits' EX_CONFIG)
RESTART_DELAY_S = 0.5
RESTART_DELAY_MAX_S = 30.0


async def supervise(config: Config, argv: Sequence[str]) -> int:
    """Run a node of `config.workers` processes (`warren.runtime.workers`): the data
    directory's lock and a check that the ports are free here, the workers' own starts in
    them."""
    lock = lock_data_dir(config.data_dir)
    workers_dir = config.data_dir / WORKERS_DIR
    remove_sockets(workers_dir)  # a killed node's: point 7
    try:
        try:
            load_or_create(config)
            tls = server_context(config)
        except ValueError as error:  # ConfigError too
            raise StartError(str(error)) from None
        for listener in bind_listeners(config, tls, worker=0):
            listener.sock.close()
        log.info(
            "node %s runs %d workers, data in %s", config.node_name, config.workers, config.data_dir
        )
        return await Supervisor(config.workers, argv, os.environ).run()
    finally:
        remove_sockets(workers_dir)
        os.close(lock)


class Supervisor:
    def __init__(self, workers: int, argv: Sequence[str], environ: Mapping[str, str]) -> None:
        self.workers = workers
        self.argv = list(argv)
        self.environ = dict(environ)
        self.stopping = asyncio.Event()
        self.failed_status = 0  # a worker's status when it failed the node's start
        self.receiving, self.sending = make_inboxes(workers)
        self.board = Board.create(workers)
        self.running: dict[int, asyncio.subprocess.Process] = {}  # by worker index

    async def run(self) -> int:
        """Run the workers until SIGINT/SIGTERM (or one fails the start); the exit status."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.stopping.set)
        loop.add_signal_handler(signal.SIGUSR1, self._forward, signal.SIGUSR1)
        try:
            statuses = await asyncio.gather(*(self._keep(index) for index in range(self.workers)))
        finally:
            for sock in (*self.receiving, *self.sending):
                sock.close()
            self.board.close()
        if self.failed_status:
            return self.failed_status
        return 0 if not any(statuses) else 1

    async def _keep(self, index: int) -> int:
        """Keep worker `index` running until the node stops; its last exit status."""
        loop = asyncio.get_running_loop()
        node_started = loop.time()
        delay_s = RESTART_DELAY_S
        inbox = self.receiving[index]
        environ = {
            **self.environ,
            WORKER_INDEX_VARIABLE: str(index),
            INBOXES_VARIABLE: inboxes_setting(inbox, self.sending),
            SUPERVISOR_VARIABLE: str(os.getpid()),
            BOARD_VARIABLE: str(self.board.fd),
        }
        inherited = [sock.fileno() for sock in (inbox, *self.sending)] + [self.board.fd]
        first = True
        while True:
            started = loop.time()
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "warren", *self.argv, env=environ, pass_fds=inherited
            )
            log.info("worker %d started (pid %d)", index, process.pid)
            self.running[index] = process
            status = await self._wait(process)
            del self.running[index]
            self.board.clear(index)
            if self.stopping.is_set():
                return status
            if first and status == START_FAILED:  # point 2: it said why
                self.failed_status = 1
                self.stopping.set()
                return status
            if 0 < status < 128 and loop.time() - node_started < STARTUP_S:
                log.critical("worker %d failed to start (status %d): stopping", index, status)
                self.failed_status = status
                self.stopping.set()
                return status
            first = False
            delay_s = delay_s * 2 if loop.time() - started < STARTUP_S else RESTART_DELAY_S
            delay_s = min(delay_s, RESTART_DELAY_MAX_S)
            log.warning(
                "worker %d (pid %d) exited with status %d: restarting", index, process.pid, status
            )
            try:
                await asyncio.wait_for(self.stopping.wait(), delay_s)
            except TimeoutError:
                continue
            return status

    def _forward(self, signum: int) -> None:
        for process in self.running.values():
            with contextlib.suppress(ProcessLookupError):  # exited, not yet waited for
                process.send_signal(signum)

    async def _wait(self, process: asyncio.subprocess.Process) -> int:
        """The process's exit status; SIGTERM to it first if the node stops meanwhile."""
        exited = asyncio.ensure_future(process.wait())
        stopping = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait((exited, stopping), return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():
            process.send_signal(signal.SIGTERM)
        else:
            stopping.cancel()
        status = await exited
        stopping.cancel()
        return status if status >= 0 else 128 - status  # killed by a signal: as a shell says


def die_with_supervisor(environ: Mapping[str, str]) -> None:
    """In a worker: be killed (SIGKILL) when the supervisor that started it dies, and die
    now if it already has (its parent is no longer the pid it was given). Linux's prctl;
    where there is none a worker outlives a supervisor killed with SIGKILL."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(environ[SUPERVISOR_VARIABLE]):
        os.kill(os.getpid(), signal.SIGKILL)
