"""The local filesystem store: `os` calls, no fsspec."""

from __future__ import annotations

import errno
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

from ..errors import UnsupportedStoreError
from ..protocol.filenames import FileInfo
from .base import LevelEntry, local_path


class LocalLogStore:
    """The local filesystem, through `os` calls.

    Writes go to a unique hidden temp file beside the target first (a crash leaves at most that, which readers
    ignore): `put_if_absent` hard-links it into place (`os.link` refuses an existing name atomically, never a
    check-then-rename), `put` renames it over the target.
    """

    atomic_put_if_absent = True
    #: `move` is one `renameat2(RENAME_NOREPLACE)` on Linux: never over another file, atomically.
    move_method = "rename"

    def list_from(self, directory: str, start: str = "") -> list[FileInfo]:
        entries = _scan(local_path(directory), start, follow_symlinks=True)
        return sorted((_info(e.path, st) for e, st in entries if st is not None), key=lambda f: f.name)

    def read_bytes(self, path: str) -> bytes:
        with open(local_path(path), "rb") as fh:
            return fh.read()

    def open(self, path: str) -> BinaryIO:
        return open(local_path(path), "rb")

    def head(self, path: str) -> FileInfo | None:
        p = local_path(path)
        try:
            return _info(p, os.stat(p))
        except FileNotFoundError:
            return None

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(local_path(path))

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(local_path(base), *parts)

    def _temp(self, target: str, data: bytes) -> str:
        directory, name = os.path.split(target)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        _write_exclusive(tmp, data)
        return tmp

    def put_if_absent(self, path: str, data: bytes) -> None:
        target = local_path(path)
        tmp = self._temp(target, data)
        try:
            os.link(tmp, target)
        except OSError as exc:  # FileExistsError (EEXIST) is raised as it is
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise UnsupportedStoreError(
                    f"This filesystem cannot hard-link, so it cannot create {target} atomically "
                    f"(put-if-absent): {exc.strerror}"
                ) from None
            raise
        finally:
            os.unlink(tmp)
        _fsync_dir(os.path.dirname(target))

    def write_new(self, path: str, data: bytes) -> None:
        target = local_path(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        _write_exclusive(target, data)

    def put(self, path: str, data: bytes) -> None:
        target = local_path(path)
        tmp = self._temp(target, data)
        try:
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
        _fsync_dir(os.path.dirname(target))

    def delete_many(self, paths: Sequence[str]) -> int:
        for path in paths:
            try:
                os.unlink(local_path(path))
            except FileNotFoundError:
                pass
        return len(paths)

    def move(self, src: str, dst: str) -> None:
        """Rename `src` to `dst`, keeping the mtime. Where the kernel, C library or filesystem lacks
        `RENAME_NOREPLACE`: a check that `dst` is free, then `os.rename` (a file created at `dst` in between
        would be replaced)."""
        source, target = local_path(src), local_path(dst)
        if not os.path.lexists(source):  # before any directory is made for it
            raise FileNotFoundError(errno.ENOENT, "No such file", source)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if _rename_noreplace(source, target):
            return
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "File exists", target)
        os.rename(source, target)

    def list_recursive(self, directory: str) -> Iterator[FileInfo]:
        stack = [local_path(directory)]
        while stack:
            for entry, st in _scan(stack.pop()):
                if st is None:
                    stack.append(entry.path)
                else:
                    yield _info(entry.path, st)

    def list_level(self, directory: str) -> Iterator[LevelEntry]:
        for entry, st in _scan(local_path(directory)):
            if st is None:
                yield LevelEntry(entry.name, 0, 0, True)
            else:
                yield LevelEntry(entry.name, st.st_size, st.st_mtime_ns // 1_000_000, False)


def _info(path: str, st: os.stat_result) -> FileInfo:
    return FileInfo(path, st.st_size, st.st_mtime_ns // 1_000_000)


def _scan(
    base: str, start: str = "", *, follow_symlinks: bool = False
) -> Iterator[tuple[os.DirEntry[str], os.stat_result | None]]:
    """The entries directly in `base` named `>= start` (nothing when it is missing or not a directory):
    subdirectories with None, regular files with their stat; entries removed meanwhile are skipped."""
    try:
        entries = os.scandir(base)
    except (FileNotFoundError, NotADirectoryError):
        return
    with entries:
        for entry in entries:
            if entry.name < start:
                continue
            try:
                if entry.is_dir(follow_symlinks=follow_symlinks):
                    yield entry, None
                elif entry.is_file(follow_symlinks=follow_symlinks):
                    yield entry, entry.stat(follow_symlinks=follow_symlinks)
            except FileNotFoundError:
                continue


_RENAME_NOREPLACE = 1
_AT_FDCWD = -100
_renameat2: Any = None  # the C library's renameat2, once looked up (False: not there)


def _rename_noreplace(source: str, target: str) -> bool:
    """`renameat2(..., RENAME_NOREPLACE)`: True when renamed, False when the platform, C library or filesystem
    lacks it; `FileExistsError`, `FileNotFoundError` or another `OSError` for a failure."""
    global _renameat2
    if _renameat2 is None:
        _renameat2 = False
        if sys.platform.startswith("linux"):
            import ctypes  # only on a move: a local read never loads it

            fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
            if fn is not None:
                fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
                fn.restype = ctypes.c_int
                _renameat2 = fn
    if _renameat2 is False:
        return False
    import ctypes

    if _renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):  # the filesystem cannot
        return False
    raise OSError(code, os.strerror(code), source, None, target)


def _write_exclusive(path: str, data: bytes) -> None:
    """Write a new file, durably; never over another file (`FileExistsError`)."""
    with open(path, "xb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(directory: str) -> None:
    """Make a new directory entry durable (a power loss must not lose a reported commit)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the entry is still atomic
    finally:
        os.close(fd)
