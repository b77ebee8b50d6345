"""`warrenctl`'s command line: rabbitmqctl's verbs and flags, parsed with argparse.

Theory of operation:
1. Global flags (``-p/--vhost``, ``-q/--quiet``, ``-s/--silent``, ``--formatter``,
   ``-t/--timeout``, ``--no-table-headers``, ``--url``) are accepted before or after the
   verb, as rabbitmqctl accepts them: they live in a parent parser whose defaults are
   suppressed, and `_settings` fills in the defaults after parsing.
2. A usage error prints rabbitmqctl's ``Error (argument validation): …`` and the verb's
   usage to stderr and exits 64; an unreachable API prints ``Error: unable to perform an
   operation …`` and exits 69. A verb that does not exist names the nearest ones
   (`diagnostics.UnknownVerb`) and exits 64.
3. Each verb's help text is also its parser's description, which ``help`` shows.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

from warren.cli import cluster, commands, diagnostics
from warren.cli import verbs as actions
from warren.cli.client import DEFAULT_URL, Client, Unreachable
from warren.cli.commands import EX_BROKEN_PIPE, EX_DATAERR, EX_UNAVAILABLE, EX_USAGE, Context
from warren.cli.formatters import FORMATTER_NAMES, Formatter
from warren.cli.verbs import LISTINGS

Number = TypeVar("Number", int, float)

URL_ENV = "WARREN_URL"
DEFAULTS = {
    "vhost": "/",
    "quiet": False,
    "silent": False,
    "timeout": "60",
    "table_headers": True,
    "url": None,
}


class UsageError(Exception):
    def __init__(self, message: str, usage: str, code: int = EX_USAGE) -> None:
        super().__init__(message)
        self.usage = usage
        self.code = code


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            raise diagnostics.UnknownVerb(value, sorted(action.choices))
        super()._check_value(action, value)


def global_flags() -> Parser:
    flags = Parser(add_help=False, argument_default=argparse.SUPPRESS)
    flags.add_argument("-p", "--vhost", help="virtual host (default /)")
    flags.add_argument("-q", "--quiet", action="store_true", help="no informational messages")
    flags.add_argument(
        "-s", "--silent", action="store_true", help="no informational messages or table header"
    )
    flags.add_argument("--formatter", choices=FORMATTER_NAMES, help="output format")
    flags.add_argument("-t", "--timeout", help="operation timeout in seconds (default 60)")
    flags.add_argument("--no-table-headers", dest="table_headers", action="store_false")
    flags.add_argument("--url", help=f"management API URL (default ${URL_ENV}, else {DEFAULT_URL})")
    return flags


def build_parser() -> tuple[Parser, dict[str, Parser]]:
    """The parser, and each verb's own parser (for its usage line)."""
    flags = global_flags()
    parser = Parser(prog="warrenctl", parents=[flags], description="Manage a Warren node.")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    for operator, prefix in ((False, ""), (True, "operator_")):
        noun = "an operator policy" if operator else "a policy"
        setter = verbs.add_parser(f"set_{prefix}policy", parents=[flags], help=f"set {noun}")
        setter.add_argument("name")
        setter.add_argument("pattern")
        setter.add_argument("definition")
        setter.add_argument("--priority", default="0")
        setter.add_argument("--apply-to", dest="apply_to", default="all")
        setter.set_defaults(operator=operator)
        clearer = verbs.add_parser(f"clear_{prefix}policy", parents=[flags], help=f"clear {noun}")
        clearer.add_argument("name")
        clearer.set_defaults(operator=operator)
        lister = verbs.add_parser(
            f"list_{prefix}policies",
            parents=[flags],
            help=f"list the {prefix.replace('_', ' ')}policies",
        )
        lister.set_defaults(operator=operator)
    exporter = verbs.add_parser(
        "export_definitions", parents=[flags], help="export definitions to a file (- : stdout)"
    )
    exporter.add_argument("file")
    importer = verbs.add_parser(
        "import_definitions", parents=[flags], help="import definitions from a file (- : stdin)"
    )
    importer.add_argument("file")
    queues = verbs.add_parser("list_queues", parents=[flags], help="list queues and their columns")
    queues.add_argument("columns", nargs="*", metavar="column")
    for ignored in ("--online", "--offline", "--local"):
        queues.add_argument(ignored, action="store_true", help=argparse.SUPPRESS)
    for verb in LISTINGS:
        lister = verbs.add_parser(verb, parents=[flags], help=verb.replace("_", " "))
        lister.add_argument("columns", nargs="*", metavar="column")
    _everyday_verbs(verbs, flags)
    _diagnostic_verbs(verbs, flags)
    for choice in verbs._choices_actions:
        verbs.choices[choice.dest].description = choice.help
    return parser, dict(verbs.choices)


