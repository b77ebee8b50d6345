"""rabbitmqctl's everyday verbs over the management API: listings, users, vhosts,
permissions, queues, connections and `status`.

Theory of operation:
1. A listing verb is a row of `LISTINGS`: the API path, rabbitmqctl's banner, its default
   columns and the info keys it accepts, each mapped to a field of the API's JSON
   (``queue_name`` is ``queue.name``). Lists are fetched a page at a time (500 items);
   when there is more than one page and stderr is a terminal, a `rich` progress bar shows
   how far the fetch is (never with ``--quiet``/``--silent``).
2. Changing verbs print rabbitmqctl's banner first, then make one or two HTTP calls;
   failures print ``Error:`` and rabbitmqctl's text, with its exit codes (65 data error,
   69 unavailable, 70 software).
3. Erlang pids do not exist here: where rabbitmqctl shows a connection's or channel's
   ``pid`` Warren shows its name (``127.0.0.1:5555 -> 127.0.0.1:5672 (1)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from warren.cli import formatters, terms
from warren.cli.client import Reply
from warren.cli.commands import (
    EX_DATAERR,
    EX_OK,
    EX_SOFTWARE,
    Context,
    _done,
    _tabular,
)
from warren.cli.diagnostics import alarm_lines, listener_address
from warren.cli.formatters import Formatter

PAGE_SIZE = 500
EX_NOUSER = 67  # sysexits.h: rabbitmqctl set_topic_permissions for a user that does not exist


@dataclass(frozen=True)
class Listing:
    path: Callable[[str], tuple[str, ...]]
    banner: str
    default_columns: tuple[str, ...]
    fields: dict[str, str]  # info key -> dotted API field ("" : a constant, see CONSTANTS)


CONSTANTS = {("list_bindings", "source_kind"): "exchange"}

LISTINGS: dict[str, Listing] = {
    "list_exchanges": Listing(
        lambda vhost: ("exchanges", vhost),
        "Listing exchanges for vhost {vhost} ...",
        ("name", "type"),
        {key: key for key in ("name", "type", "durable", "auto_delete", "internal", "arguments")}
        | {"policy": "policy"},
    ),
    "list_bindings": Listing(
        lambda vhost: ("bindings", vhost),
        "Listing bindings for vhost {vhost}...",
        (
            "source_name",
            "source_kind",
            "destination_name",
            "destination_kind",
            "routing_key",
            "arguments",
        ),
        {
            "source_name": "source",
            "source_kind": "",
            "destination_name": "destination",
            "destination_kind": "destination_type",
            "routing_key": "routing_key",
            "arguments": "arguments",
        },
    ),
    "list_connections": Listing(
        lambda vhost: ("connections",),
        "Listing connections ...",
        ("user", "peer_host", "peer_port", "state"),
        {"pid": "name"}
        | {
            key: key
            for key in (
                "name",
                "user",
                "vhost",
                "peer_host",
                "peer_port",
                "host",
                "port",
                "state",
                "channels",
                "protocol",
                "auth_mechanism",
                "ssl",
                "timeout",
                "frame_max",
                "channel_max",
                "client_properties",
                "connected_at",
                "type",
                "user_provided_name",
            )
        },
    ),
    "list_channels": Listing(
        lambda vhost: ("channels",),
        "Listing channels ...",
        ("pid", "user", "consumer_count", "messages_unacknowledged"),
        {"pid": "name", "connection": "connection_details.name"}
        | {
            key: key
            for key in (
                "name",
                "number",
                "user",
                "vhost",
                "transactional",
                "confirm",
                "consumer_count",
                "messages_unacknowledged",
                "messages_uncommitted",
                "acks_uncommitted",
                "messages_unconfirmed",
                "prefetch_count",
                "global_prefetch_count",
            )
        },
    ),
    "list_consumers": Listing(
        lambda vhost: ("consumers", vhost),
        "Listing consumers in vhost {vhost} ...",
        (
            "queue_name",
            "channel_pid",
            "consumer_tag",
            "ack_required",
            "prefetch_count",
            "active",
            "arguments",
        ),
        {
            "queue_name": "queue.name",
            "channel_pid": "channel_details.name",
            "consumer_tag": "consumer_tag",
            "ack_required": "ack_required",
            "prefetch_count": "prefetch_count",
            "active": "active",
            "activity_status": "activity_status",
            "arguments": "arguments",
            "exclusive": "exclusive",
        },
    ),
    "list_users": Listing(
        lambda vhost: ("users",),
        "Listing users ...",
        ("user", "tags"),
        {"user": "name", "tags": "tags"},
    ),
    "list_vhosts": Listing(
        lambda vhost: ("vhosts",),
        "Listing vhosts ...",
        ("name",),
        {key: key for key in ("name", "description", "tags", "tracing", "default_queue_type")},
    ),
    "list_permissions": Listing(
        lambda vhost: ("vhosts", vhost, "permissions"),
        'Listing permissions for vhost "{vhost}" ...',
        ("user", "configure", "write", "read"),
        {key: key for key in ("user", "configure", "write", "read")},
    ),
    "list_topic_permissions": Listing(
        lambda vhost: ("vhosts", vhost, "topic-permissions"),
        'Listing topic permissions for vhost "{vhost}" ...',
        ("user", "exchange", "write", "read"),
        {key: key for key in ("user", "exchange", "write", "read")},
    ),
}


def _field(item: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(item, dict):
            return None
        item = item.get(part)
    return item


@contextmanager
def progress(ctx: Context, description: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr for a long fetch (only on a terminal, not quiet);
    yields `advance(done, total)`."""
    if ctx.quiet or ctx.silent or not ctx.err.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(file=ctx.err), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield advance


