"""Worker 0's node-wide totals: two workers' overview figures added up (`summed`)."""

from __future__ import annotations

from warren.mgmt.workers import summed


def test_counts_rates_and_samples_add_up_and_timestamps_stay() -> None:
    mine = {
        "publish": 3,
        "publish_details": {
            "rate": 1.5,
            "samples": [{"sample": 3, "timestamp": 10_000}, {"sample": 1, "timestamp": 5_000}],
        },
    }
    other = {
        "publish": 4,
        "publish_details": {
            "rate": 0.5,
            "samples": [{"sample": 4, "timestamp": 10_000}, {"sample": 2, "timestamp": 5_000}],
        },
        "deliver_get": 7,
    }
    assert summed(mine, other) == {
        "publish": 7,
        "publish_details": {
            "rate": 2.0,
            "samples": [{"sample": 7, "timestamp": 10_000}, {"sample": 3, "timestamp": 5_000}],
        },
        "deliver_get": 7,  # only the other worker has seen one: its figure
    }


def test_flags_and_names_are_worker_zeros() -> None:
    assert summed({"alarm": False, "node": "w0"}, {"alarm": True, "node": "w1"}) == {
        "alarm": False,
        "node": "w0",
    }
