"""`warrenctl` as a subprocess, against Warren's management API or RabbitMQ's.

The expected outputs are rabbitmqctl 3.10.8's (its messages, exit codes and table shapes),
with pretty tables drawn in Unicode box characters as in the length-limit guide. Against
RabbitMQ, queue counters come from its statistics database, so reads that depend on them
are repeated until they settle.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

SETTLE_S = 20.0


class Ctl:
    """Runs `python -m warren.cli` with WARREN_URL pointing at the management API."""

    def __init__(self, management: tuple[str, str, str]) -> None:
        base, user, password = management
        parts = urlsplit(base)
        netloc = f"{user}:{password}@{parts.netloc}"
        self.url = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        self.cleanups: list[list[str]] = []

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "WARREN_URL": self.url}
        command = [sys.executable, "-m", "warren.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)

    def until(self, run: Callable[[], Any], ok: Callable[[Any], bool]) -> Any:
        deadline = time.monotonic() + SETTLE_S
        result = run()
        while not ok(result) and time.monotonic() < deadline:
            time.sleep(0.25)
            result = run()
        return result

    def cleanup(self) -> None:
        for args in self.cleanups:
            self(*args, "-q")


@pytest.fixture
def ctl(management: tuple[str, str, str]) -> Iterator[Ctl]:
    runner = Ctl(management)
    yield runner
    runner.cleanup()


def pretty_rows(output: str) -> list[list[str]]:
    """The cells of a pretty table's text rows (the header first)."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in output.splitlines()
        if line.startswith("│")
    ]


def assert_box_table(output: str) -> None:
    lines = output.splitlines()
    assert lines[0].startswith("┌") and lines[0].endswith("┐")
    assert lines[-1].startswith("└") and lines[-1].endswith("┘")
    assert all(line.startswith(("│", "├")) for line in lines[1:-1])
    if not any(unicodedata.east_asian_width(char) in "WF" for char in output):
        assert len({len(line) for line in lines}) == 1  # every row as wide as the rules


# --- The length-limit guide's examples, verbatim ---


def test_guide_examples_work_verbatim(ctl: Ctl) -> None:
    ctl.cleanups.append(["clear_policy", "my-pol"])
    done = ctl(
        "set_policy", "my-pol", "^one-meg$", '{"max-length-bytes":1048576}', "--apply-to", "queues"
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        'Setting policy "my-pol" for pattern "^one-meg$" to "{"max-length-bytes":1048576}" '
        'with priority "0" for vhost "/" ...\n'
    )
    definition = '{"max-length":2,"overflow":"reject-publish"}'
    done = ctl("set_policy", "my-pol", "^two-messages$", definition, "--apply-to", "queues")
    assert done.returncode == 0
    listed = ctl("list_policies", "--formatter=pretty_table", "--silent")
    assert listed.returncode == 0 and not listed.stdout.startswith("Listing")
    assert_box_table(listed.stdout)
    rows = pretty_rows(listed.stdout)
    assert rows[0] == ["vhost", "name", "pattern", "apply-to", "definition", "priority"]
    assert ["/", "my-pol", "^two-messages$", "queues", definition, "0"] in rows[1:]
    queues = ctl(
        "list_queues",
        "name",
        "durable",
        "arguments",
        "policy",
        "--formatter=pretty_table",
        "--silent",
    )
    assert queues.returncode == 0
    assert pretty_rows(queues.stdout)[0] == ["name", "durable", "arguments", "policy"]


def test_policy_set_with_warrenctl_applies_to_a_queue(ctl: Ctl, amqp: Any) -> None:
    channel = amqp.channel()
    queue = amqp.queue("two-messages", channel, durable=True)
    ctl.cleanups.append(["clear_policy", f"{queue}-pol"])
    pattern = "^" + re.escape(queue) + "$"
    definition = '{"max-length":2,"overflow":"reject-publish"}'
    done = ctl("set_policy", f"{queue}-pol", pattern, definition, "--apply-to", "queues")
    assert done.returncode == 0

    def policy_column() -> str:
        return ctl("list_queues", "name", "policy", "-s").stdout

    assert f"{queue}\t{queue}-pol\n" in ctl.until(
        policy_column, lambda out: f"{queue}\t{queue}-pol\n" in out
    )
    for body in ("m1", "m2", "m3"):
        amqp.publish(channel, queue, body)
    amqp.sync(channel)
    assert amqp.bodies(channel, queue) == ["m1", "m2"]


