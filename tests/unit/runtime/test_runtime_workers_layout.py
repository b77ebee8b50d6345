"""The worker layout: each worker's settings derived from the node's, kept across starts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from warren.runtime.config import Config, ConfigError, load
from warren.runtime.workers.layout import (
    LAYOUT_FILE,
    load_or_create,
    worker_config,
    worker_index,
    worker_name,
)


def test_workers_default_to_one_and_take_each_source() -> None:
    assert load([], {}).workers == 1
    assert load([], {"WARREN_WORKERS": "3"}).workers == 3
    assert load(["--workers", "2"], {"WARREN_WORKERS": "3"}).workers == 2


def test_fewer_than_one_worker_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"bad workers = .0. .*must be 1 or more"):
        load(["--workers", "0"], {})


def test_each_worker_is_a_member_of_the_nodes_internal_cluster(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path, workers=2, node_name="rabbit@host")
    layout = load_or_create(config)
    first, second = worker_config(config, 0), worker_config(config, 1)
    assert (first.node_name, second.node_name) == ("rabbit-w0@host", "rabbit-w1@host")
    assert second.data_dir == tmp_path / "workers" / "1"
    assert (
        first.cluster_nodes
        == second.cluster_nodes
        == [
            f"rabbit-w{index}@host=127.0.0.1:{port}"
            for index, port in enumerate(layout.cluster_ports)
        ]
    )
    assert second.cluster_port == layout.cluster_ports[1] != first.cluster_port
    assert first.cluster_cookie == second.cluster_cookie == layout.cookie
    assert second.quorum_cluster_size == 1
    assert second.port == config.port  # the AMQP port is shared


def test_the_layout_is_kept_and_its_worker_count_enforced(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path, workers=2)
    assert load_or_create(config) == load_or_create(config)
    assert (tmp_path / LAYOUT_FILE).exists()
    with pytest.raises(ConfigError, match="made for 2 workers"):
        load_or_create(dataclasses.replace(config, workers=3))


def test_workers_and_a_cluster_do_not_mix_yet(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path, workers=2, cluster_nodes=["a@h=127.0.0.1:1"])
    with pytest.raises(ConfigError, match="cannot be in a cluster yet"):
        load_or_create(config)


def test_worker_index_and_name() -> None:
    assert worker_index({}) is None
    assert worker_index({"WARREN_WORKER_INDEX": "1"}) == 1
    assert worker_name("warren", 2) == "warren-w2"
