"""List queries (name, use_regex, sort, page, columns) and rates from samples."""

from __future__ import annotations

import pytest

from warren.mgmt import listing
from warren.mgmt.rates import INTERVAL_S, Rates

ITEMS = [
    {"name": "b", "messages": 2, "message_stats": {"publish": 5}},
    {"name": "a", "messages": 9},
    {"name": "Ca", "messages": 1, "message_stats": {"publish": 1}},
]


def test_a_plain_list_is_left_as_it_is() -> None:
    assert listing.apply(ITEMS, {}) == ITEMS


def test_name_is_a_case_insensitive_substring_or_a_regex() -> None:
    assert [i["name"] for i in listing.apply(ITEMS, {"name": "A"})] == ["a", "Ca"]
    found = listing.apply(ITEMS, {"name": "^[ab]$", "use_regex": "true"})
    assert [i["name"] for i in found] == ["b", "a"]
    with pytest.raises(listing.ListingError):
        listing.apply(ITEMS, {"name": "(", "use_regex": "true"})


def test_sort_by_a_nested_field_missing_ones_first_and_reverse() -> None:
    by_publish = listing.apply(ITEMS, {"sort": "message_stats.publish"})
    assert [i["name"] for i in by_publish] == ["a", "Ca", "b"]
    reverse = listing.apply(ITEMS, {"sort": "messages", "sort_reverse": "true"})
    assert [i["name"] for i in reverse] == ["a", "b", "Ca"]


def test_pages_in_rabbitmqs_shape() -> None:
    page = listing.apply(ITEMS, {"page": "2", "page_size": "2", "sort": "name", "name": ""})
    assert page == {
        "filtered_count": 3,
        "item_count": 1,
        "items": [{"name": "b", "messages": 2, "message_stats": {"publish": 5}}],
        "page": 2,
        "page_count": 2,
        "page_size": 2,
        "total_count": 3,
    }
    with pytest.raises(listing.ListingError) as beyond:
        listing.apply(ITEMS, {"page": "3", "page_size": "2"})
    assert beyond.value.reason == "Page out of range, page: 3 page size: 2, len: 3"
    assert listing.apply([], {"page": "1"})["page_count"] == 1


def test_columns_keep_only_named_fields_also_nested() -> None:
    picked = listing.apply(ITEMS[:1], {"columns": "name,message_stats.publish,nothing"})
    assert picked == [{"name": "b", "message_stats": {"publish": 5}}]


def test_rate_is_the_change_over_the_window() -> None:
    now = [100.0]
    rates = Rates(clock=lambda: now[0])
    rates.observe("k", {"publish": 10})  # first sample: counted from zero one round ago
    assert rates.rates("k", {"publish": 10}) == {"publish": round(10 / INTERVAL_S, 1)}
    for step in range(1, 8):
        now[0] = 100.0 + step
        rates.observe("k", {"publish": 10 + 4 * step})
    assert rates.rates("k", {"publish": 38}) == {"publish": 4.0}
    now[0] += 1
    assert rates.with_details("k", {"publish": 42}) == {
        "publish": 42,
        "publish_details": {"rate": 4.0},
    }


def test_unknown_keys_have_rate_zero_and_forgotten_keys_go() -> None:
    rates = Rates(clock=lambda: 5.0)
    assert rates.rates("nobody", {"ack": 3}) == {"ack": 0.0}
    rates.observe("gone", {"ack": 1})
    rates.keep_only(set())
    assert rates.rates("gone", {"ack": 1}) == {"ack": 0.0}
