"""The cluster verbs: warrenctl's ``cluster_status``, ``join_cluster`` and
``forget_cluster_node``, and warren-queues' ``add_member``, ``delete_member``, ``grow``,
``shrink``, ``rebalance`` and ``quorum_status``, over Warren's ``/api/warren/...``
resources (RabbitMQ's HTTP API has none: its CLI tools use Erlang distribution).

Theory of operation:
1. Each verb prints rabbitmqctl's or rabbitmq-queues' banner (3.10.8 texts), makes one
   or two HTTP calls to the node the URL names, and prints the result in the chosen
   formatter. Verbs whose banner names the node (``Cluster status of node n ...``) first
   ask the node for its name.
2. A refused operation is an HTTP 400 with a reason; it prints ``Error:`` and the reason
   and exits 69, as rabbitmq-queues does with an ``{:error, _}`` result.
3. ``cluster_status`` prints rabbitmqctl's sections (Basics, Disk Nodes, Running Nodes,
   Network Partitions as this node sees them) and one of Warren's own: the metadata Raft
   group. Every Warren node keeps its definitions on disk, so every node is a disk node.
   A node on its own (or a RabbitMQ, which has no /api/warren) is a one-node cluster, as
   rabbitmqctl shows one: its name, versions, alarms and listeners.
4. ``rebalance`` prints rabbitmq-queues' summary (leaders per node): the leaders the
   queues had before, with the moves the node reports applied to them.
"""

from __future__ import annotations

import re
from typing import Any

from warren.cli import formatters
from warren.cli.client import Reply
from warren.cli.commands import EX_OK, EX_SOFTWARE, Context, _done, _tabular
from warren.cli.diagnostics import alarm_lines, listener_address, missing_resource
from warren.cli.formatters import Formatter
from warren.cli.verbs import fetch_all

QUORUM_STATUS_COLUMNS = (
    "Node Name",
    "Raft State",
    "Membership",
    "Last Log Index",
    "Last Applied",
    "Commit Index",
    "Snapshot Index",
    "Term",
)
MEMBERSHIP_RESULT_COLUMNS = ("vhost", "name", "size", "result")
REBALANCE_COLUMNS = ("Node name", "Number of quorum queues")


def _refused(ctx: Context, reply: Reply) -> int:
    if reply.status == 400:
        return ctx.fail("Error:\n" + reply.reason)
    return ctx.unexpected(reply)


def _cluster(ctx: Context) -> Reply:
    return ctx.client.get("warren", "cluster")


def _show_rows(ctx: Context, columns: tuple[str, ...], rows: list[list[Any]]) -> int:
    if ctx.formatter is Formatter.JSON:
        objects = [dict(zip(columns, row, strict=True)) for row in rows]
        ctx.show(formatters.json_lines(objects))
    else:
        cells = [[formatters.text(value) for value in row] for row in rows]
        ctx.show(_tabular(ctx, columns, cells))
    return EX_OK


# --- warrenctl ---


