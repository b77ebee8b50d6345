"""Admin calls for what is live on the node: connections, channels, consumers, the node.

Theory of operation:
1. Read at the moment of the call from the connections the broker holds, so counts are
   never stale. Names are RabbitMQ's: a connection is ``"peer -> local"``
   (``127.0.0.1:39372 -> 127.0.0.1:5672``), a channel ``"<connection> (<number>)"``.
2. Message counters come from each channel's `MessageStats`; rates are added by
   `warren.mgmt` from samples over time, not here.
3. Closing a connection sends connection.close 320 ``CONNECTION_FORCED - Closed via
   management plugin`` (or the given reason), as RabbitMQ does.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from warren.errors import HardError, ReplyCode
from warren.runtime import admin_neutral, alarms, sizes
from warren.runtime.admin import EXCHANGE_TYPES, NotFound, plain_arguments, plain_value
from warren.runtime.connection import AmqpConnection
from warren.runtime.stats import MessageStats

if TYPE_CHECKING:
    from warren.runtime.broker import Broker
    from warren.runtime.channel import Channel

Json = dict[str, Any]
PROTOCOL = "AMQP 0-9-1"


def connections(broker: Broker) -> list[AmqpConnection]:
    """Open connections that finished the handshake (they have a vhost), by name."""
    found = [
        c for c in list(broker.connections) if isinstance(c, AmqpConnection) and c.vhost is not None
    ]
    found.sort(key=connection_name)
    return found


def connection_name(connection: Any) -> str:
    local = connection.transport.get_extra_info("sockname") if connection.transport else None
    here = f"{local[0]}:{local[1]}" if local else "?"
    return f"{connection.peer} -> {here}"


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port) if port.isdigit() else 0


def connection_json(broker: Broker, connection: AmqpConnection) -> Json:
    name = connection_name(connection)
    peer_host, peer_port = _split(connection.peer)
    host, port = _split(name.split(" -> ", 1)[1])
    properties = plain_value(connection.client_properties)
    provided = properties.get("connection_name") if isinstance(properties, dict) else None
    json: Json = {
        "name": name,
        "node": broker.config.node_name,  # on a node of several: the worker
        "vhost": connection.vhost.name,
        "user": connection.user,
        "user_who_performed_action": connection.user,
        "type": "network",
        "protocol": PROTOCOL,
        "auth_mechanism": connection.auth_mechanism,
        "state": "blocked" if connection.paused else "running",
        "channels": len(connection.channels),
        "channel_max": connection.protocol.channel_max,
        "frame_max": connection.frame_max,
        "timeout": connection.heartbeat_s,
        "connected_at": connection.connected_at_ms,
        "client_properties": properties,
        "host": host,
        "port": port,
        "peer_host": peer_host,
        "peer_port": peer_port,
        "ssl": bool(connection.transport and connection.transport.get_extra_info("ssl_object")),
        "ssl_protocol": "",
        "ssl_key_exchange": "",
        "ssl_cipher": "",
        "ssl_hash": "",
        "peer_cert_subject": "",
        "peer_cert_issuer": "",
        "peer_cert_validity": "",
        "recv_oct": connection.recv_oct,
        "recv_cnt": connection.recv_cnt,
        "send_oct": connection.send_oct,
        "send_cnt": connection.send_cnt,
        "send_pend": 0,
    }
    if provided is not None:
        json["user_provided_name"] = provided
    return admin_neutral.fill(json, admin_neutral.CONNECTION)


def find_connection(broker: Broker, name: str) -> AmqpConnection:
    for connection in connections(broker):
        if connection_name(connection) == name:
            return connection
    raise NotFound()


def close_connection(broker: Broker, name: str, reason: str | None = None) -> None:
    connection = find_connection(broker, name)
    text = reason or "Closed via management plugin"
    connection.close_with(HardError(ReplyCode.CONNECTION_FORCED, text))
    connection.flush()


# --- Channels ---


def channels(broker: Broker) -> Iterator[Channel]:
    for connection in connections(broker):
        for number in sorted(connection.channels):
            yield connection.channels[number]


def channel_name(channel: Channel) -> str:
    return f"{connection_name(channel.connection)} ({channel.number})"


def channel_json(broker: Broker, channel: Channel, *, details: bool = False) -> Json:
    connection = channel.connection
    peer_host, peer_port = _split(connection.peer)
    transaction = channel.transaction
    confirms = channel.confirms
    json: Json = {
        "name": channel_name(channel),
        "node": broker.config.node_name,  # on a node of several: the worker
        "number": channel.number,
        "vhost": channel.vhost.name,
        "user": connection.user,
        "user_who_performed_action": connection.user,
        "connection_details": {
            "name": connection_name(connection),
            "peer_host": peer_host,
            "peer_port": peer_port,
        },
        "state": "running",
        "confirm": confirms is not None,
        "transactional": transaction is not None,
        "consumer_count": len(channel.consumers),
        "prefetch_count": channel.prefetch_count,
        "global_prefetch_count": channel.global_prefetch,
        "messages_unacknowledged": len(channel.unacked),
        "messages_unconfirmed": confirms.unconfirmed if confirms is not None else 0,
        "messages_uncommitted": len(transaction.publishes) if transaction else 0,
        "acks_uncommitted": sum(len(t) for _c, t in transaction.settlements) if transaction else 0,
        "pending_raft_commands": 0,
        "message_stats": channel.stats.counts(),
    }
    if details:
        json["consumer_details"] = [
            consumer_json(broker, channel, tag) for tag in sorted(channel.consumers)
        ]
        json["publishes"] = []
        json["deliveries"] = []
    return admin_neutral.fill(json, admin_neutral.PROCESS)


def find_channel(broker: Broker, name: str) -> Channel:
    for channel in channels(broker):
        if channel_name(channel) == name:
            return channel
    raise NotFound()


# --- Consumers ---


def consumer_json(broker: Broker, channel: Channel, tag: str) -> Json:
    consumer = channel.consumers[tag]
    host = consumer.host
    connection = channel.connection
    peer_host, peer_port = _split(connection.peer)
    exclusive = host is not None and host.machine.exclusive_consumer == consumer.key
    return {
        "consumer_tag": tag,
        "ack_required": not consumer.no_ack,
        "prefetch_count": channel.prefetch_count,
        "exclusive": exclusive,
        "active": True,
        "activity_status": "up",
        "arguments": plain_arguments(consumer.arguments),
        "queue": {
            "name": host.name if host is not None else "amq.rabbitmq.reply-to",
            "vhost": channel.vhost.name,
        },
        "channel_details": {
            "name": channel_name(channel),
            "number": channel.number,
            "connection_name": connection_name(connection),
            "peer_host": peer_host,
            "peer_port": peer_port,
            "user": connection.user,
            "node": broker.config.node_name,  # on a node of several: the worker
        },
    }


def consumers(broker: Broker, vhost: str | None = None) -> list[Json]:
    return [
        consumer_json(broker, channel, tag)
        for channel in channels(broker)
        if vhost is None or channel.vhost.name == vhost
        for tag in sorted(channel.consumers)
        if channel.consumers[tag].host is not None
    ]


def queue_consumers(broker: Broker, vhost: str, queue: str) -> list[Json]:
    return [c for c in consumers(broker, vhost) if c["queue"]["name"] == queue]


# --- Message counters ---


def vhost_stats(broker: Broker, vhost: str) -> MessageStats:
    """Counts of the vhost's closed channels plus its open ones."""
    total = MessageStats()
    retired = broker.retired_stats.get(vhost)
    if retired is not None:
        total.add(retired)
    for channel in channels(broker):
        if channel.vhost.name == vhost:
            total.add(channel.stats)
    return total


