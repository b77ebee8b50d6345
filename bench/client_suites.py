"""Run other projects' client test suites, unchanged, against a broker; print their counts.

`python -m bench.client_suites SUITE --amqp-url amqp://guest:guest@127.0.0.1:5672/%2F
[--mgmt-url http://guest:guest@127.0.0.1:15672] [--work DIR]`

Theory of operation:
1. Each suite's test sources come from its package registry, pinned to the client version
   installed in this environment (so the tests match the library they exercise): the sdist
   that `pip download` fetches, unpacked into `--work` (default
   `/tmp/warren-client-suites`) once and reused.
2. The suite's own test runner runs in a subprocess with the broker's address in the
   environment variables that suite reads (py-amqp and kombu: `RABBITMQ_HOST`,
   `RABBITMQ_5672_TCP`). pytest writes a JUnit XML report; the counts printed (passed,
   failed, errors, skipped) are read from it, then the names of the tests that did not pass.
3. The same command against RabbitMQ and against a Warren node gives counts to compare side
   by side. The exit status is 0 when nothing failed.

pika's sdist ships no tests: they come from its repository at the installed version's tag
(`--pika-repo`, a clone or bare git directory of github.com/pika/pika, e.g. the one the
search tool's `fetch github:pika/pika` leaves in /work/.mirror/pika+pika/repo). Its
acceptance tests name port 5672 in two files; for another port that number is replaced
there, and nothing else is changed.

amqplib's npm package ships no tests either: they come from a git copy of
github.com/amqp-node/amqplib (`--amqplib-repo`, its HEAD; `fetch github:amqp-node/amqplib`),
with their one test dependency (claire) installed by npm; `node --test` runs them with the
broker in `URL`, each test given 60 s instead of the suite's 1 s (Node 20 counts the limit
per file, which a loaded machine exceeds).

Suites not automated here yet (`docs/client-suites.md`): aiormq (its fixtures start a Docker
container), amqpstorm and FastStream.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import io
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from urllib.parse import urlsplit


@dataclasses.dataclass(frozen=True)
class Suite:
    package: str  # the PyPI project whose sdist holds the tests
    tests: tuple[str, ...]  # paths inside the unpacked sdist, given to pytest
    select: str = ""  # a pytest -k expression: what a plain (non-TLS) listener can run
    from_git: bool = False  # tests from the project's repository at the version's tag
    port_files: tuple[str, ...] = ()  # files that hard-code port 5672
    ignore: tuple[str, ...] = ()  # test files for adapters this environment does not have


SUITES = {
    # the TLS cases need the suite's own certificates on :5671
    "py-amqp": Suite("amqp", ("t/integration/test_rmq.py",), select="not tls"),
    "kombu": Suite("kombu", ("t/integration/test_py_amqp.py",)),
    "pika": Suite(
        "pika",
        ("tests/acceptance",),
        from_git=True,
        port_files=("tests/acceptance/blocking_adapter_test.py", "tests/base/async_test_base.py"),
        ignore=("tests/acceptance/twisted_adapter_tests.py",),  # Twisted is not installed
    ),
}
NODE_SUITES = ("amqplib",)
NOT_AUTOMATED = ("aiormq", "amqpstorm", "faststream")
AMQPLIB_TEST_DEPENDENCIES = ("claire@0.4.1",)


def fetch_sdist(package: str, work: Path) -> Path:
    """Unpack the sdist of the installed version of `package` under `work`; return its root.
    pip fetches it, from whatever index this environment's pip is set up with."""
    version = importlib.metadata.version(package)
    root = work / f"{package}-{version}"
    if root.is_dir():
        return root
    downloads = work / "sdists"
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--no-binary", ":all:", "--dest", str(downloads), f"{package}=={version}"]
    subprocess.run(command, check=True)
    wanted = {f"{package}-{version}.tar.gz", f"{package.replace('-', '_')}-{version}.tar.gz"}
    found = [path for path in downloads.iterdir() if path.name in wanted]
    if not found:
        raise SystemExit(f"pip gave no sdist of {package} {version}")
    with tarfile.open(found[0]) as archive:
        archive.extractall(work, filter="data")
    return root


