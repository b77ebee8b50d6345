"""The brokers a benchmark run talks to: a Warren it starts (or is given) and a RabbitMQ.

Owns starting Warren as a subprocess on free ports with a fresh data directory, waiting for
it to accept AMQP, stopping it, finding a reachable RabbitMQ (`RABBITMQ_URL` or the local
default) and the PIDs used for CPU and memory accounting (Warren's process, beam.smp) plus
RabbitMQ's management API for its VM memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import stats
from bench.wire import AmqpError, BrokerUrl, Connection, connect

LOCAL_RABBITMQ = "amqp://guest:guest@127.0.0.1:5672/%2F"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
START_TIMEOUT_S = 30.0


@dataclass
class Broker:
    name: str  # "warren" | "rabbitmq"
    url: str
    pid: int = 0  # 0 = unknown: no CPU or RSS accounting
    memory_api: str = ""  # RabbitMQ management URL, for the Erlang VM's memory
    process: subprocess.Popen[bytes] | None = None
    workdir: tempfile.TemporaryDirectory[str] | None = None

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_warren() -> tuple[Broker | None, str]:
    """Start `python -m warren` on free ports; (broker, "") or (None, why it failed)."""
    workdir = tempfile.TemporaryDirectory(prefix="warren-bench-")
    port, management = free_port(), free_port()
    log, data = Path(workdir.name) / "warren.log", Path(workdir.name) / "data"
    command = [sys.executable, "-m", "warren", "--port", str(port)]
    command += ["--management-port", str(management), "--data-dir", str(data)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    broker = Broker("warren", url, process.pid, process=process, workdir=workdir)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if _port_open(port) and reachable(url) is None:
            return broker, ""
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-1500:]
    broker.stop()
    return None, f"`{' '.join(command)}` did not come up (exit {process.poll()}):\n{tail}"


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
