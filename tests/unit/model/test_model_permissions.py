"""Vhost permissions (`warren.model.permissions`): unanchored expressions, the empty one,
the default exchange's resource name, and RabbitMQ's denial text."""

from __future__ import annotations

import pytest

from warren.errors import ReplyCode, SoftError
from warren.model.binding import DestinationKind as Kind
from warren.model.permissions import Access, PermissionCheck


def check(configure: str = ".*", write: str = ".*", read: str = ".*") -> PermissionCheck:
    return PermissionCheck("u", "v", configure, write, read)


def test_an_expression_matches_anywhere_in_the_name_and_the_empty_one_matches_nothing():
    permission = check(configure="^app\\.", write="log", read="")
    assert permission.permits(Access.CONFIGURE, "app.orders")
    assert not permission.permits(Access.CONFIGURE, "my.app.orders")
    assert permission.permits(Access.WRITE, "audit-log-2")
    assert not permission.permits(Access.READ, "")
    assert not permission.permits(Access.READ, "anything")


def test_a_denial_is_403_with_rabbitmqs_text_and_the_default_exchange_is_amq_default():
    permission = check(write="^$")
    with pytest.raises(SoftError) as denied:
        permission.check(Access.WRITE, Kind.EXCHANGE, "")
    assert denied.value.code is ReplyCode.ACCESS_REFUSED
    assert denied.value.text == (
        "ACCESS_REFUSED - access to exchange 'amq.default' in vhost 'v' refused for user 'u'"
    )
    permission.check(Access.CONFIGURE, Kind.QUEUE, "q")  # permitted: no error


def test_an_invalid_stored_expression_permits_nothing():
    assert not check(read="(").permits(Access.READ, "(")
