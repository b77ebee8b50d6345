"""The durable definitions of a node, in SQLite: vhosts, users, permissions, topic
permissions, exchanges, queues, bindings, policies, operator policies and global
parameters (the cluster name).

Theory of operation:
1. One SQLite database file in WAL mode with ``synchronous=FULL``: a commit returns only
   after the WAL is synced, so a definition the broker acknowledged (declare-ok, a policy
   set through the API) survives kill -9 and power loss.
2. Every mutation is one transaction. Several mutations that belong together (a queue and
   the auto-delete exchange that goes with it) can share one with `transaction()`; a
   mutation inside it joins it. A failure inside rolls everything back.
3. The store keeps what the caller gives it and checks nothing about meaning: validation is
   `warren.model`'s. Arguments of exchanges, queues and bindings are opaque bytes (the AMQP
   field-table encoding from ``warren.amqp.table.encode_table`` is the intended content:
   lossless for AMQP types, and storage may not import amqp). Policy definitions are JSON.
4. Cascades follow RabbitMQ: deleting a queue deletes the bindings to it; deleting an
   exchange deletes the bindings from and to it; deleting a user deletes its permissions
   and topic permissions;
   deleting a vhost deletes everything in it.
5. Each queue row has an `incarnation` number (SQLite AUTOINCREMENT: never reused, even
   after a delete). A queue deleted and declared again gets a new one, so records in the
   message log can be keyed by it without confusing the two queues.
6. `load()` returns plain frozen dataclasses in a fixed order (by vhost, then name), so two
   loads of the same database are equal.

Threads: a store may be used from any one thread at a time (``check_same_thread`` is off so
that the runtime may move commits off its event loop).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = [
    "BindingDefinition",
    "Definitions",
    "DefinitionsError",
    "DefinitionsStore",
    "ExchangeDefinition",
    "PermissionDefinition",
    "PolicyDefinition",
    "QueueDefinition",
    "TopicPermissionDefinition",
    "UserDefinition",
    "VHostDefinition",
]

SCHEMA_VERSION: Final = 1
DEFAULT_HASHING_ALGORITHM: Final = "rabbit_password_hashing_sha256"
BUSY_TIMEOUT_MS: Final = 5_000

_SCHEMA: Final = """
CREATE TABLE vhosts (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    tags TEXT NOT NULL,
    default_queue_type TEXT
);
CREATE TABLE users (
    name TEXT PRIMARY KEY,
    password_hash TEXT NOT NULL,
    hashing_algorithm TEXT NOT NULL,
    tags TEXT NOT NULL
);
CREATE TABLE permissions (
    user TEXT NOT NULL,
    vhost TEXT NOT NULL,
    configure TEXT NOT NULL,
    write TEXT NOT NULL,
    read TEXT NOT NULL,
    PRIMARY KEY (user, vhost)
);
CREATE TABLE exchanges (
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    durable INTEGER NOT NULL,
    auto_delete INTEGER NOT NULL,
    internal INTEGER NOT NULL,
    arguments BLOB NOT NULL,
    PRIMARY KEY (vhost, name)
);
CREATE TABLE queues (
    incarnation INTEGER PRIMARY KEY AUTOINCREMENT,
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    durable INTEGER NOT NULL,
    auto_delete INTEGER NOT NULL,
    arguments BLOB NOT NULL,
    type TEXT NOT NULL,
    UNIQUE (vhost, name)
);
CREATE TABLE bindings (
    vhost TEXT NOT NULL,
    source TEXT NOT NULL,
    destination_kind TEXT NOT NULL,
    destination TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    arguments BLOB NOT NULL,
    PRIMARY KEY (vhost, source, destination_kind, destination, routing_key, arguments)
);
CREATE TABLE policies (
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    pattern TEXT NOT NULL,
    apply_to TEXT NOT NULL,
    priority INTEGER NOT NULL,
    definition TEXT NOT NULL,
    PRIMARY KEY (vhost, name)
);
CREATE TABLE operator_policies (
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    pattern TEXT NOT NULL,
    apply_to TEXT NOT NULL,
    priority INTEGER NOT NULL,
    definition TEXT NOT NULL,
    PRIMARY KEY (vhost, name)
);
"""

# Added after schema version 1 without a version of their own (CREATE IF NOT EXISTS), so
# a store of any version gets them.
_ADDED_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS topic_permissions (
    user TEXT NOT NULL,
    vhost TEXT NOT NULL,
    exchange TEXT NOT NULL,
    write TEXT NOT NULL,
    read TEXT NOT NULL,
    PRIMARY KEY (user, vhost, exchange)
)""",
    "CREATE TABLE IF NOT EXISTS global_parameters (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)

