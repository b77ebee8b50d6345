"""Node configuration: defaults, then the TOML file, then `WARREN_*` variables, then flags.

Each setting has one name, used in all three places: ``port`` in TOML, ``WARREN_PORT``
in the environment and ``--port`` on the command line (underscores become dashes).
Later sources win, so a test can start several nodes side by side from one config file.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from warren.model.settings import DEAD_LETTER_PREFETCH_DEFAULT
from warren.runtime.passwords import ALGORITHMS
from warren.runtime.sizes import memory_limit_bytes, parse_size


@dataclass(slots=True)
class Config:
    port: int = 5672
    management_port: int = 15672
    data_dir: Path = Path("./data")
    bind: list[str] = field(default_factory=lambda: ["127.0.0.1", "::1"])
    node_name: str = "warren@localhost"
    default_user: str = "guest"
    default_pass: str = "guest"
    password_hashing_module: str = "warren_password_hashing_pbkdf2_sha256"
    loopback_users: list[str] = field(default_factory=lambda: ["guest"])
    heartbeat: int = 60
    frame_max: int = 131072
    channel_max: int = 2047
    max_message_size: int = 128 * 1024 * 1024
    connection_max: int = 0
    handshake_timeout: int = 10000
    log_level: str = "info"
    log_segment_max_bytes: int = 64 * 1024 * 1024
    queue_resident_messages_max: int = 16384
    queue_resident_bytes_max: int = 16 * 1024 * 1024
    ssl_port: int = 5671
    management_ssl_port: int = 15671
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_cacertfile: str = ""
    ssl_verify: str = "verify_none"
    ssl_fail_if_no_peer_cert: bool = False
    ssl_cert_login_from: str = "distinguished_name"
    vm_memory_high_watermark: str = "0.4"
    vm_memory_high_watermark_paging_ratio: float = 0.5
    disk_free_limit: str = "50MB"
    dead_letter_worker_consumer_prefetch: int = DEAD_LETTER_PREFETCH_DEFAULT
    cluster_nodes: list[str] = field(default_factory=list)
    cluster_port: int = 25672
    cluster_cookie: str = ""
    cluster_submit_timeout: int = 30000
    quorum_cluster_size: int = 3
    queue_leader_locator: str = "client-local"
    quorum_commands_soft_limit: int = 32
    raft_wal_max_size_bytes: int = 64 * 1024 * 1024
    raft_tick_ms: int = 100
    raft_snapshot_entries: int = 4096
    workers: int = 0  # the data directory's number, one per core for a new one


_HELP = {
    "port": "AMQP port (default 5672)",
    "management_port": "HTTP management port (default 15672)",
    "data_dir": "directory for the node's data (default ./data)",
    "bind": "addresses to listen on, comma separated (default 127.0.0.1,::1)",
    "node_name": "this node's name",
    "default_user": "user created on first start",
    "default_pass": "password of the default user",
    "password_hashing_module": (
        "how new passwords are hashed: warren_password_hashing_pbkdf2_sha256 (slow, the"
        " default) or RabbitMQ's rabbit_password_hashing_sha256/_sha512/_md5"
    ),
    "loopback_users": "users allowed to connect only from loopback, comma separated",
    "heartbeat": "heartbeat interval the server proposes, seconds (0 disables)",
    "frame_max": "largest frame the server accepts, bytes",
    "channel_max": "most channels per connection",
    "max_message_size": "largest message body accepted, bytes (default 128 MiB, at most 512 MiB)",
    "connection_max": "most client connections the node accepts (default 0: no limit)",
    "handshake_timeout": "time a client has to open its connection, milliseconds (default 10000)",
    "log_level": "debug, info, warning or error",
    "log_segment_max_bytes": "size at which the message log starts a new segment file, bytes",
    "queue_resident_messages_max": (
        "ready messages a durable queue keeps in memory; persistent messages beyond it are"
        " read back from the log when delivered"
    ),
    "queue_resident_bytes_max": "the same bound in message body bytes",
    "ssl_port": "AMQPS port, used when ssl_certfile and ssl_keyfile are set (default 5671)",
    "management_ssl_port": "HTTPS management port, with the same certificate (default 15671)",
    "ssl_certfile": "PEM certificate (chain) of this node; enables the TLS listeners",
    "ssl_keyfile": "PEM private key of ssl_certfile",
    "ssl_cacertfile": "PEM CA certificates that client certificates are verified against",
    "ssl_verify": "verify_none, or verify_peer to verify client certificates",
    "ssl_fail_if_no_peer_cert": "with verify_peer: refuse clients without a certificate",
    "vm_memory_high_watermark": (
        "memory use that blocks publishers: a fraction of RAM (0.4) or a size (512MiB)"
    ),
    "vm_memory_high_watermark_paging_ratio": (
        "share of the memory watermark above which queues page messages out (default 0.5)"
    ),
    "disk_free_limit": "free disk below which publishers are blocked (default 50MB)",
    "dead_letter_worker_consumer_prefetch": (
        "dead-lettered messages a quorum queue with at-least-once dead-lettering sends before"
        " its target queues have taken them (default 32)"
    ),
    "cluster_nodes": (
        "the cluster's nodes as name=host:port of their cluster listeners, comma separated;"
        " empty: a single node"
    ),
    "cluster_port": (
        "port of this node's cluster listener; in a cluster, worker i of a node of several"
        " workers listens on it + i (default 25672)"
    ),
    "cluster_cookie": "shared secret every node of the cluster must have",
    "cluster_submit_timeout": (
        "how long a command waits for a queue's leader (elections), milliseconds"
    ),
    "quorum_cluster_size": "replicas of a new quorum queue (x-quorum-initial-group-size)",
    "queue_leader_locator": (
        "where a new quorum queue's leader goes: client-local (the declaring node), balanced"
        " (the member leading the fewest queues) or random; x-queue-leader-locator and the"
        " queue-leader-locator policy key win"
    ),
    "quorum_commands_soft_limit": (
        "publishes to quorum queues a channel may have waiting for their commit before its"
        " connection stops reading (default 32, as RabbitMQ's)"
    ),
    "raft_wal_max_size_bytes": "size at which the Raft write-ahead log starts a new segment",
    "raft_tick_ms": "Raft's tick; a leader is suspected after 10 to 20 ticks of silence",
    "raft_snapshot_entries": "applied Raft entries after which a group's log is snapshotted",
    "workers": (
        "worker processes of this node, sharing its ports (default 0: as many as its data"
        " directory was made with, one per core for a new one; 1: one process); fixed once"
        " the data directory exists, docs/internals/workers.md"
    ),
    "ssl_cert_login_from": (
        "what of a client certificate is the EXTERNAL login name: distinguished_name or common_name"
    ),
}


_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
LOG_LEVELS = ("debug", "info", "warning", "error")
# ssl_verify and ssl_cert_login_from, as RabbitMQ spells them (`warren.runtime.tls`)
VERIFY_MODES = ("verify_none", "verify_peer")
LOGIN_FROM = ("distinguished_name", "common_name")
MESSAGE_SIZE_MAX = 512 * 1024 * 1024  # RabbitMQ's cap on max_message_size


class ConfigError(ValueError):
    """A setting the node cannot start with, worded for the person who set it: one line
    naming the setting, where it came from and what it takes."""


def _check_max_message_size(size: int) -> None:
    if not 0 < size <= MESSAGE_SIZE_MAX:
        raise ValueError(f"must be between 1 and {MESSAGE_SIZE_MAX}")


def _check_fraction(ratio: float) -> None:
    if not 0 <= ratio <= 1:
        raise ValueError("must be between 0 and 1")


def _check_workers(count: int) -> None:
    if count < 0:
        raise ValueError(
            "must be 0 (the data directory's number, one per core for a new one) or more"
        )


def _check_one_of(*choices: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")

    return check


# Checks of values that convert but make no sense; each raises ValueError saying what fits.
_CHECKS: dict[str, Callable[[Any], object]] = {
    "max_message_size": _check_max_message_size,
    "password_hashing_module": _check_one_of(*ALGORITHMS),
    "log_level": lambda level: _check_one_of(*LOG_LEVELS)(level.lower()),
    "ssl_verify": _check_one_of(*VERIFY_MODES),
    "ssl_cert_login_from": _check_one_of(*LOGIN_FROM),
    "vm_memory_high_watermark_paging_ratio": _check_fraction,
    "vm_memory_high_watermark": lambda text: memory_limit_bytes(text, 1),
    "disk_free_limit": parse_size,
    "workers": _check_workers,
}


def _convert(name: str, value: Any) -> Any:
    kind = {f.name: f for f in fields(Config)}[name].type
    if kind == "int":
        if isinstance(value, bool) or not str(value).strip().lstrip("+-").isdigit():
            raise ValueError("must be a whole number")
        return int(value)
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError("must be a number") from None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in _BOOLEANS:
            raise ValueError("must be true or false")
        return _BOOLEANS[text]
    if kind == "Path":
        return Path(value)
    if kind == "list[str]":
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return [str(part) for part in value]
    return str(value)


def flag(name: str) -> str:
    """Setting `name`'s command-line flag: ``--management-port`` for ``management_port``."""
    return "--" + name.replace("_", "-")