def node_stats(broker: Broker) -> MessageStats:
    total = MessageStats.total(broker.retired_stats.values())
    for channel in channels(broker):
        total.add(channel.stats)
    return total


# --- The node ---


def node_json(broker: Broker) -> Json:
    config = broker.config
    soft_fds, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        fd_used = len(os.listdir("/proc/self/fd"))
    except OSError:
        fd_used = 0
    data_dir = str(config.data_dir)
    try:
        stat = os.statvfs(data_dir)
        disk_free = stat.f_bavail * stat.f_frsize
    except OSError:
        disk_free = 0
    board = broker.board  # on a node of several workers: the node's figures
    node: Json = {
        "name": broker.node_name,
        "type": "disc",
        "running": True,
        "os_pid": str(os.getpid()),
        "uptime": int(time.time() * 1000) - broker.started_at_ms,
        "processors": os.cpu_count() or 1,
        "rates_mode": "basic",
        "partitions": [],
        "mem_used": alarms.used_memory_bytes() if board is None else board.memory(),
        "mem_limit": sizes.memory_limit_bytes(
            config.vm_memory_high_watermark, alarms.total_memory_bytes()
        ),
        "mem_alarm": "memory" in broker.alarms,
        "disk_free": disk_free,
        "disk_free_limit": sizes.parse_size(config.disk_free_limit),
        "disk_free_alarm": "disk" in broker.alarms,
        "fd_used": fd_used,
        "fd_total": soft_fds,
        "sockets_used": len(broker.connections) if board is None else board.connections(),
        "sockets_total": soft_fds,
        "proc_used": len(broker.queues) + len(broker.connections),
        "proc_total": 1_048_576,
        "run_queue": 0,
        "db_dir": data_dir,
        "log_files": [],
        "config_files": [],
        "enabled_plugins": ["rabbitmq_management"],
        "auth_mechanisms": [
            {
                "name": "PLAIN",
                "description": "SASL PLAIN authentication mechanism",
                "enabled": True,
            },
            {"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": True},
        ],
        "exchange_types": [
            {"name": name, "description": text, "enabled": True} for name, text in EXCHANGE_TYPES
        ],
        "cluster_links": [],
        "net_ticktime": 60,
        "mem_calculation_strategy": "allocated",
        "contexts": [management_context(broker)],
        "context_switches": _context_switches(),
    }
    return admin_neutral.fill(node, admin_neutral.NODE)


def management_context(broker: Broker) -> Json:
    """The management listener as RabbitMQ's ``contexts`` describe it (one Cowboy context)."""
    return {
        "description": "RabbitMQ Management",
        "path": "/",
        "cowboy_opts": "[{sendfile,false}]",
        "port": str(broker.config.management_port),
    }


def _context_switches() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw
