"""The worker layout: how many workers a node runs (its data directory's number, one per
core for a new one), each worker's settings derived from the node's, kept across starts."""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path

import pytest

from warren.cluster.nodes import worker_name
from warren.runtime import ports
from warren.runtime.config import Config, ConfigError, load
from warren.runtime.recovery import DEFINITIONS_FILE
from warren.runtime.workers.layout import (
    LAYOUT_FILE,
    ONE_PROCESS_DATA,
    cores,
    link_addresses,
    load_or_create,
    made_for,
    make_sockets_directory,
    management_address,
    nodes_of_members,
    remove_sockets,
    settle_workers,
    worker_config,
    worker_index,
    worker_names,
)


def test_workers_default_to_automatic_and_take_each_source() -> None:
    assert load([], {}).workers == 0
    assert load([], {"WARREN_WORKERS": "3"}).workers == 3
    assert load(["--workers", "2"], {"WARREN_WORKERS": "3"}).workers == 2


def test_fewer_than_zero_workers_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"bad workers = .-1. .*must be 0 \(the data"):
        load(["--workers", "-1"], {})


def test_a_new_data_directory_gets_one_worker_per_core(tmp_path: Path) -> None:
    assert cores() == len(os.sched_getaffinity(0))
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # as `taskset -c 0` or a cpuset of one core
    try:
        assert settle_workers(Config(data_dir=tmp_path / "new")).workers == 1
    finally:
        os.sched_setaffinity(0, allowed)
    assert made_for(tmp_path / "new") is None
    assert settle_workers(Config(data_dir=tmp_path / "new")).workers == cores()
    assert settle_workers(Config(data_dir=tmp_path / "new", workers=3)).workers == 3


def test_a_one_process_nodes_data_directory_keeps_one_process(tmp_path: Path) -> None:
    (tmp_path / ONE_PROCESS_DATA).touch()
    assert made_for(tmp_path) == 1
    assert settle_workers(Config(data_dir=tmp_path)).workers == 1
    assert settle_workers(Config(data_dir=tmp_path, workers=1)).workers == 1
    with pytest.raises(
        ConfigError,
        match=r"bad workers = 2: the data directory .* was made for 1 worker \(one process\),"
        r" and changing .* leave workers out \(the node keeps 1\), or use another --data-dir",
    ):
        settle_workers(Config(data_dir=tmp_path, workers=2))


def test_the_one_process_mark_is_what_a_node_writes_first() -> None:
    # not imported by the layout, so that the supervisor loads none of a node's code
    assert ONE_PROCESS_DATA == DEFINITIONS_FILE


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


def test_the_workers_cluster_ports_are_never_the_nodes_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the node's ports are chosen (by the operator, or by a test) but not yet bound when the
    # layout is drawn: a draw of one put worker 1's cluster listener on the AMQP port, and
    # worker 0 dialed AMQP for its peer (a CI run of the suite with 2 workers)
    own = [12_000 + offset for offset in range(5)]
    config = Config(
        data_dir=tmp_path,
        workers=2,
        port=own[0],
        ssl_port=own[1],
        management_port=own[2],
        management_ssl_port=own[3],
        cluster_port=own[4],
    )
    draws = iter([*own, 12_010, 12_011])
    monkeypatch.setattr(ports.random, "randrange", lambda _floor, _ceiling: next(draws))
    monkeypatch.setattr(ports, "_given", set())
    assert load_or_create(config).cluster_ports == (12_010, 12_011)


def test_the_layout_is_kept_and_its_worker_count_enforced(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path, workers=2)
    assert load_or_create(config) == load_or_create(config)
    assert (tmp_path / LAYOUT_FILE).exists()
    assert made_for(tmp_path) == 2
    # the worker count left out: the data directory's, whatever the cores
    assert settle_workers(dataclasses.replace(config, workers=0)).workers == 2
    assert worker_config(dataclasses.replace(config, workers=0), 1).workers == 2
    for other in (1, 3):
        with pytest.raises(ConfigError, match=f"bad workers = {other}: .* made for 2 workers"):
            settle_workers(dataclasses.replace(config, workers=other))


