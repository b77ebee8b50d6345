"""Users' password hashes in RabbitMQ's rabbit_password_hashing_sha256 format."""

from __future__ import annotations

import base64
import hashlib

from warren.runtime.access import Access, User, check_password, hash_password


def test_hash_is_base64_of_salt_and_sha256_of_salt_and_password() -> None:
    salt = b"\x01\x02\x03\x04"
    expected = base64.b64encode(salt + hashlib.sha256(salt + "sécret".encode()).digest())
    assert hash_password("sécret", salt) == expected.decode()
    assert hash_password("x") != hash_password("x")  # salted


def test_a_hash_recorded_from_rabbitmq_checks() -> None:
    # guest/guest as RabbitMQ 3.10.8 exported it (tests/integration/data)
    assert check_password("guest", "vtFAkN0cCCgL+2nsmuqePxqL6sH7Re4AtEvOhJJ/2G5fTyC/")
    assert not check_password("Guest", "vtFAkN0cCCgL+2nsmuqePxqL6sH7Re4AtEvOhJJ/2G5fTyC/")
    assert not check_password("guest", "not base64!")
    assert not check_password("guest", "")


def test_default_user_and_authentication() -> None:
    access = Access.with_default("guest", "guest")
    user = access.authenticate("guest", "guest")
    assert user is not None and user.tags == ("administrator",)
    assert access.permission("guest", "/") is not None
    assert access.authenticate("guest", "nope") is None
    access.users["nohash"] = User("nohash", "")
    assert access.authenticate("nohash", "") is None
    access.forget_user("guest")
    assert access.permission("guest", "/") is None
