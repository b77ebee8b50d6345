"""Scratch files for message bodies paged out of memory under memory pressure.

Theory of operation:
1. What goes here is never durable: transient messages, and messages of non-durable
   queues, that the broker moves out of memory while the node is short of it. Nothing is
   synced and nothing survives a restart: `PageStore.open` empties the directory.
2. Pages are appended to files ``00000001.page`` … of at most `file_max_bytes` (a page
   larger than that gets a file of its own). `write` returns a `PageRef` (file, offset,
   length); `read` is one ``pread``.
3. Space: every file counts its live pages. `free` takes one off; a file with none left is
   deleted at once unless it is the one being written, which is instead reused from its
   start. So space follows what is paged out now, not what ever was.

Threads: none; the caller's event loop thread does everything (writes go to the page
cache, and a read of a page just written is a memory copy).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["FILE_MAX_BYTES_DEFAULT", "PageRef", "PageStore"]

FILE_MAX_BYTES_DEFAULT: Final = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PageRef:
    file_id: int
    offset: int
    length: int


class _File:
    __slots__ = ("fd", "file_id", "live", "size_bytes")

    def __init__(self, file_id: int, fd: int) -> None:
        self.file_id = file_id
        self.fd = fd
        self.live = 0
        self.size_bytes = 0


class PageStore:
    """See the module docstring. Create with `PageStore.open`."""

    def __init__(self, directory: Path, file_max_bytes: int) -> None:
        self._directory = directory
        self._file_max_bytes = file_max_bytes
        self._files: dict[int, _File] = {}
        self._next_id = 1
        self._active: _File | None = None

    @classmethod
    def open(
        cls, directory: str | os.PathLike[str], file_max_bytes: int = FILE_MAX_BYTES_DEFAULT
    ) -> PageStore:
        path = Path(directory)
        shutil.rmtree(path, ignore_errors=True)  # pages of an earlier run mean nothing
        path.mkdir(parents=True)
        return cls(path, file_max_bytes)

    @property
    def live_pages(self) -> int:
        return sum(file.live for file in self._files.values())

    @property
    def files(self) -> int:
        return len(self._files)

    def write(self, data: bytes) -> PageRef:
        active = self._active
        if active is None or (
            active.size_bytes and active.size_bytes + len(data) > self._file_max_bytes
        ):
            active = self._new_file()
        offset = active.size_bytes
        written = 0
        view = memoryview(data)
        while written < len(data):  # a short write to a regular file is rare; finish it
            count = os.pwrite(active.fd, view[written:], offset + written)
            if count <= 0:
                raise OSError("pwrite wrote nothing to a page file")
            written += count
        active.size_bytes += len(data)
        active.live += 1
        return PageRef(active.file_id, offset, len(data))

    def read(self, ref: PageRef) -> bytes:
        data = os.pread(self._files[ref.file_id].fd, ref.length, ref.offset)
        if len(data) != ref.length:
            raise OSError(f"page file {ref.file_id} is short at {ref.offset}")
        return data

    def free(self, ref: PageRef) -> None:
        file = self._files[ref.file_id]
        file.live -= 1
        if file.live:
            return
        if file is self._active:
            file.size_bytes = 0  # write over it from the start
            os.ftruncate(file.fd, 0)
            return
        del self._files[file.file_id]
        os.close(file.fd)
        os.unlink(self._path(file.file_id))

    def close(self) -> None:
        for file in self._files.values():
            os.close(file.fd)
        self._files.clear()
        self._active = None
        shutil.rmtree(self._directory, ignore_errors=True)

    def _new_file(self) -> _File:
        file_id = self._next_id
        self._next_id += 1
        fd = os.open(self._path(file_id), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        file = self._files[file_id] = _File(file_id, fd)
        previous = self._active
        self._active = file
        if previous is not None and not previous.live:
            del self._files[previous.file_id]
            os.close(previous.fd)
            os.unlink(self._path(previous.file_id))
        return file

    def _path(self, file_id: int) -> Path:
        return self._directory / f"{file_id:08d}.page"