def _diagnostic_verbs(verbs: Any, flags: Parser) -> None:
    """rabbitmqctl's and rabbitmq-diagnostics' verbs for a node's first hour."""
    helper = verbs.add_parser("help", parents=[flags], help="displays usage information")
    helper.add_argument("command", nargs="?", help="the command to describe")
    verbs.add_parser("version", parents=[flags], help="displays the warrenctl version")
    verbs.add_parser("ping", parents=[flags], help="checks that the node's management API answers")
    verbs.add_parser(
        "await_startup", parents=[flags], help="waits for the node to start (--timeout, 300 s)"
    )
    verbs.add_parser("environment", parents=[flags], help="displays the node's effective settings")
    verbs.add_parser(
        "report", parents=[flags], help="a status report: status, settings and every listing"
    )
    unresponsive = verbs.add_parser(
        "list_unresponsive_queues",
        parents=[flags],
        help="lists the queues that cannot answer (a quorum queue without a leader)",
    )
    unresponsive.add_argument("columns", nargs="*", metavar="column")
    # accepted as rabbitmqctl accepts them; a Warren node has one set of queues and no waits
    unresponsive.add_argument("--local", action="store_true", help=argparse.SUPPRESS)
    unresponsive.add_argument("--queue-timeout", help=argparse.SUPPRESS)


def _everyday_verbs(verbs: Any, flags: Parser) -> None:
    """rabbitmqctl's verbs for users, vhosts, permissions, queues, connections and the
    cluster."""

    def verb(name: str, help_text: str, *arguments: str) -> Parser:
        parser: Parser = verbs.add_parser(name, parents=[flags], help=help_text)
        for argument in arguments:
            parser.add_argument(argument)
        return parser

    verb("status", "show the node's status")
    verb("add_user", "create a user", "username", "password")
    verb("delete_user", "delete a user", "username")
    verb("change_password", "change a user's password", "username", "password")
    tags = verb("set_user_tags", "set a user's tags", "username")
    tags.add_argument("tags", nargs="*")
    vhost = verb("add_vhost", "create a virtual host", "name")
    vhost.add_argument("--description", default="")
    vhost.add_argument("--tags", default="")
    verb("delete_vhost", "delete a virtual host and everything in it", "name")
    verb(
        "set_permissions",
        "set a user's permissions in the vhost",
        "username",
        "conf",
        "write",
        "read",
    )
    verb(
        "set_topic_permissions",
        "set a user's topic permissions on an exchange in the vhost",
        "username",
        "exchange",
        "write",
        "read",
    )
    verb(
        "clear_topic_permissions", "clear a user's topic permissions in the vhost", "username"
    ).add_argument("exchange", nargs="?")
    verb("purge_queue", "remove the ready messages of a queue", "queue")
    deleter = verb("delete_queue", "delete a queue", "queue")
    deleter.add_argument("-e", "--if-empty", dest="if_empty", action="store_true")
    deleter.add_argument("-u", "--if-unused", dest="if_unused", action="store_true")
    closer = verb("close_connection", "close a client connection", "connection_name")
    closer.add_argument("explanation")
    verb("cluster_status", "show the cluster's nodes and which of them are running")
    verb("join_cluster", "make this node a member of the cluster the given node is in", "node")
    verb("forget_cluster_node", "remove a stopped node from the cluster", "node")


