"""warrenctl's formatters and argument renderings, against rabbitmqctl 3.10.8's output.

The pretty tables are the ones printed in RabbitMQ's length-limit guide, kept in
`data/length-limit-guide-tables.txt`;
the argument texts are what rabbitmqctl printed for a queue declared by pika with the same
arguments.
"""

from __future__ import annotations

from pathlib import Path

from warren.cli import formatters, terms

GUIDE_TABLES = Path(__file__).parent / "data" / "length-limit-guide-tables.txt"

ARGUMENTS = {
    "x-dead-letter-exchange": "dlx",
    "x-custom": "1.5",
    "x-tbl": {"a": 1},
    "x-arr": [1, "b"],
    "x-bool": True,
    "x-big": 2**40,
}


def guide_tables() -> list[str]:
    """The pretty tables printed in the length-limit guide (``# => `` lines), in order."""
    tables: list[list[str]] = []
    previous_was_table = False
    for line in GUIDE_TABLES.read_text().splitlines():
        is_table = line.startswith("# => ")
        if is_table and not previous_was_table:
            tables.append([])
        if is_table:
            tables[-1].append(line.removeprefix("# => "))
        previous_was_table = is_table
    return ["\n".join(table) for table in tables]


def test_pretty_tables_are_the_guides() -> None:
    queues, policies = guide_tables()
    quorum = '{<<"x-queue-type">>,longstr,<<"quorum">>}'
    rows = [
        ["qq.1", "true", quorum + '{<<"x-max-length">>,long,7}', ""],
        ["limited.qq.3", "true", quorum, "limited"],
        ["limited.cq.1", "true", terms.erlang_table({"x-queue-type": "classic"}), "limited"],
        ["qq.2", "true", terms.erlang_table({"x-queue-type": "quorum"}), ""],
    ]
    assert formatters.pretty_table(["name", "durable", "arguments", "policy"], rows) == queues
    columns = ["vhost", "name", "pattern", "apply-to", "definition", "priority"]
    row = ["/", "limited", "^limited\\.", "queues", '{"max-length":11}', "0"]
    assert formatters.pretty_table(columns, [row]) == policies


def test_argument_renderings_match_rabbitmqctl() -> None:
    assert terms.erlang_table(ARGUMENTS) == (
        '{<<"x-dead-letter-exchange">>,longstr,<<"dlx">>}{<<"x-custom">>,longstr,<<"1.5">>}'
        '{<<"x-tbl">>,table,[{<<"a">>,signedint,1}]}'
        '{<<"x-arr">>,array,[{signedint,1},{longstr,<<"b">>}]}'
        '{<<"x-bool">>,bool,true}{<<"x-big">>,long,1099511627776}'
    )
    assert terms.inspect_table(ARGUMENTS) == (
        '[{"x-dead-letter-exchange","dlx"},{"x-custom","1.5"},{"x-tbl",[{"a",1}]},'
        '{"x-arr",[1,"b"]},{"x-bool",true},{"x-big",1099511627776}]'
    )
    assert terms.typed_json(ARGUMENTS) == [
        ["x-dead-letter-exchange", "longstr", "dlx"],
        ["x-custom", "longstr", "1.5"],
        ["x-tbl", "table", [["a", "signedint", 1]]],
        ["x-arr", "array", {"signedint": 1, "longstr": "b"}],
        ["x-bool", "bool", True],
        ["x-big", "long", 1099511627776],
    ]
    assert terms.inspect_table({}) == "[]" and terms.erlang_table({}) == ""


def test_table_csv_and_json_shapes() -> None:
    columns, rows = ["name", "messages"], [["a", "1"], ["b", "2"]]
    assert formatters.table(columns, rows, header=True) == "name\tmessages\na\t1\nb\t2"
    assert formatters.table(columns, rows, header=False) == "a\t1\nb\t2"
    assert formatters.table(columns, [], header=True) == ""
    assert formatters.csv(["name", "arguments"], [["q", '[{"x",1}]']], header=True) == (
        '"name","arguments"\n"q","[{""x"",1}]"'
    )
    objects = [{"name": "a", "messages": 1}, {"name": "b", "messages": 2}]
    assert formatters.json_lines(objects) == (
        '[\n{"name":"a","messages":1}\n,{"name":"b","messages":2}\n]'
    )
    assert formatters.json_lines([]) == "[\n]"
    assert formatters.text(None) == "" and formatters.text(False) == "false"


def test_wide_characters_take_two_columns() -> None:
    table = formatters.pretty_table(["name"], [["队列"], ["ab"]])
    assert table.splitlines()[1] == "│ name │"
    assert table.splitlines()[3] == "│ 队列 │"