def fetch_all(ctx: Context, path: tuple[str, ...]) -> Reply:
    """Every item of a list, a page of `PAGE_SIZE` at a time (one reply as if unpaged)."""
    items: list[Any] = []
    page = 1
    with progress(ctx, "Fetching " + "/".join(path[:1])) as advance:
        while True:
            reply = ctx.client.get(*path, query={"page": str(page), "page_size": str(PAGE_SIZE)})
            if reply.status != 200 or not isinstance(reply.body, dict):
                return reply
            items.extend(reply.body.get("items", []))
            advance(len(items), int(reply.body.get("filtered_count", len(items))))
            if page >= int(reply.body.get("page_count", 1)):
                return Reply(200, items)
            page += 1


def run_listing(ctx: Context, verb: str, columns: Sequence[str], timeout_s: float) -> int:
    listing = LISTINGS[verb]
    if verb in (
        "list_exchanges",
        "list_bindings",
        "list_consumers",
        "list_permissions",
        "list_topic_permissions",
    ):
        ctx.banner(listing.banner.format(vhost=ctx.vhost))
    else:
        ctx.banner(listing.banner)
    reply = fetch_all(ctx, listing.path(ctx.vhost))
    if reply.status == 404 and verb == "list_permissions":
        return ctx.missing_vhost()
    if reply.status == 404:
        reply = Reply(200, [])  # rabbitmqctl lists nothing for a missing vhost
    if reply.status != 200:
        return ctx.unexpected(reply)
    rows_data = [
        {
            column: _field(item, listing.fields[column])
            if listing.fields[column]
            else CONSTANTS[verb, column]
            for column in columns
        }
        for item in reply.body
    ]
    if ctx.formatter is Formatter.JSON:
        objects = [{c: _json_cell(c, row[c]) for c in columns} for row in rows_data]
        ctx.show(formatters.json_lines(objects))
        return EX_OK
    rows = [[_text_cell(ctx.formatter, c, row[c]) for c in columns] for row in rows_data]
    ctx.show_listing(_tabular(ctx, columns, rows))
    return EX_OK


def _json_cell(column: str, value: Any) -> Any:
    if column in ("arguments", "client_properties"):
        return terms.typed_json(value or {})
    return "" if value is None else value


def _text_cell(formatter: Formatter, column: str, value: Any) -> str:
    if column in ("arguments", "client_properties"):
        table = value or {}
        if formatter is Formatter.PRETTY_TABLE:
            return terms.erlang_table(table)
        return terms.inspect_table(table)
    if column == "tags" and isinstance(value, list):
        return "[" + ", ".join(value) + "]"
    return formatters.text(value)


# --- Users ---


def add_user(ctx: Context, user: str, password: str, tags: str = "") -> int:
    ctx.banner(f'Adding user "{user}" ...')
    existing = ctx.client.get("users", user)
    if existing.status == 200:
        return ctx.fail(f"Error:\nuser_already_exists: {user}", EX_SOFTWARE)
    reply = ctx.client.put(("users", user), {"password": password, "tags": tags})
    if reply.status not in (201, 204):
        return ctx.unexpected(reply)
    ctx.banner(
        "Done. Don't forget to grant the user permissions to some virtual hosts! "
        "See 'rabbitmqctl help set_permissions' to learn more."
    )
    return _done(ctx)


