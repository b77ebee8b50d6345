"""Reading what earlier releases wrote as Python pickles, once, during an upgrade.

Theory of operation:
1. Up to Warren 0.3 the replicated path stored and sent pickles of our own classes: Raft
   entries of quorum queues and of the metadata group, queue machine snapshots, metadata
   snapshots. The current format is explicit and versioned (each writer's module says
   how); a reader that meets a record in none of its versions hands the bytes to
   `loads` here, and the data is written again in the current format from then on.
2. This is the only module that imports `pickle`. A pickle can name any importable
   callable, so the unpickler resolves only what those releases wrote: Warren's own
   classes, and the few standard-library types they were built from. Anything else is
   refused with `LegacyDataError` rather than imported.
3. A class a release pickled and that has since moved or been renamed is mapped to its
   new home in `_MOVED` (old module and name to new), so renaming code does not strand
   data written before.
"""

from __future__ import annotations

import io
import pickle
from typing import Final

# standard-library names the pickles of earlier releases refer to
_STANDARD: Final = frozenset(
    {
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "bytearray"),
        ("builtins", "complex"),
        ("builtins", "slice"),
        ("array", "array"),
        ("array", "_array_reconstructor"),
        ("collections", "deque"),
        ("collections", "OrderedDict"),
        ("copyreg", "_reconstructor"),
        ("copyreg", "__newobj__"),
        ("builtins", "object"),
        ("decimal", "Decimal"),
        ("datetime", "datetime"),
    }
)
# (old module, old name) -> (module, name) for classes moved since they were pickled
_MOVED: Final[dict[tuple[str, str], tuple[str, str]]] = {}


class LegacyDataError(ValueError):
    """Bytes that are neither the current format nor a pickle an earlier release wrote."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        module, name = _MOVED.get((module, name), (module, name))
        if (module, name) in _STANDARD or module == "warren" or module.startswith("warren."):
            return super().find_class(module, name)
        raise LegacyDataError(f"legacy data refers to {module}.{name}, which Warren never wrote")


def loads(data: bytes | memoryview) -> object:
    """One record an earlier release pickled, as today's objects."""
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except LegacyDataError:
        raise
    except Exception as error:  # a truncated or foreign record: say which, lose nothing else
        raise LegacyDataError(f"unreadable legacy record: {error}") from error


def is_pickle(data: bytes | memoryview) -> bool:
    """Whether a record opens as a pickle of protocol 2 or later (PROTO opcode 0x80)."""
    return len(data) > 1 and data[0] == 0x80
