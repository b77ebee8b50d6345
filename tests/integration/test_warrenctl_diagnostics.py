"""`warrenctl`'s day-one verbs as a subprocess, against Warren's management API or
RabbitMQ's: help, version, ping, await_startup, status's alarms, cluster_status of a node on
its own, list_unresponsive_queues, listings of a missing vhost, a wrong verb; environment
and report (Warren's own resource) on Warren only.

The expected texts are rabbitmqctl 3.10.8's, taken from the real tools on a single node.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.integration.test_warrenctl import Ctl
from warren.runtime.ports import unused_port


@pytest.fixture
def ctl(management: tuple[str, str, str]) -> Iterator[Ctl]:
    runner = Ctl(management)
    yield runner
    runner.cleanup()


def warrenctl_at(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "warren.cli", "--url", url, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_a_wrong_verb_names_the_nearest_ones(ctl: Ctl) -> None:
    done = ctl("lis_queues")
    assert (done.returncode, done.stdout, done.stderr) == (
        64,
        "",
        "\nCommand 'lis_queues' not found. \nDid you mean 'list_queues'? \n",
    )
    several = ctl("list")
    assert several.stderr == (
        "\nCommand 'list' not found. \n"
        "Did you mean one of 'list_users', 'list_queues', 'list_vhosts'? \n"
    )
    nothing_near = ctl("xyzzy")
    assert (nothing_near.returncode, nothing_near.stderr) == (
        64,
        "\nCommand 'xyzzy' not found. \nUse 'warrenctl help' to list the commands.\n",
    )


def test_help_lists_the_verbs_by_section_and_describes_one(ctl: Ctl) -> None:
    overview = ctl("help")
    assert overview.returncode == 0
    lines = overview.stdout.splitlines()
    assert lines[:2] == ["", "Usage"]
    monitoring = lines.index("Monitoring, observability and health checks:")
    assert lines[monitoring + 2].startswith("   list_bindings                 ")
    assert lines[-1] == "Use 'warrenctl help <command>' to learn more about a specific command"
    one = ctl("help", "list_queues")
    assert one.returncode == 0
    assert "\nList queues and their columns.\n" in one.stdout
    assert "<column>\n\tmust be one of arguments, auto_delete," in one.stdout
    missing = ctl("help", "nosuch")
    assert (missing.returncode, missing.stdout) == (64, "")
    assert missing.stderr.startswith("Error:\n\nCommand 'nosuch' not found.\n")


def test_version_ping_and_await_startup(ctl: Ctl) -> None:
    assert (ctl("version").returncode, ctl("version").stdout) == (0, "0.1.0\n")
    pinged = ctl("ping")
    assert pinged.returncode == 0
    assert pinged.stdout.startswith("Will ping the node at ")
    assert pinged.stdout.endswith("Timeout: 60000 ms.\nPing succeeded\n")
    assert ctl("ping", "-q").stdout == "Ping succeeded\n"
    awaited = ctl("await_startup")
    assert (awaited.returncode, awaited.stdout, awaited.stderr) == (0, "", "")


def test_ping_and_await_startup_of_a_node_that_is_not_there() -> None:
    url = f"http://127.0.0.1:{unused_port()}"
    pinged = warrenctl_at(url, "ping", "-q")
    assert (pinged.returncode, pinged.stderr) == (
        69,
        f"Error:\nFailed to connect and authenticate to {url} in 60000 ms\n",
    )
    started = time.monotonic()
    awaited = warrenctl_at(url, "await_startup", "--timeout", "1")
    assert time.monotonic() - started >= 1
    assert (awaited.returncode, awaited.stderr) == (
        69,
        f"Error:\nthe node at {url} did not start within 1 seconds\n",
    )


def test_status_has_an_alarms_section(ctl: Ctl) -> None:
    done = ctl("status")
    assert done.returncode == 0
    assert "\nAlarms\n\n(none)\n\n" in done.stdout


def test_cluster_status_of_a_node_on_its_own_is_a_cluster_of_one(ctl: Ctl) -> None:
    done = ctl("cluster_status")
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    node = lines[0].removeprefix("Cluster status of node ").removesuffix(" ...")
    disk = lines.index("Disk Nodes")
    running = lines.index("Running Nodes")
    assert lines[disk : disk + 4] == ["Disk Nodes", "", node, ""]
    assert lines[running : running + 3] == ["Running Nodes", "", node]
    assert "\nAlarms\n\n(none)\n\nNetwork Partitions\n\n(none)\n" in done.stdout
    assert any(line.startswith(f"Node: {node}, interface: ") for line in lines)


def test_listings_of_a_missing_vhost_are_empty_as_rabbitmqctls(ctl: Ctl) -> None:
    # rabbitmqctl 3.10.8: banner only and exit 0, except for permissions and policies
    queues = ctl("list_queues", "-p", "missing")
    assert (queues.returncode, queues.stdout, queues.stderr) == (
        0,
        "Timeout: 60.0 seconds ...\nListing queues for vhost missing ...\n",
        "",
    )
    exchanges = ctl("list_exchanges", "-p", "missing")
    assert (exchanges.returncode, exchanges.stdout) == (
        0,
        "Listing exchanges for vhost missing ...\n",
    )
    unresponsive = ctl("list_unresponsive_queues", "-p", "missing")
    assert (unresponsive.returncode, unresponsive.stdout) == (
        0,
        "Listing unresponsive queues for vhost missing ...\n",
    )
    permissions = ctl("list_permissions", "-p", "missing")
    assert (permissions.returncode, permissions.stderr) == (
        65,
        "Virtual host 'missing' does not exist\n",
    )


@pytest.mark.warren_only
def test_environment_shows_the_settings_with_secrets_hidden(ctl: Ctl) -> None:
    done = ctl("environment")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Application environment of node ")
    assert 'default_pass = "********"' in lines
    assert 'log_level = "info"' in lines


@pytest.mark.warren_only
def test_report_runs_every_section(ctl: Ctl) -> None:
    done = ctl("report")
    assert (done.returncode, done.stderr) == (0, "")
    headings = [
        line
        for line in done.stdout.splitlines()
        if line.startswith(("Reporting", "Status", "Cluster status", "Application", "Listing"))
    ]
    assert [heading.split(" of node ")[0] for heading in headings[:4]] == [
        "Reporting server status",
        "Status",
        "Cluster status",
        "Application environment",
    ]
    assert headings[4:7] == [
        "Listing connections ...",
        "Listing channels ...",
        "Listing queues for vhost / ...",
    ]
    assert 'Listing policies for vhost "/" ...' in headings