def _user_missing(ctx: Context, user: str) -> int:
    return ctx.fail(f'Error:\nUser "{user}" does not exist', EX_DATAERR)


def delete_user(ctx: Context, user: str) -> int:
    ctx.banner(f'Deleting user "{user}" ...')
    reply = ctx.client.delete("users", user)
    if reply.status == 404:
        return _user_missing(ctx, user)
    if reply.status != 204:
        return ctx.unexpected(reply)
    return _done(ctx)


def _update_user(ctx: Context, user: str, change: dict[str, Any]) -> int:
    current = ctx.client.get("users", user)
    if current.status == 404:
        return _user_missing(ctx, user)
    if current.status != 200:
        return ctx.unexpected(current)
    body = {
        "password_hash": current.body["password_hash"],
        "hashing_algorithm": current.body["hashing_algorithm"],
        "tags": current.body["tags"],
    }
    if "password" in change:
        del body["password_hash"], body["hashing_algorithm"]
    body.update(change)
    reply = ctx.client.put(("users", user), body)
    if reply.status not in (201, 204):
        return ctx.unexpected(reply)
    return _done(ctx)


def change_password(ctx: Context, user: str, password: str) -> int:
    ctx.banner(f'Changing password for user "{user}" ...')
    return _update_user(ctx, user, {"password": password})


def set_user_tags(ctx: Context, user: str, tags: Sequence[str]) -> int:
    ctx.banner(f'Setting tags for user "{user}" to [{", ".join(tags)}] ...')
    return _update_user(ctx, user, {"tags": list(tags)})


# --- Vhosts and permissions ---


def add_vhost(ctx: Context, vhost: str, description: str, tags: str) -> int:
    ctx.banner(f'Adding vhost "{vhost}" ...')
    body: dict[str, Any] = {}
    if description:
        body["description"] = description
    if tags:
        body["tags"] = tags
    reply = ctx.client.put(("vhosts", vhost), body)
    if reply.status not in (201, 204):
        return ctx.unexpected(reply)
    return _done(ctx)


def delete_vhost(ctx: Context, vhost: str) -> int:
    ctx.banner(f'Deleting vhost "{vhost}" ...')
    with progress(ctx, f"Deleting vhost {vhost}") as advance:
        advance(0, 1)
        reply = ctx.client.delete("vhosts", vhost)
        advance(1, 1)
    if reply.status == 404:
        return ctx.fail(f"Error:\nVirtual host '{vhost}' does not exist", EX_DATAERR)
    if reply.status != 204:
        return ctx.unexpected(reply)
    return _done(ctx)


def set_permissions(ctx: Context, user: str, configure: str, write: str, read: str) -> int:
    ctx.banner(f'Setting permissions for user "{user}" in vhost "{ctx.vhost}" ...')
    body = {"configure": configure, "write": write, "read": read}
    return _put_permission(ctx, "permissions", user, body, lambda: _user_missing(ctx, user))


def _put_permission(
    ctx: Context, resource: str, user: str, body: dict[str, str], user_missing: Callable[[], int]
) -> int:
    """PUT a user's (topic) permission in the vhost; rabbitmqctl's error when the vhost
    or the user does not exist."""
    reply = ctx.client.put((resource, ctx.vhost, user), body)
    if reply.status in (201, 204):
        return _done(ctx)
    if reply.status == 400 and reply.reason == "vhost_or_user_not_found":
        if ctx.client.get("vhosts", ctx.vhost).status == 404:
            return ctx.missing_vhost()
        return user_missing()
    return ctx.unexpected(reply)


def set_topic_permissions(ctx: Context, user: str, exchange: str, write: str, read: str) -> int:
    ctx.banner(
        f'Setting topic permissions on "{exchange}" for user "{user}" in vhost "{ctx.vhost}" ...'
    )
    body = {"exchange": exchange, "write": write, "read": read}
    return _put_permission(
        ctx,
        "topic-permissions",
        user,
        body,
        lambda: ctx.fail(f"Error:\nUser {user} does not exist", EX_NOUSER),
    )


def clear_topic_permissions(ctx: Context, user: str, exchange: str | None) -> int:
    """All of the user's topic permissions in the vhost, or one exchange's; clearing none
    is no error, as in rabbitmqctl."""
    on = f'on "{exchange}" ' if exchange else ""
    ctx.banner(f'Clearing topic permissions {on}for user "{user}" in vhost "{ctx.vhost}" ...')
    query = {"exchange": exchange} if exchange else {}
    reply = ctx.client.request("DELETE", ("topic-permissions", ctx.vhost, user), query=query)
    if reply.status not in (204, 404):
        return ctx.unexpected(reply)
    return _done(ctx)


