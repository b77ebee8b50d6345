"""Where the suite finds a broker: a real RabbitMQ given by URL, or Warren started here.

Theory of operation:
1. With `WARREN_TEST_URL` set (an AMQP URL), every test talks to that broker, which is taken
   to be a real RabbitMQ: `broker.is_rabbitmq` is True and tests marked `warren_only` are
   skipped. This is how the behaviour tests are checked against the reference.
2. Without it, the session starts one Warren node as a subprocess on free local ports and
   stops it at the end (SIGTERM, then SIGKILL after a grace period). `server_factory` starts
   extra private nodes for tests that kill or restart a server.
   With `WARREN_TEST_WORKERS=N` every node started here runs N worker processes (issue 19),
   unless a test gives its own `workers` or makes it a cluster member (then one); without
   it, one. Every node is given its count, as a node left to its default runs one worker
   per core (so the suite's first pass runs nodes of one process on any machine). A node
   is ready once every worker has logged its start, not when the first one listens. A
   test marked `one_worker(reason)` is skipped then: behaviour such a node lacks yet.
3. Tests share one broker, so every name a test creates starts with `unique` and the test
   deletes what it creates.
4. The suite runs in parallel under pytest-xdist (`make test`: ``-n 4 --dist loadgroup``): its
   tests mostly wait on nodes and clients, which leaves a 2-core machine's cores idle. Each
   xdist worker is a session of its own (its own `broker` node), draws ports from its own
   slice of the range (`warren.runtime.ports.SLICE_VARIABLE`, inherited by the nodes it
   starts, which choose their workers' cluster ports themselves), and keeps together what
   shares a costly fixture (`xdist_group`): a module's tests when one of its fixtures is
   module-scoped (a 3-node cluster, a browser, a Spark standalone cluster), and every test
   of the local Spark session (`spark`, one JVM for all of them). The Spark tests that
   start JVMs of their own (the pipeline's command line) run beside them, so two or three
   JVMs run at once at most, and Spark is not one chain that outlasts the rest (all on one
   xdist worker, it took the whole of the first pass's wall time).
5. Property tests (hypothesis) run without a per-example deadline and without the "too slow"
   health check: both measure wall time, which on a shared 2-core machine says nothing of the
   code under test, and made a passing test fail under load.
6. A client a test drops unclosed (a pika connection: its socket, its ioloop's wake-up socket
   pair) warns only once the garbage collector finalises it, which may be in whatever test
   runs next on that xdist worker; with `filterwarnings = error` that test fails, not the
   one that leaked (CI failed test_direct_reply_to_rpc so). `leaks_fail_their_test` pins the
   warning on the test that leaked: a test that ends with a file descriptor number open that
   was not open when it began has the collector run in its own teardown, where pytest
   reports the warning as that test's error. (A dropped pika connection holds four: only a
   test that closed four of the descriptors it found open could hide one.) Listing the
   numbers costs a tenth of a millisecond a test; a collection, hundreds of milliseconds
   on the loaded machine, runs only then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import HealthCheck, settings

from warren.runtime.ports import SLICE_VARIABLE, mark_given, unused_port
from warren.runtime.workers.layout import LAYOUT_FILE, cores, made_for, read

TEST_URL_ENV = "WARREN_TEST_URL"
WORKERS_ENV = "WARREN_TEST_WORKERS"  # worker processes of every node started here
MGMT_URL_ENV = "WARREN_TEST_MGMT_URL"  # RabbitMQ's management API, with WARREN_TEST_URL
DEFAULT_RABBITMQ_MGMT_URL = "http://127.0.0.1:15672"
# per worker: a bound for a start that hangs, not a wait. The suite's 4 xdist sessions start
# nodes at once on 2 cores (rule 4), so a start may take 4 times what it takes alone; as
# warren.testing.cluster's bound.
START_TIMEOUT_S = 30.0
STARTED_LINE = " started, data in "  # warren.server's line once a node (or worker) serves
STOP_GRACE_S = 5.0

settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")  # rule 5
XDIST_WORKER_ENV = "PYTEST_XDIST_WORKER"  # gw0, gw1, ... in a pytest-xdist worker
XDIST_WORKERS_ENV = "PYTEST_XDIST_WORKER_COUNT"
SHARED_SCOPES = ("module", "package")  # a fixture set up once for many tests (rule 4)
SPARK_FIXTURE = "spark"  # tests/spark's session-scoped local Spark session: one JVM (rule 4)
DESCRIPTORS = Path("/proc/self/fd")  # this process's open file descriptors, on Linux (rule 6)


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get(XDIST_WORKER_ENV)
    if worker is not None:  # rule 4: this worker's own ports, and its nodes' too
        slice_ = f"{worker.removeprefix('gw')}/{os.environ[XDIST_WORKERS_ENV]}"
        os.environ[SLICE_VARIABLE] = slice_


def _fixture_scopes(item: pytest.Item) -> dict[str, str]:
    """The scope of every fixture `item` uses, by name (pytest's own record of them)."""
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures is None:
        return {}
    return {name: defs[-1].scope for name, defs in fixtures.name2fixturedefs.items()}


def _xdist_group(item: pytest.Item) -> str | None:
    """The tests `item` must share an xdist worker with (rule 4), by name; None if none:
    its module's when it uses a module-scoped fixture, else the local Spark session's."""
    scopes = _fixture_scopes(item)
    if any(scope in SHARED_SCOPES for scope in scopes.values()):
        return item.nodeid.split("::")[0]
    return SPARK_FIXTURE if SPARK_FIXTURE in scopes else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if not os.environ.get(TEST_URL_ENV):
        if node_workers() > 1:  # a gap of the workers' first slice, named by the test
            for item in items:
                marker = item.get_closest_marker("one_worker")
                if marker is not None:
                    item.add_marker(pytest.mark.skip(reason=f"one worker only: {marker.args[0]}"))
        return
    skip = pytest.mark.skip(reason=f"Warren-only behaviour; {TEST_URL_ENV} points at RabbitMQ")
    for item in items:
        if item.get_closest_marker("warren_only"):
            item.add_marker(skip)


@dataclasses.dataclass(frozen=True)
class Broker:
    """An AMQP endpoint the tests can reach."""

    url: str
    host: str
    port: int
    is_rabbitmq: bool
    management_url: str | None = None  # the HTTP management API, when the suite knows it


@dataclasses.dataclass
class WarrenServer:
    """One Warren node running as a subprocess of the test session."""

    process: subprocess.Popen[bytes]
    port: int
    management_port: int
    data_dir: Path
    log_path: Path

    @property
    def broker(self) -> Broker:
        url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        management_url = f"http://127.0.0.1:{self.management_port}"
        return Broker(url, "127.0.0.1", self.port, is_rabbitmq=False, management_url=management_url)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if the node is still running after the grace period."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=STOP_GRACE_S)


def _accepts_tcp(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def node_workers() -> int:
    """How many workers a node started here runs: `WARREN_TEST_WORKERS`, default 1."""
    return int(os.environ.get(WORKERS_ENV, "1"))


def _started(server: WarrenServer, workers: int) -> bool:
    """Every worker is up: each logs one start line once it serves (worker 0 serves the
    management API too), while the AMQP port opens with the first of them."""
    if not _accepts_tcp(server.port):
        return False
    return workers == 1 or server.log().count(STARTED_LINE) >= workers


def start_warren(data_dir: Path, **settings: object) -> WarrenServer:
    """Start a node and return once it serves (`_started`); fail with its log. `settings`
    are more of its configuration, as command-line flags; ``workers=None`` leaves the
    count to the node (its data directory's, one per core for a new one)."""
    # always a count unless told: a node's own default is one worker per core (rule 2)
    settings.setdefault("workers", 1 if "cluster_nodes" in settings else node_workers())
    if settings["workers"] is None:
        del settings["workers"]
        workers = made_for(data_dir) or cores()
    else:
        workers = int(str(settings["workers"]))
    data_dir.mkdir(parents=True, exist_ok=True)
    port, management_port = unused_port(), unused_port()
    log_path = data_dir.parent / f"{data_dir.name}.{port}.log"
    command = [sys.executable, "-m", "warren", "--port", str(port)]
    command += ["--management-port", str(management_port), "--data-dir", str(data_dir)]
    for name, value in settings.items():
        command += ["--" + name.replace("_", "-"), str(value)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = WarrenServer(process, port, management_port, data_dir, log_path)
    timeout_s = START_TIMEOUT_S * workers  # each worker is a whole node's start
    deadline = time.monotonic() + timeout_s
    while not _started(server, workers):
        if process.poll() is not None:
            pytest.fail(f"warren exited with {process.returncode}:\n{server.log()}")
        if time.monotonic() > deadline:
            server.stop()
            pytest.fail(f"warren did not listen within {timeout_s} s:\n{server.log()}")
        time.sleep(0.05)
    if workers > 1:  # its supervisor drew its workers' cluster ports from this slice
        mark_given(read(data_dir / LAYOUT_FILE).cluster_ports)
    return server


def _broker_from_url(url: str) -> Broker:
    parts = urlsplit(url)
    management_url = os.environ.get(MGMT_URL_ENV, DEFAULT_RABBITMQ_MGMT_URL)
    return Broker(
        url=url,
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5672,
        is_rabbitmq=True,
        management_url=management_url,
    )


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    url = os.environ.get(TEST_URL_ENV)
    if url:
        yield _broker_from_url(url)
        return
    server = start_warren(tmp_path_factory.mktemp("warren") / "data")
    try:
        yield server.broker
    finally:
        server.stop()


@pytest.fixture(scope="session")
def management(broker: Broker) -> tuple[str, str, str]:
    """(base URL, user, password) of the management API: the Warren node started here, or
    RabbitMQ's at `WARREN_TEST_MGMT_URL` (default http://127.0.0.1:15672) with `WARREN_TEST_URL`."""
    if broker.management_url is None:
        pytest.skip("the management API address is only known for a Warren node started here")
    parts = urlsplit(broker.management_url)  # credentials may ride in the URL
    base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}{parts.path}"
    return base, unquote(parts.username or "guest"), unquote(parts.password or "guest")


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., WarrenServer]]:
    """Start private Warren nodes (`factory(data_dir=None, **settings)`); all are stopped
    afterwards."""
    if os.environ.get(TEST_URL_ENV):
        pytest.skip(f"needs a private Warren node; {TEST_URL_ENV} points at a shared broker")
    servers: list[WarrenServer] = []

    def factory(data_dir: Path | None = None, **settings: object) -> WarrenServer:
        server = start_warren(data_dir or tmp_path / f"node{len(servers)}", **settings)
        servers.append(server)
        return server

    yield factory
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()


@pytest.fixture
def port_factory() -> Callable[[], int]:
    """Free local TCP ports, for port settings a test passes to `server_factory`."""
    return unused_port


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> str:
    """A short prefix no other test (or run) uses: `t.<test name>.<random hex>`."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:40]
    return f"t.{name}.{secrets.token_hex(4)}"


def _open_descriptors() -> set[str]:
    """The numbers of this process's open file descriptors; empty where /proc does not
    list them."""
    try:
        return set(os.listdir(DESCRIPTORS))
    except FileNotFoundError:
        return set()


@pytest.fixture(autouse=True)
def leaks_fail_their_test() -> Iterator[None]:
    """Rule 6: collect garbage after a test that ends with a descriptor open it began without."""
    before = _open_descriptors()
    yield
    if not _open_descriptors() <= before:
        gc.collect()
