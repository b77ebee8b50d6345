"""How many worker processes a node runs, and the layout of a node of several.

Theory of operation:
1. The node's processes are a supervisor (it owns ``data_dir`` and its lock, and runs the
   workers: `warren.runtime.workers.supervisor`) and N workers. Worker ``i`` is a whole
   Warren node with its own name (``warren-w1@localhost`` for ``warren@localhost``), data
   directory (``<data_dir>/workers/<i>``) and write-ahead logs; `worker_config` derives
   these from the node's settings, so a worker reads the same config file, environment
   and flags as the supervisor and only learns its index (``WARREN_WORKER_INDEX``).
2. The workers of a node are an internal cluster: they reach each other's queues through
   the cluster layer's queue hosts (over Unix sockets, point 7) and share one metadata
   group. Their cluster ports (on loopback) and cookie are chosen on the node's first
   start and kept in ``<data_dir>/workers.json``, so a restarted worker comes back as
   the same member.
3. Every worker listens on the node's AMQP (and AMQPS) port with ``SO_REUSEPORT``, so the
   kernel spreads connections over them; only worker 0 serves the management API on the
   node's ports, and asks the others, over a Unix socket of each (`management_address`:
   in a private directory under the temporary directory, since a data directory's path
   may be too long for a socket's), for what lives in them (`warren.mgmt.workers`).
4. The workers hand connections to each other (`warren.runtime.workers.worker`) through
   inboxes, one Unix datagram socket pair per worker that the supervisor makes
   (`make_inboxes`) and every worker inherits: its own receiving end and every worker's
   sending end, their descriptors named by ``INBOXES_VARIABLE`` (`inboxes`).
5. A node keeps the number of workers it was first started with: its queues live in the
   workers' directories (changing the count is not supported yet, and is refused).
   ``workers = 0``, the default, is that number (`settle_workers`): a data directory's
   ``workers.json`` says it, one holding a one-process node's data (no ``workers.json``,
   its definitions at its top) was made for 1, and a new one gets one worker per core
   this process may run on (`cores`). A count the operator gives that differs from the
   data directory's is refused, so a node never starts beside its own data.
6. A node of several workers in a cluster (``cluster_nodes`` names other nodes) is one
   flat cluster of every node's workers: worker 0 is the member named after the node (so
   peers, operators and the management API name nodes as they do with one process; a
   node's quorum replicas spread over its workers: `warren.runtime.cluster.node`, module
   doc 6; it alone of its node votes in the metadata group), worker ``i`` is
   ``<name>-w<i>@<host>`` on the node's cluster port ``+ i``. A worker
   is given its own node's workers and the other nodes as ``cluster_nodes`` names them
   (`worker_config`): it learns how many workers each other node runs, and where they
   are, as they join the metadata group (`warren.runtime.cluster.node`), so
   the nodes of a cluster may run different numbers of workers. The node's cluster port
   and cookie are the operator's, not the layout's.
7. The workers of a node link to each other over Unix sockets, not their cluster ports
   (`link_addresses`: one a worker, beside its management socket; the peer links' rule
   7), with the same framing and batching; other nodes of a cluster over TCP (point 6).
8. The sockets' directory lives as long as the node: the supervisor removes it with its
   sockets (`remove_sockets`) when the node stops, and at its start, where a node killed
   with SIGKILL left it. It does so holding the data directory's lock, which proves no
   process of that node is alive (its workers die with it:
   `warren.runtime.workers.supervisor` point 5), so the sockets it removes are never a
   live node's.
It reads the data directory and writes ``workers.json``, makes socket pairs, makes and
removes the sockets' directory; it starts nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import socket
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from warren.cluster.nodes import parse_nodes, worker_name
from warren.runtime.config import Config, ConfigError
from warren.runtime.ports import unused_port

WORKER_INDEX_VARIABLE = "WARREN_WORKER_INDEX"  # set by the supervisor for each worker
INBOXES_VARIABLE = "WARREN_WORKER_INBOXES"  # likewise: the inboxes' descriptors
LAYOUT_FILE = "workers.json"
LAYOUT_VERSION = 1
WORKERS_DIR = "workers"
# what a one-process node keeps at the top of its data directory from its first start
# (`warren.runtime.recovery.DEFINITIONS_FILE`; not imported: the supervisor loads none
# of a node's own code, `warren.runtime.workers.supervisor` point 6)
ONE_PROCESS_DATA = "definitions.sqlite3"


@dataclass(frozen=True, slots=True)
class Layout:
    """What the workers of one node agree on, kept across restarts."""

    cookie: str
    cluster_ports: tuple[int, ...]  # worker i's cluster listener on 127.0.0.1

    @property
    def workers(self) -> int:
        return len(self.cluster_ports)


def worker_index(environ: Mapping[str, str]) -> int | None:
    """This process's worker index; None for the supervisor or a one-process node."""
    value = environ.get(WORKER_INDEX_VARIABLE)
    return None if value is None else int(value)