def cluster_status(ctx: Context) -> int:
    reply = _cluster(ctx)
    if missing_resource(reply) or (reply.status, reply.reason) == (400, "not_clustered"):
        return _single_node_status(ctx)  # Warren on its own, or RabbitMQ (no /api/warren)
    if reply.status != 200:
        return _refused(ctx, reply)
    status = reply.body
    name = ctx.client.get("cluster-name")
    if name.status != 200:
        return ctx.unexpected(name)
    nodes, running = status["nodes"], status["running"]
    unreachable = [node for node in nodes if node not in running]
    partitions = {status["node"]: unreachable} if unreachable else {}
    ctx.banner(f"Cluster status of node {status['node']} ...")
    if ctx.formatter is Formatter.JSON:
        summary = {
            "cluster_name": name.body["name"],
            "disk_nodes": nodes,
            "ram_nodes": [],
            "running_nodes": running,
            "partitions": partitions,
            "metadata": status["metadata"],
            "quorum_queues": status["quorum_queues"],
        }
        ctx.show(formatters.compact_json(summary))
        return EX_OK
    meta = status["metadata"]
    lines = ["Basics", "", f"Cluster name: {name.body['name']}"]
    lines += ["", "Disk Nodes", "", *nodes, "", "Running Nodes", "", *running]
    lines += ["", "Network Partitions", ""]
    lines += [
        f"Node {node} cannot communicate with {', '.join(peers)}"
        for node, peers in partitions.items()
    ] or ["(none)"]
    lines += [
        "",
        "Metadata store (Raft group)",
        "",
        f"Leader: {meta.get('leader') or '(none)'}, term: {meta.get('term')}",
        f"Voters: {', '.join(meta.get('voters', [])) or '(none)'}",
        f"Learners: {', '.join(meta.get('learners', [])) or '(none)'}",
        f"Commit index: {meta.get('commit')}, last applied: {meta.get('applied')}",
        f"Quorum queues: {status['quorum_queues']}",
    ]
    ctx.show("\n".join(lines))
    return EX_OK


def _single_node_status(ctx: Context) -> int:
    """A node on its own is a cluster of one, as rabbitmqctl shows it (rule 3)."""
    overview, nodes = ctx.client.get("overview"), ctx.client.get("nodes")
    if overview.status != 200 or nodes.status != 200 or not nodes.body:
        return ctx.unexpected(overview if overview.status != 200 else nodes)
    info, node = overview.body, nodes.body[0]
    name = info.get("node", "")
    ctx.banner(f"Cluster status of node {name} ...")
    alarms = [line for line in alarm_lines(node) if line != "(none)"]
    if ctx.formatter is Formatter.JSON:
        summary = {
            "cluster_name": info.get("cluster_name", name),
            "disk_nodes": [name],
            "ram_nodes": [],
            "running_nodes": [name],
            "partitions": {},
            "alarms": alarms,
        }
        ctx.show(formatters.compact_json(summary))
        return EX_OK
    runtime = (
        f"Erlang {info['erlang_version']}"
        if "erlang_version" in info
        else f"Python {info.get('python_version', '')}"
    )
    lines = ["Basics", "", f"Cluster name: {info.get('cluster_name', name)}"]
    lines += ["", "Disk Nodes", "", name, "", "Running Nodes", "", name]
    lines += ["", "Versions", ""]
    lines += [f"{name}: {info.get('product_name')} {info.get('product_version')} on {runtime}"]
    lines += ["", "Alarms", "", *alarm_lines(node), "", "Network Partitions", "", "(none)"]
    lines += ["", "Listeners", ""]
    lines += [
        f"Node: {name}, interface: {listener_address(listener)}"
        for listener in info.get("listeners", [])
    ]
    ctx.show("\n".join(lines))
    return EX_OK


def join_cluster(ctx: Context, seed: str) -> int:
    status = _cluster(ctx)
    if status.status != 200:
        return _refused(ctx, status)
    node = status.body["node"]
    ctx.banner(f"Clustering node {node} with {seed}")
    if seed == node:
        return ctx.fail(f"Error: cannot cluster node with itself: {node}", EX_SOFTWARE)
    reply = ctx.client.post(("warren", "cluster", "join"), {"node": seed})
    if reply.status != 200:
        return _refused(ctx, reply)
    return _done(ctx)


def forget_cluster_node(ctx: Context, node: str) -> int:
    ctx.banner(f"Removing node {node} from the cluster")
    reply = ctx.client.delete("warren", "cluster", "nodes", node)
    if reply.status != 200:
        return _refused(ctx, reply)
    return _done(ctx)


# --- warren-queues ---


def add_member(ctx: Context, queue: str, node: str) -> int:
    ctx.banner(f"Adding a replica for queue {queue} on node {node}...")
    reply = ctx.client.post(("warren", "quorum", ctx.vhost, queue, "members"), {"node": node})
    if reply.status != 200:
        return _refused(ctx, reply)
    return _done(ctx)