def _settings(args: argparse.Namespace, formatter: str) -> None:
    defaults = DEFAULTS | {"formatter": formatter}
    if args.verb == "await_startup":
        defaults["timeout"] = diagnostics.AWAIT_STARTUP_TIMEOUT
    for name, default in defaults.items():
        if not hasattr(args, name):
            setattr(args, name, default)


def context(args: argparse.Namespace, usage: str) -> Context:
    """The verb's `Context` from the global flags (``--timeout`` checked here)."""
    timeout_s = _number(args.timeout, "--timeout", usage, float)
    url = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
    return Context(
        client=Client(url, timeout_s),
        vhost=args.vhost,
        formatter=Formatter.named(args.formatter),
        quiet=args.quiet,
        silent=args.silent,
        table_headers=args.table_headers,
    )


def _run(args: argparse.Namespace, usage: str) -> int:
    ctx = context(args, usage)
    timeout_s = ctx.client.timeout_s
    verb: str = args.verb
    if verb == "help":
        accepted = {name: tuple(listing.fields) for name, listing in LISTINGS.items()}
        accepted["list_queues"] = commands.QUEUE_COLUMNS
        accepted["list_unresponsive_queues"] = commands.QUEUE_COLUMNS
        return diagnostics.show_help(ctx, build_parser()[1], args.command, accepted)
    if verb == "report":
        return _report(ctx)
    if verb == "list_unresponsive_queues":
        chosen = args.columns or ["name"]
        _check_columns(chosen, commands.QUEUE_COLUMNS, usage)
        return diagnostics.list_unresponsive_queues(ctx, chosen)
    if verb in LISTINGS:
        listing = LISTINGS[verb]
        chosen = args.columns or list(listing.default_columns)
        _check_columns(chosen, listing.fields, usage)
        return actions.run_listing(ctx, verb, chosen, timeout_s)
    everyday = _everyday(ctx, args)
    if everyday is not None:
        return everyday
    if verb == "export_definitions":
        return commands.export_definitions(ctx, args.file)
    if verb == "import_definitions":
        if args.file != "-" and not os.path.isfile(args.file):
            message = f"Bad argument: File {args.file} does not exist"
            raise UsageError(message, usage, EX_DATAERR)
        return commands.import_definitions(ctx, args.file)
    if verb.startswith("set_"):
        priority = _number(args.priority, "--priority", usage, int)
        return commands.set_policy(
            ctx,
            args.name,
            args.pattern,
            args.definition,
            priority=priority,
            apply_to=args.apply_to,
            operator=args.operator,
        )
    if verb.startswith("clear_"):
        return commands.clear_policy(ctx, args.name, operator=args.operator)
    if verb.endswith("policies"):
        return commands.list_policies(ctx, operator=args.operator)
    columns = args.columns or list(commands.DEFAULT_QUEUE_COLUMNS)
    _check_columns(columns, commands.QUEUE_COLUMNS, usage)
    return commands.list_queues(ctx, columns, timeout_s)


def _check_columns(columns: Sequence[str], known: Collection[str], usage: str) -> None:
    unknown = [column for column in columns if column not in known]
    if unknown:
        raise UsageError(f"Info key(s) {','.join(unknown)} are not supported", usage)


def _report(ctx: Context) -> int:
    """rabbitmqctl's report: node-wide sections, then each vhost's listings."""
    timeout_s = ctx.client.timeout_s

    def listing(verb: str) -> Callable[[Context], int]:
        columns = list(LISTINGS[verb].default_columns)
        return lambda scoped: actions.run_listing(scoped, verb, columns, timeout_s)

    node_sections = [
        actions.status,
        cluster.cluster_status,
        diagnostics.environment,
        listing("list_connections"),
        listing("list_channels"),
    ]
    queues = list(commands.DEFAULT_QUEUE_COLUMNS)
    vhost_sections = [
        lambda scoped: commands.list_queues(scoped, queues, timeout_s),
        listing("list_exchanges"),
        listing("list_bindings"),
        listing("list_consumers"),
        listing("list_permissions"),
        lambda scoped: commands.list_policies(scoped, operator=False),
    ]
    return diagnostics.report(ctx, node_sections, vhost_sections)