def node_of(worker: str, index: int) -> str:
    """The node's name, from worker `index`'s (`worker_name`'s and `member_name`'s inverse)."""
    name, at, host = worker.partition("@")
    return f"{name.removesuffix(f'-w{index}')}{at}{host}"


def worker_names(config: Config, node: str) -> list[str]:
    """The names of `node`'s workers by index, as worker `config` (`worker_config`'s) lists
    them: ``<name>-w<i>`` on a node on its own, `member_name` in a cluster of nodes."""
    listed = {entry.partition("=")[0] for entry in config.cluster_nodes}
    name = worker_name if worker_name(node, 0) in listed else member_name
    return [name(node, index) for index in range(config.workers)]


def nodes_of_members(config: Config, node: str) -> dict[str, str]:
    """In a cluster of nodes, `node`'s workers by name, each mapped to it (worker
    `config`'s: `worker_config`); the other nodes' are named by the ``-w<i>`` convention
    (`warren.runtime.cluster.node.ClusterNode.node_of`)."""
    return dict.fromkeys(worker_names(config, node), node)


def management_address(workers_dir: Path, index: int) -> str:
    """Where worker `index` of the node whose workers' directories are in `workers_dir`
    serves its management API for worker 0: a Unix socket in a directory of this user's
    in the temporary directory, named by a digest of `workers_dir` (a data directory's
    own path may be longer than the 107 bytes a Unix socket's path may have)."""
    return str(_sockets_directory(workers_dir) / f"{index}.sock")


def link_addresses(config: Config, node: str) -> dict[str, str]:
    """Where each worker of `node` (worker `config`'s, by name) listens for the other
    workers' peer links (module doc, 7): a Unix socket beside its `management_address`."""
    directory = _sockets_directory(config.data_dir.parent)
    return {
        name: str(directory / f"{index}.link")
        for index, name in enumerate(worker_names(config, node))
    }


def make_sockets_directory(address: str) -> None:
    """The directory of a `management_address` or a `link_addresses` socket, and its
    parent, made private to this user; ConfigError when the parent exists and another
    user could reach into it."""
    directory = Path(address).parent
    for path in (directory.parent, directory):
        path.mkdir(mode=0o700, exist_ok=True)
        status = path.lstat()
        if status.st_uid != os.getuid() or stat.S_IMODE(status.st_mode) & 0o077:
            raise ConfigError(f"{path} must be a directory only its owner, this user, can use")


def remove_sockets(workers_dir: Path) -> None:
    """Remove the sockets of the node whose workers' directories are in `workers_dir`
    (its `management_address` and `link_addresses` sockets), then their directory, when
    nothing else is in it (module doc, 8). Only its supervisor calls it, holding the data
    directory's lock: no socket there is then a live one. A directory it cannot list or
    change is left as it is: a worker's start says what is wrong with it
    (`make_sockets_directory`)."""
    directory = _sockets_directory(workers_dir)
    with contextlib.suppress(OSError):
        for entry in list(directory.iterdir()):
            if stat.S_ISSOCK(entry.lstat().st_mode):
                entry.unlink()
        directory.rmdir()


def _sockets_directory(workers_dir: Path) -> Path:
    digest = hashlib.sha256(str(workers_dir.resolve()).encode()).hexdigest()[:16]
    return _sockets_root() / digest


def _sockets_root() -> Path:
    return Path(tempfile.gettempdir()) / f"warren-{os.getuid()}"


def cores() -> int:
    """The cores this process may run on: its CPU affinity (a cpuset or `taskset` limits
    it), else every core of the machine."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def made_for(data_dir: Path) -> int | None:
    """How many workers `data_dir` was made for (module doc, 5); None for a new one."""
    path = data_dir / LAYOUT_FILE
    if path.exists():
        return read(path).workers
    return 1 if (data_dir / ONE_PROCESS_DATA).exists() else None


def settle_workers(config: Config) -> Config:
    """`config` with the node's number of workers (module doc, 5): the one its data
    directory was made for, or one per core for a new one, when ``workers`` is 0. Raises
    ConfigError when ``workers`` names another number than the data directory's."""
    made = made_for(config.data_dir)
    if config.workers == 0:
        return dataclasses.replace(config, workers=made or cores())
    if made is not None and made != config.workers:
        raise ConfigError(
            f"bad workers = {config.workers}: the data directory {config.data_dir} was made"
            f" for {_workers(made)}, and changing a node's number of workers is not supported"
            f" yet; leave workers out (the node keeps {made}), or use another --data-dir"
        )
    return config


def _workers(count: int) -> str:
    return "1 worker (one process)" if count == 1 else f"{count} workers"


