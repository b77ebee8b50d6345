"""The opt-in mypyc build of the pure cores (issue 19); pyproject.toml holds everything else.

Theory of operation:
1. Without ``WARREN_MYPYC=1`` this adds nothing: the package is plain Python, as every
   default install (`make run`, `make test`, CI) has it, and needs no compiler.
2. With ``WARREN_MYPYC=1`` the modules `COMPILED` lists are compiled by mypyc into C
   extensions: `make mypyc` builds them in place (``setup.py build_ext --inplace``, next
   to their sources, which Python then imports in their place) and
   ``WARREN_MYPYC=1 pip install --no-build-isolation .`` into an environment (mypyc's own
   advice for setuptools: ``mypycify`` in setup.py; without build isolation, because the
   compiler is mypy itself, which the default build must not need). Both need gcc, the
   Python headers, mypy and setuptools 77 or newer.
3. `COMPILED` is every module of the pure cores (`warren.errors`, `amqp`, `model`, `queue`,
   `raft`, `cluster`) but those `KEPT_PYTHON` lists, which stay Python (the compiled
   modules call them as Python): the method table (`amqp/methods.py`, whose classes the
   `@method` decorator makes) and `raft/log.py` (`SafetyError` subclasses
   `AssertionError`), which mypyc cannot make native classes of; and the modules whose
   classes msgspec decodes by their field types (the replicated path's encodings, and
   `QueueSettings` inside them), because compiled classes carry approximations of their
   annotations at run time (``int | None`` becomes ``type``). docs/performance.md has
   what compiling gains.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

CORES = ("errors", "amqp", "model", "queue", "raft", "cluster")
KEPT_PYTHON = {
    "warren/amqp/methods.py",
    "warren/raft/log.py",
    "warren/cluster/metadata.py",
    "warren/cluster/queue_entries.py",
    "warren/cluster/raft_codec.py",
    "warren/queue/snapshot.py",
    "warren/model/settings.py",
}
COMPILED = sorted(
    path.as_posix()
    for core in CORES
    for path in Path("warren", core).glob("*.py")
    if path.as_posix() not in KEPT_PYTHON
)


def ext_modules() -> list[object]:
    if os.environ.get("WARREN_MYPYC") != "1":
        return []
    from mypyc.build import mypycify  # the opt-in build's only import of mypy

    return list(mypycify(COMPILED, opt_level="3"))


setup(ext_modules=ext_modules())
