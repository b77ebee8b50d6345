"""Fields of RabbitMQ's management API that have no meaning in Warren, with neutral values.

Theory of operation:
1. A monitoring tool written for RabbitMQ 3.10.8 reads keys by name and may fail on a
   missing one. So every object Warren shows carries RabbitMQ's whole key set: the keys
   Warren can fill are filled by the other `admin_*` modules; the rest, listed here per
   kind of object, get a neutral value (0, ``{"rate": 0.0}``, an empty list, RabbitMQ's own
   constant) with the same JSON kind as RabbitMQ's, so a reader parses them as it would
   parse RabbitMQ's.
2. They are Erlang VM internals (reductions, garbage collection, schedulers, Mnesia),
   classic queue v1 internals (``backing_queue_status``), and statistics Warren does not
   keep (node I/O counters and churn, connection byte counters). docs/management.md lists
   them; tests/integration/test_mgmt_shapes.py checks the key sets against a recording.
3. `fill` never overwrites a key an object already has, and every call builds fresh values
   (callers may change what they get).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Final

Json = dict[str, Any]

RATE: Final = {"rate": 0.0}
GARBAGE_COLLECTION: Final = {
    "fullsweep_after": 0,
    "max_heap_size": 0,
    "min_bin_vheap_size": 0,
    "min_heap_size": 0,
    "minor_gcs": 0,
}
CHURN_COUNTERS: Final = (
    "connection_created",
    "connection_closed",
    "channel_created",
    "channel_closed",
    "queue_declared",
    "queue_created",
    "queue_deleted",
)
NODE_COUNTERS: Final = (
    "gc_num",
    "gc_bytes_reclaimed",
    "io_read_count",
    "io_read_bytes",
    "io_read_avg_time",
    "io_write_count",
    "io_write_bytes",
    "io_write_avg_time",
    "io_sync_count",
    "io_sync_avg_time",
    "io_seek_count",
    "io_seek_avg_time",
    "io_reopen_count",
    "mnesia_ram_tx_count",
    "mnesia_disk_tx_count",
    "msg_store_read_count",
    "msg_store_write_count",
    "queue_index_write_count",
    "queue_index_read_count",
    *CHURN_COUNTERS,
)


def _counted(names: Iterable[str]) -> Json:
    """Each counter at 0 with its ``_details`` rate."""
    out: Json = {}
    for name in names:
        out[name] = 0
        out[name + "_details"] = RATE
    return out


OVERVIEW: Final[Json] = {
    "erlang_version": "",
    "erlang_full_version": "",
    "release_series_support_status": "supported",
    "churn_rates": _counted(CHURN_COUNTERS),
}
OVERVIEW_MESSAGE_STATS: Final[Json] = _counted(("disk_reads", "disk_writes"))
NODE: Final[Json] = {
    **_counted(NODE_COUNTERS),
    "context_switches": 0,
    "context_switches_details": RATE,
    "applications": [],
    "metrics_gc_queue_length": dict.fromkeys(
        (
            "connection_closed",
            "channel_closed",
            "consumer_deleted",
            "exchange_deleted",
            "queue_deleted",
            "vhost_deleted",
            "node_node_deleted",
            "channel_consumer_deleted",
        ),
        0,
    ),
    "ra_open_file_metrics": {"ra_log_wal": 0, "ra_log_segment_writer": 0},
    **{
        name + "_details": RATE
        for name in ("fd_used", "mem_used", "proc_used", "sockets_used", "disk_free")
    },
}
PROCESS: Final[Json] = {
    "garbage_collection": GARBAGE_COLLECTION,
    "reductions": 0,
    "reductions_details": RATE,
}
TRAFFIC: Final[Json] = _counted(("recv_oct", "send_oct"))
CONNECTION: Final[Json] = {**PROCESS, **TRAFFIC}  # counts and send_pend: connection_json
QUEUE: Final[Json] = {
    **PROCESS,
    "memory": 0,
    "messages_persistent": 0,
    "message_bytes_persistent": 0,
    "consumer_capacity": 0,
    "consumer_utilisation": 0,
}
CLASSIC_QUEUE: Final[Json] = {
    **QUEUE,
    "messages_paged_out": 0,
    "message_bytes_paged_out": 0,
    "backing_queue_status": {
        "avg_ack_egress_rate": 0.0,
        "avg_ack_ingress_rate": 0.0,
        "avg_egress_rate": 0.0,
        "avg_ingress_rate": 0.0,
        "delta": ["delta", "undefined", 0, 0, "undefined"],
        "len": 0,
        "mode": "default",
        "next_deliver_seq_id": 0,
        "next_seq_id": 0,
        "q1": 0,
        "q2": 0,
        "q3": 0,
        "q4": 0,
        "target_ram_count": "infinity",
        "version": 1,
    },
}


def fill(body: Json, neutral: Json) -> Json:
    """`body` with every key of `neutral` it lacks (rule 3); returns `body`."""
    for key, value in neutral.items():
        if key not in body:
            body[key] = copy.deepcopy(value)
    return body


def ram_counts(body: Json) -> Json:
    """A queue's ``*_ram`` counts: what Warren holds of the queue in memory, counted as all of
    it (paged-out bodies keep their index in memory)."""
    return {
        "messages_ram": body.get("messages", 0),
        "messages_ready_ram": body.get("messages_ready", 0),
        "messages_unacknowledged_ram": body.get("messages_unacknowledged", 0),
        "message_bytes_ram": body.get("message_bytes", 0),
    }
