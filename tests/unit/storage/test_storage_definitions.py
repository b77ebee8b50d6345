"""The definitions store: round trip, reopening, cascades, transactions, durability."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from warren.amqp.table import Typed, decode_table_typed, encode_table
from warren.storage.definitions import (
    BindingDefinition,
    Definitions,
    DefinitionsError,
    DefinitionsStore,
    ExchangeDefinition,
    PermissionDefinition,
    PolicyDefinition,
    QueueDefinition,
    UserDefinition,
    VHostDefinition,
)

QUEUE_ARGUMENTS = {
    "x-max-length": Typed("b", 10),  # a byte, as some clients send it: must stay a byte
    "x-message-ttl": Typed("l", 60_000),
    "x-dead-letter-exchange": Typed("S", "dlx"),
}


def populate(store: DefinitionsStore) -> Definitions:
    """Store one of everything; return what `load` must give back."""
    vhosts = (
        VHostDefinition("/", "default", ()),
        VHostDefinition("other", "", ("prod", "eu"), "quorum"),
    )
    users = (UserDefinition("guest", "aGFzaA==", ("administrator",)),)
    permissions = (PermissionDefinition("guest", "/", ".*", ".*", ".*"),)
    exchanges = (
        ExchangeDefinition("/", "dlx", "fanout"),
        ExchangeDefinition(
            "/", "events", "topic", True, True, True, encode_table({"alternate-exchange": "ae"})
        ),
    )
    queue = QueueDefinition("/", "orders", True, False, encode_table(QUEUE_ARGUMENTS))
    bindings = (
        BindingDefinition("/", "events", "orders", "queue", "order.*"),
        BindingDefinition("/", "events", "dlx", "exchange", "#", encode_table({"k": 1})),
    )
    policy = PolicyDefinition("/", "ttl", "^orders$", "queues", 1, {"message-ttl": 5000})
    operator_policy = PolicyDefinition("/", "cap", ".*", "all", 0, {"max-length": 1000})
    for vhost in vhosts:
        store.put_vhost(vhost)
    store.put_user(users[0])
    store.put_permission(permissions[0])
    for exchange in exchanges:
        store.put_exchange(exchange)
    incarnation = store.put_queue(queue)
    for binding in bindings:
        store.put_binding(binding)
    store.put_policy(policy)
    store.put_operator_policy(operator_policy)
    return Definitions(
        vhosts=vhosts,
        users=users,
        permissions=permissions,
        exchanges=exchanges,
        queues=(
            QueueDefinition("/", "orders", True, False, queue.arguments, "classic", incarnation),
        ),
        bindings=tuple(sorted(bindings, key=lambda b: (b.destination_kind, b.destination))),
        policies=(policy,),
        operator_policies=(operator_policy,),
    )


def test_everything_stored_loads_back_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "definitions.sqlite3"
    with DefinitionsStore.open(path) as store:
        expected = populate(store)
        assert store.load() == expected
    with DefinitionsStore.open(path) as store:
        loaded = store.load()
    assert loaded == expected
    assert decode_table_typed(loaded.queues[0].arguments) == QUEUE_ARGUMENTS


def test_a_new_store_is_empty_and_in_wal_mode_with_full_sync(tmp_path: Path) -> None:
    path = tmp_path / "definitions.sqlite3"
    with DefinitionsStore.open(path) as store:
        assert store.load() == Definitions()
        connection = store._connection
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_a_queue_keeps_its_incarnation_until_it_is_deleted(tmp_path: Path) -> None:
    with DefinitionsStore.open(tmp_path / "d.sqlite3") as store:
        first = store.put_queue(QueueDefinition("/", "q"))
        other = store.put_queue(QueueDefinition("/", "r"))
        assert store.put_queue(QueueDefinition("/", "q", auto_delete=True)) == first
        store.delete_queue("/", "r")
        store.delete_queue("/", "q")
        again = store.put_queue(QueueDefinition("/", "q"))
        assert again > other > first  # never reused, not even the highest one
        assert store.load().queues == (QueueDefinition("/", "q", incarnation=again),)


def test_deleting_a_queue_deletes_the_bindings_to_it(tmp_path: Path) -> None:
    with DefinitionsStore.open(tmp_path / "d.sqlite3") as store:
        expected = populate(store)
        store.delete_queue("/", "orders")
        loaded = store.load()
    assert loaded.queues == ()
    assert loaded.bindings == tuple(b for b in expected.bindings if b.destination != "orders")


def test_deleting_an_exchange_deletes_the_bindings_from_and_to_it(tmp_path: Path) -> None:
    with DefinitionsStore.open(tmp_path / "d.sqlite3") as store:
        populate(store)
        store.put_binding(BindingDefinition("/", "amq.direct", "dlx", "exchange", "x"))
        store.put_binding(BindingDefinition("/", "amq.direct", "orders", "queue", "x"))
        store.delete_exchange("/", "dlx")
        loaded = store.load()
    assert [e.name for e in loaded.exchanges] == ["events"]
    assert loaded.bindings == (
        BindingDefinition("/", "amq.direct", "orders", "queue", "x"),
        BindingDefinition("/", "events", "orders", "queue", "order.*"),
    )


def test_deleting_a_user_deletes_its_permissions(tmp_path: Path) -> None:
    with DefinitionsStore.open(tmp_path / "d.sqlite3") as store:
        populate(store)
        store.delete_user("guest")
        loaded = store.load()
    assert loaded.users == () and loaded.permissions == ()


def test_deleting_a_vhost_deletes_everything_in_it_and_nothing_else(tmp_path: Path) -> None:
    with DefinitionsStore.open(tmp_path / "d.sqlite3") as store:
        populate(store)
        store.put_queue(QueueDefinition("other", "kept"))
        store.put_policy(PolicyDefinition("other", "p", ".*", "all", 0, {}))
        store.delete_vhost("/")
        loaded = store.load()
    assert [v.name for v in loaded.vhosts] == ["other"]
    assert [(q.vhost, q.name) for q in loaded.queues] == [("other", "kept")]
    assert [(p.vhost, p.name) for p in loaded.policies] == [("other", "p")]
    assert loaded.exchanges == loaded.bindings == loaded.permissions == ()
    assert loaded.operator_policies == ()
    assert [u.name for u in loaded.users] == ["guest"]  # users do not belong to a vhost


def test_updates_replace_and_deletes_are_exact(tmp_path: Path) -> None:
    with DefinitionsStore.open(tmp_path / "d.sqlite3") as store:
        populate(store)
        store.put_policy(PolicyDefinition("/", "ttl", "^o", "queues", 7, {"expires": 1}))
        store.delete_operator_policy("/", "cap")
        store.delete_permission("guest", "/")
        store.delete_binding(BindingDefinition("/", "events", "dlx", "exchange", "#"))  # args
        loaded = store.load()
    assert loaded.policies == (PolicyDefinition("/", "ttl", "^o", "queues", 7, {"expires": 1}),)
    assert loaded.operator_policies == () and loaded.permissions == ()
    assert len(loaded.bindings) == 2  # the binding with other arguments is a different one


def test_mutations_in_one_transaction_all_happen_or_none(tmp_path: Path) -> None:
    with DefinitionsStore.open(tmp_path / "d.sqlite3") as store:
        with pytest.raises(RuntimeError), store.transaction():
            store.put_queue(QueueDefinition("/", "q"))
            store.put_exchange(ExchangeDefinition("/", "x", "direct"))
            raise RuntimeError("the broker changed its mind")
        assert store.load() == Definitions()
        with store.transaction():
            store.put_queue(QueueDefinition("/", "q"))
            store.put_exchange(ExchangeDefinition("/", "x", "direct"))
        loaded = store.load()
    assert [q.name for q in loaded.queues] == ["q"] and [e.name for e in loaded.exchanges] == ["x"]


def test_a_binding_to_something_that_is_neither_queue_nor_exchange_is_refused(
    tmp_path: Path,
) -> None:
    with DefinitionsStore.open(tmp_path / "d.sqlite3") as store, pytest.raises(ValueError):
        store.put_binding(BindingDefinition("/", "x", "q", "topic"))


def test_a_newer_schema_or_a_foreign_file_is_refused(tmp_path: Path) -> None:
    newer = tmp_path / "newer.sqlite3"
    connection = sqlite3.connect(newer)
    connection.execute("PRAGMA user_version = 99")
    connection.close()
    with pytest.raises(DefinitionsError, match="schema version 99"):
        DefinitionsStore.open(newer)
    foreign = tmp_path / "foreign.sqlite3"
    foreign.write_bytes(b"this is not a database" * 100)
    with pytest.raises(DefinitionsError):
        DefinitionsStore.open(foreign)


CHILD = """
import sys
from warren.storage.definitions import DefinitionsStore, QueueDefinition
store = DefinitionsStore.open(sys.argv[1])
for number in range(1_000_000):
    store.put_queue(QueueDefinition("/", "q%d" % number))
    sys.stdout.write("%d\\n" % number)
    sys.stdout.flush()
"""


def test_a_committed_definition_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "d.sqlite3"
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        committed = [child.stdout.readline() for _ in range(50)]
        child.send_signal(signal.SIGKILL)
        child.wait()
        committed += child.stdout.readlines()
    done = {int(line) for line in committed if line.endswith("\n")}
    with DefinitionsStore.open(path) as store:
        names = {q.name for q in store.load().queues}
    assert {f"q{number}" for number in done} <= names
