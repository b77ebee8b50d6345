"""Client-visible failures: every AMQP 0-9-1 reply code and RabbitMQ's texts.

Theory of operation:
1. A failure a client can cause is raised as `SoftError` (the channel is closed) or
   `HardError` (the whole connection is closed). Both carry the reply code, the full
   reply text as RabbitMQ writes it (``"NOT_FOUND - no queue 'q' in vhost '/'"``) and,
   when known, the class and method ids of the method that failed.
2. The text starts with the reply code's name; constructors below build the texts that
   RabbitMQ uses so that every layer writes them the same way.
3. A bug is not an AMQP error. One boundary in the runtime logs it and closes with 541.
4. An error crosses nodes and survives in a quorum queue's snapshot (a refused consumer's
   reply) as its fields (`error_fields`, `error_from_fields`): kind, code, full text,
   class and method ids.

This package imports nothing but the standard library.
"""

from __future__ import annotations

import enum
from typing import Any


class ReplyCode(enum.IntEnum):
    """Reply codes of AMQP 0-9-1 (section 1.2 of the spec's constants)."""

    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541

    @property
    def is_hard(self) -> bool:
        """Whether the spec says this code closes the connection rather than a channel."""
        return self not in _SOFT_CODES


_SOFT_CODES = frozenset(
    {
        ReplyCode.CONTENT_TOO_LARGE,
        ReplyCode.NO_ROUTE,
        ReplyCode.NO_CONSUMERS,
        ReplyCode.ACCESS_REFUSED,
        ReplyCode.NOT_FOUND,
        ReplyCode.RESOURCE_LOCKED,
        ReplyCode.PRECONDITION_FAILED,
    }
)


class AmqpError(Exception):
    """A failure reported to the client with `channel.close` or `connection.close`."""

    def __init__(self, code: ReplyCode, detail: str, class_id: int = 0, method_id: int = 0):
        self.code = code
        self.text = f"{code.name} - {detail}"
        self.class_id = class_id
        self.method_id = method_id
        super().__init__(self.text)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # it crosses nodes: the outcome of a definition change a cluster's metadata log made
        return _rebuilt, (type(self), self.code, self.text, self.class_id, self.method_id)

    def at(self, class_id: int, method_id: int) -> AmqpError:
        """Record which method failed, unless a deeper layer already did."""
        if not self.class_id:
            self.class_id, self.method_id = class_id, method_id
        return self


def _rebuilt(
    kind: type[AmqpError], code: ReplyCode, text: str, class_id: int, method_id: int
) -> AmqpError:
    error = kind.__new__(kind)
    Exception.__init__(error, text)
    error.code, error.text, error.class_id, error.method_id = code, text, class_id, method_id
    return error


class SoftError(AmqpError):
    """Closes the channel the failing method arrived on."""


class HardError(AmqpError):
    """Closes the connection."""


class SilentHardError(HardError):
    """Drops the connection without a `connection.close`, as RabbitMQ does for an unknown
    method id (its reader process exits; the client sees the socket close)."""


# an error as plain values, for the records a cluster stores and sends (point 4)
ErrorFields = tuple[str, int, str, int, int]  # kind, reply code, text, class id, method id
_KINDS: dict[str, type[AmqpError]] = {
    kind.__name__: kind for kind in (AmqpError, SoftError, HardError, SilentHardError)
}


def error_fields(error: AmqpError) -> ErrorFields:
    return (type(error).__name__, int(error.code), error.text, error.class_id, error.method_id)


def error_from_fields(fields: ErrorFields) -> AmqpError:
    """The error `error_fields` gave (ValueError for a kind or code this release lacks)."""
    kind, code, text, class_id, method_id = fields
    if kind not in _KINDS:
        raise ValueError(f"unknown error kind {kind!r}")
    return _rebuilt(_KINDS[kind], ReplyCode(code), text, class_id, method_id)


def describe_queue(name: str, vhost: str) -> str:
    return f"queue '{name}' in vhost '{vhost}'"


def describe_exchange(name: str, vhost: str) -> str:
    return f"exchange '{name}' in vhost '{vhost}'"


def queue_not_found(name: str, vhost: str) -> SoftError:
    return SoftError(ReplyCode.NOT_FOUND, f"no queue '{name}' in vhost '{vhost}'")