def fetch_tag(suite: Suite, repository: Path, work: Path, port: int) -> Path:
    """Export the installed version's tag of `repository` (its tests) under `work`, pointed
    at `port`."""
    package = suite.package
    version = importlib.metadata.version(package)
    root = work / f"{package}-{version}-git"
    if not root.is_dir():
        root.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "--git-dir", str(repository), "archive", version, "tests", "pyproject.toml"],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(root, filter="data")
        for name in suite.port_files:
            path = root / name
            path.write_text(path.read_text().replace("5672", str(port)))
    return root


def run_pytest(suite: Suite, root: Path, amqp_url: str) -> Path:
    address = urlsplit(amqp_url)
    environment = dict(os.environ)
    environment.update(
        RABBITMQ_HOST=address.hostname or "127.0.0.1",
        RABBITMQ_5672_TCP=str(address.port or 5672),
    )
    report = root / "client-suite-report.xml"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts="]
    command += ["--junitxml", str(report), "-q", *suite.tests]
    if suite.select:
        command += ["-k", suite.select]
    for name in suite.ignore:
        command += ["--ignore", name]
    subprocess.run(command, cwd=root, env=environment, check=False, timeout=1800)
    return report


def counts(report: Path) -> tuple[dict[str, int], list[str]]:
    """passed/failed/errors/skipped from a JUnit XML report, and the tests that did not pass."""
    tally = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    not_passed: list[str] = []
    for case in ElementTree.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "errors"}.get(child.tag, "skipped")
        tally[outcome] += 1
        if outcome in ("failed", "errors"):
            not_passed.append(f"{outcome}: {name}")
    return tally, not_passed


def run_python_suite(suite: Suite, options: argparse.Namespace) -> tuple[dict[str, int], list[str]]:
    if suite.from_git:
        port = urlsplit(options.amqp_url).port or 5672
        root = fetch_tag(suite, options.pika_repo, options.work / f"port-{port}", port)
    else:
        root = fetch_sdist(suite.package, options.work)
    return counts(run_pytest(suite, root, options.amqp_url))


def run_amqplib(repository: Path, work: Path, amqp_url: str) -> tuple[dict[str, int], list[str]]:
    """amqplib's `node --test` suite; counts from its TAP summary, failures from `not ok`."""
    root = work / "amqplib-git"
    if not root.is_dir():
        root.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "--git-dir", str(repository), "archive", "HEAD"],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(root, filter="data")
        npm = ["npm", "install", "--no-save", "--ignore-scripts", *AMQPLIB_TEST_DEPENDENCIES]
        subprocess.run(npm, cwd=root, check=True)
    environment = {**os.environ, "URL": amqp_url}
    output = subprocess.run(
        ["node", "--test", "--test-timeout=60000"],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    ).stdout
    tally = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    names = {"pass": "passed", "fail": "failed", "cancelled": "errors", "skipped": "skipped"}
    not_passed: list[str] = []
    for line in output.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "#" and words[1] in names:
            tally[names[words[1]]] = int(words[2])
        elif line.lstrip().startswith("not ok"):
            not_passed.append("failed: " + line.strip())
    return tally, not_passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_suites")
    parser.add_argument("suite", choices=[*SUITES, *NODE_SUITES, *NOT_AUTOMATED])
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--mgmt-url", help="management API, for suites that use it")
    parser.add_argument("--work", type=Path, default=Path("/tmp/warren-client-suites"))
    parser.add_argument("--pika-repo", type=Path, default=Path("/work/.mirror/pika+pika/repo"))
    default_amqplib = Path("/work/.mirror/amqp-node+amqplib/repo")
    parser.add_argument("--amqplib-repo", type=Path, default=default_amqplib)
    options = parser.parse_args(argv)
    if options.suite in NOT_AUTOMATED:
        print(f"{options.suite}: not automated yet (module docstring)")
        return 2
    if options.suite in NODE_SUITES:
        tally, not_passed = run_amqplib(options.amqplib_repo, options.work, options.amqp_url)
    else:
        tally, not_passed = run_python_suite(SUITES[options.suite], options)
    summary = ", ".join(f"{outcome} {number}" for outcome, number in tally.items())
    print(f"{options.suite} against {options.amqp_url}: {summary}")
    for line in not_passed:
        print("  " + line)
    return 0 if not tally["failed"] and not tally["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
