"""Fixtures shared by the storage tests."""

from __future__ import annotations

import os

import pytest

from warren.storage import log as log_module


@pytest.fixture
def preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the ``pread`` calls the log makes from here on, in order."""
    sizes: list[int] = []
    real_pread = os.pread

    def counted_pread(fd: int, size: int, offset: int) -> bytes:
        sizes.append(size)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(log_module.os, "pread", counted_pread)
    return sizes