def _everyday(ctx: Context, args: argparse.Namespace) -> int | None:
    verb: str = args.verb
    calls: dict[str, Callable[[], int]] = {
        "status": lambda: actions.status(ctx),
        "add_user": lambda: actions.add_user(ctx, args.username, args.password),
        "delete_user": lambda: actions.delete_user(ctx, args.username),
        "change_password": lambda: actions.change_password(ctx, args.username, args.password),
        "set_user_tags": lambda: actions.set_user_tags(ctx, args.username, args.tags),
        "add_vhost": lambda: actions.add_vhost(ctx, args.name, args.description, args.tags),
        "delete_vhost": lambda: actions.delete_vhost(ctx, args.name),
        "set_permissions": lambda: actions.set_permissions(
            ctx, args.username, args.conf, args.write, args.read
        ),
        "set_topic_permissions": lambda: actions.set_topic_permissions(
            ctx, args.username, args.exchange, args.write, args.read
        ),
        "clear_topic_permissions": lambda: actions.clear_topic_permissions(
            ctx, args.username, args.exchange
        ),
        "purge_queue": lambda: actions.purge_queue(ctx, args.queue),
        "delete_queue": lambda: actions.delete_queue(
            ctx, args.queue, if_empty=args.if_empty, if_unused=args.if_unused
        ),
        "close_connection": lambda: actions.close_connection(
            ctx, args.connection_name, args.explanation
        ),
        "cluster_status": lambda: cluster.cluster_status(ctx),
        "version": lambda: diagnostics.version(ctx),
        "ping": lambda: diagnostics.ping(ctx),
        "await_startup": lambda: diagnostics.await_startup(ctx),
        "environment": lambda: diagnostics.environment(ctx),
        "join_cluster": lambda: cluster.join_cluster(ctx, args.node),
        "forget_cluster_node": lambda: cluster.forget_cluster_node(ctx, args.node),
    }
    call = calls.get(verb)
    return None if call is None else call()


def _number(text: str, flag: str, usage: str, kind: Callable[[str], Number]) -> Number:
    try:
        return kind(text)
    except ValueError:
        raise UsageError(f"Invalid options for this command:\n{flag} : {text}", usage) from None


def execute(
    argv: Sequence[str] | None,
    built: tuple[Parser, dict[str, Parser]],
    run: Callable[[argparse.Namespace, str], int],
    formatters: Mapping[str, str] | None = None,
) -> int:
    """Parse `argv` with `built` (the parser and each verb's parser), fill in the global
    flags' defaults (the verb's default formatter from `formatters`, else ``table``), call
    `run(args, usage)` and turn usage errors and an unreachable API into rabbitmqctl's
    messages and exit codes."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser, verbs = built
    try:
        args = parser.parse_args(arguments)
        _settings(args, (formatters or {}).get(args.verb, "table"))
        return run(args, verbs[args.verb].format_usage())
    except diagnostics.UnknownVerb as error:
        print(error.text(), end="", file=sys.stderr)
        return EX_USAGE
    except UsageError as error:
        print(f"Error (argument validation): {error}", file=sys.stderr)
        print("Arguments given:\n\t" + " ".join(arguments) + "\n", file=sys.stderr)
        print(f"Usage\n\n{error.usage}", file=sys.stderr)
        return error.code
    except Unreachable as error:
        print(
            f"Error: unable to perform an operation on the management API at {error}",
            file=sys.stderr,
        )
        return EX_UNAVAILABLE
    except BrokenPipeError:
        # The reader went away (`warrenctl list_queues | head -1`): stop quietly, as a UNIX
        # tool killed by SIGPIPE does, and point stdout at nothing so that Python's final
        # flush does not complain about the pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EX_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    return execute(argv, build_parser(), _run)