_POLICY_TABLES: Final = ("policies", "operator_policies")
_VHOST_TABLES: Final = (
    "permissions",
    "topic_permissions",
    "exchanges",
    "queues",
    "bindings",
    "policies",
    "operator_policies",
)


class DefinitionsError(Exception):
    """The definitions database cannot be used (newer schema, not a database, ...)."""


@dataclass(frozen=True, slots=True)
class VHostDefinition:
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    default_queue_type: str | None = None


@dataclass(frozen=True, slots=True)
class UserDefinition:
    name: str
    password_hash: str
    tags: tuple[str, ...] = ()
    hashing_algorithm: str = DEFAULT_HASHING_ALGORITHM


@dataclass(frozen=True, slots=True)
class PermissionDefinition:
    user: str
    vhost: str
    configure: str
    write: str
    read: str


@dataclass(frozen=True, slots=True)
class TopicPermissionDefinition:
    user: str
    vhost: str
    exchange: str
    write: str
    read: str


@dataclass(frozen=True, slots=True)
class ExchangeDefinition:
    vhost: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: bytes = b""  # encoded field table, opaque here


@dataclass(frozen=True, slots=True)
class QueueDefinition:
    vhost: str
    name: str
    durable: bool = True
    auto_delete: bool = False
    arguments: bytes = b""  # encoded field table, opaque here
    type: str = "classic"
    incarnation: int = 0  # assigned by the store; 0 in a definition not yet stored


@dataclass(frozen=True, slots=True)
class BindingDefinition:
    vhost: str
    source: str
    destination: str
    destination_kind: str  # "queue" or "exchange"
    routing_key: str = ""
    arguments: bytes = b""  # encoded field table, opaque here


@dataclass(frozen=True, slots=True)
class PolicyDefinition:
    vhost: str
    name: str
    pattern: str
    apply_to: str
    priority: int
    definition: Mapping[str, Any]  # JSON values


@dataclass(frozen=True, slots=True)
class Definitions:
    vhosts: tuple[VHostDefinition, ...] = ()
    users: tuple[UserDefinition, ...] = ()
    permissions: tuple[PermissionDefinition, ...] = ()
    exchanges: tuple[ExchangeDefinition, ...] = ()
    queues: tuple[QueueDefinition, ...] = ()
    bindings: tuple[BindingDefinition, ...] = ()
    policies: tuple[PolicyDefinition, ...] = ()
    operator_policies: tuple[PolicyDefinition, ...] = ()
    topic_permissions: tuple[TopicPermissionDefinition, ...] = ()
    global_parameters: Mapping[str, Any] = field(default_factory=dict)  # name: JSON value


def _tags(tags: tuple[str, ...]) -> str:
    return json.dumps(list(tags))


def _json(definition: Mapping[str, Any]) -> str:
    return json.dumps(dict(definition), sort_keys=True, separators=(",", ":"))


