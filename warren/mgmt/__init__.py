"""The HTTP management API: RabbitMQ's paths, JSON shapes and status codes, over aiohttp.

Theory of operation:
1. `start_management(broker, sockets)` serves the API on the sockets the node bound for
   it (`config.management_port` at every address of `config.bind`) and returns the runner
   to clean up.
2. `server` authenticates (HTTP basic with the broker's users, loopback-only users as for
   AMQP) and dispatches on the raw path, so that the vhost ``/`` arrives as ``%2F``;
   `resources` implements one handler per RabbitMQ resource over `warren.runtime.admin`;
   `replies` builds RabbitMQ's bodies (compact JSON, ``{"error": …, "reason": …}``).
3. Nothing here holds broker state: every request reads or changes it through
   `warren.runtime.admin`, on the event loop the broker runs on.

Source: rabbitmq_management (rabbit_mgmt_dispatcher, rabbit_mgmt_wm_*, rabbit_mgmt_util)
of RabbitMQ 3.10.8; shapes and codes checked against a live broker.
"""

from warren.mgmt.server import build_app, start_management

__all__ = ["build_app", "start_management"]