def load_or_create(config: Config) -> Layout:
    """The node's layout; made (free ports, a fresh cookie) for `config.workers` workers
    on its first start (`settle_workers` checked that number against the data directory)."""
    path = config.data_dir / LAYOUT_FILE
    if path.exists():
        return read(path)
    # the node's own ports are chosen but not yet bound (its workers bind them): a draw that
    # took one would put a worker's cluster listener on the node's AMQP port
    own = (
        config.port,
        config.ssl_port,
        config.management_port,
        config.management_ssl_port,
        config.cluster_port,
    )
    layout = Layout(secrets.token_hex(16), tuple(unused_port(own) for _ in range(config.workers)))
    temporary = path.with_suffix(".tmp")
    temporary.write_text(
        json.dumps(
            {
                "version": LAYOUT_VERSION,
                "cookie": layout.cookie,
                "cluster_ports": list(layout.cluster_ports),
            }
        )
    )
    os.replace(temporary, path)
    return layout


def read(path: Path) -> Layout:
    """The layout kept in `path`; ConfigError, naming the file, when it cannot be read (the
    node's start reads it to know how many workers to run: `settle_workers`)."""
    try:
        document = json.loads(path.read_text())
        if document.get("version") != LAYOUT_VERSION:
            raise ConfigError(
                f"{path} has version {document.get('version')!r}: expected {LAYOUT_VERSION}"
            )
        return Layout(
            str(document["cookie"]), tuple(int(port) for port in document["cluster_ports"])
        )
    except ConfigError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ConfigError(
            f"cannot read {path}, where the node keeps its workers' layout:"
            f" {type(error).__name__}: {error}; restore it from a backup, or use another"
            " --data-dir"
        ) from None


def member_name(node_name: str, index: int) -> str:
    """Worker `index`'s name as a member of the node's cluster (module doc, 6)."""
    return node_name if index == 0 else worker_name(node_name, index)


def members_of_nodes(config: Config) -> dict[str, tuple[str, int]]:
    """What worker `config`'s ``cluster_nodes`` are, from the node's `config` (module doc,
    6): this node's workers at its cluster address (listed or not) ``+ i``, then the
    other nodes as listed."""
    nodes = parse_nodes(config.cluster_nodes)
    host, port = nodes.pop(config.node_name, (config.bind[0], config.cluster_port))
    workers = {
        member_name(config.node_name, index): (host, port + index)
        for index in range(config.workers)
    }
    return {**workers, **nodes}


def worker_config(config: Config, index: int) -> Config:
    """Worker `index`'s settings: the node's, as a member of the node's internal cluster.
    A quorum queue gets one replica (its worker's) unless declared with more. In a cluster
    of nodes, a member of the flat cluster of their workers (module doc, 6). Its
    ``workers`` is the node's, as the layout keeps it (module doc, 5)."""
    layout = read(config.data_dir / LAYOUT_FILE)
    if not 0 <= index < layout.workers:
        raise ConfigError(
            f"{WORKER_INDEX_VARIABLE}={index}: this node has {layout.workers} workers"
        )
    config = dataclasses.replace(config, workers=layout.workers)
    if config.cluster_nodes:
        return dataclasses.replace(
            config,
            node_name=member_name(config.node_name, index),
            data_dir=config.data_dir / WORKERS_DIR / str(index),
            cluster_nodes=[
                f"{name}={host}:{port}" for name, (host, port) in members_of_nodes(config).items()
            ],
            cluster_port=config.cluster_port + index,
        )
    names = [worker_name(config.node_name, number) for number in range(layout.workers)]
    return dataclasses.replace(
        config,
        node_name=names[index],
        data_dir=config.data_dir / WORKERS_DIR / str(index),
        cluster_nodes=[
            f"{name}=127.0.0.1:{port}"
            for name, port in zip(names, layout.cluster_ports, strict=True)
        ],
        cluster_port=layout.cluster_ports[index],
        cluster_cookie=layout.cookie,
        quorum_cluster_size=1,
    )


def make_inboxes(workers: int) -> tuple[list[socket.socket], list[socket.socket]]:
    """The supervisor's: each worker's inbox, as (receiving ends, sending ends)."""
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(workers)]
    return [pair[0] for pair in pairs], [pair[1] for pair in pairs]


def inboxes_setting(receiving: socket.socket, sending: list[socket.socket]) -> str:
    return ",".join(str(sock.fileno()) for sock in (receiving, *sending))


def inboxes(environ: Mapping[str, str]) -> tuple[socket.socket, list[socket.socket]] | None:
    """This worker's inbox and every worker's sending end, from the inherited descriptors."""
    value = environ.get(INBOXES_VARIABLE)
    if not value:
        return None
    receiving, *sending = (socket.socket(fileno=int(fd)) for fd in value.split(","))
    for sock in (receiving, *sending):
        sock.setblocking(False)
    return receiving, sending