def variable(name: str) -> str:
    """Setting `name`'s environment variable: ``WARREN_MANAGEMENT_PORT``."""
    return "WARREN_" + name.upper()


def load(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """The node's settings; raises ConfigError for a file it cannot read or a value that
    does not fit (argparse still exits on flags it does not know)."""
    parser = argparse.ArgumentParser(prog="warren-server", description="Run a Warren node.")
    parser.add_argument("--config", type=Path, help="TOML configuration file")
    for item in fields(Config):
        parser.add_argument(flag(item.name), help=_HELP[item.name])
    args = parser.parse_args(argv)
    environ = os.environ if environ is None else environ

    values: dict[str, tuple[Any, str]] = {}  # name: (value, where it was set)
    config_file = args.config or (
        Path(environ["WARREN_CONFIG"]) if "WARREN_CONFIG" in environ else None
    )
    if config_file is not None:
        document = _read_toml(config_file)
        unknown = set(document) - {f.name for f in fields(Config)}
        if unknown:
            raise ConfigError(
                f"unknown settings in {config_file}: {', '.join(sorted(unknown))}"
                " (warren-server --help lists them)"
            )
        values.update((name, (value, str(config_file))) for name, value in document.items())
    for item in fields(Config):
        env_name = variable(item.name)
        if env_name in environ:
            values[item.name] = (environ[env_name], env_name)
        given = getattr(args, item.name)
        if given is not None:
            values[item.name] = (given, flag(item.name))
    converted: dict[str, Any] = {}
    for name, (value, source) in values.items():
        try:
            converted[name] = _convert(name, value)
            _CHECKS.get(name, lambda _: None)(converted[name])
        except ValueError as error:
            default = getattr(Config(), name)
            raise ConfigError(
                f"bad {name} = {value!r} (from {source}): {error};"
                f" fix it, or leave it out for the default {default}"
            ) from None
    return dataclasses.replace(Config(), **converted)


SECRETS = ("default_pass", "cluster_cookie")


def environment(config: Config) -> dict[str, Any]:
    """Every setting with its effective value, as TOML would spell it; secrets hidden."""
    shown: dict[str, Any] = {}
    for item in fields(Config):
        value = getattr(config, item.name)
        if item.name in SECRETS and value:
            value = "********"
        shown[item.name] = str(value) if isinstance(value, Path) else value
    return shown


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"cannot read the config file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"the config file {path} is not valid TOML: {error}") from None
