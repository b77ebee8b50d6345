"""The queues a `queuePattern` read takes, listed through the management HTTP API.

Theory of operation:
1. AMQP 0-9-1 has no method that lists queues, so a pattern (as Kafka's `subscribePattern`)
   needs the management API, which RabbitMQ's plugin and Warren both serve:
   `GET /api/queues/{vhost}` answers every queue of the virtual host as JSON objects with a
   `name`. The vhost is the one of the read's AMQP `uri`; the credentials ride in
   `managementUrl` (HTTP basic authentication), `guest:guest` when it has none.
2. A queue is taken when the whole of its name matches the pattern (`re.fullmatch`):
   `orders\\..*` takes `orders.new`, not `old.orders.new`. The list is made once, on the
   driver, when the reader is built (the query's start); queues declared later are read by
   the next start, not picked up on the way.
3. No queue matching is an error naming the pattern and the vhost, like a missing queue: a
   query with nothing to consume would otherwise wait forever.
4. `urllib.request` is imported by `queue_names`, not with this module: it brings `ssl`,
   `http.client` and `email` (tens of milliseconds), and every process of a streaming read
   imports this module (a query's source process first of all, before it can consume),
   while only a `queuePattern` lists queues.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from urllib.parse import quote, unquote, urlsplit

from warren.spark.options import OptionError, ReadOptions
from warren.spark.wire import Address

TIMEOUT_S = 30.0


def queue_names(management_url: str, vhost: str) -> list[str]:
    """Every queue of `vhost` the management API at `management_url` lists (rule 1)."""
    import urllib.error  # rule 4
    import urllib.request  # rule 4

    parts = urlsplit(management_url)
    base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}{parts.path.rstrip('/')}"
    user, password = unquote(parts.username or "guest"), unquote(parts.password or "guest")
    request = urllib.request.Request(f"{base}/api/queues/{quote(vhost, safe='')}")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            listed = json.load(response)
    except urllib.error.HTTPError as error:
        raise ConnectionError(
            f"the management API at {base} refused to list the queues of vhost {vhost!r}: "
            f"{error.code} {error.reason}"
        ) from None
    except OSError as error:
        raise ConnectionError(f"no management API at {base} ({error})") from None
    return [str(queue["name"]) for queue in listed]


def resolved(options: ReadOptions) -> ReadOptions:
    """`options` with the queues its `queuePattern` matches (rules 2 and 3); as given when
    it names its queues."""
    if options.queue_pattern is None:
        return options
    assert options.management_url is not None, "ReadOptions.parse requires it with a pattern"
    vhost = Address.parse(options.uri).vhost
    names = queue_names(options.management_url, vhost)
    queues = tuple(sorted(name for name in names if options.queue_pattern.fullmatch(name)))
    if not queues:
        raise OptionError(
            f"no queue in vhost {vhost!r} matches queuePattern {options.queue_pattern.pattern!r}"
        )
    return dataclasses.replace(options, queues=queues)