def delete_member(ctx: Context, queue: str, node: str) -> int:
    ctx.banner(f"Removing a replica of queue {queue} on node {node}...")
    reply = ctx.client.delete("warren", "quorum", ctx.vhost, queue, "members", node)
    if reply.status != 200:
        return _refused(ctx, reply)
    return _done(ctx)


def _membership_results(ctx: Context, reply: Reply) -> int:
    if reply.status != 200:
        return _refused(ctx, reply)
    rows = [[item.get(column) for column in MEMBERSHIP_RESULT_COLUMNS] for item in reply.body]
    return _show_rows(ctx, MEMBERSHIP_RESULT_COLUMNS, rows)


def grow(ctx: Context, node: str, strategy: str, vhost_pattern: str, queue_pattern: str) -> int:
    ctx.banner(f"Growing {strategy} quorum queues on {node}...")
    body = {
        "node": node,
        "strategy": strategy,
        "vhost_pattern": vhost_pattern,
        "queue_pattern": queue_pattern,
    }
    return _membership_results(ctx, ctx.client.post(("warren", "quorum-grow"), body))


def shrink(ctx: Context, node: str, *, errors_only: bool) -> int:
    ctx.banner(f"Shrinking quorum queues on {node}...")
    body = {"node": node, "errors_only": errors_only}
    return _membership_results(ctx, ctx.client.post(("warren", "quorum-shrink"), body))


def rebalance(ctx: Context, vhost_pattern: str, queue_pattern: str) -> int:
    ctx.banner("Re-balancing leaders of quorum queues...")
    status = _cluster(ctx)
    if status.status != 200:
        return _refused(ctx, status)
    queues = fetch_all(ctx, ("queues",))
    if queues.status != 200:
        return ctx.unexpected(queues)
    body = {"vhost_pattern": vhost_pattern, "queue_pattern": queue_pattern}
    reply = ctx.client.post(("warren", "quorum-rebalance"), body)
    if reply.status != 200:
        return _refused(ctx, reply)
    vhosts, names = re.compile(vhost_pattern), re.compile(queue_pattern)
    leaders = {
        (queue["vhost"], queue["name"]): queue["leader"]
        for queue in queues.body
        if queue.get("type") == "quorum"
        and queue.get("leader")
        and vhosts.search(queue["vhost"])
        and names.search(queue["name"])
    }
    for move in reply.body:
        leaders[move["vhost"], move["name"]] = move["to"]
    counts = dict.fromkeys(status.body["nodes"], 0)
    for leader in leaders.values():
        counts[leader] = counts.get(leader, 0) + 1
    return _show_rows(ctx, REBALANCE_COLUMNS, [[node, count] for node, count in counts.items()])


def quorum_status(ctx: Context, queue: str) -> int:
    status = _cluster(ctx)
    if status.status != 200:
        return _refused(ctx, status)
    ctx.banner(f"Status of quorum queue {queue} on node {status.body['node']} ...")
    reply = ctx.client.get("warren", "quorum", ctx.vhost, queue)
    if reply.status != 200:
        return _refused(ctx, reply)
    return _show_rows(ctx, QUORUM_STATUS_COLUMNS, [_member_row(m) for m in reply.body])


def _member_row(member: dict[str, Any]) -> list[Any]:
    """One member's own view of the queue's Raft group (only its name if unreachable)."""
    node = member["node"]
    if member.get("role") == "unreachable":
        return [node, "unreachable", *[None] * (len(QUORUM_STATUS_COLUMNS) - 2)]
    membership = "learner" if node in member.get("learners", []) else "voter"
    return [
        node,
        member.get("role"),
        membership,
        member.get("last_index"),
        member.get("applied"),
        member.get("commit"),
        member.get("snapshot_index"),
        member.get("term"),
    ]