class DefinitionsStore:
    """See the module docstring. Create with `DefinitionsStore.open`."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._connection = connection
        self._in_transaction = False
        self.path = path

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> DefinitionsStore:
        file_path = Path(path)
        file_path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(
            file_path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        try:
            _prepare(connection)
        except sqlite3.DatabaseError as error:
            connection.close()
            raise DefinitionsError(f"definitions store {file_path}: {error}") from error
        except BaseException:
            connection.close()
            raise
        return cls(connection, file_path)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> DefinitionsStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Group mutations into one transaction (a nested one joins the outer)."""
        if self._in_transaction:
            yield
            return
        connection = self._connection
        connection.execute("BEGIN IMMEDIATE")
        self._in_transaction = True
        try:
            yield
        except BaseException:
            self._in_transaction = False
            connection.execute("ROLLBACK")
            raise
        self._in_transaction = False
        connection.execute("COMMIT")

    def _execute(self, sql: str, parameters: tuple[object, ...] = ()) -> sqlite3.Cursor:
        return self._connection.execute(sql, parameters)

    # --- vhosts ----------------------------------------------------------------------------

    def put_vhost(self, vhost: VHostDefinition) -> None:
        with self.transaction():
            self._execute(
                "INSERT OR REPLACE INTO vhosts VALUES (?, ?, ?, ?)",
                (vhost.name, vhost.description, _tags(vhost.tags), vhost.default_queue_type),
            )

    def delete_vhost(self, name: str) -> None:
        """Delete a vhost and everything in it."""
        with self.transaction():
            self._execute("DELETE FROM vhosts WHERE name = ?", (name,))
            for table in _VHOST_TABLES:
                self._execute(f"DELETE FROM {table} WHERE vhost = ?", (name,))

    # --- users and permissions -------------------------------------------------------------

    def put_user(self, user: UserDefinition) -> None:
        with self.transaction():
            self._execute(
                "INSERT OR REPLACE INTO users VALUES (?, ?, ?, ?)",
                (user.name, user.password_hash, user.hashing_algorithm, _tags(user.tags)),
            )

    def delete_user(self, name: str) -> None:
        """Delete a user and its permissions."""
        with self.transaction():
            self._execute("DELETE FROM users WHERE name = ?", (name,))
            self._execute("DELETE FROM permissions WHERE user = ?", (name,))
            self._execute("DELETE FROM topic_permissions WHERE user = ?", (name,))

    def put_permission(self, permission: PermissionDefinition) -> None:
        with self.transaction():
            self._execute(
                "INSERT OR REPLACE INTO permissions VALUES (?, ?, ?, ?, ?)",
                (
                    permission.user,
                    permission.vhost,
                    permission.configure,
                    permission.write,
                    permission.read,
                ),
            )

    def delete_permission(self, user: str, vhost: str) -> None:
        with self.transaction():
            self._execute("DELETE FROM permissions WHERE user = ? AND vhost = ?", (user, vhost))

    def put_topic_permission(self, permission: TopicPermissionDefinition) -> None:
        with self.transaction():
            self._execute(
                "INSERT OR REPLACE INTO topic_permissions VALUES (?, ?, ?, ?, ?)",
                (
                    permission.user,
                    permission.vhost,
                    permission.exchange,
                    permission.write,
                    permission.read,
                ),
            )

    def delete_topic_permissions(self, user: str, vhost: str, exchange: str | None) -> None:
        """Delete a user's topic permissions in a vhost: one exchange's, or all of them."""
        with self.transaction():
            if exchange is None:
                self._execute(
                    "DELETE FROM topic_permissions WHERE user = ? AND vhost = ?", (user, vhost)
                )
            else:
                self._execute(
                    "DELETE FROM topic_permissions WHERE user = ? AND vhost = ? AND exchange = ?",
                    (user, vhost, exchange),
                )

    def put_global_parameter(self, name: str, value: Any) -> None:
        with self.transaction():
            self._execute(
                "INSERT OR REPLACE INTO global_parameters VALUES (?, ?)", (name, json.dumps(value))
            )

    # --- exchanges, queues, bindings -------------------------------------------------------

    def put_exchange(self, exchange: ExchangeDefinition) -> None:
        with self.transaction():
            self._execute(
                "INSERT OR REPLACE INTO exchanges VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    exchange.vhost,
                    exchange.name,
                    exchange.type,
                    exchange.durable,
                    exchange.auto_delete,
                    exchange.internal,
                    bytes(exchange.arguments),
                ),
            )

    def delete_exchange(self, vhost: str, name: str) -> None:
        """Delete an exchange and the bindings from it and to it."""
        with self.transaction():
            self._execute("DELETE FROM exchanges WHERE vhost = ? AND name = ?", (vhost, name))
            self._execute(
                "DELETE FROM bindings WHERE vhost = ? AND (source = ?"
                " OR (destination_kind = 'exchange' AND destination = ?))",
                (vhost, name, name),
            )

    def put_queue(self, queue: QueueDefinition) -> int:
        """Insert or update a queue; return its incarnation (kept by an update)."""
        with self.transaction():
            self._execute(
                "INSERT INTO queues (vhost, name, durable, auto_delete, arguments, type)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (vhost, name) DO UPDATE SET"
                " durable = excluded.durable, auto_delete = excluded.auto_delete,"
                " arguments = excluded.arguments, type = excluded.type",
                (
                    queue.vhost,
                    queue.name,
                    queue.durable,
                    queue.auto_delete,
                    bytes(queue.arguments),
                    queue.type,
                ),
            )
            row = self._execute(
                "SELECT incarnation FROM queues WHERE vhost = ? AND name = ?",
                (queue.vhost, queue.name),
            ).fetchone()
        return int(row[0])

    def delete_queue(self, vhost: str, name: str) -> None:
        """Delete a queue and the bindings to it."""
        with self.transaction():
            self._execute("DELETE FROM queues WHERE vhost = ? AND name = ?", (vhost, name))
            self._execute(
                "DELETE FROM bindings WHERE vhost = ? AND destination_kind = 'queue'"
                " AND destination = ?",
                (vhost, name),
            )

    def put_binding(self, binding: BindingDefinition) -> None:
        if binding.destination_kind not in ("queue", "exchange"):
            raise ValueError(f"destination_kind {binding.destination_kind!r}")
        with self.transaction():
            self._execute(
                "INSERT OR IGNORE INTO bindings VALUES (?, ?, ?, ?, ?, ?)",
                (
                    binding.vhost,
                    binding.source,
                    binding.destination_kind,
                    binding.destination,
                    binding.routing_key,
                    bytes(binding.arguments),
                ),
            )

    def delete_binding(self, binding: BindingDefinition) -> None:
        with self.transaction():
            self._execute(
                "DELETE FROM bindings WHERE vhost = ? AND source = ? AND destination_kind = ?"
                " AND destination = ? AND routing_key = ? AND arguments = ?",
                (
                    binding.vhost,
                    binding.source,
                    binding.destination_kind,
                    binding.destination,
                    binding.routing_key,
                    bytes(binding.arguments),
                ),
            )

    # --- policies --------------------------------------------------------------------------

    def put_policy(self, policy: PolicyDefinition) -> None:
        self._put_policy("policies", policy)

    def delete_policy(self, vhost: str, name: str) -> None:
        self._delete_policy("policies", vhost, name)

    def put_operator_policy(self, policy: PolicyDefinition) -> None:
        self._put_policy("operator_policies", policy)

    def delete_operator_policy(self, vhost: str, name: str) -> None:
        self._delete_policy("operator_policies", vhost, name)

    def _put_policy(self, table: str, policy: PolicyDefinition) -> None:
        assert table in _POLICY_TABLES
        with self.transaction():
            self._execute(
                f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?, ?, ?, ?)",
                (
                    policy.vhost,
                    policy.name,
                    policy.pattern,
                    policy.apply_to,
                    policy.priority,
                    _json(policy.definition),
                ),
            )

    def _delete_policy(self, table: str, vhost: str, name: str) -> None:
        assert table in _POLICY_TABLES
        with self.transaction():
            self._execute(f"DELETE FROM {table} WHERE vhost = ? AND name = ?", (vhost, name))

    # --- loading ---------------------------------------------------------------------------

    def applied_index(self) -> int:
        """The last metadata log index applied to this store (0: none, or no cluster)."""
        row = self._execute("SELECT value FROM cluster_state WHERE key = 'applied'").fetchone()
        return int(row[0]) if row else 0

    def set_applied_index(self, index: int) -> None:
        with self.transaction():
            self._execute(
                "INSERT INTO cluster_state (key, value) VALUES ('applied', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (index,),
            )

    def cluster_nodes(self) -> dict[str, tuple[str, int]]:
        """Nodes that joined a cluster after it formed: name -> cluster listener address."""
        rows = self._execute("SELECT key, value FROM cluster_state WHERE key LIKE 'node:%'")
        nodes: dict[str, tuple[str, int]] = {}
        for key, value in rows.fetchall():
            host, _, port = str(value).rpartition(":")
            nodes[key[len("node:") :]] = (host, int(port))
        return nodes

    def put_cluster_node(self, name: str, host: str, port: int) -> None:
        with self.transaction():
            self._execute(
                "INSERT OR REPLACE INTO cluster_state (key, value) VALUES (?, ?)",
                (f"node:{name}", f"{host}:{port}"),
            )

    def delete_cluster_node(self, name: str) -> None:
        with self.transaction():
            self._execute("DELETE FROM cluster_state WHERE key = ?", (f"node:{name}",))

    def load(self) -> Definitions:
        """Everything stored, in a fixed order."""
        with self.transaction():  # one consistent snapshot
            return Definitions(
                vhosts=tuple(
                    VHostDefinition(name, description, tuple(json.loads(tags)), queue_type)
                    for name, description, tags, queue_type in self._execute(
                        "SELECT * FROM vhosts ORDER BY name"
                    )
                ),
                users=tuple(
                    UserDefinition(name, password_hash, tuple(json.loads(tags)), algorithm)
                    for name, password_hash, algorithm, tags in self._execute(
                        "SELECT * FROM users ORDER BY name"
                    )
                ),
                permissions=tuple(
                    PermissionDefinition(*row)
                    for row in self._execute("SELECT * FROM permissions ORDER BY user, vhost")
                ),
                exchanges=tuple(
                    ExchangeDefinition(
                        vhost, name, type_, bool(durable), bool(auto_delete), bool(internal), args
                    )
                    for vhost, name, type_, durable, auto_delete, internal, args in self._execute(
                        "SELECT * FROM exchanges ORDER BY vhost, name"
                    )
                ),
                queues=tuple(
                    QueueDefinition(
                        vhost, name, bool(durable), bool(auto_delete), args, kind, number
                    )
                    for number, vhost, name, durable, auto_delete, args, kind in self._execute(
                        "SELECT * FROM queues ORDER BY vhost, name"
                    )
                ),
                bindings=tuple(
                    BindingDefinition(vhost, source, destination, kind, routing_key, args)
                    for vhost, source, kind, destination, routing_key, args in self._execute(
                        "SELECT * FROM bindings ORDER BY vhost, source, destination_kind,"
                        " destination, routing_key, arguments"
                    )
                ),
                policies=self._load_policies("policies"),
                operator_policies=self._load_policies("operator_policies"),
                topic_permissions=tuple(
                    TopicPermissionDefinition(*row)
                    for row in self._execute(
                        "SELECT * FROM topic_permissions ORDER BY user, vhost, exchange"
                    )
                ),
                global_parameters={
                    name: json.loads(value)
                    for name, value in self._execute(
                        "SELECT * FROM global_parameters ORDER BY name"
                    )
                },
            )

    def _load_policies(self, table: str) -> tuple[PolicyDefinition, ...]:
        assert table in _POLICY_TABLES
        return tuple(
            PolicyDefinition(vhost, name, pattern, apply_to, priority, json.loads(definition))
            for vhost, name, pattern, apply_to, priority, definition in self._execute(
                f"SELECT * FROM {table} ORDER BY vhost, name"
            )
        )


def _prepare(connection: sqlite3.Connection) -> None:
    mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise DefinitionsError(f"cannot switch the definitions store to WAL mode ({mode})")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("BEGIN IMMEDIATE")
    try:
        # what a cluster node's metadata group has applied (`applied_index`); added
        # without a schema version of its own, so a store of any version gets it
        connection.execute(
            "CREATE TABLE IF NOT EXISTS cluster_state (key TEXT PRIMARY KEY, value INTEGER)"
        )
        for statement in _ADDED_TABLES:
            connection.execute(statement)
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version != SCHEMA_VERSION:
            raise DefinitionsError(
                f"definitions schema version {version} is not supported (this is {SCHEMA_VERSION})"
            )
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")
