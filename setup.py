"""The release build's compiled cores (issue 19); pyproject.toml holds everything else.

Theory of operation:
1. Without ``WARREN_MYPYC=1`` this adds nothing: the package is plain Python, as every
   checkout (`make run`, `make test`, ``pip install -e .``, CI) and the pure
   ``py3-none-any`` wheel have it, and needs no compiler.
2. With ``WARREN_MYPYC=1`` the modules `COMPILED` lists are compiled by mypyc into C
   extensions: `make wheel` builds the release's platform wheel so (``pip wheel
   --no-build-isolation`` in .venv-build, which holds the compiler: mypy itself, which the
   default build must not need; mypyc's own advice for setuptools is ``mypycify`` in
   setup.py), and `make mypyc` builds them in place (``setup.py build_ext --inplace``, next
   to their sources, which Python then imports in their place). Both need gcc, the Python
   headers, mypy and setuptools 77 or newer.
3. `COMPILED` is the modules of the pure cores that a message's bytecodes run in: counted
   per module (`python -m bench.bytecodes --functions`) for a transient message to a
   consumer, a publish into a drop-head queue, a confirmed persistent publish, and one into
   a quorum queue, these held 99 % of the cores' bytecodes per message, and compiling every
   core module (`raft`, `cluster`, the rest of `model`: declares, policies, the Raft node,
   whose work per message is a few bytecodes) took away no more but doubled the compile
   (docs/performance.md, "The release build"). Modules stay Python where mypyc cannot make
   native classes (the method table's `@method` classes, `raft/log.py`'s `AssertionError`
   subclass) or where msgspec decodes classes by their annotations, which compiled classes
   carry only approximately (``int | None`` becomes ``type``): the replicated path's
   encodings and `QueueSettings`.
   Beside them, the runtime's persistent publish path (issue #21): the log's append, the
   `Enqueued` record's encoding, the journal's ledger, `Durability.enqueued` and the held
   confirm, about 380 bytecodes of a confirmed persistent publish that were Python while
   the cores around them were compiled. They are plain typed classes; compiled, they take
   only the real classes they name (a test handing them a fake runs interpreted).
   Of the runtime, the modules a classic queue's message runs through are compiled too
   where mypyc can (issue 19, docs/performance.md, "the runtime's per-message path"): once
   the cores were, the channel, confirms, the queue's effects and the connection's protocol
   held three quarters of the bytecodes W1 still ran per message. A compiled class can have
   no subclass in Python (it raises "interpreted classes cannot inherit from compiled"), so
   the runtime's classes that had one were made parts instead. The connection's shell
   (`connection.py`, an `asyncio.Protocol`: mypyc builds it as a native class on that
   Python base) is compiled since a handed-over connection is one given the state to
   replay (`workers/handover.py`'s `taken_over`) rather than a subclass. `queues/classic.py`
   is compiled, with `queues/paging.py` (the test a durable publish makes for paging) and
   `queues/clock.py` (the time of each publish's `Meta`, a Python frame otherwise): the
   cluster's home of a classic queue is a part its host holds (`ClusterHome`), not a
   subclass, and `HostFields`, the host's Python base, has no ``__slots__`` (a compiled
   class's Python base cannot). `queues/host.py` stays Python (the quorum and remote hosts
   subclass `HostFields`; its generic outcome dataclasses are not classes mypyc builds
   either).
4. gcc's optimisation and debug levels are mypyc's defaults (``-O3 -g1``) unless
   ``MYPYC_OPT_LEVEL`` / ``MYPYC_DEBUG_LEVEL`` say otherwise, as for the ``mypyc`` command.
"""

from __future__ import annotations

import os

from setuptools import setup

COMPILED = [
    "warren/amqp/connection.py",  # the connection's state machine: every frame
    "warren/amqp/content.py",  # a message's properties and frames
    "warren/amqp/frames.py",  # the frame decoder
    "warren/amqp/table.py",  # field tables: a message's headers
    "warren/model/exchange.py",  # an exchange and its bindings: counts each publish
    "warren/model/headers.py",  # headers matching
    "warren/model/routers.py",  # each exchange type's routing index
    "warren/model/topic.py",  # topic matching
    "warren/model/vhost.py",  # routing a publish
    "warren/queue/machine.py",  # the queue: enqueue, deliver, settle
    "warren/runtime/channel.py",  # a publish's routing and a delivery's frames
    "warren/runtime/confirms.py",  # publisher confirms; a persistent publish's held until its sync
    "warren/runtime/connection.py",  # the connection's shell: each read's events, each write
    "warren/runtime/durability.py",  # a persistent publish's record, and the group commit
    "warren/runtime/queues/classic.py",  # a classic queue's host: each publish and its meta
    "warren/runtime/queues/clock.py",  # the time each publish's meta carries
    "warren/runtime/queues/effects.py",  # a queue's effects: each delivery
    "warren/runtime/queues/paging.py",  # whether an arrival leaves memory: each durable publish
    "warren/storage/journal.py",  # the durable queues' ledger of live records
    "warren/storage/log.py",  # the log's append: a record's CRC and header
    "warren/storage/messages.py",  # an `Enqueued` record's encoding
]


def ext_modules() -> list[object]:
    if os.environ.get("WARREN_MYPYC") != "1":
        return []
    try:
        from mypyc.build import mypycify  # the compiled build's only import of mypy
    except ImportError as exc:
        raise SystemExit(
            "WARREN_MYPYC=1 needs mypy in the build environment: `make wheel`, or pip with "
            "--no-build-isolation in an environment with mypy and setuptools 77+"
        ) from exc

    opt_level = os.environ.get("MYPYC_OPT_LEVEL", "3")
    debug_level = os.environ.get("MYPYC_DEBUG_LEVEL", "1")
    return list(mypycify(COMPILED, opt_level=opt_level, debug_level=debug_level))


setup(ext_modules=ext_modules())