# --- Queues and connections ---


def purge_queue(ctx: Context, queue: str) -> int:
    ctx.banner(f"Purging queue '{queue}' in vhost '{ctx.vhost}' ...")
    reply = ctx.client.delete("queues", ctx.vhost, queue, "contents")
    if reply.status == 404:
        return ctx.fail(
            f'Error:\n{{:not_found, {{:resource, "{ctx.vhost}", :queue, "{queue}"}}}}',
            EX_DATAERR,
        )
    if reply.status != 204:
        return ctx.unexpected(reply)
    return _done(ctx)


def delete_queue(ctx: Context, queue: str, *, if_empty: bool, if_unused: bool) -> int:
    ctx.banner(f"Deleting queue '{queue}' on vhost '{ctx.vhost}' ...")
    before = ctx.client.get("queues", ctx.vhost, queue)
    if before.status == 404:
        return ctx.fail(
            f'Error:\n{{:not_found, {{:resource, "{ctx.vhost}", :queue, "{queue}"}}}}',
            EX_DATAERR,
        )
    query = {}
    if if_empty:
        query["if-empty"] = "true"
    if if_unused:
        query["if-unused"] = "true"
    reply = ctx.client.request("DELETE", ("queues", ctx.vhost, queue), query=query)
    if reply.status == 400:
        return ctx.fail(f"Error:\n{reply.reason}", EX_SOFTWARE)
    if reply.status != 204:
        return ctx.unexpected(reply)
    count = before.body.get("messages", 0) if isinstance(before.body, dict) else 0
    if ctx.formatter is Formatter.JSON:
        ctx.show(formatters.compact_json({"result": "ok", "message_count": count}))
    else:
        ctx.banner(f"Queue was successfully deleted with {count} messages")
    return EX_OK


def close_connection(ctx: Context, name: str, reason: str) -> int:
    ctx.banner(f"Closing connection {name}, reason: {reason}...")
    reply = ctx.client.request("DELETE", ("connections", name), headers={"X-Reason": reason})
    if reply.status == 404:
        return ctx.fail(f"Error:\nConnection {name} does not exist", EX_DATAERR)
    if reply.status != 204:
        return ctx.unexpected(reply)
    return _done(ctx)


# --- Status ---


def status(ctx: Context) -> int:
    overview = ctx.client.get("overview")
    if overview.status != 200:
        return ctx.unexpected(overview)
    node_name = overview.body.get("node", "")
    nodes = ctx.client.get("nodes")
    if nodes.status != 200 or not nodes.body:
        return ctx.unexpected(nodes)
    node = nodes.body[0]
    if ctx.formatter is Formatter.JSON:
        ctx.show(formatters.compact_json({"overview": overview.body, "node": node}))
        return EX_OK
    ctx.banner(f"Status of node {node_name} ...")
    totals = overview.body.get("object_totals", {})
    lines = [
        "Runtime",
        "",
        f"OS PID: {node.get('os_pid')}",
        f"Uptime (seconds): {int(node.get('uptime', 0)) // 1000}",
        f"Product name: {overview.body.get('product_name')}",
        f"Product version: {overview.body.get('product_version')}",
        f"RabbitMQ version (compatible): {overview.body.get('rabbitmq_version')}",
        f"Python version: {overview.body.get('python_version', '')}",
        "",
        "Data directory",
        "",
        f"Node data directory: {node.get('db_dir')}",
        "",
        "Alarms",
        "",
        *alarm_lines(node),
        "",
        "Resource usage",
        "",
        f"Memory used: {node.get('mem_used')} bytes",
        f"Free disk space: {node.get('disk_free')} bytes",
        f"File descriptors: {node.get('fd_used')} of {node.get('fd_total')}",
        "",
        "Totals",
        "",
        f"Connection count: {totals.get('connections', 0)}",
        f"Queue count: {totals.get('queues', 0)}",
        f"Virtual host count: {len(ctx.client.get('vhosts').body or [])}",
        "",
        "Listeners",
        "",
    ]
    for listener in overview.body.get("listeners", []):
        lines.append(f"Interface: {listener_address(listener)}")
    ctx.show("\n".join(lines))
    return EX_OK
