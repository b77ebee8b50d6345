"""What every handler may use: the app's broker and rates, the caller, list replies.

Theory of operation:
1. A handler is ``async (request, broker, params) -> Response``; `server.authenticate`
   puts the caller's `Principal` on the request, `start_management` the `Rates`;
   `rates` gives them as the request's query asks (with samples or not).
2. `listed` is the one way a list goes out: RabbitMQ's ``name``/``use_regex``/``sort``/
   ``page``/``columns`` applied by `listing`, a refused query as its 400.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from warren.mgmt import listing, replies
from warren.mgmt.authz import Principal
from warren.mgmt.rates import RangeError, Rates, RateView
from warren.runtime.broker import Broker

Handler = Callable[[web.Request, Broker, list[str]], Awaitable[web.Response]]

BROKER_KEY = web.AppKey("broker", Broker)
RATES_KEY = web.AppKey("rates", Rates)
PRINCIPAL = "warren.principal"


def principal(request: web.Request) -> Principal:
    found = request.get(PRINCIPAL)
    assert isinstance(found, Principal)
    return found


def rates(request: web.Request) -> RateView:
    """The node's rates as this request asks for them: with samples when its query has
    RabbitMQ's range parameters; a range that cannot be answered is RabbitMQ's 400."""
    try:
        return request.app[RATES_KEY].view(request.query)
    except RangeError as refused:
        body = replies.json_body({"error": "bad_request", "reason": str(refused)})
        raise web.HTTPBadRequest(text=body, content_type="application/json") from None


def listed(request: web.Request, broker: Broker, items: list[Any]) -> web.Response:
    try:
        return replies.ok(listing.query_reply(items, request.query))
    except listing.ListingError as refused:
        return replies.error(400, refused.kind, refused.reason)


def single(request: web.Request, item: Any) -> web.Response:
    return replies.ok(listing.select_columns(item, request.query.get("columns")))
