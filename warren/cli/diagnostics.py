"""rabbitmqctl's and rabbitmq-diagnostics' day-one verbs: ``help``, ``version``, ``ping``,
``await_startup``, ``environment``, ``report`` and ``list_unresponsive_queues``, the Alarms
section of ``status``, and the answer to a verb that does not exist.

Theory of operation:
1. ``help`` lists every verb under rabbitmqctl's section titles (verbs this table does not
   place go under "Other"); ``help VERB`` prints the verb's usage and description, and for
   a listing the columns it accepts. A verb that does not exist, there or as a command,
   gets the nearest known verbs (`_likeness`), not the whole list, and exit status 64.
2. ``ping`` and ``await_startup`` ask the management API for the overview with the given
   credentials: a node "is up" when that answers 200. ``await_startup`` retries until
   ``--timeout`` (rabbitmqctl's default for it: 300 s) and prints nothing on success.
3. ``environment`` prints the node's effective settings (Warren's ``/api/warren/environment``;
   secrets shown as ``********``) as ``name = value`` lines, which a ``warren.toml`` takes
   as they are. ``report`` prints, one after the other, what ``status``,
   ``cluster_status``, ``environment`` and the listings print, the listings for every
   vhost, as rabbitmqctl's report does.
4. ``list_unresponsive_queues``: a Warren queue answers from the node's event loop, so the
   ones listed are those whose ``state`` is not ``running`` (a quorum queue without a
   leader); columns as ``list_queues``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from warren import __version__
from warren.cli import formatters
from warren.cli.client import Reply, Unreachable
from warren.cli.commands import (
    EX_OK,
    EX_UNAVAILABLE,
    EX_USAGE,
    Context,
    _json_cell,
    _tabular,
    _text_cell,
)
from warren.cli.formatters import Formatter

AWAIT_POLL_S = 0.2
AWAIT_STARTUP_TIMEOUT = "300"  # rabbitmqctl's default --timeout for await_startup, seconds

# rabbitmqctl's sections of `help`, with Warren's verbs placed in them.
HELP_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Help", ("help", "version")),
    ("Nodes", ("await_startup",)),
    ("Cluster", ("cluster_status", "forget_cluster_node", "join_cluster")),
    (
        "Users",
        ("add_user", "change_password", "delete_user", "list_users", "set_user_tags"),
    ),
    (
        "Access Control",
        (
            "clear_permissions",
            "clear_topic_permissions",
            "list_permissions",
            "list_topic_permissions",
            "list_user_permissions",
            "list_user_topic_permissions",
            "list_vhosts",
            "set_permissions",
            "set_topic_permissions",
        ),
    ),
    (
        "Monitoring, observability and health checks",
        (
            "list_bindings",
            "list_channels",
            "list_connections",
            "list_consumers",
            "list_exchanges",
            "list_queues",
            "list_unresponsive_queues",
            "ping",
            "report",
            "status",
        ),
    ),
    (
        "Policies",
        (
            "clear_operator_policy",
            "clear_policy",
            "list_operator_policies",
            "list_policies",
            "set_operator_policy",
            "set_policy",
        ),
    ),
    ("Virtual hosts", ("add_vhost", "delete_vhost")),
    ("Configuration and Environment", ("environment",)),
    ("Definitions", ("export_definitions", "import_definitions")),
    ("Operations", ("close_connection",)),
    ("Queues", ("delete_queue", "purge_queue")),
)
VERB_COLUMN_WIDTH = 30


# A wrong verb gets the known verbs most like it: at most three, none less alike than 0.7,
# none more than 0.1 behind the best (so `lis_queues` gets list_queues alone).
SUGGESTIONS_MAX = 3
SUGGESTION_LIKENESS_MIN = 0.7
SUGGESTION_SPREAD = 0.1
PREFIX_WEIGHT, PREFIX_MAX = 0.1, 4  # Jaro-Winkler's bonus for a common prefix


def _likeness(typed: str, verb: str) -> float:
    """difflib's similarity with Winkler's prefix bonus, which rabbitmqctl's Jaro-Winkler
    has: a typo keeps the start of a verb (`lis_queues`, `list`)."""
    ratio = difflib.SequenceMatcher(None, typed, verb).ratio()
    prefix = 0
    while prefix < min(PREFIX_MAX, len(typed), len(verb)) and typed[prefix] == verb[prefix]:
        prefix += 1
    return ratio + prefix * PREFIX_WEIGHT * (1 - ratio)


class UnknownVerb(Exception):
    """A verb warrenctl does not have, and the known verbs nearest to it."""

    def __init__(self, verb: str, known: Sequence[str]) -> None:
        super().__init__(verb)
        self.verb = verb
        scores = {name: _likeness(verb, name) for name in known}
        best = max(scores.values(), default=0.0)
        ranked = sorted(scores, key=lambda name: (-scores[name], name))
        self.nearest = [
            name
            for name in ranked[:SUGGESTIONS_MAX]
            if scores[name] >= max(SUGGESTION_LIKENESS_MIN, best - SUGGESTION_SPREAD)
        ]

    def suggestion(self) -> str:
        """rabbitmqctl's "Did you mean" line, with every near verb rather than one."""
        if len(self.nearest) == 1:
            return f"Did you mean '{self.nearest[0]}'? "
        if self.nearest:
            return f"Did you mean one of {', '.join(map(repr, self.nearest))}? "
        return "Use 'warrenctl help' to list the commands."

    def text(self) -> str:
        """What warrenctl prints for it as a command (rabbitmqctl's text and spacing)."""
        return f"\nCommand '{self.verb}' not found. \n{self.suggestion()}\n"


