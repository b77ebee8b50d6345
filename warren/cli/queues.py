"""`warren-queues`: rabbitmq-queues' verbs for quorum queue replicas, over the management
API.

Theory of operation:
1. The same global flags, context, client and formatters as `warrenctl` (`main`); only
   the verbs differ: ``add_member`` / ``delete_member [-p VHOST] QUEUE NODE``,
   ``grow NODE all|even``, ``shrink NODE [--errors-only]``, ``rebalance quorum`` (the
   pattern flags ``--vhost-pattern`` / ``--queue-pattern`` are regular expressions
   searched in the names, default ``.*``) and ``quorum_status [-p VHOST] QUEUE``.
2. As in rabbitmq-queues, ``quorum_status`` and ``rebalance`` print a pretty table unless
   ``--formatter`` says otherwise; ``grow`` and ``shrink`` print a table.
3. Only the ``quorum`` type can be rebalanced: Warren replicates no classic queues.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from warren.cli import cluster
from warren.cli.main import Parser, UsageError, context, execute, global_flags

GROW_STRATEGIES = ("all", "even")
DEFAULT_FORMATTERS = {"quorum_status": "pretty_table", "rebalance": "pretty_table"}


def _patterns(parser: Parser) -> None:
    parser.add_argument("--vhost-pattern", dest="vhost_pattern", default=".*")
    parser.add_argument("--queue-pattern", dest="queue_pattern", default=".*")


def build_parser() -> tuple[Parser, dict[str, Parser]]:
    """The parser, and each verb's own parser (for its usage line)."""
    flags = global_flags()
    parser = Parser(
        prog="warren-queues", parents=[flags], description="Manage quorum queue replicas."
    )
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    for name, help_text in (
        ("add_member", "add a replica of the queue on the node"),
        ("delete_member", "remove the queue's replica on the node"),
    ):
        member = verbs.add_parser(name, parents=[flags], help=help_text)
        member.add_argument("queue")
        member.add_argument("node")
    grow = verbs.add_parser(
        "grow", parents=[flags], help="add a replica on the node to every matching queue"
    )
    grow.add_argument("node")
    grow.add_argument("strategy", metavar="all|even")
    _patterns(grow)
    shrink = verbs.add_parser(
        "shrink", parents=[flags], help="remove the node's replicas of every queue"
    )
    shrink.add_argument("node")
    shrink.add_argument("--errors-only", dest="errors_only", action="store_true")
    rebalance = verbs.add_parser(
        "rebalance", parents=[flags], help="spread queue leaders evenly over the nodes"
    )
    rebalance.add_argument("type", metavar="quorum")
    _patterns(rebalance)
    status = verbs.add_parser(
        "quorum_status", parents=[flags], help="show each replica's Raft state"
    )
    status.add_argument("queue")
    return parser, dict(verbs.choices)


def _run(args: argparse.Namespace, usage: str) -> int:
    ctx = context(args, usage)
    verb: str = args.verb
    if verb == "add_member":
        return cluster.add_member(ctx, args.queue, args.node)
    if verb == "delete_member":
        return cluster.delete_member(ctx, args.queue, args.node)
    if verb == "grow":
        if args.strategy not in GROW_STRATEGIES:
            raise UsageError(f"strategy '{args.strategy}' is not recognised.", usage)
        return cluster.grow(ctx, args.node, args.strategy, args.vhost_pattern, args.queue_pattern)
    if verb == "shrink":
        return cluster.shrink(ctx, args.node, errors_only=args.errors_only)
    if verb == "rebalance":
        if args.type != "quorum":
            raise UsageError(f"type {args.type} is not supported. Try quorum.", usage)
        return cluster.rebalance(ctx, args.vhost_pattern, args.queue_pattern)
    return cluster.quorum_status(ctx, args.queue)


def main(argv: Sequence[str] | None = None) -> int:
    return execute(argv, build_parser(), _run, DEFAULT_FORMATTERS)


if __name__ == "__main__":
    sys.exit(main())
