"""The release wheels installed as a user installs them (`make wheel-test`, after `make wheel`).

Each wheel in `WARREN_RELEASE_WHEELS` (a directory: `make wheel`'s dist/) goes into a fresh
virtual environment of this interpreter's Python, with its dependencies from the index and
nothing from this checkout (no PYTHONPATH, run from a temporary directory); then the
environment's `warren-server` starts a node and a message goes through it with pika:
- the platform wheel (`cp3XX-cp3XX-<platform>`) imports its cores compiled (the queue
  machine's module is a C extension) and needs neither mypy nor a compiler;
- the pure wheel (`py3-none-any`, pip's fallback where no platform wheel fits) holds no
  compiled file and imports its cores as Python.
Creating each environment and installing its dependencies takes a minute or more, so the
default suite skips this file (`make test` does not set the variable).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from warren.runtime.ports import unused_port

WHEELS_ENV = "WARREN_RELEASE_WHEELS"
START_TIMEOUT_S = 60.0
INSTALL_TIMEOUT_S = 600.0

pytestmark = [
    pytest.mark.warren_only,
    pytest.mark.skipif(
        not os.environ.get(WHEELS_ENV), reason=f"{WHEELS_ENV} names no wheels: make wheel-test"
    ),
    pytest.mark.timeout(INSTALL_TIMEOUT_S + 120),
]


def wheel(kind: str) -> Path:
    """The one wheel of `kind` ("compiled" or "pure") in the wheels directory."""
    tag = "py3-none-any" if kind == "pure" else f"cp{sys.version_info[0]}{sys.version_info[1]}"
    wheels = Path(os.environ[WHEELS_ENV]).resolve()
    found = [w for w in wheels.glob("warren_mq-*.whl") if tag in w.name]
    assert len(found) == 1, f"one {kind} wheel ({tag}) expected, found {found}"
    return found[0]


def outside_checkout() -> dict[str, str]:
    """This process's environment without the checkout on the path."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}


@pytest.fixture(scope="module", params=["compiled", "pure"])
def installed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """(kind, the bin directory of a fresh environment with that wheel installed)."""
    tmp_path = tmp_path_factory.mktemp(f"release-{request.param}")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = [str(venv / "bin" / "pip"), "install", "--quiet", str(wheel(request.param))]
    subprocess.run(
        install, check=True, cwd=tmp_path, env=outside_checkout(), timeout=INSTALL_TIMEOUT_S
    )
    yield request.param, venv / "bin"


def test_each_wheel_has_its_cores_as_built(installed: tuple[str, Path], tmp_path: Path) -> None:
    kind, bin_dir = installed
    members = zipfile.ZipFile(wheel(kind)).namelist()
    compiled_files = [name for name in members if name.endswith(".so")]
    assert bool(compiled_files) == (kind == "compiled"), compiled_files
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import warren.queue.machine as m; print(m.__file__)"],
        check=True, capture_output=True, text=True, cwd=tmp_path, env=outside_checkout(),
    ).stdout.strip()  # fmt: skip
    assert where.startswith(str(bin_dir.parent)), where
    assert where.endswith(".so" if kind == "compiled" else ".py"), where
    mypy = subprocess.run(
        [str(bin_dir / "python"), "-c", "import mypy"], capture_output=True, cwd=tmp_path
    )
    assert mypy.returncode != 0, "the compiler must not be a run-time dependency"


def test_warren_server_from_each_wheel_takes_a_message(
    installed: tuple[str, Path], tmp_path: Path
) -> None:
    _kind, bin_dir = installed
    port, management = unused_port(), unused_port()
    command = [str(bin_dir / "warren-server"), "--port", str(port)]
    command += ["--management-port", str(management), "--data-dir", str(tmp_path / "data")]
    command += ["--workers", "1"]  # the build is under test, not the default of one per core
    with (tmp_path / "warren.log").open("wb") as log:
        node = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=outside_checkout()
        )
    try:
        connection = connect(port, node, tmp_path / "warren.log")
        channel = connection.channel()
        queue = channel.queue_declare("release-wheel", durable=True).method.queue
        channel.confirm_delivery()
        properties = pika.BasicProperties(delivery_mode=2, headers={"built": "release"})
        channel.basic_publish("", queue, b"through the release build", properties)
        method, got, body = channel.basic_get(queue, auto_ack=True)
        assert method is not None and body == b"through the release build"
        assert got.headers == {"built": "release"}
        connection.close()
    finally:
        node.terminate()
        assert node.wait(30) == 0, (tmp_path / "warren.log").read_text()[-2000:]


def connect(port: int, node: subprocess.Popen[bytes], log: Path) -> pika.BlockingConnection:
    """A pika connection once the node accepts one; fails with the node's log if it does not."""
    parameters = pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            return pika.BlockingConnection(parameters)
        except pika.exceptions.AMQPConnectionError:
            if node.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"warren-server did not serve (exit {node.poll()}):\n{log.read_text()}")
            time.sleep(0.2)
