"""A binding's properties_key (`warren.runtime.admin_phash`) against the keys RabbitMQ
3.10.8's management API gave for the same arguments (bindings posted through its HTTP API,
read back from ``GET /api/bindings/...``)."""

from __future__ import annotations

import pytest

from warren.runtime.admin_phash import properties_key

RECORDED = [
    ("k0", {"a": True}, "k0~a2lJKQ"),
    ("k1", {"b": 1.5}, "k1~GhpKLw"),
    ("k2", {"c": "str"}, "k2~_KSMYg"),
    ("k3", {"d": -5}, "k3~Q4uCZQ"),
    ("k4", {"e": 300000000}, "k4~0s1kUg"),
    ("k5", {"f": [1, "x"]}, "k5~Gv-wvA"),
    ("k6", {"g": {"h": 1}}, "k6~paegBw"),
    ("k8", {"a": "2", "m": False, "z": 1}, "k8~2RBjxw"),
    ("k9", {"long-key-name-here": "a much longer string value than twelve bytes"}, "k9~aF92RA"),
    ("k", {"x-any": "yes", "n": 7}, "k~rkBFvA"),
]


@pytest.mark.parametrize(("routing_key", "arguments", "key"), RECORDED)
def test_the_key_of_a_binding_with_arguments_is_rabbitmqs(routing_key, arguments, key):
    assert properties_key(routing_key, arguments) == key


def test_keys_without_arguments_are_the_quoted_routing_key():
    assert properties_key("a.#", {}) == "a.%23"
    assert properties_key("a b~c", {}) == "a+b%7Ec"
    assert properties_key("", {}) == "~"