def show_help(
    ctx: Context, verbs: Mapping[str, Any], verb: str | None, columns: Mapping[str, Sequence[str]]
) -> int:
    """``help`` (every verb by section) or ``help VERB`` (its usage), rule 1. `verbs` maps
    each verb to its argparse parser; `columns` the listings to the columns they take."""
    if verb is None:
        ctx.show(_overview(verbs))
        return EX_OK
    if verb not in verbs:
        unknown = UnknownVerb(verb, sorted(verbs))
        return ctx.fail(f"Error:\n\nCommand '{verb}' not found.\n{unknown.suggestion()}", EX_USAGE)
    parser = verbs[verb]
    usage = parser.format_usage().removeprefix("usage: ").strip()
    lines = ["", "Usage", "", usage, "", _sentence(parser.description or verb)]
    if verb in columns:
        lines += ["", "", "Arguments and Options", "", "<column>"]
        lines.append("\tmust be one of " + ", ".join(sorted(columns[verb])))
    ctx.show("\n".join(lines))
    return EX_OK


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _overview(verbs: Mapping[str, Any]) -> str:
    lines = [
        "",
        "Usage",
        "",
        "warrenctl [--url <url>] [--timeout <timeout>] [--quiet] <command> [<command options>]",
        "",
        "Available commands:",
    ]
    placed = {verb for _, names in HELP_SECTIONS for verb in names}
    sections = [*HELP_SECTIONS, ("Other", tuple(sorted(set(verbs) - placed)))]
    for title, names in sections:
        present = [name for name in names if name in verbs]
        if not present:
            continue
        lines += ["", f"{title}:", ""]
        for name in present:
            description = _sentence(verbs[name].description or "").rstrip(".")
            lines.append(f"   {name.ljust(VERB_COLUMN_WIDTH)}{description}")
    lines += ["", "Use 'warrenctl help <command>' to learn more about a specific command"]
    return "\n".join(lines)


def missing_resource(reply: Reply) -> bool:
    """Whether the API lacks the path asked for: RabbitMQ answers a path it does not have
    (Warren's /api/warren/...) with 404, or 406 when the request accepts JSON only."""
    return reply.status in (404, 406)


def version(ctx: Context) -> int:
    """The tool's version, as rabbitmqctl's ``version`` (of the CLI, not the node)."""
    if ctx.formatter is Formatter.JSON:
        ctx.show(formatters.compact_json({"result": "ok", "value": {"version": __version__}}))
    else:
        ctx.show(__version__)
    return EX_OK


def ping(ctx: Context) -> int:
    """Rule 2: the node's management API answers and accepts the credentials."""
    timeout_ms = int(ctx.client.timeout_s * 1000)
    ctx.banner(
        f"Will ping the node at {ctx.client.base}. This only checks that its management API"
        f" answers and accepts the credentials. Timeout: {timeout_ms} ms."
    )
    try:
        reply = ctx.client.get("overview")
    except Unreachable:
        return ctx.fail(
            f"Error:\nFailed to connect and authenticate to {ctx.client.base} in {timeout_ms} ms"
        )
    if reply.status != 200:
        return ctx.unexpected(reply)
    if ctx.formatter is Formatter.JSON:
        ctx.show(formatters.compact_json({"message": "Ping succeeded"}))
    else:
        ctx.show("Ping succeeded")
    return EX_OK


