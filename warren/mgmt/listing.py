"""Pagination, sorting, filtering and column selection of list replies, as RabbitMQ does them.

Theory of operation (rabbit_mgmt_util:augment_resources/filter_and_paginate of 3.10.8):
1. ``name`` filters on the ``name`` field: a case-insensitive substring, or with
   ``use_regex=true`` a regular expression searched anywhere in the name.
2. ``sort`` names a field (dotted for nested ones, ``message_stats.publish``);
   ``sort_reverse=true`` reverses. Items without the field sort first.
3. With ``page`` the reply becomes RabbitMQ's page object (``filtered_count``,
   ``item_count``, ``items``, ``page``, ``page_count``, ``page_size``, ``total_count``);
   ``page_size`` defaults to 100 and may not exceed 500; a page past the end is 400
   ``page_out_of_range``.
4. ``columns`` keeps only the named fields (dotted for nested ones), for every list and
   for single objects too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

PAGE_SIZE_DEFAULT = 100
PAGE_SIZE_MAX = 500


class ListingError(ValueError):
    """A query RabbitMQ refuses with 400: `kind` is the ``error``, the message the reason."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def _lookup(item: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(item, Mapping) or part not in item:
            return None
        item = item[part]
    return item


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, int | float):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    return (3, str(value))


def select_columns(value: Any, columns: str | None) -> Any:
    if not columns:
        return value
    paths = [path.split(".") for path in columns.split(",") if path]

    def pick(item: Any) -> Any:
        if not isinstance(item, Mapping):
            return item
        out: dict[str, Any] = {}
        for path in paths:
            source: Any = item
            for part in path:
                if not isinstance(source, Mapping) or part not in source:
                    break
                source = source[part]
            else:
                target = out
                for part in path[:-1]:
                    target = target.setdefault(part, {})
                target[path[-1]] = source
        return out

    return [pick(item) for item in value] if isinstance(value, list) else pick(value)


def query_reply(items: list[Any], query: Mapping[str, str]) -> Any:
    """The list reply for `items` under RabbitMQ's query parameters."""
    total = len(items)
    name = query.get("name")
    if name:
        if query.get("use_regex", "false").lower() == "true":
            try:
                pattern = re.compile(name)
            except re.error as refused:
                raise ListingError("bad_request", f"invalid regex: {refused}") from None
            items = [i for i in items if pattern.search(str(_lookup(i, "name") or ""))]
        else:
            lowered = name.lower()
            items = [i for i in items if lowered in str(_lookup(i, "name") or "").lower()]
    sort = query.get("sort")
    if sort:
        items = sorted(items, key=lambda i: _sort_key(_lookup(i, sort)))
    if query.get("sort_reverse", "false").lower() == "true":
        items = list(reversed(items))
    columns = query.get("columns")
    if "page" not in query:
        return select_columns(items, columns)
    page, page_size = _page_numbers(query)
    filtered = len(items)
    page_count = max(1, -(-filtered // page_size))
    if page > page_count:
        raise ListingError(
            "page_out_of_range",
            f"Page out of range, page: {page} page size: {page_size}, len: {filtered}",
        )
    shown = items[(page - 1) * page_size : page * page_size]
    return {
        "filtered_count": filtered,
        "item_count": len(shown),
        "items": select_columns(shown, columns),
        "page": page,
        "page_count": page_count,
        "page_size": page_size,
        "total_count": total,
    }


def _page_numbers(query: Mapping[str, str]) -> tuple[int, int]:
    try:
        page = int(query.get("page", "1"))
        page_size = int(query.get("page_size", str(PAGE_SIZE_DEFAULT)))
    except ValueError:
        raise ListingError("bad_request", "page and page_size must be integers") from None
    if page < 1:
        raise ListingError("bad_request", "Page out of range, page must be 1 or more")
    if page_size < 1 or page_size > PAGE_SIZE_MAX:
        raise ListingError(
            "bad_request", f"Invalid page size, must be between 1 and {PAGE_SIZE_MAX}"
        )
    return page, page_size
