"""A cluster of real Warren processes on this machine, with faults on demand.

Theory of operation:
1. `LocalCluster(directory, names)` starts one ``python -m warren`` process per node on
   free local ports (AMQP, management, cluster), each with its own data directory and log
   file, all with the same cookie and a short Raft tick so that elections take about a
   second.
2. Links between the nodes started together go through `FaultProxy` instances, one per
   node and peer (either node of a pair may dial the other): each node is told the
   address of its proxy to a peer in place of the peer's listener. `isolate(name)` cuts
   every proxy that touches the node (open connections are dropped, new ones refused)
   and `heal()` lets traffic through again: a network partition without root.
   `faults=False` leaves the proxies out (the nodes dial each other's listeners), for
   benchmarks that should not pay for a forwarding hop in the harness's process.
3. `add_node(name, seeds)` starts one more node that joins the running cluster knowing
   only `seeds`, at their own listeners: the others learn its address when it joins, so
   no proxy is between it and them (`isolate` does not cut it off). Every node keeps the
   `cluster_nodes` it was first given across restarts. `kill(name)` is SIGKILL;
   `start(name)` starts the node again on the same data directory. Waits are bounded and
   fail with the node's log file named.
4. `workers` runs every node as that many worker processes (`warren.runtime.workers`),
   or each node as many as it maps the node's name to (nodes of a cluster may run
   different numbers); every node is given its count, 1 unless told (a node's own
   default is one per core). Worker ``i`` of a node listens for the cluster on the node's
   cluster port ``+ i``, so each node's cluster ports, and each proxy's, are
   consecutive, one proxy per worker of the peer (``i`` forwards to the peer's port
   ``+ i``); a node is up once every worker has logged its start. `kill` is SIGKILL of
   the node's supervisor, which takes its workers with it; `kill_worker` is SIGKILL of
   one worker, which the supervisor starts again, and `restart_worker` waits until it
   has.
5. `tree` runs another source tree's Warren (an earlier commit's, to write data of its
   layout or to measure against it): that directory is the processes' working directory
   and ``PYTHONPATH`` (``python -m`` puts the working directory first on ``sys.path``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warren.runtime.ports import unused_port, unused_ports
from warren.runtime.workers.layout import WORKER_INDEX_VARIABLE

START_TIMEOUT_S = 30.0  # per worker: each is a whole node's start
COOKIE = "warren-test-cookie"
STARTED_LINE = " started, data in "  # warren.server's line once a node (or worker) serves


class FaultProxy:
    """A TCP forwarder on its own event-loop thread that can cut its connections."""

    def __init__(self, target_port: int, port: int) -> None:
        self.port = port
        self.target_port = target_port
        self.cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            writer.close()
            return
        try:
            target_reader, target_writer = await asyncio.open_connection(
                "127.0.0.1", self.target_port
            )
        except OSError:
            writer.close()
            return
        self._writers.update((writer, target_writer))
        await asyncio.gather(self._pipe(reader, target_writer), self._pipe(target_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while not self.cut:
                data = await reader.read(65536)
                if not data or self.cut:
                    break
                writer.write(data)
                await writer.drain()
        self._writers.discard(writer)
        writer.close()

    def set_cut(self, cut: bool) -> None:
        def change() -> None:
            self.cut = cut
            if cut:
                for writer in list(self._writers):
                    writer.transport.abort()
                self._writers.clear()

        self._loop.call_soon_threadsafe(change)

    def close(self) -> None:
        async def shut() -> None:
            self.cut = True
            for writer in list(self._writers):
                writer.transport.abort()
            self._server.close()
            await self._server.wait_closed()
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(shut(), self._loop)
        self._thread.join(5)
        self._loop.close()


@dataclass
class ClusterNodeProcess:
    name: str
    data_dir: Path
    cluster_port: int  # and the `workers - 1` after it
    port: int = field(default_factory=unused_port)
    management_port: int = field(default_factory=unused_port)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    # the start lines its log holds once it serves: one per worker, one more per restart
    started_lines: int = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.name}.{self.starts}.log"


class LocalCluster:
    def __init__(
        self,
        directory: Path,
        names: list[str],
        *,
        raft_tick_ms: int = 50,
        extra: list[str] | None = None,
        faults: bool = True,
        workers: int | Mapping[str, int] = 1,
        tree: Path | None = None,
    ) -> None:
        self.directory = directory
        self.tree = tree
        self.raft_tick_ms = raft_tick_ms
        self.extra = extra or []
        self.workers = workers if isinstance(workers, int) else max(workers.values())
        self.counts = {
            name: workers if isinstance(workers, int) else workers[name] for name in names
        }
        self.nodes = {name: self._node(name) for name in names}
        self.seeds = {name: [other for other in names if other != name] for name in names}
        # (dialer, peer, worker): the proxy that forwards the dialer's connections to the
        # peer's worker (module doc, 2 and 4)
        self.proxies: dict[tuple[str, str, int], FaultProxy] = {}
        for a in names if faults else ():
            for b in names:
                if a != b:
                    first = unused_ports(self.counts[b])
                    for index in range(self.counts[b]):
                        target = self.nodes[b].cluster_port + index
                        self.proxies[a, b, index] = FaultProxy(target, first + index)

    def _node(self, name: str) -> ClusterNodeProcess:
        return ClusterNodeProcess(name, self.directory / name, unused_ports(self.counts[name]))

    def _peers(self, name: str) -> str:
        entries = [f"{name}=127.0.0.1:{self.nodes[name].cluster_port}"]
        for other in self.seeds[name]:
            proxy = self.proxies.get((name, other, 0))
            port = proxy.port if proxy is not None else self.nodes[other].cluster_port
            entries.append(f"{other}=127.0.0.1:{port}")
        return ",".join(entries)

    def add_node(self, name: str, seeds: list[str], workers: int | None = None) -> None:
        """Start a node that joins the running cluster knowing only `seeds`; the others
        learn of it when it joins. It runs `workers` (by default, the most any node runs)."""
        self.counts[name] = workers or self.workers
        self.nodes[name] = self._node(name)
        self.seeds[name] = list(seeds)
        self.start(name)

    def start_all(self) -> None:
        for name in self.nodes:
            self.launch(name)
        for name in self.nodes:
            self.wait_listening(name)

    def launch(self, name: str) -> None:
        node = self.nodes[name]
        node.data_dir.mkdir(parents=True, exist_ok=True)
        node.starts += 1
        node.started_lines = self.counts[name]
        command = [sys.executable, "-m", "warren", "--node-name", name]
        command += ["--port", str(node.port), "--management-port", str(node.management_port)]
        command += ["--data-dir", str(node.data_dir), "--bind", "127.0.0.1"]
        command += ["--cluster-port", str(node.cluster_port), "--cluster-cookie", COOKIE]
        command += ["--cluster-nodes", self._peers(name)]
        command += ["--raft-tick-ms", str(self.raft_tick_ms), *self.extra]
        command += ["--workers", str(self.counts[name])]  # module doc, 4
        env = None if self.tree is None else {**os.environ, "PYTHONPATH": str(self.tree)}
        with node.log_path.open("wb") as log:
            node.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.tree
            )

    def wait_listening(self, name: str) -> None:
        node = self.nodes[name]
        deadline = time.monotonic() + START_TIMEOUT_S * self.counts[name]
        while time.monotonic() < deadline:
            assert node.process is not None
            if node.process.poll() is not None:
                tail = node.log_path.read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(
                    f"{name} exited with {node.process.returncode}: {node.log_path}: "
                    + " | ".join(tail)
                )
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", node.port)):
                if self._started(node):
                    return
            time.sleep(0.05)
        raise RuntimeError(
            f"{name} did not listen within {START_TIMEOUT_S * self.counts[name]} s: {node.log_path}"
        )

    def _started(self, node: ClusterNodeProcess) -> bool:
        """Every worker serves (the AMQP port opens with the first of them), a restarted
        one too."""
        workers = self.counts[node.name]
        log = node.log_path.read_text(errors="replace")
        return workers == 1 or log.count(STARTED_LINE) >= node.started_lines

    def start(self, name: str) -> None:
        self.launch(name)
        self.wait_listening(name)

    def kill(self, name: str) -> None:
        node = self.nodes[name]
        if node.running:
            assert node.process is not None
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(timeout=10)

    def kill_worker(self, name: str, index: int) -> int:
        """SIGKILL worker `index` of node `name` alone (its supervisor starts it again);
        the killed process's id. Found among the supervisor's children by the worker
        index in its environment."""
        process = self.nodes[name].process
        assert process is not None and self.counts[name] > 1
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text()
        marker = f"{WORKER_INDEX_VARIABLE}={index}".encode()
        for pid in map(int, children.split()):
            if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                os.kill(pid, signal.SIGKILL)
                return pid
        raise RuntimeError(f"{name} has no worker {index} running")

    def restart_worker(self, name: str, index: int) -> None:
        """`kill_worker`, then wait (as `wait_listening`) until the worker its supervisor
        starts in its place serves: a worker's start is a whole node's (on a loaded
        machine, longer than the bound on what the cluster does once it is back)."""
        self.nodes[name].started_lines += 1
        self.kill_worker(name, index)
        self.wait_listening(name)

    def isolate(self, name: str) -> None:
        for (dialer, peer, _worker), proxy in self.proxies.items():
            if name in (dialer, peer):
                proxy.set_cut(True)

    def heal(self) -> None:
        for proxy in self.proxies.values():
            proxy.set_cut(False)

    def api(
        self, name: str, path: str, method: str = "GET", body: Any = None, timeout_s: float = 5.0
    ) -> Any:
        """Call node `name`'s management API as guest; the JSON reply (None if empty)."""
        node = self.nodes[name]
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{node.management_port}{path}", data=data, method=method
        )
        request.add_header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")  # guest:guest
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            raw = reply.read()
        return json.loads(raw) if raw else None

    def queue(self, name: str, queue: str, vhost: str = "/") -> Any:
        quoted = urllib.parse.quote(vhost, safe="")
        return self.api(name, f"/api/queues/{quoted}/{urllib.parse.quote(queue, safe='')}")

    def leader_of(self, queue: str, vhost: str = "/", timeout_s: float = 15.0) -> str:
        """The queue's leader as a running node reports it, once one is known."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, node in self.nodes.items():
                if not node.running:
                    continue
                with contextlib.suppress(OSError, ValueError):
                    leader = self.queue(name, queue, vhost).get("leader")
                    if leader and self.nodes[leader].running:
                        return str(leader)
            time.sleep(0.1)
        raise RuntimeError(f"no leader for {queue} within {timeout_s} s")

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.running:
                assert node.process is not None
                node.process.terminate()
        for node in self.nodes.values():
            if node.process is not None:
                try:
                    node.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    node.process.kill()
        for proxy in self.proxies.values():
            proxy.close()
