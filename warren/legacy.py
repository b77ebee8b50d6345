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
4. Those releases were pure Python; the release build compiles some of the classes they
   pickled with mypyc (setup.py's `COMPILED`), and a mypyc native class differs in three
   ways that pickle's defaults do not survive. Its `__new__` runs its `__init__`, so
   pickle's ``cls.__new__(cls)`` (NEWOBJ) fails where `__init__` wants arguments (a quorum
   queue's `_Sender`s, `_Consumer`s). The `__setstate__` mypyc gives a class that writes
   none takes only a dict, and silently sets nothing from what a pure class pickled (the
   (dict, slots) pair of a slotted object, the field list of a frozen slotted dataclass).
   And its compiled methods read and replace the attributes `__init__` sets without
   checking them (a NULL one crashes the process). So the unpickler is pickle's Python
   one with NEWOBJ and BUILD handled for native classes: NEWOBJ runs `__new__` as pickle
   does, and only where `__init__` wants arguments makes the object as compiled code's
   ``object.__new__(cls)`` does (mypyc's setup function: no attribute set); BUILD applies
   the state as the pure class would have, unless the class writes its own `__setstate__`,
   and such a bare object takes only its own attributes (no property's setter). The object
   exists from NEWOBJ on, so the memo holds it as pickle does; a record whose native
   objects lack an attribute at the end is refused. A pure class (the whole pure install)
   goes through pickle's own opcodes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import io
import pickle
from collections.abc import Callable
from typing import Any, ClassVar, Final

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


# mypyc's setup function of a native class: the first of its C methods, called with the
# class (as mypyc's runtime finds it for `object.__new__(cls)`, CPy_SetupObject)
_MYPYC_SETUP: Final = "__internal_mypyc_setup"
_PY_TP_METHODS: Final = 64  # Include/typeslots.h
_type_slot = ctypes.pythonapi.PyType_GetSlot
_type_slot.argtypes = (ctypes.py_object, ctypes.c_int)
_type_slot.restype = ctypes.c_void_p
_Setup = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)


class _MethodDef(ctypes.Structure):  # PyMethodDef
    _fields_ = (
        ("name", ctypes.c_char_p),
        ("function", ctypes.c_void_p),
        ("flags", ctypes.c_int),
        ("doc", ctypes.c_char_p),
    )


class LegacyDataError(ValueError):
    """Bytes that are neither the current format nor a pickle an earlier release wrote."""


def _is_native(cls: type) -> bool:
    """Whether `cls` is a mypyc native class (point 4)."""
    return _MYPYC_SETUP in vars(cls)


def _bare(cls: type) -> object:
    """An object of native class `cls` with no attribute set and its `__init__` not run."""
    method = _MethodDef.from_address(_type_slot(cls, _PY_TP_METHODS))
    if method.name != _MYPYC_SETUP.encode():
        raise LegacyDataError(f"cannot make a {cls.__qualname__} without its __init__")
    return _Setup(method.function)(cls)


def _writes_own_setstate(cls: type) -> bool:
    """Whether a native class's `__setstate__` is its source's: mypyc's default has no
    signature."""
    return getattr(vars(cls).get("__setstate__"), "__text_signature__", None) is not None


def _attributes(instance: object, state: object) -> dict[str, object]:
    """`state` as a pure class without `__setstate__` of its own takes it (point 4)."""
    if isinstance(state, list):  # a frozen slotted dataclass's own __getstate__: its fields
        names = [field.name for field in dataclasses.fields(instance)]  # type: ignore[arg-type]
        return dict(zip(names, state, strict=False))
    if isinstance(state, tuple):  # a slotted object: (its __dict__ or None, its slots)
        attributes: dict[str, object] = {}
        for part in state:
            attributes.update(part or {})
        return attributes
    if isinstance(state, dict):  # an object's __dict__
        return state
    raise LegacyDataError(f"unreadable state of a {type(instance).__qualname__}")


def _native_attributes(cls: type) -> frozenset[str]:
    return frozenset(getattr(cls, "__mypyc_attrs__", ())) - {"__dict__"}


class _Unpickler(pickle._Unpickler):  # the Python one: its opcodes can be replaced
    stack: list[Any]
    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = dict(pickle._Unpickler.dispatch)

    def __init__(self, data: bytes | memoryview) -> None:
        super().__init__(io.BytesIO(data))
        self.native: list[object] = []  # native objects made by NEWOBJ
        self.bare: set[int] = set()  # the ids of those made without `__init__`

    def find_class(self, module: str, name: str) -> object:
        module, name = _MOVED.get((module, name), (module, name))
        if (module, name) in _STANDARD or module == "warren" or module.startswith("warren."):
            return super().find_class(module, name)
        raise LegacyDataError(f"legacy data refers to {module}.{name}, which Warren never wrote")

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        native = isinstance(cls, type) and _is_native(cls)
        try:
            instance = cls.__new__(cls, *args)
        except TypeError:  # a native class's __init__ wants arguments
            if args or not native:
                raise
            instance = _bare(cls)
            self.bare.add(id(instance))
        if native:
            self.native.append(instance)
        self.stack.append(instance)

    def load_build(self) -> None:
        instance = self.stack[-2]  # under the state
        cls = type(instance)
        if not _is_native(cls) or _writes_own_setstate(cls):
            super().load_build()  # type: ignore[misc]
            return
        attributes = _attributes(instance, self.stack.pop())
        unknown = set(attributes) - _native_attributes(cls)  # a property's, say
        if unknown and id(instance) in self.bare:
            raise LegacyDataError(f"a {cls.__qualname__} pickled with {sorted(unknown)}")
        for name, value in attributes.items():
            object.__setattr__(instance, name, value)

    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.BUILD[0]] = load_build

    def load_checked(self) -> object:
        """The record, each native object in it with every attribute: compiled methods
        read them without checking."""
        loaded = self.load()
        for instance in self.native:
            cls = type(instance)
            unset = sorted(name for name in _native_attributes(cls) if not hasattr(instance, name))
            if unset:
                raise LegacyDataError(f"a {cls.__qualname__} pickled without {unset}")
        return loaded


def loads(data: bytes | memoryview) -> object:
    """One record an earlier release pickled, as today's objects."""
    try:
        return _Unpickler(data).load_checked()
    except LegacyDataError:
        raise
    except Exception as error:  # a truncated or foreign record: say which, lose nothing else
        raise LegacyDataError(f"unreadable legacy record: {error}") from error


def is_pickle(data: bytes | memoryview) -> bool:
    """Whether a record opens as a pickle of protocol 2 or later (PROTO opcode 0x80)."""
    return len(data) > 1 and data[0] == 0x80