def test_in_a_cluster_every_nodes_workers_are_members_named_after_their_node(
    tmp_path: Path,
) -> None:
    # Refused before: a node of several workers could not be in a cluster (issue 19).
    peers = ["a@h=127.0.0.1:7000", "b@h=10.0.0.2:7100"]
    config = Config(
        data_dir=tmp_path,
        workers=2,
        node_name="a@h",
        cluster_nodes=peers,
        cluster_port=7000,
        cluster_cookie="secret",
        quorum_cluster_size=3,
    )
    load_or_create(config)
    first, second = worker_config(config, 0), worker_config(config, 1)
    assert (first.node_name, second.node_name) == ("a@h", "a-w1@h")
    assert (first.cluster_port, second.cluster_port) == (7000, 7001)
    # its own workers, and the other nodes as listed: how many workers they run, and
    # where, each learns as they join the metadata group (nodes may run different numbers)
    members = ["a@h=127.0.0.1:7000", "a-w1@h=127.0.0.1:7001", "b@h=10.0.0.2:7100"]
    assert first.cluster_nodes == second.cluster_nodes == members
    assert second.cluster_cookie == "secret" and second.quorum_cluster_size == 3
    assert second.data_dir == tmp_path / "workers" / "1"
    assert worker_names(second, "a@h") == ["a@h", "a-w1@h"]
    assert nodes_of_members(second, "a@h") == {"a@h": "a@h", "a-w1@h": "a@h"}


def test_a_node_on_its_own_names_its_workers_apart_from_itself(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path, workers=2, node_name="rabbit@host")
    load_or_create(config)
    assert worker_names(worker_config(config, 1), "rabbit@host") == [
        "rabbit-w0@host",
        "rabbit-w1@host",
    ]


def test_the_workers_link_over_unix_sockets_beside_their_management_ones(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)  # a data directory too long for a socket's path
    deep.mkdir()
    for peers, names in (
        ([], ["rabbit-w0@host", "rabbit-w1@host", "rabbit-w2@host"]),
        (["rabbit@host=127.0.0.1:7000"], ["rabbit@host", "rabbit-w1@host", "rabbit-w2@host"]),
    ):
        config = Config(data_dir=deep, workers=3, node_name="rabbit@host", cluster_nodes=peers)
        load_or_create(config)
        worker = worker_config(dataclasses.replace(config, cluster_cookie="c"), 1)
        links = link_addresses(worker, "rabbit@host")
        assert list(links) == names
        for index, path in enumerate(links.values()):
            assert path == management_address(deep / "workers", index).replace(".sock", ".link")
            assert len(path.encode()) < 107


def _stale_socket(path: Path) -> None:
    """A socket file no process listens on, as a node killed with SIGKILL leaves it."""
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen()


def test_removing_a_nodes_sockets_takes_their_directory_too(tmp_path: Path) -> None:
    workers_dir = tmp_path / "workers"
    directory = Path(management_address(workers_dir, 1)).parent
    make_sockets_directory(str(directory / "1.sock"))
    for name in ("1.sock", "0.link", "1.link"):
        _stale_socket(directory / name)
    remove_sockets(workers_dir)
    assert not directory.exists()
    remove_sockets(workers_dir)  # none left: nothing to do


def test_removing_a_nodes_sockets_leaves_what_is_not_one(tmp_path: Path) -> None:
    workers_dir = tmp_path / "workers"
    directory = Path(management_address(workers_dir, 1)).parent
    make_sockets_directory(str(directory / "1.sock"))
    _stale_socket(directory / "1.sock")
    (directory / "notes").write_text("not the node's")
    try:
        remove_sockets(workers_dir)
        assert [path.name for path in directory.iterdir()] == ["notes"]
    finally:
        (directory / "notes").unlink()
        directory.rmdir()


def test_worker_index_and_name() -> None:
    assert worker_index({}) is None
    assert worker_index({"WARREN_WORKER_INDEX": "1"}) == 1
    assert worker_name("warren", 2) == "warren-w2"


@pytest.mark.parametrize("text", ["{", "[]", '{"version": 1}', '{"version": 2}'])
def test_a_damaged_layout_file_is_a_config_error_naming_it(tmp_path: Path, text: str) -> None:
    # the start reads it before anything else; a traceback before
    (tmp_path / LAYOUT_FILE).write_text(text)
    with pytest.raises(ConfigError, match=f"{tmp_path / LAYOUT_FILE}"):
        settle_workers(Config(data_dir=tmp_path))