def exchange_not_found(name: str, vhost: str) -> SoftError:
    return SoftError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")


def precondition_failed(detail: str) -> SoftError:
    return SoftError(ReplyCode.PRECONDITION_FAILED, detail)


def access_refused(detail: str) -> SoftError:
    return SoftError(ReplyCode.ACCESS_REFUSED, detail)


def resource_locked_queue(name: str, vhost: str) -> SoftError:
    return SoftError(
        ReplyCode.RESOURCE_LOCKED,
        f"cannot obtain exclusive access to locked {describe_queue(name, vhost)}. It could be "
        "originally declared on another connection or the exclusive property value does not "
        "match that of the original declaration.",
    )


def inequivalent_arg(
    kind: str, name: str, vhost: str, arg: str, received: str, current: str
) -> SoftError:
    """406 for a redeclare whose flag or argument differs; values are already quoted."""
    return precondition_failed(
        f"inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': "
        f"received {received} but current is {current}"
    )


def not_allowed(detail: str) -> HardError:
    return HardError(ReplyCode.NOT_ALLOWED, detail)


def command_invalid(detail: str) -> HardError:
    return HardError(ReplyCode.COMMAND_INVALID, detail)


def frame_error(detail: str) -> HardError:
    return HardError(ReplyCode.FRAME_ERROR, detail)


def syntax_error(detail: str) -> HardError:
    return HardError(ReplyCode.SYNTAX_ERROR, detail)


def channel_error(detail: str) -> HardError:
    return HardError(ReplyCode.CHANNEL_ERROR, detail)


def unexpected_frame(detail: str) -> HardError:
    return HardError(ReplyCode.UNEXPECTED_FRAME, detail)


def not_implemented(detail: str) -> HardError:
    return HardError(ReplyCode.NOT_IMPLEMENTED, detail)


# --- Texts of the model layer: declares, deletes, bindings and publishing (rabbit_channel,
# rabbit_amqqueue, rabbit_exchange and rabbit_queue_type_util in RabbitMQ 3.10). ---


def reserved_name_prefix(kind: str, name: str) -> SoftError:
    """403 for creating a queue or exchange whose name starts with ``amq.``."""
    return access_refused(f"{kind} name '{name}' contains reserved prefix 'amq.*'")


def default_exchange_refused() -> SoftError:
    """403 for declaring, deleting or binding to or from the default exchange."""
    return access_refused("operation not permitted on the default exchange")


def system_exchange_deletion(name: str, vhost: str) -> SoftError:
    return access_refused(f"deletion of system {describe_exchange(name, vhost)} not allowed")


def internal_exchange_publish(name: str, vhost: str) -> SoftError:
    return access_refused(f"cannot publish to internal {describe_exchange(name, vhost)}")


def exchange_in_use(name: str, vhost: str) -> SoftError:
    return precondition_failed(f"{describe_exchange(name, vhost)} in use")


def invalid_exchange_type(type_name: str) -> HardError:
    """RabbitMQ says "invalid" for a name that happens to be an Erlang atom already and
    "unknown" for any other; Warren cannot know the atom table and says "unknown"."""
    return command_invalid(f"unknown exchange type '{type_name}'")


def invalid_arg_type(type_name: str, arg: str, resource: str) -> SoftError:
    """406 for a name-valued argument of the wrong type; `resource` is ``queue 'q' in …``."""
    return precondition_failed(f"invalid type '{type_name}' for arg '{arg}' in {resource}")


def invalid_queue_arg(arg: str, name: str, vhost: str, reason: str) -> SoftError:
    """406 for a queue argument with a bad value; `reason` is already printed like Erlang."""
    return precondition_failed(f"invalid arg '{arg}' for {describe_queue(name, vhost)}: {reason}")


def queue_arg_not_for_type(arg: str, name: str, vhost: str, type_module: str) -> SoftError:
    return precondition_failed(
        f"invalid arg '{arg}' for {describe_queue(name, vhost)} of queue type {type_module}"
    )


def invalid_queue_property(prop: str, name: str, vhost: str) -> SoftError:
    return precondition_failed(f"invalid property '{prop}' for {describe_queue(name, vhost)}")
