"""Redeclare equivalence: when a declare of an existing queue or exchange is refused with 406.

Theory of operation:
1. A flag (``type``, ``durable``, ``auto_delete``, ``internal``) must equal the current one;
   the text quotes both as Erlang prints atoms: ``received 'false' but current is 'true'``.
2. Only the arguments a kind compares are looked at, in order: for an exchange only
   ``alternate-exchange``; for a queue the arguments its type understands
   (`warren.model.arguments.QUEUE_TYPE_ARGUMENTS`). Unknown arguments may differ freely.
3. Two present values are equivalent when they are the same Erlang term. RabbitMQ first
   compares type classes (all integer widths are one class) and then values, falling back
   to an exact comparison of the bare values; for decoded AMQP values both come to this:
   integers of any width and timestamps compare by number, a longstr and a binary by bytes,
   ``1`` is not ``1.0`` nor ``true``. The text then shows the bare values:
   ``received '1099511627776' but current is '10'``.
4. A value present on one side only is shown with its type
   (``received the value '5000' of type 'signedint' but current is none``), except that a
   missing ``x-queue-type`` and ``classic`` are the same.

Where RabbitMQ 3.10 crashes the connection (541) comparing a decimal with an integer, Warren
answers with the ordinary 406.

Source: rabbit_misc:assert_args_equivalence/4, assert_field_equivalence/4, val/1 and
type_class/1; rabbit_exchange:assert_equivalence/6; rabbit_amqqueue:assert_equivalence/5.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Iterable, Mapping

from warren.amqp.table import Typed
from warren.errors import inequivalent_arg
from warren.model.erlang_terms import as_bytes, described_value, quoted_value

_CLASSIC = Typed("S", "classic")


def assert_flag(
    kind: str, name: str, vhost: str, flag: str, current: object, received: object
) -> None:
    """406 unless a redeclared flag (or exchange type, as its name) equals the current one."""
    if current != received:
        raise inequivalent_arg(
            kind, name, vhost, flag, quoted_value(received), quoted_value(current)
        )


def assert_arguments(
    kind: str,
    name: str,
    vhost: str,
    keys: Iterable[str],
    current: Mapping[str, Typed],
    received: Mapping[str, Typed],
) -> None:
    """406 for the first of `keys` whose value differs between the two argument tables."""
    for key in keys:
        if not _equivalent(key, current.get(key), received.get(key)):
            raise inequivalent_arg(
                kind, name, vhost, key, *_describe(current.get(key), received.get(key))
            )


def _equivalent(key: str, current: Typed | None, received: Typed | None) -> bool:
    if current is None or received is None:
        if key == "x-queue-type" and _CLASSIC in (current, received):
            return True
        return current is received
    return _identical(_term(current.value), _term(received.value))


def _describe(current: Typed | None, received: Typed | None) -> tuple[str, str]:
    """(received, current) as RabbitMQ's text shows them."""
    if current is None or received is None:
        return described_value(received), described_value(current)
    return quoted_value(received.value), quoted_value(current.value)


def _term(value: object) -> object:
    """The Erlang term RabbitMQ holds for a decoded value, as a comparable Python value."""
    if isinstance(value, str | bytes | bytearray):
        return as_bytes(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, decimal.Decimal):
        return ("decimal", value.as_tuple())
    if isinstance(value, dict):
        return tuple((key, _term(item)) for key, item in value.items())
    if isinstance(value, list):
        return tuple(_term(item) for item in value)
    return value


def _identical(left: object, right: object) -> bool:
    """Erlang's ``=:=``: equal and of one Erlang type (``1`` is not ``1.0``, nor ``true``)."""
    return type(left) is type(right) and left == right