# --- list_queues ---


def test_list_queues_default_columns_and_banner(ctl: Ctl, amqp: Any) -> None:
    channel = amqp.channel()
    queue = amqp.queue("q", channel)
    for body in ("a", "b"):
        amqp.publish(channel, queue, body)
    amqp.sync(channel)
    done = ctl.until(lambda: ctl("list_queues"), lambda d: f"\n{queue}\t2\n" in d.stdout)
    assert done.returncode == 0
    assert done.stdout.startswith(
        "Timeout: 60.0 seconds ...\nListing queues for vhost / ...\nname\tmessages\n"
    )
    assert f"\n{queue}\t2\n" in done.stdout


def test_list_queues_columns_in_each_formatter(ctl: Ctl, amqp: Any) -> None:
    channel = amqp.channel()
    queue = amqp.queue(
        "q", channel, durable=True, arguments={"x-dead-letter-exchange": "dlx", "x-max-length": 7}
    )
    amqp.publish(channel, queue, "abc")
    amqp.sync(channel)
    columns = [
        "name",
        "durable",
        "arguments",
        "policy",
        "operator_policy",
        "effective_policy_definition",
        "messages",
        "messages_ready",
        "messages_unacknowledged",
        "message_bytes",
        "message_bytes_ready",
        "consumers",
        "type",
    ]

    def ours(done: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
        rows = json.loads(done.stdout)
        return next((row for row in rows if row["name"] == queue), None)

    done = ctl.until(
        lambda: ctl("list_queues", *columns, "--formatter", "json"),
        lambda d: (ours(d) or {}).get("messages") == 1,
    )
    assert done.returncode == 0
    assert ours(done) == {
        "name": queue,
        "durable": True,
        "arguments": [
            ["x-dead-letter-exchange", "longstr", "dlx"],
            ["x-max-length", "signedint", 7],
        ],
        "policy": "",
        "operator_policy": "",
        "effective_policy_definition": {},
        "messages": 1,
        "messages_ready": 1,
        "messages_unacknowledged": 0,
        "message_bytes": 3,
        "message_bytes_ready": 3,
        "consumers": 0,
        "type": "classic",
    }
    table = ctl("list_queues", "name", "durable", "arguments", "policy", "-q").stdout
    assert table.startswith("name\tdurable\targuments\tpolicy\n")
    assert f'{queue}\ttrue\t[{{"x-dead-letter-exchange","dlx"}},{{"x-max-length",7}}]\t\n' in table
    pretty = ctl("list_queues", "name", "arguments", "--formatter=pretty_table", "-s").stdout
    assert_box_table(pretty)
    expected = [
        queue,
        '{<<"x-dead-letter-exchange">>,longstr,<<"dlx">>}{<<"x-max-length">>,signedint,7}',
    ]
    assert expected in pretty_rows(pretty)


def test_a_reader_that_goes_away_stops_it_quietly(ctl: Ctl) -> None:
    # `warrenctl list_exchanges | head -1` where head has gone before the table is written:
    # no traceback, the status a shell gives a command killed by SIGPIPE.
    env = {**os.environ, "WARREN_URL": ctl.url}
    command = [sys.executable, "-m", "warren.cli", "list_exchanges"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        errors = process.stderr.read()
        assert process.wait(timeout=60) == 141
    assert errors == ""


def test_unknown_column_is_a_usage_error(ctl: Ctl) -> None:
    done = ctl("list_queues", "name", "nosuchcol")
    assert done.returncode == 64
    assert done.stderr.startswith(
        "Error (argument validation): Info key(s) nosuchcol are not supported\n"
    )


# --- Policies: messages and errors ---


def test_operator_policy_verbs(ctl: Ctl, unique: str) -> None:
    name = f"{unique}-op"
    ctl.cleanups.append(["clear_operator_policy", name])
    done = ctl("set_operator_policy", name, "^nothing$", '{"max-length":5}', "--apply-to", "queues")
    assert (done.returncode, done.stdout) == (
        0,
        f'Setting operator policy override "{name}" for pattern "^nothing$" to '
        '"{"max-length":5}" with priority "0" for vhost "/" ...\n',
    )
    listed = ctl("list_operator_policies")
    assert listed.stdout.startswith(
        'Listing operator policy overrides for vhost "/" ...\n'
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n"
    )
    assert f'/\t{name}\t^nothing$\tqueues\t{{"max-length":5}}\t0\n' in listed.stdout
    refused = ctl("set_operator_policy", name, "^nothing$", '{"overflow":"drop-head"}', "-q")
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        69,
        "",
        'Error:\nValidation failed\n\n[{<<"overflow">>,<<"drop-head">>}] '
        "are not recognised policy settings\n\n",
    )
    cleared = ctl("clear_operator_policy", name)
    assert (cleared.returncode, cleared.stdout) == (
        0,
        f'Clearing operator policy "{name}" on vhost "/" ...\n',
    )


def test_policy_errors_and_exit_codes(ctl: Ctl, unique: str) -> None:
    name = f"{unique}-p"
    ctl.cleanups.append(["clear_policy", name])
    invalid = ctl("set_policy", name, "^x", '{"max-length":-2}')
    assert (invalid.returncode, invalid.stderr) == (
        69,
        "Error:\nValidation failed\n\n-2 is not a valid maximum length\n\n",
    )
    unknown = ctl("set_policy", name, "^x", '{"bogus":1}', "-q")
    assert unknown.stderr == (
        'Error:\nValidation failed\n\n[{<<"bogus">>,1}] are not recognised policy settings\n\n'
    )
    pattern = ctl("set_policy", name, "(", '{"max-length":1}', "-q")
    assert pattern.stderr == (
        "Error:\nValidation failed\n\n"
        'pattern should be regular expression but is invalid: {"missing )",1}\n\n'
    )
    not_json = ctl("set_policy", name, "^x", "notjson", "-q")
    assert (not_json.returncode, not_json.stderr) == (
        69,
        "Error:\nJSON decoding error. Reason: badarg\n",
    )
    priority = ctl("set_policy", name, "^x", '{"max-length":1}', "--priority", "x")
    assert priority.returncode == 64
    assert priority.stderr.startswith(
        "Error (argument validation): Invalid options for this command:\n--priority : x\n"
    )
    vhost = ctl("set_policy", "-p", "no-such-vhost", name, "^x", '{"max-length":1}', "-q")
    assert (vhost.returncode, vhost.stderr) == (65, "Virtual host 'no-such-vhost' does not exist\n")
    missing = ctl("clear_policy", name)
    assert (missing.returncode, missing.stdout, missing.stderr) == (
        69,
        f'Clearing policy "{name}" on vhost "/" ...\n',
        "Error:\nParameter does not exist\n",
    )
    listing = ctl("list_policies", "-p", "no-such-vhost")
    assert (listing.returncode, listing.stderr) == (
        65,
        "Virtual host 'no-such-vhost' does not exist\n",
    )


def test_quiet_silent_and_json(ctl: Ctl, unique: str) -> None:
    name = f"{unique}-p"
    ctl.cleanups.append(["clear_policy", name])
    assert (
        ctl("set_policy", name, "^nothing$", '{"max-length":1}', "--priority", "3", "-s").stdout
        == ""
    )
    row = f'/\t{name}\t^nothing$\tall\t{{"max-length":1}}\t3'
    banner = 'Listing policies for vhost "/" ...\n'
    header = "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n"
    plain = ctl("list_policies").stdout
    assert plain.startswith(banner + header) and row in plain.splitlines()
    quiet = ctl("list_policies", "-q").stdout
    assert quiet.startswith(header) and row in quiet.splitlines()
    silent = ctl("list_policies", "--silent").stdout
    assert header not in silent and row in silent.splitlines()
    as_json = json.loads(ctl("list_policies", "--formatter", "json").stdout)
    assert {
        "vhost": "/",
        "name": name,
        "pattern": "^nothing$",
        "apply-to": "all",
        "definition": '{"max-length":1}',
        "priority": 3,
    } in as_json
    cleared = ctl("--quiet", "clear_policy", name)
    assert (cleared.returncode, cleared.stdout) == (0, "")
