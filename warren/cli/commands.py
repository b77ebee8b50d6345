"""The verbs: each one is a few HTTP calls and rabbitmqctl's messages around them.

Theory of operation:
1. A verb gets a `Context` (client, vhost, formatter, verbosity, output streams) and its
   own arguments, prints what rabbitmqctl prints, and returns the exit code.
2. The informational banner (``Setting policy "p" for pattern … ...``) comes first, as in
   rabbitmqctl, even when the call then fails. A refused policy prints ``Error:`` and the
   broker's validation text (HTML entities of RabbitMQ's /api/policies undone) and exits
   69; a missing vhost prints ``Virtual host 'v' does not exist`` and exits 65.
3. Listing verbs render each cell for the chosen formatter (`terms` for queue arguments,
   compact JSON for policy definitions) and hand rows to `formatters`.
4. Definitions: `export_definitions` writes /api/definitions as rabbitmqctl does (compact
   JSON, keys sorted; ``-`` is stdout without a banner); `import_definitions` reads a file
   (``-``: stdin), refuses one that is not JSON with rabbitmqctl's ``Failed to deserialise
   input`` (exit 65) and POSTs it. Warren's import is done when the reply comes, but the
   message is rabbitmqctl's ("Successfully started definition import ...").
"""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from warren.cli import formatters, terms
from warren.cli.client import Client, Reply
from warren.cli.formatters import Formatter

EX_OK, EX_USAGE, EX_DATAERR, EX_UNAVAILABLE, EX_SOFTWARE, EX_NOPERM = 0, 64, 65, 69, 70, 77
EX_BROKEN_PIPE = 128 + 13  # the status a shell gives a command killed by SIGPIPE

POLICY_COLUMNS = ("vhost", "name", "pattern", "apply-to", "definition", "priority")
QUEUE_COLUMNS = (
    "name",
    "durable",
    "auto_delete",
    "exclusive",
    "arguments",
    "policy",
    "operator_policy",
    "effective_policy_definition",
    "messages",
    "messages_ready",
    "messages_unacknowledged",
    "message_bytes",
    "message_bytes_ready",
    "message_bytes_unacknowledged",
    "consumers",
    "type",
    "state",
    # Known to rabbitmqctl; the HTTP API may not have them, then they print empty.
    "consumer_capacity",
    "consumer_utilisation",
    "disk_reads",
    "disk_writes",
    "exclusive_consumer_pid",
    "exclusive_consumer_tag",
    "head_message_timestamp",
    "leader",
    "members",
    "memory",
    "message_bytes_persistent",
    "message_bytes_ram",
    "messages_persistent",
    "messages_ram",
    "messages_ready_ram",
    "messages_unacknowledged_ram",
    "online",
    "owner_pid",
    "pid",
    "slave_pids",
    "synchronised_slave_pids",
)
DEFAULT_QUEUE_COLUMNS = ("name", "messages")


@dataclass
class Context:
    client: Client
    vhost: str
    formatter: Formatter
    quiet: bool = False
    silent: bool = False
    table_headers: bool = True
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)

    def banner(self, text: str) -> None:
        if not (self.quiet or self.silent) and self.formatter is not Formatter.JSON:
            print(text, file=self.out)

    def show(self, text: str) -> None:
        print(text, file=self.out)

    def show_listing(self, text: str) -> None:
        """A list_* verb's rows: none print nothing (not an empty line), as in rabbitmqctl."""
        if text:
            self.show(text)

    def fail(self, text: str, code: int = EX_UNAVAILABLE) -> int:
        print(text, file=self.err)
        return code

    def missing_vhost(self) -> int:
        return self.fail(f"Virtual host '{self.vhost}' does not exist", EX_DATAERR)

    def unexpected(self, reply: Reply) -> int:
        if reply.status == 401:
            return self.fail(f"Error:\nnot_authorized: {reply.reason or 'Login failed'}", EX_NOPERM)
        body = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
        return self.fail(f"Error:\nHTTP {reply.status}: {body}", EX_SOFTWARE)


def _resource(operator: bool) -> str:
    return "operator-policies" if operator else "policies"


# --- Policies ---


def set_policy(
    ctx: Context,
    name: str,
    pattern: str,
    definition_text: str,
    *,
    priority: int,
    apply_to: str,
    operator: bool,
) -> int:
    noun = "operator policy override" if operator else "policy"
    ctx.banner(
        f'Setting {noun} "{name}" for pattern "{pattern}" to "{definition_text}" '
        f'with priority "{priority}" for vhost "{ctx.vhost}" ...'
    )
    try:
        definition = json.loads(definition_text)
    except ValueError:
        return ctx.fail("Error:\nJSON decoding error. Reason: badarg")
    body = {
        "pattern": pattern,
        "definition": definition,
        "priority": priority,
        "apply-to": apply_to,
    }
    reply = ctx.client.put((_resource(operator), ctx.vhost, name), body)
    if reply.status in (201, 204):
        return _done(ctx)
    if reply.status == 400:
        return ctx.fail("Error:\n" + html.unescape(reply.reason))
    if reply.status == 404:
        return ctx.missing_vhost()
    return ctx.unexpected(reply)


