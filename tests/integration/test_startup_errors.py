"""A node that cannot start says why in one line naming the thing and the fix, exits 1,
and leaves nothing listening: port in use (AMQP, management or cluster), data directory in
use, a bad setting, an unreadable or unusable certificate.

Each case runs ``python -m warren`` as an operator would and checks its whole stderr.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import WarrenServer, node_workers
from warren.runtime.ports import unused_port, unused_ports

pytestmark = pytest.mark.warren_only

START_TIMEOUT_S = 30


def start(data_dir: Path, *flags: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a node that is expected to fail at once: its exit status and stderr."""
    command = [sys.executable, "-m", "warren", "--data-dir", str(data_dir)]
    command += ["--workers", str(node_workers()), *flags]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=START_TIMEOUT_S, env=env, check=False
    )
    return done.returncode, done.stderr


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another program listens on, outside the ephemeral range. The ports after it,
    where a clustered node's other workers listen (cluster port + i), are free and given to
    nothing else here: in the ephemeral range an outgoing connection could hold one, and
    that worker would fail too."""
    port = unused_ports(node_workers())
    with socket.create_server(("127.0.0.1", port)):
        yield port


def nothing_listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return True
    return False


def test_amqp_port_in_use(tmp_path: Path, held_port: int) -> None:
    management_port = unused_port()
    status, stderr = start(
        tmp_path, "--port", str(held_port), "--management-port", str(management_port)
    )
    assert (status, stderr) == (
        1,
        f"warren-server: AMQP port {held_port} on 127.0.0.1 is in use by another program:"
        " stop it, or choose another port with --port (WARREN_PORT)\n",
    )
    assert nothing_listens(management_port)


def test_management_port_in_use(tmp_path: Path, held_port: int) -> None:
    status, stderr = start(
        tmp_path, "--port", str(unused_port()), "--management-port", str(held_port)
    )
    assert (status, stderr) == (
        1,
        f"warren-server: management API (HTTP) port {held_port} on 127.0.0.1 is in use by"
        " another program: stop it, or choose another port with --management-port"
        " (WARREN_MANAGEMENT_PORT)\n",
    )


def test_cluster_port_in_use(tmp_path: Path, held_port: int) -> None:
    nodes = f"a@localhost=127.0.0.1:{held_port},b@localhost=127.0.0.1:{unused_port()}"
    status, stderr = start(
        tmp_path,
        *("--port", str(unused_port()), "--management-port", str(unused_port())),
        *("--node-name", "a@localhost", "--cluster-nodes", nodes, "--cluster-cookie", "c"),
        *("--cluster-port", str(held_port), "--log-level", "error"),
    )
    assert (status, stderr) == (
        1,
        f"warren-server: cluster port {held_port} is in use by another program: stop it, or"
        " choose another port with --cluster-port (WARREN_CLUSTER_PORT)\n",
    )


def test_data_directory_in_use(tmp_path: Path, server_factory: Callable[..., WarrenServer]) -> None:
    running = server_factory(tmp_path / "data")
    port = unused_port()
    status, stderr = start(
        tmp_path / "data", "--port", str(port), "--management-port", str(unused_port())
    )
    assert (status, stderr) == (
        1,
        f"warren-server: data directory {tmp_path / 'data'} is in use by another Warren node"
        f" (pid {running.process.pid}): stop that node, or give this one its own with"
        " --data-dir (WARREN_DATA_DIR)\n",
    )
    assert nothing_listens(port)


@pytest.mark.parametrize(
    ("flags", "env", "line"),
    [
        (
            ["--port", "five"],
            {},
            "bad port = 'five' (from --port): must be a whole number;"
            " fix it, or leave it out for the default 5672",
        ),
        (
            [],
            {"WARREN_LOG_LEVEL": "loud"},
            "bad log_level = 'loud' (from WARREN_LOG_LEVEL): must be one of debug, info,"
            " warning, error; fix it, or leave it out for the default info",
        ),
        (
            ["--disk-free-limit", "plenty"],
            {},
            "bad disk_free_limit = 'plenty' (from --disk-free-limit): not a size: 'plenty'"
            " (examples: 1073741824, 50MB, 512MiB); fix it, or leave it out for the default 50MB",
        ),
    ],
)
def test_bad_setting(tmp_path: Path, flags: list[str], env: dict[str, str], line: str) -> None:
    assert start(tmp_path, *flags, env={**os.environ, **env}) == (1, f"warren-server: {line}\n")


def test_unreadable_certificate(tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_text("")
    missing = tmp_path / "cert.pem"
    status, stderr = start(
        tmp_path / "data",
        *("--port", str(unused_port()), "--management-port", str(unused_port())),
        *("--ssl-certfile", str(missing), "--ssl-keyfile", str(key)),
    )
    assert (status, stderr) == (
        1,
        f"warren-server: cannot read ssl_certfile {missing}: No such file or directory;"
        " fix the path or its permissions\n",
    )


def test_certificate_that_is_not_pem(tmp_path: Path) -> None:
    garbage = tmp_path / "cert.pem"
    garbage.write_text("not a certificate\n")
    status, stderr = start(
        tmp_path / "data",
        *("--port", str(unused_port()), "--management-port", str(unused_port())),
        *("--ssl-certfile", str(garbage), "--ssl-keyfile", str(garbage)),
    )
    assert status == 1
    assert stderr.startswith("warren-server: cannot load the TLS certificate (")
    assert stderr.endswith(
        f"): ssl_certfile {garbage} and ssl_keyfile {garbage} must be a PEM certificate"
        " and its private key\n"
    )
    assert stderr.count("\n") == 1
