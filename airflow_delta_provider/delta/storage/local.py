"""The local filesystem store: `os` calls, no fsspec."""

from __future__ import annotations

import os
from typing import BinaryIO

from ..protocol.filenames import FileInfo
from .base import local_path


class LocalLogStore:
    """The local filesystem, through `os` calls."""

    def list_from(self, directory: str, start: str = "") -> list[FileInfo]:
        base = local_path(directory)
        out: list[FileInfo] = []
        try:
            entries = os.scandir(base)
        except (FileNotFoundError, NotADirectoryError):
            return []
        with entries:
            for entry in entries:
                if entry.name < start:
                    continue
                try:
                    if not entry.is_file():
                        continue
                    st = entry.stat()
                except FileNotFoundError:  # removed between listing and stat
                    continue
                out.append(FileInfo(os.path.join(base, entry.name), st.st_size, st.st_mtime_ns // 1_000_000))
        out.sort(key=lambda f: f.name)
        return out

    def read_bytes(self, path: str) -> bytes:
        with open(local_path(path), "rb") as fh:
            return fh.read()

    def open(self, path: str) -> BinaryIO:
        return open(local_path(path), "rb")

    def head(self, path: str) -> FileInfo | None:
        p = local_path(path)
        try:
            st = os.stat(p)
        except FileNotFoundError:
            return None
        return FileInfo(p, st.st_size, st.st_mtime_ns // 1_000_000)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(local_path(path))

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(local_path(base), *parts)
