"""What the admin operations (`warren.runtime.admin`, `admin_access`, `admin_objects`,
`admin_live`) raise for the management API to turn into its answers: `NotFound` for an
object that does not exist, `DefinitionsError` for a definitions document Warren refuses.
A module of its own so that the admin modules share them without importing each other."""

from __future__ import annotations


class NotFound(LookupError):
    """A vhost, queue or policy that does not exist; `vhost` tells which was missing."""

    def __init__(self, *, vhost: bool = False) -> None:
        super().__init__("vhost_not_found" if vhost else "not_found")
        self.vhost = vhost


class DefinitionsError(ValueError):
    """A definitions document Warren refuses (RabbitMQ's 400 ``bad_request``)."""
