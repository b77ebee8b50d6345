"""The brokers a benchmark run talks to: a Warren it starts (or is given) and a RabbitMQ.

Owns starting Warren as a subprocess on free ports with a fresh data directory (from this
checkout, another source tree, or another environment's install: `make bench` runs the
compiled release build from .venv-bench), telling which build it runs, waiting for it to
accept AMQP, stopping it, finding a reachable RabbitMQ (`RABBITMQ_URL` or the local
default) and the PIDs used for CPU and memory accounting (Warren's process, beam.smp) plus
RabbitMQ's management API for its VM memory.

With `--cluster N` both sides are clusters this module starts and stops: N Warren nodes
(`warren.testing.cluster.LocalCluster` without its fault proxies) and N RabbitMQ nodes from
Debian's package (`/usr/lib/rabbitmq/bin`, run as this user with their own node names,
ports, cookie, data and log directories under a temporary directory and no plugins, joined
with `rabbitmqctl join_cluster`), so a node RabbitMQ already runs here is never touched. The
load generator talks to the first node, which a quorum queue's declare makes its leader
(client-local); the others are `peer_pids`, accounted for CPU only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import stats
from bench.wire import AmqpError, BrokerUrl, Connection, connect
from warren.runtime.ports import unused_port
from warren.testing.cluster import LocalCluster

LOCAL_RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/%2F"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
START_TIMEOUT_S = 30.0
RABBITMQ_START_TIMEOUT_S = 120.0  # three Erlang VMs booting on a busy 2-core machine
WARREN_TICK_MS = 100  # warren.runtime.config's default
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")  # Debian's scripts, without its su wrapper


@dataclass
class Broker:
    name: str  # "warren" | "rabbitmq"
    url: str
    pid: int = 0  # 0 = unknown: no CPU or RSS accounting
    memory_api: str = ""  # RabbitMQ management URL, for the Erlang VM's memory
    process: subprocess.Popen[bytes] | None = None
    workdir: tempfile.TemporaryDirectory[str] | None = None
    peer_pids: tuple[int, ...] = ()  # a cluster's other nodes, for CPU accounting
    shutdown: Callable[[], None] | None = None  # stops the cluster this harness started
    build: str = ""  # a Warren this harness started: "compiled (mypyc)" or "pure Python"

    def exited(self) -> str | None:
        """None while running (or not ours to watch); else its exit status and log tail."""
        if self.process is None or self.process.poll() is None:
            return None
        tail = ""
        if self.workdir is not None:
            log = Path(self.workdir.name) / "warren.log"
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
        return f"{self.name} exited with status {self.process.returncode}\n{tail}"

    def stop(self) -> None:
        """Stop a Warren this harness started (SIGTERM, then SIGKILL after 10 s)."""
        if self.shutdown is not None:
            self.shutdown()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.workdir is not None:
            self.workdir.cleanup()


def reachable(url: str) -> str | None:
    """None when an AMQP handshake with `url` succeeds, else why not."""

    async def probe() -> None:
        conn = await asyncio.wait_for(connect(url, Connection), 10)
        await conn.close()

    try:
        asyncio.run(probe())
    except (AmqpError, OSError, TimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def start_warren(
    args: Sequence[str] = (),
    tree: str = "",
    workers: int = 1,
    name: str = "warren",
    python: str = "",
) -> tuple[Broker | None, str]:
    """Start `python -m warren` (of `workers` processes) on free ports, with `args` added; from
    the source `tree` if given (first on PYTHONPATH), else as installed for the interpreter
    `python` if given (a venv's: `make bench`'s .venv-bench holds the compiled release
    build), else this checkout. (broker, "") or (None, why it failed); the broker's `build`
    says whether its cores are compiled."""
    workdir = tempfile.TemporaryDirectory(prefix="warren-bench-")
    port, management = unused_port(), unused_port()
    log, data = Path(workdir.name) / "warren.log", Path(workdir.name) / "data"
    # absolute, not resolved: a venv's python is a symlink to the interpreter it was made from
    command = [os.path.abspath(python or sys.executable), "-m", "warren", "--port", str(port)]
    command += ["--workers", str(workers), "--management-port", str(management)]
    command += ["--data-dir", str(data), *args]
    # `-m` puts the working directory first on sys.path: with a `tree` or a `python`, run from
    # the workdir so that the tree or that environment's install, not this checkout, is what
    # is imported (and without this checkout's PYTHONPATH for a `python`)
    env: dict[str, str] | None = None
    if tree:
        env = {**os.environ, "PYTHONPATH": tree}
    elif python:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    cwd = workdir.name if env is not None else None
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    broker = Broker(name, url, process.pid, process=process, workdir=workdir)
    broker.build = build_of(command[0], env, cwd)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            if _port_open(port) and reachable(url) is None:
                return broker, ""
            time.sleep(0.2)
    except BaseException:  # a SIGTERM (bench.run, bench.scaling: SystemExit) while it starts
        broker.stop()  # is not in the caller's list of brokers to stop yet
        raise
    tail = log.read_text(errors="replace")[-1500:]
    broker.stop()
    return None, f"`{' '.join(command)}` did not come up (exit {process.poll()}):\n{tail}"


def build_of(python: str, env: dict[str, str] | None, cwd: str | None) -> str:
    """Whether `python` run so imports the cores compiled (a C extension in place of the
    queue machine's module: the release build, or `make mypyc`) or as Python; "" when it
    cannot import them (the node will not start either, and its log says why)."""
    asked = [python, "-c", "import warren.queue.machine as m; print(m.__file__)"]
    found = subprocess.run(asked, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    if found.returncode:
        return ""
    return "pure Python" if found.stdout.strip().endswith(".py") else "compiled (mypyc)"


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


def given_warren(url: str, pid: int) -> tuple[Broker | None, str]:
    why = reachable(url)
    if why:
        return None, f"Warren at {url} is not reachable: {why}"
    return Broker("warren", url, pid), ""


def find_rabbitmq(pid: int = 0) -> tuple[Broker | None, str]:
    """RabbitMQ from RABBITMQ_URL or the local default, with beam.smp's PID when local."""
    url = os.environ.get("RABBITMQ_URL", LOCAL_RABBITMQ)
    why = reachable(url)
    if why:
        return None, f"no RabbitMQ reachable at {url} ({why}); skipping RabbitMQ"
    parsed = BrokerUrl.parse(url)
    if not pid and parsed.host in LOCAL_HOSTS:
        pid = beam_pid()
    default_api = f"http://{parsed.user}:{parsed.password}@{parsed.host}:15672"
    return Broker("rabbitmq", url, pid, memory_api=management_api(default_api)), ""


def management_api(default: str) -> str:
    """RABBITMQ_API_URL or `default` when its /api/nodes answers, else "" (no VM memory)."""
    url = os.environ.get("RABBITMQ_API_URL", default)
    try:
        stats.rabbitmq_vm_memory(url)
    except (OSError, ValueError, KeyError, IndexError):
        return ""
    return url


def beam_pid() -> int:
    """The oldest beam.smp process (RabbitMQ's Erlang VM), 0 if none."""
    found = subprocess.run(["pgrep", "-o", "-f", "beam.smp"], capture_output=True, text=True)
    return int(found.stdout.split()[0]) if found.returncode == 0 and found.stdout.strip() else 0


def start_warren_cluster(
    size: int, workers: int = 1, tree: Path | None = None, name: str = "warren"
) -> tuple[Broker | None, str]:
    """`size` Warren nodes of `workers` processes joined as one cluster, with Warren's
    default Raft tick, from the source `tree` if given (`LocalCluster`'s ``tree``)."""
    workdir = tempfile.TemporaryDirectory(prefix="warren-bench-cluster-")
    names = [f"bench-{chr(ord('a') + n)}" for n in range(size)]
    cluster = LocalCluster(
        Path(workdir.name),
        names,
        raft_tick_ms=WARREN_TICK_MS,
        faults=False,
        workers=workers,
        tree=tree,
    )
    try:
        cluster.start_all()
        _until_formed(lambda: _warren_running(cluster, names[0]) == size, "Warren", size)
    except (RuntimeError, OSError) as exc:
        cluster.stop_all()
        workdir.cleanup()
        return None, str(exc)
    pids = [_pid(cluster.nodes[name].process) for name in names]
    url = cluster.nodes[names[0]].url
    broker = Broker(name, url, pids[0], workdir=workdir, peer_pids=tuple(pids[1:]))
    broker.shutdown = cluster.stop_all
    return broker, ""


def _warren_running(cluster: LocalCluster, asked: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        return sum(1 for node in cluster.api(asked, "/api/nodes") if node.get("running"))
    return 0


def _pid(process: subprocess.Popen[bytes] | None) -> int:
    assert process is not None
    return process.pid


def _until_formed(formed: Callable[[], bool], what: str, size: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not formed():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}'s {size} nodes did not form a cluster in time")
        time.sleep(0.2)


@dataclass
class RabbitNode:
    name: str  # Erlang node name, e.g. bench1-4711@localhost
    directory: Path
    port: int
    dist_port: int
    process: subprocess.Popen[bytes] | None = None

    def env(self, home: Path) -> dict[str, str]:
        return dict(
            os.environ,
            HOME=str(home),  # the cookie the nodes and rabbitmqctl share
            RABBITMQ_NODENAME=self.name,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.directory / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.directory / "log"),
            RABBITMQ_PID_FILE=str(self.directory / "pid"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(home / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(home / "no-config"),  # not /etc/rabbitmq's
        )


def start_rabbitmq_cluster(size: int) -> tuple[Broker | None, str]:
    """`size` RabbitMQ nodes from Debian's package, joined as one cluster, no plugins."""
    if not (RABBITMQ_BIN / "rabbitmq-server").exists():
        return None, f"no {RABBITMQ_BIN / 'rabbitmq-server'} (Debian's rabbitmq-server package)"
    workdir = tempfile.TemporaryDirectory(prefix="rabbitmq-bench-")
    home = Path(workdir.name)
    (home / "enabled_plugins").write_text("[].\n")
    cookie = home / ".erlang.cookie"
    cookie.write_text("".join(secrets.choice(string.ascii_uppercase) for _ in range(20)))
    cookie.chmod(0o400)
    tag = os.getpid()
    nodes = [
        RabbitNode(f"bench{n}-{tag}@localhost", home / f"n{n}", unused_port(), unused_port())
        for n in range(1, size + 1)
    ]

    def stop() -> None:
        for node in nodes:
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    _rabbitmqctl(node, home, "stop")
                _reap(node.process)

    try:
        for node in nodes:
            node.directory.mkdir()
            with (node.directory / "server.log").open("wb") as log:
                node.process = subprocess.Popen(
                    [str(RABBITMQ_BIN / "rabbitmq-server")],
                    env=node.env(home),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        for node in nodes:
            _await_rabbitmq(node, home)
        for node in nodes[1:]:
            for step in (["stop_app"], ["join_cluster", nodes[0].name], ["start_app"]):
                _rabbitmqctl(node, home, *step)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        stop()
        workdir.cleanup()
        return None, str(exc)
    url = f"amqp://guest:guest@127.0.0.1:{nodes[0].port}/%2F"
    pids = [_pid(node.process) for node in nodes]
    broker = Broker("rabbitmq", url, pids[0], workdir=workdir, peer_pids=tuple(pids[1:]))
    broker.shutdown = stop
    return broker, ""


def _rabbitmqctl(node: RabbitNode, home: Path, *args: str) -> None:
    command = [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", node.name, *args]
    done = subprocess.run(command, env=node.env(home), capture_output=True, text=True, timeout=90)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {(done.stderr or done.stdout)[-800:]}")


def _await_rabbitmq(node: RabbitNode, home: Path) -> None:
    """Until the node runs RabbitMQ (`await_startup` fails at once while the Erlang node
    has not registered with epmd yet)."""
    deadline = time.monotonic() + RABBITMQ_START_TIMEOUT_S
    while True:
        try:
            _rabbitmqctl(node, home, "await_startup", "--timeout", "10")
            return
        except RuntimeError:
            if time.monotonic() > deadline or (node.process and node.process.poll() is not None):
                raise
            time.sleep(1.0)


def _reap(process: subprocess.Popen[bytes]) -> None:
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
