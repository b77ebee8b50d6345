"""What every handler may use: the app's broker and rates, the caller, list replies.

Theory of operation:
1. A handler is ``async (request, broker, params) -> Response``; `server.authenticate`
   puts the caller's `Principal` on the request, `start_management` the `Rates`.
2. `listed` is the one way a list goes out: RabbitMQ's ``name``/``use_regex``/``sort``/
   ``page``/``columns`` applied by `listing`, a refused query as its 400.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from warren.mgmt import listing, replies
from warren.mgmt.authz import Principal
from warren.mgmt.rates import Rates
from warren.runtime.broker import Broker

Handler = Callable[[web.Request, Broker, list[str]], Awaitable[web.Response]]

BROKER_KEY = web.AppKey("broker", Broker)
RATES_KEY = web.AppKey("rates", Rates)
PRINCIPAL = "warren.principal"


def principal(request: web.Request) -> Principal:
    found = request.get(PRINCIPAL)
    assert isinstance(found, Principal)
    return found


def rates(request: web.Request) -> Rates:
    return request.app[RATES_KEY]


def listed(request: web.Request, broker: Broker, items: list[Any]) -> web.Response:
    try:
        return replies.ok(listing.apply(items, request.query))
    except listing.ListingError as refused:
        return replies.error(400, refused.kind, refused.reason)


def single(request: web.Request, item: Any) -> web.Response:
    return replies.ok(listing.select_columns(item, request.query.get("columns")))
