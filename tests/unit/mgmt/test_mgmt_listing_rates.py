"""List queries (name, use_regex, sort, page, columns) and rates from samples."""

from __future__ import annotations

import pytest

from warren.mgmt import listing
from warren.mgmt.rates import HISTORY_INCR_S, HISTORY_KEPT, INTERVAL_S, Range, RangeError, Rates

ITEMS = [
    {"name": "b", "messages": 2, "message_stats": {"publish": 5}},
    {"name": "a", "messages": 9},
    {"name": "Ca", "messages": 1, "message_stats": {"publish": 1}},
]


def test_a_plain_list_is_left_as_it_is() -> None:
    assert listing.query_reply(ITEMS, {}) == ITEMS


def test_name_is_a_case_insensitive_substring_or_a_regex() -> None:
    assert [i["name"] for i in listing.query_reply(ITEMS, {"name": "A"})] == ["a", "Ca"]
    found = listing.query_reply(ITEMS, {"name": "^[ab]$", "use_regex": "true"})
    assert [i["name"] for i in found] == ["b", "a"]
    with pytest.raises(listing.ListingError):
        listing.query_reply(ITEMS, {"name": "(", "use_regex": "true"})


def test_sort_by_a_nested_field_missing_ones_first_and_reverse() -> None:
    by_publish = listing.query_reply(ITEMS, {"sort": "message_stats.publish"})
    assert [i["name"] for i in by_publish] == ["a", "Ca", "b"]
    reverse = listing.query_reply(ITEMS, {"sort": "messages", "sort_reverse": "true"})
    assert [i["name"] for i in reverse] == ["a", "b", "Ca"]


def test_pages_in_rabbitmqs_shape() -> None:
    page = listing.query_reply(ITEMS, {"page": "2", "page_size": "2", "sort": "name", "name": ""})
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
        listing.query_reply(ITEMS, {"page": "3", "page_size": "2"})
    assert beyond.value.reason == "Page out of range, page: 3 page size: 2, len: 3"
    assert listing.query_reply([], {"page": "1"})["page_count"] == 1


def test_columns_keep_only_named_fields_also_nested() -> None:
    picked = listing.query_reply(ITEMS[:1], {"columns": "name,message_stats.publish,nothing"})
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
    assert rates.view({}).with_details("k", {"publish": 42}) == {
        "publish": 42,
        "publish_details": {"rate": 4.0},
    }


def test_unknown_keys_have_rate_zero_and_forgotten_keys_go() -> None:
    rates = Rates(clock=lambda: 5.0)
    assert rates.rates("nobody", {"ack": 3}) == {"ack": 0.0}
    rates.observe("gone", {"ack": 1})
    rates.keep_only(set())
    assert rates.rates("gone", {"ack": 1}) == {"ack": 0.0}


def test_samples_cover_the_asked_range_newest_first() -> None:
    """RabbitMQ's ``age / incr + 1`` samples at multiples of ``incr``: the value kept at or
    before each, 0 before the key was first seen, so a chart is full from the start."""
    wall = [1_000_000]
    rates = Rates(clock=lambda: wall[0] / 1000, wall_ms=lambda: wall[0])
    for published in (3, 8, 20):  # one sampling round every 5 s
        rates.observe(("node",), {"publish": published})
        wall[0] += 5000
    wall[0] += 2000  # 1_017_000: the latest round kept 1_010_000
    view = rates.view({"msg_rates_age": "20", "msg_rates_incr": "5", "lengths_age": "x"})
    details = view.with_details(("node",), {"publish": 20})["publish_details"]
    assert details["samples"] == [
        {"sample": 20, "timestamp": 1_010_000},
        {"sample": 8, "timestamp": 1_005_000},
        {"sample": 3, "timestamp": 1_000_000},
        {"sample": 0, "timestamp": 995_000},
        {"sample": 0, "timestamp": 990_000},
    ]
    assert details["avg_rate"] == 1.0  # (20 - 0) / 20 s
    assert details["avg"] == 31 / 5
    lengths = view.with_details(("totals",), {"messages": 1})["messages_details"]
    assert "samples" not in lengths  # its age was no number: not asked for


def test_summed_samples_add_up_point_by_point() -> None:
    wall = [60_000]
    rates = Rates(clock=lambda: wall[0] / 1000, wall_ms=lambda: wall[0])
    rates.observe(("vhost-totals", "a"), {"messages": 2})
    rates.observe(("vhost-totals", "b"), {"messages": 5})
    view = rates.view({"lengths_age": "5", "lengths_incr": "5"})
    keys = [("vhost-totals", "a"), ("vhost-totals", "b")]
    summed = view.summed(keys, [{"messages": 2}, {"messages": 5}])
    assert summed["messages"] == 7
    assert summed["messages_details"]["samples"] == [
        {"sample": 7, "timestamp": 60_000},
        {"sample": 0, "timestamp": 55_000},
    ]


def test_history_is_a_minute_and_older_times_read_its_oldest_value() -> None:
    wall = [0]
    rates = Rates(clock=lambda: wall[0] / 1000, wall_ms=lambda: wall[0])
    for round_ in range(HISTORY_KEPT + 5):
        rates.observe(("queue", "/", "q"), {"messages": round_})
        wall[0] += HISTORY_INCR_S * 1000
    wall[0] -= HISTORY_INCR_S * 1000
    points = rates.samples(("queue", "/", "q"), ["messages"], Range(90, 5), wall[0])["messages"]
    assert points[0]["sample"] == HISTORY_KEPT + 4
    assert points[HISTORY_KEPT - 1]["sample"] == 5  # the oldest kept
    assert points[-1]["sample"] == 5  # older than kept: not 0, which would chart a drop


@pytest.mark.parametrize(
    "query",
    [
        {"lengths_age": "60", "lengths_incr": "0"},
        {"msg_rates_age": "-5", "msg_rates_incr": "5"},
        {"data_rates_age": "10000000", "data_rates_incr": "1"},
    ],
)
def test_a_range_that_gives_no_samples_is_refused(query: dict[str, str]) -> None:
    with pytest.raises(RangeError, match="Invalid range parameters: age"):
        Rates().view(query)


def test_the_newest_sample_is_from_the_latest_round_not_the_clock() -> None:
    """Just after an interval begins, before a round has kept a sample in it, the reply
    ends with the round before: repeating that sample would chart a rate of 0."""
    wall = [1_004_000]
    rates = Rates(clock=lambda: wall[0] / 1000, wall_ms=lambda: wall[0])
    rates.observe(("channel", 1), {"ack": 10})
    wall[0] = 1_005_100  # a new interval; its round has not run yet
    view = rates.view({"msg_rates_age": "5", "msg_rates_incr": "5"})
    samples = view.with_details(("channel", 1), {"ack": 12})["ack_details"]["samples"]
    assert samples == [
        {"sample": 10, "timestamp": 1_000_000},
        {"sample": 0, "timestamp": 995_000},
    ]