def clear_policy(ctx: Context, name: str, *, operator: bool) -> int:
    noun = "operator policy" if operator else "policy"
    ctx.banner(f'Clearing {noun} "{name}" on vhost "{ctx.vhost}" ...')
    reply = ctx.client.delete(_resource(operator), ctx.vhost, name)
    if reply.status == 204:
        return _done(ctx)
    if reply.status == 404:
        return ctx.fail("Error:\nParameter does not exist")
    return ctx.unexpected(reply)


def _done(ctx: Context) -> int:
    if ctx.formatter is Formatter.JSON:
        ctx.show(formatters.compact_json({"result": "ok"}))
    return EX_OK


def list_policies(ctx: Context, *, operator: bool) -> int:
    noun = "operator policy overrides" if operator else "policies"
    ctx.banner(f'Listing {noun} for vhost "{ctx.vhost}" ...')
    reply = ctx.client.get(_resource(operator), ctx.vhost)
    if reply.status == 404:
        return ctx.missing_vhost()
    if reply.status != 200:
        return ctx.unexpected(reply)
    policies = [
        {**policy, "definition": formatters.compact_json(policy["definition"])}
        for policy in reply.body
    ]
    if ctx.formatter is Formatter.JSON:
        objects = [{column: policy.get(column) for column in POLICY_COLUMNS} for policy in policies]
        ctx.show(formatters.json_lines(objects, empty="[]"))
        return EX_OK
    rows = [
        [formatters.text(policy.get(column)) for column in POLICY_COLUMNS] for policy in policies
    ]
    ctx.show(_tabular(ctx, POLICY_COLUMNS, rows))
    return EX_OK


# --- Definitions ---


def export_definitions(ctx: Context, path: str) -> int:
    """The node's definitions as rabbitmqctl writes them: compact JSON, keys sorted; ``-``
    writes them to stdout with no banner."""
    to_stdout = path == "-"
    if not to_stdout:
        ctx.banner(f'Exporting definitions in JSON to a file at "{path}" ...')
    reply = ctx.client.get("definitions")
    if reply.status != 200:
        return ctx.unexpected(reply)
    text = json.dumps(reply.body, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if to_stdout:
        ctx.show(text)
        return EX_OK
    try:
        with open(path, "w", encoding="utf-8") as target:
            target.write(text)
    except OSError as failure:
        return ctx.fail(f"Error:\n{failure.strerror}: {path}", EX_DATAERR)
    return _done(ctx)


def import_definitions(ctx: Context, path: str) -> int:
    """Send a definitions file (``-``: stdin) to the node; a missing file is a usage error
    (raised by the caller), a file that is not JSON exits 65 as rabbitmqctl does."""
    source = "standard input" if path == "-" else f'a file at "{path}"'
    ctx.banner(f"Importing definitions in JSON from {source} ...")
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8") as origin:
            text = origin.read()
    try:
        document = json.loads(text)
    except ValueError as failure:
        return ctx.fail(
            f"Error:\nFailed to deserialise input (format: JSON) (error: {failure})", EX_DATAERR
        )
    reply = ctx.client.post(("definitions",), document)
    if reply.status in (201, 204):
        ctx.banner(
            "Successfully started definition import. "
            "This process is asynchronous and can take some time."
        )
        return _done(ctx)
    if reply.status == 400:
        return ctx.fail("Error:\n" + reply.reason, EX_DATAERR)
    return ctx.unexpected(reply)


# --- Queues ---


def list_queues(ctx: Context, columns: Sequence[str], timeout_s: float) -> int:
    ctx.banner(f"Timeout: {timeout_s:.1f} seconds ...\nListing queues for vhost {ctx.vhost} ...")
    reply = ctx.client.get("queues", ctx.vhost)
    if reply.status == 404:
        queues: list[dict[str, Any]] = []  # rabbitmqctl lists nothing for a missing vhost
    elif reply.status != 200:
        return ctx.unexpected(reply)
    else:
        queues = reply.body
    if ctx.formatter is Formatter.JSON:
        objects = [
            {column: _json_cell(column, queue.get(column)) for column in columns}
            for queue in queues
        ]
        ctx.show(formatters.json_lines(objects))
        return EX_OK
    rows = [
        [_text_cell(ctx.formatter, column, queue.get(column)) for column in columns]
        for queue in queues
    ]
    ctx.show_listing(_tabular(ctx, columns, rows))
    return EX_OK


def _json_cell(column: str, value: Any) -> Any:
    if column == "arguments":
        return terms.typed_json(value or {})
    return "" if value is None else value


def _text_cell(formatter: Formatter, column: str, value: Any) -> str:
    if column == "arguments":
        arguments = value or {}
        if formatter is Formatter.PRETTY_TABLE:
            return terms.erlang_table(arguments)
        return terms.inspect_table(arguments)
    return formatters.text(value)


def _tabular(ctx: Context, columns: Sequence[str], rows: list[list[str]]) -> str:
    header = ctx.table_headers and not ctx.silent
    if ctx.formatter is Formatter.PRETTY_TABLE:
        return formatters.pretty_table(columns, rows)
    if ctx.formatter is Formatter.CSV:
        return formatters.csv(columns, rows, header=header)
    return formatters.table(columns, rows, header=header)
