"""RabbitMQ's HTTP replies: compact JSON bodies and the error shapes clients match on.

Theory of operation:
1. Bodies are compact JSON (no spaces), non-ASCII kept as UTF-8, as RabbitMQ's encoder
   writes them.
2. Errors carry RabbitMQ's exact ``{"error", "reason"}`` pairs: a missing object is
   ``Object Not Found``/``Not Found``, a PUT into a missing vhost ``not_found``/
   ``vhost_not_found``, a refused body ``bad_request`` with the validation text. A 401
   without credentials and a 405 have an empty body, as Cowboy sends them.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

REALM = 'Basic realm="RabbitMQ Management"'


def json_body(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def ok(value: Any) -> web.Response:
    return web.Response(text=json_body(value), content_type="application/json")


def no_content() -> web.Response:
    return web.Response(status=204)


def created() -> web.Response:
    return web.Response(status=201)


def error(status: int, kind: str, reason: str | list[str]) -> web.Response:
    body = json_body({"error": kind, "reason": reason})
    return web.Response(status=status, text=body, content_type="application/json")


def not_found() -> web.Response:
    return error(404, "Object Not Found", "Not Found")


def vhost_not_found() -> web.Response:
    return error(404, "not_found", "vhost_not_found")


def bad_request(reason: str | list[str]) -> web.Response:
    return error(400, "bad_request", reason)


def unauthorized(reason: str | None) -> web.Response:
    headers = {"WWW-Authenticate": REALM}
    if reason is None:
        return web.Response(status=401, headers=headers)
    body = json_body({"error": "not_authorized", "reason": reason})
    return web.Response(status=401, text=body, content_type="application/json", headers=headers)


def not_authorised(reason: str) -> web.Response:
    """A known user refused by its tags or permissions (RabbitMQ spells it with an s)."""
    body = json_body({"error": "not_authorised", "reason": reason})
    return web.Response(status=401, text=body, content_type="application/json")


def method_not_allowed(allowed: list[str]) -> web.Response:
    return web.Response(status=405, headers={"Allow": ", ".join(allowed)})


def unsupported_media_type() -> web.Response:
    return web.Response(status=415)


def escape_html_tags(text: str) -> str:
    """rabbit_mgmt_format:escape_html_tags/1: only <, > and & are replaced."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