def await_startup(ctx: Context, clock: Callable[[], float] = time.monotonic) -> int:
    """Rule 2: wait until the node answers; silent when it does."""
    deadline = clock() + ctx.client.timeout_s
    while True:
        try:
            reply = ctx.client.get("overview")
        except Unreachable:
            reply = None
        if reply is not None:
            return EX_OK if reply.status == 200 else ctx.unexpected(reply)
        if clock() >= deadline:
            return ctx.fail(
                f"Error:\nthe node at {ctx.client.base} did not start within"
                f" {ctx.client.timeout_s:g} seconds"
            )
        time.sleep(AWAIT_POLL_S)


def environment(ctx: Context) -> int:
    """Rule 3: the node's settings as ``name = value`` lines."""
    reply = ctx.client.get("warren", "environment")
    if missing_resource(reply):
        return ctx.fail(
            f"Error:\nthe node at {ctx.client.base} does not show its settings over HTTP",
            EX_UNAVAILABLE,
        )
    if reply.status != 200:
        return ctx.unexpected(reply)
    settings: dict[str, Any] = reply.body["settings"]
    if ctx.formatter is Formatter.JSON:
        ctx.show(formatters.compact_json(settings))
        return EX_OK
    ctx.banner(f"Application environment of node {reply.body['node']} ...")
    ctx.show("\n".join(f"{name} = {json.dumps(value)}" for name, value in settings.items()))
    return EX_OK


def alarm_lines(node: Mapping[str, Any]) -> list[str]:
    """The Alarms section of ``status`` and ``cluster_status`` for one node of /api/nodes."""
    name = node.get("name", "")
    alarms = [
        text
        for key, text in (
            ("mem_alarm", f"Memory alarm on node {name}"),
            ("disk_free_alarm", f"Free disk space alarm on node {name}"),
        )
        if node.get(key)
    ]
    return alarms or ["(none)"]


# what each listener protocol is for, in rabbitmqctl's words (Warren's AMQP is 0-9-1 only)
LISTENER_PURPOSES = {
    "amqp": "AMQP 0-9-1 and AMQP 1.0",
    "amqp/ssl": "AMQP 0-9-1 and AMQP 1.0 over TLS",
    "http": "HTTP API",
    "https": "HTTP API over TLS (HTTPS)",
    "clustering": "inter-node and CLI tool communication",
}


def listener_address(listener: Mapping[str, Any]) -> str:
    """``[::], port: 5672, protocol: amqp, purpose: …``: a listener of /api/overview after
    rabbitmqctl's ``Interface:``."""
    host = str(listener.get("ip_address", ""))
    protocol = str(listener.get("protocol", ""))
    purpose = LISTENER_PURPOSES.get(protocol, protocol)
    return (
        f"{f'[{host}]' if ':' in host else host}, port: {listener.get('port')},"
        f" protocol: {protocol}, purpose: {purpose}"
    )


def list_unresponsive_queues(ctx: Context, columns: Sequence[str]) -> int:
    """Rule 4."""
    ctx.banner(f"Listing unresponsive queues for vhost {ctx.vhost} ...")
    reply = ctx.client.get("queues", ctx.vhost)
    if reply.status == 404:
        return EX_OK  # rabbitmqctl lists nothing for a missing vhost
    if reply.status != 200:
        return ctx.unexpected(reply)
    stuck = [queue for queue in reply.body if queue.get("state", "running") != "running"]
    if ctx.formatter is Formatter.JSON:
        objects = [{c: _json_cell(c, queue.get(c)) for c in columns} for queue in stuck]
        ctx.show(formatters.json_lines(objects))
        return EX_OK
    rows = [[_text_cell(ctx.formatter, c, queue.get(c)) for c in columns] for queue in stuck]
    ctx.show_listing(_tabular(ctx, columns, rows))
    return EX_OK


def report(
    ctx: Context,
    node_sections: Sequence[Callable[[Context], int]],
    vhost_sections: Sequence[Callable[[Context], int]],
) -> int:
    """Rule 3: each section in turn, the vhost ones for every vhost; the first failure's
    exit status, or 0."""
    overview = ctx.client.get("overview")
    vhosts = ctx.client.get("vhosts")
    if overview.status != 200 or vhosts.status != 200:
        return ctx.unexpected(overview if overview.status != 200 else vhosts)
    ctx.banner(f"Reporting server status of node {overview.body.get('node', '')} ...")
    status = EX_OK
    sections = [(section, ctx) for section in node_sections]
    for vhost in sorted(item["name"] for item in vhosts.body):
        scoped = dataclasses.replace(ctx, vhost=vhost)
        sections += [(section, scoped) for section in vhost_sections]
    for section, scoped in sections:
        print(file=ctx.out)
        outcome = section(scoped)
        status = status or outcome
    return status
