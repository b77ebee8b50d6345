"""warrenctl's answer to a wrong verb and its `help` overview, without a node."""

from __future__ import annotations

import io

from warren.cli import main
from warren.cli.client import Client
from warren.cli.commands import Context
from warren.cli.diagnostics import UnknownVerb, show_help
from warren.cli.formatters import Formatter

VERBS = sorted(main.build_parser()[1])


def test_a_typo_gets_the_one_verb_it_is_nearest_and_a_stem_gets_the_nearest_three() -> None:
    assert UnknownVerb("lis_queues", VERBS).nearest == ["list_queues"]
    assert UnknownVerb("statsu", VERBS).nearest == ["status"]
    assert UnknownVerb("clsuter_status", VERBS).nearest == ["cluster_status"]
    assert UnknownVerb("list", VERBS).nearest == ["list_users", "list_queues", "list_vhosts"]
    assert UnknownVerb("xyzzy", VERBS).nearest == []


def test_help_places_every_verb_once_and_unplaced_ones_under_other() -> None:
    out = io.StringIO()
    ctx = Context(Client("http://127.0.0.1:1", 1.0), "/", Formatter.TABLE, out=out)
    verbs = main.build_parser()[1]
    verbs["made_up_verb"] = verbs["ping"]
    assert show_help(ctx, verbs, None, {}) == 0
    listed = [line.split()[0] for line in out.getvalue().splitlines() if line.startswith("   ")]
    assert sorted(listed) == sorted(verbs)
    assert out.getvalue().split("Other:\n\n")[1].startswith("   made_up_verb ")
